package features

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"

	"github.com/cucumber/godog"
)

// checkpointState is what the checkpoint steps remember in a scenario.
type checkpointState struct {
	checkpoints map[string]checkpointJSON // by label
	rollback    rollbackJSON              // of the last rollback or restore
	reader      *os.File                  // a file held open across a rollback
	exportDir   string
	gc          gcJSON            // of the last collection
	written     map[string][]byte // what the last random write put in each file
	held        int               // checkpoints the last prune kept for open plans
}

type gcJSON struct {
	HiddenBlocks int   `json:"hidden_blocks"`
	BytesFreed   int64 `json:"bytes_freed"`
	Dedup        *struct {
		Blocks     int   `json:"blocks"`
		BytesFreed int64 `json:"bytes_freed"`
	} `json:"dedup"`
}

type checkpointKey struct{}

func getCheckpoints(ctx context.Context) *checkpointState {
	return ctx.Value(checkpointKey{}).(*checkpointState)
}

// The JSON the CLI prints (the fields the steps read).
type checkpointJSON struct {
	ID        string `json:"id"`
	Sandbox   string `json:"sandbox"`
	Layer     string `json:"layer"`
	Label     string `json:"label"`
	StateHash string `json:"state_hash"`
}

type rollbackJSON struct {
	Sandbox      string   `json:"sandbox"`
	Checkpoint   string   `json:"checkpoint"`
	Archive      string   `json:"archive"`
	ChangedPaths []string `json:"changed_paths"`
}

type diffJSON struct {
	Added    []string `json:"added"`
	Modified []string `json:"modified"`
	Deleted  []string `json:"deleted"`
}

type archiveJSON struct {
	ID             string `json:"id"`
	FromCheckpoint string `json:"from_checkpoint"`
	ToCheckpoint   string `json:"to_checkpoint"`
}

// initCheckpointSteps registers the steps of checkpoint.feature. Its hooks
// are registered before the world's, so that the After hook closes a held
// file before the world unmounts.
func initCheckpointSteps(sc *godog.ScenarioContext) {
	sc.Before(func(ctx context.Context, _ *godog.Scenario) (context.Context, error) {
		return context.WithValue(ctx, checkpointKey{}, &checkpointState{checkpoints: map[string]checkpointJSON{}}), nil
	})
	sc.After(func(ctx context.Context, _ *godog.Scenario, _ error) (context.Context, error) {
		if s, ok := ctx.Value(checkpointKey{}).(*checkpointState); ok && s.reader != nil {
			s.reader.Close()
			s.reader = nil
		}
		return ctx, nil
	})
	sc.Step(`^I create the checkpoint "([^"]*)" of "([^"]*)"$`, createCheckpoint)
	sc.Step(`^the checkpoints of "([^"]*)" are "([^"]*)", oldest first$`, checkpointsAre)
	sc.Step(`^the diff from "([^"]*)" to "([^"]*)" is:$`, diffIs)
	sc.Step(`^the diff from "([^"]*)" to the live state is:$`, liveDiffIs)
	sc.Step(`^the diff from "([^"]*)" to the live state is empty$`, liveDiffEmpty)
	sc.Step(`^a reader holds "([^"]*)" open$`, holdOpen)
	sc.Step(`^I roll "([^"]*)" back to the checkpoint "([^"]*)"$`, rollBack)
	sc.Step(`^I try to roll "([^"]*)" back to the checkpoint "([^"]*)"$`, tryRollBack)
	sc.Step(`^the reader's next read fails with ESTALE$`, readerStale)
	sc.Step(`^the rollback reports "([^"]*)" as changed$`, rollbackChanged)
	sc.Step(`^every checkpoint of "([^"]*)" verifies$`, allVerify)
	sc.Step(`^"([^"]*)" has (\d+) archives?, from the live state to the checkpoint "([^"]*)"$`, archivesAre)
	sc.Step(`^I export the last archive$`, exportArchive)
	sc.Step(`^the export has "([^"]*)" containing "([^"]*)"$`, exportHas)
	sc.Step(`^the export has "([^"]*)" with the mode (\d+)$`, exportHasMode)
	sc.Step(`^I restore the last archive$`, restoreArchive)
	sc.Step(`^I prune "([^"]*)" keeping the last (\d+) checkpoints?$`, prune)
	sc.Step(`^I fork "([^"]*)" from the checkpoint "([^"]*)"$`, fork)
	sc.Step(`^I mount the sandbox "([^"]*)" at the second mountpoint$`, mountSecond)
	sc.Step(`^"([^"]*)" in the second mount contains "([^"]*)"$`, secondContains)
	sc.Step(`^I write "([^"]*)" to "([^"]*)" in the second mount$`, writeSecond)
	sc.Step(`^"([^"]*)" stands on the layer of the checkpoint "([^"]*)"$`, standsOn)
	sc.Step(`^I write (\d+) KiB of random bytes to "([^"]*)" in the mount$`, writeRandom)
	sc.Step(`^I copy "([^"]*)" to "([^"]*)" in the mount$`, copyFile)
	sc.Step(`^I collect garbage with dedup$`, gcDedup)
	sc.Step(`^the collection kept (\d+) blocks once and freed (\d+) KiB$`, gcKept)
	sc.Step(`^"([^"]*)" and "([^"]*)" in the mount hold the same bytes$`, sameBytes)
	sc.Step(`^fsck finds no problem$`, fsckClean)
	sc.Step(`^the collection gave back (\d+) hidden blocks, (\d+) KiB$`, gaveBack)
	sc.Step(`^the prune kept (\d+) checkpoints? for open plans$`, pruneHeld)
	sc.Step(`^"([^"]*)" in the mount holds the bytes written last$`, holdsWrittenLast)
}

