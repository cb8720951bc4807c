package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/golden"
)

// simRuns writes simulated all-reduce sweeps into a new folder, and returns it: base, the same
// machine with GPU 0's NVLink at half speed, and two runs with 2% jitter and different seeds;
// each as a JSON document (NAME.json) and as the JSON lines --out streams (NAME.jsonl). The runs
// are made once per test binary and copied into each test's own folder.
func simRuns(t *testing.T) string {
	t.Helper()
	simRunsOnce.Do(func() { simRunsFiles, simRunsErr = makeSimRuns() })
	if simRunsErr != nil {
		t.Fatal(simRunsErr)
	}
	dir := t.TempDir()
	for name, data := range simRunsFiles {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var (
	simRunsOnce  sync.Once
	simRunsFiles map[string][]byte
	simRunsErr   error
)

func makeSimRuns() (map[string][]byte, error) {
	dir, err := os.MkdirTemp("", "gpubench-simruns")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	runs := map[string][]string{
		"base.json": nil,
		"slow.json": {"--sim-fault", "slow-link=gpu0,nvswitch,0.5"},
		"j1.json":   {"--sim-jitter", "0.02", "--seed", "1"},
		"j2.json":   {"--sim-jitter", "0.02", "--seed", "2"},
	}
	files := map[string][]byte{}
	for name, extra := range runs {
		stream := filepath.Join(dir, name+"l")
		args := append([]string{"allreduce", "--backend", "sim", "--topology", "dgx-h100", "--sizes", "1M:1G:x4", "--output", "json",
			"--out", stream}, extra...)
		var out, errOut bytes.Buffer
		e := &env{stdout: &out, stderr: &errOut, pid: 4242, version: "test",
			now: func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) }}
		if code := run(context.Background(), e, args); code != 0 {
			return nil, fmt.Errorf("%v: exit %d, %s", args, code, errOut.String())
		}
		lines, err := os.ReadFile(stream)
		if err != nil {
			return nil, err
		}
		files[name], files[name+"l"] = out.Bytes(), lines
	}
	return files, nil
}

// inDir runs gpubench with file arguments taken relative to dir, and shows paths relative to it.
func inDir(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var full []string
	for _, a := range args {
		if strings.Contains(a, ".") && !strings.HasPrefix(a, "-") {
			a = filepath.Join(dir, a)
		}
		full = append(full, a)
	}
	out, errOut, code := gpubench(t, full...)
	return strings.ReplaceAll(out, dir+string(filepath.Separator), ""), strings.ReplaceAll(errOut, dir+string(filepath.Separator), ""), code
}

