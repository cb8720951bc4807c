package plan

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Options is what Plan needs.
type Options struct {
	Model   Model
	Setup   Setup
	Machine *Machine
	Env     map[string]string // NCCL_* variables, which steer the simulated NCCL
	Curves  []Curve           // measured curves that price collectives in the simulator's place
	Top     int               // how many layouts to rank (0: DefaultTop)
}

// DefaultTop is how many layouts a plan ranks unless told.
const DefaultTop = 5

// Candidate is one layout as the plan weighed it.
type Candidate struct {
	Rank        int          `json:"rank"` // 1 is the plan's choice; 0 for a layout not ranked
	Layout      Layout       `json:"layout"`
	Schedule    string       `json:"schedule"`
	Memory      Memory       `json:"memory"`
	Time        *StepTime    `json:"time"` // nil when not priced
	Collectives []Collective `json:"collectives"`
	TokensPerS  float64      `json:"tokens_per_s"`
	MFU         float64      `json:"mfu"`
	Bubble      float64      `json:"bubble_fraction"` // (PP-1) / (v m)
	// Verdict: why the plan's choice wins (rank 1), or why this one loses to it.
	Verdict []string `json:"verdict"`
}

// Rejection counts the layouts left out for one reason, with the first as an example.
type Rejection struct {
	Reason  string `json:"reason"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

// SmallestFit is the smallest machine of the same nodes on which some layout fits.
type SmallestFit struct {
	Nodes  int    `json:"nodes"`
	GPUs   int    `json:"gpus"`
	Layout Layout `json:"layout"`
	Memory int64  `json:"memory_bytes"`
	// Joinable is false when the node has no NIC, so no such machine can be built of it.
	Joinable bool `json:"joinable"`
}

// ModelSummary is the model as planned.
type ModelSummary struct {
	Model
	Params            float64 `json:"params"`
	ActiveParams      float64 `json:"active_params"`
	TrainFLOPsToken   float64 `json:"train_flops_per_token"`
	TokensPerStep     int64   `json:"tokens_per_step"`
	ModelFLOPsPerStep float64 `json:"model_flops_per_step"`
}

// Result is a plan: the layouts weighed, the choice and why, and what was left out.
type Result struct {
	Model       ModelSummary `json:"model"`
	Machine     Machine      `json:"machine"`
	Setup       Setup        `json:"setup"`
	Pricing     string       `json:"pricing"`
	Curves      []Curve      `json:"measured_curves"`
	Assumptions []string     `json:"assumptions"`
	// Searched layouts: those that break no constraint; Fitting of them fit in memory; Priced
	// of those were priced in full (the others cannot beat the ranked ones even before their
	// data-parallel reduction).
	Searched int  `json:"searched"`
	Fitting  int  `json:"fitting"`
	Priced   int  `json:"priced"`
	Fits     bool `json:"fits"`
	// Ranked: the fastest layouts that fit, best first; when nothing fits, the layouts that come
	// closest, least memory first, priced as if they fitted (Rank 0).
	Ranked   []Candidate `json:"ranked"`
	Rejected []Rejection `json:"rejected"`
	// Shapes is how many of the priced layouts differ in more than their schedule: each shape is
	// ranked once, with its best schedule.
	Shapes      int          `json:"priced_shapes"`
	SmallestFit *SmallestFit `json:"smallest_fit"` // when nothing fits
	// FitBelow: when nothing fits, the most nodes below the machine's on which a layout fits (nil
	// when none does, or when that is SmallestFit).
	FitBelow *SmallestFit `json:"largest_fit_below"`
	// Runs: some layout of the machine breaks no constraint (Searched > 0), so that when nothing
	// fits, memory is the reason; when none runs, Advice says what to change.
	Runs   bool     `json:"runs"`
	Advice []string `json:"advice"`
	// RunsElsewhere: when nothing fits, some machine of these nodes up to gpubench's largest has a
	// layout that breaks no constraint (so memory, not the constraints, is what no machine meets).
	RunsElsewhere bool `json:"-"`
}

// Assumptions lists what the plan takes as given, for the reader (docs/plan.md says why).
func assumptions(s *Setup, m *Model) []string {
	a := []string{
		fmt.Sprintf("compute: %g of the GPU's peak dense %s throughput (--compute-efficiency), FLOPs = 6 N tokens + attention (PaLM, Appendix B)", s.ComputeEfficiency, s.Precision),
		"memory: 2 bytes per weight and gradient, optimizer state as the ZeRO paper (Adam 12, SGD with momentum 8 bytes per parameter), activations as Korthikanti et al. 2022 with sequence parallelism whenever TP > 1",
		"reserve per GPU: 1 GiB for the CUDA context and libraries plus 0.5 GiB of NCCL buffers per communicator (an assumption; --reserve replaces it)",
		"ranks in Megatron's order: TP consecutive GPUs of a node, then CP, then DP (EP a block of DP), then PP; each group priced as the first of its kind, alone on the machine",
		"overlap: TP, CP, EP and pipeline transfers on the critical path; DP gradients reduced in 40M-parameter buckets behind the last micro-batch's backward, the last bucket exposed; the weights' all-gather behind the next forward, the first bucket exposed",
	}
	if s.AllowTPAcrossNodes {
		a = append(a, "TP across NVLink domains (--allow-tp-across-nodes): a TP that does not divide a domain's GPUs is priced on its first group that spans the most domains")
	}
	if m.MoE() {
		a = append(a, "experts: EP groups carved out of DP, experts also split by TP (expert TP = TP), tokens routed evenly")
	}
	if s.Precision == "fp8" {
		a = append(a, "fp8: the GPU's FP8 peak for compute; memory and communication as bf16 (master weights, gradients and activations in 16 bits)")
	}
	return a
}

// Plan weighs every layout of the model on the machine and ranks those that fit.
func Plan(o Options) (*Result, error) {
	m, s, mc := o.Model, o.Setup, o.Machine
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if err := s.Validate(&m); err != nil {
		return nil, err
	}
	top := o.Top
	if top <= 0 {
		top = DefaultTop
	}
	e := newEvaluator(&m, &s, mc, newPricer(mc, o.Env, o.Curves))
	tokens := int64(s.GlobalBatch) * int64(s.Seq)
	r := &Result{
		Model: ModelSummary{Model: m, Params: m.Params(), ActiveParams: m.ActiveParams(), TrainFLOPsToken: m.TrainFLOPsPerToken(s.Seq),
			TokensPerStep: tokens, ModelFLOPsPerStep: m.TrainFLOPsPerToken(s.Seq) * float64(tokens)},
		Machine: *mc, Setup: s, Curves: o.Curves, Assumptions: assumptions(&s, &m), Pricing: "simulator",
	}
	if len(o.Curves) > 0 {
		r.Pricing = "measured curves where one matches the collective, ranks and nodes; the simulator otherwise"
	} else {
		r.Curves = []Curve{} // JSON lists are lists, empty or not
	}

	if err := s.ValidateMachine(mc); err != nil {
		return nil, err
	}
	layouts, rejected := e.enumerate(mc.GPUs, mc.DomainGPUs)
	r.Searched, r.Runs, r.Advice = len(layouts), len(layouts) > 0, []string{}
	var fitting, closest []Candidate
	for _, l := range layouts {
		c := Candidate{Layout: l, Schedule: l.Schedule(), Memory: e.memory(l), Bubble: float64(l.PP-1) / float64(l.VPP*l.MicroBatches)}
		if c.Memory.Fits {
			fitting = append(fitting, c)
		} else {
			closest = append(closest, c)
		}
	}
	r.Fitting = len(fitting)
	r.Rejected = summarize(rejected, closest, len(layouts) == 0)
	if len(fitting) == 0 {
		if len(layouts) == 0 {
			r.Advice = e.advice(rejected)
		}
		slices.SortStableFunc(closest, func(a, b Candidate) int { return cmp.Compare(a.Memory.Total, b.Memory.Total) })
		shown := map[Layout]bool{} // each shape once, with its schedule that needs least memory
		for _, c := range closest {
			if len(r.Ranked) == top || shown[c.Layout.shape()] {
				continue
			}
			shown[c.Layout.shape()] = true
			e.fillActivationsBy(c.Layout, &c.Memory)
			c.Verdict = []string{fmt.Sprintf("does not fit: %.1f GiB of %.1f per GPU", GiBOf(c.Memory.Total), GiBOf(c.Memory.Capacity))}
			// What it would take if it fitted, for the reader weighing more GPUs or less memory.
			t, colls, err := e.price(c.Layout)
			if err != nil {
				return nil, err
			}
			c.Time, c.Collectives = &t, colls
			c.TokensPerS = float64(tokens) / t.StepS
			c.MFU = r.Model.ModelFLOPsPerStep / (t.StepS * float64(mc.GPUs) * mc.PeakTFLOPS * 1e12)
			r.Ranked = append(r.Ranked, c)
		}
		r.SmallestFit, r.FitBelow, r.RunsElsewhere = e.smallestFit()
		return r, nil
	}
	r.Fits = true

	// Branch and bound: price layouts in order of their step without the data-parallel
	// reduction, and stop once that bound passes the top-th best step priced.
	bounds := make(map[Layout]float64, len(fitting))
	for _, c := range fitting {
		b, err := e.lowerBound(c.Layout)
		if err != nil {
			return nil, err
		}
		bounds[c.Layout] = b
	}
	slices.SortStableFunc(fitting, func(a, b Candidate) int { return cmp.Compare(bounds[a.Layout], bounds[b.Layout]) })
	// Each shape (TP, CP, PP, DP, EP) is ranked once, with its best schedule.
	var priced []Candidate
	for _, c := range fitting {
		if len(priced) >= top && bounds[c.Layout] >= priced[top-1].Time.StepS {
			break
		}
		t, colls, err := e.price(c.Layout)
		if err != nil {
			return nil, err
		}
		r.Priced++
		if !slices.ContainsFunc(priced, func(p Candidate) bool { return p.Layout.shape() == c.Layout.shape() }) {
			r.Shapes++
		}
		c.Time, c.Collectives = &t, colls
		c.TokensPerS = float64(tokens) / t.StepS
		c.MFU = r.Model.ModelFLOPsPerStep / (t.StepS * float64(mc.GPUs) * mc.PeakTFLOPS * 1e12)
		i := slices.IndexFunc(priced, func(p Candidate) bool { return p.Layout.shape() == c.Layout.shape() })
		switch {
		case i < 0:
			priced = append(priced, c)
		case compareCandidates(c, priced[i]) < 0:
			priced[i] = c
		}
		slices.SortStableFunc(priced, compareCandidates)
	}
	for i := range min(top, len(priced)) {
		c := priced[i]
		c.Rank = i + 1
		e.fillActivationsBy(c.Layout, &c.Memory)
		r.Ranked = append(r.Ranked, c)
	}
	best := &r.Ranked[0]
	best.Verdict = e.wins(best, r)
	for i := 1; i < len(r.Ranked); i++ {
		r.Ranked[i].Verdict = e.loses(best, &r.Ranked[i])
	}
	return r, nil
}

// compareCandidates orders priced layouts: the shorter step first, then the less memory, then
// the layout's name, so that the order is the same on every run.
func compareCandidates(a, b Candidate) int {
	if c := cmp.Compare(a.Time.StepS, b.Time.StepS); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Memory.Total, b.Memory.Total); c != 0 {
		return c
	}
	return cmp.Compare(a.Layout.String(), b.Layout.String())
}

// summarize groups the rejected layouts by reason, and the layouts that do not fit under one;
// the sizes the search does not try (quiet) only when no layout is left, to say why.
func summarize(rejected []rejection, closest []Candidate, none bool) []Rejection {
	out := []Rejection{}
	at := map[string]int{}
	for _, r := range rejected {
		if r.quiet && !none {
			continue
		}
		if i, ok := at[r.kind]; ok {
			out[i].Count++
			continue
		}
		at[r.kind] = len(out)
		out = append(out, Rejection{Reason: rejectionReason(r.kind), Count: 1, Example: r.text})
	}
	if len(closest) > 0 {
		near := slices.MinFunc(closest, func(a, b Candidate) int { return cmp.Compare(a.Memory.Total, b.Memory.Total) })
		out = append([]Rejection{{Reason: "does not fit in GPU memory", Count: len(closest),
			Example: fmt.Sprintf("the closest, %s, needs %.1f GiB of %.1f", near.Layout, GiBOf(near.Memory.Total), GiBOf(near.Memory.Capacity))}}, out...)
	}
	return out
}

func rejectionReason(kind string) string {
	switch kind {
	case "heads":
		return "attention heads not divisible by TP"
	case "kvheads":
		return "KV heads not divisible by TP"
	case "tp-nodes":
		return "TP across NVLink domains"
	case "seq":
		return "sequence not divisible by 2 x CP"
	case "layers":
		return "layers not divisible by PP"
	case "batch":
		return "global batch not divisible by DP x micro-batch"
	case "ep":
		return "EP does not divide DP"
	case "schedule":
		return "no interleaved schedule fits the pipeline"
	case "tp-heads":
		return "TP above the attention heads"
	case "cp-seq":
		return "sequence not split into 2 x CP chunks"
	case "seq-tp":
		return "sequence not divisible by TP (sequence parallelism)"
	case "cp-tokens":
		return "CP below the tokens a rank the search tries"
	case "pp-layers":
		return "PP above the layers"
	}
	return kind
}

// advice says what would let some layout run when every layout of the machine breaks a
// constraint: each change of the setup that, alone, leaves some layout of the machine that breaks
// none, with the smallest size of the constraint it lifts as the example.
func (e *evaluator) advice(rejected []rejection) []string {
	s := e.setup
	smallest := map[string]int{} // the smallest size each kind rejected
	for _, r := range rejected {
		if old, ok := smallest[r.kind]; !ok || r.size < old {
			smallest[r.kind] = r.size
		}
	}
	out := []string{}
	try := func(text string, change func(*Setup)) {
		alt, setup := *e, *s
		change(&setup)
		alt.setup = &setup
		if layouts, _ := alt.enumerate(e.machine.GPUs, e.machine.DomainGPUs); len(layouts) > 0 {
			out = append(out, text)
		}
	}
	if dp, ok := smallest["batch"]; ok {
		try(fmt.Sprintf("--global-batch a multiple of %d (DP%d x micro-batch %d)", dp*s.MicroBatch, dp, s.MicroBatch),
			func(x *Setup) { x.GlobalBatch *= dp })
	}
	if pp, ok := smallest["layers"]; ok && !s.UnevenPP {
		try(fmt.Sprintf("--uneven-pp (PP%d over %d layers)", pp, e.model.Layers), func(x *Setup) { x.UnevenPP = true })
	}
	if _, ok := smallest["tp-nodes"]; ok && !s.AllowTPAcrossNodes {
		try("--allow-tp-across-nodes", func(x *Setup) { x.AllowTPAcrossNodes = true })
	}
	if cp, ok := smallest["seq"]; ok {
		try(fmt.Sprintf("--seq a multiple of %d (2 x CP%d)", 2*cp, cp), func(x *Setup) { x.Seq *= 2 * cp })
	}
	if tp, ok := smallest["seq-tp"]; ok {
		try(fmt.Sprintf("--seq a multiple of %d (TP%d's sequence parallelism)", tp, tp), func(x *Setup) { x.Seq *= tp })
	}
	if cp, ok := smallest["cp-tokens"]; ok {
		try(fmt.Sprintf("--cp %d (%d tokens a rank)", cp, s.Seq/cp), func(x *Setup) { x.CP = cp })
	}
	if _, ok := smallest["schedule"]; ok && s.Schedule == "interleaved" {
		try("--schedule auto", func(x *Setup) { x.Schedule = "auto" })
	}
	return out
}

// smallestFit finds the fewest nodes of the machine's kind on which some layout fits, memory
// alone (nothing is priced), keeping the setup's forced sizes: from one node up, since a machine
// smaller than this one may fit where this one does not (its GPUs may divide the batch or the
// layers better), to gpubench's largest machine; nil when none does. below is the most nodes
// under the machine's on which a layout fits, when that is not the smallest; runs whether any
// machine tried has a layout that breaks no constraint.
func (e *evaluator) smallestFit() (smallest, below *SmallestFit, runs bool) {
	mc := e.machine
	per := mc.GPUsPerNode
	domainNodes := max(1, mc.DomainGPUs/per)
	for nodes := 1; nodes*per <= gpu.MaxGPUs; nodes++ {
		if nodes == mc.Nodes {
			if smallest != nil {
				break
			}
			continue
		}
		layouts, _ := e.enumerate(nodes*per, min(nodes, domainNodes)*per)
		runs = runs || len(layouts) > 0
		var best *SmallestFit
		for _, l := range layouts {
			mem := e.memory(l)
			if mem.Fits && (best == nil || mem.Total < best.Memory) {
				best = &SmallestFit{Nodes: nodes, GPUs: nodes * per, Layout: l, Memory: mem.Total, Joinable: mc.Joinable}
			}
		}
		switch {
		case best == nil:
		case smallest == nil:
			smallest = best
			if nodes > mc.Nodes {
				return smallest, nil, runs
			}
		case nodes < mc.Nodes:
			below = best
		}
	}
	return smallest, below, runs
}

// parts are a step's time components, in the order the verdicts weigh them.
func parts(t *StepTime) []struct {
	name string
	s    float64
} {
	return []struct {
		name string
		s    float64
	}{{"compute", t.ComputeS}, {"bubble", t.BubbleS}, {"tp", t.TPS}, {"cp", t.CPS}, {"ep", t.EPS}, {"pp", t.PPS}, {"dp", t.DPS}, {"optimizer", t.OptimizerS}}
}

var partNames = map[string]string{
	"compute": "compute", "bubble": "pipeline bubble", "tp": "TP all-gathers and reduce-scatters", "cp": "CP all-gathers and reduce-scatters",
	"ep": "expert all-to-alls", "pp": "pipeline sends", "dp": "data-parallel reduction (exposed)", "optimizer": "optimizer step",
}

// wins says why the plan's choice is the best: it fits, it is the fastest priced, and where its
// time goes.
func (e *evaluator) wins(best *Candidate, r *Result) []string {
	t := best.Time
	v := []string{fmt.Sprintf("fits: %.1f GiB of %.1f per GPU on its %s, %.1f GiB to spare",
		GiBOf(best.Memory.Total), GiBOf(best.Memory.Capacity), best.Memory.Stage, GiBOf(best.Memory.Capacity-best.Memory.Total))}
	if len(r.Ranked) > 1 {
		next := r.Ranked[1]
		v = append(v, fmt.Sprintf("fastest of the %d layouts priced (%d fit): %.3g s a step, %.1f%% ahead of %s", r.Priced, r.Fitting,
			t.StepS, 100*(next.Time.StepS/t.StepS-1), next.Layout))
	} else {
		v = append(v, fmt.Sprintf("the only layout that fits: %.3g s a step", t.StepS))
	}
	var shares []string
	for _, p := range parts(t) {
		if share := p.s / t.StepS; share >= 0.005 {
			shares = append(shares, fmt.Sprintf("%s %.0f%%", partNames[p.name], 100*share))
		}
	}
	v = append(v, "its step: "+strings.Join(shares, ", "))
	if best.Layout.PP > 1 {
		v = append(v, fmt.Sprintf("bubble (PP-1)/(v m) = %d/(%d x %d) = %.1f%% of the ideal step", best.Layout.PP-1, best.Layout.VPP, best.Layout.MicroBatches, 100*best.Bubble))
	}
	return v
}

// loses says why a layout loses to the best: the part of its step that grew most, in its terms.
func (e *evaluator) loses(best, c *Candidate) []string {
	bp, cp := parts(best.Time), parts(c.Time)
	worst, delta := 0, math.Inf(-1)
	for i := range cp {
		if d := cp[i].s - bp[i].s; d > delta {
			worst, delta = i, d
		}
	}
	slower := 100 * (c.Time.StepS/best.Time.StepS - 1)
	name := cp[worst].name
	head := fmt.Sprintf("%.1f%% slower", slower)
	var why string
	switch name {
	case "bubble":
		why = fmt.Sprintf("bubble %.1f%% ((PP-1)/(v m) = %d/(%d x %d)): %.3g s against %.3g s", 100*c.Bubble, c.Layout.PP-1, c.Layout.VPP, c.Layout.MicroBatches, cp[worst].s, bp[worst].s)
	case "tp":
		why = fmt.Sprintf("TP collectives %.3g s a step, not overlapped, against %.3g s", cp[worst].s, bp[worst].s) + e.linkNote(best, c, "tp")
	case "ep":
		why = fmt.Sprintf("expert all-to-alls %.3g s a step against %.3g s", cp[worst].s, bp[worst].s) + e.linkNote(best, c, "ep")
	case "cp":
		why = fmt.Sprintf("context-parallel all-gathers %.3g s a step against %.3g s", cp[worst].s, bp[worst].s) + e.linkNote(best, c, "cp")
	case "pp":
		why = fmt.Sprintf("pipeline sends %.3g s a step against %.3g s", cp[worst].s, bp[worst].s) + e.linkNote(best, c, "pp")
	case "dp":
		why = fmt.Sprintf("data-parallel reduction exposed %.3g s a step against %.3g s", cp[worst].s, bp[worst].s) + e.linkNote(best, c, "dp")
	case "compute":
		why = fmt.Sprintf("its busiest stage computes %.3g s a step against %.3g s", cp[worst].s, bp[worst].s) + e.stageNote(c)
	default:
		why = fmt.Sprintf("%s %.3g s against %.3g s", partNames[name], cp[worst].s, bp[worst].s)
	}
	return []string{head + ": " + why}
}

// linkNote compares the two layouts' collectives of a group, per byte: what a group crossing
// nodes costs against one that does not.
func (e *evaluator) linkNote(best, c *Candidate, kind string) string {
	mine, theirs := firstOf(c, kind), firstOf(best, kind)
	if mine == nil {
		return ""
	}
	where := fmt.Sprintf(" (%s over %d GPUs on %d node%s, %s)", mine.Collective, mine.Ranks, mine.Nodes, plural(mine.Nodes), mine.Link)
	if theirs == nil || theirs.Bytes == 0 || mine.Bytes == 0 || theirs.Link == mine.Link {
		return where
	}
	ratio := (mine.TimeUS / float64(mine.Bytes)) / (theirs.TimeUS / float64(theirs.Bytes))
	return fmt.Sprintf(" (%s over %s, %.1fx the time per byte of %s's over %s)", mine.Collective, mine.Link, ratio, best.Layout, theirs.Link)
}

func firstOf(c *Candidate, kind string) *Collective {
	for i := range c.Collectives {
		if c.Collectives[i].Group == kind {
			return &c.Collectives[i]
		}
	}
	return nil
}

// stageNote says why a layout's busiest stage computes longer than the best's: GEMMs that wait
// on memory (the roofline of layerTime), or more layers than an even share, or the output layer.
func (e *evaluator) stageNote(c *Candidate) string {
	l, m, s := c.Layout, e.model, e.setup
	tokens := float64(s.Seq*s.MicroBatch) / float64(l.CP)
	rate, bw := e.flopsRate(), e.memoryRate()
	if m.MoE() {
		weights := 2 * m.ExpertParams() / float64(l.TP*l.EP)
		flops := 2 * float64(m.TopK) * m.mlpParams(m.ExpertFFN) * tokens / float64(l.TP)
		if weights/bw > flops/rate {
			perExpert := tokens * float64(m.TopK*l.EP) / float64(m.Experts)
			return fmt.Sprintf(" (its routed experts' GEMMs wait on memory: %.1f GiB of expert weights a GPU and layer for %.0f tokens an expert; more EP would give each GPU fewer experts and more tokens each)",
				weights/GiB, perExpert)
		}
	}
	if dense := 2 * (m.AttentionParams() + m.DenseMLPParams()) / float64(l.TP); dense/bw > dense*tokens/rate {
		return fmt.Sprintf(" (its GEMMs wait on memory: %.0f tokens a GPU a micro-batch are too few to use the weights it reads)", tokens)
	}
	if l.PP < 2 {
		return ""
	}
	most := 0
	for _, st := range e.stages(l) {
		most = max(most, st.layers())
	}
	return fmt.Sprintf(" (%d layers on its busiest stage, %.3g on average over %d stages, and the output layer on the last)", most, float64(m.Layers)/float64(l.PP), l.PP)
}
