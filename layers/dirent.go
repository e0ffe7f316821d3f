package layers

import (
	"bytes"
	"unsafe"

	"golang.org/x/sys/unix"
)

func pointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

// direntName extracts the NUL-terminated name of one linux_dirent64 record.
func direntName(rec []byte) string {
	off := int(unsafe.Offsetof(unix.Dirent{}.Name))
	if off >= len(rec) {
		return ""
	}
	name := rec[off:]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	return string(name)
}
