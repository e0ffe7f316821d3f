package correction

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkStepLongPlan times one step (begin and end, each taking its
// checkpoint) of a plan that already has depth steps: a step must cost
// the same at step 600 as at step 1.
func BenchmarkStepLongPlan(b *testing.B) {
	for _, depth := range []int{0, 600} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			e := newEnv(b, nil)
			if _, err := e.plans.Create("p", CreateOptions{Sandbox: "s", CheckpointOn: []string{BeforeStep, AfterStep}}); err != nil {
				b.Fatal(err)
			}
			step := func(i int) {
				id := fmt.Sprintf("D%d", i)
				if _, err := e.plans.Begin("p", id, "step"); err != nil {
					b.Fatal(err)
				}
				e.write(fmt.Sprintf("f%d", i%50), id)
				if _, err := e.plans.End("p", id, false); err != nil {
					b.Fatal(err)
				}
			}
			for i := range depth {
				step(i)
			}
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				step(depth + i)
				took = append(took, time.Since(t0))
			}
			b.StopTimer()
			b.ReportMetric(float64(p50(took).Microseconds())/1000, "p50-ms")
		})
	}
}

// p50 is the median of ds.
func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
