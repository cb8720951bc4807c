package plan

import (
	"fmt"
	"math"
)

// Memory per GPU, bytes, on the heavier of the pipeline's first and last stages. The first
// holds the input embedding and the most micro-batches in flight, the last the output layer and
// its logits.
//
// Sources: weights, gradients and optimizer state as the ZeRO paper counts them (Rajbhandari et
// al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", section 3.1:
// mixed-precision Adam keeps 2 bytes of fp16/bf16 weights, 2 of gradients and K = 12 of optimizer
// state per parameter, an fp32 master copy, momentum and variance; stage 1 shards the optimizer
// state over the data-parallel ranks, stage 2 the gradients too, stage 3 the weights too).
// Activations as Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
// Models", section 4, Table 2) count them per layer, sbh(34 + 5as/h) bytes for a GPT layer, with
// sequence parallelism dividing all of it by the tensor-parallel size, selective recomputation
// dropping the 5as/h attention term, full recomputation keeping only the layer's 2sbh input; the
// first pipeline stage holds PP micro-batches' worth (section 4.2.3), times 1 + (PP-1)/(PP v) with
// the interleaved schedule (the other stages, and the cap at the micro-batches there are, as
// Megatron-LM's schedule runs them: stageActivations). Their terms are generalised here to
// grouped-query and latent attention, gated MLPs and experts (docs/plan.md, "Memory").
type Memory struct {
	Weights         int64 `json:"weights_bytes"`
	Gradients       int64 `json:"gradients_bytes"`
	Optimizer       int64 `json:"optimizer_bytes"`
	Activations     int64 `json:"activations_bytes"`
	PipelineBuffers int64 `json:"pipeline_buffers_bytes"`
	Reserve         int64 `json:"reserve_bytes"` // CUDA context, libraries, NCCL: an assumption
	Total           int64 `json:"total_bytes"`
	// Stage is the stage these figures are for, the heaviest ("first stage", "stage 2", "last
	// stage", or "only stage" without a pipeline); FirstStage and LastStage are those two
	// stages' totals.
	Stage      string `json:"stage"`
	FirstStage int64  `json:"first_stage_bytes"`
	LastStage  int64  `json:"last_stage_bytes"`
	// ActivationsBy is the heavier stage's activations under each recomputation setting.
	ActivationsBy map[string]int64 `json:"activations_by_recompute_bytes"`
	Capacity      int64            `json:"capacity_bytes"`
	Fits          bool             `json:"fits"`

	heavy stage
}

// fillActivationsBy sets ActivationsBy: asked only for the layouts a plan shows.
func (e *evaluator) fillActivationsBy(l Layout, mem *Memory) {
	mem.ActivationsBy = map[string]int64{}
	for _, rc := range Recomputes {
		mem.ActivationsBy[rc] = bytesOf(e.stageActivations(l, mem.heavy, rc))
	}
}

// GiB is 2^30 bytes.
const GiB = 1 << 30

// The reserve per GPU that is not the model's: the CUDA context and the libraries' workspaces
// (cuBLAS, cuDNN), and NCCL's buffers for each communicator the layout creates (NCCL_BUFFSIZE,
// 4 MiB by default, per channel and connection and protocol, over tens of channels). An
// assumption, stated as such (docs/plan.md); --reserve replaces it.
const (
	reserveBase = 1 * GiB
	reserveComm = GiB / 2
)

// stage is the layers a pipeline stage holds, from first to last (both included).
type stage struct {
	index       int // from 0
	first, last int
	embedding   bool // holds the input embedding
	head        bool // holds the output layer
}

func (st stage) layers() int { return st.last - st.first + 1 }

// name is how the plan calls a stage.
func (st stage) name(pp int) string {
	switch {
	case pp == 1:
		return "only stage"
	case st.index == 0:
		return "first stage"
	case st.index == pp-1:
		return "last stage"
	}
	return fmt.Sprintf("stage %d", st.index)
}

// stageLayers is how many layers stage i of pp holds. When pp does not divide the layers, the
// extra ones go to the middle stages, as Llama 3 balanced its pipeline (Dubey et al. 2024,
// section 3.3.2: one layer fewer on the first and the last stage, which hold the embedding, the
// most micro-batches in flight, and the output layer); only when every middle stage has one does
// the first take another.
func (e *evaluator) stageLayers(pp, i int) int {
	base, extra := e.model.Layers/pp, e.model.Layers%pp
	middle := max(pp-2, 0)
	n := base
	if i >= 1 && i <= pp-2 && i <= extra {
		n++
	}
	if i == 0 && extra > middle {
		n++
	}
	return n
}

