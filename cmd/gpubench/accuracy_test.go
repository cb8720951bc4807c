package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/golden"
)

// The accuracy table: runs that people published for real machines (accuracy/published.json),
// each re-run on the simulator by the gpubench command in accuracy/cases.json. A row fails when
// its ratio (simulated / published) leaves the band recorded for it, so that accuracy cannot
// regress unseen; -update records the bands anew and rewrites the table in docs/accuracy.md.

const accuracyDir = "../../accuracy"

type publishedRun struct {
	ID        string  `json:"id"`
	Source    string  `json:"source"`
	Where     string  `json:"where"`
	Machine   string  `json:"machine"`
	Kind      string  `json:"kind"`
	Test      string  `json:"test"`
	SizeBytes int64   `json:"size_bytes"`
	Measure   string  `json:"measure"`
	Placement string  `json:"placement"`
	Published float64 `json:"published"`
	Env       string  `json:"env"`
}

type accuracyCase struct {
	ID      string            `json:"id"`
	Command string            `json:"command"`
	Assumed string            `json:"assumed"`
	Env     map[string]string `json:"env,omitempty"`
	// Field is where the figure is in the command's JSON output, as dot-separated keys and
	// indices (-1: the last); empty means the last result row's figure that Measure names.
	Field string     `json:"field,omitempty"`
	Band  [2]float64 `json:"band"`
}

type accuracyRow struct {
	run       publishedRun
	c         accuracyCase
	simulated float64
	ratio     float64
}

