package fs

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// BenchmarkBlockSize compares block sizes on the two workloads they trade
// off: random 4 KiB writes into a base file (copy-up amplification) and a
// sequential write of a new file (per-block overhead). It reports time and
// bytes the store grew. Run:
//
//	go test -run '^$' -bench BlockSize -benchtime 1x ./fs
func BenchmarkBlockSize(b *testing.B) {
	for _, bs := range []int{4 << 10, 16 << 10, 64 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("bs=%dK", bs>>10), func(b *testing.B) {
			dir := b.TempDir()
			base, mnt, store := filepath.Join(dir, "base"), filepath.Join(dir, "mnt"), filepath.Join(dir, "store")
			os.MkdirAll(base, 0o755)
			os.MkdirAll(mnt, 0o755)
			big := make([]byte, 64<<20)
			rand.New(rand.NewSource(1)).Read(big)
			os.WriteFile(filepath.Join(base, "big"), big, 0o644)
			st, err := layers.Open(store)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			if _, err := st.CreateSandbox("s", base, bs); err != nil {
				b.Fatal(err)
			}
			v, _ := st.OpenView("s", false)
			m, err := New(mnt, v, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { m.Unmount(); v.Close() }()
			rng := rand.New(rand.NewSource(2))
			f, _ := os.OpenFile(filepath.Join(mnt, "big"), os.O_RDWR, 0)
			buf := make([]byte, 4096)
			before := duBytes(store)
			t0 := time.Now()
			for i := 0; i < 5000; i++ {
				f.WriteAt(buf, int64(rng.Intn(16384))*4096)
			}
			f.Sync()
			randT := time.Since(t0)
			randBytes := duBytes(store) - before
			f.Close()
			chunk := make([]byte, 1<<20)
			before = duBytes(store)
			t0 = time.Now()
			g, _ := os.Create(filepath.Join(mnt, "seq"))
			for i := 0; i < 256; i++ {
				g.Write(chunk)
			}
			g.Sync()
			g.Close()
			seqT := time.Since(t0)
			seqBytes := duBytes(store) - before
			b.ReportMetric(float64(randT.Milliseconds()), "rand4k-ms")
			b.ReportMetric(float64(randBytes>>20), "rand4k-MiB")
			b.ReportMetric(float64(seqT.Milliseconds()), "seq256M-ms")
			b.ReportMetric(float64(seqBytes>>20), "seq256M-MiB")
		})
	}
}

func duBytes(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return n
}
