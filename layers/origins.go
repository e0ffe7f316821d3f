package layers

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/dgraph-io/badger/v4"
)

// BaseOrigins lists the base-relative paths of the base files and
// directories that sandbox name's current stack holds records for — the
// base inodes it changed, renamed or copied up and still names — sorted.
// The root ("") is left out. `plan apply` checks that they still exist in
// the base before writing onto it.
func (s *Store) BaseOrigins(name string) ([]string, error) {
	seen := map[uint64]bool{}
	var out []string
	err := s.view(func(txn *badger.Txn) error {
		stack, err := stackOf(txn, name)
		if err != nil {
			return err
		}
		for _, l := range stack {
			prefix := prefixLayerTable(tInode, l)
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
			for it.Rewind(); it.Valid(); it.Next() {
				k := it.Item().Key()
				if len(k) != len(prefix)+8 {
					it.Close()
					return fmt.Errorf("inode key %q: %w", k, ErrCorrupt)
				}
				ino := binary.BigEndian.Uint64(k[len(prefix):])
				if seen[ino] {
					continue
				}
				seen[ino] = true
				rec, err := decodeItem(it.Item(), decodeInode)
				if err != nil {
					it.Close()
					return fmt.Errorf("inode %d in layer %s: %w", ino, l, err)
				}
				if rec.HasOrigin && rec.Origin != "" && rec.Nlink > 0 {
					out = append(out, rec.Origin)
				}
			}
			it.Close()
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