// A slowed NVLink is found at every size from 1 MiB, where the links and NVLS's pipeline outlast
// the host's launches (exit 3); two jittered runs of the same machine are not.
func TestCompareSimulatedRuns(t *testing.T) {
	t.Parallel()
	dir := simRuns(t)
	for _, format := range []string{"table", "markdown", "json"} {
		out, errOut, code := inDir(t, dir, "compare", "base.json", "slow.json", "--output", format)
		if code != exitCheck || errOut != "gpubench: compare: 12 regressions past 5% (marked REGRESSION)\n" {
			t.Fatalf("%s: exit %d, stderr %q; want 3 and the count of regressions", format, code, errOut)
		}
		golden.Check(t, "compare-slow-link."+format, out)
	}
	out, errOut, code := inDir(t, dir, "compare", "j1.json", "j2.json", "--output", "json")
	if code != 0 || errOut != "" {
		t.Fatalf("jittered runs: exit %d, stderr %q", code, errOut)
	}
	var doc struct {
		Regressions int `json:"regressions"`
		Comparisons []struct {
			Counts map[string]int `json:"counts"`
		} `json:"comparisons"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Regressions != 0 || doc.Comparisons[0].Counts["same"] != 12 {
		t.Errorf("jittered runs: %+v; want 12 rows the same", doc)
	}
	// Several NEW files are each set against OLD.
	out, _, code = inDir(t, dir, "compare", "--threshold", "5%", "j1.json", "j2.json", "slow.json")
	if code != exitCheck || strings.Count(out, "# OLD j1.json") != 2 || !strings.Contains(out, "# 0 regressions") || !strings.Contains(out, "# 12 regressions") {
		t.Errorf("two NEW files: exit %d\n%s", code, out)
	}
	// A NEW with nothing to set against OLD fails the gate rather than passing it.
	var base map[string]any
	data, err := os.ReadFile(filepath.Join(dir, "base.json"))
	if err == nil {
		err = json.Unmarshal(data, &base)
	}
	if err != nil {
		t.Fatal(err)
	}
	base["results"] = []any{}
	if data, err = json.Marshal(base); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := inDir(t, dir, "compare", "base.json", "empty.json"); code != exitCheck || errOut != "gpubench: compare: no row of empty.json matches one of base.json: nothing was compared\n" {
		t.Errorf("NEW without rows: exit %d, stderr %q; want 3", code, errOut)
	}
	if _, errOut, code := inDir(t, dir, "compare", "empty.json", "base.json"); code != exitCheck || errOut != "gpubench: compare: OLD empty.json holds no rows: nothing was compared\n" {
		t.Errorf("OLD without rows: exit %d, stderr %q; want 3", code, errOut)
	}
}

// The streamed form compares as the document does; a stream without its end is compared on its
// rows, with a notice and complete: false.
func TestCompareStreamed(t *testing.T) {
	t.Parallel()
	dir := simRuns(t)
	// A run that crashed before its end record.
	slow, _ := os.ReadFile(filepath.Join(dir, "slow.jsonl"))
	lines := strings.SplitAfter(strings.TrimSuffix(string(slow), "\n"), "\n")
	os.WriteFile(filepath.Join(dir, "slow-crashed.out"), []byte(strings.Join(lines[:len(lines)-1], "")), 0o644)
	want, _, _ := inDir(t, dir, "compare", "base.json", "slow.json")
	got, errOut, code := inDir(t, dir, "compare", "base.jsonl", "slow.json")
	if code != exitCheck || got != strings.Replace(want, "# OLD base.json", "# OLD base.jsonl", 1) {
		t.Errorf("streamed OLD: exit %d, stderr %q, output\n%s\nwant\n%s", code, errOut, got, want)
	}
	out, errOut, code := inDir(t, dir, "compare", "base.json", "slow-crashed.out", "--output", "json")
	if code != exitCheck || !strings.Contains(errOut, "gpubench: slow-crashed.out: the run did not finish (no end record): 6 rows") {
		t.Errorf("crashed NEW: exit %d, stderr %q", code, errOut)
	}
	var doc struct {
		Comparisons []struct {
			New struct {
				Complete bool   `json:"complete"`
				Form     string `json:"form"`
			} `json:"new"`
			Notes []string `json:"notes"`
		} `json:"comparisons"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if c := doc.Comparisons[0]; c.New.Complete || c.New.Form != "jsonl" || len(c.Notes) != 1 {
		t.Errorf("crashed NEW in JSON: %+v; want complete false, form jsonl, a note", c)
	}
}

// Per-iteration fixtures through the CLI: one regression, one noisy row, rows on one side only.
func TestComparePerIter(t *testing.T) {
	t.Parallel()
	out, _, code := inDir(t, "../../internal/results/testdata", "compare", "periter-old.json", "periter-new.json")
	if code != exitCheck {
		t.Fatalf("exit %d", code)
	}
	golden.Check(t, "compare-periter.table", out)
}

func TestCompareBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "text.txt"), []byte("#  size count type\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "p2p.json"), []byte(`{"command": "p2p", "backend": "sim", "devices": [], "matrices": {}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "ok.json"), []byte(`{"collective": "allreduce", "backend": "sim", "results": []}`), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"compare", "ok.json"}, "compare needs two files or more"},
		{[]string{"compare", "ok.json", "missing.json"}, "missing.json: no such file or directory"},
		{[]string{"compare", "ok.json", "text.txt"}, "text.txt: not gpubench JSON results"},
		{[]string{"compare", "ok.json", "p2p.json"}, "p2p.json: compare reads collective results"},
		{[]string{"compare", "--threshold", "five", "ok.json", "ok.json"}, `invalid --threshold "five"`},
		{[]string{"compare", "--threshold", "-1", "ok.json", "ok.json"}, `invalid --threshold "-1"`},
		{[]string{"compare", "--output", "csv", "ok.json", "ok.json"}, `unknown --output "csv" for compare`},
	}
	for _, c := range cases {
		out, errOut, code := inDir(t, dir, c.args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2, one line containing %q", c.args, code, out, errOut, c.want)
		}
	}
}

