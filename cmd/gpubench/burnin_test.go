package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/burnin"
)

type burninDoc struct {
	Verdict string `json:"verdict"`
	Passes  int    `json:"passes"`
	Checks  []struct {
		Subject, Check, Verdict, Reason string
	} `json:"checks"`
}

func (d burninDoc) failed() map[string]string {
	m := map[string]string{}
	for _, c := range d.Checks {
		if c.Verdict == "fail" {
			m[c.Subject+"/"+c.Check] = c.Reason
		}
	}
	return m
}

// Each simulated fault turns the verdict to fail, exit 3, naming the GPU or the pair; a healthy
// machine passes. 25 s of simulated time each, a few seconds of wall time.
func TestBurninFaults(t *testing.T) {
	t.Parallel()
	base := []string{"burnin", "--backend", "sim", "--duration", "25s", "--baseline", "10s", "--output", "json", "--collectives", "allreduce,alltoall"}
	tests := []struct {
		name  string
		fault string
		code  int
		want  []string // failed subject/check keys
	}{
		{"healthy", "", 0, nil},
		{"corrupt", "corrupt=2", 3, []string{"2/data", "all/data"}},
		{"xid", "xid=3@15s:48", 3, []string{"3/xid"}},
		{"xid at the start", "xid=4", 3, []string{"4/xid"}}, // XID 79 before the first step
		{"slow link", "slow-link=gpu1,nvswitch,0.25@15s", 3, []string{"all/bandwidth", "all/p2p_bandwidth", "1-0/p2p_bandwidth", "0-1/p2p_bandwidth"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := base
			if tc.fault != "" {
				args = append(append([]string(nil), base...), "--sim-fault", tc.fault)
			}
			out, errOut, code := gpubench(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d; want %d\nstderr: %s", code, tc.code, errOut)
			}
			var doc burninDoc
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			failed := doc.failed()
			for _, k := range tc.want {
				if _, ok := failed[k]; !ok {
					t.Errorf("check %s did not fail; failed: %v", k, failed)
				}
			}
			if tc.want == nil && (len(failed) != 0 || doc.Verdict != "pass") {
				t.Errorf("healthy machine: verdict %s, failed %v", doc.Verdict, failed)
			}
			if tc.name == "corrupt" { // GPU 2 alone is blamed, by the collectives and the copies
				for k := range failed {
					if k != "2/data" && k != "all/data" {
						t.Errorf("a corrupt GPU 2 also failed %s", k)
					}
				}
				if !strings.HasSuffix(errOut, "gpubench: burnin failed: data on all and GPU 2\n") { // not "data on all GPUs"
					t.Errorf("stderr %q; want the collectives' data check and GPU 2's", errOut)
				}
			}
			if tc.name == "xid" {
				if r := failed["3/xid"]; !strings.Contains(r, "XID 48 on GPU 3") {
					t.Errorf("xid reason %q", r)
				}
				for k := range failed {
					if k != "3/xid" {
						t.Errorf("an XID on GPU 3 also failed %s", k)
					}
				}
			}
			if tc.code == 3 && !strings.Contains(errOut, "burnin failed: ") {
				t.Errorf("stderr %q; want the failed checks named", errOut)
			}
		})
	}
}

