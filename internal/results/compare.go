package results

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Verdicts of a compared row (docs/results.md, "The regression rule").
const (
	Same       = "same"       // within the threshold
	Regression = "regression" // bandwidth fell past the threshold, beyond the runs' noise
	Improved   = "improved"   // bandwidth rose past the threshold, beyond the runs' noise
	Noisy      = "noisy"      // past the threshold, but within the runs' per-iteration spread
	NoFigure   = "n/a"        // OLD has no bandwidth to compare with (0 B rows), or a log printed one too coarsely (0.00)
	OnlyOld    = "only_old"   // the row is only in OLD
	OnlyNew    = "only_new"   // the row is only in NEW
	WrongData  = "wrong_data" // NEW delivered wrong data there (#wrong > 0): a failure at any speed
)

// Placement names, in JSON and in the table.
const (
	OutOfPlace = "out_of_place"
	InPlace    = "in_place"
)

// Line is one row and placement compared.
type Line struct {
	Key       RowKey
	Placement string     // OutOfPlace or InPlace
	Old, New  *Placement // nil on the side the row is missing from
	Measure   string     // "busbw", or "algbw" when busbw is 0 by definition on both sides
	BWChange  *float64   // new/old - 1 of the measure; nil when OLD's is 0
	TimeDelta *float64   // new/old - 1 of the time; nil when OLD's is 0
	Verdict   string
	Noise     string // the noise test applied, when both sides carry per-iteration times
}

// Comparison is NEW set against OLD.
type Comparison struct {
	Old, New  *File
	Threshold float64
	Lines     []Line
	Counts    map[string]int // lines per verdict
	Notes     []string       // differences between the runs that bear on the comparison
}

// Compare sets every row of new against the row of old with the same key, out-of-place and
// in-place apart. threshold is a fraction (0.05 for 5%).
func Compare(old, new *File, threshold float64) (*Comparison, error) {
	if old.Coll == nil || new.Coll == nil {
		for _, f := range []*File{old, new} {
			if f.Coll == nil {
				return nil, fmt.Errorf("%s: compare reads collective results; this is a p2p result", f.Name)
			}
		}
	}
	oc, nc := old.Coll, new.Coll
	cmp := &Comparison{Old: old, New: new, Threshold: threshold, Counts: map[string]int{}}
	if oc.Collective != nc.Collective {
		cmp.Notes = append(cmp.Notes, fmt.Sprintf("OLD is %s and NEW is %s: no row can match", oc.Collective, nc.Collective))
	}
	if oc.Config.Ranks != nc.Config.Ranks {
		cmp.Notes = append(cmp.Notes, fmt.Sprintf("OLD ran on %d rank%s and NEW on %d", oc.Config.Ranks, plural(oc.Config.Ranks), nc.Config.Ranks))
	}
	if oc.Backend != nc.Backend || oc.Topology != nc.Topology {
		cmp.Notes = append(cmp.Notes, fmt.Sprintf("OLD ran on %s and NEW on %s", where(oc), where(nc)))
	}
	for _, f := range []*File{old, new} {
		if !f.Complete {
			cmp.Notes = append(cmp.Notes, fmt.Sprintf("%s did not finish: only its %d rows are compared", f.Name, len(f.Coll.Results)))
		}
	}
	// A run of several cycles (-N) set against a run of one: rows match without their cycle, so
	// each cycle's row is set against the other run's one row of that key.
	mixed := cycled(oc) != cycled(nc)
	if mixed {
		cmp.Notes = append(cmp.Notes, "one run repeats its sweep (-N) and the other does not: each cycle is set against the other run's one sweep")
	}
	match := func(k RowKey) RowKey {
		if mixed {
			k.Cycle = 0
		}
		return k
	}
	olds := map[RowKey][]Row{}
	for _, r := range oc.Results {
		k := match(r.Key(oc.Collective))
		olds[k] = append(olds[k], r)
	}
	matched := map[RowKey]bool{}
	zero := oc.ZeroBusBW && nc.ZeroBusBW
	for _, nr := range nc.Results {
		k := match(nr.Key(nc.Collective))
		ors := olds[k]
		matched[k] = matched[k] || len(ors) > 0
		for _, pl := range []string{OutOfPlace, InPlace} {
			np := pick(nr, pl)
			if len(ors) == 0 {
				cmp.Lines = append(cmp.Lines, Line{Key: nr.Key(nc.Collective), Placement: pl, New: &np, Verdict: wrongOr(np, OnlyNew)})
			}
			for _, or := range ors {
				op := pick(or, pl)
				l := Line{Key: nr.Key(nc.Collective), Placement: pl, Old: &op, New: &np}
				if or.Cycle > 0 {
					l.Key.Cycle = or.Cycle // NEW has one cycle, OLD several
				}
				judge(&l, threshold, zero)
				l.Verdict = wrongOr(np, l.Verdict)
				cmp.Lines = append(cmp.Lines, l)
			}
		}
	}
	for _, or := range oc.Results {
		if matched[match(or.Key(oc.Collective))] {
			continue
		}
		for _, pl := range []string{OutOfPlace, InPlace} {
			op := pick(or, pl)
			cmp.Lines = append(cmp.Lines, Line{Key: or.Key(oc.Collective), Placement: pl, Old: &op, Verdict: OnlyOld})
		}
	}
	sort.SliceStable(cmp.Lines, func(i, j int) bool { return less(cmp.Lines[i], cmp.Lines[j]) })
	for _, l := range cmp.Lines {
		cmp.Counts[l.Verdict]++
	}
	if n := wrongPlacements(oc); n > 0 {
		cmp.Notes = append(cmp.Notes, fmt.Sprintf("OLD delivered wrong data in %d row placement%s: its figures are a faulty run's", n, plural(n)))
	}
	return cmp, nil
}

