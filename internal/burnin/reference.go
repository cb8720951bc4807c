package burnin

import (
	"fmt"

	"github.com/gpubench/gpubench/internal/results"
)

// Reference is bus bandwidth to hold to, GB/s by collective and size, from result files that
// `gpubench <collective>` wrote (read by internal/results, as compare and plot read them).
type Reference map[string]map[int64]float64

// Add takes a collective run's out-of-place busbw, the best per size over every file added, and
// skips 0-byte rows, which carry no bandwidth (all-gather's smallest sizes on many GPUs).
func (ref Reference) Add(c *results.Coll) error {
	m := ref[c.Collective]
	if m == nil {
		m = map[int64]float64{}
	}
	for _, r := range c.Results {
		if r.Size > 0 {
			m[r.Size] = max(m[r.Size], r.OutOfPlace.BusBW)
		}
	}
	if len(m) == 0 {
		return fmt.Errorf("no row of %s above 0 bytes to hold to", c.Collective)
	}
	ref[c.Collective] = m
	return nil
}
