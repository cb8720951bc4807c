// Package report renders gpubench's results: nccl-tests' table, JSON, CSV and Markdown. JSON is
// written in internal/results' schema, the one that compare, plot and burnin --reference read.
package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/results"
)

// Formats are the values of --output.
var Formats = []string{"table", "json", "csv", "markdown"}

// CollRun is what a collective run's output says besides its rows.
type CollRun struct {
	Version  string
	Coll     *coll.Collective
	Backend  string
	Topology string // the simulated machine; empty on real GPUs
	Runtime  string // on real GPUs: the CUDA and NCCL versions and the libraries loaded
	Opt      coll.Options
	PID      int
	// PIDs is every rank's process id when the run spans processes (nil: PID for every rank).
	PIDs []int
	// Launch says, for a run across processes, who started it and where the ranks met.
	Launch  string
	Start   time.Time
	DataCap int64 // the simulator's data cap, bytes; 0 for a real backend
	// Threads is how many host threads launch a process's GPUs (nccl-tests' nThread); 0 means 1.
	Threads int
	// Expect, with --expect, says where the rows' Expected figures come from; nil without.
	Expect *Expectation
	// MinBusBW is NCCL_TESTS_MIN_BW: the run fails when its average bus bandwidth is under 0.9 of
	// it, as nccl-tests fails it (nil: not checked).
	MinBusBW *float64
	Summary  *coll.Summary
}

// AvgBusBWFailed says whether the run's average bus bandwidth is under 0.9 of NCCL_TESTS_MIN_BW.
func (r *CollRun) AvgBusBWFailed() bool {
	return r.MinBusBW != nil && r.Summary != nil && r.Summary.AvgBusBW < 0.9**r.MinBusBW
}

// avgBusBWVerdict is what nccl-tests prints after the average bus bandwidth: OK or FAILED against
// NCCL_TESTS_MIN_BW, nothing without it.
func (r *CollRun) avgBusBWVerdict() string {
	switch {
	case r.MinBusBW == nil:
		return ""
	case r.AvgBusBWFailed():
		return "FAILED"
	}
	return "OK"
}

// CollWriter writes a run as it happens: Start once the devices are known, Row per measured size,
// End with the totals.
type CollWriter interface {
	Start(r *CollRun) error
	Row(r *CollRun, res coll.Result) error
	End(r *CollRun) error
}

// NewCollWriter returns the writer for an --output format.
func NewCollWriter(format string, w io.Writer) (CollWriter, error) {
	switch format {
	case "table":
		return &tableWriter{w: w}, nil
	case "json":
		return &jsonWriter{w: w}, nil
	case "csv":
		return &csvWriter{w: csv.NewWriter(w)}, nil
	case "markdown":
		return &markdownWriter{w: w}, nil
	}
	return nil, fmt.Errorf("unknown output format %q: use %s", format, strings.Join(Formats, ", "))
}

// floatStr formats v to fit width as nccl-tests' getFloatStr does: %.2f, %.1f, %.0f, then
// exponent forms.
func floatStr(v float64, width int) string {
	for _, f := range []string{"%.2f", "%.1f", "%.0f"} {
		if s := fmt.Sprintf(f, v); len(s) <= width {
			return s
		}
	}
	if width >= 7 {
		return fmt.Sprintf("%.1e", v)
	}
	return fmt.Sprintf("%.0e", v)
}

func stepText(w coll.Sweep) string {
	if w.Factor > 1 {
		return fmt.Sprintf("%d(factor)", w.Factor)
	}
	return fmt.Sprintf("%d(bytes)", w.Step)
}

// blockingLines are nccl-tests' header lines for -z.
var blockingLines = map[coll.Blocking]string{
	1: "# Blocking Enabled: wait and barrier after each inner iteration (-m) ",
	2: "# Blocking Enabled: wait after each inner iteration (-m), no barrier ",
	3: "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier ",
}

