package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every collective's default output (8B:8GB on 8 GPUs, whose smallest sizes round to 0-byte rows
// for all-gather, reduce-scatter and all-to-all) goes through every reader, as a document and as
// a stream.
func TestEveryDefaultOutputIsRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv", "gather", "scatter"} {
		doc, stream := filepath.Join(dir, c+".json"), filepath.Join(dir, c+".jsonl")
		out, errOut, code := gpubench(t, c, "--backend", "sim", "--output", "json", "--out", stream, "-n", "2", "-w", "0") // the default sizes
		if code != 0 {
			t.Fatalf("%s: exit %d, %s", c, code, errOut)
		}
		if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := gpubench(t, "compare", doc, stream); code != 0 {
			t.Errorf("compare %s: exit %d, %s", c, code, errOut)
		}
		if _, errOut, code := gpubench(t, "plot", doc, stream, "--out", filepath.Join(dir, c+".svg")); code != 0 {
			t.Errorf("plot %s: exit %d, %s", c, code, errOut)
		}
		if c == "sendrecv" || c == "broadcast" || c == "reduce" || c == "gather" || c == "scatter" {
			continue // burn-in runs all-reduce, all-gather, reduce-scatter and all-to-all
		}
		if _, errOut, code := gpubench(t, "burnin", "--backend", "sim", "--duration", "1ms", "--collectives", c, "--p2p-size", "0", "--reference", doc, "--reference", stream); code != 0 {
			t.Errorf("burnin --reference %s: exit %d, %s", c, code, errOut)
		}
	}
}

