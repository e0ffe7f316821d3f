package layers

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path"
	"slices"
	"sort"
	"syscall"

	"github.com/dgraph-io/badger/v4"
)

// Problem is one thing fsck found wrong. It names the sandbox and path
// where it could tell which are affected.
type Problem struct {
	Kind    string `json:"kind"` // record, orphan, checksum, structure
	Sandbox string `json:"sandbox,omitempty"`
	Layer   string `json:"layer,omitempty"`
	Ino     uint64 `json:"ino,omitempty"`
	Path    string `json:"path,omitempty"`
	Detail  string `json:"detail"`
}

// FsckReport is what Fsck checked and found.
type FsckReport struct {
	Sandboxes int `json:"sandboxes"`
	Layers    int `json:"layers"`
	Inodes    int `json:"inodes"`
	Entries   int `json:"entries"`
	Blocks    int `json:"blocks"`
	Paths     int `json:"paths"`
	// Dropping lists the layers a collection was dropping when it was
	// interrupted (a crash): what is left of them is no problem, and the
	// next gc removes it.
	Dropping []string  `json:"dropping,omitempty"`
	Problems []Problem `json:"problems"`
}

// Fsck checks the whole store: every sandbox's stack, every layer and the
// records it holds, every block against its checksums, and every
// sandbox's merged tree. It changes nothing: what it finds is reported
// (with the affected paths), never repaired by dropping data.
func (s *Store) Fsck() (FsckReport, error) {
	rep := FsckReport{Problems: []Problem{}}
	add := func(p Problem) { rep.Problems = append(rep.Problems, p) }
	layers := map[string]LayerInfo{}
	sandboxes := map[string]SandboxInfo{}
	type blockAt struct {
		layer string
		ino   uint64
		blk   uint64
		ref   blockRef
	}
	var blocks []blockAt
	var walMarks []string      // sandboxes with an intent log mark
	bsOf := map[string]int64{} // layer -> block size of its sandbox
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.KeyCopy(nil)
			if len(k) < 2 || k[1] != '/' {
				continue // badger's own keys, the inode sequence
			}
			val, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			switch k[0] {
			case tSandbox:
				var info SandboxInfo
				if err := json.Unmarshal(val, &info); err != nil {
					add(Problem{Kind: "record", Sandbox: string(k[2:]), Detail: "sandbox record does not decode: " + err.Error()})
					continue
				}
				sandboxes[info.Name] = info
			case tWal:
				if _, _, err := decodeWalMark(val); err != nil {
					add(Problem{Kind: "record", Sandbox: string(k[2:]), Detail: "intent log mark does not decode (the log is left as it is and the sandbox syncs the full way): " + err.Error()})
				}
				walMarks = append(walMarks, string(k[2:]))
			case tLayer:
				var l LayerInfo
				if err := json.Unmarshal(val, &l); err != nil {
					add(Problem{Kind: "record", Layer: string(k[2:]), Detail: "layer record does not decode: " + err.Error()})
					continue
				}
				layers[l.ID] = l
			case tInode, tEntry, tBlock:
				rest := k[2:]
				if len(rest) < 27 || rest[26] != '/' {
					add(Problem{Kind: "record", Detail: fmt.Sprintf("malformed key %q", k)})
					continue
				}
				layer := string(rest[:26])
				body := rest[27:]
				switch k[0] {
				case tInode:
					rep.Inodes++
					if len(body) != 8 {
						add(Problem{Kind: "record", Layer: layer, Detail: fmt.Sprintf("malformed inode key %q", k)})
					} else if _, err := decodeInode(val); err != nil {
						add(Problem{Kind: "record", Layer: layer, Ino: beUint64(body), Detail: "inode record: " + err.Error()})
					}
				case tEntry:
					rep.Entries++
					if len(body) < 10 {
						add(Problem{Kind: "record", Layer: layer, Detail: fmt.Sprintf("malformed entry key %q", k)})
					} else if _, err := decodeEntry(val); err != nil {
						add(Problem{Kind: "record", Layer: layer, Ino: beUint64(body), Detail: fmt.Sprintf("entry %q: %v", body[9:], err)})
					}
				case tBlock:
					rep.Blocks++
					if len(body) != 17 {
						add(Problem{Kind: "record", Layer: layer, Detail: fmt.Sprintf("malformed block key %q", k)})
						continue
					}
					ref, err := decodeBlockRef(val)
					if err != nil {
						add(Problem{Kind: "record", Layer: layer, Ino: beUint64(body), Detail: "block ref: " + err.Error()})
						continue
					}
					blocks = append(blocks, blockAt{layer, beUint64(body), beUint64(body[9:]), ref})
				}
				if _, ok := layerKnown(txn, layer); !ok && !dropping(txn, layer) {
					add(Problem{Kind: "orphan", Layer: layer, Detail: fmt.Sprintf("key %q of a layer that does not exist", k)})
				}
			}
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("fsck: %w", err)
	}
	rep.Sandboxes, rep.Layers = len(sandboxes), len(layers)
	for _, name := range walMarks {
		if _, ok := sandboxes[name]; !ok {
			add(Problem{Kind: "orphan", Sandbox: name, Detail: "intent log mark of a sandbox that does not exist"})
		}
	}
	// Stacks: every parent exists, no cycles, heads are active layers.
	for _, l := range layers {
		if l.Parent != "" {
			if _, ok := layers[l.Parent]; !ok {
				add(Problem{Kind: "structure", Layer: l.ID, Sandbox: l.Sandbox, Detail: "parent layer " + l.Parent + " does not exist"})
			}
		}
		switch l.State {
		case StateActive, StateFrozen, StateArchived:
		default:
			add(Problem{Kind: "record", Layer: l.ID, Detail: "unknown state " + l.State})
		}
	}
	for _, info := range sandboxes {
		seen := map[string]bool{}
		for id := info.Head; id != ""; {
			l, ok := layers[id]
			if !ok {
				add(Problem{Kind: "structure", Sandbox: info.Name, Layer: id, Detail: "layer of the stack does not exist"})
				break
			}
			if seen[id] {
				add(Problem{Kind: "structure", Sandbox: info.Name, Layer: id, Detail: "cycle in the stack"})
				break
			}
			seen[id] = true
			bsOf[id] = int64(info.BlockSize)
			if id == info.Head && l.State != StateActive {
				add(Problem{Kind: "structure", Sandbox: info.Name, Layer: id, Detail: "head layer is " + l.State + ", not active"})
			}
			id = l.Parent
		}
	}
	for id, l := range layers {
		if _, ok := bsOf[id]; !ok {
			if info, ok := sandboxes[l.Sandbox]; ok {
				bsOf[id] = int64(info.BlockSize)
			}
		}
	}
	// Trees first, so block problems can name their paths.
	paths := map[string]map[uint64]string{} // sandbox -> ino -> path
	names := make([]string, 0, len(sandboxes))
	for n := range sandboxes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		ps, probs := s.fsckTree(sandboxes[name])
		paths[name] = ps
		rep.Paths += len(ps)
		rep.Problems = append(rep.Problems, probs...)
	}
	// Every block against its checksums.
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, b := range blocks {
		bs, ok := bsOf[b.layer]
		if !ok {
			continue // an orphan, reported above
		}
		dl := b.ref.dataLayer(b.layer)
		if dl != b.layer && !below(layers, b.layer, dl) {
			add(Problem{Kind: "record", Layer: b.layer, Ino: b.ino, Detail: fmt.Sprintf("block %d is kept in layer %s, which is not below it", b.blk, dl)})
			continue
		}
		f, ok := files[dl]
		if !ok {
			var err error
			f, err = os.Open(s.dataPath(dl))
			if err != nil {
				add(Problem{Kind: "checksum", Layer: b.layer, Ino: b.ino, Detail: "data file: " + err.Error()})
				files[dl] = nil
				continue
			}
			files[dl] = f
		}
		if f == nil {
			continue
		}
		if int64(len(b.ref.CRCs))*pageSize != bs {
			add(Problem{Kind: "record", Layer: b.layer, Ino: b.ino, Detail: fmt.Sprintf("block %d has %d checksums", b.blk, len(b.ref.CRCs))})
			continue
		}
		page, err := s.checkBlockLive(f, b.layer, b.ino, b.blk, b.ref, bs)
		switch {
		case err != nil:
			add(Problem{Kind: "checksum", Layer: b.layer, Ino: b.ino, Detail: fmt.Sprintf("block %d: %v", b.blk, err)})
		case page >= 0:
			pr := Problem{Kind: "checksum", Layer: b.layer, Ino: b.ino,
				Detail: fmt.Sprintf("block %d page %d fails its checksum (bytes %d-%d of the file)", b.blk, page, int64(b.blk)*bs+int64(page*pageSize), int64(b.blk)*bs+int64((page+1)*pageSize)-1)}
			for sb, ps := range paths {
				if pth, ok := ps[b.ino]; ok && layerIn(sandboxes[sb], layers, b.layer) {
					pr.Sandbox, pr.Path = sb, pth
					break
				}
			}
			add(pr)
		}
	}
	// Data files that belong to no layer.
	drops := map[string]bool{}
	err = s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tDrop, '/'}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			id := string(it.Item().Key()[2:])
			drops[id] = true
			rep.Dropping = append(rep.Dropping, id)
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("fsck: %w", err)
	}
	if ents, err := os.ReadDir(s.dataDir()); err == nil {
		for _, e := range ents {
			if _, ok := layers[e.Name()]; !ok && !drops[e.Name()] {
				add(Problem{Kind: "orphan", Layer: e.Name(), Detail: "data file of a layer that does not exist (gc removes it)"})
			}
		}
	}
	return rep, nil
}

