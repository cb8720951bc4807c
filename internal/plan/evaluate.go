package plan

import (
	"math"
)

// evaluator prices layouts of one model, setup and machine.
type evaluator struct {
	model   *Model
	setup   *Setup
	machine *Machine
	prices  *pricer

	// Per-layer figures, as prefix sums over the layers (index i holds layers 0 to i-1).
	tpGroups map[int]group // tpGroup's answers, by TP

	paramSum     []float64 // parameters
	moeSum       []int     // layers with routed experts
	largestLayer float64
}

func newEvaluator(m *Model, s *Setup, mc *Machine, p *pricer) *evaluator {
	e := &evaluator{model: m, setup: s, machine: mc, prices: p,
		paramSum: make([]float64, m.Layers+1), moeSum: make([]int, m.Layers+1)}
	for i := range m.Layers {
		e.paramSum[i+1] = e.paramSum[i] + m.LayerParams(i)
		e.moeSum[i+1] = e.moeSum[i]
		if m.moeLayer(i) {
			e.moeSum[i+1]++
		}
		e.largestLayer = max(e.largestLayer, m.LayerParams(i))
	}
	return e
}

// moeIn is the number of a stage's layers with routed experts.
func (e *evaluator) moeIn(st stage) int { return e.moeSum[st.last+1] - e.moeSum[st.first] }

// Collective is one kind of collective a layout issues each step, as every GPU sees it: the
// first group of its kind (the others are alike), priced once per size.
type Collective struct {
	Group      string  `json:"group"` // tp, cp, ep, pp, dp, dp-experts
	Collective string  `json:"collective"`
	Bytes      int64   `json:"bytes"` // as the collective's gpubench command takes the size
	Ranks      int     `json:"ranks"`
	Nodes      int     `json:"nodes"`
	GPUs       []int   `json:"gpus"`     // the first 16 of them
	Where      string  `json:"where"`    // the GPUs, written short: "0-7", "0,8,...,248"
	Link       string  `json:"link"`     // what the traffic crosses: nvlink, pcie, pcie-host, the network's kind
	PerStep    float64 `json:"per_step"` // calls per step on each GPU
	TimeUS     float64 `json:"time_us"`  // one call
	TotalS     float64 `json:"total_s"`
	ExposedS   float64 `json:"exposed_s"` // what the step waits for, before the bubble's share
	Overlap    string  `json:"overlap"`   // the rule applied
	PricedBy   string  `json:"priced_by"` // simulator, or the measured file
}

// StepTime is a step's time by what it is spent on. Compute, TP, CP, EP, PP and (with ZeRO-3)
// part of DP are per micro-batch costs times the micro-batches; Bubble is the pipeline's idle
// share of all of them; DP is what the data-parallel reduction leaves exposed; Optimizer the
// update.
type StepTime struct {
	ComputeS   float64 `json:"compute_s"`
	BubbleS    float64 `json:"bubble_s"`
	TPS        float64 `json:"tp_s"`
	CPS        float64 `json:"cp_s"`
	EPS        float64 `json:"ep_s"`
	PPS        float64 `json:"pp_s"`
	DPS        float64 `json:"dp_s"`
	OptimizerS float64 `json:"optimizer_s"`
	StepS      float64 `json:"step_s"`
	// One micro-batch's forward and backward compute on the busiest stage, recomputation included.
	ForwardMS  float64 `json:"forward_ms"`
	BackwardMS float64 `json:"backward_ms"`
}

// Bucketing of the data-parallel gradient reduction, as Megatron's distributed data parallel
// buckets by default (megatron/core/distributed/distributed_data_parallel_config.py, bucket_size:
// max(40,000,000, 1,000,000 x DP) parameters).
const (
	bucketParams   = 40e6
	bucketPerDPRow = 1e6
)

// Bytes moved per parameter by an optimizer step, read and written: Adam reads the fp32 master
// weight, momentum, variance and the bf16 gradient and writes the three fp32 figures and the bf16
// weight (28); SGD with momentum 20.
func (e *evaluator) updateBytes() float64 {
	if e.setup.Optimizer == "sgd" {
		return 20
	}
	return 28
}

// flopsRate is the throughput a GPU's matrix multiplications reach, FLOP/s.
func (e *evaluator) flopsRate() float64 {
	return e.machine.PeakTFLOPS * 1e12 * e.setup.ComputeEfficiency
}

