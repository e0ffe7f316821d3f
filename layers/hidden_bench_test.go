package layers

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkCollectHidden: a sandbox 300 checkpoints deep (layersN; its
// setup takes 5 minutes at 1,000) whose every step rewrote the same 100
// files; all but the last 100 checkpoints are unpinned (a prune), then
// one more (retention's hourly prune). Reports the first collection, a
// collection with nothing new, and one after the one more unpin.
func BenchmarkCollectHidden(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		s, err := Open(filepath.Join(dir, "store"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.CreateSandbox("sb", b.TempDir(), MinBlockSize); err != nil {
			b.Fatal(err)
		}
		e := &testEnv{store: s, name: "sb"}
		v, err := e.store.OpenView(e.name, false)
		if err != nil {
			b.Fatal(err)
		}
		const layersN, files = 300, 100
		inos := make([]uint64, files)
		for f := range inos {
			a, err := v.Mknod(RootIno, fmt.Sprintf("f%d", f), 0o644, 0, root)
			if err != nil {
				b.Fatal(err)
			}
			inos[f] = a.Ino
		}
		var ls []string
		buf := make([]byte, 2*MinBlockSize)
		for l := 0; l < layersN; l++ {
			for _, ino := range inos {
				buf[0] = byte(l)
				if _, err := v.WriteAt(ino, buf, 0, false); err != nil {
					b.Fatal(err)
				}
			}
			id, _, err := e.store.Freeze(e.name, noFreezeFn)
			if err != nil {
				b.Fatal(err)
			}
			ls = append(ls, id)
			if l >= layersN-100 {
				if err := e.store.Update(func(tx *Txn) error { return tx.Pin(id, "cp") }); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StartTimer()
		t0 := time.Now()
		res, err := e.store.CollectGarbage()
		first := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		if _, err := e.store.CollectGarbage(); err != nil {
			b.Fatal(err)
		}
		again := time.Since(t0)
		if err := e.store.Update(func(tx *Txn) error { return tx.Unpin(ls[layersN-100], "cp") }); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		res2, err := e.store.CollectGarbage()
		one := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
		b.ReportMetric(float64(again.Microseconds())/1000, "again-ms")
		b.ReportMetric(float64(one.Microseconds())/1000, "one-more-ms")
		b.ReportMetric(float64(res.HiddenBlocks), "hidden")
		b.ReportMetric(float64(res2.HiddenBlocks), "hidden-one-more")
		b.StopTimer()
		v.Close()
		s.Close()
	}
}