// nccl-tests' flags either do what they do there or are refused with why.
func TestNCCLTestsFlagsDropIn(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "-b", "1K", "-e", "4K", "-f", "2", "-t", "2", "-g", "2", "-N", "2", "-C", "1", "-r", "0", "--output", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Config struct {
			Ranks  int  `json:"ranks"`
			Cycles int  `json:"run_cycles"`
			CPU    bool `json:"report_cputime"`
		} `json:"config"`
		Results []struct {
			Cycle      int `json:"cycle"`
			OutOfPlace struct {
				TimeUS float64  `json:"time_us"`
				CPU    *float64 `json:"cpu_time_us"`
			} `json:"out_of_place"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Config.Ranks != 4 || doc.Config.Cycles != 2 || !doc.Config.CPU || len(doc.Results) != 6 {
		t.Fatalf("-t 2 -g 2 -N 2 -C 1: config %+v, %d rows; want 4 ranks, 2 cycles of 3 rows, cputime", doc.Config, len(doc.Results))
	}
	if r := doc.Results[5]; r.Cycle != 2 || r.OutOfPlace.CPU == nil || !(*r.OutOfPlace.CPU > 0 && *r.OutOfPlace.CPU <= r.OutOfPlace.TimeUS) {
		t.Errorf("last row: cycle %d, cpu time %v, time %v; want cycle 2 and a launch time within the completion time", r.Cycle, r.OutOfPlace.CPU, r.OutOfPlace.TimeUS)
	}
	// The simulated host launches from -t threads: two threads of two GPUs launch an 8-byte
	// all-reduce in half the time one thread of four takes, and the header says nThread 2.
	two, _, _ := gpubench(t, "allreduce", "--backend", "sim", "-t", "2", "-g", "2", "-b", "8", "-e", "8")
	one, _, _ := gpubench(t, "allreduce", "--backend", "sim", "-g", "4", "-b", "8", "-e", "8")
	if !strings.Contains(two, "# nThread 2 nGpus 2 ") || !strings.Contains(one, "# nThread 1 nGpus 4 ") {
		t.Errorf("-t 2 -g 2 and -g 4: headers\n%s\n%s", two, one)
	}
	if t2, t1 := rowTime(t, two), rowTime(t, one); !(t2 < 0.6*t1) {
		t.Errorf("8 B all-reduce: %v µs from two threads, %v from one; want about half (the launches)", t2, t1)
	}
	// The table's time column is the launch time with -C, as in nccl-tests.
	table, _, _ := gpubench(t, "allreduce", "--backend", "sim", "-b", "1G", "-e", "1G", "-C", "1")
	if !strings.Contains(table, "host's launch time per collective (-C)") {
		t.Errorf("-C: no note in\n%s", table)
	}
	// -I is --per-iter, and -K leaves iterations out of its statistics.
	out, errOut, code = gpubench(t, "broadcast", "--backend", "sim", "-b", "1K", "-e", "1K", "-I", "1", "-K", "1", "--output", "json")
	if code != 0 || !strings.Contains(out, `"per_iter_skip": 1`) || !strings.Contains(out, `"p50_us"`) {
		t.Errorf("-I 1 -K 1: exit %d, %s\n%s", code, errOut, out)
	}
	// -r on a collective without a root is taken, as nccl-tests takes it, and said to be ignored.
	if _, errOut, code := gpubench(t, "allgather", "--backend", "sim", "-b", "1K", "-e", "1K", "-r", "2"); code != 0 || !strings.Contains(errOut, "-r 2 ignored: allgather has no root") {
		t.Errorf("allgather -r 2: exit %d, %q", code, errOut)
	}
	for _, c := range []struct{ args, want string }{
		{"-m 2", "-m 2 (--agg_iters): gpubench times each collective on its own"},
		{"--agg_iters 4", "-m 4 (--agg_iters)"},
		{"-p 1", "-p 1 (--parallel_init)"},
		{"-R 1", "-R 1 (--local_register)"},
		{"-J out.json", "use --output json, or --out FILE"},
		{"-y 1", "-y 1 (--stream_null)"},
		{"-N -1", "invalid -N -1"},
		{"-K 3", "-K 3 skips the first iterations of the per-iteration times: add -I 1 (--per-iter)"},
		{"-I 1 -K 30", "invalid -K 30"},
		{"-t 0", "invalid -t 0"},
		{"-x 0", "-x 0 (--cta_policy)"},
	} {
		args := append([]string{"allreduce", "--backend", "sim", "-b", "1K", "-e", "1K"}, strings.Fields(c.args)...)
		out, errOut, code := gpubench(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and one line containing %q", c.args, code, out, errOut, c.want)
		}
	}
	// The defaults of the refused flags, as nccl-tests' own scripts pass them, are taken.
	if _, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "-b", "1K", "-e", "1K", "-m", "1", "-p", "0", "-R", "0", "--cudagraph", "1", "-K", "0", "-x", "-1"); code != 0 {
		t.Errorf("default values: exit %d, %s", code, errOut)
	}
}

// A library the user names is what they asked for: when it does not load, the run does not fall
// back to the simulator.
func TestNamedLibraryMustLoad(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"allreduce", "--cuda-lib", "/nonexistent/libcudart.so.12", "-b", "1K", "-e", "1K"},
		{"p2p", "--cuda-lib", "/nonexistent/libcudart.so.12", "--size", "1M"},
		{"serve", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "--metrics", "127.0.0.1:0"},
	} {
		out, errOut, code := gpubenchProcess(t, nil, args...)
		if code != exitNoGPU || out != "" || !strings.Contains(errOut, "/nonexistent/") || strings.Contains(errOut, "using the simulator") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 4 naming the path", args, code, out, errOut)
		}
	}
	_, errOut, code := gpubenchProcess(t, []string{"GPUBENCH_CUDART=/nonexistent/libcudart.so"}, "allreduce", "-b", "1K", "-e", "1K")
	if code != exitNoGPU || !strings.Contains(errOut, "$GPUBENCH_CUDART /nonexistent/libcudart.so names a library that did not load") {
		t.Errorf("GPUBENCH_CUDART: exit %d, %q", code, errOut)
	}
	// Where the CUDA runtime fails first, the NCCL library named was never tried: the message
	// does not blame it.
	_, errOut, code = gpubenchProcess(t, nil, "allreduce", "--nccl-lib", "/nonexistent/libnccl.so.2", "-b", "1K", "-e", "1K")
	blamed := strings.Contains(errOut, "--nccl-lib /nonexistent/libnccl.so.2 names a library that did not load")
	if code != exitNoGPU || (strings.Contains(errOut, "CUDA runtime") && (blamed || !strings.Contains(errOut, "--nccl-lib /nonexistent/libnccl.so.2 asks for the real GPUs"))) {
		t.Errorf("--nccl-lib: exit %d, %q", code, errOut)
	}
	// With --backend sim no library is loaded, so a library flag is refused, not ignored.
	for _, args := range [][]string{{"allreduce", "--backend", "sim", "--cuda-lib", "/x.so", "-b", "1K", "-e", "1K"}, {"p2p", "--backend", "sim", "--nccl-lib", "/x.so"}} {
		out, errOut, code := gpubench(t, args...)
		if code != exitUsage || out != "" || !strings.HasSuffix(errOut, "does not apply to --backend sim, which loads no library: drop it, or use --backend cuda\n") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	t.Parallel()
	out, _, code := gpubench(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "gpubench test (commit ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	file, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(file)) != version {
		t.Errorf("VERSION holds %q, the binary's default version is %q: keep them equal", file, version)
	}
}

func TestCompareThresholdIsPercent(t *testing.T) {
	t.Parallel()
	dir := simRuns(t)
	base, j1 := filepath.Join(dir, "base.json"), filepath.Join(dir, "j1.json")
	_, errOut, code := gpubench(t, "compare", "--threshold", "0.05", base, j1)
	if code != exitUsage || !strings.Contains(errOut, "write 0.05% for 0.05 percent, or 5% for the fraction 0.05") {
		t.Errorf("--threshold 0.05: exit %d, %q", code, errOut)
	}
	out, errOut, code := gpubench(t, "compare", "--threshold", "2.5", base, j1, "--output", "json")
	if code != 0 || !strings.Contains(out, `"threshold_percent": 2.5`) {
		t.Errorf("--threshold 2.5: exit %d, %s\n%s", code, errOut, out)
	}
}

// plot's image is --out, as every command's output file is; -o still works, with a notice, and
// a folder that does not exist is named as the user gave it.
func TestPlotOut(t *testing.T) {
	t.Parallel()
	dir := simRuns(t)
	if _, errOut, code := inDir(t, dir, "plot", "base.json", "-o", "old.svg"); code != 0 || !strings.Contains(errOut, "use --out") {
		t.Errorf("plot -o: exit %d, %q", code, errOut)
	}
	_, errOut, code := gpubench(t, "plot", filepath.Join(dir, "base.json"), "--out", "/nonexistent/x.svg")
	if code != exitUsage || errOut != "gpubench: cannot write --out /nonexistent/x.svg: /nonexistent is not a folder; give a file in one\n" {
		t.Errorf("missing folder: exit %d, %q", code, errOut)
	}
}

// --pairs measures those pairs: the matrices hold their GPUs only, and peer access is enabled for
// them alone; a header never claims a check that no copy made.
func TestP2PPairsAndDataCheck(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "p2p", "--backend", "sim", "--pairs", "0-1,2-3", "--size", "1M", "--output", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Devices []struct {
			Device int `json:"device"`
		} `json:"devices"`
		Access [][]*struct {
			Enable string `json:"enable"`
		} `json:"access"`
		Matrices map[string]struct {
			Values [][]*float64 `json:"values"`
		} `json:"matrices"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Devices) != 4 || len(doc.Matrices["uni_enabled"].Values) != 4 {
		t.Fatalf("--pairs 0-1,2-3: %d devices, %d matrix rows; want 4", len(doc.Devices), len(doc.Matrices["uni_enabled"].Values))
	}
	if a := doc.Access[0][1]; a == nil || a.Enable != "ok" {
		t.Errorf("pair 0-1 enable: %+v, want ok", a)
	}
	if a := doc.Access[0][2]; a == nil || a.Enable != "not requested" {
		t.Errorf("pair 0-2 enable: %+v, want not requested", a)
	}
	table, _, _ := gpubench(t, "p2p", "--backend", "sim", "--size", "1G", "--devices", "0-1")
	if strings.Contains(table, "data verified") || !strings.Contains(table, "no copy's data could be checked") {
		t.Errorf("1 GiB copies past the data cap: the header claims a check:\n%s", table[:min(len(table), 400)])
	}
}

