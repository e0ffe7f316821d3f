package correction

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/strata-sandbox/strata/layers"
)

// How a plan is stored.
//
// The plan's record (x/plan/p/ID) holds everything but its decisions, and
// how many there are ("steps"). Decision entry i (step i+1) has a key of
// its own (x/plan/d/ID/i, the index zero-padded so keys sort by step), and
// each decision id lists the indexes of its entries (x/plan/i/ID/DECISION),
// so that `step begin` and `step end` read and write the entries they
// touch, not the whole plan. With every decision in the record, a step
// decoded and encoded the plan four times, and a plan's 600th step took
// 7.5 ms against 2.0 ms for its first (BenchmarkStepLongPlan).
//
// A record written before then holds its decisions itself and has no
// "steps"; it is read as it is, and the first change of the plan moves its
// decisions to keys of their own.

func keyDecision(plan string, i int) string { return fmt.Sprintf("x/plan/d/%s/%08d", plan, i) }
func prefixDecisions(plan string) string    { return "x/plan/d/" + plan + "/" }
func keyDecisionIndex(plan, id string) string {
	return "x/plan/i/" + plan + "/" + id
}

// planRecord is the stored form of a plan: Decisions is nil unless the
// record predates decision keys.
type planRecord struct {
	Plan
	Steps int `json:"steps"`
}

// planDoc is a plan as read, with what writing it back needs to write
// only what changed.
type planDoc struct {
	p      *Plan
	stored []Decision // the decisions as read
	inline bool       // read from a record that holds its decisions
}

// newPlanDoc is a plan that is not stored yet.
func newPlanDoc(p *Plan) *planDoc { return &planDoc{p: p} }

