# Strata's make targets. CI runs `make test` (see .ci/run).
#
#   make demo    build strata, mount a demo sandbox, write, checkpoint, roll back, unmount
#   make build   compile everything
#   make test    all tests, then the race detector on the concurrent packages
#   make lint    gofmt, go vet, staticcheck
#   make cover   coverage per core package
#   make bench   side-by-side benchmarks (root; minutes) into docs/bench.md, then bench-checkpoint
#   make bench-checkpoint  checkpoint/rollback vs git, cp -a, btrfs (root; ~5 min) into docs/bench-checkpoint.md
#   make stress  the long reliability runs (root, /dev/fuse; see docs/reliability.md)

GO ?= go
# Tools installed with `go install` (staticcheck) live here.
export PATH := $(or $(shell $(GO) env GOBIN),$(shell $(GO) env GOPATH)/bin):$(PATH)

# Packages with goroutines around FUSE and the store (checkpoints and
# corrections run against live mounts): run again under -race.
RACE_PKGS = ./layers/... ./fs/... ./checkpoint/... ./correction/... ./cmd/internal/control/...
# Packages whose coverage `make cover` reports; absent ones are noted.
COVER_PKGS = layers checkpoint correction

.PHONY: build test lint cover bench bench-checkpoint demo stress

build:
	$(GO) build ./...

# -p 1: the tests mount real FUSE filesystems; packages tested in parallel
#       would compete for the 2 cores of our machines (and for /dev/fuse),
#       and timing-sensitive mount tests would flake.
# -count=1: never reuse cached results; they depend on the kernel, not only
#       on the code.
test:
	$(GO) test -count=1 -p 1 ./...
	$(GO) test -race -count=1 -p 1 $(RACE_PKGS)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l (run gofmt -w):"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	staticcheck ./...

cover:
	@mkdir -p coverage
	@status=0; for p in $(COVER_PKGS); do \
		if ls $$p/*.go >/dev/null 2>&1; then \
			$(GO) test -count=1 -p 1 -coverprofile=coverage/$$p.out ./$$p || status=1; \
		else \
			echo "$$p: no package yet"; \
		fi; \
	done; exit $$status

# Needs root (overlayfs, drop_caches) and takes a while at full size; add
# ARGS='-quick' for a smoke run, or e.g. ARGS='-workloads small-files'.
bench:
	$(GO) build -o bin/strata ./cmd/strata
	@mkdir -p docs
	$(GO) run ./cmd/strata-bench -strata ./bin/strata -out docs/bench.md $(ARGS)
	$(MAKE) bench-checkpoint

# Checkpoint and rollback through the Go API and the CLI, side by side with
# git, cp -a and btrfs snapshots (root; btrfs-progs and rsync where present).
# CKPT_ARGS='-quick' for a smoke run; see docs/bench-checkpoint.md.
bench-checkpoint:
	$(GO) build -o bin/strata ./cmd/strata
	@mkdir -p docs
	$(GO) run ./cmd/strata-bench -suite checkpoint -strata ./bin/strata -out docs/bench-checkpoint.md $(CKPT_ARGS)

# The long variants of the tests `make test` runs short (docs/reliability.md
# has what each checks and the figures): a million random operations
# against the model, then hundreds of kill -9s of the serving process.
# The checkpoint package's older crash test never prunes, so each kill
# verifies more checkpoints than the last: it gets fewer kills.
# -v: the runs log their progress and figures.
STRESS_OPS ?= 1000000
STRESS_KILLS ?= 300
STRESS_KILLS_NOPRUNE ?= 100
stress:
	STRATA_STRESS_OPS=$(STRESS_OPS) $(GO) test -count=1 -p 1 -timeout 120m -v -run '^TestStressRandomOpsCheckpointsRollbacks$$' ./checkpoint
	STRATA_CRASH_KILLS=$(STRESS_KILLS) $(GO) test -count=1 -p 1 -timeout 120m -v -run '^TestCrashKill' ./cmd/strata
	STRATA_CRASH_KILLS=$(STRESS_KILLS_NOPRUNE) $(GO) test -count=1 -p 1 -timeout 120m -v -run '^TestCrashDuringCheckpointAndRollback$$' ./checkpoint

# A throwaway store, base and mountpoint under one temporary directory,
# removed at the end even if a step fails (the trap also unmounts).
demo:
	$(GO) build -o bin/strata ./cmd/strata
	@set -e; d=$$(mktemp -d); s="./bin/strata --store $$d/store"; \
	trap "$$s unmount demo >/dev/null 2>&1 || true; rm -rf $$d" EXIT; \
	mkdir -p $$d/base/src $$d/mnt; \
	for i in 1 2 3; do echo "file $$i" > $$d/base/src/f$$i.txt; done; \
	echo "hello from the base" > $$d/base/README; \
	set -x; \
	$$s sandbox create demo --base $$d/base; \
	$$s mount demo $$d/mnt; \
	echo "written in the sandbox" > $$d/mnt/new.txt; \
	$$s checkpoint create demo --label before; \
	echo "changed in the sandbox" >> $$d/mnt/README; \
	rm $$d/mnt/src/f2.txt $$d/mnt/new.txt; \
	cat $$d/mnt/README; \
	ls $$d/mnt $$d/mnt/src; \
	$$s checkpoint diff before; \
	$$s rollback demo --to-checkpoint before; \
	cat $$d/mnt/README $$d/mnt/new.txt; \
	ls $$d/mnt $$d/mnt/src; \
	$$s archive list demo; \
	$$s checkpoint list demo; \
	$$s status; \
	$$s unmount demo; \
	cat $$d/base/README; \
	$$s sandbox list
