package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/golden"
)

// planJSON runs gpubench plan with --output json and decodes its object.
func planJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	out, errOut, code := gpubench(t, append([]string{"plan", "--output", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("gpubench plan %v: exit %d: %s", args, code, errOut)
	}
	var doc map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&doc); err != nil || dec.More() {
		t.Fatalf("not one JSON object (%v):\n%s", err, out)
	}
	return doc
}

// The example: Llama 3.1 70B on four DGX H100. The JSON carries the model, the machine,
// the setup, and each ranked layout's memory, collectives and time, numbers as numbers.
func TestPlanJSON(t *testing.T) {
	doc := planJSON(t, "--model", "llama-3.1-70b", "--topology", "dgx-h100", "--nodes", "4", "--seq", "8192", "--global-batch", "512")
	for _, f := range []string{"model", "machine", "setup", "pricing", "measured_curves", "assumptions", "searched", "fitting", "priced", "fits", "ranked", "rejected", "smallest_fit"} {
		if _, ok := doc[f]; !ok {
			t.Errorf("no %q", f)
		}
	}
	if doc["fits"] != true || doc["smallest_fit"] != nil {
		t.Errorf("fits %v, smallest_fit %v", doc["fits"], doc["smallest_fit"])
	}
	ranked, _ := doc["ranked"].([]any)
	if len(ranked) == 0 {
		t.Fatal("nothing ranked")
	}
	best, _ := ranked[0].(map[string]any)
	for _, f := range []string{"rank", "layout", "schedule", "memory", "time", "collectives", "tokens_per_s", "mfu", "bubble_fraction", "verdict"} {
		if _, ok := best[f]; !ok {
			t.Errorf("ranked[0] has no %q", f)
		}
	}
	mem, _ := best["memory"].(map[string]any)
	for _, f := range []string{"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "pipeline_buffers_bytes", "reserve_bytes", "total_bytes",
		"stage", "first_stage_bytes", "last_stage_bytes", "activations_by_recompute_bytes", "capacity_bytes", "fits"} {
		if _, ok := mem[f]; !ok {
			t.Errorf("memory has no %q", f)
		}
	}
	colls, _ := best["collectives"].([]any)
	if len(colls) == 0 {
		t.Fatal("no collectives")
	}
	c, _ := colls[0].(map[string]any)
	for _, f := range []string{"group", "collective", "bytes", "ranks", "nodes", "gpus", "where", "link", "per_step", "time_us", "total_s", "exposed_s", "overlap", "priced_by"} {
		if _, ok := c[f]; !ok {
			t.Errorf("collective has no %q", f)
		}
	}
	tm, _ := best["time"].(map[string]any)
	var sum float64
	for _, f := range []string{"compute_s", "bubble_s", "tp_s", "cp_s", "ep_s", "pp_s", "dp_s", "optimizer_s"} {
		v, ok := tm[f].(float64)
		if !ok {
			t.Errorf("time.%s is %v", f, tm[f])
		}
		sum += v
	}
	if step, _ := tm["step_s"].(float64); step <= 0 || (step-sum)/step > 1e-9 || (sum-step)/step > 1e-9 {
		t.Errorf("the step, %v s, is not the sum of its parts, %v s", step, sum)
	}
}

// Bad input is one line on stderr naming the field, nothing on stdout, exit 2.
func TestPlanUsageErrors(t *testing.T) {
	dir := t.TempDir()
	noHidden := filepath.Join(dir, "config.json")
	if err := os.WriteFile(noHidden, []byte(`{"num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000, "intermediate_size": 11008}`), 0o644); err != nil {
		t.Fatal(err)
	}
	notResults := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notResults, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "llama-3.1-70b", "--tp", "3"}, "invalid --tp 3: the model's 64 attention heads are not divisible by it"},
		{[]string{"--model", "llama-3.1-70b", "--tp", "16"}, "invalid --tp 16: the model's 8 KV heads are not divisible by it"},
		{[]string{"--model", "llama-3.1-70b", "--global-batch", "10", "--micro-batch", "4"}, "invalid --global-batch 10 is not a multiple of micro-batch 4"},
		{[]string{"--model", "llama-3.1-70b", "--dp", "3"}, "invalid --dp 3: global-batch 512 is not divisible by dp x micro-batch (3)"},
		{[]string{"--model", "llama-3.1-70b", "--pp", "3"}, "invalid --pp 3: the model's 80 layers are not divisible by it"},
		{[]string{"--model", noHidden}, "no hidden_size (nor n_embd, d_model): the model's width is needed"},
		{[]string{"--model", "llama-9"}, `unknown --model "llama-9": use a preset`},
		{[]string{"--layers", "32", "--hidden", "4096", "--heads", "32"}, "--vocab is missing"},
		{[]string{"--layers", "32", "--hidden", "4096", "--heads", "32", "--vocab", "32000"}, "invalid --ffn 0"},
		{[]string{"--model", "llama-3.1-8b", "--kv-heads", "5"}, "invalid --kv-heads 5"},
		{[]string{"--model", "llama-3.1-8b", "--zero", "5"}, `invalid --zero "5": use 0, 1, 2, 3 or fsdp`},
		{[]string{"--model", "llama-3.1-8b", "--precision", "fp8", "--topology", "dgx-a100"}, "has no FP8 tensor cores"},
		{[]string{"--model", "llama-3.1-8b", "--output", "csv"}, `unknown --output "csv" for plan`},
		{[]string{"--model", "llama-3.1-8b", "--backend", "cuda"}, "drop --backend cuda"},
		{[]string{"--model", "llama-3.1-8b", "--measured", notResults}, "invalid --measured"},
		{[]string{"--model", "llama-3.1-8b", "--reserve", "lots"}, "invalid --reserve"},
		{[]string{"--model", "llama-3.1-8b", "--compute-efficiency", "2"}, "invalid --compute-efficiency 2"},
		{[]string{"--model", "llama-3.1-8b", "extra"}, "plan takes no arguments"},
		{[]string{}, "plan needs --model"},
	} {
		out, errOut, code := gpubench(t, append([]string{"plan"}, c.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("plan %v: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", c.args, code, out, errOut, c.want)
		}
	}
}

