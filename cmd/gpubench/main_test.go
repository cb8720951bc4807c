package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/golden"
)

// TestMain makes this test binary act as gpubench itself when GPUBENCH_AS_CLI holds its arguments
// (separated by \x1f), so that tests can run it in a fresh process: libraries load once per
// process, and the stand-in libraries read their settings at load.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("GPUBENCH_AS_CLI"); ok {
		e := &env{stdout: os.Stdout, stderr: os.Stderr, pid: 4242, version: "test", now: time.Now, procs: setProcs}
		if dir := os.Getenv("GPUBENCH_TEST_PROCS"); dir != "" { // tests of several processes see what each set
			e.procs = func(n int) {
				setProcs(n)
				os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), []byte(strconv.Itoa(n)), 0o644)
			}
		}
		if os.Getenv("GPUBENCH_TEST_REAL_PID") != "" { // tests of several processes tell them apart
			e.pid = os.Getpid()
		}
		ctx, stop := signalContext()
		code := run(ctx, e, strings.Split(args, "\x1f"))
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// gpubenchProcess runs gpubench in a new process with extra environment variables.
func gpubenchProcess(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(append(os.Environ(), "GPUBENCH_AS_CLI="+strings.Join(args, "\x1f")), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// gpubench runs the CLI in-process with a fixed pid, clock and version.
func gpubench(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut, pid: 4242, version: "test",
		now: func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) }}
	code = run(context.Background(), e, args)
	return out.String(), errOut.String(), code
}

// A simulated sweep of every collective, byte for byte.
func TestGoldenEveryCollective(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv", "gather", "scatter"} {
		t.Run(c, func(t *testing.T) {
			out, errOut, code := gpubench(t, c, "--backend", "sim", "--topology", "dgx-h100", "--sizes", "8B:4MB:x4")
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			golden.Check(t, c+".golden", out)
		})
	}
}

func TestGoldenOutputFormats(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "csv", "markdown"} {
		t.Run(format, func(t *testing.T) {
			out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--topology", "dgx-h100x2", "--sizes", "1K:256M:x16", "--output", format)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			golden.Check(t, "allreduce-dgx-h100x2."+format, out)
		})
	}
}