// notes are the lines gpubench adds to nccl-tests' header and footer.
func headerNotes(r *CollRun) []string {
	s := r.Summary
	var notes []string
	if s.ClampedFrom > 0 {
		notes = append(notes, fmt.Sprintf("Reducing maxBytes to %d due to memory limitation", s.Sweep.Max))
	}
	if r.Coll.Factor(len(s.Devices)) == 0 {
		notes = append(notes, fmt.Sprintf("With %d rank, busbw is 0 by definition (busbw = algbw x %s): read algbw", len(s.Devices), factorText(r.Coll)))
	}
	if r.Opt.CPUTime {
		notes = append(notes, "Time is the host's launch time per collective (-C); algbw and busbw come from the completion time")
	}
	switch c := r.Opt.Cycles; {
	case c < 0:
		notes = append(notes, "The sweep repeats until interrupted (-N 0)")
	case c > 1:
		notes = append(notes, fmt.Sprintf("The sweep runs %d times (-N %d), each cycle's rows after the last's", c, c))
	}
	return notes
}

// NoticeWriter writes the header's notes (a sweep cut to the GPUs' memory, busbw 0 by definition,
// -C, -N) to w as notices, for a format with no place for them (CSV), where the rows alone would
// not say that they are not what was asked.
func NoticeWriter(w io.Writer) CollWriter { return noticeWriter{w} }

type noticeWriter struct{ w io.Writer }

func (n noticeWriter) Start(r *CollRun) error {
	for _, note := range headerNotes(r) {
		if _, err := fmt.Fprintf(n.w, "gpubench: %s\n", note); err != nil {
			return err
		}
	}
	return nil
}

func (noticeWriter) Row(*CollRun, coll.Result) error { return nil }
func (noticeWriter) End(*CollRun) error              { return nil }

func factorText(c *coll.Collective) string {
	switch c.Factor(4) {
	case 1.5:
		return "2(n-1)/n"
	case 0.75:
		return "(n-1)/n"
	}
	return "1"
}

// pid is rank's process id.
func (r *CollRun) pid(rank int) int {
	if rank < len(r.PIDs) {
		return r.PIDs[rank]
	}
	return r.PID
}

// slowest names, for a run across processes, the rank that was slowest most often.
func slowest(s *coll.Summary) string {
	counts := map[int]int{}
	total, ties := 0, 0
	for _, res := range s.Results {
		for _, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
			switch {
			case p.SlowestRank != nil:
				counts[*p.SlowestRank]++
				total++
			case p.RankTimesUS != nil:
				ties++
				total++
			}
		}
	}
	if total == 0 {
		return ""
	}
	if ties == total {
		return fmt.Sprintf("Slowest rank         : none, every rank took the same time in all %d results", total)
	}
	ranks := make([]int, 0, len(counts))
	for r := range counts {
		ranks = append(ranks, r)
	}
	sort.Slice(ranks, func(i, j int) bool {
		a, b := ranks[i], ranks[j]
		return counts[a] > counts[b] || counts[a] == counts[b] && a < b
	})
	var parts []string
	for _, r := range ranks {
		parts = append(parts, fmt.Sprintf("rank %d in %d", r, counts[r]))
	}
	if ties > 0 {
		parts = append(parts, fmt.Sprintf("a tie in %d", ties))
	}
	return fmt.Sprintf("Slowest rank         : %s of %d results (per result in JSON)", strings.Join(parts, ", "), total)
}

// WrongRanks lists, rank by rank, where the checks found wrong data: a GPU that corrupts what it
// receives shows as the one rank whose output is wrong; a fault on the way shows in the ranks
// downstream of it.
func WrongRanks(s *coll.Summary) []results.WrongRank {
	var out []results.WrongRank
	for rank, d := range s.Devices {
		w := results.WrongRank{Rank: rank, Device: d.Ordinal, Host: d.Host}
		for _, res := range s.Results {
			for _, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
				if rank < len(p.WrongByRank) && p.WrongByRank[rank] > 0 {
					w.Results++
					w.Elements += p.WrongByRank[rank]
				}
			}
		}
		if w.Results > 0 {
			out = append(out, w)
		}
	}
	return out
}

// WrongRanksText names the ranks with wrong data in a line: "rank 2 (GPU 2 on host) in 35
// results".
func WrongRanksText(s *coll.Summary) string {
	var parts []string
	for _, w := range WrongRanks(s) {
		where := fmt.Sprintf("GPU %d", w.Device)
		if w.Host != "" {
			where += " on " + w.Host
		}
		parts = append(parts, fmt.Sprintf("rank %d (%s) in %d result%s", w.Rank, where, w.Results, map[bool]string{true: "", false: "s"}[w.Results == 1]))
	}
	if len(parts) == 0 {
		return ""
	}
	if len(parts) == len(s.Devices) && len(parts) > 1 {
		return "every rank's output: " + strings.Join(parts, ", ")
	}
	return strings.Join(parts, ", ")
}

