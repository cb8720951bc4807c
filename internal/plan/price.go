package plan

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpubench/gpubench/internal/results"
	"github.com/gpubench/gpubench/internal/sim"
)

// Curve is one collective's time against size, measured on a machine: a gpubench result file
// or an nccl-tests log. It prices a group with the same collective and ranks (and nodes, when the
// file says which host each rank ran on).
type Curve struct {
	File       string    `json:"file"`
	Collective string    `json:"collective"`
	Ranks      int       `json:"ranks"`
	Nodes      int       `json:"nodes"` // 0 when the file does not name the ranks' hosts
	Sizes      []int64   `json:"sizes_bytes"`
	TimesUS    []float64 `json:"-"`
}

// CurvesFrom turns a result file into curves: its out-of-place time at each size, averaged over
// the rows of that size (data types, operations). A p2p file, or a run with no row, gives none.
func CurvesFrom(f *results.File) ([]Curve, error) {
	if f.Coll == nil {
		return nil, fmt.Errorf("%s: a p2p result prices no collective; give collective runs (gpubench allreduce ... --output json, or nccl-tests logs)", f.Name)
	}
	c := f.Coll
	hosts := map[string]bool{}
	for _, d := range c.Devices {
		if d.Host != "" {
			hosts[d.Host] = true
		}
	}
	sum, count := map[int64]float64{}, map[int64]int{}
	for _, r := range c.Results {
		if r.OutOfPlace.TimeUS > 0 && r.Size > 0 {
			sum[r.Size] += r.OutOfPlace.TimeUS
			count[r.Size]++
		}
	}
	if len(sum) == 0 {
		return nil, fmt.Errorf("%s: no size with a time to price %s by", f.Name, c.Collective)
	}
	cv := Curve{File: f.Name, Collective: c.Collective, Ranks: c.Config.Ranks, Nodes: len(hosts)}
	for s := range sum {
		cv.Sizes = append(cv.Sizes, s)
	}
	slices.Sort(cv.Sizes)
	for _, s := range cv.Sizes {
		cv.TimesUS = append(cv.TimesUS, sum[s]/float64(count[s]))
	}
	return []Curve{cv}, nil
}

// at interpolates the curve linearly in size; below the smallest size it takes that size's time
// (the latency floor), above the largest it scales that time with the size (the bandwidth the
// largest size reached). extrapolated says which.
func (c *Curve) at(bytes int64) (us float64, extrapolated bool) {
	n := len(c.Sizes)
	switch {
	case bytes <= c.Sizes[0]:
		return c.TimesUS[0], bytes < c.Sizes[0]
	case bytes >= c.Sizes[n-1]:
		return c.TimesUS[n-1] * float64(bytes) / float64(c.Sizes[n-1]), bytes > c.Sizes[n-1]
	}
	i, _ := slices.BinarySearch(c.Sizes, bytes)
	x0, x1 := float64(c.Sizes[i-1]), float64(c.Sizes[i])
	y0, y1 := c.TimesUS[i-1], c.TimesUS[i]
	return y0 + (y1-y0)*(float64(bytes)-x0)/(x1-x0), false
}

// pricer times collectives: from a measured curve where one matches, else from the simulator,
// remembering every answer (a search asks for the same group and size many times).
type pricer struct {
	m      *Machine
	env    map[string]string
	curves []Curve
	cache  map[priceKey]price
}

type priceKey struct {
	coll  string
	g     group
	bytes int64
}

type price struct {
	us     float64
	source string
}

func newPricer(m *Machine, env map[string]string, curves []Curve) *pricer {
	return &pricer{m: m, env: env, curves: curves, cache: map[priceKey]price{}}
}

// time is one call of coll over group g with bytes (the size as the collective's gpubench command
// takes it: the whole buffer for allgather, reducescatter and alltoall, one rank's otherwise).
func (p *pricer) time(coll string, g group, bytes int64) (price, error) {
	bytes = max(bytes, 1)
	k := priceKey{coll, g, bytes}
	if pr, ok := p.cache[k]; ok {
		return pr, nil
	}
	nodes, _ := p.m.span(g)
	for i := range p.curves {
		c := &p.curves[i]
		if c.Collective == coll && c.Ranks == g.size() && (c.Nodes == 0 || c.Nodes == nodes) {
			us, extra := c.at(bytes)
			src := "measured " + c.File
			if extra {
				src += " (extrapolated)"
			}
			p.cache[k] = price{us, src}
			return p.cache[k], nil
		}
	}
	us, err := sim.CollectiveTime(p.m.Topo, g.devs(), p.env, coll, bytes)
	if err != nil {
		return price{}, fmt.Errorf("pricing %s of %d B over %d GPUs: %s", coll, bytes, g.size(), strings.TrimPrefix(err.Error(), sim.ErrExplain.Error()+": "))
	}
	if math.IsInf(us, 0) || math.IsNaN(us) {
		return price{}, fmt.Errorf("pricing %s of %d B over %d GPUs: the simulator gives no time", coll, bytes, g.size())
	}
	p.cache[k] = price{us, "simulator"}
	return p.cache[k], nil
}