// ncclTestsLogs copies logs of nccl-tests output (internal/results/testdata/nccl-tests, where
// they are cited) into dir, under the names given.
func ncclTestsLogs(t *testing.T, dir string, names map[string]string) {
	t.Helper()
	for from, to := range names {
		data, err := os.ReadFile(filepath.Join("../../internal/results/testdata/nccl-tests", from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// nccl-tests' own output compares with gpubench's: a log published from 8 GB300s against the
// simulated DGX H100 (the six sizes both swept match row for row), the log against the -J JSON
// made from its figures (every matched row the same), and a log of two runs is refused.
func TestCompareNCCLTests(t *testing.T) {
	t.Parallel()
	dir := simRuns(t)
	ncclTestsLogs(t, dir, map[string]string{"oci-gb300-allreduce-2nodes.log": "gb300.log",
		"constructed-allreduce-v3.json": "gb300.json", "azureml-allreduce-two-runs.log": "two.log"})

	out, errOut, code := inDir(t, dir, "compare", "base.json", "gb300.log", "--output", "json")
	if code == exitUsage || strings.Contains(errOut, "gb300.log") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var doc struct {
		Comparisons []struct {
			New struct {
				File, Form, Collective, Backend string
				Topology                        *string
				Complete                        bool
				Ranks, Rows                     int
			} `json:"new"`
			Notes  []string       `json:"notes"`
			Counts map[string]int `json:"counts"`
			Rows   []struct {
				Size      int64  `json:"size_bytes"`
				Placement string `json:"placement"`
				Old, New  *struct {
					BusBW float64 `json:"busbw_gbs"`
					Time  float64 `json:"time_us"`
				}
			} `json:"rows"`
		} `json:"comparisons"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	c := doc.Comparisons[0]
	if n := c.New; n.Form != "nccl-tests" || n.Collective != "allreduce" || n.Backend != "nccl-tests" || n.Topology != nil || !n.Complete || n.Ranks != 8 || n.Rows != 16 {
		t.Errorf("NEW %+v; want the log's 16 all-reduce rows on 8 ranks, form nccl-tests", n)
	}
	if len(c.Notes) != 1 || c.Notes[0] != "OLD ran on backend sim, topology dgx-h100 and NEW on backend nccl-tests" {
		t.Errorf("notes %q; want the backends' difference alone", c.Notes)
	}
	matched := 0
	for _, r := range c.Rows {
		if r.Old != nil && r.New != nil {
			matched++
			if r.Size == 1048576 && r.Placement == "out_of_place" && (math.Abs(r.New.BusBW-61.09) > 0.01 || r.New.Time != 30.04) {
				t.Errorf("1 MiB out-of-place NEW %+v; want the log's 61.09 GB/s (from its time) in 30.04 us", *r.New)
			}
		}
	}
	if matched != 12 || c.Counts["only_new"] != 20 || c.Counts["only_old"] != 0 {
		t.Errorf("%d matched lines, counts %v; want 6 sizes x 2 placements matched, the log's other 10 sizes only in NEW", matched, c.Counts)
	}

	out, errOut, code = inDir(t, dir, "compare", "gb300.log", "gb300.json")
	if code != 0 || errOut != "" || !strings.Contains(out, "# OLD gb300.log: allreduce, backend nccl-tests, 8 ranks\n") ||
		!strings.Contains(out, "# NEW gb300.json: allreduce, backend nccl-tests, 8 ranks\n") ||
		!strings.Contains(out, "# 0 regressions, 0 noisy, 0 improved, 8 same, 0 n/a; 24 only in OLD, 0 only in NEW") {
		t.Errorf("log against its JSON: exit %d, stderr %q\n%s", code, errOut, out)
	}

	out, errOut, code = inDir(t, dir, "compare", "base.json", "two.log")
	if code != exitUsage || out != "" || errOut != "gpubench: two.log: line 28: the run from line 25 measures allreduce 33554432 B float sum again (first at line 10): a file holds one run; split the log\n" {
		t.Errorf("two runs: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// gpubench's own tables read back as its JSON of the same run does: with --expect's columns,
// with --per-iter's, and with -N's cycles, which compare sets against a run of one cycle; a
// table of -C's host times is refused, as nccl-tests' is, where its JSON compares.
func TestOwnTablesReadBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, args ...string) {
		t.Helper()
		out, errOut, code := gpubench(t, append([]string{"allreduce", "--backend", "sim", "--topology", "dgx-h100", "--sizes", "1M:4M"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d, %s", args, code, errOut)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("one.json", "--output", "json")
	write("expect.txt", "--expect")
	write("periter.txt", "--expect", "--per-iter")
	write("cycles.txt", "-N", "2")
	write("cycles.json", "-N", "2", "--output", "json")
	write("cpu.txt", "-C", "1")
	write("cpu.json", "-C", "1", "--output", "json")
	for _, c := range []struct {
		old, new string
		lines    int // compared placements, each judged the same
	}{
		{"one.json", "expect.txt", 6},
		{"one.json", "periter.txt", 6},
		{"cycles.txt", "cycles.json", 12},
		{"one.json", "cycles.txt", 12},
		{"cycles.json", "one.json", 12},
		{"one.json", "cpu.json", 6},
	} {
		out, errOut, code := inDir(t, dir, "compare", c.old, c.new)
		want := fmt.Sprintf("# 0 regressions, 0 noisy, 0 improved, %d same, 0 n/a; 0 only in OLD, 0 only in NEW (row placements)\n", c.lines)
		if code != 0 || !strings.HasSuffix(out, want) {
			t.Errorf("compare %s %s: exit %d, stderr %q, stdout ends %q; want %q", c.old, c.new, code, errOut, out[max(0, len(out)-200):], want)
		}
		if cyc := strings.Contains(c.old+c.new, "cycles"); cyc != strings.Contains(out, "  cycle  ") {
			t.Errorf("compare %s %s: a cycle column is %v, want %v:\n%s", c.old, c.new, !cyc, cyc, out)
		}
	}
	_, errOut, code := inDir(t, dir, "compare", "one.json", "cpu.txt")
	if want := "gpubench: cpu.txt: line 17: the table reports host CPU times (-C 1), which gpubench does not set against GPU times: rerun without -C (gpubench's --output json of such a run holds both)\n"; code != exitUsage || errOut != want {
		t.Errorf("a -C table: exit %d, stderr %q; want 2 and %q", code, errOut, want)
	}
}

// Commands that read result files refuse the flags that choose a machine to run on, which they
// would ignore; calibrate keeps the ones that describe the machine the runs were measured on.
func TestReadersRefuseMachineFlags(t *testing.T) {
	t.Parallel()
	dir := simRuns(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compare", "base.json", "slow.json", "--topology", "dgx-a100"}, "gpubench: --topology does not apply to compare, which reads result files: drop it\n"},
		{[]string{"compare", "base.json", "slow.json", "--sim-fault", "hang=1"}, "gpubench: --sim-fault does not apply to compare, which reads result files: drop it\n"},
		{[]string{"plot", "base.json", "--out", "x.svg", "--backend", "sim"}, "gpubench: --backend does not apply to plot, which reads result files: drop it\n"},
		{[]string{"calibrate", "base.json", "-o", "cal.json", "--backend", "cuda"}, "gpubench: --backend does not apply to calibrate, which reads result files: drop it\n"},
		{[]string{"calibrate", "base.json", "-o", "cal.json", "--seed", "3"}, "gpubench: --seed does not apply to calibrate, which reads result files: drop it\n"},
	} {
		out, errOut, code := inDir(t, dir, c.args...)
		if code != exitUsage || out != "" || errOut != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
	if _, errOut, code := inDir(t, dir, "calibrate", "base.json", "-o", "cal.json", "--topology", "dgx-h100", "--nodes", "1"); code != 0 {
		t.Errorf("calibrate --topology --nodes: exit %d, %s", code, errOut)
	}
}