// Expectation is where a run's expected figures come from, and the fraction of them under which
// a placement is named (--expect-floor).
type Expectation struct {
	Source string
	Floor  float64
}

// below lists the placements whose measured figure is under the floor of the expected one.
func below(r *CollRun) []results.Below {
	out := []results.Below{}
	for _, res := range r.Summary.Results {
		for _, pl := range []struct {
			name string
			p    coll.Placement
		}{{"out_of_place", res.OutOfPlace}, {"in_place", res.InPlace}} {
			if e := pl.p.Expected; e != nil && e.Ratio < r.Expect.Floor {
				b := results.Below{Size: res.Size, Type: res.Type, Placement: pl.name, Ratio: e.Ratio}
				if r.Opt.Cycles != 0 && r.Opt.Cycles != 1 {
					b.Cycle = res.Cycle + 1
				}
				if r.Coll.TakesOp {
					b.Op = results.NullString(res.Op)
				}
				if r.Coll.Rooted {
					b.Root = &res.Root
				}
				out = append(out, b)
			}
		}
	}
	return out
}

// expectNote is the footer's line on expectations.
func expectNote(r *CollRun) string {
	if r.Expect == nil {
		return ""
	}
	n := 0
	for _, res := range r.Summary.Results {
		for _, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
			if p.Expected != nil {
				n++
			}
		}
	}
	head := fmt.Sprintf("Expected             : from %s; ", r.Expect.Source)
	low := below(r)
	if len(low) == 0 {
		return head + fmt.Sprintf("all %d placements at %.0f%% of it or more (--expect-floor %g)", n, 100*r.Expect.Floor, r.Expect.Floor)
	}
	var parts []string
	for i, b := range low {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(low)-i))
			break
		}
		part := fmt.Sprintf("%d B %s %.0f%%", b.Size, strings.ReplaceAll(b.Placement, "_", "-"), 100*b.Ratio)
		if b.Cycle > 0 {
			part += fmt.Sprintf(" (cycle %d)", b.Cycle)
		}
		parts = append(parts, part)
	}
	return head + fmt.Sprintf("%d of %d placements under %.0f%% of it (--expect-floor %g): %s", len(low), n, 100*r.Expect.Floor, r.Expect.Floor, strings.Join(parts, ", "))
}

func footerNotes(r *CollRun) []string {
	s := r.Summary
	var notes []string
	if line := expectNote(r); line != "" {
		notes = append(notes, line)
	}
	if line := slowest(s); line != "" {
		notes = append(notes, line)
	}
	if line := WrongRanksText(s); line != "" {
		notes = append(notes, "Wrong data in        : "+line)
	}
	if s.BestBusBW > 0 && s.BusPeak > 0 {
		notes = append(notes, fmt.Sprintf("Best bus bandwidth   : %.2f GB/s at %d B, %.0f%% of the %.2f GB/s nominal bus peak (%s)",
			s.BestBusBW, s.BestSize, 100*s.BestBusBW/s.BusPeak, s.BusPeak, s.PeakLimit))
	}
	if s.TimingOnlyFrom > 0 {
		why := "the backend held no data"
		if r.DataCap > 0 {
			why = fmt.Sprintf("the simulator backs only %s of device memory with host memory (--sim-data-cap)", coll.FormatSize(r.DataCap))
		}
		from := fmt.Sprintf("from %d B on", s.TimingOnlyFrom)
		if i := slices.IndexFunc(s.Results, func(res coll.Result) bool { return res.InPlace.TimingOnly }); i < 0 || s.Results[i].Size > s.TimingOnlyFrom {
			// in place, a rank holds one buffer where out of place it holds two
			from = fmt.Sprintf("from %d B on out of place", s.TimingOnlyFrom)
			if i >= 0 {
				from += fmt.Sprintf(", from %d B in place", s.Results[i].Size)
			}
		}
		notes = append(notes, fmt.Sprintf("Timing only          : %s, %s; #wrong is N/A there", from, why))
	}
	if s.Err != nil {
		notes = append(notes, "Stopped early        : "+s.Err.Error()+"; the results above are all that was measured")
	}
	return notes
}