// With expectations, a machine slow from the first minute fails the bandwidth check (its own
// baseline would hold it to its own slowness), a healthy one passes, and the reason says where
// the floor came from.
func TestBurninExpectedFloors(t *testing.T) {
	t.Parallel()
	base := []string{"burnin", "--backend", "sim", "--duration", "5s", "--sizes", "16M:64M:x4", "--collectives", "allreduce", "--p2p-size", "0", "--expect", "--output", "json"}
	for _, tc := range []struct {
		fault  string
		code   int
		status string
	}{{"", 0, "pass"}, {"slow-link=gpu0,nvswitch,0.5", 3, "fail"}} {
		args := base
		if tc.fault != "" {
			args = append(append([]string(nil), base...), "--sim-fault", tc.fault)
		}
		out, errOut, code := gpubench(t, args...)
		if code != tc.code {
			t.Fatalf("%q: exit %d; want %d\n%s", tc.fault, code, tc.code, errOut)
		}
		if !strings.Contains(out, "0.75 x expected") || !strings.Contains(out, `"`+tc.status+`"`) {
			t.Errorf("%q: want the bandwidth check %s against 0.75 x expected:\n%s", tc.fault, tc.status, out)
		}
	}
	// The copies are held to the same copies on the fault-free machine: a GPU's half-speed link
	// fails its pairs from the first pass on.
	out, _, code := gpubench(t, "burnin", "--backend", "sim", "--duration", "5s", "--collectives", "none", "--p2p-size", "16MiB", "--expect",
		"--sim-fault", "slow-link=gpu3,nvswitch,0.5")
	if code != 3 || !strings.Contains(out, "copies 0->3 at ") || !strings.Contains(out, "(0.75 x expected ") || !strings.Contains(out, "every slow pair involves GPU 3") {
		t.Errorf("p2p against expected: exit %d\n%s", code, out)
	}
	// Without --expect on the simulator, or with --baseline given, the first minute sets them.
	out, _, code = gpubench(t, append(base, "--baseline", "1s")...)
	if code != 0 || strings.Contains(out, "x expected") || !strings.Contains(out, "best of the first 1s") {
		t.Errorf("--baseline with --expect: exit %d\n%s", code, out)
	}
}

