package plan

import (
	"fmt"
	"strings"
)

// Layout is one way to spread the model over the machine: TP x CP x PP x DP GPUs, with EP expert
// groups carved out of DP, VPP model chunks per GPU (1: 1F1B; more: the interleaved schedule) and
// MicroBatches micro-batches per data-parallel replica per step.
type Layout struct {
	TP           int `json:"tp"`
	CP           int `json:"cp"`
	PP           int `json:"pp"`
	DP           int `json:"dp"`
	EP           int `json:"ep"`
	VPP          int `json:"vpp"`
	MicroBatches int `json:"micro_batches"`
}

// Schedule names the pipeline schedule.
func (l Layout) Schedule() string {
	if l.VPP > 1 {
		return "interleaved"
	}
	return "1f1b"
}

// String is the layout as the table shows it, e.g. "TP8 PP1 DP4", "TP8 PP4 DP2 1F1B",
// "TP4 CP2 PP2 DP4 EP4 v2" (the interleaved schedule with 2 model chunks per GPU).
func (l Layout) String() string {
	parts := []string{fmt.Sprintf("TP%d", l.TP)}
	if l.CP > 1 {
		parts = append(parts, fmt.Sprintf("CP%d", l.CP))
	}
	parts = append(parts, fmt.Sprintf("PP%d", l.PP), fmt.Sprintf("DP%d", l.DP))
	if l.EP > 1 {
		parts = append(parts, fmt.Sprintf("EP%d", l.EP))
	}
	switch {
	case l.VPP > 1:
		parts = append(parts, fmt.Sprintf("v%d", l.VPP))
	case l.PP > 1:
		parts = append(parts, "1F1B")
	}
	return strings.Join(parts, " ")
}

// shape is the layout without its schedule: the plan ranks shapes, each with its best schedule.
func (l Layout) shape() Layout {
	l.VPP = 0
	return l
}

// divisors returns n's divisors in increasing order.
func divisors(n int) []int {
	var small, large []int
	for d := 1; d*d <= n; d++ {
		if n%d == 0 {
			small = append(small, d)
			if d != n/d {
				large = append([]int{n / d}, large...)
			}
		}
	}
	return append(small, large...)
}

// maxVPP bounds the model chunks per GPU that the search tries: each one more is another pipeline
// send per micro-batch, and Narayanan et al. 2021 (section 3.1.3) show the returns past a few.
const maxVPP = 8

// minCPTokens is the fewest tokens per context-parallel rank the search tries (--cp forces any):
// no published configuration found goes below it (NVIDIA's NeMo recipe for Llama 3.1 405B:
// 8,192 tokens over CP 4; Llama 3's long-context stage: 131,072 over CP 16), and below it each
// GPU's kernels are small enough that the constant compute efficiency this plan assumes would
// flatter them.
const minCPTokens = 2048

// rejection is why a layout cannot run; kind groups them for the summary. A quiet one is a size
// the search does not try (more stages than layers, fewer than minCPTokens a CP rank, TP above
// the heads): it is shown only when no layout is left, to say why.
type rejection struct {
	kind, text string
	quiet      bool
	size       int // the size it bit: TP, CP, PP or DP, as the text begins
}