type tableWriter struct{ w io.Writer }

func (t *tableWriter) Start(r *CollRun) error {
	s, o := r.Summary, r.Opt
	where := "backend " + r.Backend
	if r.Topology != "" {
		where += ", topology " + r.Topology
	}
	fmt.Fprintf(t.w, "# gpubench %s: %s (nccl-tests %s layout), %s\n", r.Version, r.Coll.Name, r.Coll.Perf, where)
	if r.Runtime != "" {
		fmt.Fprintf(t.w, "# %s\n", r.Runtime)
	}
	if r.Launch != "" {
		fmt.Fprintf(t.w, "# Launch: %s\n", r.Launch)
	}
	perProcess, threads := len(s.Devices), max(r.Threads, 1)
	if o.Comm != nil {
		perProcess = 1
	}
	maxBytes := s.Sweep.Max
	if s.ClampedFrom > 0 { // as nccl-tests: the size asked for here, the cut in a note below
		maxBytes = s.ClampedFrom
	}
	fmt.Fprintf(t.w, "# nThread %d nGpus %d minBytes %d maxBytes %d step: %s warmup iters: %d iters: %d agg iters: 1 validation: %d graph: %d unalign: 0\n",
		threads, perProcess/threads, s.Sweep.Min, maxBytes, stepText(s.Sweep), o.Warmup, o.Iters, o.Check, o.Graph)
	if line, ok := blockingLines[o.Blocking]; ok {
		fmt.Fprintln(t.w, line)
	}
	if o.PerIter { // nccl-tests' -I 1 line; the simulator's iterations are timed on its clock
		timing := "CUDA event"
		if r.Backend == "sim" {
			timing = "simulated stream"
		}
		skip := ""
		if o.PerIterSkip > 0 {
			skip = fmt.Sprintf("; summary skips first %d iterations", o.PerIterSkip)
		}
		fmt.Fprintf(t.w, "# Per-Iteration Report: %s timing; i_* uses max over process rows%s \n", timing, skip)
	}
	fmt.Fprintf(t.w, "#\n# Using devices\n")
	for rank, d := range s.Devices {
		host, _, _ := strings.Cut(d.Host, ".")
		fmt.Fprintf(t.w, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", rank, 0, r.pid(rank), host, d.Ordinal, busID(d.PCIBusID), d.Name)
	}
	for _, n := range headerNotes(r) {
		fmt.Fprintf(t.w, "#\n# %s\n", n)
	}
	fmt.Fprintf(t.w, "#\n")
	timeHead := "time"
	if o.CPUTime { // as nccl-tests heads it, so that no reader takes it for the completion time
		timeHead = "cputime"
	}
	// nccl-tests' columns (with -I 1, each placement's per-iteration min, max, p99 and cv beside it,
	// as its -I 1 prints them), then gpubench's own: with -I 1 each placement's median, 95th
	// percentile and slowest rank, and with --expect the expected busbw.
	head := [3]string{"           out-of-place                       in-place          ",
		fmt.Sprintf("  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s ", timeHead, "algbw", "busbw", "#wrong", timeHead, "algbw", "busbw", "#wrong"),
		fmt.Sprintf("  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s ", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")}
	if o.PerIter {
		place := func(names ...any) string {
			return fmt.Sprintf("  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s", names...)
		}
		head = [3]string{"              out-of-place (+ per-iteration)                                in-place (+ per-iteration)",
			place(timeHead, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%") + place(timeHead, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%"),
			place("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)") + place("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)")}
		head[0] += "   out-of-place        in-place      "
		head[1] += fmt.Sprintf("  %7s  %7s  %4s  %7s  %7s  %4s", "p50", "p95", "slow", "p50", "p95", "slow")
		head[2] += fmt.Sprintf("  %7s  %7s  %4s  %7s  %7s  %4s", "(us)", "(us)", "rank", "(us)", "(us)", "rank")
	}
	if r.Expect != nil {
		head[0] += fmt.Sprintf("  %8s  %6s  %6s", "expected", "out", "in")
		head[1] += fmt.Sprintf("  %8s  %6s  %6s", "busbw", "vs exp", "vs exp")
		head[2] += fmt.Sprintf("  %8s  %6s  %6s", "(GB/s)", "(%)", "(%)")
	}
	fmt.Fprintf(t.w, "# %10s  %12s  %8s  %6s  %6s%s\n", "", "", "", "", "", head[0])
	fmt.Fprintf(t.w, "# %10s  %12s  %8s  %6s  %6s%s\n", "size", "count", "type", "redop", "root", head[1])
	_, err := fmt.Fprintf(t.w, "# %10s  %12s  %8s  %6s  %6s%s\n", "(B)", "(elements)", "", "", "", head[2])
	return err
}

// iterCells are a placement's per-iteration columns as nccl-tests' -I 1 prints them: min, max,
// p99 and cv (%).
func iterCells(p coll.Placement) string {
	s := p.PerIter
	if s == nil {
		return fmt.Sprintf("  %7s  %7s  %7s  %7s", "N/A", "N/A", "N/A", "N/A")
	}
	return fmt.Sprintf("  %7s  %7s  %7s  %7s", floatStr(s.MinUS, 7), floatStr(s.MaxUS, 7), floatStr(s.P99US, 7), floatStr(100*s.CV, 7))
}

// iterStatCells are a placement's per-iteration statistics in Markdown's columns: p50, p95, p99,
// max, cv (%) and the slowest rank.
func iterStatCells(p coll.Placement) []string {
	slow := slowCell(p)
	s := p.PerIter
	if s == nil {
		return []string{"N/A", "N/A", "N/A", "N/A", "N/A", slow}
	}
	return []string{floatStr(s.P50US, 7), floatStr(s.P95US, 7), floatStr(s.P99US, 7), floatStr(s.MaxUS, 7), floatStr(100*s.CV, 5), slow}
}

// slowCell is a placement's slowest rank across processes, "-" when there is none.
func slowCell(p coll.Placement) string {
	if p.SlowestRank == nil {
		return "-"
	}
	return strconv.Itoa(*p.SlowestRank)
}

// moreIterCells are a placement's per-iteration columns nccl-tests does not print: p50, p95 and
// the slowest rank.
func moreIterCells(p coll.Placement) string {
	slow := slowCell(p)
	if s := p.PerIter; s != nil {
		return fmt.Sprintf("  %7s  %7s  %4s", floatStr(s.P50US, 7), floatStr(s.P95US, 7), slow)
	}
	return fmt.Sprintf("  %7s  %7s  %4s", "N/A", "N/A", slow)
}

// expectCells are the expected busbw and each placement's measured figure as a percentage of the
// expected one (--expect).
func expectCells(res coll.Result) string {
	bw, pct := "N/A", [2]string{"N/A", "N/A"}
	for i, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
		if e := p.Expected; e != nil {
			if i == 0 || bw == "N/A" {
				bw = floatStr(e.BusBW, 8)
			}
			pct[i] = strconv.FormatFloat(100*e.Ratio, 'f', 0, 64)
		}
	}
	return fmt.Sprintf("  %8s  %6s  %6s", bw, pct[0], pct[1])
}

// busID is the domain:bus:device part of a PCI bus id, as nccl-tests prints it.
func busID(id string) string {
	if i := strings.LastIndexByte(id, '.'); i > 0 {
		return id[:i]
	}
	return id
}

// shownTime is the time column of the table and Markdown: the completion time, or with -C the
// host's launch time, as nccl-tests' -C shows it (bandwidths always come from completion).
func shownTime(r *CollRun, p coll.Placement) float64 {
	if r.Opt.CPUTime {
		return p.CPUTimeUS
	}
	return p.TimeUS
}

func (t *tableWriter) Row(r *CollRun, res coll.Result) error {
	line := fmt.Sprintf("%12d  %12d  %8s  %6s  %6d", res.Size, res.Count, res.Type, res.Op, res.Root)
	for _, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
		wrong := "N/A"
		if p.Wrong != nil {
			wrong = strconv.FormatFloat(float64(*p.Wrong), 'g', 6, 64)
		}
		line += fmt.Sprintf("  %7s  %6s  %6s  %6s", floatStr(shownTime(r, p), 7), floatStr(p.AlgBW, 6), floatStr(p.BusBW, 6), wrong)
		if r.Opt.PerIter {
			line += iterCells(p)
		}
	}
	if r.Opt.PerIter {
		line += moreIterCells(res.OutOfPlace) + moreIterCells(res.InPlace)
	}
	if r.Expect != nil {
		line += expectCells(res)
	}
	_, err := fmt.Fprintln(t.w, line)
	return err
}

func (t *tableWriter) End(r *CollRun) error {
	s := r.Summary
	ok := "OK"
	if s.OutOfBounds > 0 {
		ok = "FAILED"
	}
	fmt.Fprintf(t.w, "# Out of bounds values : %d %s\n", s.OutOfBounds, ok)
	fmt.Fprintf(t.w, "# Avg bus bandwidth    : %g %s\n", round(s.AvgBusBW, 6), r.avgBusBWVerdict())
	for _, n := range footerNotes(r) {
		fmt.Fprintf(t.w, "# %s\n", n)
	}
	_, err := fmt.Fprintf(t.w, "#\n# Collective test concluded: %s\n#\n", r.Coll.Perf)
	return err
}

// round keeps digits significant digits, so that %g prints as nccl-tests' %g would.
func round(v float64, digits int) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', digits, 64), 64)
	return f
}