// layerTime is one layer's forward on one GPU for one micro-batch, seconds, by the roofline
// (Williams, Waterman and Patterson 2009, "Roofline: an insightful visual performance model"):
// each group of matrix multiplications takes the longer of its FLOPs at the compute rate and its
// weights read from memory at the GPU's bandwidth (a GPU's few tokens per expert, or a tiny
// micro-batch, leave its GEMMs waiting on memory); the attention scores are compute-bound. The
// GPU's tokens are the micro-batch's over CP, its FLOPs and weights split over TP (and the
// routed experts' weights over EP: with balanced routing each GPU's experts see its share of
// every EP rank's tokens, the same FLOPs as without EP, on fewer weights).
func (e *evaluator) layerTime(l Layout, moe bool) float64 {
	m, s := e.model, e.setup
	tokens := float64(s.Seq*s.MicroBatch) / float64(l.CP)
	rate, bw, tp := e.flopsRate(), e.memoryRate(), float64(l.TP)
	dense := m.AttentionParams() + m.normParams()
	if moe {
		dense += m.SharedParams()
	} else {
		dense += m.DenseMLPParams()
	}
	t := max(2*dense*tokens/tp/rate, 2*dense/tp/bw)
	if moe {
		active := float64(m.TopK) * m.mlpParams(m.ExpertFFN)
		t += max(2*active*tokens/tp/rate, 2*m.ExpertParams()/float64(l.TP*l.EP)/bw)
	}
	return t + m.attnCoreFLOPs(s.Seq)*tokens/tp/rate
}

// memoryRate is the GPU's memory bandwidth, bytes/s (infinite when the topology states none).
func (e *evaluator) memoryRate() float64 {
	if e.machine.MemoryGBs <= 0 {
		return math.Inf(1)
	}
	return e.machine.MemoryGBs * 1e9
}

// stageCompute is one micro-batch's forward and backward compute on one GPU of a stage, seconds:
// its layers (and the output layer on the last stage) by layerTime; the backward is twice the
// forward (the gradients of the inputs and of the weights), plus what recomputation runs again
// (each layer's forward with full recomputation, the attention scores with selective).
func (e *evaluator) stageCompute(l Layout, st stage) (fwd, bwd float64) {
	m, s := e.model, e.setup
	moe := e.moeIn(st)
	f := float64(moe)*e.layerTime(l, true) + float64(st.layers()-moe)*e.layerTime(l, false)
	var head float64
	if st.head {
		tokens, tp := float64(s.Seq*s.MicroBatch)/float64(l.CP), float64(l.TP)
		weights := 2 * float64(m.Vocab) * float64(m.Hidden)
		head = max(m.headFwdFLOPs()*tokens/tp/e.flopsRate(), weights/tp/e.memoryRate())
	}
	var again float64
	switch s.Recompute {
	case "full":
		again = f
	case "selective":
		again = float64(st.layers()) * m.attnCoreFLOPs(s.Seq) * float64(s.Seq*s.MicroBatch) / float64(l.TP*l.CP) / e.flopsRate()
	}
	return f + head, 2*(f+head) + again
}

// paceStage is the stage whose compute paces the pipeline: the one with the most layers, or the
// last with the output layer.
func (e *evaluator) paceStage(l Layout) (st stage, fwd, bwd float64) {
	for i, s := range e.stages(l) {
		f, b := e.stageCompute(l, s)
		if i == 0 || f+b > fwd+bwd {
			st, fwd, bwd = s, f, b
		}
	}
	return st, fwd, bwd
}

// optimizerTime is the update's memory traffic over the GPU's memory bandwidth: an optimistic
// bound, the update being bandwidth-bound.
func (e *evaluator) optimizerTime(l Layout) float64 {
	if e.machine.MemoryGBs <= 0 {
		return 0
	}
	var most float64
	for _, st := range e.stages(l) {
		dense, expert := e.stageParams(l, st)
		if e.setup.ZeRO >= 1 {
			d, x := l.shards()
			dense, expert = dense/d, expert/x
		}
		most = max(most, dense+expert)
	}
	return most * e.updateBytes() / (e.machine.MemoryGBs * 1e9)
}

