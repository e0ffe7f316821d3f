package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

// This file runs every command of the CLI with bad input: arguments
// missing, extra or empty, unknown flags, flags without their value,
// names and ids that match nothing or more than one thing, and values that
// do not parse or that the store refuses. badinput_test.go and
// checkpoint_badinput_test.go check the exact message and hint of chosen
// mistakes; this table is broad instead: most of its cases are generated
// from the commands' shapes, and each must keep the error contract.
//
// The contract, as decided for bad usage too:
//   - stderr is one line `strata: <what failed>: <why>`, and at most one
//     more, `hint: ...` (for bad usage: "run `strata X --help`");
//   - exit 2 for bad usage — an unknown command or flag, an argument or
//     required flag missing, extra or empty, a flag value that does not
//     parse (not a number, not a size, not a duration, negative);
//     exit 1 for input that parses but names nothing, names more than one
//     thing, or that the store refuses (a bad sandbox name, a block size
//     that is not a power of two, a milestone it does not know);
//   - nothing on stdout;
//   - nothing changed: sandboxes, checkpoints, archives, layers, plans,
//     the base directory, the files of a live mount, the test's directory.

// badCase is one bad command line and what it must do.
type badCase struct {
	name     string
	args     []string
	wantCode int
	wantErr  string // in the first line of stderr
	unserved bool   // run unserved in the short variant too
}

// argKind says what a positional argument or flag value names, so that
// bad values of its kind can be generated.
type argKind int

const (
	kindOther      argKind = iota
	kindSandbox            // an existing sandbox
	kindNewName            // a name to create
	kindCheckpoint         // id, prefix or label
	kindArchive            // id or prefix
	kindLayer              // id or prefix
	kindPlan               // id, prefix or name
	kindDecision           // a plan's decision
	kindPath               // a directory
)

// argSpec is one positional argument or required flag of a command, with
// a good value.
type argSpec struct {
	flag string // "" for a positional argument
	kind argKind
	val  string
}

// cmdSpec is the shape of one command: its path and its arguments, each
// good where it stands, so that a case that breaks one of them fails
// because of that one.
type cmdSpec struct {
	path     []string
	args     []argSpec
	optional int // how many of the last positionals may be left out
	// notFound is what the error says when a name or id of a kind matches
	// nothing, where that is not "not found".
	notFound map[argKind]string
}

// badInputIDs are the ids and prefixes the cases use.
type badInputIDs struct {
	archive, layer                     string
	ambCheckpoint, ambArchive, ambPlan string
	ambLayer                           string
	otherPlanCheckpoint                string
}

// unknownULID has the shape of an id and names nothing.
const unknownULID = "01ZZZZZZZZZZZZZZZZZZZZZZZZ"