func TestAccuracy(t *testing.T) {
	var published []publishedRun
	readJSON(t, filepath.Join(accuracyDir, "published.json"), &published)
	byID := map[string]publishedRun{}
	for _, p := range published {
		byID[p.ID] = p
	}
	var cases []accuracyCase
	readJSON(t, filepath.Join(accuracyDir, "cases.json"), &cases)
	var rows []accuracyRow
	for i := range cases {
		c := &cases[i]
		p, ok := byID[c.ID]
		if !ok {
			t.Errorf("case %s: no published run of that id", c.ID)
			continue
		}
		t.Run(c.ID, func(t *testing.T) {
			sim := simulateCase(t, *c, p)
			r := sim / p.Published
			if golden.Updating() {
				c.Band = [2]float64{round3(r / 1.05), round3(r * 1.05)}
			}
			if !(r >= c.Band[0] && r <= c.Band[1]) {
				t.Errorf("simulated %.4g against %.4g published: ratio %.3f outside its band %v (run with -update after checking why)", sim, p.Published, r, c.Band)
			}
			rows = append(rows, accuracyRow{run: p, c: *c, simulated: sim, ratio: r})
		})
	}
	if t.Failed() {
		return
	}
	if golden.Updating() {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", " ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(cases); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(accuracyDir, "cases.json"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkAccuracyDoc(t, accuracyTable(rows))
}

// simulateCase runs a case's command on the simulator and returns the figure it compares.
func simulateCase(t *testing.T, c accuracyCase, p publishedRun) float64 {
	t.Helper()
	for k, v := range c.Env {
		t.Setenv(k, v)
	}
	var args []string
	for _, a := range strings.Fields(c.Command) {
		if strings.HasPrefix(a, "accuracy/") {
			a = filepath.Join(accuracyDir, strings.TrimPrefix(a, "accuracy/"))
		}
		args = append(args, a)
	}
	out, errOut, code := gpubench(t, append(args, "--backend", "sim", "--output", "json")...)
	if code != 0 {
		t.Fatalf("gpubench %s: exit %d: %s", c.Command, code, errOut)
	}
	var doc any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("gpubench %s: %v", c.Command, err)
	}
	field := c.Field
	if field == "" {
		placement := "out_of_place"
		if p.Placement == "in_place" {
			placement = "in_place"
		}
		field = "results.-1." + placement + "." + p.Measure
	}
	v, err := jsonPath(doc, field)
	if err != nil {
		t.Fatalf("gpubench %s: %s: %v", c.Command, field, err)
	}
	return v
}

// jsonPath follows dot-separated keys and indices (negative from the end) to a number.
func jsonPath(doc any, path string) (float64, error) {
	for _, key := range strings.Split(path, ".") {
		switch x := doc.(type) {
		case map[string]any:
			v, ok := x[key]
			if !ok {
				return 0, fmt.Errorf("no key %q", key)
			}
			doc = v
		case []any:
			i, err := strconv.Atoi(key)
			if i < 0 {
				i += len(x)
			}
			if err != nil || i < 0 || i >= len(x) {
				return 0, fmt.Errorf("no element %q of %d", key, len(x))
			}
			doc = x[i]
		default:
			return 0, fmt.Errorf("%q: not an object or list", key)
		}
	}
	v, ok := doc.(float64)
	if !ok {
		return 0, fmt.Errorf("not a number: %v", doc)
	}
	return v, nil
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// measureNames says what a published figure is.
var measureNames = map[string]string{"time_us": "time, µs", "busbw_gbs": "busbw, GB/s", "algbw_gbs": "algbw, GB/s", "copy_gbs": "copy, GB/s"}

// accuracyTable is the generated part of docs/accuracy.md: the summary and one table per kind
// of machine.
func accuracyTable(rows []accuracyRow) string {
	var b strings.Builder
	kinds := map[string][]accuracyRow{}
	within15, within50 := 0, 0
	worst := rows[0]
	for _, r := range rows {
		kinds[r.run.Kind] = append(kinds[r.run.Kind], r)
		if r.ratio >= 0.85 && r.ratio <= 1.15 {
			within15++
		}
		if r.ratio >= 1/1.5 && r.ratio <= 1.5 {
			within50++
		}
		if off(r.ratio) > off(worst.ratio) {
			worst = r
		}
	}
	fmt.Fprintf(&b, "%d published runs on %d kinds of machine. Within 15%%: %d (%.0f%%). Within 1.5x: %d (%.0f%%). Furthest off: %s, ratio %.2f.\n\n",
		len(rows), len(kinds), within15, 100*float64(within15)/float64(len(rows)), within50, 100*float64(within50)/float64(len(rows)), worst.run.ID, worst.ratio)
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "### %s\n\n| Published run | Machine as published | Assumed | Command | Measure | Published | Simulated | Ratio |\n|---|---|---|---|---|---:|---:|---:|\n", k)
		for _, r := range kinds[k] {
			env := ""
			keys := make([]string, 0, len(r.c.Env))
			for key := range r.c.Env {
				keys = append(keys, key)
			}
			sort.Strings(keys)
			for _, key := range keys {
				env += key + "=" + r.c.Env[key] + " "
			}
			measure := measureNames[r.run.Measure]
			if r.run.Placement == "in_place" {
				measure += ", in place"
			}
			fmt.Fprintf(&b, "| [%s](%s) | %s | %s | `%sgpubench %s --backend sim` | %s | %.4g | %.4g | %.2f |\n",
				r.run.ID, r.run.Source, cell(r.run.Machine), cell(r.c.Assumed), env, r.c.Command, measure, r.run.Published, r.simulated, r.ratio)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// off is how far a ratio is from 1, as a factor.
func off(r float64) float64 { return math.Max(r, 1/r) }

func cell(s string) string { return strings.ReplaceAll(s, "|", "/") }

const (
	tableStart = "<!-- accuracy table: generated by go test ./cmd/gpubench -run TestAccuracy -update -->\n"
	tableEnd   = "<!-- end of the accuracy table -->\n"
)

// checkAccuracyDoc compares the table in docs/accuracy.md with table, or writes it there under
// -update.
func checkAccuracyDoc(t *testing.T, table string) {
	path := "../../docs/accuracy.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i, j := strings.Index(doc, tableStart), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no table markers", path)
	}
	got := doc[:i+len(tableStart)] + table + doc[j:]
	if golden.Updating() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got != doc {
		t.Errorf("%s is not the table the runs give (run the test with -update):\n%s", path, golden.Diff(doc, got))
	}
}
