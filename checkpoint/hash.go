package checkpoint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"syscall"

	"github.com/strata-sandbox/strata/layers"
)

// The state hash of a tree is the sum, modulo 2^256, of one hash per
// visible directory entry (directory, name, inode, type) and one per live
// inode (number, mode, and for files size and content fingerprint, for
// symlinks the target). A sum can be updated by what one layer changed —
// subtract what left, add what came — so a checkpoint costs what changed,
// not what the tree holds; `verify` recomputes the sum from the whole tree.

// stateSum is a 256-bit number, big-endian limbs; sums wrap modulo 2^256.
type stateSum struct{ n *[4]uint64 }

func newSum() stateSum { return stateSum{n: new([4]uint64)} }

func parseSum(s string) (stateSum, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return stateSum{}, fmt.Errorf("state hash %q: %w", s, layers.ErrCorrupt)
	}
	sum := newSum()
	for i := range sum.n {
		sum.n[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	return sum, nil
}

// add adds (sign > 0) or subtracts the 32-byte hash h.
func (s stateSum) add(h []byte, sign int) {
	var carry uint64
	for i := 3; i >= 0; i-- {
		x := binary.BigEndian.Uint64(h[8*i:])
		if sign < 0 {
			s.n[i], carry = bits.Sub64(s.n[i], x, carry)
		} else {
			s.n[i], carry = bits.Add64(s.n[i], x, carry)
		}
	}
}

func (s stateSum) String() string {
	b := make([]byte, 32)
	for i, x := range s.n {
		binary.BigEndian.PutUint64(b[8*i:], x)
	}
	return hex.EncodeToString(b)
}

func entryHash(dir uint64, name string, e layers.DirEntry) []byte {
	h := sha256.New()
	var b [8]byte
	h.Write([]byte{'e'})
	binary.BigEndian.PutUint64(b[:], dir)
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(len(name)))
	h.Write(b[:])
	h.Write([]byte(name))
	binary.BigEndian.PutUint64(b[:], e.Ino)
	h.Write(b[:])
	binary.BigEndian.PutUint32(b[:4], e.Mode&syscall.S_IFMT)
	h.Write(b[:4])
	return h.Sum(nil)
}

func inodeHash(ino uint64, st *layers.InodeState) []byte {
	h := sha256.New()
	var b [8]byte
	h.Write([]byte{'i'})
	binary.BigEndian.PutUint64(b[:], ino)
	h.Write(b[:])
	binary.BigEndian.PutUint32(b[:4], st.Mode)
	h.Write(b[:4])
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		binary.BigEndian.PutUint64(b[:], uint64(st.Size))
		h.Write(b[:])
		h.Write([]byte(st.Fingerprint))
	case syscall.S_IFLNK:
		h.Write([]byte(st.Target))
	}
	return h.Sum(nil)
}

// sameHashed reports whether two states of one inode hash alike.
func sameHashed(a, b *layers.InodeState) bool {
	return a.Mode == b.Mode && a.Size == b.Size && a.Fingerprint == b.Fingerprint && a.Target == b.Target
}

// fullHash computes the state hash of a view from its whole tree; with
// readData it also reads every block and checks its checksums.
func fullHash(v *layers.View, readData bool) (string, error) {
	sum := newSum()
	seen := map[uint64]bool{layers.RootIno: true}
	root, err := v.State(layers.RootIno)
	if err != nil {
		return "", err
	}
	sum.add(inodeHash(layers.RootIno, root), 1)
	var rec func(dir uint64, prefix string) error
	rec = func(dir uint64, prefix string) error {
		ents, err := v.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("%s: %w", relOrRoot(prefix), err)
		}
		for _, e := range ents {
			p := prefix + "/" + e.Name
			sum.add(entryHash(dir, e.Name, e), 1)
			if seen[e.Ino] {
				continue
			}
			seen[e.Ino] = true
			st, err := v.State(e.Ino)
			if err != nil {
				return fmt.Errorf("%s: inode %d: %w", p, e.Ino, err)
			}
			if st == nil {
				return fmt.Errorf("%s: inode %d has no state: %w", p, e.Ino, layers.ErrCorrupt)
			}
			sum.add(inodeHash(e.Ino, st), 1)
			if readData {
				if err := v.VerifyData(e.Ino); err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
			}
			if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				if err := rec(e.Ino, p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := rec(layers.RootIno, ""); err != nil {
		return "", err
	}
	return sum.String(), nil
}

func keyLayerHash(layer string) string { return "x/lh/" + layer }

// layerHash returns the state hash of the stack topped by layer: from its
// parent's stored hash and what the layer changed (its delta, which a live
// view has in memory), or from the whole tree when the parent's is not
// known (the first checkpoint of a sandbox).
func (m *Manager) layerHash(tx *layers.Txn, sandbox, layer string) (string, error) {
	l, err := tx.Layer(layer)
	if err != nil {
		return "", err
	}
	var prev stateSum
	if l.Parent == "" {
		v, err := m.store.OpenBase(sandbox)
		if err != nil {
			return "", err
		}
		h, err := fullHash(v, false)
		v.Close()
		if err != nil {
			return "", err
		}
		prev, _ = parseSum(h)
	} else {
		b, err := tx.Get(keyLayerHash(l.Parent))
		if err != nil {
			v, err := tx.OpenSnapshot(sandbox, layer)
			if err != nil {
				return "", err
			}
			defer v.Close()
			return fullHash(v, false)
		}
		if prev, err = parseSum(string(b)); err != nil {
			return "", err
		}
	}
	d, err := tx.LayerDelta(sandbox, layer)
	if err != nil {
		return "", err
	}
	for _, c := range d.Entries {
		if c.Old != nil && c.New != nil && *c.Old == *c.New {
			continue
		}
		if c.Old != nil {
			prev.add(entryHash(c.Dir, c.Name, *c.Old), -1)
		}
		if c.New != nil {
			prev.add(entryHash(c.Dir, c.Name, *c.New), 1)
		}
	}
	for _, c := range d.Inodes {
		if c.Old != nil && c.New != nil && sameHashed(c.Old, c.New) {
			continue // times or links changed: nothing the hash covers
		}
		if c.Old != nil {
			prev.add(inodeHash(c.Ino, c.Old), -1)
		}
		if c.New != nil {
			prev.add(inodeHash(c.Ino, c.New), 1)
		}
	}
	return prev.String(), nil
}