// checkBlockLive checks one block against its checksums and returns the
// first page that fails, or -1. A live mount keeps writing while fsck
// runs: a sealed block is not written in place while fsck runs (the
// control server pauses that: Store.PauseRewrites), but its next write
// moves it to a new slot and, once the move is durable, the old slot is
// punched. So when the data fails, the block's record is read again
// after the data was: if it still names the same slot and checksums, the
// slot was not punched before the read, and the failure is real; if it
// moved, the new slot is checked; if it is gone, there is nothing to check.
func (s *Store) checkBlockLive(f *os.File, layer string, ino, blk uint64, ref blockRef, bs int64) (int, error) {
	buf := make([]byte, bs)
	for try := 0; ; try++ {
		// Past its slot the block reads as zeros.
		held := min(bs, ref.capBytes())
		clear(buf[held:])
		if err := readFull(f, buf[:held], ref.off()); err != nil {
			return -1, err
		}
		page := failingPage(buf, ref.CRCs)
		if page < 0 || try == fsckMoves {
			return page, nil
		}
		now, found, err := s.blockRecord(layer, ino, blk)
		if err != nil {
			return -1, err
		}
		if !found {
			return -1, nil
		}
		if now.Slot == ref.Slot && now.Pages == ref.Pages && now.Home == ref.Home && slices.Equal(now.CRCs, ref.CRCs) {
			return page, nil
		}
		if now.Home != ref.Home {
			// A dedup pass moved it into another layer's slot, which that
			// layer's own record has fsck check.
			return -1, nil
		}
		ref = now
	}
}