// The results stream: one JSON object per line, start first, a result per row, verdict and end
// last.
func TestBurninResultsStream(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.jsonl")
	_, errOut, code := gpubench(t, "burnin", "--backend", "sim", "--duration", "5s", "--baseline", "2s", "--out", path, "--sim-fault", "xid=1@1s")
	if code != 3 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	kinds := map[string]int{}
	var records []string
	var times []float64
	for i, l := range lines {
		var r struct {
			Record string  `json:"record"`
			Kind   string  `json:"kind"`
			T      float64 `json:"t_seconds"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, l)
		}
		records = append(records, r.Record)
		times = append(times, r.T)
		kinds[r.Record+"/"+r.Kind]++
	}
	if n := len(times); n < 2 || times[n-2] < 5 || times[n-2] > times[n-1] { // the verdict is reached at the end
		t.Errorf("verdict at %v s and end at %v s; want both at the end of the 5 s", times[n-2], times[n-1])
	}
	if records[0] != "start" || records[len(records)-2] != "verdict" || records[len(records)-1] != "end" {
		t.Errorf("records run %s ... %v", records[0], records[len(records)-2:])
	}
	if kinds["result/collective"] == 0 || kinds["result/p2p"] == 0 || kinds["event/xid"] != 1 {
		t.Errorf("record kinds %v; want collective and p2p results and one xid event", kinds)
	}
}

// A --reference of another rank count is another machine's figures: refused; collectives it
// holds no run of are said to be held to no floor.
func TestBurninReferenceOfThisMachine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, g := range []string{"2", "8"} {
		out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--sizes", "256K:1G:x16", "-g", g, "--output", "json")
		if code != 0 {
			t.Fatalf("-g %s: exit %d, %s", g, code, errOut)
		}
		if err := os.WriteFile(filepath.Join(dir, g+".json"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	two := filepath.Join(dir, "2.json")
	if _, errOut, code := gpubench(t, "burnin", "--backend", "sim", "--duration", "1ms", "--reference", two); code != 2 ||
		errOut != "gpubench: invalid --reference "+two+": measured on 2 ranks, and this burn-in runs on 8 GPUs; give a run of all of this machine's GPUs\n" {
		t.Errorf("a 2-GPU reference on 8 GPUs: exit %d, stderr %q", code, errOut)
	}
	_, errOut, _ := gpubench(t, "burnin", "--backend", "sim", "--duration", "1ms", "--collectives", "allreduce,allgather", "--p2p-size", "0", "--reference", filepath.Join(dir, "8.json"))
	if !strings.Contains(errOut, "gpubench: --reference holds no allgather run: its rows are held to no floor\n") || strings.Contains(errOut, "no allreduce") {
		t.Errorf("stderr %q; want allgather, and only it, named as held to no floor", errOut)
	}
}

func TestBurninUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--duration", "0s"}, {"--duration", "soon"}, {"--floor", "1.5"}, {"--collectives", "allreduce,bogus"},
		{"--sizes", "1G:1K"}, {"--ignore-xid", "13,x"}, {"--p2p-size", "8"}, {"--collectives", "none", "--p2p-size", "0"},
		{"--sample-interval", "1ms"}, {"--reference", "/nonexistent.json"}, {"--reference", "/dev/zero"}, {"--metrics", "256.0.0.1:1"},
		{"--p2p-size", "100G", "--collectives", "none"},
		{"--sim-fault", "xid=99@1s"}, {"--sim-fault", "slow-link=gpu0,nowhere,0.5@1s"},
		{"--baseline", "0s"}, {"--min-busbw", "Inf"}, {"--max-nvlink-errors", "-1"}, {"--hold", "5s"},
		{"--collectives", "allreduce,allreduce"}, {"-T", "9300000000"}, {"--ignore-xid", "99999999"}, {"--ignore-xid", "13,13"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errOut, code := gpubench(t, append([]string{"burnin", "--backend", "sim", "--duration", "1s"}, args...)...)
			if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line", code, out, errOut)
			}
		})
	}
}

// requireTool finds a binary the test needs: it skips without it, except when CI is set (to
// anything), where .ci/run installs it and its absence is a failure.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (CI requires it; .ci/run installs Debian's prometheus package)", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// liveBurnin starts a simulated burn-in in this process with a metrics endpoint on a free
// loopback port, and returns the endpoint's address; the burn-in stops when the test ends.
func liveBurnin(t *testing.T, args ...string) string {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	e := &env{stdout: io.Discard, stderr: pw, pid: 4242, version: "test", now: time.Now}
	go func() {
		done <- run(ctx, e, append([]string{"burnin", "--backend", "sim", "--metrics", "127.0.0.1:0"}, args...))
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		re := regexp.MustCompile(`metrics on http://([^/]+)/metrics`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatal("the burn-in ended without serving metrics")
		}
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("no metrics address after 30 s")
	}
	return ""
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// promtool finds nothing wrong with a live scrape of a running burn-in.
func TestBurninPromtoolCheckMetrics(t *testing.T) {
	t.Parallel()
	promtool := requireTool(t, "promtool")
	addr := liveBurnin(t, "--duration", "2h", "--hold", "1m")
	// Scrape until the first benchmark figure is in (how soon depends on the machine's load).
	body := scrape(t, addr)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(body, "gpubench_bench_bus_bandwidth_bytes_per_second{") && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		body = scrape(t, addr)
	}
	for _, want := range []string{"gpubench_gpu_temperature_celsius{", "gpubench_burn_running 1", "gpubench_bench_bus_bandwidth_bytes_per_second{", "gpubench_gpu_info{"} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// Debian's Prometheus server scrapes a simulated burn-in on loopback, and its HTTP API returns a
// gpubench series.
func TestBurninPrometheusEndToEnd(t *testing.T) {
	t.Parallel()
	prom := requireTool(t, "prometheus")
	addr := liveBurnin(t, "--duration", "2h", "--hold", "2m", "--sim-fault", "xid=2@1s:48")
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: gpubench\n    static_configs:\n      - targets: ['%s']\n", addr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Prometheus takes a port, not a listener: a port found free can be taken by another process
	// before Prometheus binds it, so a start that fails is tried again on another.
	var web string
	var log strings.Builder
	for try := 0; ; try++ {
		web = "127.0.0.1:" + loopbackPort(t)
		log.Reset()
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
			"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			cancel()
			<-exited
		})
		if waitHTTP(web, exited) || try == 4 {
			break
		}
	}
	query := "http://" + web + "/api/v1/query?query=" + url.QueryEscape(`gpubench_gpu_xid_errors_total{gpu="2",xid="48"}`)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		resp, err := http.Get(query)
		if err != nil {
			continue
		}
		var r struct {
			Status string
			Data   struct {
				Result []struct {
					Metric map[string]string
					Value  []any
				}
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err == nil && r.Status == "success" && len(r.Data.Result) == 1 {
			if v := r.Data.Result[0].Value; len(v) == 2 && v[1] == "0" {
				continue // the series exists at 0 from the start; the XID comes at 1 s
			}
			if v := r.Data.Result[0].Value; len(v) != 2 || v[1] != "1" || r.Data.Result[0].Metric["job"] != "gpubench" {
				t.Fatalf("series %+v", r.Data.Result[0])
			}
			return
		}
	}
	t.Fatalf("Prometheus never returned the XID series\n%s", log.String())
}