type jsonWriter struct {
	w    io.Writer
	rows []coll.Result
}

func (j *jsonWriter) Start(*CollRun) error { return nil }

func (j *jsonWriter) Row(_ *CollRun, res coll.Result) error {
	j.rows = append(j.rows, res)
	return nil
}

func (j *jsonWriter) End(r *CollRun) error {
	enc := json.NewEncoder(j.w)
	enc.SetIndent("", "  ")
	return enc.Encode(CollJSON(r))
}

// CollJSON is the JSON document for a run (docs/output.md), in the schema internal/results
// reads.
func CollJSON(r *CollRun) *results.Coll {
	s, o := r.Summary, r.Opt
	doc := &results.Coll{
		Version: r.Version, Collective: r.Coll.Name, NCCLTests: r.Coll.Perf, Backend: r.Backend,
		Topology: results.NullString(r.Topology), Runtime: results.NullString(r.Runtime), Launch: results.NullString(r.Launch),
		StartTime: r.Start.UTC().Format(time.RFC3339),
		Config: results.Config{
			Ranks: len(s.Devices), MinBytes: s.Sweep.Min, MaxBytes: s.Sweep.Max, RequestedMax: o.Sweep.Max,
			Warmup: o.Warmup, Iters: o.Iters, Check: o.Check, Average: int(o.Average), Seed: o.Seed,
			Graph: o.Graph, Blocking: int(o.Blocking), Threads: max(r.Threads, 1), CPUTime: o.CPUTime, PerIterSkip: o.PerIterSkip,
		},
		Notes:       append(headerNotes(r), footerNotes(r)...),
		Results:     []results.Row{},
		OutOfBounds: results.Bounds{Count: s.OutOfBounds, OK: s.OutOfBounds == 0},
		AvgBusBW:    s.AvgBusBW,
		MinBusBW:    r.MinBusBW,
		ZeroBusBW:   r.Coll.Factor(len(s.Devices)) == 0,
		Interrupted: s.Interrupted,
		WrongRanks:  WrongRanks(s),
	}
	if o.Cycles != 1 {
		doc.Config.Cycles = o.Cycles
	}
	if s.Sweep.Factor > 1 {
		doc.Config.StepFactor = &s.Sweep.Factor
	} else {
		doc.Config.StepBytes = &s.Sweep.Step
	}
	for _, d := range o.DTypes {
		doc.Config.DTypes = append(doc.Config.DTypes, d.String())
	}
	doc.Config.Ops = []string{}
	if r.Coll.TakesOp {
		for _, op := range o.Ops {
			doc.Config.Ops = append(doc.Config.Ops, op.String())
		}
	}
	if r.Coll.Rooted {
		doc.Config.Root = &o.Root
	}
	if r.DataCap > 0 {
		doc.Config.DataCap = &r.DataCap
	}
	for rank, d := range s.Devices {
		doc.Devices = append(doc.Devices, results.Device{Rank: rank, PID: r.pid(rank), Host: d.Host, Device: d.Ordinal, PCIBusID: d.PCIBusID, Name: d.Name, Memory: d.MemoryBytes})
	}
	for _, res := range s.Results {
		doc.Results = append(doc.Results, jsonRow(r, res))
	}
	if s.BestBusBW > 0 {
		doc.Best = &results.Best{BusBW: s.BestBusBW, Size: s.BestSize}
	}
	if s.BusPeak > 0 {
		doc.BusPeak = &results.BusPeak{GBs: s.BusPeak, Link: s.PeakLimit}
		if s.BestBusBW > 0 {
			f := s.BestBusBW / s.BusPeak
			doc.BusPeak.BestFraction = &f
		}
	}
	if s.TimingOnlyFrom > 0 {
		doc.TimingOnlyFrom = &s.TimingOnlyFrom
	}
	if s.Err != nil {
		doc.Error = results.NullString(s.Err.Error())
	}
	if r.Expect != nil {
		doc.Expect = &results.Expect{Source: r.Expect.Source, Floor: r.Expect.Floor, Below: below(r)}
	}
	return doc
}