// below tells whether layer low is in the stack under layer id (layers
// by id), following parents.
func below(layers map[string]LayerInfo, id, low string) bool {
	seen := map[string]bool{}
	for l, ok := layers[id]; ok && l.Parent != "" && !seen[l.Parent]; l, ok = layers[l.Parent] {
		if l.Parent == low {
			return true
		}
		seen[l.Parent] = true
	}
	return false
}

// fsckMoves bounds how often checkBlockLive follows a block that keeps
// moving under a writer; after that it judges the slot it read last.
const fsckMoves = 64

// failingPage returns the first page of block whose checksum is not the
// one in crcs, or -1.
func failingPage(block []byte, crcs []uint32) int {
	for p, want := range crcs {
		if crc32.Checksum(block[p*pageSize:(p+1)*pageSize], castagnoli()) != want {
			return p
		}
	}
	return -1
}

// blockRecord reads the stored record of one block as it is now.
func (s *Store) blockRecord(layer string, ino, blk uint64) (blockRef, bool, error) {
	val, found, err := s.record(keyBlock(layer, ino, blk))
	if err != nil || !found {
		return blockRef{}, false, err
	}
	ref, err := decodeBlockRef(val)
	return ref, err == nil, err
}

// record reads the value stored under key as it is now; found is false
// when there is none.
func (s *Store) record(key []byte) (val []byte, found bool, err error) {
	err = s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		val, err = item.ValueCopy(nil)
		found = err == nil
		return err
	})
	return val, found, err
}