// waitHTTP waits until something answers HTTP at addr, and says whether it did before the process
// serving it exited.
func waitHTTP(addr string, exited <-chan error) bool {
	for range 300 {
		select {
		case <-exited:
			return false
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get("http://" + addr + "/-/ready"); err == nil {
			resp.Body.Close()
			return true
		}
	}
	return false
}

// oneGPU is a machine with a single GPU, as the H200 of docs/validation.md's run.
const oneGPU = `{"format": "gpubench-topology/1", "name": "one-h200", "nodes": [{"hostname": "one-h200",
 "cpus": [{"id": "cpu0", "name": "Xeon", "numa_node": 0}],
 "gpus": [{"id": "gpu0", "name": "NVIDIA H200", "pci_bus_id": "0000:00:06.0", "memory_bytes": 150754820096,
  "memory_bandwidth_gbs": 4800, "compute_capability": "9.0", "numa_node": 0}],
 "links": [{"a": "gpu0", "b": "cpu0", "kind": "pcie", "gen": 5, "width": 16}]}]}`

// On one GPU busbw is 0 by definition: the collective floor is skipped with that reason, even
// with --min-busbw, rather than failed, or skipped for want of a baseline (seen on a real H200);
// and a clock check no loaded sample judged says skip, not an empty pass.
func TestBurninOneGPU(t *testing.T) {
	t.Parallel()
	topo := filepath.Join(t.TempDir(), "one.json")
	if err := os.WriteFile(topo, []byte(oneGPU), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"--min-busbw", "100"}} {
		args := append([]string{"burnin", "--backend", "sim", "--topology", topo, "--duration", "100ms", "--baseline", "50ms",
			"--output", "json", "--collectives", "allreduce"}, extra...)
		out, errOut, code := gpubench(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", extra, code, errOut)
		}
		var doc burninDoc
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		for _, c := range doc.Checks {
			if c.Check == "bandwidth" && (c.Verdict != "skip" || !strings.Contains(c.Reason, "busbw is 0 by definition")) {
				t.Errorf("%v: bandwidth %s: %q", extra, c.Verdict, c.Reason)
			}
			if c.Check == "p2p_bandwidth" && (c.Verdict != "skip" || !strings.Contains(c.Reason, "one GPU")) {
				t.Errorf("%v: p2p_bandwidth %s: %q", extra, c.Verdict, c.Reason)
			}
			if c.Reason == "" {
				t.Errorf("%v: %s/%s is %s with no reason", extra, c.Subject, c.Check, c.Verdict)
			}
		}
	}
}