// stages returns a layout's pipeline stages, each with its layers; the embedding is on the first,
// the output layer on the last.
func (e *evaluator) stages(l Layout) []stage {
	p, base, extra := l.PP, e.model.Layers/l.PP, e.model.Layers%l.PP
	middle := max(p-2, 0)
	first := 0 // the first stage's extra layer, when the middle ones cannot take them all
	if extra > middle {
		first = 1
	}
	out := make([]stage, p)
	for i := range out {
		start := i * base
		if i > 0 {
			start += first + min(i-1, min(extra, middle))
		}
		out[i] = stage{i, start, start + e.stageLayers(p, i) - 1, i == 0, i == p-1}
	}
	return out
}

// stageParams is the parameters one GPU of a stage holds before ZeRO's sharding: dense ones
// (split by TP, replicated over DP) and routed experts' (split by TP and EP, replicated over the
// DP/EP ranks of the same expert). The last stage of a pipeline keeps its own copy of a tied
// embedding for the output layer, as Megatron does.
func (e *evaluator) stageParams(l Layout, st stage) (dense, expert float64) {
	m := e.model
	moe := float64(e.moeIn(st))
	expert = moe * m.ExpertParams()
	dense = e.paramSum[st.last+1] - e.paramSum[st.first] - expert
	if st.embedding {
		dense += m.EmbeddingParams()
	}
	if st.head {
		dense += m.HeadParams()
		if m.TiedEmbeddings && l.PP > 1 {
			dense += float64(m.Vocab) * float64(m.Hidden)
		}
	}
	return dense / float64(l.TP), expert / float64(l.TP*l.EP)
}

// layerActivation is one layer's activations per GPU for one micro-batch, bytes, under
// recomputation rc, for a layer with routed experts or a dense one; working is what a layer needs
// while it is recomputed (full recomputation brings one layer's activations back at a time).
func (e *evaluator) layerActivation(l Layout, moe bool, rc string) (stored, working float64) {
	m := e.model
	s, b := float64(e.setup.Seq)/float64(l.CP), float64(e.setup.MicroBatch)
	h, a, t := float64(m.Hidden), float64(m.Heads), float64(l.TP)
	sbh := s * b * h
	kv := m.kvHeads()
	// Attention (Korthikanti's 11sbh): its input, Q, K, V, the output projection's input, the
	// dropout mask; with latent attention, the latents too.
	attn := 2*sbh + 2*s*b*(a*m.qkDim()+kv*m.qkDim()+kv*m.vDim()+a*m.vDim()) + sbh
	if m.MLA() {
		attn += 2 * s * b * float64(m.QLoRARank+m.KVLoRARank+m.QKRopeDim)
	}
	// Scores, softmax, its dropout mask and output (5as^2b, local queries against the whole
	// sequence with context parallelism): what selective recomputation (and FlashAttention)
	// does not keep.
	scores := 5 * a * s * float64(e.setup.Seq) * b
	mlp := func(f int) float64 { // input, the up (and gate) projections' output, the activation's output
		if m.Gated {
			return 2*sbh + 6*s*b*float64(f)
		}
		return 2*sbh + 4*s*b*float64(f)
	}
	var ffn float64
	if moe {
		ffn = float64(m.TopK)*mlp(m.ExpertFFN) + float64(m.SharedExperts)*mlp(m.SharedFFN) + sbh + 4*s*b*float64(m.Experts)
	} else {
		ffn = mlp(m.FFN) + sbh // and the dropout mask
	}
	norms := 4 * sbh
	kept := (attn + ffn + norms) / t // sequence parallelism splits it all by TP
	full := kept + scores/t
	switch rc {
	case "none":
		return full, full
	case "selective":
		return kept, kept
	}
	return 2 * sbh / t, kept // full: each layer's input; one layer rebuilt at a time
}

// stageActivations is a stage's activations per GPU, bytes: its layers times the micro-batches
// it holds in flight, and, on the last stage, the output layer's input and fp32 logits
// (Korthikanti et al. 2022, section 4.3: 4sbh/t (1 + v/h)).
func (e *evaluator) stageActivations(l Layout, st stage, rc string) float64 {
	// 1F1B: stage i holds PP - i micro-batches in flight (the first PP, Korthikanti's "first
	// stage"), at most the m there are. Interleaved, stage i runs 2(PP-i-1) + (v-1) PP forward
	// chunks of 1/v of its layers before its first backward, and one more before each, at most
	// the m v there are (Megatron-LM, pipeline_parallel/schedules.py,
	// forward_backward_pipelining_with_interleaving): on the first stage PP + (PP-1)/v
	// micro-batches' worth, Korthikanti's 1 + (PP-1)/(PP v) times PP; on the last ((v-1) PP + 1)/v.
	inflight := float64(min(l.PP-st.index, l.MicroBatches))
	if v := l.VPP; v > 1 {
		inflight = float64(min(2*(l.PP-st.index-1)+(v-1)*l.PP+1, l.MicroBatches*v)) / float64(v)
	}
	var stored, working float64
	if moe := e.moeIn(st); moe > 0 {
		s, w := e.layerActivation(l, true, rc)
		stored, working = float64(moe)*s, w
	}
	if dense := st.layers() - e.moeIn(st); dense > 0 {
		s, w := e.layerActivation(l, false, rc)
		stored, working = stored+float64(dense)*s, max(working, w)
	}
	act := stored * inflight
	if rc == "full" {
		act += working
	}
	if st.head {
		s, b := float64(e.setup.Seq)/float64(l.CP), float64(e.setup.MicroBatch)
		act += 4 * s * b * (float64(e.model.Hidden) + float64(e.model.Vocab)) / float64(l.TP)
	}
	return act
}