// enumerate lists the layouts of the machine's GPUs that the model and setup allow, and counts
// those they do not, by reason. A dimension the setup forces is held to its value.
func (e *evaluator) enumerate(gpus, domain int) (layouts []Layout, rejected []rejection) {
	m, s := e.model, e.setup
	forced := func(want, v int) bool { return want == 0 || want == v }
	for _, tp := range divisors(gpus) {
		if !forced(s.TP, tp) {
			continue
		}
		switch {
		case tp > m.Heads:
			rejected = append(rejected, rejection{"tp-heads", fmt.Sprintf("TP%d: more than the model's %d attention heads", tp, m.Heads), true, tp})
			continue
		case m.Heads%tp != 0:
			rejected = append(rejected, rejection{"heads", fmt.Sprintf("TP%d: %d attention heads are not divisible by %d", tp, m.Heads, tp), false, tp})
			continue
		case !m.MLA() && m.KVHeads%tp != 0:
			rejected = append(rejected, rejection{"kvheads", fmt.Sprintf("TP%d: %d KV heads are not divisible by %d", tp, m.KVHeads, tp), false, tp})
			continue
		case tp > domain && !s.AllowTPAcrossNodes:
			rejected = append(rejected, rejection{"tp-nodes", fmt.Sprintf("TP%d spans NVLink domains of %d GPUs (--allow-tp-across-nodes prices it)", tp, domain), false, tp})
			continue
		case domain%tp != 0 && !s.AllowTPAcrossNodes:
			// TP groups are consecutive GPUs: unless TP divides a domain's GPUs, some group
			// straddles two domains, and its collectives leave NVLink.
			rejected = append(rejected, rejection{"tp-nodes", fmt.Sprintf("TP%d does not divide NVLink domains of %d GPUs, so some of its groups span two (--allow-tp-across-nodes prices it)", tp, domain), false, tp})
			continue
		}
		for _, cp := range divisors(gpus / tp) {
			if !forced(s.CP, cp) {
				continue
			}
			// Megatron splits the sequence into 2 x CP chunks only with CP above 1
			// (get_batch_on_this_cp_rank): CP1 takes any length.
			if cp > 1 && 2*cp > s.Seq || (s.CP == 0 && cp > 1 && s.Seq/cp < minCPTokens && s.Seq%(2*cp) != 0) {
				rejected = append(rejected, rejection{"cp-seq", fmt.Sprintf("CP%d: seq %d does not split into 2 x %d chunks", cp, s.Seq, cp), true, cp})
				continue
			}
			if s.CP == 0 && cp > 1 && s.Seq/cp < minCPTokens {
				rejected = append(rejected, rejection{"cp-tokens", fmt.Sprintf("CP%d: %d tokens a rank, fewer than the %d the search tries (--cp %d forces it)", cp, s.Seq/cp, minCPTokens, cp), true, cp})
				continue
			}
			if cp > 1 && s.Seq%(2*cp) != 0 {
				rejected = append(rejected, rejection{"seq", fmt.Sprintf("CP%d: seq %d is not divisible by 2 x %d", cp, s.Seq, cp), false, cp})
				continue
			}
			if tp > 1 && (s.Seq/cp)%tp != 0 { // sequence parallelism splits a rank's tokens over TP
				rejected = append(rejected, rejection{"seq-tp", fmt.Sprintf("TP%d: sequence parallelism splits a rank's %d tokens %d ways, which they do not divide", tp, s.Seq/cp, tp), false, tp})
				continue
			}
			for _, pp := range divisors(gpus / (tp * cp)) {
				if !forced(s.PP, pp) {
					continue
				}
				if pp > m.Layers {
					rejected = append(rejected, rejection{"pp-layers", fmt.Sprintf("PP%d: more stages than the model's %d layers", pp, m.Layers), true, pp})
					continue
				}
				if m.Layers%pp != 0 && !s.UnevenPP {
					rejected = append(rejected, rejection{"layers", fmt.Sprintf("PP%d: %d layers are not divisible by %d (--uneven-pp allows it)", pp, m.Layers, pp), false, pp})
					continue
				}
				dp := gpus / (tp * cp * pp)
				if !forced(s.DP, dp) {
					continue
				}
				if s.GlobalBatch%(dp*s.MicroBatch) != 0 {
					rejected = append(rejected, rejection{"batch", fmt.Sprintf("DP%d: global batch %d is not divisible by DP x micro-batch (%d)", dp, s.GlobalBatch, dp*s.MicroBatch), false, dp})
					continue
				}
				micro := s.GlobalBatch / (dp * s.MicroBatch)
				if s.EP > 0 && dp%s.EP != 0 {
					rejected = append(rejected, rejection{"ep", fmt.Sprintf("DP%d: EP%d is carved out of DP and does not divide it", dp, s.EP), false, dp})
					continue
				}
				chunks := e.chunkCounts(pp, micro)
				if len(chunks) == 0 {
					rejected = append(rejected, rejection{"schedule", fmt.Sprintf("PP%d: the interleaved schedule needs at least %d micro-batches (there are %d) and the layers divisible by PP x v", pp, pp, micro), false, pp})
					continue
				}
				for _, ep := range divisors(dp) {
					if !forced(s.EP, ep) || (ep > 1 && !m.MoE()) || (m.MoE() && m.Experts%ep != 0) {
						continue
					}
					for _, v := range chunks {
						layouts = append(layouts, Layout{TP: tp, CP: cp, PP: pp, DP: dp, EP: ep, VPP: v, MicroBatches: micro})
					}
				}
			}
		}
	}
	return layouts, rejected
}

// chunkCounts is the model chunks per GPU to try for a pipeline of pp stages and micro
// micro-batches: 1 (1F1B) unless the setup asks for the interleaved schedule, and the interleaved
// counts v > 1 where the layers split evenly into pp x v chunks (or, with uneven stages, each
// chunk has a layer) and there are at least pp
// micro-batches. (Megatron once required the micro-batches to be a multiple of pp; it now groups
// them, and NVIDIA's NeMo recipe for Llama 3.1 405B runs v = 2 with pp 9 and 256 micro-batches.)
func (e *evaluator) chunkCounts(pp, micro int) []int {
	s := e.setup
	var vs []int
	if s.Schedule != "interleaved" && (s.VPP <= 1) {
		vs = append(vs, 1)
	}
	if s.Schedule == "1f1b" || pp < 2 || micro < pp {
		return vs
	}
	for v := 2; v <= maxVPP; v++ {
		if (s.VPP == 0 || s.VPP == v) && chunksFit(e.model.Layers, pp, v, s.UnevenPP) {
			vs = append(vs, v)
		}
	}
	return vs
}
