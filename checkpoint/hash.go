package checkpoint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/big"
	"syscall"

	"github.com/strata-sandbox/strata/layers"
)

// The state hash of a tree is the sum, modulo 2^256, of one hash per
// visible directory entry (directory, name, inode, type) and one per live
// inode (number, mode, and for files size and content fingerprint, for
// symlinks the target). A sum can be updated by what one layer changed —
// subtract what left, add what came — so a checkpoint costs what changed,
// not what the tree holds; `verify` recomputes the sum from the whole tree.

var modulus = new(big.Int).Lsh(big.NewInt(1), 256)

type stateSum struct{ n *big.Int }

func newSum() stateSum { return stateSum{n: new(big.Int)} }

func parseSum(s string) (stateSum, error) {
	n, ok := new(big.Int).SetString(s, 16)
	if !ok || len(s) != 64 {
		return stateSum{}, fmt.Errorf("state hash %q: %w", s, layers.ErrCorrupt)
	}
	return stateSum{n: n}, nil
}

func (s stateSum) add(h []byte, sign int) {
	x := new(big.Int).SetBytes(h)
	if sign < 0 {
		s.n.Sub(s.n, x)
	} else {
		s.n.Add(s.n, x)
	}
	s.n.Mod(s.n, modulus)
}

func (s stateSum) String() string {
	b := make([]byte, 32)
	s.n.FillBytes(b)
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
			if err != nil || st == nil {
				return fmt.Errorf("%s: inode %d: %v", p, e.Ino, err)
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
// parent's stored hash and what the layer changed, or from the whole tree
// when the parent's is not known (the first checkpoint of a sandbox).
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
			v, err := m.store.OpenSnapshot(sandbox, layer)
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
	ch, err := m.store.Compare(sandbox, l.Parent, layer, false)
	if err != nil {
		return "", err
	}
	for _, c := range ch.Entries {
		if c.Old != nil {
			prev.add(entryHash(c.Dir, c.Name, *c.Old), -1)
		}
		if c.New != nil {
			prev.add(entryHash(c.Dir, c.Name, *c.New), 1)
		}
	}
	for _, c := range ch.Inodes {
		if c.Old != nil {
			prev.add(inodeHash(c.Ino, c.Old), -1)
		}
		if c.New != nil {
			prev.add(inodeHash(c.Ino, c.New), 1)
		}
	}
	return prev.String(), nil
}
