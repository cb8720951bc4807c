package plan

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// Forced sizes that the machine's GPUs can never hold are refused before any search, naming the
// flag: a size above the GPUs, a product that does not divide them, TP across NVLink domains.
func TestForcedSizesAgainstMachine(t *testing.T) {
	m := preset(t, "llama-3.1-70b")
	for _, c := range []struct {
		tp, cp, pp, dp, ep int
		perNode, nodes     int
		want               string
	}{
		{dp: 64, nodes: 4, want: "dp 64: the machine has only 32 GPUs"},
		{tp: 8, pp: 4, dp: 2, nodes: 4, want: "tp 8 x --pp 4 x --dp 2: their product, 64 GPUs, does not divide the machine's 32"},
		{tp: 8, cp: 1, pp: 2, dp: 1, nodes: 4, want: "TP x CP x PP x DP is 16 GPUs, and the machine has 32"},
		{pp: 5, nodes: 4, want: "pp 5: the machine's 32 GPUs are not divisible by it"},
		{tp: 8, perNode: 4, nodes: 4, want: "tp 8: TP groups stay inside an NVLink domain, and the machine's hold 4 GPUs"},
		{tp: 4, perNode: 6, nodes: 4, want: "tp 4: TP groups stay inside an NVLink domain, and the machine's hold 6 GPUs"},
	} {
		s := DefaultSetup()
		s.TP, s.CP, s.PP, s.DP, s.EP = c.tp, c.cp, c.pp, c.dp, c.ep
		mc := machine(t, "dgx-h100", c.nodes, s)
		if c.perNode > 0 {
			topo, err := mc.Topo.WithGPUsPerNode(c.perNode)
			if err != nil {
				t.Fatal(err)
			}
			if mc, err = NewMachine(topo, s); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Plan(Options{Model: m, Setup: s, Machine: mc})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v; want one line with %q", c, err, c.want)
		}
	}
	// A TP that divides a domain, and one across domains when allowed, are planned.
	s := DefaultSetup()
	s.TP, s.AllowTPAcrossNodes = 16, true
	if _, err := Plan(Options{Model: preset(t, "gpt3-175b"), Setup: s, Machine: machine(t, "dgx-h100", 4, s)}); err != nil {
		t.Errorf("TP16 with --allow-tp-across-nodes: %v", err)
	}
}

// When every split of the GPUs breaks a constraint, the plan says so and what to change; it does
// not blame memory, nor advise what only memory needs.
func TestNoLayoutRunsIsNotMemory(t *testing.T) {
	m := preset(t, "llama-3.1-8b")
	s := DefaultSetup()
	mc := machine(t, "gb200-nvl72", 3, s) // 12 GPUs: a factor 3 that the batch of 512, the 32 layers and the heads refuse
	r := run(t, m, s, mc)
	if r.Fits || r.Runs || r.Searched != 0 {
		t.Fatalf("8B on 12 GB200: fits %v, runs %v, searched %d", r.Fits, r.Runs, r.Searched)
	}
	advice := strings.Join(r.Advice, "; ")
	for _, want := range []string{"--global-batch a multiple of 3", "--uneven-pp"} {
		if !strings.Contains(advice, want) {
			t.Errorf("advice %q: no %q", advice, want)
		}
	}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "does not fit: no layout") || !strings.Contains(out, "\ndoes not run: no layout of llama-3.1-8b can run on the 12 GPUs") ||
		!strings.Contains(out, "global batch not divisible by DP x micro-batch") {
		t.Errorf("the text blames memory, or not the constraints:\n%s", out)
	}
	// Nodes of three GPUs: no machine of them runs it, and the advice is the constraints', not memory's.
	topo, err := machine(t, "dgx-h100", 3, s).Topo.WithGPUsPerNode(3)
	if err != nil {
		t.Fatal(err)
	}
	if mc, err = NewMachine(topo, s); err != nil {
		t.Fatal(err)
	}
	r = run(t, m, s, mc)
	b.Reset()
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	if r.Runs || r.SmallestFit != nil || strings.Contains(out, "--zero 3") || !strings.Contains(out, "--uneven-pp") ||
		!strings.Contains(out, "no machine of these nodes can run it") {
		t.Errorf("8B on nodes of 3 H100s:\n%s", out)
	}
}