// JSON numbers are numbers and N/A is null.
func TestJSONShape(t *testing.T) {
	t.Parallel()
	out, _, code := gpubench(t, "alltoall", "--backend", "sim", "--sizes", "1K:4M:x16", "--output", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var doc struct {
		Config struct {
			Ranks int `json:"ranks"`
		} `json:"config"`
		Devices []struct {
			Rank int    `json:"rank"`
			Name string `json:"name"`
		} `json:"devices"`
		Results []struct {
			Size       int64 `json:"size_bytes"`
			Root       *int  `json:"root"`
			OutOfPlace struct {
				BusBW float64 `json:"busbw_gbs"`
				Wrong *int64  `json:"wrong"`
			} `json:"out_of_place"`
			InPlace struct {
				Wrong *int64 `json:"wrong"`
			} `json:"in_place"`
		} `json:"results"`
		BusPeak struct {
			GBs          float64 `json:"gbs"`
			BestFraction float64 `json:"best_fraction"`
		} `json:"bus_peak"`
		TimingOnly *int64 `json:"timing_only_from_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Config.Ranks != 8 || len(doc.Devices) != 8 || doc.Devices[7].Rank != 7 || len(doc.Results) != 4 {
		t.Fatalf("doc %+v; want 8 ranks, 8 devices and 4 results", doc)
	}
	first, last := doc.Results[0], doc.Results[3]
	if first.Root != nil || first.OutOfPlace.Wrong == nil || *first.OutOfPlace.Wrong != 0 || first.InPlace.Wrong != nil {
		t.Errorf("first result %+v; want root null, out-of-place checked, in-place (unchecked for alltoall) null", first)
	}
	if last.OutOfPlace.Wrong != nil || doc.TimingOnly == nil || *doc.TimingOnly != last.Size {
		t.Errorf("4 MiB result %+v, timing-only from %v; want it timing-only (past the data cap)", last, doc.TimingOnly)
	}
	if doc.BusPeak.GBs != 450 || doc.BusPeak.BestFraction <= 0 || last.OutOfPlace.BusBW <= 0 {
		t.Errorf("bus peak %+v; want 450 GB/s and a fraction", doc.BusPeak)
	}
}

// Bad input: one line on stderr naming the problem, exit 2, nothing on stdout.
func TestBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	malformed := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(malformed, []byte(`{"format": "gpubench-topology/1", "name": "x", "nodes": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	noGPU := filepath.Join(dir, "nogpu.json")
	if err := os.WriteFile(noGPU, []byte(`{"format": "gpubench-topology/1", "name": "x", "nodes": [{"hostname": "h", "cpus": [], "gpus": [], "links": []}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	longID := filepath.Join(dir, "longid.json")
	if err := os.WriteFile(longID, []byte(`{"format": "gpubench-topology/1", "name": "x", "nodes": [{"hostname": "h", "cpus": [], "gpus": [{"id": "`+strings.Repeat("g", 100000)+`"}], "links": []}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"allreduce", "--sizes", "8GB:8B"}, "larger than the largest"},
		{[]string{"allreduce", "--topology", longID}, "node h gpu " + strings.Repeat("g", 64) + "...[100001 bytes in all] name, memory_bytes and memory_bandwidth_gbs must be set\n"},
		{[]string{"diag", "--backend", "sim", "--sim-fault", "xid=4"}, "--sim-fault xid=4: diag reads no XID events (burnin does)"},
		{[]string{"serve", "--backend", "sim", "--metrics", ""}, `invalid --metrics "": give the address to serve on`},
		{[]string{"allreduce", "--sizes", "0:1K"}, "at least 1 byte"},
		{[]string{"allreduce", "--sizes", "1XB:2GB"}, "unknown unit"},
		{[]string{"allreduce", "--sizes", "8B:8GB:x1"}, "at least x2"},
		{[]string{"allreduce", "--sizes", "8B:64MB:x2:extra"}, `invalid --sizes "8B:64MB:x2:extra": too many fields; use MIN:MAX[:xFACTOR|:+STEP], e.g. 8B:8GB` + "\n"},
		{[]string{"allreduce", "--sizes", "8B:8GB:x0"}, "at least x2"},
		{[]string{"allreduce", "--sizes", "8B:8GB:+0"}, "at least 1 byte"},
		{[]string{"allreduce", "--sizes", "-8:8"}, "not a size"},
		{[]string{"allreduce", "--sizes", "1E:2E"}, "unknown unit"},
		{[]string{"allreduce", "--sizes", ""}, "empty size"},
		{[]string{"allreduce", "--sizes", "8B:8GB:+1B"}, "at most 10000"},
		{[]string{"allreduce", "-d", "float17"}, "unknown data type"},
		{[]string{"allreduce", "-o", "sum2"}, "unknown reduction op"},
		{[]string{"broadcast", "-r", "9"}, "invalid -r 9"},
		{[]string{"reduce", "-r", "-2"}, "invalid -r -2"},
		{[]string{"allreduce", "-g", "0"}, "invalid -g 0"},
		{[]string{"allreduce", "-g", "9"}, "only 8 GPUs"},
		{[]string{"allreduce", "--topology", "nosuch"}, "unknown topology"},
		{[]string{"allreduce", "--nodes", "0"}, "invalid --nodes 0: use 1 to 2048 nodes of 8 GPUs"},
		{[]string{"allreduce", "--nodes", "-1"}, "invalid --nodes -1: use 1 to 2048 nodes of 8 GPUs"},
		{[]string{"allreduce", "--gpus-per-node", "0"}, "invalid --gpus-per-node 0: use 1 to 8 GPUs a node"},
		{[]string{"allreduce", "--nodes", "2", "--gpus-per-node", "9"}, "invalid --gpus-per-node 9: use 1 to 8 GPUs a node"},
		{[]string{"allreduce", "--topology", malformed}, "not a gpubench topology file"},
		{[]string{"allreduce", "--topology", noGPU}, "has no GPUs"},
		{[]string{"allreduce", "--topology", filepath.Join(dir, "missing.json")}, "cannot read topology file"},
		{[]string{"allreduce", "-n", "0"}, "invalid -n 0"},
		{[]string{"allreduce", "-w", "-1"}, "invalid -w -1"},
		{[]string{"allreduce", "-c", "-1"}, "invalid -c -1"},
		{[]string{"allreduce", "-a", "4"}, "invalid -a 4"},
		{[]string{"allreduce", "-f", "0", "-b", "8"}, "invalid -f 0"},
		{[]string{"allreduce", "-b", "1Q"}, "invalid -b"},
		{[]string{"allreduce", "-b", "64M", "-e", "8M"}, "larger than the largest"},
		{[]string{"allreduce", "--sizes", "8:16", "-b", "8"}, "not both"},
		{[]string{"allreduce", "-T", "-1"}, "invalid -T -1"},
		{[]string{"allreduce", "-T", "9300000000"}, "invalid -T 9300000000: use 1 to 9223372036 seconds"},
		{[]string{"allreduce", "--output", "xml"}, "unknown --output"},
		{[]string{"allreduce", "--backend", "gpu"}, "unknown --backend"},
		{[]string{"allreduce", "-G", "-1"}, "invalid -G -1"},
		{[]string{"allreduce", "-z", "4"}, "invalid -z 4"},
		{[]string{"allreduce", "--sim-data-cap", "lots"}, "invalid --sim-data-cap"},
		{[]string{"allreduce", "--sim-jitter", "2"}, "invalid --sim-jitter"},
		{[]string{"allreduce", "--sim-fault", "melt=1"}, "unknown fault"},
		{[]string{"allreduce", "--sim-fault", "hang=99"}, "devices 0-7"},
		{[]string{"allreduce", "--sim-fault", "slow-link=gpu0,gpu1,0.5"}, "invalid --sim-fault slow-link=gpu0,gpu1,0.5: no link gpu0-gpu1 in topology dgx-h100"},
		{[]string{"allreduce", "--sim-fault", "slow-nic=dgx-h100/mlx5_0,0.5"}, "topology dgx-h100 is one NVLink domain, whose NICs carry nothing between its GPUs; give --nodes for more"},
		{[]string{"allreduce", "--iters", "x"}, `invalid -n "x": use a whole number`},
		{[]string{"allreduce", "--nodes", "abc"}, `invalid --nodes "abc": use a whole number`},
		{[]string{"allreduce", "--nodes", "99999999999999999999"}, `invalid --nodes "99999999999999999999": out of range: too large in size`},
		{[]string{"allreduce", "-t", "9"}, "invalid -t 9 -g 1: 9 GPUs, and only 8 were found"},
		{[]string{"allreduce", "--sim-jitter", "lots"}, `invalid --sim-jitter "lots": use a number`},
		{[]string{"allreduce", "--seed", "-1"}, `invalid --seed "-1": use a whole number, 0 or more`},
		{[]string{"allreduce", "--nosuchflag"}, "unknown flag"},
		{[]string{"allreduce", "extra"}, `allreduce takes no arguments, and was given "extra": give its options as flags (gpubench allreduce --help lists them)`},
		{[]string{"nosuchcommand"}, "unknown command"},
		{[]string{"completion", "foo"}, `unknown command "foo" for "gpubench completion"`},
		{[]string{"p2p", "--pairs", "0-1", "--sweep", "1K:100G", "--size", "1M"}, "invalid --sweep 1K:100G: buffer size larger than free device memory"},
		{[]string{"version", "extra"}, "version takes no arguments"},
		{[]string{"allgather", "-o", "out.json"}, "invalid -o"},
		{[]string{"allreduce", "--sim-fault", "hang=8"}, "invalid --sim-fault hang=8: topology dgx-h100 has devices 0-7"},
		{[]string{"help", "garbage"}, `no help topic "garbage": gpubench --help lists the commands`},
		{[]string{"explain", "gather", "--size", "1M"}, "explain follows NCCL's tuner, which has no gather"},
		{[]string{"allreduce", "--sim-fault", "xid=9"}, "invalid --sim-fault xid=9: topology dgx-h100 has devices 0-7"}, // as written, not xid=9:79
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			args := append([]string{"--backend", "sim"}, c.args...)
			out, errOut, code := gpubench(t, args...)
			if code != 2 || out != "" {
				t.Errorf("exit %d, stdout %q; want exit 2 and no output", code, out)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "gpubench: ") || !strings.Contains(errOut, c.want) {
				t.Errorf("stderr %q; want one line naming %q", errOut, c.want)
			}
		})
	}
}

// Wrong data exits 3 after printing the table, with #wrong > 0.
func TestCorruptResultExits3(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--sizes", "1K:4K", "--sim-fault", "corrupt=5")
	if code != 3 {
		t.Fatalf("exit %d; want 3 (stderr %q)", code, errOut)
	}
	if !strings.Contains(out, "# Out of bounds values : 6 FAILED") || !strings.Contains(errOut, "6 results had wrong data") {
		t.Errorf("stdout %s\nstderr %s\nwant 6 failed checks (3 sizes, 2 placements)", out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 13 && (f[8] == "0" || f[12] == "0") {
			t.Errorf("row %q has a placement with no wrong elements", line)
		}
	}
}

// A hang exits 5 once the timeout passes, naming what did not finish, and keeps the rows so far.
func TestHangExits5(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--sizes", "1K:64K", "-T", "1", "--sim-fault", "hang=6@50", "-w", "0")
	if code != 5 {
		t.Fatalf("exit %d; want 5 (stderr %q)", code, errOut)
	}
	// Once rank 6 stops, every collective it is part of stalls on every rank.
	if !strings.Contains(errOut, "gpubench: hang: allreduce at 2048 bytes (out-of-place): ranks 0,1,2,3,4,5,6,7 did not finish") {
		t.Errorf("stderr %q; want the collective, size and rank", errOut)
	}
	if !strings.Contains(out, "        1024           256") || !strings.Contains(out, "# Stopped early") {
		t.Errorf("stdout %s\nwant the first rows and a note that the run stopped early", out)
	}
}

// A copy that hangs names the device, as p2p's GPUs are devices, not ranks of a communicator.
func TestP2PHangNamesDevice(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"table", "markdown"} {
		out, errOut, code := gpubench(t, "p2p", "--backend", "sim", "--sim-fault", "hang=3", "-T", "1", "--size", "1M", "--output", format)
		if code != 5 || errOut != "gpubench: hang: device 3 did not finish: context deadline exceeded\n" {
			t.Errorf("%s: exit %d, stderr %q; want 5 and device 3 named", format, code, errOut)
		}
		if strings.Contains(out, "H2D") { // the run stopped before the host copies: no empty table
			t.Errorf("%s: a host copy table without rows:\n%s", format, out)
		}
	}
}

// -o is read on every collective, as nccl-tests' binaries share one parser; where it reduces
// nothing it is said to be ignored.
func TestOpOnEveryCollective(t *testing.T) {
	t.Parallel()
	_, errOut, code := gpubench(t, "broadcast", "--backend", "sim", "-b", "1K", "-e", "1K", "-o", "prod")
	if code != 0 || errOut != "gpubench: -o prod ignored: broadcast reduces nothing (-o is for allreduce, reducescatter, reduce and sendrecv)\n" {
		t.Errorf("broadcast -o prod: exit %d, stderr %q", code, errOut)
	}
	// sendrecv_perf runs and names each op, though it reduces nothing.
	out, errOut, code := gpubench(t, "sendrecv", "--backend", "sim", "-g", "4", "-b", "1K", "-e", "1K", "-o", "all")
	var ops []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[0] == "1024" {
			ops = append(ops, f[3])
		}
	}
	if code != 0 || strings.Contains(errOut, "ignored") || strings.Join(ops, " ") != "sum prod max min avg" {
		t.Errorf("sendrecv -o all: exit %d, ops %q, stderr %q", code, ops, errOut)
	}
}

func TestNotes(t *testing.T) {
	t.Parallel()
	out, _, _ := gpubench(t, "allreduce", "--backend", "sim", "-g", "1", "--sizes", "1M")
	if !strings.Contains(out, "# With 1 rank, busbw is 0 by definition (busbw = algbw x 2(n-1)/n): read algbw") {
		t.Errorf("one rank: no busbw note in\n%s", out)
	}
	out, _, _ = gpubench(t, "allreduce", "--backend", "sim", "--topology", "pcie-4090x8", "--sizes", "4G:8G", "-n", "1")
	// As nccl-tests: the header says the size asked for, a note the cut, and no row passes it.
	if !strings.Contains(out, " maxBytes 8589934592 ") || !strings.Contains(out, "#\n# Reducing maxBytes to 7511998464 due to memory limitation\n") || strings.Contains(out, "\n  8589934592 ") {
		t.Errorf("24 GB cards: no memory clamp in\n%s", out)
	}
	// --backend auto: where CUDA and NCCL load (a GPU machine) it runs on them without a word;
	// elsewhere it falls back to the simulator with one notice line.
	out, errOut, code := gpubench(t, "allreduce", "--sizes", "1K")
	switch {
	case code != 0:
		t.Errorf("--backend auto: exit %d, stderr %q", code, errOut)
	case strings.Contains(out, ", backend cuda"):
		if errOut != "" {
			t.Errorf("--backend auto on real GPUs: stderr %q; want nothing", errOut)
		}
	case !strings.Contains(out, ", backend sim") || !strings.Contains(errOut, "using the simulator") || strings.Count(errOut, "\n") != 1:
		t.Errorf("--backend auto without GPUs: stderr %q; want one notice line, and the simulator in\n%s", errOut, out)
	}
}

func TestNCCLTestsFlags(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "-b", "8", "-e", "1M", "-f", "2", "-g", "4", "-n", "5", "-w", "2", "-c", "2", "-d", "half", "-o", "max", "-a", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"nGpus 4 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 2 iters: 5 agg iters: 1 validation: 2", "half     max"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// -f 1 steps by -i, as nccl-tests does.
	out, _, _ = gpubench(t, "allreduce", "--backend", "sim", "-b", "8", "-e", "2M", "-n", "1")
	if !strings.Contains(out, "step: 1048576(bytes)") || !strings.Contains(out, "     1048584 ") || strings.Contains(out, "2097160") {
		t.Errorf("additive steps missing:\n%s", out)
	}
	// nccl-tests' long names are accepted too.
	if _, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--sizes", "1K", "--warmup_iters", "3", "--datatype", "int8"); code != 0 {
		t.Errorf("nccl-tests long names: exit %d, %s", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, _, code := gpubench(t, "version")
	if code != 0 || !strings.HasPrefix(out, "gpubench test (commit ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

// fullWriter fails every write, as stdout on a full disk does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// Results that cannot be written fail the run with exit 1 and one line, whatever command wrote
// them: not exit 0 (the table's writes went unchecked), not exit 2 (a write error is not bad
// input). An exit code that says more (3, a regression) stays.
func TestStdoutWriteErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := filepath.Join(dir, "a.json")
	js, _, code := gpubench(t, "allreduce", "--backend", "sim", "--sizes", "8B:1K", "--output", "json")
	if code != 0 || os.WriteFile(res, []byte(js), 0o644) != nil {
		t.Fatal(code)
	}
	for _, args := range [][]string{
		{"version"}, {"version", "--output", "json"}, {"compare", res, res}, {"compare", res, res, "--output", "markdown"},
		{"allreduce", "--backend", "sim", "--sizes", "8B:1K"}, {"explain", "allreduce", "--backend", "sim", "--size", "1M"},
	} {
		var errOut bytes.Buffer
		e := &env{stdout: fullWriter{}, stderr: &errOut, pid: 4242, version: "test", now: time.Now}
		code := run(context.Background(), e, args)
		if code != exitFailure || strings.Count(errOut.String(), "\n") != 1 || !strings.Contains(errOut.String(), "no space left on device") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and one line", args, code, errOut.String(), exitFailure)
		}
	}
}

// CSV has no header for nccl-tests' notes: a sweep cut to the GPUs' memory says so on stderr, so
// that its rows are not read as the sweep asked for. The table says it in its header alone.
func TestCSVCutSweepNotice(t *testing.T) {
	t.Parallel()
	args := []string{"allreduce", "--backend", "sim", "--topology", "pcie-l40sx4", "--sizes", "1G:1T", "-c", "0"}
	out, errOut, code := gpubench(t, append(args, "--output", "csv")...)
	if code != 0 || !strings.HasPrefix(errOut, "gpubench: Reducing maxBytes to ") || strings.Contains(out, "Reducing") {
		t.Errorf("csv: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code = gpubench(t, args...); code != 0 || errOut != "" {
		t.Errorf("table: exit %d, stderr %q", code, errOut)
	}
}

// gpubench help COMMAND prints the command's help as --help does, its -h flag included.
func TestHelpCommand(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "help", "version")
	if code != 0 || errOut != "" || !strings.Contains(out, "-h, --help") || !strings.HasPrefix(out, "Print gpubench's version") {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
}

// A command's help leaves out the shared flags it refuses, and only for that command.
func TestHelpHidesRefusedFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args       []string
		shown, not []string
	}{
		{[]string{"calibrate", "--help"}, []string{"--topology", "--nodes", "--output"}, []string{"--backend", "--sim-fault", "--seed", "--cuda-lib"}},
		{[]string{"help", "compare"}, []string{"--output"}, []string{"--topology", "--backend", "--sim-data-cap"}},
		{[]string{"topo", "--help"}, []string{"--topology", "--backend"}, []string{"--seed", "--sim-jitter", "--nccl-lib"}},
		{[]string{"explain", "--help"}, []string{"--topology"}, []string{"--sim-fault", "--cuda-lib"}},
		{[]string{"allreduce", "--help"}, []string{"--sim-fault", "--seed", "--backend"}, nil},
	} {
		out, _, code := gpubench(t, c.args...)
		_, out, _ = strings.Cut(out, "\nFlags:") // the flags, not the examples
		for _, f := range c.shown {
			if !strings.Contains(out, f+" ") {
				t.Errorf("%v: exit %d, %s not shown", c.args, code, f)
			}
		}
		for _, f := range c.not {
			if strings.Contains(out, f+" ") {
				t.Errorf("%v: %s shown, which the command refuses", c.args, f)
			}
		}
	}
}