// jsonRow is a row as JSON writes it.
func jsonRow(r *CollRun, res coll.Result) results.Row {
	row := results.Row{Size: res.Size, Count: res.Count, Type: res.Type, OutOfPlace: jsonPlace(r, res.OutOfPlace), InPlace: jsonPlace(r, res.InPlace),
		Algorithm: res.Algo, Protocol: res.Proto, Channels: res.Channels}
	if r.Opt.Cycles != 0 && r.Opt.Cycles != 1 {
		row.Cycle = res.Cycle + 1
	}
	if r.Coll.TakesOp {
		row.Op = results.NullString(res.Op)
	}
	if r.Coll.Rooted {
		row.Root = &res.Root
	}
	return row
}

func jsonPlace(r *CollRun, p coll.Placement) results.Placement {
	j := results.Placement{TimeUS: p.TimeUS, AlgBW: p.AlgBW, BusBW: p.BusBW, Wrong: p.Wrong, TimingOnly: p.TimingOnly,
		RankTimesUS: p.RankTimesUS, SlowestRank: p.SlowestRank}
	if r.Opt.CPUTime {
		j.CPUTimeUS = &p.CPUTimeUS
	}
	if s := p.PerIter; s != nil {
		j.PerIter = &results.PerIter{N: len(s.TimesUS), MeanUS: s.MeanUS, P50US: s.P50US, P95US: s.P95US, P99US: s.P99US,
			MaxUS: s.MaxUS, CV: s.CV, TimesUS: s.TimesUS}
	}
	if e := p.Expected; e != nil {
		j.Expected = &results.Expected{TimeUS: e.TimeUS, BusBW: e.BusBW, Ratio: e.Ratio}
	}
	return j
}

