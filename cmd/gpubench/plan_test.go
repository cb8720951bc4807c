package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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
	t.Parallel()
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
	t.Parallel()
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
		{[]string{"--model", noHidden}, "no hidden_size (nor n_embd, n_embed, d_model): the model's width is needed"},
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
		{[]string{"--model", "llama-3.1-8b", "--reserve", "1T"}, "invalid --reserve 1T: a GPU of dgx-h100 has 79.6 GiB in all; set aside less"},
		{[]string{"--model", "llama-3.1-8b", "--measured", notResults + ","}, "invalid --measured: an empty file name (a stray comma?)"},
		{[]string{"--model", "llama-3.1-8b", "--experts", "8"}, "invalid --top-k 0: a model with experts (8) needs the experts each token uses, 1 to 8"},
		{[]string{"--model", "llama-3.1-8b", "--vpp", "100"}, "invalid --vpp 100: the interleaved schedule is weighed with 2 to 8 model chunks a GPU"},
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
	t.Parallel()
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

// A model far past any machine's memory does not fit, whatever its size: its bytes are held at
// 2^60 rather than wrapping round to a negative figure (or a small one that fits).
func TestPlanHugeModel(t *testing.T) {
	t.Parallel()
	const n = "16777216" // 1024 layers of this: 3.5e18 parameters, whose optimizer state is 4.2e19 B
	doc := planJSON(t, "--layers", "1024", "--hidden", n, "--heads", "16", "--ffn", n, "--vocab", n)
	if doc["fits"] != false {
		t.Errorf("fits %v", doc["fits"])
	}
	var walk func(k string, v any)
	walk = func(k string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, y := range x {
				walk(k, y)
			}
		case []any:
			for _, y := range x {
				walk(k, y)
			}
		case float64:
			if strings.HasSuffix(k, "_bytes") && x < 0 {
				t.Errorf("%s %v", k, x)
			}
		}
	}
	walk("", doc)
}

func jsonNumber(v float64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// --measured: a collective run of the machine prices that collective at its ranks in the
// simulator's place. A run on a DGX H100 whose NVLink to one GPU is at a tenth makes the TP
// collectives it measured slower, and the plan says where their price came from.
func TestPlanMeasured(t *testing.T) {
	t.Parallel()
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

	// An nccl-tests log: an all-reduce over 16 H100s on 2 hosts prices ZeRO-0's gradient
	// all-reduce of a DP16 layout on two DGX H100, and no other group.
	log := "../../internal/results/testdata/nccl-tests/a3mega-allreduce.log"
	doc := planJSON(t, "--layers", "16", "--hidden", "2048", "--heads", "16", "--ffn", "8192", "--vocab", "32000", "--topology", "dgx-h100",
		"--nodes", "2", "--zero", "0", "--tp", "1", "--pp", "1", "--cp", "1", "--measured", log)
	found := false
	for _, c := range doc["ranked"].([]any)[0].(map[string]any)["collectives"].([]any) {
		c := c.(map[string]any)
		want := c["group"] == "dp" && c["collective"] == "allreduce" && c["ranks"] == 16.0
		found = found || want
		if strings.HasPrefix(c["priced_by"].(string), "measured "+log) != want {
			t.Errorf("%s %s over %v ranks priced by %s", c["group"], c["collective"], c["ranks"], c["priced_by"])
		}
	}
	if !found {
		t.Error("no DP all-reduce over 16 ranks in the plan")
	}
}

// The text: what was planned, the ranking, why the choice wins and the others lose, what was
// left out and why, the choice in detail, the assumptions; byte for byte on a small machine.
func TestPlanGolden(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "plan", "--model", "llama-3.1-8b", "--topology", "pcie-4090x8", "--seq", "4096", "--global-batch", "256")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden.Check(t, "plan-8b-4090.golden", out)
}

// The plan against published training runs (plan/published.json): each case runs the published
// setup and layout, compares the figure the publication gives (ratio planned / published, held
// to a recorded band, as TestAccuracy holds the simulator), records whether the plan says it
// fits, and runs the same setup with the layout left to the plan, to see whether the published
// layout is the plan's choice (ratio of its planned step to the plan's best). -update records
// the bands anew and rewrites the table in docs/plan-accuracy.md.
type planCase struct {
	ID         string     `json:"id"`
	Source     string     `json:"source"`
	Machine    string     `json:"machine"`
	Layout     string     `json:"layout"`
	Args       string     `json:"args"`
	Assumed    string     `json:"assumed"`
	Measure    string     `json:"measure"` // tflops_eq3, mfu_percent, tokens_per_gpu; "" compares the layout only
	Published  float64    `json:"published"`
	Band       [2]float64 `json:"band"`
	LayoutBand [2]float64 `json:"layout_band"`
	Fits       bool       `json:"fits"`
}

type planRow struct {
	c                planCase
	planned, ratio   float64
	memory, capacity float64 // GiB
	fits             bool
	choice           string
	choiceStep, step float64
	layoutRatio      float64
}