func (s *Store) dataDir() string { return path.Dir(s.dataPath("x")) }

// dropping says whether a collection marked the layer as being dropped.
func dropping(txn dbTxn, id string) bool {
	_, err := txn.Get(keyDrop(id))
	return err == nil
}

func layerKnown(txn dbTxn, id string) (LayerInfo, bool) {
	var l LayerInfo
	err := getJSON(txn, keyLayer(id), &l)
	return l, err == nil
}

func layerIn(info SandboxInfo, layers map[string]LayerInfo, id string) bool {
	for cur, n := info.Head, 0; cur != "" && n < 1<<16; n++ {
		if cur == id {
			return true
		}
		cur = layers[cur].Parent
	}
	return false
}

// fsckTree walks a sandbox's merged tree: every entry must lead to an
// inode that loads and has the entry's type, and link counts must not be
// zero for a named inode.
func (s *Store) fsckTree(info SandboxInfo) (map[uint64]string, []Problem) {
	var probs []Problem
	ps := map[uint64]string{RootIno: ""}
	v, err := s.OpenSnapshot(info.Name, info.Head)
	if err != nil {
		return ps, []Problem{{Kind: "structure", Sandbox: info.Name, Detail: "cannot open the stack: " + err.Error()}}
	}
	defer v.Close()
	var walk func(dir uint64, prefix string, depth int)
	walk = func(dir uint64, prefix string, depth int) {
		if depth > 4096 {
			probs = append(probs, Problem{Kind: "structure", Sandbox: info.Name, Path: prefix, Detail: "directory tree too deep (a cycle?)"})
			return
		}
		ents, err := v.ReadDir(dir)
		if err != nil {
			probs = append(probs, Problem{Kind: "structure", Sandbox: info.Name, Ino: dir, Path: prefix, Detail: "directory does not list: " + err.Error()})
			return
		}
		for _, e := range ents {
			p := path.Join(prefix, e.Name)
			a, err := v.GetAttr(e.Ino)
			if err != nil {
				kind := "structure"
				if errors.Is(err, ErrCorrupt) {
					kind = "record"
				}
				probs = append(probs, Problem{Kind: kind, Sandbox: info.Name, Ino: e.Ino, Path: p, Detail: "entry leads to an inode that does not load: " + err.Error()})
				continue
			}
			if _, seen := ps[e.Ino]; !seen {
				ps[e.Ino] = p
			}
			if a.Mode&syscall.S_IFMT != e.Mode {
				probs = append(probs, Problem{Kind: "structure", Sandbox: info.Name, Ino: e.Ino, Path: p, Detail: fmt.Sprintf("entry says type %o, inode is %o", e.Mode, a.Mode&syscall.S_IFMT)})
			}
			if a.Nlink == 0 {
				probs = append(probs, Problem{Kind: "structure", Sandbox: info.Name, Ino: e.Ino, Path: p, Detail: "named inode has no links"})
			}
			if a.IsDir() {
				walk(e.Ino, p, depth+1)
			}
		}
	}
	walk(RootIno, "", 0)
	return ps, probs
}