// wrongOr is WrongData when p delivered wrong data, else verdict.
func wrongOr(p Placement, verdict string) string {
	if wrong(p) {
		return WrongData
	}
	return verdict
}

func wrong(p Placement) bool { return p.Wrong != nil && *p.Wrong > 0 }

// wrongPlacements counts c's row placements that delivered wrong data.
func wrongPlacements(c *Coll) int {
	n := 0
	for _, r := range c.Results {
		if wrong(r.OutOfPlace) {
			n++
		}
		if wrong(r.InPlace) {
			n++
		}
	}
	return n
}

// Regressions is the number of lines judged a regression.
func (c *Comparison) Regressions() int { return c.Counts[Regression] }

// Wrong is the number of NEW's row placements that delivered wrong data (each may be set against
// several of OLD's, one per cycle, as several lines).
func (c *Comparison) Wrong() int { return wrongPlacements(c.New.Coll) }

func where(c *Coll) string {
	if c.Topology != "" {
		return fmt.Sprintf("backend %s, topology %s", c.Backend, c.Topology)
	}
	return "backend " + c.Backend
}

func pick(r Row, placement string) Placement {
	if placement == InPlace {
		return r.InPlace
	}
	return r.OutOfPlace
}

// cycled says whether c repeats its sweep (-N): its rows carry cycle numbers.
func cycled(c *Coll) bool {
	return slices.ContainsFunc(c.Results, func(r Row) bool { return r.Cycle > 0 })
}

func less(a, b Line) bool {
	ka, kb := a.Key, b.Key
	switch {
	case ka.Collective != kb.Collective:
		return ka.Collective < kb.Collective
	case ka.Cycle != kb.Cycle:
		return ka.Cycle < kb.Cycle
	case ka.Type != kb.Type:
		return ka.Type < kb.Type
	case ka.Op != kb.Op:
		return ka.Op < kb.Op
	case ka.Root != kb.Root:
		return ka.Root < kb.Root
	case ka.Size != kb.Size:
		return ka.Size < kb.Size
	}
	return a.Placement == OutOfPlace && b.Placement == InPlace
}

// judge applies the regression rule: the bandwidth moved by more than the threshold, and, when
// both sides carry per-iteration times, the move is past the runs' spread: a slowdown counts when
// NEW's median iteration is slower than OLD's 95th percentile, a speed-up when OLD's median is
// slower than NEW's 95th percentile. Otherwise the line is noisy.
func judge(l *Line, threshold float64, zeroBusBW bool) {
	o, n := l.Old, l.New
	l.Measure = "busbw"
	ob, nb := o.BusBW, n.BusBW
	if zeroBusBW || (ob == 0 && nb == 0) {
		l.Measure, ob, nb = "algbw", o.AlgBW, n.AlgBW
	}
	if o.TimeUS > 0 {
		d := n.TimeUS/o.TimeUS - 1
		l.TimeDelta = &d
	}
	// A figure read from a log is the run's to the digits printed: a move within them is no move.
	slack := o.slack + n.slack
	if !(ob > 0) || slack >= 1 {
		l.Verdict = NoFigure
		return
	}
	change := nb/ob - 1
	l.BWChange = &change
	const ulp = 1e-9 // a move of exactly the threshold is within it: 95 / 100 - 1 is -0.050000000000000044
	switch {
	case math.Abs(change) <= slack+ulp:
		l.Verdict = Same
	case change < -threshold-ulp-slack:
		l.Verdict = Regression
		if o.PerIter != nil && n.PerIter != nil {
			beyond := n.PerIter.P50US > o.PerIter.P95US
			l.Noise = fmt.Sprintf("NEW p50 %.4g us %s OLD p95 %.4g us", n.PerIter.P50US, cmpWord(beyond), o.PerIter.P95US)
			if !beyond {
				l.Verdict = Noisy
			}
		}
	case change > threshold+ulp+slack:
		l.Verdict = Improved
		if o.PerIter != nil && n.PerIter != nil {
			beyond := o.PerIter.P50US > n.PerIter.P95US
			l.Noise = fmt.Sprintf("OLD p50 %.4g us %s NEW p95 %.4g us", o.PerIter.P50US, cmpWord(beyond), n.PerIter.P95US)
			if !beyond {
				l.Verdict = Noisy
			}
		}
	default:
		l.Verdict = Same
	}
}

func cmpWord(above bool) string {
	if above {
		return ">"
	}
	return "<="
}

// ParseThreshold reads compare's --threshold, a percentage ("5%" or "5", from 0 to 100). A bare
// number below 1 is refused: "0.05" could mean 5% written as a fraction or 0.05%, and guessing
// wrong hides regressions.
func ParseThreshold(s string) (percent float64, err error) {
	num, pct := strings.CutSuffix(strings.TrimSpace(s), "%")
	t, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	switch {
	case err != nil || !(t >= 0 && t < 100):
		return 0, fmt.Errorf("%q: give a percentage from 0 up to (not including) 100, e.g. 5%%", s)
	case !pct && t > 0 && t < 1:
		return 0, fmt.Errorf("%q: the threshold is in percent; write %s%% for %s percent, or %g%% for the fraction %s", s, num, num, 100*t, num)
	}
	return t, nil
}
