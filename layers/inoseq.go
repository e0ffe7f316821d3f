package layers

import (
	"encoding/binary"
	"errors"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// inoSeqKey holds the inode number lease, as badger's Sequence stored it
// (a big-endian uint64: every number below it may be in use).
var inoSeqKey = []byte("q/ino")

// inoLease is how many numbers one lease covers.
const inoLease = 1024

// inoSeq hands out the numbers of inodes made in layers. A lease is
// stored before any number of it is handed out, and the counter moves
// only once that write committed. badger's Sequence moves it inside the
// transaction, before the commit: a commit that failed (writes blocked
// while a DropPrefix ran, a full disk) left it handing out a range it had
// not leased, and at the next renewal it read the old lease back and
// handed the same numbers out again, giving two inodes one number (found
// by a helper's multi-sandbox torture run: entries leading to inodes of
// another type).
type inoSeq struct {
	db           *badger.DB
	mu           sync.Mutex
	next, leased uint64
}

// openInoSeq reads the stored lease: numbers from it on are free.
func openInoSeq(db *badger.DB) (*inoSeq, error) {
	q := &inoSeq{db: db}
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(inoSeqKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return ErrCorrupt
			}
			q.next = binary.BigEndian.Uint64(v)
			return nil
		})
	})
	q.leased = q.next
	return q, err
}

// inoSeqHook, when set by a test, is called before each write of the
// lease; an error it returns is that write's error.
var inoSeqHook func(lease uint64) error

// store writes n as the stored lease.
func (q *inoSeq) store(n uint64) error {
	if inoSeqHook != nil {
		if err := inoSeqHook(n); err != nil {
			return err
		}
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return q.db.Update(func(txn *badger.Txn) error { return txn.Set(inoSeqKey, b[:]) })
}

// Next hands out a number never handed out before, in this process or
// any earlier one.
func (q *inoSeq) Next() (uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.next >= q.leased {
		lease := q.next + inoLease
		if err := q.store(lease); err != nil {
			return 0, err
		}
		q.leased = lease
	}
	n := q.next
	q.next++
	return n, nil
}

// Release gives back the unused rest of the lease, so that a restart
// goes on from the next number.
func (q *inoSeq) Release() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.next == q.leased {
		return nil
	}
	if err := q.store(q.next); err != nil {
		return err
	}
	q.leased = q.next
	return nil
}