// groups of a layout: Megatron's rank order, TP fastest, then CP, then DP (EP its consecutive
// blocks), then PP. The context-parallel ranks hold the same weights as the data-parallel ones,
// so gradients are reduced, and ZeRO shards, over CP x DP (Megatron's data-parallel group with
// context parallelism); a routed expert is replicated over the CP x DP/EP ranks that hold it.
func (l Layout) tpGroup() group { return line(0, 1, l.TP) }
func (l Layout) cpGroup() group { return line(0, l.TP, l.CP) }
func (l Layout) epGroup() group { return line(0, l.TP*l.CP, l.EP) }
func (l Layout) dpGroup() group { return line(0, l.TP, l.CP*l.DP) }
func (l Layout) edpGroup() group {
	return group{0, l.TP, l.CP, l.TP * l.CP * l.EP, l.DP / l.EP}
}

// tpGroup is the TP group a layout's TP collectives are priced on: the first, when TP divides an
// NVLink domain's GPUs (every group is then alike, inside one domain); else, as
// --allow-tp-across-nodes lets it, the first that spans the most NVLink domains and then nodes,
// since TP's collectives are on the critical path and the slowest group paces every step.
func (e *evaluator) tpGroup(l Layout) group {
	mc := e.machine
	if l.TP < 2 || mc.DomainGPUs%l.TP == 0 {
		return l.tpGroup()
	}
	if g, ok := e.tpGroups[l.TP]; ok {
		return g
	}
	worst := l.tpGroup()
	wn, wd := mc.span(worst)
	for first := l.TP; first+l.TP <= mc.GPUs; first += l.TP {
		g := line(first, 1, l.TP)
		if n, d := mc.span(g); d > wd || (d == wd && n > wn) {
			worst, wn, wd = g, n, d
		}
	}
	if e.tpGroups == nil {
		e.tpGroups = map[int]group{}
	}
	e.tpGroups[l.TP] = worst
	return worst
}

// shards are the ranks that ZeRO shards dense parameters' and experts' state over.
func (l Layout) shards() (dense, expert float64) {
	return float64(l.CP * l.DP), float64(l.CP * l.DP / l.EP)
}

// ppPairs are the stage boundaries worth pricing: the first inside a node and the first across
// nodes (the others are alike); the slowest sets the pipeline's pace.
func (e *evaluator) ppPairs(l Layout) []group {
	stride := l.TP * l.CP * l.DP
	var pairs []group
	inside, across := false, false
	for k := 0; k+1 < l.PP && !(inside && across); k++ {
		g := line(k*stride, stride, 2)
		if e.machine.Topo.NodeOf(g.first) == e.machine.Topo.NodeOf(g.first+stride) {
			if !inside {
				pairs, inside = append(pairs, g), true
			}
		} else if !across {
			pairs, across = append(pairs, g), true
		}
	}
	return pairs
}

// call prices one collective and records it: perMB calls per micro-batch (perStep per step when
// perMB is 0).
func (e *evaluator) call(out *[]Collective, kind, coll string, g group, bytes float64, perStep float64, overlap string) (Collective, error) {
	pr, err := e.prices.time(coll, g, bytesOf(bytes))
	if err != nil {
		return Collective{}, err
	}
	nodes, _ := e.machine.span(g)
	devs := g.devs()
	if len(devs) > 16 {
		devs = devs[:16] // enough to show the stride
	}
	c := Collective{Group: kind, Collective: coll, Bytes: bytesOf(bytes), Ranks: g.size(), Nodes: nodes, GPUs: devs, Where: g.text(),
		Link: e.machine.link(g), PerStep: perStep, TimeUS: pr.us, TotalS: perStep * pr.us / 1e6, Overlap: overlap, PricedBy: pr.source}
	*out = append(*out, c)
	return c, nil
}

// price times a layout's step: its collectives from the pricer, its compute from the GPUs'
// throughput, and the overlap rules of docs/plan.md ("Time").
func (e *evaluator) price(l Layout) (StepTime, []Collective, error) {
	t, colls, err := e.pipeline(l)
	if err != nil {
		return StepTime{}, nil, err
	}
	// Data parallelism, on the stage with the most parameters: its reduction ends the step.
	fwd, bwd := t.ForwardMS/1e3, t.BackwardMS/1e3
	dpColls, dpExposed, dpMB, err := e.dataParallel(l, e.mostParams(l), fwd, bwd)
	if err != nil {
		return StepTime{}, nil, err
	}
	mb := float64(l.MicroBatches)
	perMB := (t.ComputeS+t.TPS+t.CPS+t.EPS+t.PPS)/mb + dpMB
	t.BubbleS = float64(l.PP-1) / float64(l.VPP) * perMB
	t.DPS = dpExposed + mb*dpMB
	t.StepS = t.ComputeS + t.BubbleS + t.TPS + t.CPS + t.EPS + t.PPS + t.DPS + t.OptimizerS
	return t, append(colls, dpColls...), nil
}