// communicators counts the NCCL communicators a layout creates (groups of more than one GPU).
func communicators(l Layout) int {
	n := 0
	for _, size := range []int{l.TP, l.CP, l.PP, l.CP * l.DP, l.EP, l.CP * l.DP / l.EP} {
		if size > 1 {
			n++
		}
	}
	return n
}

// optimizerBytes is K, the optimizer state per parameter: Adam's fp32 master weights, momentum
// and variance (12, the ZeRO paper's K); SGD's master weights and momentum (8).
func (e *evaluator) optimizerBytes() float64 {
	if e.setup.Optimizer == "sgd" {
		return 8
	}
	return 12
}

// memory is a layout's memory per GPU.
func (e *evaluator) memory(l Layout) Memory {
	mem := Memory{Capacity: e.machine.MemoryBytes}
	d, edp := l.shards()
	zero := e.setup.ZeRO
	stageMem := func(st stage) Memory {
		dense, expert := e.stageParams(l, st)
		w, g, o := dense+expert, dense+expert, dense+expert
		if zero >= 1 {
			o = dense/d + expert/edp
		}
		if zero >= 2 {
			g = dense/d + expert/edp
		}
		if zero >= 3 {
			w = dense/d + expert/edp
		}
		sm := Memory{Weights: bytesOf(2 * w), Gradients: bytesOf(2 * g), Optimizer: bytesOf(e.optimizerBytes() * o)}
		if zero >= 3 { // the layer gathered for compute and the next one prefetched
			sm.Weights += bytesOf(2 * 2 * e.largestLayer / float64(l.TP))
		}
		sm.Activations = bytesOf(e.stageActivations(l, st, e.setup.Recompute))
		if l.PP > 1 { // a receive and a send buffer each way
			s, b := float64(e.setup.Seq)/float64(l.CP), float64(e.setup.MicroBatch)
			sm.PipelineBuffers = bytesOf(4 * 2 * s * b * float64(e.model.Hidden) / float64(l.TP))
		}
		sm.Reserve = reserveBase + int64(communicators(l))*reserveComm
		if r := e.setup.ReserveBytes; r != nil {
			sm.Reserve = *r
		}
		sm.Total = sm.Weights + sm.Gradients + sm.Optimizer + sm.Activations + sm.PipelineBuffers + sm.Reserve
		return sm
	}
	sts := e.stages(l)
	var heavy Memory
	var heavyStage stage
	for i, st := range sts {
		sm := stageMem(st)
		if i == 0 {
			mem.FirstStage = sm.Total
		}
		if i == len(sts)-1 {
			mem.LastStage = sm.Total
		}
		if i == 0 || sm.Total > heavy.Total {
			heavy, heavyStage = sm, st
		}
	}
	mem.Weights, mem.Gradients, mem.Optimizer = heavy.Weights, heavy.Gradients, heavy.Optimizer
	mem.Activations, mem.PipelineBuffers, mem.Reserve, mem.Total = heavy.Activations, heavy.PipelineBuffers, heavy.Reserve, heavy.Total
	mem.Stage, mem.heavy = heavyStage.name(l.PP), heavyStage
	mem.Fits = mem.Total <= mem.Capacity
	return mem
}

// maxBytes bounds every figure of bytes: a model far past any GPU's memory (2^60 B, an EiB) is
// held there rather than wrapping round int64, and a few of them still add up within it.
const maxBytes = 1 << 60

// bytesOf is a count of bytes worked out in floating point, held to maxBytes.
func bytesOf(x float64) int64 {
	if !(x < maxBytes) {
		return maxBytes
	}
	return int64(math.Ceil(x))
}

// GiBOf writes bytes as GiB for reasons and tables.
func GiBOf(b int64) float64 { return math.Round(float64(b)/GiB*10) / 10 }
