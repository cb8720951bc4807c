package results

import (
	"strings"
	"testing"
)

// Per-iteration spread decides: a 10% fall whose new median is past the old 95th percentile is a
// regression, a 6% fall inside the spread is noise; rows on one side only are listed as such.
func TestCompareWithPerIter(t *testing.T) {
	old, err := ReadFile("testdata/periter-old.json")
	if err != nil {
		t.Fatal(err)
	}
	new, err := ReadFile("testdata/periter-new.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compare(old, new, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		size    int64
		place   string
		verdict string
	}{
		{1048576, OutOfPlace, Regression}, {1048576, InPlace, Same},
		{67108864, OutOfPlace, Noisy}, {67108864, InPlace, Same},
		{268435456, OutOfPlace, OnlyOld}, {268435456, InPlace, OnlyOld},
		{1073741824, OutOfPlace, OnlyNew}, {1073741824, InPlace, OnlyNew},
	}
	if len(c.Lines) != len(want) {
		t.Fatalf("%d lines; want %d", len(c.Lines), len(want))
	}
	for i, w := range want {
		l := c.Lines[i]
		if l.Key.Size != w.size || l.Placement != w.place || l.Verdict != w.verdict {
			t.Errorf("line %d: %d B %s %s; want %d B %s %s", i, l.Key.Size, l.Placement, l.Verdict, w.size, w.place, w.verdict)
		}
	}
	reg := c.Lines[0]
	if reg.BWChange == nil || *reg.BWChange > -0.099 || *reg.BWChange < -0.101 || reg.Noise != "NEW p50 20.3 us > OLD p95 19 us" {
		t.Errorf("regression line: change %v, noise %q", reg.BWChange, reg.Noise)
	}
	if n := c.Lines[2].Noise; n != "NEW p50 310 us <= OLD p95 330 us" {
		t.Errorf("noisy line's test %q", n)
	}
	if c.Regressions() != 1 || c.Counts[Noisy] != 1 || c.Counts[Same] != 2 {
		t.Errorf("counts %v", c.Counts)
	}
	// The same pair without per-iteration times: both falls are regressions.
	for _, f := range []*File{old, new} {
		for i := range f.Coll.Results {
			f.Coll.Results[i].OutOfPlace.PerIter, f.Coll.Results[i].InPlace.PerIter = nil, nil
		}
	}
	c, _ = Compare(old, new, 0.05)
	if c.Regressions() != 2 || c.Counts[Noisy] != 0 || c.Lines[2].Noise != "" {
		t.Errorf("without per_iter: counts %v; want 2 regressions", c.Counts)
	}
	// A higher threshold lets the 6% fall pass.
	if c, _ = Compare(old, new, 0.08); c.Regressions() != 1 || c.Lines[2].Verdict != Same {
		t.Errorf("threshold 8%%: counts %v", c.Counts)
	}
}

