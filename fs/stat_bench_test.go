package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// BenchmarkCreateUnlink measures creating a 1 KiB file and removing it.
func BenchmarkCreateUnlink(b *testing.B) {
	mnt, done := benchMount(b)
	defer done()
	buf := make([]byte, 1024)
	os.MkdirAll(filepath.Join(mnt, "d"), 0o755)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := filepath.Join(mnt, fmt.Sprintf("d/f%d", i))
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		if err := os.Remove(filepath.Join(mnt, fmt.Sprintf("d/f%d", i))); err != nil {
			b.Fatal(err)
		}
	}
}

func benchMount(b *testing.B) (string, func()) {
	dir := b.TempDir()
	base, mnt := filepath.Join(dir, "base"), filepath.Join(dir, "mnt")
	os.MkdirAll(base, 0o755)
	os.MkdirAll(mnt, 0o755)
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	st.CreateSandbox("s", base, 0)
	v, err := st.OpenView("s", false)
	if err != nil {
		b.Fatal(err)
	}
	m, err := New(mnt, v, Options{})
	if err != nil {
		b.Fatal(err)
	}
	return mnt, func() { m.Unmount(); v.Close(); st.Close() }
}

// BenchmarkStat measures stat(2) of files written through the mount (the
// kernel drops their cached attributes on write, so each stat asks us).
func BenchmarkStat(b *testing.B) {
	dir := b.TempDir()
	base, mnt := filepath.Join(dir, "base"), filepath.Join(dir, "mnt")
	os.MkdirAll(base, 0o755)
	os.MkdirAll(mnt, 0o755)
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	st.CreateSandbox("s", base, 0)
	v, err := st.OpenView("s", false)
	if err != nil {
		b.Fatal(err)
	}
	m, err := New(mnt, v, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { m.Unmount(); v.Close() }()
	const n = 2000
	buf := make([]byte, 1024)
	for i := 0; i < n; i++ {
		p := filepath.Join(mnt, fmt.Sprintf("d%d/f%d", i/1000, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, buf, 0o644)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := filepath.Join(mnt, fmt.Sprintf("d%d/f%d", (i%n)/1000, i%n))
		if _, err := os.Stat(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRename measures renaming one file to a new name again and
// again in the same directory, as stress-ng's rename stressor does.
func BenchmarkRename(b *testing.B) {
	mnt, done := benchMount(b)
	defer done()
	os.MkdirAll(filepath.Join(mnt, "d"), 0o755)
	name := func(i int) string { return filepath.Join(mnt, fmt.Sprintf("d/f%d", i)) }
	if err := os.WriteFile(name(0), []byte("x"), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := os.Rename(name(i), name(i+1)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteFsync measures a 100-byte write into a 64 KiB file
// followed by fsync(2), the pattern of databases and editors.
func BenchmarkWriteFsync(b *testing.B) {
	mnt, done := benchMount(b)
	defer done()
	f, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 64<<10), 0); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.WriteAt(buf, int64(i%10)*4096); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}