var csvHeader = []string{"collective", "size_bytes", "count", "type", "redop", "root",
	"oop_time_us", "oop_algbw_gbs", "oop_busbw_gbs", "oop_wrong",
	"ip_time_us", "ip_algbw_gbs", "ip_busbw_gbs", "ip_wrong"}

type csvWriter struct{ w *csv.Writer }

// csvIterHeader are the columns --per-iter adds, per placement.
var csvIterHeader = []string{"p50_us", "p95_us", "p99_us", "max_us", "cv", "slowest_rank"}

func (c *csvWriter) Start(r *CollRun) error {
	head := slices.Clone(csvHeader)
	if r.Opt.PerIter {
		for _, place := range []string{"oop_", "ip_"} {
			for _, h := range csvIterHeader {
				head = append(head, place+h)
			}
		}
	}
	if r.Opt.CPUTime {
		head = append(head, "oop_cpu_time_us", "ip_cpu_time_us")
	}
	if r.Opt.Cycles != 0 && r.Opt.Cycles != 1 {
		head = append(head, "cycle")
	}
	if r.Expect != nil {
		head = append(head, "oop_expected_time_us", "oop_expected_busbw_gbs", "oop_vs_expected", "ip_expected_time_us", "ip_expected_busbw_gbs", "ip_vs_expected")
	}
	c.w.Write(head)
	c.w.Flush()
	return c.w.Error()
}

