package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// The text says what was chosen over what, the bottleneck, the two terms, NVLS's pipeline and
// where the pick changes, one labelled line each.
func TestExplainText(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "explain", "allreduce", "--topology", "dgx-h100", "--size", "1G")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	// Figures are matched by form: the tuner's tables are the model's to change.
	num := `[0-9]+\.[0-9]`
	for _, want := range []string{
		`^allreduce of 1 GiB \(1073741824 B\) on dgx-h100: 8 GPUs, 1 node\n`,
		`\nchosen:     NVLS/Simple, 16 channels, ` + num + ` us by NCCL.s figures; the simulated call takes ` + num + ` us \(NVLS on one node, held to its links rather than NCCL.s channel figure\)\n`,
		`\nrunner-up:  Ring/Simple, 24 channels, ` + num + ` us \(` + num + `% slower\)\n`,
		`\nbottleneck: NVLink; rings over the links carry 370\.8 GB/s busbw\n`,
		`\nbandwidth:  busbw ` + num + ` GB/s, algbw ` + num + ` GB/s; NCCL's per-channel or protocol limit sets it, not the links\n`,
		`\nterms:      latency 25\.0 us \+ bandwidth ` + num + ` us \(size / algbw\): bandwidth dominates \(9[0-9]% of the time\)\n`,
		`\npipeline:   the simulated call adds ` + num + ` us for NVLS.s scatter, reduce and gather stages to drain, which NCCL.s estimate leaves out\n`,
		`\nlaunch:     4\.9 us a GPU from the host; one thread launching it on 8 GPUs of a node \(nccl-tests -g 8\) takes 39\.2 us\n`,
		`\nbalance:    the two terms are equal at [0-9.]+ MiB \([0-9]+ B\): latency dominates below, bandwidth above\n`,
		`\nbelow:      Ring/LL under [0-9.]+ [KM]iB \([0-9]+ B\), NVLS/Simple from there\n`,
		`\nabove:      NVLS/Simple up to 16 GiB \(17179869184 B\), the largest size scanned\n$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the explanation lacks %s:\n%s", want, out)
		}
	}
	if lines := strings.Count(out, "\n"); lines != 11 {
		t.Errorf("%d lines; want 11:\n%s", lines, out)
	}

	out, _, code = gpubench(t, "explain", "allreduce", "--topology", "dgx-h100", "--size", "8")
	if code != 0 || !strings.Contains(out, "\nchosen:     Ring/LL, ") || !strings.Contains(out, "latency dominates") ||
		!strings.Contains(out, "\nabove:      NVLS/Simple from ") || !strings.Contains(out, "takes 39.2 us, longer than the call: a timed loop runs at the launches' pace\n") {
		t.Errorf("8 B: exit %d\n%s", code, out)
	}
}

// NCCL_* variables steer explain as they steer the collectives.
func TestExplainNCCLEnv(t *testing.T) {
	t.Setenv("NCCL_ALGO", "Ring")
	out, errOut, code := gpubench(t, "explain", "allreduce", "--size", "1G")
	if code != 0 || !strings.Contains(out, "\nchosen:     Ring/Simple, ") || strings.Contains(out, "NVLS") {
		t.Errorf("NCCL_ALGO=Ring: exit %d, %s\n%s", code, errOut, out)
	}
	t.Setenv("NCCL_ALGO", "rings")
	out, errOut, code = gpubench(t, "explain", "allreduce", "--size", "1G")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `NCCL_ALGO="rings": unknown "rings"`) {
		t.Errorf("NCCL_ALGO=rings: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// --output json is one object with the documented fields.
func TestExplainJSON(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "explain", "reducescatter", "--topology", "dgx-h100", "--nodes", "2", "-g", "16", "--size", "64M", "--output", "json")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var doc map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&doc); err != nil || dec.More() {
		t.Fatalf("not one JSON object (%v):\n%s", err, out)
	}
	for _, field := range []string{"collective", "topology", "bytes", "ranks", "nodes", "point_to_point", "chosen", "runner_up",
		"runner_up_slower_percent", "bottleneck", "capped", "links_bus_gbs", "links_limit", "dominant", "balance_bytes",
		"change_below", "change_above", "scan_min_bytes", "scan_max_bytes", "candidates"} {
		if _, ok := doc[field]; !ok {
			t.Errorf("no %q in %s", field, out)
		}
	}
	if doc["collective"] != "reducescatter" || doc["bytes"] != float64(64<<20) || doc["ranks"] != float64(16) || doc["nodes"] != float64(2) {
		t.Errorf("wrong header fields: %v %v %v %v", doc["collective"], doc["bytes"], doc["ranks"], doc["nodes"])
	}
	chosen, _ := doc["chosen"].(map[string]any)
	for _, field := range []string{"algo", "proto", "channels", "time_us", "latency_us", "bandwidth_us", "algbw_gbs", "busbw_gbs", "sim_time_us", "fill_us", "sim_why"} {
		if _, ok := chosen[field]; !ok {
			t.Errorf("chosen has no %q: %v", field, chosen)
		}
	}
	runnerUp, _ := doc["runner_up"].(map[string]any)
	if runnerUp == nil || runnerUp["time_us"].(float64) <= chosen["time_us"].(float64) {
		t.Errorf("runner-up %v is not slower than %v", runnerUp, chosen)
	}
	if c, _ := doc["candidates"].([]any); len(c) < 2 {
		t.Errorf("candidates: %v", doc["candidates"])
	}
}

// All-to-all and send/recv are NCCL's point-to-point operations: explain says so in one line
// and gives the simulator's time and bottleneck.
func TestExplainPointToPoint(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "explain", "alltoall", "--topology", "pcie-4090x8", "--size", "1G")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"\nNCCL runs alltoall as point-to-point sends and receives, which its tuner does not choose",
		"\ntime:       ", ", each operation to a peer on 2 channels\n", "\nbottleneck: PCIe", "bandwidth dominates"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "chosen:") || strings.Contains(out, "below:") {
		t.Errorf("a tuner's choice for a point-to-point operation:\n%s", out)
	}
	// One rank copies locally: no channel to name.
	if out, _, code := gpubench(t, "explain", "sendrecv", "--topology", "dgx-h100", "-g", "1", "--size", "1M"); code != 0 || strings.Contains(out, "channel") {
		t.Errorf("one rank: exit %d:\n%s", code, out)
	}
}

// Bad input: exit 2, nothing on stdout, one line on stderr saying what was wrong and what to do.
func TestExplainBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--size", "1G"}, "explain takes one collective (allreduce, "},
		{[]string{"allreduce", "allgather", "--size", "1G"}, "explain takes one collective"},
		{[]string{"allreduse", "--size", "1G"}, `unknown collective "allreduse": use allreduce, `},
		{[]string{"allreduce"}, "explain needs --size, e.g. --size 1G"},
		{[]string{"allreduce", "--size", "1Q"}, `invalid --size: unknown unit "Q"`},
		{[]string{"allreduce", "--size", "0"}, "invalid --size 0: give at least 1 byte"},
		{[]string{"allreduce", "--size", "1G", "--topology", "dgx-z900"}, `invalid --topology: unknown topology "dgx-z900": use a preset`},
		{[]string{"allreduce", "--size", "1G", "-g", "9"}, "invalid -g 9: dgx-h100 has 8 GPUs; use 1 to 8"},
		{[]string{"allreduce", "--size", "1G", "--output", "csv"}, `unknown --output "csv" for explain: use table or json`},
		{[]string{"allreduce", "--size", "1G", "--backend", "cuda"}, "drop --backend cuda"},
		{[]string{"allreduce", "--size", "1G", "--sim-jitter", "0.5"}, "--sim-jitter does not apply to explain"},
		{[]string{"alltoall", "--size", "64"}, "give at least 128 B"},
		{[]string{"allgather", "--size", "64"}, "allgather of 64 B over 8 ranks gives each rank 0 B (nccl-tests rounds each rank's share down to 16 B): give at least 128 B"},
	} {
		out, errOut, code := gpubench(t, append([]string{"explain"}, c.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", c.args, code, out, errOut, c.want)
		}
	}
}
