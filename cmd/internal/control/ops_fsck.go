package control

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/strata-sandbox/strata/layers"
)

// OpFsck is the op that checks the whole store.
const OpFsck = "fsck"

// FsckResult is fsck's result: what layers.Store.Fsck checked and found,
// with OK set when it found nothing wrong.
type FsckResult struct {
	OK bool `json:"ok"`
	layers.FsckReport
}

// fsck checks the whole store and repairs nothing. It runs under
// Exclusive, so no rollback, restore or gc repoints a stack while the
// stacks are walked, and it first syncs every live read-write mount: the
// blocks a mount has written but not sealed yet have no checksums on disk,
// and fsck is to judge what a crash would leave, not a half-written block.
// Until it is done, writes copy sealed blocks rather than rewrite them in
// place (layers.Store.PauseRewrites).
func (s *Server) fsck(ctx context.Context, _ empty) (FsckResult, error) {
	return exclusive(s, func() (FsckResult, error) {
		// A block rewritten in place after the sync below would fail its
		// stored checksums until its next seal.
		defer s.store.PauseRewrites()()
		var rep layers.FsckReport
		for pass := 0; pass < fsckPasses; pass++ {
			if err := s.syncMounts(); err != nil {
				return FsckResult{}, err
			}
			again, err := s.store.Fsck()
			if err != nil {
				return FsckResult{}, err
			}
			if pass == 0 {
				rep = again
			} else {
				rep.Problems = persistent(rep.Problems, again.Problems)
			}
			if len(rep.Problems) == 0 {
				break
			}
		}
		if rep.Problems == nil {
			rep.Problems = []layers.Problem{}
		}
		return FsckResult{OK: len(rep.Problems) == 0, FsckReport: rep}, nil
	})
}

// syncMounts syncs the views of the live mounts, in name order. A mount
// that went away meanwhile (a user's umount) has nothing left to sync.
func (s *Server) syncMounts() error {
	s.mu.Lock()
	names := make([]string, 0, len(s.mounts))
	views := map[string]*layers.View{}
	for name, lm := range s.mounts {
		names = append(names, name)
		views[name] = lm.m.View()
	}
	s.mu.Unlock()
	sort.Strings(names)
	for _, name := range names {
		if err := views[name].Sync(); err != nil && !errors.Is(err, layers.ErrClosed) {
			return fmt.Errorf("sync the mount of %s before checking: %w", name, err)
		}
	}
	return nil
}

// fsckPasses is how many times a served fsck looks before it reports a
// problem. Live mounts keep writing while it runs, and fsck walks a
// sandbox's tree through many store reads: an entry read before a rename
// or unlink committed may lead to an inode removed by the time it is
// loaded. (Blocks that move under fsck are followed by layers.Fsck
// itself.) Damage stays put; such races do not repeat at the same place.
const fsckPasses = 3

// persistent keeps the problems of before that are also in now.
func persistent(before, now []layers.Problem) []layers.Problem {
	seen := map[layers.Problem]bool{}
	for _, p := range now {
		seen[p] = true
	}
	var kept []layers.Problem
	for _, p := range before {
		if seen[p] {
			kept = append(kept, p)
		}
	}
	return kept
}
