package main

import (
	"strings"
	"testing"
)

// Forced sizes that the machine can never hold are a usage error naming the flag: one line on
// stderr, nothing on stdout, exit 2 (not "does not fit in memory", exit 0).
func TestPlanForcedSizesOfTheMachine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "llama-3.1-70b", "--nodes", "4", "--dp", "64"}, "invalid --dp 64: the machine has only 32 GPUs (dgx-h100 x4)"},
		{[]string{"--model", "llama-3.1-70b", "--nodes", "4", "--tp", "8", "--pp", "4", "--dp", "2"}, "invalid --tp 8 x --pp 4 x --dp 2: their product, 64 GPUs, does not divide the machine's 32"},
		{[]string{"--model", "llama-3.1-8b", "--nodes", "4", "--gpus-per-node", "4", "--tp", "8"}, "invalid --tp 8: TP groups stay inside an NVLink domain, and the machine's hold 4 GPUs"},
		{[]string{"--model", "llama-3.1-70b", "--topology", "dgx-h100", "--gpus-per-node", "6", "--nodes", "4", "--tp", "4"}, "use a --tp that divides 6, or --allow-tp-across-nodes"},
	} {
		out, errOut, code := gpubench(t, append([]string{"plan"}, c.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("plan %v: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", c.args, code, out, errOut, c.want)
		}
	}
}

// When no split of the machine's GPUs runs at all, the plan says which constraints and what to
// change, and does not blame memory.
func TestPlanNoLayoutRuns(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "plan", "--model", "llama-3.1-8b", "--topology", "gb200-nvl72", "--nodes", "3")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"\ndoes not run: no layout of llama-3.1-8b can run on the 12 GPUs of gb200-nvl72 x3",
		"\nto run it here: --global-batch a multiple of 3 (DP3 x micro-batch 1); or --uneven-pp",
		"global batch not divisible by DP x micro-batch",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "does not fit") {
		t.Errorf("memory blamed:\n%s", out)
	}
	doc := planJSON(t, "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--gpus-per-node", "3", "--nodes", "3")
	if doc["runs"] != false || doc["smallest_fit"] != nil || len(doc["advice"].([]any)) == 0 {
		t.Errorf("runs %v, smallest_fit %v, advice %v", doc["runs"], doc["smallest_fit"], doc["advice"])
	}
	out, _, _ = gpubench(t, "plan", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--gpus-per-node", "3", "--nodes", "3")
	if strings.Contains(out, "--zero 3") || !strings.Contains(out, "--uneven-pp") {
		t.Errorf("nodes of 3 GPUs: memory's advice, or not the constraints':\n%s", out)
	}
}

// TP groups on nodes of 7 GPUs: TP4's would straddle nodes, so the search leaves it out; allowed
// across nodes, it is priced on the group that straddles, over the network.
func TestPlanTPOnOddNodes(t *testing.T) {
	t.Parallel()
	args := []string{"--model", "llama-3.1-70b", "--topology", "dgx-h100", "--gpus-per-node", "7", "--nodes", "8", "--global-batch", "84"}
	out, _, code := gpubench(t, append([]string{"plan"}, args...)...)
	if code != 0 || strings.Contains(out, "TP4 PP2 DP7") || !strings.Contains(out, " TP across NVLink domains; TP2 does not divide NVLink domains of 7 GPUs") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	doc := planJSON(t, append(args, "--allow-tp-across-nodes", "--tp", "4")...)
	for _, c := range doc["ranked"].([]any)[0].(map[string]any)["collectives"].([]any) {
		c := c.(map[string]any)
		if c["group"] == "tp" && (c["link"] == "nvlink" || c["where"] != "4-7") {
			t.Errorf("TP4 on nodes of 7 priced over %v on GPUs %v", c["link"], c["where"])
		}
	}
}

// The smallest machine that fits is the smallest, below the machine's nodes too.
func TestPlanSmallestFit(t *testing.T) {
	t.Parallel()
	out, _, code := gpubench(t, "plan", "--model", "llama-3.1-405b", "--topology", "dgx-h100", "--nodes", "63", "--seq", "8192", "--global-batch", "2048")
	if code != 0 || !strings.Contains(out, "\nsmallest machine that fits: --nodes 24 (192 GPUs), as TP8 CP4 PP6 DP1 1F1B with 76.4 GiB a GPU\n") ||
		!strings.Contains(out, "\nmost of these 63 nodes that fit: --nodes ") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// --top above every shape ranks each shape priced once, and the header says how many there are.
func TestPlanTopCountsShapes(t *testing.T) {
	t.Parallel()
	doc := planJSON(t, "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--seq", "8192", "--top", "1000")
	if n := len(doc["ranked"].([]any)); float64(n) != doc["priced_shapes"] || doc["priced"].(float64) <= float64(n) {
		t.Errorf("%d ranked, %v shapes, %v priced", n, doc["priced_shapes"], doc["priced"])
	}
}

// A sequence of any length plans without context parallelism: Megatron splits it into 2 x CP
// chunks only with CP above 1, and over TP only with sequence parallelism, so a length of 4097
// runs TP1 and CP1 layouts and leaves out the others, naming why.
func TestPlanOddSequence(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "plan", "--model", "llama-3.1-8b", "--topology", "dgx-h100", "--seq", "4097")
	if code != 0 || errOut != "" || !strings.Contains(out, "\n1     TP1 ") ||
		!strings.Contains(out, "sequence not divisible by TP (sequence parallelism); TP2: sequence parallelism splits a rank's 4097 tokens 2 ways") {
		t.Errorf("exit %d, stderr %q, stdout\n%s", code, errOut, out)
	}
}
