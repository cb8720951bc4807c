package plan

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseConfig: any bytes give a model that validates and counts finite parameters, or an
// error of one line that is ErrConfig; never a panic.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 3, "intermediate_size": 4}`))
	f.Add([]byte(`{"text_config": {"hidden_size": 8}}`))
	f.Add([]byte(`{"hidden_size": 1e30}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseConfig("config.json", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config.json: config.json: ") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error not one line about the file: %q", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("a parsed model does not validate: %v", err)
		}
		if p := m.Params(); !(p > 0) || math.IsInf(p, 0) || m.ActiveParams() > p {
			t.Fatalf("%+v: %v parameters, %v active", m, p, m.ActiveParams())
		}
		if f := m.TrainFLOPsPerToken(4096); !(f > 0) || math.IsInf(f, 0) {
			t.Fatalf("%+v: %v FLOPs a token", m, f)
		}
	})
}

// FuzzSetup: any model sizes and training setup, as the flags give them, are refused with an
// error or planned on one DGX H100 without a panic, every ranked layout fitting and priced.
func FuzzSetup(f *testing.F) {
	f.Add(32, 4096, 32, 8, 14336, 32000, 0, 0, 4096, 512, 1, "bf16", "1", "selective", "auto", 0, 0, 0)
	f.Add(16, 2048, 16, 16, 8192, 1000, 8, 2, 2048, 64, 2, "fp8", "3", "full", "interleaved", 2, 2, 2)
	f.Add(61, 7168, 128, 128, 18432, 129280, 256, 8, 4096, 16, 1, "fp16", "fsdp", "none", "1f1b", 0, 4, 0)
	mc := machine(f, "dgx-h100", 0, DefaultSetup())
	f.Fuzz(func(t *testing.T, layers, hidden, heads, kvHeads, ffn, vocab, experts, topK, seq, batch, micro int,
		precision, zero, recompute, schedule string, tp, pp, cp int) {
		m := Model{Name: "fuzz", Layers: layers, Hidden: hidden, Heads: heads, KVHeads: kvHeads, FFN: ffn, Vocab: vocab, Gated: true,
			Experts: experts, TopK: topK, ExpertFFN: ffn}
		if experts == 0 {
			m.TopK, m.ExpertFFN = 0, 0
		}
		if m.Validate() != nil || m.Params() > 1e13 {
			return
		}
		s := DefaultSetup()
		s.Seq, s.GlobalBatch, s.MicroBatch, s.Precision, s.Recompute, s.Schedule = seq, batch, micro, precision, recompute, schedule
		s.TP, s.PP, s.CP = tp, pp, cp
		z, err := ParseZeRO(zero)
		if err != nil {
			return
		}
		s.ZeRO = z
		if s.Validate(&m) != nil || s.ValidateMachine(mc) != nil || s.Precision == "fp8" || s.Seq > 1<<17 || s.GlobalBatch > 1<<12 {
			return // fp8 needs a machine of its own; huge setups only take time
		}
		r, err := Plan(Options{Model: m, Setup: s, Machine: mc, Top: 2})
		if err != nil {
			t.Fatalf("%+v %+v: %v", m, s, err)
		}
		for _, c := range r.Ranked {
			if r.Fits != c.Memory.Fits || (r.Fits && (c.Time == nil || !(c.Time.StepS > 0) || math.IsInf(c.Time.StepS, 0))) {
				t.Fatalf("%+v %+v: %+v", m, s, c)
			}
		}
	})
}

// FuzzParseZeRO: --zero gives a stage 0 to 3 whose number reads back to it, or an error of one
// line; never a panic.
func FuzzParseZeRO(f *testing.F) {
	for _, s := range []string{"0", "3", "fsdp", "FSDP", "4", "-1", "", "1.5", "+2", "03"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseZeRO(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseZeRO(%q): error is not one line: %q", s, err)
			}
			return
		}
		if again, err := ParseZeRO(strconv.Itoa(n)); n < 0 || n > 3 || err != nil || again != n {
			t.Fatalf("ParseZeRO(%q) = %d, which reads back as %d, %v", s, n, again, err)
		}
	})
}