// A model that fits nowhere is an answer, not an error: exit 0, "does not fit", the closest
// layouts, and how many of the same nodes would fit.
func TestPlanDoesNotFit(t *testing.T) {
	out, errOut, code := gpubench(t, "plan", "--model", "llama-3.1-405b", "--topology", "dgx-h100", "--seq", "8192")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		`\ndoes not fit: no layout of llama-3.1-405b fits in the 79\.6 GiB of a GPU of dgx-h100 \(8 GPUs\)\n`,
		`\nclosest +layout +memory/GPU`,
		`\nsmallest machine that fits: --nodes [0-9]+ \([0-9]+ GPUs\), as TP[0-9]+ .* with [0-9.]+ GiB a GPU\n`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no %s in:\n%s", want, out)
		}
	}
	doc := planJSON(t, "--model", "llama-3.1-405b", "--topology", "dgx-h100", "--seq", "8192")
	fit, _ := doc["smallest_fit"].(map[string]any)
	if doc["fits"] != false || fit == nil || fit["joinable"] != true {
		t.Errorf("fits %v, smallest_fit %v", doc["fits"], doc["smallest_fit"])
	}
	// The nodes it names are enough.
	nodes := fit["nodes"].(float64)
	doc = planJSON(t, "--model", "llama-3.1-405b", "--topology", "dgx-h100", "--seq", "8192", "--nodes", strings.TrimSuffix(strings.TrimSuffix(jsonNumber(nodes), ".0"), ".00"))
	if doc["fits"] != true {
		t.Errorf("405B does not fit on the %v nodes the plan named", nodes)
	}
}

func jsonNumber(v float64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// --measured: a collective run of the machine prices that collective at its ranks in the
// simulator's place. A run on a DGX H100 whose NVLink to one GPU is at a tenth makes the TP
// collectives it measured slower, and the plan says where their price came from.
func TestPlanMeasured(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, coll := range []string{"allgather", "reducescatter"} {
		out, errOut, code := gpubench(t, coll, "--backend", "sim", "--topology", "dgx-h100", "--sizes", "1M:1G:x4", "-n", "1", "-w", "0", "-c", "0",
			"--sim-fault", "slow-link=gpu3,nvswitch,0.1", "--output", "json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", coll, code, errOut)
		}
		name := filepath.Join(dir, coll+".json")
		if err := os.WriteFile(name, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, name)
	}
	args := []string{"--model", "llama-3.1-70b", "--topology", "dgx-h100", "--nodes", "4", "--seq", "8192", "--tp", "8", "--pp", "2", "--cp", "1"}
	plain := planJSON(t, args...)
	measured := planJSON(t, append(args, "--measured", files[0], "--measured", files[1])...)
	tpTime := func(doc map[string]any) (float64, []string) {
		best := doc["ranked"].([]any)[0].(map[string]any)
		var sources []string
		for _, c := range best["collectives"].([]any) {
			if c := c.(map[string]any); c["group"] == "tp" {
				sources = append(sources, c["priced_by"].(string))
			}
		}
		return best["time"].(map[string]any)["tp_s"].(float64), sources
	}
	before, src0 := tpTime(plain)
	after, src1 := tpTime(measured)
	if after < 3*before {
		t.Errorf("TP collectives %.3g s with the slow NVLink's curves, %.3g s without", after, before)
	}
	if len(src0) != 2 || src0[0] != "simulator" || len(src1) != 2 || !strings.HasPrefix(src1[0], "measured "+files[0]) || !strings.HasPrefix(src1[1], "measured "+files[1]) {
		t.Errorf("priced by %v, then %v", src0, src1)
	}
	if curves, _ := measured["measured_curves"].([]any); len(curves) != 2 {
		t.Errorf("measured_curves: %v", measured["measured_curves"])
	}
}

// The text: what was planned, the ranking, why the choice wins and the others lose, what was
// left out and why, the choice in detail, the assumptions; byte for byte on a small machine.
func TestPlanGolden(t *testing.T) {
	out, errOut, code := gpubench(t, "plan", "--model", "llama-3.1-8b", "--topology", "pcie-4090x8", "--seq", "4096", "--global-batch", "256")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden.Check(t, "plan-8b-4090.golden", out)
}