func TestBadInputTable(t *testing.T) {
	full := os.Getenv("STRATA_TEST_FULL") != ""
	e := newEnv(t)
	ids := badInputSetup(t, e)
	// The commands run in an empty directory of their own: an argument
	// read as "the working directory" must not reach the source tree, and
	// anything made there shows.
	e.cwd = filepath.Join(e.dir, "cwd")
	if err := os.Mkdir(e.cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, served := range []bool{true, false} {
		name := "unserved"
		if served {
			name = "served"
		} else {
			e.ok("unmount", "demo")
		}
		t.Run(name, func(t *testing.T) { total += runBadInputTable(t, e, ids, served, full) })
	}
	t.Logf("bad-input table: %d command lines tried, served and unserved (all of them unserved too with STRATA_TEST_FULL=1: %v)", total, full)
}

// runBadInputTable runs the cases against the store as it is — served by
// the server of demo's mount, or not served — and returns how many it ran.
// Unserved, the short variant runs only the cases written out that reach
// the store: the handlers are the same, and bad usage never gets that far.
func runBadInputTable(t *testing.T, e *env, ids badInputIDs, served, full bool) int {
	cases := badInputCases(e, ids, served)
	cliBefore := e.cliState()
	before := e.state()
	base := treeDigest(t, e.base)
	top := dirNames(t, e.dir)
	var files string
	if served {
		files = treeDigest(t, e.mnt)
	}
	ran := 0
	for _, tc := range cases {
		if !served && !full && !tc.unserved {
			continue
		}
		ran++
		t.Run(tc.name, func(t *testing.T) {
			r := e.run(tc.args...)
			checkBadResult(t, r, tc.wantCode, tc.wantErr)
			// Unserved, reading the lists opens the store: in the short
			// variant once, after the last case, is enough.
			if served || full {
				if got := e.state(); got != before {
					t.Errorf("store changed:\ngot  %s\nwant %s", got, before)
				}
			}
			if got := treeDigest(t, e.base); got != base {
				t.Errorf("base changed:\ngot  %s\nwant %s", got, base)
			}
			if got := dirNames(t, e.dir); got != top {
				t.Errorf("test directory changed: got %s, want %s", got, top)
			}
			if got := dirNames(t, e.cwd); got != "" {
				t.Errorf("working directory: got %s, want it empty", got)
			}
			if served {
				if got := treeDigest(t, e.mnt); got != files {
					t.Errorf("mount changed:\ngot  %s\nwant %s", got, files)
				}
			}
		})
	}
	if got := e.state(); got != before {
		t.Errorf("store changed:\ngot  %s\nwant %s", got, before)
	}
	// Once more through the CLI's own JSON output, which scripts read.
	if got := e.cliState(); got != cliBefore {
		t.Errorf("store changed (CLI lists):\ngot  %s\nwant %s", got, cliBefore)
	}
	return ran
}

// checkBadResult checks the error contract: the exit code, one line
// `strata: ...` holding wantErr and at most a `hint: ...` line, nothing on
// stdout.
func checkBadResult(t *testing.T, r result, wantCode int, wantErr string) {
	t.Helper()
	if r.code != wantCode {
		t.Errorf("exit code: got %d, want %d (stderr %q)", r.code, wantCode, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) > 2 || !strings.HasPrefix(lines[0], "strata: ") || len(lines) == 2 && !strings.HasPrefix(lines[1], "hint: ") {
		t.Errorf("stderr: got %q, want one line 'strata: ...' and at most a 'hint: ...' line", r.stderr)
	}
	if !strings.Contains(lines[0], wantErr) {
		t.Errorf("error: got %q, want it to contain %q", lines[0], wantErr)
	}
	if r.stdout != "" {
		t.Errorf("stdout: got %q, want nothing", r.stdout)
	}
}

// badInputSetup makes sandboxes demo (mounted) and other, checkpoints
// with a label in both (same), two archives of demo and three plans, and
// returns the ids and ambiguous prefixes the cases use.
func badInputSetup(t *testing.T, e *env) badInputIDs {
	t.Helper()
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("sandbox", "create", "other", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	writeFile(t, filepath.Join(e.mnt, "f.txt"), "one")
	e.checkpoint("demo", "--label", "c1")
	e.checkpoint("demo", "--label", "same")
	writeFile(t, filepath.Join(e.mnt, "f.txt"), "two")
	e.checkpoint("demo", "--label", "c2")
	e.checkpoint("other", "--label", "same")
	e.checkpoint("other", "--label", "o1")
	e.ok("rollback", "demo", "--to-checkpoint", "c1")
	e.ok("rollback", "demo", "--to-checkpoint", "c2")
	// p1 on demo has a done decision (and its pre-decision checkpoint);
	// pa and pb on other have changed nothing, so nothing to apply.
	e.ok("plan", "create", "p1", "--sandbox", "demo")
	e.ok("plan", "step", "begin", "p1", "--decision", "D1")
	e.ok("plan", "step", "end", "p1", "--decision", "D1")
	e.ok("plan", "create", "pa", "--sandbox", "other")
	e.ok("plan", "create", "pb", "--sandbox", "other", "--checkpoint-on", "after-step")
	e.ok("plan", "step", "begin", "pb", "--decision", "B1")
	e.ok("plan", "step", "end", "pb", "--decision", "B1")

	var got badInputIDs
	var ars []checkpoint.Archive
	e.okJSON(&ars, "archive", "list", "demo")
	var ls []checkpoint.LayerReport
	e.okJSON(&ls, "layers", "list", "demo", "--archived")
	var plans []control.PlanReport
	e.okJSON(&plans, "plan", "list")
	var pb control.PlanReport
	e.okJSON(&pb, "plan", "show", "pb")
	if len(ars) != 2 || len(ls) < 3 || len(plans) != 3 || len(pb.Checkpoints) != 1 {
		t.Fatalf("setup: got %d archives, %d layers, %d plans, %d checkpoints of pb; want 2, 3+, 3, 1", len(ars), len(ls), len(plans), len(pb.Checkpoints))
	}
	got.archive, got.layer = ars[0].ID, ls[len(ls)-1].ID
	got.otherPlanCheckpoint = pb.Checkpoints[0].ID
	got.ambCheckpoint = sharedPrefix(t, "checkpoint", ids(e.checkpoints("demo")))
	got.ambArchive = sharedPrefix(t, "archive", []string{ars[0].ID, ars[1].ID})
	var lids, pids []string
	for _, l := range ls {
		lids = append(lids, l.ID)
	}
	for _, p := range plans {
		pids = append(pids, p.ID)
	}
	got.ambLayer = sharedPrefix(t, "layer", lids)
	got.ambPlan = sharedPrefix(t, "plan", pids)

	nonEmpty := filepath.Join(e.dir, "nonempty")
	if err := os.Mkdir(nonEmpty, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(nonEmpty, "x"), "x")
	return got
}

// sharedPrefix returns the longest prefix of 6 or more characters that
// two of ids share. Ids of objects made within minutes of each other share
// their first 6 characters (the top of their time stamp); of any three,
// two were made on the same side of a boundary.
func sharedPrefix(t *testing.T, what string, ids []string) string {
	t.Helper()
	sort.Strings(ids)
	best := ""
	for i := 1; i < len(ids); i++ {
		n := 0
		for n < len(ids[i]) && n < len(ids[i-1]) && ids[i][n] == ids[i-1][n] {
			n++
		}
		if n > len(best) {
			best = ids[i][:n]
		}
	}
	if len(best) < 6 {
		t.Fatalf("no two %s ids of %v share 6 characters", what, ids)
	}
	if len(best) == len(ids[0]) {
		t.Fatalf("two %s ids are equal: %v", what, ids)
	}
	return best
}

// badInputCommands are the shapes of every command, with good arguments.
func badInputCommands(e *env, ids badInputIDs) []cmdSpec {
	pos := func(k argKind, v string) argSpec { return argSpec{kind: k, val: v} }
	flag := func(f string, k argKind, v string) argSpec { return argSpec{flag: f, kind: k, val: v} }
	notMounted := map[argKind]string{kindSandbox: "not mounted"}
	return []cmdSpec{
		{path: []string{"sandbox", "create"}, args: []argSpec{pos(kindNewName, "new1"), flag("base", kindPath, e.base)}},
		{path: []string{"sandbox", "list"}},
		{path: []string{"sandbox", "show"}, args: []argSpec{pos(kindSandbox, "demo")}},
		{path: []string{"sandbox", "rm"}, args: []argSpec{pos(kindSandbox, "other")}},
		{path: []string{"sandbox", "fork"}, args: []argSpec{pos(kindNewName, "new1"), flag("from", kindCheckpoint, "c1")}},
		{path: []string{"mount"}, args: []argSpec{pos(kindSandbox, "other"), pos(kindPath, e.mnt2)}},
		{path: []string{"unmount"}, args: []argSpec{pos(kindSandbox, "demo")}, notFound: notMounted},
		{path: []string{"status"}, args: []argSpec{pos(kindSandbox, "demo")}, optional: 1},
		{path: []string{"checkpoint", "create"}, args: []argSpec{pos(kindSandbox, "demo")}},
		{path: []string{"checkpoint", "list"}, args: []argSpec{pos(kindSandbox, "demo")}},
		{path: []string{"checkpoint", "show"}, args: []argSpec{pos(kindCheckpoint, "c1")}},
		{path: []string{"checkpoint", "diff"}, args: []argSpec{pos(kindCheckpoint, "c1"), pos(kindCheckpoint, "c2")}, optional: 1},
		{path: []string{"checkpoint", "rm"}, args: []argSpec{pos(kindCheckpoint, "c1")}},
		{path: []string{"checkpoint", "prune"}, args: []argSpec{pos(kindSandbox, "demo")}},
		{path: []string{"rollback"}, args: []argSpec{pos(kindSandbox, "demo"), flag("to-checkpoint", kindCheckpoint, "c1")}},
		{path: []string{"verify"}, args: []argSpec{pos(kindCheckpoint, "c1")}},
		{path: []string{"layers", "list"}, args: []argSpec{pos(kindSandbox, "demo")}},
		{path: []string{"layers", "inspect"}, args: []argSpec{pos(kindLayer, ids.layer)}},
		{path: []string{"archive", "list"}, args: []argSpec{pos(kindSandbox, "demo")}},
		{path: []string{"archive", "export"}, args: []argSpec{pos(kindArchive, ids.archive), pos(kindPath, filepath.Join(e.dir, "out"))}},
		{path: []string{"archive", "restore"}, args: []argSpec{pos(kindArchive, ids.archive)}},
		{path: []string{"gc"}, args: []argSpec{pos(kindSandbox, "demo")}, optional: 1},
		{path: []string{"fsck"}},
		{path: []string{"plan", "create"}, args: []argSpec{pos(kindNewName, "pnew"), flag("sandbox", kindSandbox, "demo")}},
		{path: []string{"plan", "list"}},
		{path: []string{"plan", "show"}, args: []argSpec{pos(kindPlan, "p1")}},
		{path: []string{"plan", "step", "begin"}, args: []argSpec{pos(kindPlan, "p1"), flag("decision", kindOther, "D2")}},
		{path: []string{"plan", "step", "end"}, args: []argSpec{pos(kindPlan, "pa"), flag("decision", kindDecision, "D1")},
			notFound: map[argKind]string{kindDecision: "step not begun"}},
		{path: []string{"plan", "complete"}, args: []argSpec{pos(kindPlan, "p1")}},
		{path: []string{"plan", "rollback"}, args: []argSpec{pos(kindPlan, "p1")}},
		{path: []string{"plan", "correct"}, args: []argSpec{pos(kindPlan, "p1"), flag("mode", kindOther, "append"), flag("reason", kindOther, "r")}},
		{path: []string{"plan", "apply"}, args: []argSpec{pos(kindPlan, "pa")}},
	}
}

// line is a command line: the command's path, then args.
func (c cmdSpec) line(args []argSpec) []string {
	out := append([]string{}, c.path...)
	for _, a := range args {
		if a.flag != "" {
			out = append(out, "--"+a.flag+"="+a.val)
		} else {
			out = append(out, a.val)
		}
	}
	return out
}

func (c cmdSpec) positionals() int {
	n := 0
	for _, a := range c.args {
		if a.flag == "" {
			n++
		}
	}
	return n
}

// generated are the cases every command gets from its shape.
func (c cmdSpec) generated(ids badInputIDs) []badCase {
	name := strings.Join(c.path, " ")
	var out []badCase
	add := func(what string, args []string, code int, msg string) {
		out = append(out, badCase{name: name + ": " + what, args: args, wantCode: code, wantErr: msg})
	}
	add("extra argument", append(c.line(c.args), "extra"), 2, `unexpected argument "extra"`)
	add("unknown flag", append(c.line(c.args), "--no-such-flag"), 2, "unknown flag: --no-such-flag")
	add("unknown shorthand flag", append(c.line(c.args), "-Z"), 2, "unknown shorthand flag: 'Z'")
	required := c.positionals() - c.optional
	for i, a := range c.args {
		rest := make([]argSpec, 0, len(c.args))
		rest = append(rest, c.args[:i]...)
		rest = append(rest, c.args[i+1:]...)
		if a.flag != "" {
			add("missing --"+a.flag, c.line(rest), 2, "missing --"+a.flag)
			add("empty --"+a.flag, c.line(with(c.args, i, "")), 2, "missing --"+a.flag)
			add("--"+a.flag+" without a value", append(c.line(rest), "--"+a.flag), 2, "flag needs an argument")
		} else {
			if i < required {
				// Leave this one and every later positional out.
				kept := append([]argSpec{}, c.args[:i]...)
				for _, b := range c.args[i:] {
					if b.flag != "" {
						kept = append(kept, b)
					}
				}
				add("missing argument "+strconv.Itoa(i+1), c.line(kept), 2, "missing ")
			}
			add("empty argument "+strconv.Itoa(i+1), c.line(with(c.args, i, "")), 2, "empty argument")
		}
		nf := "not found"
		if m, ok := c.notFound[a.kind]; ok {
			nf = m
		}
		switch a.kind {
		case kindSandbox, kindPlan, kindDecision:
			add(argName(a, i)+" unknown", c.line(with(c.args, i, "nope")), 1, nf)
		case kindCheckpoint, kindArchive, kindLayer:
			add(argName(a, i)+" unknown", c.line(with(c.args, i, "nope")), 1, nf)
			add(argName(a, i)+" unknown id", c.line(with(c.args, i, unknownULID)), 1, nf)
			add(argName(a, i)+" prefix too short", c.line(with(c.args, i, ids.ambCheckpoint[:5])), 1, nf)
		}
		switch a.kind {
		case kindSandbox, kindNewName:
			add(argName(a, i)+" not a name", c.line(with(c.args, i, "../x")), 1, "")
		}
		amb := map[argKind]string{kindCheckpoint: ids.ambCheckpoint, kindArchive: ids.ambArchive, kindLayer: ids.ambLayer, kindPlan: ids.ambPlan}[a.kind]
		if amb != "" {
			add(argName(a, i)+" ambiguous prefix", c.line(with(c.args, i, amb)), 1, "ambiguous")
		}
	}
	return out
}

func argName(a argSpec, i int) string {
	if a.flag != "" {
		return "--" + a.flag
	}
	return "argument " + strconv.Itoa(i+1)
}

// with is args with the value of args[i] replaced.
func with(args []argSpec, i int, v string) []argSpec {
	out := append([]argSpec{}, args...)
	out[i].val = v
	return out
}

// badInputCases are the generated cases of every command and the ones
// written out: values that do not parse, values the store refuses, and
// the ambiguity of a label two sandboxes share.
func badInputCases(e *env, ids badInputIDs, served bool) []badCase {
	var cases []badCase
	for _, c := range badInputCommands(e, ids) {
		cases = append(cases, c.generated(ids)...)
	}
	nonEmpty := filepath.Join(e.dir, "nonempty")
	aFile := filepath.Join(e.base, "a.txt")
	usage := func(name string, msg string, args ...string) badCase {
		return badCase{name: name, args: args, wantCode: 2, wantErr: msg}
	}
	refused := func(name string, msg string, args ...string) badCase {
		return badCase{name: name, args: args, wantCode: 1, wantErr: msg, unserved: true}
	}
	cases = append(cases,
		// Commands and global flags.
		usage("unknown command", `unknown command "sandboxes"`, "sandboxes"),
		usage("unknown sandbox subcommand", `unknown command "craete"`, "sandbox", "craete"),
		usage("unknown checkpoint subcommand", `unknown command "shwo"`, "checkpoint", "shwo"),
		usage("unknown layers subcommand", `unknown command "lsit"`, "layers", "lsit"),
		usage("unknown archive subcommand", `unknown command "expot"`, "archive", "expot"),
		usage("unknown plan subcommand", `unknown command "aply"`, "plan", "aply"),
		usage("unknown plan step subcommand", `unknown command "start"`, "plan", "step", "start"),
		usage("--json with a value", "invalid argument", "--json=maybe", "sandbox", "list"),
		usage("--store empty", "--store", "--store", "", "sandbox", "list"),
		usage("--store without a value", "flag needs an argument", "sandbox", "list", "--store"),
		refused("--store is a file", "not a directory", "--store", aFile, "sandbox", "list"),

		// sandbox create: names, bases and block sizes.
		refused("create: name with a space", "invalid argument", "sandbox", "create", "a b", "--base", e.base),
		refused("create: name too long", "invalid argument", "sandbox", "create", strings.Repeat("n", 65), "--base", e.base),
		refused("create: existing name", "already exists", "sandbox", "create", "demo", "--base", e.base),
		refused("create: base missing", "does not exist", "sandbox", "create", "x", "--base", filepath.Join(e.dir, "nope")),
		refused("create: base is a file", "not a directory", "sandbox", "create", "x", "--base", aFile),
		refused("create: base is the store", "inside the store", "sandbox", "create", "x", "--base", e.store),
		usage("create: block size a word", "invalid size", "sandbox", "create", "x", "--base", e.base, "--block-size", "huge"),
		usage("create: block size negative", "invalid size", "sandbox", "create", "x", "--base", e.base, "--block-size", "-64K"),
		usage("create: block size too large to count", "invalid size", "sandbox", "create", "x", "--base", e.base, "--block-size", "99999999999G"),
		usage("create: block size empty", "invalid size", "sandbox", "create", "x", "--base", e.base, "--block-size", ""),
		usage("create: block size zero", "--block-size 0", "sandbox", "create", "x", "--base", e.base, "--block-size", "0"),
		refused("create: block size not a power of two", "power of two", "sandbox", "create", "x", "--base", e.base, "--block-size", "1000"),
		refused("create: block size too small", "power of two", "sandbox", "create", "x", "--base", e.base, "--block-size", "1K"),
		refused("create: block size too large", "power of two", "sandbox", "create", "x", "--base", e.base, "--block-size", "1G"),

		// fork, mount, unmount.
		refused("fork: existing name", "already exists", "sandbox", "fork", "other", "--from", "c1"),
		refused("fork: ambiguous label", "ambiguous", "sandbox", "fork", "new1", "--from", "same"),
		refused("mount: mountpoint missing", "does not exist", "mount", "other", filepath.Join(e.dir, "nope")),
		refused("mount: mountpoint a file", "not a directory", "mount", "other", aFile),
		usage("mount: --read-only with a bad value", "invalid argument", "mount", "other", e.mnt2, "--read-only=maybe"),
		refused("unmount: a sandbox not mounted", "not mounted", "unmount", "other"),
		refused("unmount: a path not mounted", "not mounted", "unmount", e.mnt2),
		refused("unmount: a path that does not exist", "not mounted", "unmount", filepath.Join(e.dir, "nope")),

		// checkpoints.
		refused("checkpoint create: label taken", "already exists", "checkpoint", "create", "demo", "--label", "c1"),
		usage("checkpoint create: negative step", "--step -1", "checkpoint", "create", "demo", "--step", "-1"),
		usage("checkpoint create: step a word", "invalid argument", "checkpoint", "create", "demo", "--step", "two"),
		usage("checkpoint create: step too large", "invalid argument", "checkpoint", "create", "demo", "--step", "99999999999999999999"),
		refused("checkpoint show: ambiguous label", "ambiguous", "checkpoint", "show", "same"),
		refused("checkpoint rm: ambiguous label", "ambiguous", "checkpoint", "rm", "same"),
		refused("checkpoint diff: ambiguous label", "ambiguous", "checkpoint", "diff", "same"),
		refused("checkpoint diff: across sandboxes", "another sandbox", "checkpoint", "diff", "c1", "o1"),
		refused("checkpoint diff: in an unknown sandbox", "sandbox nope: not found", "checkpoint", "diff", "same", "--sandbox", "nope"),
		usage("checkpoint diff: empty --sandbox", "--sandbox: empty", "checkpoint", "diff", "same", "--sandbox", ""),
		refused("verify: ambiguous label", "ambiguous", "verify", "same"),
		refused("verify: unknown", "neither a sandbox nor a checkpoint", "verify", "nope"),
		refused("rollback: another sandbox's checkpoint", "another sandbox", "rollback", "demo", "--to-checkpoint", "o1"),
		usage("prune: negative keep-last", "negative", "checkpoint", "prune", "demo", "--keep-last", "-1"),
		usage("prune: keep-last a word", "invalid argument", "checkpoint", "prune", "demo", "--keep-last", "all"),
		usage("prune: negative keep-within", "negative", "checkpoint", "prune", "demo", "--keep-within", "-2h"),
		usage("prune: keep-within a word", "want a duration", "checkpoint", "prune", "demo", "--keep-within", "soon"),
		usage("prune: keep-within bad unit", "want a duration", "checkpoint", "prune", "demo", "--keep-within", "3x"),
		usage("prune: keep-within fractional days", "want a duration", "checkpoint", "prune", "demo", "--keep-within", "1.5d"),
		usage("prune: keep-within too many days", "want a duration", "checkpoint", "prune", "demo", "--keep-within", "99999999d"),
		usage("prune: keep-within overflowing", "want a duration", "checkpoint", "prune", "demo", "--keep-within", "9999999999h"),
		usage("prune: keep-within empty", "want a duration", "checkpoint", "prune", "demo", "--keep-within", ""),

		// archives and layers.
		refused("export: into a non-empty directory", "not empty", "archive", "export", ids.archive, nonEmpty),
		refused("export: below a file", "not a directory", "archive", "export", ids.archive, filepath.Join(aFile, "out")),
		refused("layers inspect: ambiguous prefix of the archived", "ambiguous", "layers", "inspect", ids.ambLayer),

		// plans.
		refused("plan create: name with a space", "invalid argument", "plan", "create", "a b", "--sandbox", "demo"),
		refused("plan create: name taken", "already exists", "plan", "create", "p1", "--sandbox", "demo"),
		refused("plan create: unknown milestone", "milestone", "plan", "create", "x", "--sandbox", "demo", "--checkpoint-on", "sometimes"),
		usage("plan create: --parent without --parent-decision", "go together", "plan", "create", "x", "--sandbox", "demo", "--parent", "p1"),
		refused("plan create: unknown parent", "not found", "plan", "create", "x", "--parent", "nope", "--parent-decision", "D1"),
		refused("plan create: unknown parent decision", "not found", "plan", "create", "x", "--parent", "p1", "--parent-decision", "D9"),
		refused("plan step begin: a done decision", "already exists", "plan", "step", "begin", "p1", "--decision", "D1"),
		refused("plan step end: a done decision", "step not begun", "plan", "step", "end", "p1", "--decision", "D1"),
		refused("plan rollback: unknown checkpoint", "not found", "plan", "rollback", "p1", "--to-checkpoint", "nope"),
		refused("plan rollback: another sandbox's checkpoint", "another sandbox", "plan", "rollback", "p1", "--to-checkpoint", ids.otherPlanCheckpoint),
		refused("plan rollback: a checkpoint of no plan", "not one of the plan's", "plan", "rollback", "p1", "--to-checkpoint", "c1"),
		refused("plan rollback: ambiguous prefix", "ambiguous", "plan", "rollback", "p1", "--to-checkpoint", ids.ambCheckpoint),
		usage("plan correct: no mode", "missing --mode", "plan", "correct", "p1", "--reason", "r"),
		usage("plan correct: unknown mode", `--mode "sideways"`, "plan", "correct", "p1", "--mode", "sideways", "--reason", "r"),
		usage("plan correct: blank reason", "missing --reason", "plan", "correct", "p1", "--mode", "append", "--reason", "  "),
		usage("plan correct: --step with revert", "--step goes with --mode append", "plan", "correct", "p1", "--mode", "revert", "--reason", "r", "--step", "x"),
		usage("plan correct: --decision with append", "--decision goes with --mode revert", "plan", "correct", "p1", "--mode", "append", "--reason", "r", "--decision", "D1"),
		refused("plan correct: revert with no failed decision", "no failed decision", "plan", "correct", "p1", "--mode", "revert", "--reason", "r"),
		refused("plan correct: revert to an unknown decision", "not found", "plan", "correct", "p1", "--mode", "revert", "--reason", "r", "--decision", "D9"),
		refused("plan apply: nothing to apply", "nothing to apply", "plan", "apply", "pb"),
		usage("plan step end: --failed with a value", "invalid argument", "plan", "step", "end", "p1", "--decision", "D1", "--failed=often"),
	)
	if served {
		cases = append(cases,
			refused("mount: a mounted sandbox", "already mounted", "mount", "demo", e.mnt2),
			refused("mount: onto a mount point", "already a mount point", "mount", "other", e.mnt),
			refused("sandbox rm: a mounted sandbox", "is mounted", "sandbox", "rm", "demo"),
		)
	} else {
		cases = append(cases, refused("unmount: demo, not mounted", "not mounted", "unmount", "demo"))
	}
	return cases
}

// cliState is what the CLI's JSON lists say of the store.
func (e *env) cliState() string {
	e.t.Helper()
	var b strings.Builder
	b.WriteString(e.ok("--json", "sandbox", "list"))
	b.WriteString(e.ok("--json", "plan", "list"))
	for _, name := range []string{"demo", "other"} {
		b.WriteString(e.ok("--json", "checkpoint", "list", name))
		b.WriteString(e.ok("--json", "archive", "list", name))
		b.WriteString(e.ok("--json", "layers", "list", name, "--archived"))
	}
	return b.String()
}

// state is what the store's lists say, read in this process — through
// the store's server, or from the store itself when none serves it — with
// the very handlers the CLI's lists run: a few milliseconds, where running
// the CLI for each takes a process and, unserved, a store open each.
func (e *env) state() string {
	e.t.Helper()
	var s session
	if c, err := control.Dial(e.store); err == nil {
		s = c
	} else {
		var st *layers.Store
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			st, err = layers.Open(e.store)
			if err == nil || !errors.Is(err, layers.ErrLocked) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			e.t.Fatalf("open the store: %v", err)
		}
		s = &localSession{Server: control.NewServer(st, control.Options{}), st: st}
	}
	defer s.Close()
	var out []any
	call := func(op string, args any) {
		var v any
		if err := s.Call(op, args, &v); err != nil {
			e.t.Fatalf("%s %v: %v", op, args, err)
		}
		out = append(out, v)
	}
	var sbs []control.Sandbox
	if err := s.Call(control.OpSandboxList, nil, &sbs); err != nil {
		e.t.Fatal(err)
	}
	out = append(out, sbs)
	call(control.OpPlanList, nil)
	for _, sb := range sbs {
		call(control.OpCheckpointList, control.CheckpointListArgs{Sandbox: sb.Name})
		call(control.OpArchiveList, control.NameArgs{Name: sb.Name})
		call(control.OpLayersList, control.LayersArgs{Sandbox: sb.Name, Archived: true})
	}
	b, err := json.Marshal(out)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// dirNames lists the entries of dir, to notice one a command left.
func dirNames(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}