func TestCompareImprovedAndNotes(t *testing.T) {
	old, _ := ReadFile("testdata/periter-new.json")
	new, _ := ReadFile("testdata/periter-old.json")
	new.Coll.Config.Ranks, new.Coll.Topology = 16, "dgx-h100x2"
	c, err := Compare(old, new, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lines[0].Verdict != Improved || c.Lines[0].Noise != "OLD p50 20.3 us > NEW p95 19 us" || c.Lines[2].Verdict != Noisy {
		t.Errorf("lines %+v %+v; want improved, then noisy", c.Lines[0], c.Lines[2])
	}
	notes := strings.Join(c.Notes, "; ")
	if !strings.Contains(notes, "OLD ran on 8 ranks and NEW on 16") || !strings.Contains(notes, "topology dgx-h100x2") {
		t.Errorf("notes %q; want the rank count and topology told", notes)
	}
}

// With one rank busbw is 0 by definition: algbw is compared instead.
func TestCompareZeroBusBW(t *testing.T) {
	mk := func(alg float64) *File {
		return &File{Name: "x", Complete: true, Coll: &Coll{Collective: "allreduce", Backend: "sim", Config: Config{Ranks: 1}, ZeroBusBW: true,
			Results: []Row{{Size: 1024, Type: "float", Op: "sum", OutOfPlace: Placement{TimeUS: 10, AlgBW: alg}, InPlace: Placement{TimeUS: 10, AlgBW: alg}}}}}
	}
	c, err := Compare(mk(100), mk(50), 0.05)
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Lines[0]; l.Measure != "algbw" || l.Verdict != Regression || *l.BWChange != -0.5 {
		t.Errorf("line %+v; want an algbw regression of -50%%", l)
	}
	p2p := &File{Name: "p.json", P2P: &P2P{}}
	if _, err := Compare(mk(1), p2p, 0.05); err == nil || !strings.Contains(err.Error(), "p.json: compare reads collective results") {
		t.Errorf("p2p file compared: %v", err)
	}
}

// A placement of NEW that delivered wrong data is a failure at any speed, also where the row is
// only in NEW; OLD's wrong data is noted, its lines judged on speed.
func TestCompareWrongData(t *testing.T) {
	mk := func(wrong int64, sizes ...int64) *File {
		f := &File{Name: "x", Complete: true, Coll: &Coll{Collective: "allreduce", Backend: "sim", Config: Config{Ranks: 8}}}
		for _, size := range sizes {
			w := wrong
			f.Coll.Results = append(f.Coll.Results, Row{Size: size, Type: "float", Op: "sum",
				OutOfPlace: Placement{TimeUS: 10, BusBW: 100, Wrong: &w}, InPlace: Placement{TimeUS: 10, BusBW: 100, Wrong: new(int64)}})
		}
		return f
	}
	c, err := Compare(mk(0, 1024), mk(5, 1024, 2048), 0.05)
	if err != nil {
		t.Fatal(err)
	}
	if c.Wrong() != 2 || c.Regressions() != 0 || c.Lines[0].Verdict != WrongData || c.Lines[1].Verdict != Same || c.Lines[2].Verdict != WrongData {
		t.Errorf("counts %v, lines %+v; want the two out-of-place lines of NEW wrong", c.Counts, c.Lines)
	}
	var b strings.Builder
	if err := WriteCompare(&b, "table", []*Comparison{c}); err != nil || !strings.Contains(b.String(), "WRONG DATA") || !strings.Contains(b.String(), "# 2 with wrong data, 0 regressions") {
		t.Errorf("table %v:\n%s", err, b.String())
	}
	if c, _ = Compare(mk(5, 1024), mk(0, 1024), 0.05); c.Wrong() != 0 || !strings.Contains(strings.Join(c.Notes, "; "), "OLD delivered wrong data in 1 row placement:") {
		t.Errorf("OLD wrong: counts %v, notes %q", c.Counts, c.Notes)
	}
	// Against an OLD of two cycles (-N 2) a wrong NEW placement is two lines, and one placement.
	cycles := mk(0, 1024, 1024)
	cycles.Coll.Results[0].Cycle, cycles.Coll.Results[1].Cycle = 1, 2
	if c, _ = Compare(cycles, mk(5, 1024), 0.05); c.Counts[WrongData] != 2 || c.Wrong() != 1 {
		t.Errorf("OLD of two cycles: counts %v, %d placements wrong; want 2 lines, 1 placement", c.Counts, c.Wrong())
	}
}

// A move of exactly the threshold is within it, though 95 / 100 - 1 is a little below -0.05.
func TestCompareAtThreshold(t *testing.T) {
	mk := func(bus float64) *File {
		return &File{Name: "x", Complete: true, Coll: &Coll{Collective: "allreduce", Backend: "sim", Config: Config{Ranks: 8},
			Results: []Row{{Size: 1024, Type: "float", Op: "sum", OutOfPlace: Placement{TimeUS: 10, BusBW: bus}, InPlace: Placement{TimeUS: 10, BusBW: bus}}}}}
	}
	for _, tc := range []struct {
		old, new float64
		want     string
	}{{100, 95, Same}, {10, 9.5, Same}, {100, 105, Same}, {100, 94.9, Regression}, {100, 105.1, Improved}} {
		c, err := Compare(mk(tc.old), mk(tc.new), 0.05)
		if err != nil {
			t.Fatal(err)
		}
		if v := c.Lines[0].Verdict; v != tc.want {
			t.Errorf("%v -> %v at 5%%: %s; want %s", tc.old, tc.new, v, tc.want)
		}
	}
}

// Small bandwidths keep three significant digits in compare's table, where two decimals would
// print 0.00 for an 8 B call and the change beside it would read as nothing.
func TestNumSmall(t *testing.T) {
	bus := func(p *Placement) float64 { return p.BusBW }
	for v, want := range map[float64]string{0: "0.00", 0.0007: "0.000700", 7e-5: "0.0000700", 0.0252: "0.0252", 0.5: "0.500", 0.996: "1.00", 74.27: "74.27"} {
		if got := num(&Placement{BusBW: v}, bus); got != want {
			t.Errorf("%v: %q; want %q", v, got, want)
		}
	}
}

// A log's figures are the run's to the digits it printed: a log without its device list keeps
// its printed busbw (two decimals), which says 0.00 for an 8 B call and moves by rounding alone
// against the same log's worked-out figures; neither is a regression.
func TestComparePrintedDigits(t *testing.T) {
	const header = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
	const devices = "# Using devices\n" +
		"#  Rank  0 Group  0 Pid   1000 on      host1 device  0 [0x0a] NVIDIA H100 80GB HBM3\n" +
		"#  Rank  1 Group  0 Pid   1001 on      host1 device  1 [0x18] NVIDIA H100 80GB HBM3\n"
	const rows = "           8             2     float     sum      -1    28.00    0.00    0.00      0    28.00    0.00    0.00      0\n" +
		"         512           128     float     sum      -1    28.00    0.02    0.02      0    28.00    0.02    0.02      0\n" +
		"     1048576        262144     float     sum      -1    40.60   25.83   25.83      0    40.60   25.83   25.83      0\n" +
		"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 8.6\n#\n# Collective test concluded: all_reduce_perf\n"
	listed, err := Read("listed.log", []byte(devices+header+rows))
	if err != nil {
		t.Fatal(err)
	}
	bare, err := Read("bare.log", []byte(header+rows))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compare(listed, bare, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{8: NoFigure, 512: Same, 1048576: Same}
	for _, l := range c.Lines {
		if l.Verdict != want[l.Key.Size] {
			t.Errorf("%d B %s: %s; want %s", l.Key.Size, l.Placement, l.Verdict, want[l.Key.Size])
		}
	}
	slower, err := Read("slower.log", []byte(devices+header+strings.ReplaceAll(rows, "40.60", "48.60")))
	if err != nil {
		t.Fatal(err)
	}
	if c, err = Compare(listed, slower, 0.05); err != nil || c.Regressions() != 2 {
		t.Errorf("a 1 MiB call 20%% slower: %d regressions, %v; want 2", c.Regressions(), err)
	}
}