const (
	planDataPath   = "../../plan/published.json"
	planDocPath    = "../../docs/plan-accuracy.md"
	planTableStart = "<!-- plan accuracy table: generated by go test ./cmd/gpubench -run TestPlanAccuracy -update -->\n"
	planTableEnd   = "<!-- end of the plan accuracy table -->\n"
)

// layoutFlags are the flags that force a layout; the free search drops them.
var layoutFlags = map[string]bool{"--tp": true, "--pp": true, "--cp": true, "--dp": true, "--ep": true, "--vpp": true}

func TestPlanAccuracy(t *testing.T) {
	t.Parallel()
	var cases []planCase
	readJSON(t, planDataPath, &cases)
	var rows []planRow
	for i := range cases {
		c := &cases[i]
		args := strings.Fields(c.Args)
		forced := planJSON(t, args...)
		var free []string
		for j := 0; j < len(args); j++ {
			if layoutFlags[args[j]] {
				j++
				continue
			}
			free = append(free, args[j])
		}
		chosen := planJSON(t, free...)
		row := planRow{c: *c}
		best := forced["ranked"].([]any)[0].(map[string]any)
		mem := best["memory"].(map[string]any)
		row.memory, row.capacity, row.fits = mem["total_bytes"].(float64)/(1<<30), mem["capacity_bytes"].(float64)/(1<<30), mem["fits"].(bool)
		row.step = best["time"].(map[string]any)["step_s"].(float64)
		gpus := forced["machine"].(map[string]any)["gpus"].(float64)
		switch c.Measure {
		case "tflops_eq3": // Narayanan et al. 2021, eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh), recomputation counted
			m, s := forced["model"].(map[string]any), forced["setup"].(map[string]any)
			B, sq := s["global_batch"].(float64), s["seq"].(float64)
			l, h, v := m["layers"].(float64), m["hidden"].(float64), m["vocab"].(float64)
			row.planned = 96 * B * sq * l * h * h * (1 + sq/(6*h) + v/(16*l*h)) / row.step / gpus / 1e12
		case "mfu_percent":
			row.planned = 100 * best["mfu"].(float64)
		case "tokens_per_gpu":
			row.planned = best["tokens_per_s"].(float64) / gpus
		}
		if c.Measure != "" {
			row.ratio = row.planned / c.Published
		}
		if ranked := chosen["ranked"].([]any); chosen["fits"] == true && len(ranked) > 0 {
			top := ranked[0].(map[string]any)
			row.choice = layoutText(top["layout"].(map[string]any))
			row.choiceStep = top["time"].(map[string]any)["step_s"].(float64)
			row.layoutRatio = row.step / row.choiceStep
		}
		if golden.Updating() {
			c.Fits = row.fits
			if c.Measure != "" {
				c.Band = [2]float64{round3(row.ratio / 1.05), round3(row.ratio * 1.05)}
			}
			c.LayoutBand = [2]float64{round3(row.layoutRatio / 1.05), round3(row.layoutRatio * 1.05)}
		}
		if row.fits != c.Fits {
			t.Errorf("%s: the plan says the published layout fits: %v (%.1f GiB of %.1f); recorded %v", c.ID, row.fits, row.memory, row.capacity, c.Fits)
		}
		if c.Measure != "" && !(row.ratio >= c.Band[0] && row.ratio <= c.Band[1]) {
			t.Errorf("%s: planned %.4g against %.4g published: ratio %.3f outside its band %v (run with -update after checking why)", c.ID, row.planned, c.Published, row.ratio, c.Band)
		}
		if !(row.layoutRatio >= c.LayoutBand[0] && row.layoutRatio <= c.LayoutBand[1]) {
			t.Errorf("%s: the published layout's step is %.3f of the plan's choice (%s), outside its band %v", c.ID, row.layoutRatio, row.choice, c.LayoutBand)
		}
		rows = append(rows, row)
	}
	if t.Failed() {
		return
	}
	if golden.Updating() {
		var buf strings.Builder
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", " ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(cases); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(planDataPath, []byte(buf.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(planDocPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i, j := strings.Index(doc, planTableStart), strings.Index(doc, planTableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no table markers", planDocPath)
	}
	got := doc[:i+len(planTableStart)] + planTable(rows) + doc[j:]
	if golden.Updating() {
		if err := os.WriteFile(planDocPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if got != doc {
		t.Errorf("%s is not the table the plans give (run the test with -update):\n%s", planDocPath, golden.Diff(doc, got))
	}
}

// layoutText writes a JSON layout as the plan's text does.
func layoutText(l map[string]any) string {
	n := func(k string) int { return int(l[k].(float64)) }
	s := fmt.Sprintf("TP%d", n("tp"))
	if n("cp") > 1 {
		s += fmt.Sprintf(" CP%d", n("cp"))
	}
	s += fmt.Sprintf(" PP%d DP%d", n("pp"), n("dp"))
	if n("ep") > 1 {
		s += fmt.Sprintf(" EP%d", n("ep"))
	}
	switch {
	case n("vpp") > 1:
		s += fmt.Sprintf(" v%d", n("vpp"))
	case n("pp") > 1:
		s += " 1F1B"
	}
	return s
}

var planMeasures = map[string]string{"tflops_eq3": "TFLOP/s a GPU (eq. 3)", "mfu_percent": "MFU %", "tokens_per_gpu": "tokens/s a GPU"}

// planTable is the generated part of docs/plan-accuracy.md.
func planTable(rows []planRow) string {
	var b strings.Builder
	within15, within30, measured, agree := 0, 0, 0, 0
	for _, r := range rows {
		if r.c.Measure != "" {
			measured++
			if r.ratio >= 0.85 && r.ratio <= 1.15 {
				within15++
			}
			if r.ratio >= 0.7 && r.ratio <= 1.3 {
				within30++
			}
		}
		if r.layoutRatio <= 1.05 {
			agree++
		}
	}
	fmt.Fprintf(&b, "\nThroughput: %d of %d published figures planned within 15%%, %d within 30%%. Layout: the published one is the plan's choice or within 5%% of it in %d of %d cases.\n\n",
		within15, measured, within30, agree, len(rows))
	b.WriteString("| case | published layout | published | planned | planned / published | memory/GPU planned | plan's choice | published layout's step / the choice's |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		pub, planned, ratio := "layout only", "", ""
		if r.c.Measure != "" {
			pub = fmt.Sprintf("%s %s", trimFloat(r.c.Published), planMeasures[r.c.Measure])
			planned, ratio = trimFloat(r.planned), fmt.Sprintf("%.2f", r.ratio)
		}
		fits := "fits"
		if !r.fits {
			fits = "**does not fit**"
		}
		choice := r.choice
		if choice == "" {
			choice = "nothing fits"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.1f of %.1f GiB, %s | %s | %.2f |\n", r.c.ID, r.c.Layout, pub, planned, ratio, r.memory, r.capacity, fits, choice, r.layoutRatio)
	}
	b.WriteString("\n")
	return b.String()
}

func trimFloat(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// The worked examples of docs/plan.md are the commands' output: each block that starts with
// "$ gpubench plan" is run, and its lines must be the output's, "..." skipping lines (the first
// part from the output's start, each later one further on). Trailing spaces are not compared.
func TestPlanDocExamples(t *testing.T) {
	data, err := os.ReadFile("../../docs/plan.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```\n\\$ gpubench plan ([^\n]*)\n(.*?)```").FindAllStringSubmatch(string(data), -1)
	if len(blocks) < 6 {
		t.Fatalf("%d examples in docs/plan.md", len(blocks))
	}
	for _, b := range blocks {
		args := append([]string{"plan"}, strings.Fields(b[1])...)
		if strings.HasPrefix(b[2], "gpubench: ") { // an error example, about the config.json of testdata
			t.Run("error", func(t *testing.T) {
				config, err := os.ReadFile(filepath.Join("testdata", "plan-config-no-hidden.json"))
				if err != nil {
					t.Fatal(err)
				}
				t.Chdir(t.TempDir())
				if err := os.WriteFile("config.json", config, 0o644); err != nil {
					t.Fatal(err)
				}
				_, errOut, code := gpubench(t, args...)
				if code != exitUsage || errOut != b[2] {
					t.Errorf("gpubench %s: exit %d, stderr %q; the doc shows %q", b[1], code, errOut, b[2])
				}
			})
			continue
		}
		out, errOut, code := gpubench(t, args...)
		if code != 0 || errOut != "" {
			t.Errorf("gpubench %s: exit %d, stderr %q", b[1], code, errOut)
			continue
		}
		got := strings.Split(out, "\n")
		for i := range got {
			got[i] = strings.TrimRight(got[i], " ")
		}
		// The parts between "..." lines; the first is anchored at the output's start unless the
		// block starts with "...".
		var parts [][]string
		anchored := true
		cur := []string{}
		for i, line := range strings.Split(strings.TrimSuffix(b[2], "\n"), "\n") {
			if line != "..." {
				cur = append(cur, line)
				continue
			}
			if i == 0 {
				anchored = false
			}
			if len(cur) > 0 {
				parts = append(parts, cur)
			}
			cur = []string{}
		}
		if len(cur) > 0 {
			parts = append(parts, cur)
		}
		at := 0 // the next output line a part may start at
		for k, want := range parts {
			found := -1
			for i := at; i+len(want) <= len(got); i++ {
				if slicesEqualTrimmed(got[i:i+len(want)], want) {
					found = i
					break
				}
				if k == 0 && anchored {
					break
				}
			}
			if found < 0 {
				t.Errorf("gpubench %s: the doc's lines\n%s\nare not in the output:\n%s", b[1], strings.Join(want, "\n"), out)
				break
			}
			at = found + len(want)
		}
	}
}

func slicesEqualTrimmed(got, want []string) bool {
	for i := range want {
		if got[i] != strings.TrimRight(want[i], " ") {
			return false
		}
	}
	return true
}
