// Package checkpointtest helps tests of the packages built on checkpoint
// set up the states they need, as net/http/httptest does for HTTP.
package checkpointtest

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// Backdate rewrites the created time of checkpoint id in store st to
// when, as if it had been made then: retention tests need checkpoints
// older than a policy's duration without waiting for them to age.
func Backdate(st *layers.Store, id string, when time.Time) error {
	return st.Update(func(tx *layers.Txn) error {
		b, err := tx.Get("x/cp/" + id)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", id, err)
		}
		var rec map[string]any
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("checkpoint %s: %v: %w", id, err, layers.ErrCorrupt)
		}
		rec["created"] = when.UTC().Format(time.RFC3339Nano)
		if b, err = json.Marshal(rec); err != nil {
			return err
		}
		return tx.Set("x/cp/"+id, b)
	})
}