func (c *csvWriter) Row(r *CollRun, res coll.Result) error {
	rec := []string{r.Coll.Name, strconv.FormatInt(res.Size, 10), strconv.FormatInt(res.Count, 10), res.Type, res.Op, strconv.Itoa(res.Root)}
	for _, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
		wrong := ""
		if p.Wrong != nil {
			wrong = strconv.FormatInt(*p.Wrong, 10)
		}
		rec = append(rec, num(p.TimeUS), num(p.AlgBW), num(p.BusBW), wrong)
	}
	for _, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
		if !r.Opt.PerIter {
			break
		}
		slow := ""
		if p.SlowestRank != nil {
			slow = strconv.Itoa(*p.SlowestRank)
		}
		if s := p.PerIter; s != nil {
			rec = append(rec, num(s.P50US), num(s.P95US), num(s.P99US), num(s.MaxUS), num(s.CV), slow)
		} else {
			rec = append(rec, "", "", "", "", "", slow)
		}
	}
	if r.Opt.CPUTime {
		rec = append(rec, num(res.OutOfPlace.CPUTimeUS), num(res.InPlace.CPUTimeUS))
	}
	if r.Opt.Cycles != 0 && r.Opt.Cycles != 1 {
		rec = append(rec, strconv.Itoa(res.Cycle+1))
	}
	if r.Expect != nil {
		for _, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
			if e := p.Expected; e != nil {
				rec = append(rec, num(e.TimeUS), num(e.BusBW), num(e.Ratio))
			} else {
				rec = append(rec, "", "", "")
			}
		}
	}
	c.w.Write(rec)
	c.w.Flush()
	return c.w.Error()
}

func (c *csvWriter) End(*CollRun) error { return nil }

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

type markdownWriter struct{ w io.Writer }

func (m *markdownWriter) Start(r *CollRun) error {
	s := r.Summary
	fmt.Fprintf(m.w, "**gpubench %s %s** (nccl-tests %s layout) on %d ranks, backend %s", r.Version, r.Coll.Name, r.Coll.Perf, len(s.Devices), r.Backend)
	if r.Topology != "" {
		fmt.Fprintf(m.w, ", topology %s", r.Topology)
	}
	fmt.Fprint(m.w, "\n\n")
	for _, n := range headerNotes(r) {
		fmt.Fprintf(m.w, "> %s\n\n", n)
	}
	timeHead := "time"
	if r.Opt.CPUTime {
		timeHead = "cputime"
	}
	head := fmt.Sprintf("| size (B) | count | type | redop | root | %[1]s (us) | algbw (GB/s) | busbw (GB/s) | #wrong | in-place %[1]s (us) | algbw (GB/s) | busbw (GB/s) | #wrong |", timeHead)
	rule := "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	if r.Opt.PerIter {
		head += " p50 (us) | p95 (us) | p99 (us) | max (us) | cv (%) | slowest rank | in-place p50 (us) | p95 (us) | p99 (us) | max (us) | cv (%) | slowest rank |"
		rule += "---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	}
	if r.Expect != nil {
		head += " expected busbw (GB/s) | vs expected (%) | in-place vs expected (%) |"
		rule += "---:|---:|---:|"
	}
	fmt.Fprintln(m.w, head)
	_, err := fmt.Fprintln(m.w, rule)
	return err
}

func (m *markdownWriter) Row(r *CollRun, res coll.Result) error {
	line := fmt.Sprintf("| %d | %d | %s | %s | %d |", res.Size, res.Count, res.Type, res.Op, res.Root)
	for _, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
		wrong := "N/A"
		if p.Wrong != nil {
			wrong = strconv.FormatInt(*p.Wrong, 10)
		}
		line += fmt.Sprintf(" %s | %s | %s | %s |", floatStr(shownTime(r, p), 7), floatStr(p.AlgBW, 6), floatStr(p.BusBW, 6), wrong)
	}
	if r.Opt.PerIter {
		for _, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
			line += " " + strings.Join(iterStatCells(p), " | ") + " |"
		}
	}
	if r.Expect != nil {
		line += " " + strings.Join(strings.Fields(expectCells(res)), " | ") + " |"
	}
	_, err := fmt.Fprintln(m.w, line)
	return err
}

func (m *markdownWriter) End(r *CollRun) error {
	s := r.Summary
	fmt.Fprintf(m.w, "\nOut of bounds values: %d. Average bus bandwidth: %g GB/s", s.OutOfBounds, round(s.AvgBusBW, 6))
	if v := r.avgBusBWVerdict(); v != "" {
		fmt.Fprintf(m.w, ", %s against NCCL_TESTS_MIN_BW %g", v, *r.MinBusBW)
	}
	fmt.Fprintln(m.w, ".")
	for _, n := range footerNotes(r) {
		fmt.Fprintf(m.w, "\n> %s\n", strings.Join(strings.Fields(n), " "))
	}
	return nil
}
