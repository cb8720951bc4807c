package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type expectDoc struct {
	Results []struct {
		Size       int64 `json:"size_bytes"`
		OutOfPlace struct {
			BusBW    float64 `json:"busbw_gbs"`
			Expected *struct {
				TimeUS float64 `json:"time_us"`
				BusBW  float64 `json:"busbw_gbs"`
				Ratio  float64 `json:"ratio"`
			} `json:"expected"`
		} `json:"out_of_place"`
	} `json:"results"`
	Expect *struct {
		Source string  `json:"source"`
		Floor  float64 `json:"floor"`
		Below  []struct {
			Size      int64   `json:"size_bytes"`
			Placement string  `json:"placement"`
			Ratio     float64 `json:"ratio"`
		} `json:"below"`
	} `json:"expect"`
}

func expectRun(t *testing.T, args ...string) expectDoc {
	t.Helper()
	out, errOut, code := gpubench(t, append([]string{"allreduce", "--backend", "sim", "-b", "8", "-e", "1G", "-f", "32", "-n", "2", "-c", "0", "--output", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("%v: exit %d, %s", args, code, errOut)
	}
	var doc expectDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return doc
}

// A healthy simulated machine is at its expectation; one with a link at half speed falls below
// it where the link sets the pace (large sizes), and not where the host's launches do (small).
func TestExpectFlagsWhatFallsBelow(t *testing.T) {
	t.Parallel()
	doc := expectRun(t, "--expect")
	if doc.Expect == nil || !strings.Contains(doc.Expect.Source, "dgx-h100") || doc.Expect.Floor != 0.75 || len(doc.Expect.Below) != 0 {
		t.Fatalf("healthy: %+v", doc.Expect)
	}
	for _, r := range doc.Results {
		e := r.OutOfPlace.Expected
		if e == nil || e.Ratio != 1 || e.BusBW != r.OutOfPlace.BusBW {
			t.Errorf("healthy %d B: %+v against busbw %v; want the same figures, ratio 1", r.Size, e, r.OutOfPlace.BusBW)
		}
	}

	slow := expectRun(t, "--expect", "--sim-fault", "slow-link=gpu0,nvswitch,0.5")
	below := map[int64]float64{}
	for _, b := range slow.Expect.Below {
		if b.Placement == "out_of_place" {
			below[b.Size] = b.Ratio
		}
	}
	if r, ok := below[256<<20]; !ok || r > 0.6 {
		t.Errorf("256 MiB over a half-speed link: below %v; want it named, under 0.6 of expected", below)
	}
	if _, ok := below[8]; ok {
		t.Errorf("8 B is set by the host's launches, not the link, yet named below: %v", below)
	}
	for _, r := range slow.Results {
		if e := r.OutOfPlace.Expected; e == nil || e.Ratio > 1+1e-9 || e.Ratio <= 0 {
			t.Errorf("slow %d B: %+v; want a ratio in (0, 1]", r.Size, e)
		}
	}
}

// On the simulator expectations are asked for; every output form carries them, and the table's
// footer names what fell below.
func TestExpectInEveryForm(t *testing.T) {
	t.Parallel()
	if doc := expectRun(t); doc.Expect != nil || doc.Results[0].OutOfPlace.Expected != nil {
		t.Errorf("the simulator without --expect: %+v", doc.Expect)
	}
	base := []string{"allreduce", "--backend", "sim", "-b", "1G", "-e", "1G", "-n", "1", "-c", "0", "--expect", "--sim-fault", "slow-link=gpu0,nvswitch,0.5"}
	for format, want := range map[string][]string{
		"table":    {"vs exp", "# Expected             : from the simulator on topology dgx-h100 without --sim-fault or --sim-jitter; 2 of 2 placements under 75% of it (--expect-floor 0.75): 1073741824 B out-of-place 50%"},
		"csv":      {"oop_expected_busbw_gbs,oop_vs_expected"},
		"markdown": {"| expected busbw (GB/s) | vs expected (%) |", " | 50 | 50 |"},
	} {
		out, errOut, code := gpubench(t, append(base, "--output", format)...)
		for _, w := range want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("%s: exit %d, %s; want %q in\n%s", format, code, errOut, w, out)
			}
		}
	}
}

func TestExpectBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--expect-floor", "0"}, "gpubench: invalid --expect-floor 0: give a fraction of the expected figure above 0 and at most 10 (0.75 names what measured under 75% of it)\n"},
		{[]string{"--expect-floor", "NaN"}, "gpubench: invalid --expect-floor NaN: give a fraction of the expected figure above 0 and at most 10 (0.75 names what measured under 75% of it)\n"},
		{[]string{"--expect-floor", "75%"}, "gpubench: invalid --expect-floor \"75%\": use a number; for 75%, give 0.75\n"},
		{[]string{"--expect-floor", "-75%"}, "gpubench: invalid --expect-floor \"-75%\": use a number\n"},
		{[]string{"--expect=false", "--expect-floor", "0.5"}, "gpubench: --expect-floor needs --expect: drop --expect=false, or drop --expect-floor\n"},
		{[]string{"--expect-floor", "11"}, "gpubench: invalid --expect-floor 11: give a fraction of the expected figure above 0 and at most 10 (0.75 names what measured under 75% of it)\n"},
		{[]string{"--expect-floor", "0.5"}, "gpubench: --expect-floor needs --expect (off on the simulator unless asked): add --expect, or drop --expect-floor\n"},
	} {
		out, errOut, code := gpubench(t, append([]string{"allreduce", "--backend", "sim", "-b", "8", "-e", "8"}, tc.args...)...)
		if code != exitUsage || out != "" || errOut != tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

// p2p's figures are set beside the same copies on the simulated machine: a half-speed NVLink
// names the pairs through it, and a healthy machine none.
func TestExpectP2P(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (below []struct {
		Measure string `json:"measure"`
		Row     int    `json:"row"`
		Column  *int   `json:"column"`
	}) {
		out, errOut, code := gpubench(t, append([]string{"p2p", "--backend", "sim", "--devices", "0-3", "--size", "16MiB", "--samples", "1", "--repeat", "1", "--expect", "--output", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d, %s", args, code, errOut)
		}
		var doc struct {
			Expect *struct {
				Matrices map[string][][]*float64 `json:"matrices"`
				Below    json.RawMessage         `json:"below"`
			} `json:"expect"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.Expect == nil || len(doc.Expect.Matrices["uni_enabled"]) != 4 {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if err := json.Unmarshal(doc.Expect.Below, &below); err != nil {
			t.Fatal(err)
		}
		return below
	}
	if b := run(); len(b) != 0 {
		t.Errorf("healthy: %+v below", b)
	}
	slow := run("--sim-fault", "slow-link=gpu0,nvswitch,0.5")
	named := map[string]bool{}
	for _, b := range slow {
		if b.Column != nil {
			named[fmt.Sprintf("%s %d->%d", b.Measure, b.Row, *b.Column)] = true
		}
		if b.Column != nil && b.Row != 0 && *b.Column != 0 {
			t.Errorf("%s %d->%d named; only pairs with GPU 0 cross its link", b.Measure, b.Row, *b.Column)
		}
	}
	if !named["uni_enabled 0->1"] || !named["uni_enabled 2->0"] {
		t.Errorf("below: %v; want the pairs through GPU 0's link", named)
	}
}

// NCCL_* variables steer NCCL, not the CUDA runtime's copies: NCCL_P2P_DISABLE=1 leaves gpubench
// p2p's P2P copies direct, as on a real machine.
func TestP2PIgnoresNCCLVariables(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubenchProcess(t, []string{"NCCL_P2P_DISABLE=1"}, "p2p", "--backend", "sim", "--devices", "0,1", "--size", "64MiB", "--samples", "1", "--output", "json")
	var doc struct {
		Matrices map[string]struct {
			Values [][]*float64 `json:"values"`
		} `json:"matrices"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
		t.Fatalf("exit %d, %v, %s", code, err, errOut)
	}
	if v := doc.Matrices["uni_enabled"].Values[0][1]; v == nil || *v < 300 {
		t.Errorf("0->1 P2P copies with NCCL_P2P_DISABLE=1: %v GB/s; want NVLink's (about 369)", v)
	}
}

// A run refused for its --expect flags leaves no --out file behind: the stream is opened only
// once nothing but the run itself can fail.
func TestRefusedRunWritesNoOut(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "r.jsonl")
	stdout, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--sizes", "1M", "--out", out, "--expect-floor", "0.5")
	if code != exitUsage || stdout != "" || !strings.Contains(errOut, "--expect-floor needs --expect") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the refusal, exit 2", code, stdout, errOut)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused run left %s", out)
	}
}

// A repeated sweep's placements under the floor say their cycle, in the footer and in JSON.
func TestExpectBelowNamesTheCycle(t *testing.T) {
	t.Parallel()
	args := []string{"allreduce", "--backend", "sim", "--sizes", "2M", "-N", "2", "--expect", "--sim-fault", "slow-link=gpu0,nvswitch,0.5"}
	out, errOut, _ := gpubench(t, args...)
	if !strings.Contains(out, "2097152 B out-of-place 69% (cycle 1), 2097152 B in-place 69% (cycle 1), 2097152 B out-of-place 69% (cycle 2)") {
		t.Errorf("footer without the cycles (stderr %q):\n%s", errOut, out)
	}
	out, _, _ = gpubench(t, append(args, "--output", "json")...)
	var doc struct {
		Expect struct {
			Below []struct{ Cycle int }
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Expect.Below) != 4 || doc.Expect.Below[0].Cycle != 1 || doc.Expect.Below[3].Cycle != 2 {
		t.Errorf("expect.below %+v, %v; want 4 entries, cycles 1, 1, 2, 2", doc.Expect.Below, err)
	}
}