// A machine larger than p2p measures at once is refused, with what to do.
func TestP2PTooManyDevices(t *testing.T) {
	t.Parallel()
	n := map[string]any{"hostname": "big", "cpus": []any{map[string]any{"id": "cpu0"}},
		"switches": []any{map[string]any{"id": "nvs", "kind": "nvswitch"}}}
	var gpus, links []any
	for i := range 80 {
		id := fmt.Sprintf("gpu%d", i)
		gpus = append(gpus, map[string]any{"id": id, "name": "G", "memory_bytes": 1 << 34, "memory_bandwidth_gbs": 1000, "compute_capability": "9.0"})
		links = append(links, map[string]any{"a": id, "b": "nvs", "kind": "nvlink", "gbs": 450},
			map[string]any{"a": id, "b": "cpu0", "kind": "pcie", "gen": 5, "width": 16})
	}
	n["gpus"], n["links"] = gpus, links
	data, _ := json.Marshal(map[string]any{"format": "gpubench-topology/1", "name": "big", "nodes": []any{n}})
	path := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := gpubench(t, "p2p", "--backend", "sim", "--topology", path)
	if code != exitUsage || !strings.Contains(errOut, "takes at most 72: choose some with --devices or --pairs") {
		t.Errorf("80 GPUs: exit %d, %q", code, errOut)
	}
	if _, errOut, code := gpubench(t, "p2p", "--backend", "sim", "--topology", path, "--devices", "0-3", "--size", "64K"); code != 0 {
		t.Errorf("4 of 80 GPUs: exit %d, %s", code, errOut)
	}
}

