// Package plan answers which parallel layout (tensor, pipeline, data, expert and context
// parallelism) fits a transformer model on a machine, and what its communication costs there:
// memory per GPU from published formulas, compute from the GPUs' datasheet throughput, and every
// collective priced by the simulator (sim.CollectiveTime) or by curves measured on the machine.
// docs/plan.md states every formula, its source and every assumption.
package plan

import (
	"fmt"
	"slices"
	"strings"
)

// Model is a decoder-only transformer as planning needs it. Sizes are counts (not bytes).
type Model struct {
	Name    string `json:"name"`
	Source  string `json:"source,omitempty"` // where the figures come from
	Layers  int    `json:"layers"`
	Hidden  int    `json:"hidden"`
	Heads   int    `json:"heads"`
	KVHeads int    `json:"kv_heads"`
	HeadDim int    `json:"head_dim"` // per head; Hidden / Heads unless the model says otherwise
	FFN     int    `json:"ffn"`      // the dense MLP's intermediate size
	Vocab   int    `json:"vocab"`
	// Gated: the MLP has three matrices (SwiGLU: gate, up, down), else two (GeLU).
	Gated bool `json:"gated"`
	// TiedEmbeddings: the output layer reuses the input embedding's matrix.
	TiedEmbeddings bool `json:"tied_embeddings"`
	// Bias: the linear layers carry biases (GPT-2, GPT-3).
	Bias bool `json:"bias"`
	// Positions: learned position embeddings for this many positions (0: rotary, no parameters).
	Positions int `json:"positions,omitempty"`

	// Mixture of experts: Experts routed experts of ExpertFFN each, TopK of them per token, and
	// SharedExperts always-on experts of SharedFFN each (ExpertFFN unless the model says). The
	// first DenseLayers layers have a dense MLP of FFN instead (DeepSeek's first_k_dense_replace).
	Experts       int `json:"experts,omitempty"`
	TopK          int `json:"top_k,omitempty"`
	ExpertFFN     int `json:"expert_ffn,omitempty"`
	SharedExperts int `json:"shared_experts,omitempty"`
	SharedFFN     int `json:"shared_ffn,omitempty"`
	DenseLayers   int `json:"dense_layers,omitempty"`

	// Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values through low-rank
	// projections. KVLoRARank > 0 turns it on; QLoRARank 0 means queries are projected directly.
	QLoRARank  int `json:"q_lora_rank,omitempty"`
	KVLoRARank int `json:"kv_lora_rank,omitempty"`
	QKNopeDim  int `json:"qk_nope_head_dim,omitempty"`
	QKRopeDim  int `json:"qk_rope_head_dim,omitempty"`
	VHeadDim   int `json:"v_head_dim,omitempty"`
}

// maxDim bounds every size a model may give: far above any published model (the widest hidden
// size is in the tens of thousands, the largest vocabulary under a million), far below anything
// that would overflow the arithmetic.
const maxDim = 1 << 24

// MLA reports whether the model uses multi-head latent attention.
func (m *Model) MLA() bool { return m.KVLoRARank > 0 }

// MoE reports whether the model has routed experts.
func (m *Model) MoE() bool { return m.Experts > 0 }