// okJSON runs strata --json and decodes what it prints into v.
func (w *world) okJSON(v any, args ...string) error {
	out, err := w.ok(append([]string{"--json"}, args...)...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("strata %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func createCheckpoint(ctx context.Context, label, sandbox string) error {
	var cp checkpointJSON
	if err := getWorld(ctx).okJSON(&cp, "checkpoint", "create", sandbox, "--label", label); err != nil {
		return err
	}
	if cp.Label != label || cp.Sandbox != sandbox || cp.ID == "" || cp.StateHash == "" {
		return fmt.Errorf("checkpoint create: got %+v, want %s of %s with an id and a state hash", cp, label, sandbox)
	}
	getCheckpoints(ctx).checkpoints[label] = cp
	return nil
}

func splitList(s string) []string {
	out := []string{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func checkpointsAre(ctx context.Context, sandbox, labels string) error {
	var cps []checkpointJSON
	if err := getWorld(ctx).okJSON(&cps, "checkpoint", "list", sandbox); err != nil {
		return err
	}
	got := []string{}
	for _, cp := range cps {
		got = append(got, cp.Label)
	}
	if want := splitList(labels); !reflect.DeepEqual(got, want) {
		return fmt.Errorf("checkpoints of %s: got %v, want %v", sandbox, got, want)
	}
	return nil
}

// diffTable reads a table of change (added, modified, deleted) and path.
func diffTable(t *godog.Table) (diffJSON, error) {
	d := diffJSON{Added: []string{}, Modified: []string{}, Deleted: []string{}}
	for i, row := range t.Rows {
		if i == 0 {
			continue
		}
		if len(row.Cells) != 2 {
			return d, fmt.Errorf("row %d: want change and path", i)
		}
		p := row.Cells[1].Value
		switch row.Cells[0].Value {
		case "added":
			d.Added = append(d.Added, p)
		case "modified":
			d.Modified = append(d.Modified, p)
		case "deleted":
			d.Deleted = append(d.Deleted, p)
		default:
			return d, fmt.Errorf("row %d: unknown change %q", i, row.Cells[0].Value)
		}
	}
	for _, l := range [][]string{d.Added, d.Modified, d.Deleted} {
		sort.Strings(l)
	}
	return d, nil
}

func checkDiff(ctx context.Context, want diffJSON, args ...string) error {
	var got diffJSON
	if err := getWorld(ctx).okJSON(&got, append([]string{"checkpoint", "diff"}, args...)...); err != nil {
		return err
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("diff %v: got %+v, want %+v", args, got, want)
	}
	return nil
}

func diffIs(ctx context.Context, from, to string, t *godog.Table) error {
	want, err := diffTable(t)
	if err != nil {
		return err
	}
	return checkDiff(ctx, want, from, to)
}

func liveDiffIs(ctx context.Context, from string, t *godog.Table) error {
	want, err := diffTable(t)
	if err != nil {
		return err
	}
	return checkDiff(ctx, want, from)
}

func liveDiffEmpty(ctx context.Context, from string) error {
	return checkDiff(ctx, diffJSON{Added: []string{}, Modified: []string{}, Deleted: []string{}}, from)
}

func holdOpen(ctx context.Context, rel string) error {
	f, err := os.Open(getWorld(ctx).path(rel))
	if err != nil {
		return err
	}
	if _, err := f.Read(make([]byte, 64)); err != nil {
		f.Close()
		return err
	}
	getCheckpoints(ctx).reader = f
	return nil
}

func rollBack(ctx context.Context, sandbox, ref string) error {
	s := getCheckpoints(ctx)
	if err := getWorld(ctx).okJSON(&s.rollback, "rollback", sandbox, "--to-checkpoint", ref); err != nil {
		return err
	}
	if want := s.checkpoints[ref].ID; s.rollback.Checkpoint != want || s.rollback.Archive == "" {
		return fmt.Errorf("rollback: got %+v, want checkpoint %s and an archive", s.rollback, want)
	}
	return nil
}

func tryRollBack(ctx context.Context, sandbox, ref string) error {
	w := getWorld(ctx)
	r, err := w.run("rollback", sandbox, "--to-checkpoint", ref)
	w.last = r
	return err
}

func readerStale(ctx context.Context) error {
	s := getCheckpoints(ctx)
	if s.reader == nil {
		return errors.New("no reader holds a file open")
	}
	_, err := s.reader.ReadAt(make([]byte, 64), 0)
	s.reader.Close()
	s.reader = nil
	if !errors.Is(err, syscall.ESTALE) {
		return fmt.Errorf("read on the handle held across the rollback: got %v, want ESTALE", err)
	}
	return nil
}

func rollbackChanged(ctx context.Context, paths string) error {
	got := getCheckpoints(ctx).rollback.ChangedPaths
	if want := splitList(paths); !reflect.DeepEqual(got, want) {
		return fmt.Errorf("changed paths: got %v, want %v", got, want)
	}
	return nil
}

func allVerify(ctx context.Context, sandbox string) error {
	var rs []struct {
		Checkpoint string `json:"checkpoint"`
		OK         bool   `json:"ok"`
	}
	if err := getWorld(ctx).okJSON(&rs, "verify", sandbox); err != nil {
		return err
	}
	if len(rs) == 0 {
		return fmt.Errorf("verify %s: no checkpoints verified", sandbox)
	}
	for _, r := range rs {
		if !r.OK {
			return fmt.Errorf("verify %s: checkpoint %s does not verify", sandbox, r.Checkpoint)
		}
	}
	return nil
}

func archivesAre(ctx context.Context, sandbox string, n int, to string) error {
	var ars []archiveJSON
	if err := getWorld(ctx).okJSON(&ars, "archive", "list", sandbox); err != nil {
		return err
	}
	if len(ars) != n {
		return fmt.Errorf("archives of %s: got %d, want %d", sandbox, len(ars), n)
	}
	last := ars[len(ars)-1]
	want := getCheckpoints(ctx).checkpoints[to].ID
	if last.ID != getCheckpoints(ctx).rollback.Archive || last.FromCheckpoint != "" || last.ToCheckpoint != want {
		return fmt.Errorf("last archive: got %+v, want the last rollback's, from no checkpoint to %s", last, want)
	}
	return nil
}

func exportArchive(ctx context.Context) error {
	s := getCheckpoints(ctx)
	s.exportDir = filepath.Join(getWorld(ctx).dir, "export")
	_, err := getWorld(ctx).ok("archive", "export", s.rollback.Archive, s.exportDir)
	return err
}

func exportHas(ctx context.Context, rel, want string) error {
	b, err := os.ReadFile(filepath.Join(getCheckpoints(ctx).exportDir, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	if string(b) != want {
		return fmt.Errorf("exported %s: got %q, want %q", rel, b, want)
	}
	return nil
}

func exportHasMode(ctx context.Context, rel, mode string) error {
	fi, err := os.Lstat(filepath.Join(getCheckpoints(ctx).exportDir, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	if got := fmt.Sprintf("%o", fi.Mode().Perm()); got != mode {
		return fmt.Errorf("exported %s: mode %s, want %s", rel, got, mode)
	}
	return nil
}

func restoreArchive(ctx context.Context) error {
	s := getCheckpoints(ctx)
	var r rollbackJSON
	if err := getWorld(ctx).okJSON(&r, "archive", "restore", s.rollback.Archive); err != nil {
		return err
	}
	s.rollback = r
	return nil
}

func prune(ctx context.Context, sandbox string, n int) error {
	var r struct {
		Held []string `json:"held"`
		GC   gcJSON   `json:"gc"`
	}
	err := getWorld(ctx).okJSON(&r, "checkpoint", "prune", sandbox, "--keep-last", fmt.Sprint(n))
	getCheckpoints(ctx).gc, getCheckpoints(ctx).held = r.GC, len(r.Held)
	return err
}

func pruneHeld(ctx context.Context, n int) error {
	if got := getCheckpoints(ctx).held; got != n {
		return fmt.Errorf("the prune kept %d checkpoints for open plans, want %d", got, n)
	}
	return nil
}

func gaveBack(ctx context.Context, blocks, kib int) error {
	g := getCheckpoints(ctx).gc
	if g.HiddenBlocks != blocks || g.BytesFreed != int64(kib)<<10 {
		return fmt.Errorf("the collection dropped %d hidden blocks and freed %d bytes, want %d blocks and %d KiB", g.HiddenBlocks, g.BytesFreed, blocks, kib)
	}
	return nil
}

func holdsWrittenLast(ctx context.Context, rel string) error {
	want, ok := getCheckpoints(ctx).written[rel]
	if !ok {
		return fmt.Errorf("no random bytes were written to %s", rel)
	}
	got, err := os.ReadFile(getWorld(ctx).path(rel))
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s: %d bytes, not the %d written last", rel, len(got), len(want))
	}
	return nil
}

func fork(ctx context.Context, name, ref string) error {
	_, err := getWorld(ctx).ok("sandbox", "fork", name, "--from", ref)
	return err
}

func mountSecond(ctx context.Context, name string) error {
	w := getWorld(ctx)
	if _, err := w.ok("mount", name, w.mnt2); err != nil {
		return err
	}
	if ok, err := isMountpoint(w.mnt2); err != nil || !ok {
		return fmt.Errorf("%s is not a mount point after mount returned (%v)", w.mnt2, err)
	}
	return nil
}

func secondContains(ctx context.Context, rel, want string) error {
	b, err := os.ReadFile(filepath.Join(getWorld(ctx).mnt2, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	if string(b) != want {
		return fmt.Errorf("%s in the second mount: got %q, want %q", rel, b, want)
	}
	return nil
}

func writeSecond(ctx context.Context, content, rel string) error {
	return os.WriteFile(filepath.Join(getWorld(ctx).mnt2, filepath.FromSlash(rel)), []byte(content), 0o644)
}

func standsOn(ctx context.Context, sandbox, label string) error {
	var ls []struct {
		ID string `json:"id"`
	}
	if err := getWorld(ctx).okJSON(&ls, "layers", "list", sandbox); err != nil {
		return err
	}
	want := getCheckpoints(ctx).checkpoints[label].Layer
	for _, l := range ls {
		if l.ID == want {
			return nil
		}
	}
	return fmt.Errorf("layers of %s: got %v, want them to include %s", sandbox, ls, want)
}

func writeRandom(ctx context.Context, kib int, rel string) error {
	b := make([]byte, kib<<10)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	st := getCheckpoints(ctx)
	if st.written == nil {
		st.written = map[string][]byte{}
	}
	st.written[rel] = b
	return os.WriteFile(getWorld(ctx).path(rel), b, 0o644)
}

func copyFile(ctx context.Context, from, to string) error {
	w := getWorld(ctx)
	b, err := os.ReadFile(w.path(from))
	if err != nil {
		return err
	}
	return os.WriteFile(w.path(to), b, 0o644)
}

func gcDedup(ctx context.Context) error {
	return getWorld(ctx).okJSON(&getCheckpoints(ctx).gc, "gc", "--dedup")
}

func gcKept(ctx context.Context, blocks, kib int) error {
	d := getCheckpoints(ctx).gc.Dedup
	if d == nil || d.Blocks != blocks || d.BytesFreed != int64(kib)<<10 {
		return fmt.Errorf("gc --dedup: got %+v, want %d blocks and %d KiB", d, blocks, kib)
	}
	return nil
}

func sameBytes(ctx context.Context, a, b string) error {
	w := getWorld(ctx)
	x, err := os.ReadFile(w.path(a))
	if err != nil {
		return err
	}
	y, err := os.ReadFile(w.path(b))
	if err != nil {
		return err
	}
	if !bytes.Equal(x, y) {
		return fmt.Errorf("%s and %s differ", a, b)
	}
	return nil
}

func fsckClean(ctx context.Context) error {
	var rep struct {
		Problems []json.RawMessage `json:"problems"`
	}
	if err := getWorld(ctx).okJSON(&rep, "fsck"); err != nil {
		return err
	}
	if len(rep.Problems) != 0 {
		return fmt.Errorf("fsck: %d problems", len(rep.Problems))
	}
	return nil
}
