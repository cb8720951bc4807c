package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// ConfigLimit bounds a config.json: real ones are a few KiB.
const ConfigLimit = 4 << 20

// ErrConfig marks a config.json that cannot describe a model; the message names the field.
var ErrConfig = errors.New("config.json")

// The model types whose MLP is gated (SwiGLU or GeGLU: three matrices) and those with biases on
// their linear layers, as their Hugging Face modeling files define them. Others are told by their
// activation: silu or swish means gated.
var (
	gatedTypes = []string{"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3",
		"gemma", "gemma2", "gemma3", "gemma3_text", "phi3", "olmo", "olmo2", "olmoe", "cohere", "internlm2", "granite", "dbrx"}
	plainTypes = []string{"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "starcoder2", "gpt_bigcode"}
	biasTypes  = []string{"gpt2", "gpt_neox", "gptj", "opt", "bloom", "phi", "starcoder2", "gpt_bigcode"}
)

// ParseConfig reads a Hugging Face config.json into a Model named name. It takes the fields of
// the common families (Llama, Mistral/Mixtral, Qwen, DeepSeek-V2/V3, Gemma, GPT-2 and the like),
// under the names they use; a multimodal config's text_config is read when the top level has no
// hidden_size. A missing or malformed required field is an error that names it.
func ParseConfig(name string, data []byte) (Model, error) {
	var top map[string]json.RawMessage
	if err := decodeObject(data, &top); err != nil {
		return Model{}, fmt.Errorf("%w: %s: %v", ErrConfig, name, err)
	}
	c := config{fields: top}
	if _, ok := c.first("hidden_size", "n_embd", "n_embed", "d_model"); !ok {
		if raw, ok := top["text_config"]; ok {
			var text map[string]json.RawMessage
			if err := decodeObject(raw, &text); err != nil {
				return Model{}, fmt.Errorf("%w: %s: text_config: %v", ErrConfig, name, err)
			}
			c.fields = text
			if _, has := text["model_type"]; !has {
				text["model_type"] = top["model_type"]
			}
		}
	}
	m, err := c.model()
	if err != nil {
		return Model{}, fmt.Errorf("%w: %s: %v", ErrConfig, name, err)
	}
	m.Name, m.Source = name, "Hugging Face config.json "+name
	if err := m.Validate(); err != nil {
		return Model{}, fmt.Errorf("%w: %s: %v", ErrConfig, name, err)
	}
	return m, nil
}

func decodeObject(data []byte, v *map[string]json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	if *v == nil {
		return errors.New("not a JSON object: null")
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

type config struct{ fields map[string]json.RawMessage }

// first returns the first of keys that is present and not null.
func (c config) first(keys ...string) (string, bool) {
	for _, k := range keys {
		if raw, ok := c.fields[k]; ok && string(bytes.TrimSpace(raw)) != "null" {
			return k, true
		}
	}
	return "", false
}

// count reads the first present key as a whole number from 0 to maxDim; found is false when
// none is present.
func (c config) count(keys ...string) (n int, found bool, err error) {
	k, ok := c.first(keys...)
	if !ok {
		return 0, false, nil
	}
	var v float64
	if err := json.Unmarshal(c.fields[k], &v); err != nil || v < 0 || v > maxDim || v != math.Trunc(v) {
		return 0, true, fmt.Errorf("%s: want a whole number from 0 to %d, got %s", k, maxDim, shortJSON(c.fields[k]))
	}
	return int(v), true, nil
}

// need reads a required count; the error names the field and its other names.
func (c config) need(what string, keys ...string) (int, error) {
	n, found, err := c.count(keys...)
	switch {
	case err != nil:
		return 0, err
	case !found:
		other := ""
		if len(keys) > 1 {
			other = " (nor " + strings.Join(keys[1:], ", ") + ")"
		}
		return 0, fmt.Errorf("no %s%s: %s is needed", keys[0], other, what)
	}
	return n, nil
}

func (c config) text(key string) string {
	var s string
	if raw, ok := c.fields[key]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return strings.ToLower(s)
}

// flag reads a boolean; found is false when it is absent or not a boolean.
func (c config) flag(key string) (value, found bool) {
	raw, ok := c.fields[key]
	if !ok || json.Unmarshal(raw, &value) != nil {
		return false, false
	}
	return value, true
}

func (c config) model() (Model, error) {
	var m Model
	var err error
	kind := c.text("model_type")
	if m.Hidden, err = c.need("the model's width", "hidden_size", "n_embd", "n_embed", "d_model"); err != nil {
		return m, err
	}
	if m.Layers, err = c.need("the number of layers", "num_hidden_layers", "n_layer", "num_layers"); err != nil {
		return m, err
	}
	if m.Heads, err = c.need("the number of attention heads", "num_attention_heads", "n_head", "num_heads"); err != nil {
		return m, err
	}
	if m.Vocab, err = c.need("the vocabulary size", "vocab_size"); err != nil {
		return m, err
	}
	if m.KVHeads, _, err = c.count("num_key_value_heads", "num_kv_heads", "n_head_kv"); err != nil {
		return m, err
	}
	if k, ok := c.first("num_key_value_heads", "num_kv_heads", "n_head_kv"); ok && m.KVHeads == 0 && string(c.fields[k]) != "null" {
		return m, fmt.Errorf("%s: 0 KV heads: give 1 or more, or leave it out for multi-head attention", k)
	}
	if mq, ok := c.flag("multi_query"); ok && mq && m.KVHeads == 0 {
		m.KVHeads = 1
	}
	if m.HeadDim, _, err = c.count("head_dim"); err != nil {
		return m, err
	}
	plain := slices.Contains(plainTypes, kind)
	ffn, found, err := c.count("intermediate_size", "n_inner", "ffn_dim", "d_ff")
	if err != nil {
		return m, err
	}
	if !found && plain {
		ffn, found = 4*m.Hidden, true // GPT-2's n_inner null means 4 x n_embd
	}
	m.FFN = ffn

	// Experts, under their several names.
	if m.Experts, _, err = c.count("num_local_experts", "n_routed_experts", "num_experts"); err != nil {
		return m, err
	}
	if m.Experts > 0 {
		if m.TopK, err = c.need("the experts each token uses", "num_experts_per_tok", "moe_top_k", "top_k"); err != nil {
			return m, err
		}
		efn, efound, err := c.count("moe_intermediate_size", "expert_intermediate_size")
		if err != nil {
			return m, err
		}
		if m.DenseLayers, _, err = c.count("first_k_dense_replace"); err != nil {
			return m, err
		}
		if !efound { // Mixtral: every layer's MLP is experts of intermediate_size
			switch {
			case !found:
				return m, errors.New("no moe_intermediate_size (nor intermediate_size): the experts' FFN size is needed")
			case m.DenseLayers > 0:
				return m, errors.New("no moe_intermediate_size: with first_k_dense_replace, intermediate_size is the dense layers' MLP, and the experts' FFN size is needed")
			}
			efn, m.FFN = ffn, 0
		}
		m.ExpertFFN = efn
		if m.SharedExperts, _, err = c.count("n_shared_experts"); err != nil {
			return m, err
		}
		shared, sfound, err := c.count("shared_expert_intermediate_size")
		if err != nil {
			return m, err
		}
		if sfound && shared > 0 && m.SharedExperts == 0 { // Qwen2-MoE: one shared expert of its own size
			m.SharedExperts, m.SharedFFN = 1, shared
		}
	}
	if m.FFN == 0 && (m.Experts == 0 || m.DenseLayers > 0) {
		return m, errors.New("no intermediate_size (nor n_inner, ffn_dim, d_ff): the MLP's size is needed")
	}

	// Multi-head latent attention.
	if m.KVLoRARank, _, err = c.count("kv_lora_rank"); err != nil {
		return m, err
	}
	if m.KVLoRARank > 0 {
		for _, f := range []struct {
			key string
			to  *int
		}{{"q_lora_rank", &m.QLoRARank}, {"qk_nope_head_dim", &m.QKNopeDim}, {"qk_rope_head_dim", &m.QKRopeDim}, {"v_head_dim", &m.VHeadDim}} {
			if *f.to, _, err = c.count(f.key); err != nil {
				return m, err
			}
		}
	}

	// The MLP's form, tied embeddings (Hugging Face's default is tied), biases, positions.
	act := c.text("hidden_act")
	if act == "" {
		act = c.text("activation_function")
	}
	m.Gated = slices.Contains(gatedTypes, kind) || (!plain && (strings.Contains(act, "silu") || strings.Contains(act, "swish") || strings.Contains(act, "glu")))
	m.TiedEmbeddings = true
	if tied, ok := c.flag("tie_word_embeddings"); ok {
		m.TiedEmbeddings = tied
	}
	m.Bias = slices.Contains(biasTypes, kind)
	if b, ok := c.flag("attention_bias"); ok && b {
		m.Bias = true
	}
	if kind == "gpt2" || kind == "opt" || kind == "gpt_bigcode" {
		if m.Positions, _, err = c.count("n_positions", "max_position_embeddings"); err != nil {
			return m, err
		}
	}
	return m, nil
}

// shortJSON quotes a raw value for an error message, cut to a readable length.
func shortJSON(raw json.RawMessage) string {
	s := strings.Join(strings.Fields(string(raw)), " ")
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}