// lowerBound is a layout's step time without its data-parallel reduction: pricing that can only
// add to it, so layouts whose bound passes the best steps already priced need no more pricing
// (the reduction's groups are the largest, and the dearest to price).
func (e *evaluator) lowerBound(l Layout) (float64, error) {
	t, _, err := e.pipeline(l)
	return t.StepS, err
}

// pipeline times a layout's step but for its data-parallel reduction: the compute, the TP, CP,
// EP and pipeline collectives of each micro-batch, the bubble, the optimizer.
func (e *evaluator) pipeline(l Layout) (StepTime, []Collective, error) {
	m, s := e.model, e.setup
	st, fwd, bwd := e.paceStage(l)
	colls := []Collective{}
	mb := float64(l.MicroBatches)
	sLoc, b := float64(s.Seq)/float64(l.CP), float64(s.MicroBatch)
	h, tp := float64(m.Hidden), float64(l.TP)
	layers, moe := float64(st.layers()), float64(e.moeIn(st))
	var tpMB, cpMB, epMB, ppMB float64 // exposed per micro-batch

	if l.TP > 1 { // sequence parallelism: an all-gather before and a reduce-scatter after each block
		calls := 4 * layers // attention and MLP blocks, forward and backward
		if s.Recompute == "full" {
			calls += 2 * layers
		}
		bytes := sLoc * b * h * 2
		for _, coll := range []string{"allgather", "reducescatter"} {
			c, err := e.call(&colls, "tp", coll, e.tpGroup(l), bytes, calls*mb, "none: on the critical path")
			if err != nil {
				return StepTime{}, nil, err
			}
			c.ExposedS = c.TotalS
			colls[len(colls)-1] = c
			tpMB += calls * c.TimeUS / 1e6
		}
	}
	if l.CP > 1 { // keys and values of the whole sequence, gathered forward, their gradients reduced backward
		bytes := float64(s.Seq) * b * m.kvHeads() * (m.qkDim() + m.vDim()) * 2 / tp
		for _, coll := range []string{"allgather", "reducescatter"} {
			c, err := e.call(&colls, "cp", coll, l.cpGroup(), bytes, layers*mb, "none: all-gathered before attention, as Llama 3 does")
			if err != nil {
				return StepTime{}, nil, err
			}
			c.ExposedS = c.TotalS
			colls[len(colls)-1] = c
			cpMB += layers * c.TimeUS / 1e6
		}
	}
	if l.EP > 1 && moe > 0 { // dispatch and combine, forward and backward
		bytes := sLoc * b * float64(m.TopK) * h * 2 / tp
		c, err := e.call(&colls, "ep", "alltoall", l.epGroup(), bytes, 4*moe*mb, "none: on the critical path")
		if err != nil {
			return StepTime{}, nil, err
		}
		c.ExposedS = c.TotalS
		colls[len(colls)-1] = c
		epMB += 4 * moe * c.TimeUS / 1e6
	}
	if l.PP > 1 { // each chunk sends its activations forward and receives their gradients back
		bytes := sLoc * b * h * 2 / tp
		var slowest Collective
		var tmp []Collective
		for _, g := range e.ppPairs(l) {
			c, err := e.call(&tmp, "pp", "sendrecv", g, bytes, 2*float64(l.VPP)*mb, "none: between stages on the critical path")
			if err != nil {
				return StepTime{}, nil, err
			}
			if c.TimeUS > slowest.TimeUS {
				slowest = c
			}
		}
		slowest.ExposedS = slowest.TotalS
		colls = append(colls, slowest)
		ppMB += 2 * float64(l.VPP) * slowest.TimeUS / 1e6
	}

	perMB := fwd + bwd + tpMB + cpMB + epMB + ppMB
	t := StepTime{
		ComputeS: mb * (fwd + bwd), BubbleS: float64(l.PP-1) / float64(l.VPP) * perMB,
		TPS: mb * tpMB, CPS: mb * cpMB, EPS: mb * epMB, PPS: mb * ppMB,
		OptimizerS: e.optimizerTime(l), ForwardMS: fwd * 1e3, BackwardMS: bwd * 1e3,
	}
	t.StepS = t.ComputeS + t.BubbleS + t.TPS + t.CPS + t.EPS + t.PPS + t.OptimizerS
	return t, colls, nil
}

