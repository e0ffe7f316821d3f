package fs

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCopyFileRange copies through copy_file_range(2) within the mount:
// from a base file, from an upper file, into the middle of a file, past
// the end of one (leaving zeros between), from past the source's end, and
// within one file; every result is checked against a model and again
// after a remount.
func TestCopyFileRange(t *testing.T) {
	const bs = 64 << 10
	baseData := randBytes(3, 3*bs+123)
	sb := newSandbox(t, func(base string) { writeBytes(t, base+"/base", baseData) })
	upper := randBytes(4, 2*bs+7)
	writeBytes(t, sb.path("upper"), upper)
	models := map[string][]byte{"base": bytes.Clone(baseData), "upper": bytes.Clone(upper), "dst": nil}
	writeBytes(t, sb.path("dst"), nil)

	copyRange := func(src string, offIn int64, dst string, offOut int64, n int) int {
		t.Helper()
		in, err := os.Open(sb.path(src))
		mustNil(t, "open source", err)
		defer in.Close()
		out, err := os.OpenFile(sb.path(dst), os.O_WRONLY, 0)
		mustNil(t, "open destination", err)
		defer out.Close()
		total := 0
		for total < n {
			oi, oo := offIn+int64(total), offOut+int64(total)
			got, err := unix.CopyFileRange(int(in.Fd()), &oi, int(out.Fd()), &oo, n-total, 0)
			mustNil(t, "copy_file_range", err)
			if got == 0 {
				break
			}
			total += got
		}
		// The model: what copying byte by byte would leave.
		s := models[src]
		end := min(int64(len(s)), offIn+int64(n))
		var part []byte
		if offIn < end {
			part = append([]byte(nil), s[offIn:end]...)
		}
		d := models[dst]
		if need := offOut + int64(len(part)); int64(len(d)) < need {
			d = append(d, make([]byte, need-int64(len(d)))...)
		}
		copy(d[offOut:], part)
		models[dst] = d
		if total != len(part) {
			t.Fatalf("copy %s@%d -> %s@%d of %d: copied %d, want %d", src, offIn, dst, offOut, n, total, len(part))
		}
		return total
	}
	copyRange("base", 0, "dst", 0, len(baseData))             // all of a base file
	copyRange("upper", 100, "dst", bs-50, bs)                 // an upper file into the middle
	copyRange("base", 5, "dst", 5*bs, 1000)                   // past the end: zeros between
	copyRange("base", int64(len(baseData))-10, "dst", 7, 100) // short at the source's end
	copyRange("upper", int64(len(upper))+5, "dst", 0, 100)    // nothing past the source's end
	copyRange("upper", 0, "upper", 2*bs+100, 4000)            // within one file, no overlap
	copyRange("base", bs, "base", 0, 3000)                    // into the base file itself
	check := func() {
		t.Helper()
		for name, want := range models {
			got, err := os.ReadFile(sb.path(name))
			mustNil(t, "read "+name, err)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: %d bytes differ from the model's %d", name, len(got), len(want))
			}
		}
	}
	check()
	sb.remount()
	check()
	checkBytes(t, sb.base+"/base", baseData)
}