// Validate checks the model's sizes and fills the derived ones (HeadDim, SharedFFN). Errors name
// the field.
func (m *Model) Validate() error {
	for _, f := range []struct {
		name  string
		value int
		min   int
	}{{"layers", m.Layers, 1}, {"hidden", m.Hidden, 1}, {"heads", m.Heads, 1}, {"kv-heads", m.KVHeads, 0},
		{"head-dim", m.HeadDim, 0}, {"ffn", m.FFN, 0}, {"vocab", m.Vocab, 1}, {"positions", m.Positions, 0},
		{"experts", m.Experts, 0}, {"top-k", m.TopK, 0}, {"expert-ffn", m.ExpertFFN, 0}, {"shared-experts", m.SharedExperts, 0},
		{"shared-ffn", m.SharedFFN, 0}, {"dense-layers", m.DenseLayers, 0}, {"q_lora_rank", m.QLoRARank, 0},
		{"kv_lora_rank", m.KVLoRARank, 0}, {"qk_nope_head_dim", m.QKNopeDim, 0}, {"qk_rope_head_dim", m.QKRopeDim, 0},
		{"v_head_dim", m.VHeadDim, 0}} {
		if f.value < f.min || f.value > maxDim {
			return fmt.Errorf("%s %d: use %d to %d", f.name, f.value, f.min, maxDim)
		}
	}
	if m.KVHeads == 0 {
		m.KVHeads = m.Heads
	}
	if m.KVHeads > m.Heads || m.Heads%m.KVHeads != 0 {
		return fmt.Errorf("kv-heads %d: the %d attention heads must be a multiple of it", m.KVHeads, m.Heads)
	}
	if m.HeadDim == 0 {
		if m.Hidden%m.Heads != 0 {
			return fmt.Errorf("hidden %d is not a multiple of heads %d: give head-dim", m.Hidden, m.Heads)
		}
		m.HeadDim = m.Hidden / m.Heads
	}
	if m.MLA() && (m.QKNopeDim+m.QKRopeDim == 0 || m.VHeadDim == 0) {
		return fmt.Errorf("kv_lora_rank %d: multi-head latent attention needs qk_nope_head_dim or qk_rope_head_dim, and v_head_dim", m.KVLoRARank)
	}
	if m.DenseLayers > m.Layers {
		return fmt.Errorf("dense-layers %d: the model has %d layers", m.DenseLayers, m.Layers)
	}
	if m.MoE() {
		switch {
		case m.TopK == 0:
			return fmt.Errorf("top-k 0: a model with experts (%d) needs the experts each token uses, 1 to %d", m.Experts, m.Experts)
		case m.TopK < 1 || m.TopK > m.Experts:
			return fmt.Errorf("top-k %d: use 1 to the %d experts", m.TopK, m.Experts)
		case m.ExpertFFN < 1:
			return fmt.Errorf("expert-ffn %d: a model with experts needs each expert's FFN size", m.ExpertFFN)
		}
		if m.SharedExperts > 0 && m.SharedFFN == 0 {
			m.SharedFFN = m.ExpertFFN
		}
	} else if m.TopK != 0 || m.SharedExperts != 0 {
		return fmt.Errorf("top-k %d and shared-experts %d: the model has no experts (give experts)", m.TopK, m.SharedExperts)
	}
	if m.FFN < 1 && (!m.MoE() || m.DenseLayers > 0) {
		return fmt.Errorf("ffn %d: give the MLP's intermediate size", m.FFN)
	}
	return nil
}

// moeLayer reports whether layer i (from 0) has routed experts.
func (m *Model) moeLayer(i int) bool { return m.MoE() && i >= m.DenseLayers }

// qkDim and vDim are one head's query/key and value widths.
func (m *Model) qkDim() float64 {
	if m.MLA() {
		return float64(m.QKNopeDim + m.QKRopeDim)
	}
	return float64(m.HeadDim)
}

func (m *Model) vDim() float64 {
	if m.MLA() {
		return float64(m.VHeadDim)
	}
	return float64(m.HeadDim)
}

// kvHeads is the number of key/value heads that attention reads: with latent attention every
// query head has its own, decompressed from the latent.
func (m *Model) kvHeads() float64 {
	if m.MLA() {
		return float64(m.Heads)
	}
	return float64(m.KVHeads)
}

// AttentionParams is one layer's attention parameters: the Q, K, V and output projections
// (standard or grouped-query attention), or MLA's down- and up-projections.
func (m *Model) AttentionParams() float64 {
	h, a := float64(m.Hidden), float64(m.Heads)
	if m.MLA() {
		q := h * a * m.qkDim() // queries projected directly
		if m.QLoRARank > 0 {
			ql := float64(m.QLoRARank)
			q = h*ql + ql + ql*a*m.qkDim() // down, its norm, up
		}
		kl, rope := float64(m.KVLoRARank), float64(m.QKRopeDim)
		kv := h*(kl+rope) + kl + kl*a*(float64(m.QKNopeDim)+m.vDim())
		return q + kv + a*m.vDim()*h
	}
	qo := 2 * h * a * float64(m.HeadDim)
	kv := 2 * h * float64(m.KVHeads) * float64(m.HeadDim)
	p := qo + kv
	if m.Bias {
		p += a*float64(m.HeadDim) + 2*float64(m.KVHeads)*float64(m.HeadDim) + h
	}
	return p
}

