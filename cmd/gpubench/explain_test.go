package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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
		`\nchosen:     NVLS/Simple, 16 channels, ` + num + ` us\n`,
		`\nrunner-up:  Ring/Simple, 24 channels, ` + num + ` us \(` + num + `% slower\)\n`,
		`\nbottleneck: NVLink; rings over the links carry 370\.8 GB/s busbw\n`,
		`\nbandwidth:  busbw ` + num + ` GB/s, algbw ` + num + ` GB/s\n`,
		`\nterms:      latency 25\.0 us \+ bandwidth ` + num + ` us \(size / algbw\): bandwidth dominates \(9[0-9]% of the time\)\n`,
		`\npipeline:   ` + num + ` us of the bandwidth term is NVLS.s scatter, reduce and gather stages draining, which NCCL.s estimate leaves out\n`,
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

	// Where the simulated call takes another time than NCCL's estimate, the chosen line gives both.
	out, _, code = gpubench(t, "explain", "allreduce", "--topology", "hgx-h800", "--size", "768K")
	if want := regexp.MustCompile(`\nchosen:     Ring/LL, 16 channels, ` + num + ` us by NCCL.s figures; the simulated call takes ` + num + ` us \(its channels carry what the links do, above the speed NCCL.s search gave them\)\n`); code != 0 || !want.MatchString(out) {
		t.Errorf("hgx-h800, 768 KiB: exit %d; the chosen line lacks both figures:\n%s", code, out)
	}

	out, _, code = gpubench(t, "explain", "allreduce", "--topology", "dgx-h100", "--size", "8")
	if code != 0 || !strings.Contains(out, "\nchosen:     Ring/LL, ") || !strings.Contains(out, "latency dominates") ||
		!strings.Contains(out, "\nabove:      NVLS/Simple from ") || !strings.Contains(out, "takes 39.2 us, longer than the call: a timed loop runs at the launches' pace\n") {
		t.Errorf("8 B: exit %d\n%s", code, out)
	}
}