// BenchmarkBurninSim measures what a simulated burn-in with the default collectives, sizes and
// copies on a dgx-h100 costs the host: CPU seconds per virtual hour (the goal: a 2-hour burn-in
// in under 30 s of CPU, so under 15).
func BenchmarkBurninSim(b *testing.B) {
	e := &env{stdout: io.Discard, stderr: io.Discard, pid: 1, version: "bench", now: time.Now}
	const virtual = 10 * time.Minute
	start := cpuTime(b)
	for i := 0; i < b.N; i++ {
		if code := run(context.Background(), e, []string{"burnin", "--backend", "sim", "--duration", virtual.String()}); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
	b.ReportMetric((cpuTime(b)-start).Seconds()/float64(b.N)/virtual.Hours(), "cpu-s/virtual-h")
}

func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A hang fails the hang check of the GPU and of all, and the verdict with it (exit 5): a run that
// did not finish never passes. The simulated GPU 3 never finishes its third collective.
func TestBurninHangFails(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "table"} {
		out, errOut, code := gpubench(t, "burnin", "--backend", "sim", "--duration", "1m", "--sim-fault", "hang=3@2", "-T", "1", "--output", format)
		if code != 5 || !strings.Contains(errOut, "hang") {
			t.Fatalf("%s: exit %d, stderr %q; want exit 5 and the hang named", format, code, errOut)
		}
		if format == "table" {
			if !strings.Contains(out, "# verdict: FAIL") {
				t.Errorf("table ends %q; want FAIL", out[max(len(out)-80, 0):])
			}
			continue
		}
		var doc burninDoc
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		failed := doc.failed()
		if doc.Verdict != "fail" || failed["3/hang"] == "" || failed["all/hang"] == "" {
			t.Errorf("verdict %s, failed %v; want fail with 3/hang and all/hang", doc.Verdict, failed)
		}
	}
}

// Ctrl-C stops a burn-in (exit 130), and its verdict says it was interrupted, not pass. (How many
// passes finished before the interrupt landed depends on the machine's load, so it is not asserted.)
func TestBurninInterruptedIsNotPass(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"--p2p-size", "32G", "--collectives", "none"}} {
		pr, pw := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		var out bytes.Buffer
		e := &env{stdout: &out, stderr: pw, pid: 4242, version: "test", now: time.Now}
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, e, append([]string{"burnin", "--backend", "sim", "--duration", "2h", "--output", "json"}, args...))
			pw.Close()
		}()
		// The first progress line comes after the first step: interrupt there.
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "gpubench: burnin: ") {
				cancel()
				break
			}
		}
		go io.Copy(io.Discard, pr)
		code := <-done
		cancel()
		var doc struct {
			burninDoc
			Interrupted bool `json:"interrupted"`
		}
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out.String())
		}
		if code != 130 || doc.Verdict != "interrupted" || !doc.Interrupted {
			t.Errorf("%v: exit %d, verdict %q, interrupted %v; want 130, interrupted", args, code, doc.Verdict, doc.Interrupted)
		}
	}
}

