package plan

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every preset's parameter count is the model's published one: the exact counts Hugging Face
// lists for the checkpoints, or the paper's figure.
func TestPresetParams(t *testing.T) {
	for _, c := range []struct {
		name          string
		total, active float64
		tolerance     float64
	}{
		{"llama-3.1-8b", 8_030_261_248, 8_030_261_248, 0},
		{"llama-3.1-70b", 70_553_706_496, 70_553_706_496, 0},
		{"llama-3.1-405b", 405_853_388_800, 405_853_388_800, 0},
		{"mixtral-8x7b", 46_702_792_704, 12.9e9, 0.005}, // Jiang et al. 2024: 47B, 13B active (12.9B in the model card)
		{"deepseek-v3", 671e9, 37e9, 0.02},              // DeepSeek-V3 report: 671B total, 37B activated
		{"gpt3-175b", 175.0e9, 175.0e9, 0.005},          // Brown et al. 2020, Table 2.1
	} {
		m, ok := Preset(c.name)
		if !ok {
			t.Fatalf("no preset %s", c.name)
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, f := range []struct {
			what      string
			got, want float64
		}{{"total", m.Params(), c.total}, {"active", m.ActiveParams(), c.active}} {
			if math.Abs(f.got/f.want-1) > c.tolerance {
				t.Errorf("%s: %s parameters %.0f, published %.0f", c.name, f.what, f.got, f.want)
			}
		}
	}
	if _, ok := Preset("Llama3.1-70B"); !ok {
		t.Error("aliases are not found case-insensitively")
	}
}

// The training FLOPs of a standard GPT layer are PaLM's 6N + 12 L H Q T per token.
func TestTrainFLOPsIsPaLMsFormula(t *testing.T) {
	m, _ := Preset("gpt3-175b")
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	seq := 2048
	// N: the parameters a token's matrix multiplications use: every layer's, and the output layer's
	// (the tied embedding, used once as a matrix); not the input embedding's lookups.
	var n float64
	for i := range m.Layers {
		n += m.LayerParams(i)
	}
	n += float64(m.Vocab) * float64(m.Hidden)
	want := 6*n + 12*float64(m.Layers)*float64(m.Heads)*float64(m.HeadDim)*float64(seq)
	if got := m.TrainFLOPsPerToken(seq); math.Abs(got/want-1) > 1e-9 {
		t.Errorf("train FLOPs per token %.6g, PaLM's formula %.6g", got, want)
	}
}

func readConfig(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Published config.json files give the presets' models.
func TestParseConfig(t *testing.T) {
	for _, c := range []struct {
		file, preset string
	}{
		{"llama-3.1-8b.json", "llama-3.1-8b"},
		{"mixtral-8x7b.json", "mixtral-8x7b"},
		{"deepseek-v3.json", "deepseek-v3"},
	} {
		m, err := ParseConfig(c.file, readConfig(t, c.file))
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		p, _ := Preset(c.preset)
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		if m.Params() != p.Params() || m.ActiveParams() != p.ActiveParams() {
			t.Errorf("%s: %.0f parameters (%.0f active), the preset %.0f (%.0f)", c.file, m.Params(), m.ActiveParams(), p.Params(), p.ActiveParams())
		}
		m.Name, m.Source, p.Name, p.Source = "", "", "", ""
		if m != p {
			t.Errorf("%s:\n got %+v\nwant %+v", c.file, m, p)
		}
	}
	// GPT-2 small: no intermediate_size (n_inner null is 4 x n_embd), GeLU, biases, learned
	// positions, tied embeddings: 124,439,808 parameters, as Hugging Face counts them.
	m, err := ParseConfig("gpt2.json", readConfig(t, "gpt2.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Gated || !m.Bias || !m.TiedEmbeddings || m.FFN != 3072 || m.Positions != 1024 || m.Params() != 124_439_808 {
		t.Errorf("gpt2: %+v, %.0f parameters", m, m.Params())
	}
}

// BLOOM's smaller configs name the width n_embed (bigscience/bloom-560m's config.json), which
// Hugging Face's BloomConfig reads as hidden_size; bloom-560m has 559,214,592 parameters.
func TestParseConfigBloomNEmbed(t *testing.T) {
	cfg := `{"model_type": "bloom", "n_embed": 1024, "n_head": 16, "n_inner": null, "n_layer": 24, "vocab_size": 250880}`
	m, err := ParseConfig("bloom-560m.json", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if m.Hidden != 1024 || m.Layers != 24 || m.Heads != 16 || math.Abs(m.Params()/559_214_592-1) > 0.001 {
		t.Errorf("bloom-560m: %+v, %.0f parameters; want 559,214,592", m, m.Params())
	}
}

// A config.json that cannot describe a model is refused with the field named.
func TestParseConfigErrors(t *testing.T) {
	for _, c := range []struct {
		data, want string
	}{
		{`{"num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000, "intermediate_size": 11008}`, "no hidden_size (nor n_embd, n_embed, d_model)"},
		{`{"hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 32000, "intermediate_size": 11008}`, "no num_hidden_layers"},
		{`{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 0, "vocab_size": 32000, "intermediate_size": 11008}`, "num_key_value_heads: 0 KV heads: give 1 or more"},
		{`{"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000}`, "no num_attention_heads"},
		{`{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "intermediate_size": 11008}`, "no vocab_size"},
		{`{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000}`, "no intermediate_size"},
		{`{"hidden_size": "4096", "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000, "intermediate_size": 1}`, "hidden_size: want a whole number"},
		{`{"hidden_size": 4096.5, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000, "intermediate_size": 1}`, "hidden_size: want a whole number"},
		{`{"hidden_size": -1, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000, "intermediate_size": 1}`, "hidden_size: want a whole number"},
		{`{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 5, "vocab_size": 32000, "intermediate_size": 1}`, "kv-heads 5"},
		{`{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000, "num_local_experts": 8, "intermediate_size": 1}`, "no num_experts_per_tok"},
		{`{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000, "intermediate_size": 11008, "num_local_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 3}`, "no moe_intermediate_size: with first_k_dense_replace"},
		{`[1, 2]`, "not a JSON object"},
		{`{} {}`, "more than one JSON value"},
		{`null`, "not a JSON object"},
	} {
		_, err := ParseConfig("config.json", []byte(c.data))
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v; want one line with %q", c.data, err, c.want)
		}
	}
}

// A multimodal config's text model is read from text_config.
func TestParseConfigTextConfig(t *testing.T) {
	data := `{"model_type": "llava", "text_config": {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
		"num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336, "tie_word_embeddings": false}}`
	m, err := ParseConfig("llava.json", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if m.Params() != 8_030_261_248 {
		t.Errorf("%.0f parameters; want Llama 3.1 8B's", m.Params())
	}
}

// The model's own checks name the field.
func TestModelValidate(t *testing.T) {
	base := Model{Layers: 32, Hidden: 4096, Heads: 32, FFN: 11008, Vocab: 32000}
	for _, c := range []struct {
		edit func(*Model)
		want string
	}{
		{func(m *Model) { m.Layers = 0 }, "layers 0"},
		{func(m *Model) { m.Hidden = 4100 }, "hidden 4100 is not a multiple of heads 32"},
		{func(m *Model) { m.KVHeads = 64 }, "kv-heads 64"},
		{func(m *Model) { m.Experts, m.TopK = 8, 9; m.ExpertFFN = 1 }, "top-k 9"},
		{func(m *Model) { m.Experts, m.TopK = 8, 2 }, "expert-ffn 0"},
		{func(m *Model) { m.TopK = 2 }, "the model has no experts"},
		{func(m *Model) { m.FFN = 0 }, "ffn 0"},
		{func(m *Model) { m.Vocab = maxDim + 1 }, "vocab"},
	} {
		m := base
		c.edit(&m)
		if err := m.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", m, err, c.want)
		}
	}
	m := base
	if err := m.Validate(); err != nil || m.KVHeads != 32 || m.HeadDim != 128 {
		t.Errorf("defaults: %v, kv-heads %d, head-dim %d", err, m.KVHeads, m.HeadDim)
	}
}