// readRecord reads plan id's record.
func readRecord(tx *layers.Txn, id string) (*planRecord, error) {
	var r planRecord
	if err := getJSON(tx, keyPlan(id), "plan "+id, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// readPlan reads plan id whole.
func readPlan(tx *layers.Txn, id string) (*planDoc, error) {
	r, err := readRecord(tx, id)
	if err != nil {
		return nil, err
	}
	p := r.Plan
	if p.Decisions != nil {
		return &planDoc{p: &p, stored: slices.Clone(p.Decisions), inline: true}, nil
	}
	p.Decisions = make([]Decision, 0, r.Steps)
	prefix := prefixDecisions(id)
	err = tx.Scan(prefix, func(key string, val []byte) error {
		i, err := strconv.Atoi(strings.TrimPrefix(key, prefix))
		if err != nil || i != len(p.Decisions) || i >= r.Steps {
			return fmt.Errorf("plan %s: stray decision key %s: %w", id, key, layers.ErrCorrupt)
		}
		var d Decision
		if err := json.Unmarshal(val, &d); err != nil {
			return fmt.Errorf("plan %s: decision %d: %v: %w", id, i, err, layers.ErrCorrupt)
		}
		if d.Step != i+1 {
			return fmt.Errorf("plan %s: entry %d holds step %d: %w", id, i, d.Step, layers.ErrCorrupt)
		}
		p.Decisions = append(p.Decisions, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(p.Decisions) != r.Steps {
		return nil, fmt.Errorf("plan %s: %d of %d decisions stored: %w", id, len(p.Decisions), r.Steps, layers.ErrCorrupt)
	}
	return &planDoc{p: &p, stored: slices.Clone(p.Decisions)}, nil
}

// getPlan reads plan id whole.
func getPlan(tx *layers.Txn, id string) (*Plan, error) {
	d, err := readPlan(tx, id)
	if err != nil {
		return nil, err
	}
	return d.p, nil
}

// write stores the plan: its record, the decision entries that are new or
// changed since it was read, and the index of each id that got an entry.
// Entries are only ever added.
func (d *planDoc) write(tx *layers.Txn) error {
	p := d.p
	from := len(d.stored) // the first new entry
	if d.inline {
		from = 0
	}
	if len(p.Decisions) < len(d.stored) {
		return fmt.Errorf("plan %s: %d decisions, %d before: %w", p.Name, len(p.Decisions), len(d.stored), layers.ErrInvalid)
	}
	added := map[string][]int{}
	var ids []string
	for i, dec := range p.Decisions {
		if i >= from {
			if added[dec.ID] == nil {
				ids = append(ids, dec.ID)
			}
			added[dec.ID] = append(added[dec.ID], i)
		} else if dec == d.stored[i] {
			continue
		}
		if err := putJSON(tx, keyDecision(p.ID, i), dec); err != nil {
			return err
		}
	}
	for _, id := range ids {
		var idx []int
		if !d.inline {
			var err error
			if idx, err = readIndex(tx, p.ID, id); err != nil {
				return err
			}
		}
		if err := putJSON(tx, keyDecisionIndex(p.ID, id), append(idx, added[id]...)); err != nil {
			return err
		}
	}
	r := planRecord{Plan: *p, Steps: len(p.Decisions)}
	r.Decisions = nil
	if err := putJSON(tx, keyPlan(p.ID), r); err != nil {
		return err
	}
	d.stored, d.inline = slices.Clone(p.Decisions), false
	return nil
}

// readIndex reads the indexes of decision id's entries in plan; none when
// it has none.
func readIndex(tx *layers.Txn, plan, id string) ([]int, error) {
	b, err := tx.Get(keyDecisionIndex(plan, id))
	if errors.Is(err, layers.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var idx []int
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("plan %s: index of decision %s: %v: %w", plan, id, err, layers.ErrCorrupt)
	}
	return idx, nil
}

// stepDoc is what a step of a plan reads and writes: the plan's record
// without its decisions, how many it has, and the entries of one
// decision id.
type stepDoc struct {
	p       *Plan // Decisions nil, except for a record that predates keys
	did     string
	steps   int
	idx     []int      // indexes of the id's entries
	ds      []Decision // the id's entries, in step order
	stored  []Decision // ds as read
	whole   *planDoc   // the plan read whole (an inline record)
	touched bool       // steps changed: the record is written
}

// readStep reads plan id's record and the entries of decision did.
func readStep(tx *layers.Txn, id, did string) (*stepDoc, error) {
	r, err := readRecord(tx, id)
	if err != nil {
		return nil, err
	}
	p := r.Plan
	if p.Decisions != nil {
		// Older record: everything is in it; it is written whole, in the
		// new form.
		s := &stepDoc{p: &p, did: did, steps: len(p.Decisions), whole: &planDoc{p: &p, stored: slices.Clone(p.Decisions), inline: true}}
		for i, d := range p.Decisions {
			if d.ID == did {
				s.idx = append(s.idx, i)
				s.ds = append(s.ds, d)
			}
		}
		s.stored = slices.Clone(s.ds)
		return s, nil
	}
	s := &stepDoc{p: &p, did: did, steps: r.Steps}
	if s.idx, err = readIndex(tx, id, did); err != nil {
		return nil, err
	}
	for _, i := range s.idx {
		b, err := tx.Get(keyDecision(id, i))
		if err != nil && !errors.Is(err, layers.ErrNotFound) {
			return nil, err
		}
		var d Decision
		if err == nil {
			err = json.Unmarshal(b, &d)
		}
		if err != nil || i >= r.Steps || d.ID != did || d.Step != i+1 {
			return nil, fmt.Errorf("plan %s: entry %d of decision %s: %w", id, i, did, layers.ErrCorrupt)
		}
		s.ds = append(s.ds, d)
	}
	s.stored = slices.Clone(s.ds)
	return s, nil
}

// latest is the newest entry of the decision, or nil.
func (s *stepDoc) latest() *Decision {
	if len(s.ds) == 0 {
		return nil
	}
	return &s.ds[len(s.ds)-1]
}

// add appends an entry of the decision as the plan's next step.
func (s *stepDoc) add(d Decision) {
	s.idx = append(s.idx, s.steps)
	s.ds = append(s.ds, d)
	s.steps++
	s.touched = true
}

// write stores what the step changed.
func (s *stepDoc) write(tx *layers.Txn) error {
	if s.whole != nil {
		p := s.whole.p
		for k, i := range s.idx {
			if i < len(p.Decisions) {
				p.Decisions[i] = s.ds[k]
			} else {
				p.Decisions = append(p.Decisions, s.ds[k])
			}
		}
		return s.whole.write(tx)
	}
	for k, i := range s.idx {
		if k < len(s.stored) && s.ds[k] == s.stored[k] {
			continue
		}
		if err := putJSON(tx, keyDecision(s.p.ID, i), s.ds[k]); err != nil {
			return err
		}
	}
	if !s.touched {
		return nil
	}
	if err := putJSON(tx, keyDecisionIndex(s.p.ID, s.did), s.idx); err != nil {
		return err
	}
	r := planRecord{Plan: *s.p, Steps: s.steps}
	return putJSON(tx, keyPlan(s.p.ID), r)
}
