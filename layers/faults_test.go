package layers

import (
	"errors"
	"testing"
)

// TestInjectFault: each transactional operation asks the store's fault
// function with its name and key, fails with its error, and leaves the
// other operations alone; restore removes the function.
func TestInjectFault(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	info, err := e.store.Sandbox("sb")
	ok(t, "sandbox", err)
	layer := info.Head
	boom := errors.New("boom")
	cases := []struct {
		op, key string
		run     func(tx *Txn) error
	}{
		{"get", "x/k", func(tx *Txn) error { _, err := tx.Get("x/k"); return err }},
		{"set", "x/k", func(tx *Txn) error { return tx.Set("x/k", []byte("v")) }},
		{"delete", "x/k", func(tx *Txn) error { return tx.Delete("x/k") }},
		{"scan", "x/", func(tx *Txn) error { return tx.Scan("x/", func(string, []byte) error { return nil }) }},
		{"pin", layer, func(tx *Txn) error { return tx.Pin(layer, "owner") }},
		{"unpin", layer, func(tx *Txn) error { return tx.Unpin(layer, "owner") }},
	}
	ok(t, "seed", e.store.Update(func(tx *Txn) error { return tx.Set("x/k", []byte("v")) }))
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			var asked []string
			restore := e.store.InjectFault(func(op, key string) error {
				asked = append(asked, op+" "+key)
				if op == c.op && key == c.key {
					return boom
				}
				return nil
			})
			err := e.store.Update(c.run)
			if !errors.Is(err, boom) {
				t.Fatalf("%s with a fault: %v", c.op, err)
			}
			if len(asked) != 1 || asked[0] != c.op+" "+c.key {
				t.Fatalf("the fault function was asked %v", asked)
			}
			// The other operations go ahead.
			for _, o := range cases {
				if o.op != c.op && o.op != "get" {
					ok(t, o.op+" beside the fault", e.store.Update(o.run))
				}
			}
			restore()
			restore() // a second restore changes nothing
			ok(t, c.op+" after restore", e.store.Update(func(tx *Txn) error {
				if err := tx.Set("x/k", []byte("v")); err != nil {
					return err
				}
				return c.run(tx)
			}))
			if faults.Load() != nil {
				t.Fatal("a fault table is left with no fault installed")
			}
		})
	}
}
