package results

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Formats are compare's --output values.
var Formats = []string{"table", "markdown", "json"}

// WriteCompare writes comparisons (one per NEW file, each against the same OLD) in a format.
func WriteCompare(w io.Writer, format string, cmps []*Comparison) error {
	switch format {
	case "table":
		return compareTable(w, cmps)
	case "markdown":
		return compareMarkdown(w, cmps)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(compareJSON(cmps))
	}
	return fmt.Errorf("unknown output format %q: use %s", format, strings.Join(Formats, ", "))
}

func describe(f *File) string {
	c := f.Coll
	s := fmt.Sprintf("%s, %s, %d rank%s", c.Collective, where(c), c.Config.Ranks, plural(c.Config.Ranks))
	if !f.Complete {
		s += ", did not finish"
	}
	return s
}

func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	p := math.Round(1000**v) / 10
	if p == 0 {
		p = 0 // no "-0.0%"
	}
	return fmt.Sprintf("%+.1f%%", p)
}

func num(p *Placement, v func(*Placement) float64) string {
	if p == nil {
		return "-"
	}
	if x := v(p); x > 0 && x < 0.995 { // three digits where two decimals would leave one or none
		return fmt.Sprintf("%.*f", min(2-int(math.Floor(math.Log10(x))), 9), x)
	}
	return fmt.Sprintf("%.2f", v(p))
}

func bwOf(l Line) func(*Placement) float64 {
	if l.Measure == "algbw" {
		return func(p *Placement) float64 { return p.AlgBW }
	}
	return func(p *Placement) float64 { return p.BusBW }
}

func timeOf(p *Placement) float64 { return p.TimeUS }

func opText(op string) string {
	if op == "" {
		return "none"
	}
	return op
}

func shortPlace(p string) string {
	if p == InPlace {
		return "in"
	}
	return "out"
}

func verdictText(l Line) string {
	v := l.Verdict
	switch v {
	case Regression:
		v = "REGRESSION"
	case WrongData:
		v = "WRONG DATA"
	case OnlyOld:
		v = "only in OLD"
	case OnlyNew:
		v = "only in NEW"
	}
	if l.Noise != "" {
		v += " (" + l.Noise + ")"
	}
	if l.Measure == "algbw" {
		v += " [algbw]"
	}
	return v
}

// cycles says whether a line of c belongs to a cycle of a repeated sweep (-N): the table then
// has a cycle column.
func (c *Comparison) cycles() bool {
	return slices.ContainsFunc(c.Lines, func(l Line) bool { return l.Key.Cycle > 0 })
}

// cycleCell is a table's cycle cell, or nothing when the table has no cycle column.
func cycleCell(cycles bool, v string) string {
	if !cycles {
		return ""
	}
	return fmt.Sprintf("  %5s", v)
}

func summary(c *Comparison) string {
	n := c.Counts
	wrong := ""
	if n[WrongData] > 0 {
		wrong = fmt.Sprintf("%d with wrong data, ", n[WrongData])
	}
	return fmt.Sprintf("%s%d regression%s, %d noisy, %d improved, %d same, %d n/a; %d only in OLD, %d only in NEW (row placements)",
		wrong, n[Regression], plural(n[Regression]), n[Noisy], n[Improved], n[Same], n[NoFigure], n[OnlyOld], n[OnlyNew])
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func thresholdText(t float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", 100*t), "0"), ".") + "%"
}

func compareTable(w io.Writer, cmps []*Comparison) error {
	for i, c := range cmps {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "# gpubench compare: busbw change past %s is a regression; where both runs have per-iteration times, only beyond their spread\n", thresholdText(c.Threshold))
		fmt.Fprintf(w, "# OLD %s: %s\n", c.Old.Name, describe(c.Old))
		fmt.Fprintf(w, "# NEW %s: %s\n", c.New.Name, describe(c.New))
		for _, n := range c.Notes {
			fmt.Fprintf(w, "# Note: %s\n", n)
		}
		cycles := c.cycles()
		fmt.Fprintf(w, "#\n# %12s%s  %12s  %8s  %6s  %4s  %5s  %9s  %9s  %7s  %9s  %9s  %7s  %s\n",
			"collective", cycleCell(cycles, "cycle"), "size", "type", "redop", "root", "place", "old busbw", "new busbw", "change", "old time", "new time", "change", "verdict")
		fmt.Fprintf(w, "# %12s%s  %12s  %8s  %6s  %4s  %5s  %9s  %9s  %7s  %9s  %9s  %7s\n",
			"", cycleCell(cycles, ""), "(B)", "", "", "", "", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "")
		for _, l := range c.Lines {
			bw := bwOf(l)
			fmt.Fprintf(w, "  %12s%s  %12d  %8s  %6s  %4d  %5s  %9s  %9s  %7s  %9s  %9s  %7s  %s\n",
				l.Key.Collective, cycleCell(cycles, strconv.Itoa(l.Key.Cycle)), l.Key.Size, l.Key.Type, opText(l.Key.Op), l.Key.Root, shortPlace(l.Placement),
				num(l.Old, bw), num(l.New, bw), pct(l.BWChange), num(l.Old, timeOf), num(l.New, timeOf), pct(l.TimeDelta), verdictText(l))
		}
		fmt.Fprintf(w, "# %s\n", summary(c))
	}
	return nil
}