// mlpParams is one MLP of intermediate size f.
func (m *Model) mlpParams(f int) float64 {
	h, ff := float64(m.Hidden), float64(f)
	if m.Gated {
		return 3 * h * ff
	}
	p := 2 * h * ff
	if m.Bias {
		p += ff + h
	}
	return p
}

// ExpertParams is one MoE layer's routed experts; SharedParams its shared experts and router;
// DenseMLPParams a dense layer's MLP.
func (m *Model) ExpertParams() float64 { return float64(m.Experts) * m.mlpParams(m.ExpertFFN) }

func (m *Model) SharedParams() float64 {
	return float64(m.SharedExperts)*m.mlpParams(m.SharedFFN) + float64(m.Hidden)*float64(m.Experts)
}

func (m *Model) DenseMLPParams() float64 { return m.mlpParams(m.FFN) }

// normParams is one layer's two normalisations (scale, and shift with biases).
func (m *Model) normParams() float64 {
	if m.Bias {
		return 4 * float64(m.Hidden)
	}
	return 2 * float64(m.Hidden)
}

// LayerParams is layer i's parameters, routed experts included; layerActive those one token
// uses (TopK routed experts).
func (m *Model) LayerParams(i int) float64 {
	p := m.AttentionParams() + m.normParams()
	if m.moeLayer(i) {
		return p + m.ExpertParams() + m.SharedParams()
	}
	return p + m.DenseMLPParams()
}

func (m *Model) layerActive(i int) float64 {
	p := m.AttentionParams() + m.normParams()
	if m.moeLayer(i) {
		return p + float64(m.TopK)*m.mlpParams(m.ExpertFFN) + m.SharedParams()
	}
	return p + m.DenseMLPParams()
}

// EmbeddingParams is the input embedding (and learned positions); HeadParams the output layer's
// own matrix (0 when tied to the embedding) and the final norm.
func (m *Model) EmbeddingParams() float64 {
	return float64(m.Vocab)*float64(m.Hidden) + float64(m.Positions)*float64(m.Hidden)
}

func (m *Model) HeadParams() float64 {
	norm := float64(m.Hidden)
	if m.Bias {
		norm *= 2
	}
	if m.TiedEmbeddings {
		return norm
	}
	return float64(m.Vocab)*float64(m.Hidden) + norm
}

// Params is the model's parameter count; ActiveParams those one token's forward pass uses.
func (m *Model) Params() float64 {
	p := m.EmbeddingParams() + m.HeadParams()
	for i := range m.Layers {
		p += m.LayerParams(i)
	}
	return p
}

func (m *Model) ActiveParams() float64 {
	p := m.EmbeddingParams() + m.HeadParams()
	for i := range m.Layers {
		p += m.layerActive(i)
	}
	return p
}

// FLOPs. A matrix multiplication of a token by a k x n weight is 2kn floating-point operations;
// attention's score and weighted-sum products add 2 s (qk + v) per head and token at sequence
// length s (PaLM, Chowdhery et al. 2022, Appendix B: 6N + 12 L H Q T per token for training, which
// this is for standard attention; causal masking is not subtracted, as there and in Narayanan et
// al. 2021, eq. 3). The backward pass is twice the forward.

// layerFwdFLOPs is layer i's forward FLOPs per token at sequence length seq.
func (m *Model) layerFwdFLOPs(i, seq int) float64 {
	return 2*m.layerActive(i) + m.attnCoreFLOPs(seq)
}

