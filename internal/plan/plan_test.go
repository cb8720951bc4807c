package plan

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/sim"
)

// machine loads a preset, nodes times (0: as it is), for a setup.
func machine(t testing.TB, preset string, nodes int, s Setup) *Machine {
	t.Helper()
	topo, err := sim.LoadTopology(preset)
	if err != nil {
		t.Fatal(err)
	}
	if nodes > 0 {
		if topo, err = topo.WithNodes(nodes); err != nil {
			t.Fatal(err)
		}
	}
	mc, err := NewMachine(topo, s)
	if err != nil {
		t.Fatal(err)
	}
	return mc
}

func preset(t testing.TB, name string) Model {
	t.Helper()
	m, ok := Preset(name)
	if !ok {
		t.Fatalf("no preset %s", name)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	return m
}

func evaluatorFor(t testing.TB, m Model, s Setup, mc *Machine) *evaluator {
	t.Helper()
	if err := s.Validate(&m); err != nil {
		t.Fatal(err)
	}
	return newEvaluator(&m, &s, mc, newPricer(mc, nil, nil))
}

func run(t testing.TB, m Model, s Setup, mc *Machine) *Result {
	t.Helper()
	r, err := Plan(Options{Model: m, Setup: s, Machine: mc})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A GPT layer's activations are Korthikanti et al.'s Table 2 with sequence parallelism:
// sbh(34 + 5as/h)/t stored in full, 34 sbh/t with selective recomputation, 2sbh/t with full.
func TestActivationsAreKorthikanti(t *testing.T) {
	m := preset(t, "gpt3-175b")
	s := DefaultSetup()
	s.Seq, s.MicroBatch, s.GlobalBatch = 2048, 2, 64
	e := evaluatorFor(t, m, s, machine(t, "dgx-a100", 0, s))
	sbh := float64(s.Seq * s.MicroBatch * m.Hidden)
	a, h := float64(m.Heads), float64(m.Hidden)
	for _, tp := range []int{1, 8} {
		l := Layout{TP: tp, CP: 1, PP: 1, DP: 1, EP: 1, VPP: 1, MicroBatches: 1}
		for rc, want := range map[string]float64{
			"none":      sbh * (34 + 5*a*float64(s.Seq)/h) / float64(tp),
			"selective": 34 * sbh / float64(tp),
			"full":      2 * sbh / float64(tp),
		} {
			if got, _ := e.layerActivation(l, false, rc); math.Abs(got/want-1) > 1e-12 {
				t.Errorf("TP%d %s: %.6g bytes a layer; Korthikanti's %.6g", tp, rc, got, want)
			}
		}
	}
}

// A pipeline stage holds the micro-batches Megatron's schedules keep in flight: 1F1B, PP - i;
// interleaved over v chunks, 2(PP-i-1) + (v-1) PP + 1 chunks of 1/v of the stage's layers,
// Korthikanti's PP (1 + (PP-1)/(PP v)) on the first stage; never more than the m micro-batches
// of a step.
func TestStageActivationsFollowTheSchedule(t *testing.T) {
	m := preset(t, "gpt3-175b")
	s := DefaultSetup()
	s.Seq, s.MicroBatch, s.GlobalBatch = 2048, 1, 64
	e := evaluatorFor(t, m, s, machine(t, "dgx-a100", 0, s))
	one, _ := e.layerActivation(Layout{TP: 8, CP: 1, PP: 8, DP: 1, EP: 1, VPP: 2, MicroBatches: 8}, false, "selective")
	for _, c := range []struct {
		vpp, micro, stage int
		want              float64 // micro-batches' worth in flight
	}{
		{1, 32, 0, 8}, {1, 32, 7, 1}, {1, 4, 0, 4},
		{2, 32, 0, 8 + 7.0/2}, {2, 32, 7, (8 + 1) / 2.0}, {2, 32, 3, (2*4 + 8 + 1) / 2.0},
		{2, 8, 0, 8}, // 8 micro-batches exist: all their chunks, no more
	} {
		l := Layout{TP: 8, CP: 1, PP: 8, DP: 1, EP: 1, VPP: c.vpp, MicroBatches: c.micro}
		st := stage{index: c.stage, first: 0, last: 0} // one layer, no embedding or head
		if got := e.stageActivations(l, st, "selective") / one; math.Abs(got-c.want) > 1e-9 {
			t.Errorf("PP8 v%d m%d stage %d: %.4g micro-batches in flight; want %.4g", c.vpp, c.micro, c.stage, got, c.want)
		}
	}
}

// ZeRO-2 keeps a shard of the gradients, so it reduce-scatters each micro-batch's as its
// backward makes them, where ZeRO-1 reduce-scatters once a step (DeepSpeed#338).
func TestZeRO2ReducesEveryMicroBatch(t *testing.T) {
	for zero, want := range map[int]float64{1: 1, 2: 16} {
		s := DefaultSetup()
		s.ZeRO, s.Seq, s.GlobalBatch = zero, 4096, 64
		e := evaluatorFor(t, preset(t, "llama-3.1-8b"), s, machine(t, "dgx-h100", 2, s))
		l := Layout{TP: 1, CP: 1, PP: 1, DP: 4, EP: 1, VPP: 1, MicroBatches: 16}
		_, colls, err := e.price(l)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(colls, func(c Collective) bool { return c.Group == "dp" && c.Collective == "reducescatter" })
		if i < 0 || colls[i].PerStep != want {
			t.Errorf("ZeRO-%d: dp reducescatter %+v; want %g a step", zero, colls, want)
		}
	}
}

// Model states per GPU are the ZeRO paper's (Rajbhandari et al. 2020, Figure 1: 2Ψ + 2Ψ + KΨ
// with K = 12, sharded by stage over the data-parallel ranks): for Ψ = 7.5 B over 64 ranks
// 120, 31.4, 16.6 and 1.9 GB.
func TestModelStatesAreZeRO(t *testing.T) {
	// A GPT-like model of about 7.5 B parameters (Narayanan et al. 2021's 7.5 B row).
	m := Model{Name: "gpt-7.5b", Layers: 36, Hidden: 4096, Heads: 32, FFN: 4 * 4096, Vocab: 51200, TiedEmbeddings: true, Bias: true, Positions: 2048}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	psi := m.Params()
	figure := map[int]float64{0: 120, 1: 31.4, 2: 16.6, 3: 1.9} // GB at Ψ = 7.5e9
	for zero := range 4 {
		s := DefaultSetup()
		s.ZeRO, s.GlobalBatch, s.Seq = zero, 64, 1024
		e := evaluatorFor(t, m, s, machine(t, "dgx-h100", 8, s))
		l := Layout{TP: 1, CP: 1, PP: 1, DP: 64, EP: 1, VPP: 1, MicroBatches: 1}
		mem := e.memory(l)
		states := float64(mem.Weights + mem.Gradients + mem.Optimizer)
		if zero == 3 {
			states -= 2 * 2 * e.largestLayer // the gathered layers, not a model state
		}
		want := map[int]float64{0: 16 * psi, 1: 4*psi + 12*psi/64, 2: 2*psi + 14*psi/64, 3: 16 * psi / 64}[zero]
		if math.Abs(states/want-1) > 1e-6 {
			t.Errorf("ZeRO-%d: %.4g bytes of model states, the paper's formula %.4g", zero, states, want)
		}
		if got := want / psi * 7.5e9 / 1e9; math.Abs(got-figure[zero]) > 0.05 {
			t.Errorf("ZeRO-%d: the formula gives %.2f GB for 7.5 B parameters, the paper's figure %.1f", zero, got, figure[zero])
		}
	}
}

// Stages take the layers evenly; the extra ones, when PP does not divide them, go to the middle
// stages, as Llama 3 balanced its 126 layers over 16 stages (7 on the first and last, 8 between).
func TestUnevenStages(t *testing.T) {
	s := DefaultSetup()
	s.UnevenPP = true
	for _, c := range []struct {
		model string
		pp    int
		want  []int
	}{
		{"llama-3.1-405b", 16, []int{7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}},
		{"llama-3.1-8b", 4, []int{8, 8, 8, 8}},
		{"deepseek-v3", 2, []int{31, 30}},
		{"deepseek-v3", 16, []int{3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 3}},
		{"llama-3.1-70b", 3, []int{27, 27, 26}},
	} {
		e := evaluatorFor(t, preset(t, c.model), s, machine(t, "dgx-h100", 0, s))
		sts := e.stages(Layout{TP: 1, CP: 1, PP: c.pp, DP: 1, EP: 1, VPP: 1, MicroBatches: 1})
		next := 0
		for i, st := range sts {
			if st.first != next || st.layers() != c.want[i] || st.index != i || st.embedding != (i == 0) || st.head != (i == c.pp-1) {
				t.Errorf("%s PP%d stage %d: %+v; want %d layers from %d", c.model, c.pp, i, st, c.want[i], next)
			}
			next = st.last + 1
		}
		if next != e.model.Layers {
			t.Errorf("%s PP%d: the stages hold %d layers of %d", c.model, c.pp, next, e.model.Layers)
		}
	}
}

// Every collective a plan prices is the simulator's time for the same collective, size and GPUs.
func TestCollectivesPricedBySimulator(t *testing.T) {
	s := DefaultSetup()
	s.Seq, s.GlobalBatch = 8192, 512
	mc := machine(t, "dgx-h100", 4, s)
	r := run(t, preset(t, "llama-3.1-70b"), s, mc)
	if !r.Fits || len(r.Ranked) == 0 {
		t.Fatalf("70B does not fit on 32 H100: %+v", r.Rejected)
	}
	kinds := map[string]bool{}
	for _, c := range r.Ranked[0].Collectives {
		kinds[c.Group] = true
		devs := make([]int, c.Ranks)
		if c.Ranks > len(c.GPUs) {
			t.Fatalf("%s: %d ranks, %d GPUs listed", c.Group, c.Ranks, len(c.GPUs))
		}
		copy(devs, c.GPUs)
		us, err := sim.CollectiveTime(mc.Topo, devs, nil, c.Collective, c.Bytes)
		if err != nil || us != c.TimeUS || c.PricedBy != "simulator" {
			t.Errorf("%s %s of %d B on %v: %.1f us by %s; the simulator says %.1f (%v)", c.Group, c.Collective, c.Bytes, devs, c.TimeUS, c.PricedBy, us, err)
		}
		if math.Abs(c.TotalS-c.PerStep*c.TimeUS/1e6) > 1e-9*c.TotalS {
			t.Errorf("%s %s: total %.6g s, calls x time %.6g", c.Group, c.Collective, c.TotalS, c.PerStep*c.TimeUS/1e6)
		}
	}
	if !kinds["tp"] || !kinds["pp"] {
		t.Errorf("the first layout, %s, prices %v; want TP and PP collectives", r.Ranked[0].Layout, kinds)
	}
}

// TP groups are consecutive GPUs of a node, DP groups strided across nodes, as Megatron numbers
// ranks; and a TP group that leaves the node crosses the network and loses for it.
func TestGroupsAndLinks(t *testing.T) {
	s := DefaultSetup()
	s.Seq, s.GlobalBatch, s.TP, s.PP, s.AllowTPAcrossNodes = 4096, 64, 16, 1, true
	mc := machine(t, "dgx-h100", 4, s)
	// A 40 B model with as many KV heads as heads, so that TP 16 divides them.
	m := Model{Name: "mha-40b", Layers: 48, Hidden: 8192, Heads: 64, FFN: 28672, Vocab: 128256, Gated: true}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	r := run(t, m, s, mc)
	if !r.Fits {
		t.Fatal("TP16 does not fit")
	}
	c := r.Ranked[0]
	tp, dp := firstOf(&c, "tp"), firstOf(&c, "dp")
	if tp == nil || dp == nil {
		t.Fatalf("no TP or DP collective: %+v", c.Collectives)
	}
	if tp.Where != "0-15" || tp.Nodes != 2 || tp.Link != "infiniband" {
		t.Errorf("TP16: GPUs %s on %d nodes over %s; want 0-15, 2 nodes, infiniband", tp.Where, tp.Nodes, tp.Link)
	}
	if dp.Where != "0,16" || dp.Link != "infiniband" {
		t.Errorf("DP2 of TP16: GPUs %s over %s; want 0,16 over infiniband", dp.Where, dp.Link)
	}

	// Left to itself, the plan keeps TP inside the node, and says why a TP16 loses.
	s.TP = 0
	r = run(t, m, s, mc)
	var lost bool
	for _, c := range r.Ranked {
		if c.Layout.TP == 16 && c.Rank > 1 {
			lost = strings.Contains(strings.Join(c.Verdict, " "), "TP collectives") && strings.Contains(strings.Join(c.Verdict, " "), "infiniband")
		}
	}
	if r.Ranked[0].Layout.TP > 8 || !lost {
		for _, c := range r.Ranked {
			t.Logf("%d %s: %v", c.Rank, c.Layout, c.Verdict)
		}
		t.Errorf("the plan's choice is %s, and no TP16 loses for its TP collectives over the network", r.Ranked[0].Layout)
	}
	s.AllowTPAcrossNodes = false
	r = run(t, m, s, mc)
	var rejected bool
	for _, rj := range r.Rejected {
		rejected = rejected || (rj.Reason == "TP across NVLink domains" && strings.Contains(rj.Example, "--allow-tp-across-nodes"))
	}
	if !rejected {
		t.Errorf("TP16 is not rejected without --allow-tp-across-nodes: %+v", r.Rejected)
	}
}

// The bubble is (PP-1)/(v m) micro-batch times; the interleaved schedule divides it by v and
// sends v times as much between stages.
func TestBubble(t *testing.T) {
	s := DefaultSetup()
	s.Seq, s.GlobalBatch = 4096, 32
	m := preset(t, "llama-3.1-70b")
	mc := machine(t, "dgx-h100", 4, s)
	e := evaluatorFor(t, m, s, mc)
	one := Layout{TP: 8, CP: 1, PP: 4, DP: 1, EP: 1, VPP: 1, MicroBatches: 32}
	two := one
	two.VPP = 2
	t1, c1, err := e.price(one)
	if err != nil {
		t.Fatal(err)
	}
	t2, c2, err := e.price(two)
	if err != nil {
		t.Fatal(err)
	}
	perMB := func(st StepTime) float64 { return (st.ComputeS + st.TPS + st.CPS + st.EPS + st.PPS) / 32 }
	if math.Abs(t1.BubbleS-3*perMB(t1)) > 1e-9 || math.Abs(t2.BubbleS-1.5*perMB(t2)) > 1e-9 {
		t.Errorf("bubbles %.4g and %.4g s; want 3 and 1.5 micro-batch times (%.4g, %.4g)", t1.BubbleS, t2.BubbleS, 3*perMB(t1), 1.5*perMB(t2))
	}
	if p1, p2 := firstOf(&Candidate{Collectives: c1}, "pp"), firstOf(&Candidate{Collectives: c2}, "pp"); p1 == nil || p2 == nil || p2.PerStep != 2*p1.PerStep {
		t.Errorf("pipeline sends: %+v and %+v; want twice as many with v = 2", p1, p2)
	}
	if t1.ComputeS != t2.ComputeS {
		t.Errorf("the schedule changed the compute: %.6g and %.6g s", t1.ComputeS, t2.ComputeS)
	}
}

// The data-parallel reduction hides behind the last micro-batch's backward but for its last
// bucket; ZeRO-1's weights' all-gather behind the next forward but for its first.
func TestDataParallelOverlap(t *testing.T) {
	s := DefaultSetup()
	s.Seq, s.GlobalBatch = 4096, 64
	m := preset(t, "llama-3.1-8b")
	mc := machine(t, "dgx-h100", 2, s)
	e := evaluatorFor(t, m, s, mc)
	l := Layout{TP: 8, CP: 1, PP: 1, DP: 2, EP: 1, VPP: 1, MicroBatches: 32}
	st, colls, err := e.price(l)
	if err != nil {
		t.Fatal(err)
	}
	dense, _ := e.stageParams(l, e.stages(l)[0])
	buckets := math.Ceil(dense / bucketParams)
	var rs, ag *Collective
	for i := range colls {
		if colls[i].Group == "dp" && colls[i].Collective == "reducescatter" {
			rs = &colls[i]
		}
		if colls[i].Group == "dp" && colls[i].Collective == "allgather" {
			ag = &colls[i]
		}
	}
	if rs == nil || ag == nil {
		t.Fatalf("no DP reduce-scatter and all-gather: %+v", colls)
	}
	bwd := st.BackwardMS / 1e3
	if want := max(rs.TotalS/buckets, rs.TotalS-bwd); math.Abs(rs.ExposedS-want) > 1e-12 {
		t.Errorf("reduce-scatter exposed %.6g s; want max(T/buckets, T - backward) = %.6g", rs.ExposedS, want)
	}
	if want := ag.TotalS / buckets; math.Abs(ag.ExposedS-want) > 1e-12 {
		t.Errorf("all-gather exposed %.6g s; want T/buckets = %.6g", ag.ExposedS, want)
	}
	if math.Abs(st.DPS-rs.ExposedS-ag.ExposedS) > 1e-12 {
		t.Errorf("DP time %.6g s is not what the two leave exposed", st.DPS)
	}
}

// A measured curve prices its collective at its ranks and nodes, in the simulator's place:
// linear in size between the measured sizes, the smallest size's time below them, and the
// largest size's bandwidth above them.
func TestMeasuredCurve(t *testing.T) {
	c := Curve{File: "ar.json", Collective: "allreduce", Ranks: 8, Nodes: 1, Sizes: []int64{1 << 20, 1 << 30}, TimesUS: []float64{20, 4000}}
	for _, x := range []struct {
		bytes int64
		us    float64
		extra bool
	}{{1 << 20, 20, false}, {1 << 10, 20, true}, {1 << 31, 8000, true}, {(1<<20 + 1<<30) / 2, 2010, false}} {
		if us, extra := c.at(x.bytes); math.Abs(us-x.us) > 1e-9 || extra != x.extra {
			t.Errorf("%d B: %.4g us (extrapolated %v); want %.4g (%v)", x.bytes, us, extra, x.us, x.extra)
		}
	}
	s := DefaultSetup()
	mc := machine(t, "dgx-h100", 2, s)
	p := newPricer(mc, nil, []Curve{c})
	got, err := p.time("allreduce", line(0, 1, 8), 1<<30)
	if err != nil || got.us != 4000 || got.source != "measured ar.json" {
		t.Errorf("8 GPUs of a node: %+v, %v; want the curve's 4000 us", got, err)
	}
	// Not the same nodes, not the same collective: the simulator.
	for _, g := range []struct {
		coll string
		g    group
	}{{"allreduce", line(0, 2, 8)}, {"allgather", line(0, 1, 8)}, {"allreduce", line(0, 1, 4)}} {
		got, err := p.time(g.coll, g.g, 1<<30)
		if err != nil || got.source != "simulator" {
			t.Errorf("%s over %v: priced by %q (%v); want the simulator", g.coll, g.g.devs(), got.source, err)
		}
	}
}

// A model that fits nowhere is an answer: the closest layouts, and the smallest machine of the
// same nodes that would fit; a node without a NIC says no such machine can be built.
func TestNothingFits(t *testing.T) {
	s := DefaultSetup()
	r := run(t, preset(t, "llama-3.1-70b"), s, machine(t, "pcie-4090x8", 0, s))
	if r.Fits || len(r.Ranked) == 0 || r.Ranked[0].Rank != 0 || r.Ranked[0].Time == nil || !strings.HasPrefix(r.Ranked[0].Verdict[0], "does not fit: ") {
		t.Fatalf("70B on eight RTX 4090: fits %v, ranked %+v", r.Fits, r.Ranked)
	}
	f := r.SmallestFit
	if f == nil || f.Joinable || f.Nodes < 2 || f.Memory > r.Machine.MemoryBytes {
		t.Fatalf("smallest fit: %+v", f)
	}
	// The layout it names does fit on that many nodes, and one node fewer fits nothing.
	topo, _ := sim.LoadTopology("dgx-h100")
	s.Seq = 8192
	r = run(t, preset(t, "llama-3.1-405b"), s, machine(t, "dgx-h100", 0, s))
	if r.Fits || r.SmallestFit == nil || !r.SmallestFit.Joinable {
		t.Fatalf("405B on one DGX H100: fits %v, smallest %+v", r.Fits, r.SmallestFit)
	}
	n := r.SmallestFit.Nodes
	for _, nodes := range []int{n - 1, n} {
		big, err := topo.WithNodes(nodes)
		if err != nil {
			t.Fatal(err)
		}
		mc, _ := NewMachine(big, s)
		if got := run(t, preset(t, "llama-3.1-405b"), s, mc).Fits; got != (nodes == n) {
			t.Errorf("405B on %d DGX H100 fits: %v", nodes, got)
		}
	}
}

// Forced sizes that can never run are refused with the flag named.
func TestSetupValidate(t *testing.T) {
	m := preset(t, "llama-3.1-70b")
	for _, c := range []struct {
		edit func(*Setup)
		want string
	}{
		{func(s *Setup) { s.TP = 3 }, "tp 3: the model's 64 attention heads are not divisible by it"},
		{func(s *Setup) { s.TP = 16 }, "tp 16: the model's 8 KV heads are not divisible by it"},
		{func(s *Setup) { s.PP = 3 }, "pp 3: the model's 80 layers are not divisible by it"},
		{func(s *Setup) { s.PP = 81 }, "pp 81: the model has only 80 layers"},
		{func(s *Setup) { s.DP = 3 }, "dp 3: global-batch 512 is not divisible by dp x micro-batch (3)"},
		{func(s *Setup) { s.GlobalBatch, s.MicroBatch = 10, 4 }, "global-batch 10 is not a multiple of micro-batch 4"},
		{func(s *Setup) { s.EP = 2 }, "ep 2: the model has no experts"},
		{func(s *Setup) { s.CP = 3 }, "cp 3: seq 4096 is not divisible by 2 x cp"},
		{func(s *Setup) { s.Seq, s.TP = 4097, 2 }, "tp 2: sequence parallelism splits each rank's 4097 tokens 2 ways"},
		{func(s *Setup) { s.Precision = "fp4" }, `precision "fp4"`},
		{func(s *Setup) { s.Recompute = "some" }, `recompute "some"`},
		{func(s *Setup) { s.ComputeEfficiency = 1.5 }, "compute-efficiency 1.5"},
		{func(s *Setup) { s.Seq = 0 }, "seq 0"},
		{func(s *Setup) { s.VPP, s.Schedule = 2, "1f1b" }, "vpp 2: the 1f1b schedule"},
		{func(s *Setup) { s.PP, s.Schedule = 1, "interleaved" }, "schedule interleaved: pp 1 has no pipeline to interleave"},
		{func(s *Setup) { s.VPP = 9 }, "vpp 9: the interleaved schedule is weighed with 2 to 8 model chunks a GPU"},
		{func(s *Setup) { s.VPP = 7 }, "vpp 7: no pipeline of 2 or more stages splits the model's 80 layers into 7 chunks a stage"},
	} {
		s := DefaultSetup()
		c.edit(&s)
		if err := s.Validate(&m); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", s, err, c.want)
		}
	}
	if _, err := ParseZeRO("fsdp"); err != nil {
		t.Error(err)
	}
	if _, err := ParseZeRO("4"); err == nil {
		t.Error("ZeRO 4 accepted")
	}
	s := DefaultSetup()
	s.Precision = "fp8"
	topo, _ := sim.LoadTopology("dgx-a100")
	if _, err := NewMachine(topo, s); err == nil || !strings.Contains(err.Error(), "no FP8") {
		t.Errorf("fp8 on A100: %v", err)
	}
}

// Experts are split over EP and TP; their gradients and optimizer state reduced and sharded over
// the ranks that hold the same experts (Megatron-LM#4050's point: not over TP alone).
func TestExpertSharding(t *testing.T) {
	s := DefaultSetup()
	s.Seq, s.GlobalBatch = 4096, 256
	m := preset(t, "mixtral-8x7b")
	e := evaluatorFor(t, m, s, machine(t, "dgx-h100", 2, s))
	for _, c := range []struct{ tp, dp, ep int }{{1, 16, 1}, {1, 16, 8}, {2, 8, 4}} {
		l := Layout{TP: c.tp, CP: 1, PP: 1, DP: c.dp, EP: c.ep, VPP: 1, MicroBatches: 16}
		dense, expert := e.stageParams(l, e.stages(l)[0])
		want := m.ExpertParams() * float64(m.Layers) / float64(c.tp*c.ep)
		if math.Abs(expert/want-1) > 1e-12 {
			t.Errorf("TP%d EP%d: %.4g expert parameters a GPU; want %.4g", c.tp, c.ep, expert, want)
		}
		mem := e.memory(l)
		_, x := l.shards()
		if x != float64(c.dp/c.ep) {
			t.Errorf("TP%d DP%d EP%d: experts' state sharded over %v ranks; want DP/EP = %d", c.tp, c.dp, c.ep, x, c.dp/c.ep)
		}
		if want := int64(12 * (dense/float64(c.dp) + expert/x)); mem.Optimizer != want {
			t.Errorf("TP%d DP%d EP%d: optimizer state %d bytes; want %d", c.tp, c.dp, c.ep, mem.Optimizer, want)
		}
	}
}

// 256 GPUs plan fast: the search prunes by memory, then prices in order of a compute-only bound
// and stops when no layout left can beat the ranked ones. (A benchmark measures the time.)
func TestPlanLargeMoE(t *testing.T) {
	s := DefaultSetup()
	s.Seq, s.GlobalBatch, s.UnevenPP = 4096, 1024, true
	r := run(t, preset(t, "deepseek-v3"), s, machine(t, "dgx-h100", 32, s))
	if !r.Fits || r.Priced >= r.Searched || r.Priced > r.Fitting || len(r.Ranked) != DefaultTop {
		t.Fatalf("DeepSeek-V3 on 256 H100: fits %v, searched %d, fit %d, priced %d, ranked %d", r.Fits, r.Searched, r.Fitting, r.Priced, len(r.Ranked))
	}
	for i, c := range r.Ranked {
		if c.Rank != i+1 || (i > 0 && c.Time.StepS < r.Ranked[i-1].Time.StepS) || !c.Memory.Fits || len(c.Verdict) == 0 {
			t.Errorf("rank %d: %+v", i+1, c)
		}
	}
}

func BenchmarkPlan256(b *testing.B) {
	s := DefaultSetup()
	s.Seq, s.GlobalBatch, s.UnevenPP = 4096, 1024, true
	mc := machine(b, "dgx-h100", 32, s)
	m := preset(b, "deepseek-v3")
	for b.Loop() {
		if _, err := Plan(Options{Model: m, Setup: s, Machine: mc}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlan2048(b *testing.B) {
	s := DefaultSetup()
	s.Seq, s.GlobalBatch, s.UnevenPP, s.Precision = 4096, 15360, true, "fp8"
	mc := machine(b, "hgx-h800", 256, s)
	m := preset(b, "deepseek-v3")
	for b.Loop() {
		if _, err := Plan(Options{Model: m, Setup: s, Machine: mc}); err != nil {
			b.Fatal(err)
		}
	}
}