// TP divides an NVLink domain's GPUs, or its groups straddle two: on nodes of 7 GPUs the search
// keeps TP1 and TP7 only, and with --allow-tp-across-nodes a TP4 is priced on a group that
// crosses nodes (GPUs 4-7), not on the first (0-3, inside node 0).
func TestTPDividesTheDomain(t *testing.T) {
	m := preset(t, "llama-3.1-70b")
	s := DefaultSetup()
	s.GlobalBatch = 84
	topo, err := machine(t, "dgx-h100", 8, s).Topo.WithGPUsPerNode(7)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := NewMachine(topo, s)
	if err != nil {
		t.Fatal(err)
	}
	e := evaluatorFor(t, m, s, mc)
	layouts, _ := e.enumerate(mc.GPUs, mc.DomainGPUs)
	for _, l := range layouts {
		if mc.DomainGPUs%l.TP != 0 {
			t.Errorf("%s searched on NVLink domains of %d GPUs", l, mc.DomainGPUs)
		}
	}
	s.AllowTPAcrossNodes, s.TP = true, 4
	r := run(t, m, s, mc)
	if !r.Fits {
		t.Fatalf("TP4 on nodes of 7 does not fit")
	}
	tp := firstOf(&r.Ranked[0], "tp")
	if tp == nil || tp.Nodes != 2 || tp.Link == "nvlink" || tp.Where != "4-7" {
		t.Errorf("TP4 on nodes of 7 priced on %+v; want GPUs 4-7 across two nodes", tp)
	}
}

// The smallest machine that fits is the smallest: 405B with 8,192-token sequences and a batch
// of 2,048 fits on no layout of 63 DGX H100 (504 GPUs), and on none of fewer than 24, but on 24.
func TestSmallestFitIsSmallest(t *testing.T) {
	m := preset(t, "llama-3.1-405b")
	s := DefaultSetup()
	s.Seq, s.GlobalBatch = 8192, 2048
	r := run(t, m, s, machine(t, "dgx-h100", 63, s))
	if r.Fits || r.SmallestFit == nil || r.SmallestFit.Nodes != 24 {
		t.Fatalf("405B on 63 DGX H100: fits %v, smallest %+v", r.Fits, r.SmallestFit)
	}
	if r.FitBelow == nil || r.FitBelow.Nodes <= 24 || r.FitBelow.Nodes >= 63 {
		t.Errorf("most nodes below 63 that fit: %+v", r.FitBelow)
	}
	for nodes := 1; nodes <= 24; nodes++ {
		mc := machine(t, "dgx-h100", nodes, s)
		e := evaluatorFor(t, m, s, mc)
		layouts, _ := e.enumerate(mc.GPUs, mc.DomainGPUs)
		fits := false
		for _, l := range layouts {
			fits = fits || e.memory(l).Fits
		}
		if fits != (nodes == 24) {
			t.Errorf("405B on %d DGX H100 fits: %v", nodes, fits)
		}
	}
}

// The header counts layouts with their schedules and says how many shapes the ranking shows:
// --top above them all ranks every shape priced.
func TestPricedShapesAreRanked(t *testing.T) {
	s := DefaultSetup()
	s.Seq = 8192
	r, err := Plan(Options{Model: preset(t, "llama-3.1-8b"), Setup: s, Machine: machine(t, "dgx-h100", 0, s), Top: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Shapes != len(r.Ranked) || r.Shapes >= r.Priced {
		t.Fatalf("%d priced, %d shapes, %d ranked", r.Priced, r.Shapes, len(r.Ranked))
	}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	if want := " priced (" + strconv.Itoa(r.Shapes) + " shapes, each counted once per pipeline schedule and ranked with its best)"; !strings.Contains(b.String(), want) {
		t.Errorf("no %q in the header:\n%s", want, b.String()[:800])
	}
}