// Links so slow that no time could be computed are refused when read, and a call whose time is
// still out of reach fails rather than print a figure.
func TestNoNonsenseFigures(t *testing.T) {
	t.Parallel()
	_, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--sim-fault", "slow-link=gpu0,nvswitch,4.9e-324")
	if code != exitUsage || !strings.Contains(errOut, "must be a number from 0.001 to 1") {
		t.Errorf("factor 4.9e-324: exit %d, %q", code, errOut)
	}
	slow := strings.Replace(twoGPUTopology, `"gbs": 32`, `"gbs": 0.001`, -1)
	path := filepath.Join(t.TempDir(), "slow.json")
	if err := os.WriteFile(path, []byte(slow), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--topology", path, "--sim-fault", "slow-link=g0,sw,0.001", "-b", "8G", "-e", "8G", "-c", "0")
	if code != exitFailure || !strings.Contains(errOut, "the topology's links cannot carry this call") || strings.Contains(out, "GB/s at") {
		t.Errorf("an 8 GiB all-reduce over a 1 kB/s link: exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	if _, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--topology", strings.Replace(path, "slow", "missing", 1)); code != exitUsage || !strings.Contains(errOut, "no such file") {
		t.Errorf("a missing topology: exit %d, %q", code, errOut)
	}
}

// Files that are not regular files, or too large, are refused before they are read.
func TestUnboundedInputsRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"allreduce", "--backend", "sim", "--topology", "/dev/zero"},
		{"compare", "/dev/zero", "/dev/zero"},
		{"plot", "/dev/urandom", "--out", filepath.Join(t.TempDir(), "x.svg")},
	} {
		out, errOut, code := gpubench(t, args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "not a regular file (it is a character device)") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// twoGPUTopology is two GPUs under one PCIe switch, links of 32 GB/s.
const twoGPUTopology = `{"format": "gpubench-topology/1", "name": "two", "nodes": [{"hostname": "h",
  "cpus": [{"id": "cpu0"}], "switches": [{"id": "sw", "kind": "pcie"}],
  "gpus": [{"id": "g0", "name": "G", "memory_bytes": 85899345920, "memory_bandwidth_gbs": 1000, "compute_capability": "9.0"},
           {"id": "g1", "name": "G", "memory_bytes": 85899345920, "memory_bandwidth_gbs": 1000, "compute_capability": "9.0"}],
  "links": [{"a": "g0", "b": "sw", "kind": "pcie", "gbs": 32}, {"a": "g1", "b": "sw", "kind": "pcie", "gbs": 32},
            {"a": "sw", "b": "cpu0", "kind": "pcie", "gbs": 32}]}]}`

// A write that fails ends the run at once, naming the file, with exit 1.
func TestFullDiskEndsTheRun(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--out", "/dev/full")
	if code != exitFailure || !strings.Contains(errOut, "--out /dev/full: write /dev/full: no space left on device") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if rows := strings.Count(out, "\n          "); rows > 1 || !strings.Contains(out, "Stopped early") {
		t.Errorf("the sweep went on after the first failed write (%d rows):\n%s", rows, out)
	}
}

// SIGHUP and SIGTERM end a run as Ctrl-C does: exit 130, the rows so far printed.
func TestSignalsEndARun(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "GPUBENCH_AS_CLI="+strings.Join([]string{"allreduce", "--backend", "sim", "-b", "1K", "-e", "1K", "-N", "0"}, "\x1f"))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errOut strings.Builder
		cmd.Stderr = &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		buf := make([]byte, 4096)
		for !strings.Contains(out.String(), "    1024 ") { // the first row: the run is under way
			n, err := stdout.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				t.Fatalf("%v: stdout ended before a row: %v\n%s", sig, err, out.String())
			}
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(stdout)
		out.Write(rest)
		err = cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitInterrupt || !strings.Contains(out.String(), "Stopped early") {
			t.Errorf("%v: %v, stderr %q, stdout ends %q", sig, err, errOut.String(), tail(out.String(), 300))
		}
	}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }

