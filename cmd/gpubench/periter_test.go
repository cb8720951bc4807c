package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/golden"
	"github.com/gpubench/gpubench/internal/results"
)

// --per-iter adds its columns to every output form, and only with the flag.
func TestGoldenPerIter(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"table", "csv", "markdown"} {
		t.Run(format, func(t *testing.T) {
			out, errOut, code := gpubench(t, "allreduce", "--backend", "sim", "--topology", "dgx-a100", "--sizes", "1K:64M:x64",
				"--per-iter", "-n", "10", "--sim-jitter", "0.1", "--seed", "3", "--output", format)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			golden.Check(t, "allreduce-per-iter."+format, out)
		})
	}
}

func TestPerIterJSON(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "reducescatter", "--backend", "sim", "--sizes", "1M:16M:x16", "--per-iter", "-n", "25", "--output", "json")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var doc struct {
		Results []struct {
			OutOfPlace struct {
				TimeUS  float64 `json:"time_us"`
				PerIter *struct {
					N                          int
					P50, P95, P99, Max, MeanUS float64
					Times                      []float64 `json:"times_us"`
				} `json:"per_iter"`
			} `json:"out_of_place"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Results {
		p := r.OutOfPlace.PerIter
		if p == nil || p.N != 25 || len(p.Times) != 25 {
			t.Fatalf("per_iter %+v", p)
		}
	}
	// Without the flag the JSON has no per_iter at all.
	out, _, _ = gpubench(t, "reducescatter", "--backend", "sim", "--sizes", "1M", "--output", "json")
	if strings.Contains(out, "per_iter") {
		t.Error("per_iter without --per-iter")
	}
}

// --out streams JSON lines as each size completes; compare and plot read them as they read the
// document, and a stream cut short is still read.
func TestOutStreamsJSONLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "run.jsonl")
	doc, errOut, code := gpubench(t, "allgather", "--backend", "sim", "--sizes", "1K:1M:x4", "--per-iter", "--output", "json", "--out", file)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2+6 || !strings.Contains(lines[0], `"record":"start"`) || !strings.Contains(lines[len(lines)-1], `"record":"end"`) {
		t.Fatalf("%d lines:\n%s", len(lines), data)
	}
	fromLines, err := results.Read(file, data)
	if err != nil {
		t.Fatal(err)
	}
	fromDoc, err := results.Read("doc.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromLines.Coll)
	b, _ := json.Marshal(fromDoc.Coll)
	if string(a) != string(b) || !fromLines.Complete {
		t.Errorf("the stream and the document differ:\n%s\n%s", a, b)
	}
	// A run killed after three rows leaves three rows and no end record.
	cut := strings.Join(lines[:4], "\n") + "\n"
	partial, err := results.Read(file, []byte(cut))
	if err != nil || partial.Complete || len(partial.Coll.Results) != 3 {
		t.Errorf("cut stream: %v, complete %v", err, partial != nil && partial.Complete)
	}
	// An --out that cannot be written is bad input: exit 2, nothing on stdout.
	out, errOut, code := gpubench(t, "allgather", "--backend", "sim", "--sizes", "1K", "--out", filepath.Join(dir, "no", "such", "dir.jsonl"))
	if code != exitUsage || out != "" || !strings.Contains(errOut, "cannot write --out") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestVersionOutputs(t *testing.T) {
	t.Parallel()
	out, _, code := gpubench(t, "version", "--output", "json")
	var v struct{ Version, Go string }
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Version != "test" || v.Go == "" {
		t.Errorf("json: exit %d, %q", code, out)
	}
	if out, _, _ := gpubench(t, "version", "--output", "markdown"); !strings.HasPrefix(out, "**gpubench test**") {
		t.Errorf("markdown: %q", out)
	}
	if _, errOut, code := gpubench(t, "version", "--output", "csv"); code != exitUsage || !strings.Contains(errOut, "for version: use table, json or markdown") {
		t.Errorf("csv: exit %d, %q", code, errOut)
	}
}

// plot and serve put their product elsewhere (an image, an endpoint); --output json says what
// they made, and a format they cannot speak is refused.
func TestPlotAndServeOutputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := filepath.Join(dir, "a.json")
	out, _, code := gpubench(t, "allreduce", "--backend", "sim", "--sizes", "1K:1M:x32", "--output", "json")
	if code != 0 || os.WriteFile(res, []byte(out), 0o644) != nil {
		t.Fatal("no result file")
	}
	img := filepath.Join(dir, "a.svg")
	out, _, code = gpubench(t, "plot", res, "--out", img, "--output", "json")
	var got struct {
		File          string
		Width, Height int
		Inputs        []string
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.File != img || got.Width != 960 || len(got.Inputs) != 1 {
		t.Errorf("plot --output json: exit %d, %q", code, out)
	}
	for _, args := range [][]string{{"plot", res, "--out", img, "--output", "csv"}, {"serve", "--backend", "sim", "--output", "csv"}} {
		if out, errOut, code := gpubench(t, args...); code != exitUsage || out != "" || !strings.Contains(errOut, `unknown --output "csv"`) {
			t.Errorf("%v: exit %d, %q, %q", args, code, out, errOut)
		}
	}
}

// With -I 1 the table is nccl-tests' -I 1 layout, so that a script written for it finds each
// column where nccl-tests puts it: a placement's time, algbw, busbw, #wrong, i_min, i_max, i_p99
// and i_cv%, out of place then in place (the in-place time is field 14), then gpubench's own.
func TestPerIterIsNCCLTestsLayout(t *testing.T) {
	t.Parallel()
	out, _, code := gpubench(t, "allreduce", "--backend", "sim", "-b", "1M", "-e", "1M", "-I", "1", "-K", "2", "--output", "json")
	table, _, code2 := gpubench(t, "allreduce", "--backend", "sim", "-b", "1M", "-e", "1M", "-I", "1", "-K", "2")
	if code != 0 || code2 != 0 {
		t.Fatalf("exit %d and %d", code, code2)
	}
	var doc struct {
		Results []struct {
			InPlace struct {
				TimeUS  float64 `json:"time_us"`
				PerIter struct {
					TimesUS []float64 `json:"times_us"`
					MaxUS   float64   `json:"max_us"`
				} `json:"per_iter"`
			} `json:"in_place"`
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Results) != 1 {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(table, "\n# Per-Iteration Report: simulated stream timing; i_* uses max over process rows; summary skips first 2 iterations \n") {
		t.Errorf("no Per-Iteration Report line:\n%s", table)
	}
	var head, row []string
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == "size" {
			head = f[1:]
		} else if len(f) > 0 && f[0] == "1048576" {
			row = f
		}
	}
	want := []string{"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%"}
	if len(head) < len(want) || !slices.Equal(head[:len(want)], want) {
		t.Fatalf("header %q; want it to start %q", head, want)
	}
	ip := doc.Results[0].InPlace
	least := slices.Min(ip.PerIter.TimesUS[2:]) // -K 2
	if len(row) < 21 || row[13] != fmt.Sprintf("%.2f", ip.TimeUS) || row[17] != fmt.Sprintf("%.2f", least) || row[18] != fmt.Sprintf("%.2f", ip.PerIter.MaxUS) {
		t.Errorf("row %q; want the in-place time %.2f at field 14, i_min %.2f and i_max %.2f at 18 and 19", row, ip.TimeUS, least, ip.PerIter.MaxUS)
	}
}