func compareMarkdown(w io.Writer, cmps []*Comparison) error {
	for i, c := range cmps {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "**gpubench compare**: OLD `%s` (%s) against NEW `%s` (%s); threshold %s\n\n",
			c.Old.Name, describe(c.Old), c.New.Name, describe(c.New), thresholdText(c.Threshold))
		cycles := c.cycles()
		head, rule := "| collective |", "|---|"
		if cycles {
			head, rule = head+" cycle |", rule+"---:|"
		}
		fmt.Fprintln(w, head+" size (B) | type | redop | root | placement | OLD busbw (GB/s) | NEW busbw (GB/s) | change | OLD time (us) | NEW time (us) | change | verdict |")
		fmt.Fprintln(w, rule+"---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
		for _, l := range c.Lines {
			bw := bwOf(l)
			v := verdictText(l)
			if l.Verdict == Regression || l.Verdict == WrongData {
				v = "**" + v + "**"
			}
			cell := ""
			if cycles {
				cell = fmt.Sprintf(" %d |", l.Key.Cycle)
			}
			fmt.Fprintf(w, "| %s |%s %d | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				l.Key.Collective, cell, l.Key.Size, l.Key.Type, opText(l.Key.Op), l.Key.Root, strings.ReplaceAll(l.Placement, "_", "-"),
				num(l.Old, bw), num(l.New, bw), pct(l.BWChange), num(l.Old, timeOf), num(l.New, timeOf), pct(l.TimeDelta), v)
		}
		fmt.Fprintf(w, "\n%s.\n", summary(c))
		for _, n := range c.Notes {
			fmt.Fprintf(w, "\n> Note: %s\n", n)
		}
	}
	return nil
}

type jsonCompare struct {
	Threshold   float64          `json:"threshold_percent"`
	Old         jsonFileInfo     `json:"old"`
	Comparisons []jsonComparison `json:"comparisons"`
	Regressions int              `json:"regressions"`
	WrongData   int              `json:"wrong_data"` // row placements where NEW delivered wrong data
}

type jsonFileInfo struct {
	File       string     `json:"file"`
	Form       string     `json:"form"`
	Complete   bool       `json:"complete"`
	Collective string     `json:"collective"`
	Backend    string     `json:"backend"`
	Topology   NullString `json:"topology"`
	Ranks      int        `json:"ranks"`
	Rows       int        `json:"rows"`
	Notices    []string   `json:"notices"`
}

type jsonComparison struct {
	New    jsonFileInfo     `json:"new"`
	Notes  []string         `json:"notes"`
	Counts map[string]int   `json:"counts"`
	Rows   []jsonCompareRow `json:"rows"`
}

type jsonCompareRow struct {
	Collective string    `json:"collective"`
	Cycle      int       `json:"cycle,omitempty"`
	Size       int64     `json:"size_bytes"`
	Type       string    `json:"type"`
	Op         *string   `json:"redop"`
	Root       *int      `json:"root"`
	Placement  string    `json:"placement"`
	Measure    *string   `json:"measure"`
	Old        *jsonSide `json:"old"`
	New        *jsonSide `json:"new"`
	BWChange   *float64  `json:"bw_change"`
	TimeChange *float64  `json:"time_change"`
	Verdict    string    `json:"verdict"`
	Noise      *string   `json:"noise_test"`
}

type jsonSide struct {
	TimeUS      float64  `json:"time_us"`
	AlgBW       float64  `json:"algbw_gbs"`
	BusBW       float64  `json:"busbw_gbs"`
	SlowestRank *int     `json:"slowest_rank"`
	P50         *float64 `json:"p50_us"`
	P95         *float64 `json:"p95_us"`
	CV          *float64 `json:"cv"`
}

func fileInfo(f *File) jsonFileInfo {
	c := f.Coll
	return jsonFileInfo{File: f.Name, Form: f.Form, Complete: f.Complete, Collective: c.Collective, Backend: c.Backend,
		Topology: c.Topology, Ranks: c.Config.Ranks, Rows: len(c.Results), Notices: append([]string{}, f.Notices...)}
}

func side(p *Placement) *jsonSide {
	if p == nil {
		return nil
	}
	s := &jsonSide{TimeUS: p.TimeUS, AlgBW: p.AlgBW, BusBW: p.BusBW, SlowestRank: p.SlowestRank}
	if pi := p.PerIter; pi != nil {
		s.P50, s.P95, s.CV = &pi.P50US, &pi.P95US, &pi.CV
	}
	return s
}

func compareJSON(cmps []*Comparison) jsonCompare {
	doc := jsonCompare{Comparisons: []jsonComparison{}}
	for i, c := range cmps {
		if i == 0 {
			doc.Threshold, doc.Old = 100*c.Threshold, fileInfo(c.Old)
		}
		jc := jsonComparison{New: fileInfo(c.New), Notes: append([]string{}, c.Notes...), Counts: map[string]int{}, Rows: []jsonCompareRow{}}
		for _, v := range []string{Same, Regression, Improved, Noisy, NoFigure, OnlyOld, OnlyNew, WrongData} {
			jc.Counts[v] = c.Counts[v]
		}
		for _, l := range c.Lines {
			r := jsonCompareRow{Collective: l.Key.Collective, Cycle: l.Key.Cycle, Size: l.Key.Size, Type: l.Key.Type, Placement: l.Placement,
				Old: side(l.Old), New: side(l.New), BWChange: l.BWChange, TimeChange: l.TimeDelta, Verdict: l.Verdict}
			if l.Key.Op != "" {
				op := l.Key.Op
				r.Op = &op
			}
			if l.Key.Root >= 0 {
				root := l.Key.Root
				r.Root = &root
			}
			if l.Measure != "" {
				m := l.Measure
				r.Measure = &m
			}
			if l.Noise != "" {
				n := l.Noise
				r.Noise = &n
			}
			jc.Rows = append(jc.Rows, r)
		}
		doc.Regressions += c.Regressions()
		doc.WrongData += c.Wrong()
		doc.Comparisons = append(doc.Comparisons, jc)
	}
	return doc
}