// No output file is created or emptied before every input is valid: a bad or busy --metrics
// address leaves an existing results file as it was.
func TestBurninBadInputLeavesOutputAlone(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, flag := range []string{"--out", "--results"} {
		for _, args := range [][]string{{"--metrics", "256.0.0.1:1"}, {"--metrics", busy.Addr().String()}, {"--p2p-size", "100G"}, {"--topology", "nowhere"}} {
			path := filepath.Join(t.TempDir(), "r.jsonl")
			if err := os.WriteFile(path, []byte("earlier results\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, errOut, code := gpubench(t, append([]string{"burnin", "--backend", "sim", "--duration", "1s", flag, path}, args...)...)
			data, _ := os.ReadFile(path)
			if code != 2 || string(data) != "earlier results\n" {
				t.Errorf("%s %v: exit %d, file %q, stderr %q; want exit 2 and the file untouched", flag, args, code, data, errOut)
			}
		}
	}
}

// --results is --out's old name: it still works, with a notice.
func TestBurninResultsIsDeprecatedOut(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.jsonl")
	_, errOut, code := gpubench(t, "burnin", "--backend", "sim", "--duration", "2s", "--collectives", "allreduce", "--results", path)
	data, _ := os.ReadFile(path)
	if code != 0 || !strings.Contains(errOut, "--results has been deprecated, use --out") || !strings.Contains(string(data), `"record":"end"`) {
		t.Errorf("exit %d, stderr %q, %d bytes written; want exit 0, a notice and the stream", code, errOut, len(data))
	}
}

// A results file that cannot be written ends the burn-in at once, exit 1, naming the file.
func TestBurninWriteFailureExits1(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	for _, flag := range []string{"--out", "--results"} {
		out, errOut, code := gpubench(t, "burnin", "--backend", "sim", "--duration", "10s", flag, "/dev/full")
		if code != 1 || !strings.Contains(errOut, "/dev/full: no space left") || strings.Contains(errOut, "gpubench: burnin: ") || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 naming /dev/full before anything ran", flag, code, out, errOut)
		}
	}
}

// The failure summary on stderr is one entry per check, naming its subjects as the table does
// (pairs A-B) and counting them where there are many: a slow node's 56 pairs are not 56 entries.
func TestBurninFailedText(t *testing.T) {
	var checks []burnin.Check
	add := func(check, subject, verdict string) {
		checks = append(checks, burnin.Check{Check: check, Subject: subject, Verdict: verdict})
	}
	add("data", "all", "fail")
	add("data", "2", "fail")
	add("data", "3", "pass")
	add("bandwidth", "all", "fail")
	add("p2p_bandwidth", "all", "fail")
	for a := range 8 {
		for b := range 8 {
			if a != b {
				add("p2p_bandwidth", fmt.Sprintf("%d-%d", a, b), "fail")
			}
		}
	}
	for _, g := range []string{"0", "1", "2", "3", "5"} {
		add("xid", g, "fail")
	}
	want := "data on all and GPU 2, bandwidth, p2p_bandwidth on all and 56 pairs (among GPUs 0 to 7), xid on GPUs 0 to 3, 5"
	if got := failedText(checks); got != want {
		t.Errorf("failedText = %q\nwant %q", got, want)
	}
	checks = nil
	for _, p := range []string{"0-3", "3-0", "1-3", "3-1", "2-3"} {
		add("p2p_bandwidth", p, "fail")
	}
	if got, want := failedText(checks), "p2p_bandwidth on 5 pairs (each involving GPU 3)"; got != want {
		t.Errorf("failedText = %q; want %q", got, want)
	}
	if got, want := failedText(checks[:2]), "p2p_bandwidth on pairs 0-3, 3-0"; got != want {
		t.Errorf("failedText = %q; want %q", got, want)
	}
	if got, want := gpuText([]int{0, 2, 4, 6, 8, 10, 12, 14}), "8 GPUs"; got != want {
		t.Errorf("gpuText = %q; want %q", got, want)
	}
}

// NCCL_ALGO or NCCL_PROTO that leaves one of --collectives no algorithm is refused before the
// burn-in starts (exit 2, one line naming the variable), as the collective's own command refuses it.
func TestBurninRefusesSteeringThatLeavesNothing(t *testing.T) {
	t.Setenv("NCCL_ALGO", "tree")
	out, errOut, code := gpubench(t, "burnin", "--backend", "sim", "--duration", "2s", "--collectives", "allreduce,broadcast")
	if code != 2 || out != "" || errOut != "gpubench: NCCL_ALGO=tree leaves no algorithm and protocol for broadcast here: enable one that serves it (broadcast runs Ring (LL, LL128, Simple))\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and the collectives' refusal", code, out, errOut)
	}
	if _, errOut, code := gpubench(t, "burnin", "--backend", "sim", "--duration", "1ms", "--collectives", "allreduce", "--p2p-size", "0"); code != 0 {
		t.Errorf("allreduce, which Tree serves: exit %d, stderr %q", code, errOut)
	}
}

// Sizes past what the GPUs hold are cut, and stderr says to what.
func TestBurninSaysTheSizesWereCut(t *testing.T) {
	t.Parallel()
	_, errOut, code := gpubench(t, "burnin", "--backend", "sim", "--duration", "1ms", "--sizes", "1T", "--collectives", "allreduce", "--p2p-size", "0")
	if code != 0 || !strings.Contains(errOut, "gpubench: burnin: the collectives run sizes up to 26717366954 B, not the 1099511627776 B of --sizes") {
		t.Errorf("exit %d, stderr %q; want the cut said", code, errOut)
	}
}
