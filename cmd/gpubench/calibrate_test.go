package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sweepTimes runs a collective and returns each size's out-of-place time, writing the JSON to
// path when it is not empty.
func sweepTimes(t *testing.T, path string, args ...string) map[int64]float64 {
	t.Helper()
	out, errOut, code := gpubench(t, append([]string{"--backend", "sim", "--output", "json", "-c", "0"}, args...)...)
	if code != 0 {
		t.Fatalf("%v: exit %d, %s", args, code, errOut)
	}
	if path != "" {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var doc struct {
		Results []struct {
			Size       int64 `json:"size_bytes"`
			OutOfPlace struct {
				TimeUS float64 `json:"time_us"`
			} `json:"out_of_place"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	times := map[int64]float64{}
	for _, r := range doc.Results {
		times[r.Size] = r.OutOfPlace.TimeUS
	}
	return times
}

// A machine slower than the model (one GPU's NVLink at 70%), measured; calibrating from the
// measurement gives a topology whose simulation reproduces it within 3% above 1 MiB, and a larger
// machine of the same nodes is predicted, with a notice that it is past what was measured.
func TestCalibrateCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := filepath.Join(dir, "run.json")
	measured := sweepTimes(t, run, "allreduce", "--sizes", "8B:4GB", "--sim-fault", "slow-link=gpu0,nvswitch,0.7")
	cal := filepath.Join(dir, "cal.json")
	out, errOut, code := gpubench(t, "calibrate", "--topology", "dgx-h100", run, "-o", cal)
	if code != 0 || errOut != "" || !strings.Contains(out, "NVLS/Simple") || !strings.Contains(out, "# wrote "+cal) ||
		!strings.Contains(out, "# not constrained: local_copy_efficiency") {
		t.Fatalf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	again := sweepTimes(t, "", "allreduce", "--sizes", "8B:4GB", "--topology", cal)
	for size, want := range measured {
		if got := again[size]; size > 1<<20 && math.Abs(got/want-1) > 0.03 {
			t.Errorf("%d B: calibrated %.2f µs, measured %.2f", size, got, want)
		}
	}
	_, errOut, code = gpubench(t, "--backend", "sim", "--topology", cal, "--nodes", "2", "allreduce", "-b", "1M", "-e", "1M")
	if code != 0 || !strings.Contains(errOut, "gpubench: this run goes past what the topology was calibrated on: 16 ranks (measured up to 8); those figures are extrapolated") {
		t.Errorf("16 ranks on a calibration of 8: exit %d, %q", code, errOut)
	}
	// A sweep asked to go past the measured 4 GiB whose sizes stop within it is not past it.
	_, errOut, code = gpubench(t, "--backend", "sim", "--topology", cal, "allreduce", "--sizes", "1M:12G:x16", "-c", "0")
	if code != 0 || strings.Contains(errOut, "goes past") {
		t.Errorf("1M:12G:x16 (1, 16, 256 MiB, 4 GiB) on a calibration of 8 B to 4 GiB: exit %d, %q", code, errOut)
	}
	_, errOut, _ = gpubench(t, "--backend", "sim", "--topology", cal, "allreduce", "--sizes", "2G:8G", "-c", "0")
	if !strings.Contains(errOut, "goes past what the topology was calibrated on: sizes 2GiB to 8GiB (measured 8B to 4GiB)") {
		t.Errorf("2G:8G on a calibration of 8 B to 4 GiB: %q", errOut)
	}
	out, _, code = gpubench(t, "calibrate", "--topology", "dgx-h100", run, "-o", filepath.Join(dir, "cal2.json"), "--output", "json")
	var doc struct {
		Calibration struct {
			From  []string
			Error []struct {
				Band  string
				After float64 `json:"after_percent"`
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Calibration.From) != 1 || len(doc.Calibration.Error) != 5 || doc.Calibration.Error[4].After > 3 {
		t.Errorf("json: exit %d, %v\n%s", code, err, out)
	}
}

// Bad input is one line, exit 2, and nothing written.
func TestGPUModel(t *testing.T) {
	t.Parallel()
	for a, b := range map[string]string{"A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB", " nvidia H100 80GB HBM3": "NVIDIA H100 80GB HBM3"} {
		if !strings.EqualFold(gpuModel(a), gpuModel(b)) {
			t.Errorf("%q and %q are one GPU", a, b)
		}
	}
	if strings.EqualFold(gpuModel("A100-SXM4-40GB"), gpuModel("NVIDIA A100-SXM4-80GB")) {
		t.Error("a 40 GB A100 taken for an 80 GB one")
	}
}

func TestCalibrateRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a100 := filepath.Join(dir, "a100.json")
	sweepTimes(t, a100, "allreduce", "--topology", "dgx-a100", "-b", "8", "-e", "1M", "-f", "64")
	notResults := filepath.Join(dir, "notes.txt")
	os.WriteFile(notResults, []byte("hello\n"), 0o644)
	calibrated := filepath.Join(dir, "cal.json")
	if _, errOut, code := gpubench(t, "calibrate", "--topology", "dgx-a100", a100, "-o", calibrated); code != 0 {
		t.Fatalf("calibrating an A100 run on dgx-a100: exit %d, %s", code, errOut)
	}
	out := filepath.Join(dir, "out.json")
	empty := filepath.Join(dir, "empty.json")
	data, err := os.ReadFile(a100)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["results"] = []any{}
	if data, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, data, 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(a100)
	if err != nil {
		t.Fatal(err)
	}
	var bare []string // the A100 run's table without its device list
	plain, _, _ := gpubench(t, "--backend", "sim", "--topology", "dgx-a100", "allreduce", "-b", "1M", "-e", "1M")
	for _, l := range strings.SplitAfter(plain, "\n") {
		if !strings.HasPrefix(l, "#  Rank") {
			bare = append(bare, l)
		}
	}
	noRanks := filepath.Join(dir, "noranks.log")
	if err := os.WriteFile(noRanks, []byte(strings.Join(bare, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	var last []string // the A100 run's table listing its last rank alone, as a cut device list does
	for _, l := range strings.SplitAfter(plain, "\n") {
		if !strings.HasPrefix(l, "#  Rank") || strings.HasPrefix(l, "#  Rank  7") {
			last = append(last, l)
		}
	}
	var dealt []string // the A100 run's table with its ranks dealt to hosts a and b in turn
	for _, l := range strings.SplitAfter(plain, "\n") {
		if strings.HasPrefix(l, "#  Rank") {
			var rank int
			fmt.Sscanf(l, "#  Rank %d", &rank)
			l = strings.Replace(l, " on   dgx-a100 ", " on "+string(rune('a'+rank%2))+" ", 1)
		}
		dealt = append(dealt, l)
	}
	roundRobin := filepath.Join(dir, "dealt.log")
	if err := os.WriteFile(roundRobin, []byte(strings.Join(dealt, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	lastRank := filepath.Join(dir, "lastrank.log")
	if err := os.WriteFile(lastRank, []byte(strings.Join(last, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	graph, blocking := filepath.Join(dir, "graph.json"), filepath.Join(dir, "blocking.log")
	sweepTimes(t, graph, "allreduce", "--topology", "dgx-a100", "-b", "1M", "-e", "1M", "-G", "2")
	table, _, _ := gpubench(t, "--backend", "sim", "--topology", "dgx-a100", "allreduce", "-b", "1M", "-e", "1M", "-z", "1")
	if err := os.WriteFile(blocking, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--topology", "dgx-h100", a100}, "gpubench: calibrate needs the file to write: -o CALIBRATED.json\n"},
		{[]string{a100, "-o", out}, "gpubench: calibrate needs the machine the runs were measured on: --topology PRESET|FILE (gpubench topo --output json on it writes its file)\n"},
		{[]string{"--topology", "dgx-h100", "-o", out}, "gpubench: calibrate needs the runs to fit: gpubench calibrate RESULT... --topology PRESET|FILE -o CALIBRATED.json\n"},
		{[]string{"--topology", "dgx-h100", a100, "-o", out}, "gpubench: " + a100 + " was measured on NVIDIA A100-SXM4-80GB (rank 0); topology dgx-h100 has NVIDIA H100 80GB HBM3 there: give the topology of the machine it ran on (gpubench topo --output json on it)\n"},
		{[]string{"--topology", calibrated, a100, "-o", out}, "gpubench: topology " + calibrated + " is already calibrated: give the machine's own topology (a preset, or gpubench topo --output json), not a calibrated one\n"},
		{[]string{"--topology", "dgx-a100", notResults, "-o", out}, "gpubench: " + notResults + ": not gpubench JSON results"},
		{[]string{"--topology", "dgx-a100", a100, "-o", filepath.Join(dir, "no", "such", "dir.json")}, "gpubench: cannot write -o " + filepath.Join(dir, "no", "such", "dir.json")},
		{[]string{"--topology", "dgx-a100", a100, "-o", out, "--output", "csv"}, "gpubench: unknown --output \"csv\" for calibrate: use table or json\n"},
		{[]string{"--topology", "dgx-a100", a100, "-o", a100}, "gpubench: cannot write -o " + a100 + ": it is a file this command reads; name another\n"},
		{[]string{"--topology", "dgx-a100", a100, "-o", dir}, "gpubench: cannot write -o " + dir + ": it is a folder; name a file in it\n"},
		{[]string{"--topology", "dgx-a100", empty, "-o", out}, "gpubench: " + empty + " holds no measured size: give a run that measured some\n"},
		{[]string{"--topology", "dgx-a100", graph, "-o", out}, "gpubench: " + graph + " timed CUDA graph launches (-G 2), whose host cost calibration does not model: give a run without -G\n"},
		{[]string{"--topology", "dgx-a100", blocking, "-o", out}, "gpubench: " + blocking + " waited after each call (-z 1), which calibration does not model: give a run without -z\n"},
		{[]string{"--topology", "dgx-a100", a100, filepath.Join(dir, ".", "a100.json"), "-o", out}, "gpubench: " + filepath.Join(dir, ".", "a100.json") + " is given twice: give each run once\n"},
		{[]string{"--topology", "dgx-a100", noRanks, "-o", out}, "gpubench: " + noRanks + ` does not list the ranks it ran on (the lines under "# Using devices"): keep those lines in the log` + "\n"},
		{[]string{"--topology", "dgx-h100", lastRank, "-o", out}, "gpubench: " + lastRank + " was measured on NVIDIA A100-SXM4-80GB (rank 7); topology dgx-h100 has NVIDIA H100 80GB HBM3 there"},
		// Ranks dealt to two hosts in turn: no --nodes layout gives that.
		{[]string{"--topology", "dgx-a100", "--nodes", "2", "--gpus-per-node", "4", roundRobin, "-o", out}, "gpubench: " + roundRobin + " ran its ranks on 2 hosts (a, b); topology dgx-a100 x2, 4 GPUs a node puts them on its nodes otherwise: its ranks went to the hosts out of rank order"},
		// One host's 8 GPUs are not two nodes' 4: the fit would take NVLink for the network.
		{[]string{"--topology", "dgx-a100", "--nodes", "2", "--gpus-per-node", "4", a100, "-o", out}, "gpubench: " + a100 + " ran its ranks on 1 host (dgx-a100); topology dgx-a100 x2, 4 GPUs a node puts them on its nodes otherwise: give --nodes 1 --gpus-per-node 8, as it ran\n"},
	} {
		stdout, errOut, code := gpubench(t, append([]string{"calibrate"}, tc.args...)...)
		if code != exitUsage || stdout != "" || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, stdout, errOut, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v: wrote %s", tc.args, out)
		}
	}
	if after, err := os.ReadFile(a100); err != nil || string(after) != string(before) {
		t.Errorf("-o naming the run read overwrote it")
	}
}

// A run calibrates alike from its JSON, from its table as nccl-tests prints it (whose header line
// says its timed iterations), and when its GPUs were launched from two threads (-t 2 -g 4): each
// is the uncalibrated model's own run, so the fit gives back the model's launch cost, or, from
// two threads of four GPUs, whose launches the model puts under twice the device's time, does
// not fit it (0: the model's is kept).
func TestCalibrateTimedAsRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	launch := func(args ...string) string {
		t.Helper()
		out, errOut, code := gpubench(t, append([]string{"calibrate", "--topology", "dgx-h100", "-o", filepath.Join(dir, "cal.json"), "--output", "json"}, args...)...)
		var doc struct {
			Calibration struct {
				LaunchUS float64 `json:"launch_us"`
			}
		}
		if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
			t.Fatalf("%v: exit %d, %v, %s", args, code, err, errOut)
		}
		os.Remove(filepath.Join(dir, "cal.json"))
		return fmt.Sprint(doc.Calibration.LaunchUS)
	}
	js, log, threads := filepath.Join(dir, "run.json"), filepath.Join(dir, "run.log"), filepath.Join(dir, "threads.json")
	sweepTimes(t, js, "allreduce", "--sizes", "8B:64MB")
	table, _, _ := gpubench(t, "--backend", "sim", "-c", "0", "allreduce", "--sizes", "8B:64MB")
	if err := os.WriteFile(log, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	sweepTimes(t, threads, "allreduce", "--sizes", "8B:64MB", "-t", "2", "-g", "4")
	for f, want := range map[string]string{js: "4.9", log: "4.9", threads: "0"} {
		if got := launch(f); got != want {
			t.Errorf("%s: launch %s µs; want %s", filepath.Base(f), got, want)
		}
	}
}

// A calibration from copies alone fits no collective figure, so a collective run on it is not
// past anything measured, and says nothing of it.
func TestCalibrateCopiesOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p2p, cal := filepath.Join(dir, "p2p.json"), filepath.Join(dir, "cal.json")
	out, _, code := gpubench(t, "--backend", "sim", "p2p", "--output", "json")
	if code != 0 || os.WriteFile(p2p, []byte(out), 0o644) != nil {
		t.Fatalf("p2p: exit %d", code)
	}
	if out, errOut, code := gpubench(t, "calibrate", "--topology", "dgx-h100", p2p, "-o", cal); code != 0 || !strings.Contains(out, "# measured: no collective (copies only)") {
		t.Fatalf("exit %d, %s\n%s", code, errOut, out)
	}
	out, errOut, code := gpubench(t, "--backend", "sim", "--topology", cal, "allreduce", "-b", "1M", "-e", "1M")
	if code != 0 || errOut != "" {
		t.Errorf("exit %d, stderr %q; want nothing said", code, errOut)
	}
	// A run on it names it apart from the preset.
	if !strings.Contains(out, "topology dgx-h100-calibrated\n") {
		t.Errorf("header of a run on the calibrated topology:\n%s", out)
	}
}

// What the reader notices of a file (a log cut before its footer) calibrate says too, as
// compare and plot do: the fit is made from the rows there are.
func TestCalibrateSaysWhatTheReaderNoticed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	table, _, _ := gpubench(t, "--backend", "sim", "--topology", "dgx-a100", "allreduce", "-b", "1M", "-e", "4M")
	cut, _, _ := strings.Cut(table, "# Out of bounds values")
	log := filepath.Join(dir, "cut.log")
	if err := os.WriteFile(log, []byte(cut), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := gpubench(t, "calibrate", "--topology", "dgx-a100", log, "-o", filepath.Join(dir, "cal.json"))
	if want := "gpubench: " + log + ": the run at line 1 has no footer"; code != 0 || !strings.HasPrefix(errOut, want) {
		t.Errorf("exit %d, stderr %q; want 0 and %q...", code, errOut, want)
	}
}

// A band of sizes the fit leaves further off than the model was is said on stderr: here the
// 16 GiB row of a run took 1.5x what the rest of the curve says, and the bandwidth fitted to all
// the rows moves the ones below it off the curve they were on.
func TestCalibrateSaysWhereTheFitIsWorse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := filepath.Join(dir, "run.json")
	sweepTimes(t, run, "allreduce", "--topology", "dgx-a100", "-b", "64M", "-e", "16G", "-f", "4")
	data, err := os.ReadFile(run)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	rows := doc["results"].([]any)
	last := rows[len(rows)-1].(map[string]any)["out_of_place"].(map[string]any)
	last["time_us"] = last["time_us"].(float64) * 1.5
	if data, err = json.Marshal(doc); err != nil || os.WriteFile(run, data, 0o644) != nil {
		t.Fatal(err)
	}
	_, errOut, code := gpubench(t, "calibrate", "--topology", "dgx-a100", run, "-o", filepath.Join(dir, "cal.json"))
	if want := "gpubench: the fit leaves sizes 64 MiB - 1 GiB further off than the model was ("; code != 0 || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, stderr %q; want 0 and %q...", code, errOut, want)
	}
}