// mostParams is the stage holding the most parameters per GPU.
func (e *evaluator) mostParams(l Layout) stage {
	var most stage
	var n float64
	for i, st := range e.stages(l) {
		d, x := e.stageParams(l, st)
		if i == 0 || d+x > n {
			most, n = st, d+x
		}
	}
	return most
}

// dataParallel prices the data-parallel traffic of one stage: with ZeRO 0 an all-reduce of the
// gradients, with ZeRO 1 and 2 a reduce-scatter of the gradients and an all-gather of the updated
// weights (Rajbhandari et al. 2020: the same volume as the all-reduce), each once per step over
// the DP group (dense parameters) and the DP/EP group (experts), but ZeRO-2's reduce-scatter
// every micro-batch: it keeps only its shard of the gradients, so each micro-batch's are reduced
// as its backward makes them (DeepSpeed reduces on every micro-step, deepspeedai/DeepSpeed#338);
// with ZeRO 3 an all-gather of each layer's weights forward and backward and a reduce-scatter of
// its gradients, every micro-batch (1.5 times the volume). Overlap: gradients reduce in buckets
// as the (last) micro-batch's backward runs, so all but the last bucket hide behind it; the
// weights' all-gather hides behind the next step's forward but for its first bucket; ZeRO-3
// prefetches each layer's weights during the previous layer's compute. Returns the exposed time
// per step, and for ZeRO-2 and 3 the exposed time per micro-batch.
func (e *evaluator) dataParallel(l Layout, st stage, fwd, bwd float64) (colls []Collective, perStep, perMB float64, err error) {
	dense, expert := e.stageParams(l, st)
	type part struct {
		kind   string
		g      group
		params float64
	}
	parts := []part{{"dp", l.dpGroup(), dense}}
	if expert > 0 {
		parts = append(parts, part{"dp-experts", l.edpGroup(), expert})
	}
	mb := float64(l.MicroBatches)
	layers := float64(st.layers())
	for _, p := range parts {
		if p.g.size() < 2 || p.params <= 0 {
			continue
		}
		bytes := 2 * p.params
		if e.setup.ZeRO == 3 {
			layer := bytes / layers
			ag, err := e.call(&colls, p.kind, "allgather", p.g, layer, 2*layers*mb, "prefetched during the previous layer's compute")
			if err != nil {
				return nil, 0, 0, err
			}
			rs, err := e.call(&colls, p.kind, "reducescatter", p.g, layer, layers*mb, "during the next layer's backward")
			if err != nil {
				return nil, 0, 0, err
			}
			a, r := ag.TimeUS/1e6, rs.TimeUS/1e6
			exposedF := a + (layers-1)*max(0, a-fwd/layers)
			exposedB := a + r + (layers-1)*max(0, a+r-bwd/layers)
			perMB += exposedF + exposedB
			colls[len(colls)-2].ExposedS = mb * exposedF
			colls[len(colls)-1].ExposedS = mb * exposedB
			continue
		}
		buckets := math.Ceil(p.params / max(bucketParams, bucketPerDPRow*float64(p.g.size())))
		if e.setup.ZeRO == 0 {
			c, err := e.call(&colls, p.kind, "allreduce", p.g, bytes, 1, "in buckets during the last micro-batch's backward; the last bucket exposed")
			if err != nil {
				return nil, 0, 0, err
			}
			exp := max(c.TotalS/buckets, c.TotalS-bwd)
			colls[len(colls)-1].ExposedS = exp
			perStep += exp
			continue
		}
		calls, when := 1.0, "in buckets during the last micro-batch's backward; the last bucket exposed"
		if e.setup.ZeRO == 2 {
			calls, when = mb, "in buckets during each micro-batch's backward; the last bucket exposed"
		}
		rs, err := e.call(&colls, p.kind, "reducescatter", p.g, bytes, calls, when)
		if err != nil {
			return nil, 0, 0, err
		}
		one := rs.TotalS / calls
		exp := max(one/buckets, one-bwd)
		colls[len(colls)-1].ExposedS = calls * exp
		if e.setup.ZeRO == 2 {
			perMB += exp
		} else {
			perStep += exp
		}
		ag, err := e.call(&colls, p.kind, "allgather", p.g, bytes, 1, "during the next step's forward; the first bucket exposed")
		if err != nil {
			return nil, 0, 0, err
		}
		expAG := ag.TotalS / buckets
		colls[len(colls)-1].ExposedS = expAG
		perStep += expAG
	}
	return colls, perStep, perMB, nil
}