// The GPU whose output is wrong is named: in the footer, in JSON and in the exit message.
func TestCorruptingGPUIsNamed(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--sim-fault", "corrupt=2", "-b", "1K", "-e", "64K", "-f", "4")
	if code != exitCheck || !strings.Contains(errOut, "in the output of rank 2 (GPU 2 on dgx-h100) in 8 results") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "# Wrong data in        : rank 2 (GPU 2 on dgx-h100) in 8 results") {
		t.Errorf("no footer naming rank 2:\n%s", out)
	}
	out, _, _ = gpubench(t, "allreduce", "--backend", "sim", "--sim-fault", "corrupt=2", "-b", "1K", "-e", "64K", "-f", "4", "--output", "json")
	var doc struct {
		Wrong []struct{ Rank, Device, Results int } `json:"wrong_ranks"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Wrong) != 1 || doc.Wrong[0].Rank != 2 || doc.Wrong[0].Results != 8 {
		t.Errorf("wrong_ranks %+v (%v); want rank 2 in 8 results", doc.Wrong, err)
	}
}

// Names with escape sequences or newlines never reach the terminal raw: topology and result
// files holding them are refused, and a file name holding one is printed escaped.
func TestNoTerminalInjection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	evil := strings.Replace(twoGPUTopology, `"name": "two"`, `"name": "two\u001b[2J\n1024 1 float sum -1 1.0 1.0 1.0 0"`, 1)
	path := filepath.Join(dir, "evil.json")
	if err := os.WriteFile(path, []byte(evil), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--topology", path, "-b", "1K", "-e", "1K")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `name holds '\x1b', which is not plain text`) || strings.ContainsRune(errOut, 0x1b) {
		t.Errorf("topology name with an escape: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	good, _, _ := gpubench(t, "allreduce", "--backend", "sim", "-b", "1K", "-e", "1K", "--output", "json")
	bad := strings.Replace(good, `"topology": "dgx-h100"`, `"topology": "dgx\u001b[31m"`, 1)
	base, odd := filepath.Join(dir, "base.json"), filepath.Join(dir, "x\x1b[31m\n.json")
	os.WriteFile(base, []byte(good), 0o644)
	os.WriteFile(filepath.Join(dir, "bad.json"), []byte(bad), 0o644)
	os.WriteFile(odd, []byte(good), 0o644)
	if _, errOut, code := gpubench(t, "compare", base, filepath.Join(dir, "bad.json")); code != exitUsage || !strings.Contains(errOut, `holds the control character '\x1b'`) {
		t.Errorf("a result file with an escape: exit %d, %q", code, errOut)
	}
	out, errOut, code = gpubench(t, "compare", base, odd)
	if code != 0 || strings.ContainsAny(out+errOut, "\x1b") || !strings.Contains(out, `x\x1b[31m\n.json`) {
		t.Errorf("a file name with an escape: exit %d, printed raw or not at all:\n%q", code, out)
	}
}

// cobra's suggestions read as one line, without a tab.
func TestSuggestionsOnOneLine(t *testing.T) {
	t.Parallel()
	_, errOut, code := gpubench(t, "allreduc")
	if code != exitUsage || errOut != "gpubench: unknown command \"allreduc\" for \"gpubench\"; did you mean allreduce?\n" {
		t.Errorf("exit %d, %q", code, errOut)
	}
}

// A data cap the machine cannot hold is refused up front; one it can sets the garbage collector's
// limit so that the process stays within a few times the cap.
func TestDataCapBoundsMemory(t *testing.T) {
	t.Parallel()
	if err := boundMemory(1<<40, 16<<30); err == nil || !strings.Contains(err.Error(), "use at most 5461M") {
		t.Errorf("a 1 TiB cap on 16 GiB: %v", err)
	}
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	if err := boundMemory(1<<30, 16<<30); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 4<<30 {
		t.Errorf("memory limit %d; want 3 x the cap + 1 GiB", got)
	}
	_, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--sim-data-cap", "1000T", "-b", "1K", "-e", "1K")
	if code != exitUsage || !strings.Contains(errOut, "invalid --sim-data-cap 1000TiB") {
		t.Errorf("--sim-data-cap 1000T: exit %d, %q", code, errOut)
	}
}

// NCCL_* variables steer the simulated NCCL as they steer NCCL, and JSON rows say what it chose.
func TestSimulatorHonoursNCCLEnv(t *testing.T) {
	t.Parallel()
	algoAt1G := func(env ...string) (string, string) {
		out, errOut, code := gpubenchProcess(t, env, "allreduce", "--backend", "sim", "--topology", "dgx-h100", "-b", "1G", "-e", "1G", "-c", "0", "-n", "1", "--output", "json")
		if code != 0 {
			t.Fatalf("%v: exit %d, %s", env, code, errOut)
		}
		var doc struct {
			Results []struct {
				Algorithm, Protocol string
				Channels            int
			} `json:"results"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Results) != 1 || doc.Results[0].Channels < 1 {
			t.Fatalf("%v: %v\n%s", env, err, out)
		}
		return doc.Results[0].Algorithm, doc.Results[0].Protocol
	}
	if a, p := algoAt1G(); a != "NVLS" || p != "Simple" {
		t.Errorf("default: %s/%s; want NVLS/Simple on an H100 NVSwitch", a, p)
	}
	if a, _ := algoAt1G("NCCL_ALGO=ring"); a != "Ring" {
		t.Errorf("NCCL_ALGO=ring: %s", a)
	}
	if a, _ := algoAt1G("NCCL_NVLS_ENABLE=0"); a == "NVLS" {
		t.Errorf("NCCL_NVLS_ENABLE=0 still picked NVLS")
	}
	if _, p := algoAt1G("NCCL_ALGO=ring", "NCCL_PROTO=LL128"); p != "LL128" {
		t.Errorf("NCCL_PROTO=LL128: %s", p)
	}
	_, errOut, code := gpubenchProcess(t, []string{"NCCL_ALGO=rings"}, "allreduce", "--backend", "sim", "-b", "1K", "-e", "1K")
	if code != exitUsage || !strings.Contains(errOut, `NCCL_ALGO="rings": unknown "rings"`) {
		t.Errorf("NCCL_ALGO=rings: exit %d, %q", code, errOut)
	}
	// Variables that leave a collective nothing to run stop it before it starts, as NCCL's
	// first call would fail, rather than reach the cost model.
	out, errOut, code := gpubenchProcess(t, []string{"NCCL_ALGO=nvls"}, "broadcast", "--backend", "sim", "-b", "1K", "-e", "1K")
	if code != exitUsage || out != "" || errOut != "gpubench: NCCL_ALGO=nvls leaves no algorithm and protocol for broadcast here: enable one that serves it (broadcast runs Ring (LL, LL128, Simple))\n" {
		t.Errorf("NCCL_ALGO=nvls broadcast: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// rowTime is the out-of-place time of the first result row of a table.
func rowTime(t *testing.T, table string) float64 {
	t.Helper()
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 6 && !strings.HasPrefix(line, "#") {
			v, err := strconv.ParseFloat(f[5], 64)
			if err != nil {
				t.Fatalf("time column %q: %v", f[5], err)
			}
			return v
		}
	}
	t.Fatalf("no result row in\n%s", table)
	return 0
}

// Ctrl-C ends a p2p run too, though the simulator's copies take no wall time: exit 130, and what
// was measured before the signal printed.
func TestSignalEndsP2P(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "GPUBENCH_AS_CLI="+strings.Join([]string{"p2p", "--backend", "sim", "--devices", "0-1", "--samples", "1000000"}, "\x1f"))
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // under way: a million samples a cell take minutes
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitInterrupt || !strings.Contains(out.String(), "Data check:") ||
		!strings.Contains(errOut.String(), "gpubench: p2p: stopped early") {
		t.Errorf("%v, stderr %q, stdout ends %q", err, errOut.String(), tail(out.String(), 300))
	}
}
