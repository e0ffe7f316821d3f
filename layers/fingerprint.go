package layers

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"syscall"
)

// Fingerprint identifies the content of file ino without reading its data:
// a hash of its size and, block by block, where the block comes from and
// the checksums stored for it. Base blocks are named by the base file's
// identity (inode number, size, modification time), which Strata never
// changes: not by its path, since a file with several names in the base
// must fingerprint alike whichever of them reached it.
// Two equal fingerprints mean equal content; the same content stored in
// another place may fingerprint differently.
func (v *View) Fingerprint(ino uint64) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	st, err := v.getInode(ino)
	if err != nil {
		return "", err
	}
	return v.fingerprintLocked(st, false)
}

// fingerprintLocked is Fingerprint of st. trustBase takes the base file's
// identity from the stat made when st was loaded (or last fingerprinted);
// otherwise the base file is stat'ed again.
func (v *View) fingerprintLocked(st *inodeState, trustBase bool) (string, error) {
	ino := st.ino
	h := sha256.New()
	var num [8]byte
	binary.BigEndian.PutUint64(num[:], uint64(st.rec.Size))
	h.Write(num[:])
	if st.rec.Mode&syscall.S_IFMT != syscall.S_IFREG {
		h.Write([]byte(st.rec.Target))
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	if err := v.ensureBlocks(st); err != nil {
		return "", err
	}
	nblk := uint64((st.rec.Size + v.bs - 1) / v.bs)
	var buf []byte
	baseID := ""
	for blk := uint64(0); blk < nblk; blk++ {
		// A frozen layer's block has its checksums: its data file is
		// not opened (src.f is nil then), only looked for.
		src, layer := v.blockSource(st, blk)
		if layer != "" {
			if err := v.layerPresent(layer); err != nil {
				return "", err
			}
		}
		binary.BigEndian.PutUint64(num[:], blk)
		h.Write(num[:])
		switch src.kind {
		case srcZero:
			h.Write([]byte{'z'})
		case srcBase:
			// The base never changes under a sandbox (plan apply aside),
			// so its file's identity stands for its content; an lstat,
			// not an open, so a walk of a large tree holds no descriptors.
			if baseID == "" {
				if !trustBase || !st.bknown {
					bst, err := v.base.lstat(st.rec.Origin)
					if err != nil {
						return "", fmt.Errorf("inode %d: %w", ino, mapOSErr(err))
					}
					st.bsize, st.bmtime, st.bknown = bst.Size, tsNano(bst.Mtim), true
				}
				id := strconv.AppendUint([]byte{'b'}, ino, 10)
				id = strconv.AppendInt(append(id, 0), st.bsize, 10)
				id = strconv.AppendInt(append(id, 0), st.bmtime, 10)
				baseID = string(id)
			}
			h.Write([]byte(baseID))
		case srcSlot:
			crcs := src.crcs
			if crcs == nil {
				if buf == nil {
					buf = make([]byte, v.bs)
				}
				if err := src.readSlot(buf, 0); err != nil {
					return "", err
				}
				crcs = pageCRCs(buf)
			}
			sum := make([]byte, 1, 1+4*len(crcs))
			sum[0] = 's'
			for _, c := range crcs {
				sum = binary.BigEndian.AppendUint32(sum, c)
			}
			h.Write(sum)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// VerifyData reads every block of file ino and checks it against its
// checksums; it returns the first ErrCorrupt it meets.
func (v *View) VerifyData(ino uint64) error {
	a, err := v.GetAttr(ino)
	if err != nil {
		return err
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil
	}
	buf := make([]byte, v.bs)
	for off := int64(0); off < a.Size; off += v.bs {
		if _, err := v.ReadAt(ino, buf, off); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
	return nil
}