// attnCoreFLOPs is one layer's attention scores and weighted sum per token, forward: what
// selective recomputation recomputes.
func (m *Model) attnCoreFLOPs(seq int) float64 {
	return 2 * float64(seq) * float64(m.Heads) * (m.qkDim() + m.vDim())
}

// headFwdFLOPs is the output layer's logits per token, forward.
func (m *Model) headFwdFLOPs() float64 { return 2 * float64(m.Vocab) * float64(m.Hidden) }

// TrainFLOPsPerToken is the model FLOPs of one token's forward and backward pass (no
// recomputation): what MFU counts.
func (m *Model) TrainFLOPsPerToken(seq int) float64 {
	f := m.headFwdFLOPs()
	for i := range m.Layers {
		f += m.layerFwdFLOPs(i, seq)
	}
	return 3 * f
}

// Presets are the built-in models, by name. Each one's figures are its published configuration
// (Hugging Face config.json or the paper's table), cited in Source.
var presets = map[string]Model{
	"llama-3.1-8b": {Name: "llama-3.1-8b", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, FFN: 14336, Vocab: 128256, Gated: true,
		Source: "meta-llama/Llama-3.1-8B config.json; Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 3"},
	"llama-3.1-70b": {Name: "llama-3.1-70b", Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8, FFN: 28672, Vocab: 128256, Gated: true,
		Source: "meta-llama/Llama-3.1-70B config.json; Dubey et al. 2024, Table 3"},
	"llama-3.1-405b": {Name: "llama-3.1-405b", Layers: 126, Hidden: 16384, Heads: 128, KVHeads: 8, FFN: 53248, Vocab: 128256, Gated: true,
		Source: "meta-llama/Llama-3.1-405B config.json; Dubey et al. 2024, Table 3"},
	"mixtral-8x7b": {Name: "mixtral-8x7b", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, Vocab: 32000, Gated: true,
		Experts: 8, TopK: 2, ExpertFFN: 14336,
		Source: "mistralai/Mixtral-8x7B-v0.1 config.json; Jiang et al. 2024, 'Mixtral of Experts', Table 1"},
	"deepseek-v3": {Name: "deepseek-v3", Layers: 61, Hidden: 7168, Heads: 128, KVHeads: 128, FFN: 18432, Vocab: 129280, Gated: true,
		Experts: 256, TopK: 8, ExpertFFN: 2048, SharedExperts: 1, DenseLayers: 3,
		QLoRARank: 1536, KVLoRARank: 512, QKNopeDim: 128, QKRopeDim: 64, VHeadDim: 128,
		Source: "deepseek-ai/DeepSeek-V3 config.json; DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', section 4.2 (the multi-token prediction module is not counted)"},
	"gpt3-175b": {Name: "gpt3-175b", Layers: 96, Hidden: 12288, Heads: 96, FFN: 4 * 12288, Vocab: 50257, TiedEmbeddings: true, Bias: true, Positions: 2048,
		Source: "Brown et al. 2020, 'Language Models are Few-Shot Learners', Table 2.1 (d_ff = 4 d_model, GPT-2's 50,257-token vocabulary and learned positions)"},
}

// aliases are other names users type for the presets.
var aliases = map[string]string{
	"llama3.1-8b": "llama-3.1-8b", "llama3.1-70b": "llama-3.1-70b", "llama3.1-405b": "llama-3.1-405b",
	"llama-3-8b": "llama-3.1-8b", "llama-3-70b": "llama-3.1-70b", "llama-3-405b": "llama-3.1-405b",
	"mixtral": "mixtral-8x7b", "deepseek-v3-671b": "deepseek-v3", "deepseek-671b": "deepseek-v3",
	"gpt-3": "gpt3-175b", "gpt3": "gpt3-175b", "gpt-3-175b": "gpt3-175b",
}

// PresetNames lists the built-in models.
func PresetNames() []string {
	var names []string
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Preset returns a built-in model by name (case-insensitive, with a few aliases).
func Preset(name string) (Model, bool) {
	n := strings.ToLower(name)
	if a, ok := aliases[n]; ok {
		n = a
	}
	m, ok := presets[n]
	return m, ok
}