// Where the simulated call differs from NCCL's estimate, the bottleneck, bandwidth and terms are
// the call's, which the run shows: NCCL_MAX_NCHANNELS=4 leaves a 4-node all-gather 4 thread
// blocks, a fifth of NCCL's 384 GB/s busbw.
func TestExplainDescribesTheRun(t *testing.T) {
	t.Setenv("NCCL_MAX_NCHANNELS", "4")
	text, errOut, code := gpubench(t, "explain", "allgather", "--topology", "dgx-h100", "--nodes", "4", "--size", "256M")
	if code != 0 || errOut != "" {
		t.Fatalf("explain: exit %d, stderr %q", code, errOut)
	}
	bw := regexp.MustCompile(`\nbandwidth:  busbw ([0-9.]+) GB/s, algbw [0-9.]+ GB/s; NCCL's per-channel or protocol limit sets it, not the links; ` +
		`NCCL's estimate: busbw 384\.0 GB/s; the whole call, latency included: busbw ([0-9.]+) GB/s\n`).FindStringSubmatch(text)
	terms := regexp.MustCompile(`\nterms:      latency ([0-9.]+) us \+ bandwidth ([0-9.]+) us `).FindStringSubmatch(text)
	if bw == nil || terms == nil {
		t.Fatalf("no bandwidth line for the simulated call beside NCCL's estimate, or no terms:\n%s", text)
	}
	out, errOut, code := gpubench(t, "allgather", "--backend", "sim", "--topology", "dgx-h100", "--nodes", "4", "--sizes", "256M:256M", "-c", "0", "--output", "json")
	var r struct {
		Results []struct {
			OutOfPlace struct {
				TimeUS float64 `json:"time_us"`
				BusGBs float64 `json:"busbw_gbs"`
			} `json:"out_of_place"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || len(r.Results) != 1 {
		t.Fatalf("allgather: exit %d, %v, %s", code, err, errOut)
	}
	run := r.Results[0].OutOfPlace
	num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	if term, whole := num(bw[1]), num(bw[2]); math.Abs(whole-run.BusGBs) > 0.01*run.BusGBs || term < run.BusGBs || term > 1.1*run.BusGBs {
		t.Errorf("explain's busbw %.1f (the whole call %.1f), the run's %.1f:\n%s", term, whole, run.BusGBs, text)
	}
	if us := num(terms[1]) + num(terms[2]); math.Abs(us-run.TimeUS) > 0.01*run.TimeUS {
		t.Errorf("explain's terms add to %.1f us, the run takes %.1f:\n%s", us, run.TimeUS, text)
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

// A set NCCL_* variable that steers NCCL and not the simulator is named on stderr, where the
// figures are the simulator's, and changes nothing; one that only logs is not named.
func TestUnmodelledNCCLNotice(t *testing.T) {
	plain, _, _ := gpubench(t, "explain", "allreduce", "--size", "1G")
	t.Setenv("NCCL_BUFFSIZE", "1048576")
	t.Setenv("NCCL_DEBUG", "INFO")
	const notice = "gpubench: the simulator does not model NCCL_BUFFSIZE: its figures are NCCL's without it (docs/model.md, \"Environment\")\n"
	out, errOut, code := gpubench(t, "explain", "allreduce", "--size", "1G")
	if code != 0 || out != plain || errOut != notice {
		t.Errorf("explain with NCCL_BUFFSIZE and NCCL_DEBUG set: exit %d, stderr %q, stdout changed: %v", code, errOut, out != plain)
	}
	t.Setenv("NCCL_P2P_LL_THRESHOLD", "0")
	out, errOut, code = gpubench(t, "sendrecv", "--backend", "sim", "-b", "8", "-e", "8", "-g", "2", "--output", "json")
	if code != 0 || !strings.HasPrefix(out, "{") || !strings.Contains(errOut, "does not model NCCL_BUFFSIZE, NCCL_P2P_LL_THRESHOLD: its figures are NCCL's without them") {
		t.Errorf("sendrecv: exit %d, stderr %q", code, errOut)
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
		"sim_bottleneck", "sim_capped", "sim_dominant", "sim_balance_bytes",
		"change_below", "change_above", "scan_min_bytes", "scan_max_bytes", "candidates"} {
		if _, ok := doc[field]; !ok {
			t.Errorf("no %q in %s", field, out)
		}
	}
	if doc["collective"] != "reducescatter" || doc["bytes"] != float64(64<<20) || doc["ranks"] != float64(16) || doc["nodes"] != float64(2) {
		t.Errorf("wrong header fields: %v %v %v %v", doc["collective"], doc["bytes"], doc["ranks"], doc["nodes"])
	}
	chosen, _ := doc["chosen"].(map[string]any)
	for _, field := range []string{"algo", "proto", "channels", "time_us", "latency_us", "bandwidth_us", "algbw_gbs", "busbw_gbs", "sim_time_us",
		"sim_latency_us", "sim_bandwidth_us", "sim_algbw_gbs", "sim_busbw_gbs", "fill_us", "sim_why"} {
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

// NCCL_IB_HCA and NCCL_PXN_DISABLE change the machine explain explains as they change the one the
// collectives run on, and docs/model.md says so.
func TestExplainAppliesRouteVariables(t *testing.T) {
	simUS := func(t *testing.T) (explained, run float64) {
		t.Helper()
		out, errOut, code := gpubench(t, "explain", "allreduce", "--topology", "dgx-h100x2", "--size", "1G", "--output", "json")
		var x struct {
			Chosen struct {
				SimTimeUS float64 `json:"sim_time_us"`
			} `json:"chosen"`
		}
		if err := json.Unmarshal([]byte(out), &x); code != 0 || err != nil {
			t.Fatalf("explain: exit %d, %v, %s", code, err, errOut)
		}
		out, errOut, code = gpubench(t, "allreduce", "--backend", "sim", "--topology", "dgx-h100x2", "--sizes", "1G", "-c", "0", "--output", "json")
		var r struct {
			Results []struct {
				OutOfPlace struct {
					TimeUS float64 `json:"time_us"`
				} `json:"out_of_place"`
			} `json:"results"`
		}
		if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || len(r.Results) != 1 {
			t.Fatalf("allreduce: exit %d, %v, %s", code, err, errOut)
		}
		return x.Chosen.SimTimeUS, r.Results[0].OutOfPlace.TimeUS
	}
	all, _ := simUS(t)
	for _, v := range [][2]string{{"NCCL_IB_HCA", "mlx5_0"}, {"NCCL_PXN_DISABLE", "1"}} {
		t.Run(v[0], func(t *testing.T) {
			t.Setenv(v[0], v[1])
			explained, run := simUS(t)
			if math.Abs(explained-run) > 0.01*run {
				t.Errorf("%s=%s: explain's simulated call %.1f us, the run's %.1f us", v[0], v[1], explained, run)
			}
			if v[0] == "NCCL_IB_HCA" && explained < 2*all {
				t.Errorf("NCCL_IB_HCA=mlx5_0: %.1f us, not slower than all 8 NICs' %.1f us on one NIC", explained, all)
			}
		})
	}
	doc, err := os.ReadFile("../../docs/model.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(doc), "| `NCCL_IB_HCA` |")
	para, _, _ := strings.Cut(after[strings.Index(after, "\n\n")+2:], "\n\n")
	if !strings.Contains(para, "`gpubench explain`") || strings.Contains(para, "not apply") {
		t.Errorf("docs/model.md after the Environment table does not say that explain applies NCCL_PXN_DISABLE and NCCL_IB_HCA:\n%s", para)
	}
}

// explain explains the size the collective's command runs: rounded as its counts round it, cut
// to the GPUs' memory as nccl-tests cuts it, and says so on stderr; a size the command would run
// as 0 B is refused.
func TestExplainRunsTheCommandsSize(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "explain", "allreduce", "--topology", "dgx-h100", "--size", "1T")
	wantErr := "gpubench: explain: allreduce --sizes 1T runs 24.9 GiB (26717366952 B) here: the GPUs' memory cuts it to 26717366954 B as nccl-tests cuts its largest size, 40076050432 B with -c 0, and it runs whole 4-byte floats, its default type; explaining that size\n"
	if code != 0 || !strings.HasPrefix(out, "allreduce of 24.9 GiB (26717366952 B) on dgx-h100") || errOut != wantErr {
		t.Errorf("1T: exit %d, stderr %q; want %q\n%s", code, errOut, wantErr, out)
	}
	// The command runs the same size.
	out, errOut, code = gpubench(t, "allreduce", "--backend", "sim", "--topology", "dgx-h100", "--sizes", "1T", "--output", "json")
	var r struct {
		Results []struct {
			Bytes int64 `json:"size_bytes"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || len(r.Results) != 1 || r.Results[0].Bytes != 26717366952 {
		t.Errorf("allreduce --sizes 1T: exit %d, %v, %s, rows %+v; want one of 26717366952 B", code, err, errOut, r.Results)
	}
	for _, c := range []struct{ args, header, note string }{
		{"allgather --topology pcie-4090x8 --size 347397", "allgather of 339 KiB (347392 B) on pcie-4090x8", "gpubench: explain: allgather --sizes 347397 runs 339 KiB (347392 B) here: it rounds each rank's share down to 16 B; explaining that size\n"},
		{"sendrecv --size 1001", "sendrecv of 1000 B on dgx-h100", "gpubench: explain: sendrecv --sizes 1001 runs 1000 B here: it runs whole 4-byte floats, its default type; explaining that size\n"},
		{"alltoall --size 1000", "alltoall of 896 B on dgx-h100", "gpubench: explain: alltoall --sizes 1000 runs 896 B here: it rounds each rank's share down to 16 B; explaining that size\n"},
		{"allreduce --size 1G", "allreduce of 1 GiB (1073741824 B) on dgx-h100", ""},
	} {
		out, errOut, code := gpubench(t, append([]string{"explain"}, strings.Fields(c.args)...)...)
		if code != 0 || !strings.HasPrefix(out, c.header) || errOut != c.note {
			t.Errorf("%s: exit %d, stderr %q; want %q and %q\n%s", c.args, code, errOut, c.note, c.header, out)
		}
	}
	out, errOut, code = gpubench(t, "explain", "allreduce", "--size", "3")
	if want := "gpubench: allreduce of 3 B is 0 elements (the command runs whole 4-byte floats): give at least 4 B\n"; code != exitUsage || out != "" || errOut != want {
		t.Errorf("3 B: exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, want)
	}
	// GPUs of 2 GiB leave nothing once nccl-tests keeps its share free: no size runs, so none is
	// explained (it was once a negative one).
	doc, _, _ := gpubench(t, "topo", "--backend", "sim", "--topology", "pcie-l40sx4", "--output", "json")
	small := filepath.Join(t.TempDir(), "small.json")
	if err := os.WriteFile(small, []byte(regexp.MustCompile(`"memory_bytes": [0-9]+`).ReplaceAllString(doc, `"memory_bytes": 2147483648`)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = gpubench(t, "explain", "allreduce", "--topology", small, "--size", "8")
	if want := "gpubench: pcie-l40sx4's GPUs have too little memory for any size: nccl-tests keeps 1 GiB and more of a GPU's memory free; give them memory_bytes of 3 GiB or more\n"; code != exitUsage || out != "" || errOut != want {
		t.Errorf("GPUs of 2 GiB: exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, want)
	}
}

// Sizes to three figures are rounded before their unit is chosen: 1 MiB less a byte is 1.00 MiB,
// not 1024 KiB.
func TestApproxSize(t *testing.T) {
	for n, want := range map[int64]string{999: "999 B", 1024: "1 KiB", 1536: "1.50 KiB", 10235: "10.0 KiB", 1048575: "1.00 MiB",
		33553920: "32.0 MiB", 1073741823: "1.00 GiB", 16 << 30: "16 GiB"} {
		if got := approxSize(n); got != want {
			t.Errorf("%d B: %q; want %q", n, got, want)
		}
	}
}
