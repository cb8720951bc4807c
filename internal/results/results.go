// Package results owns the JSON schema of gpubench's result files (schema.go), which
// internal/report writes; it reads those files, collective runs (one JSON document, or JSON lines
// streamed with --out) and p2p runs, and nccl-tests' own output (its text and its -J JSON, read
// as collective runs: nccltests.go), and compares collective runs (docs/results.md).
package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/input"
)

// Forms of a result file; FormNCCLTests and FormNCCLTestsJSON are nccl-tests' (nccltests.go).
const (
	FormDocument = "json"  // one JSON document (--output json)
	FormLines    = "jsonl" // JSON lines streamed as the run went (--out FILE)
)

// File is one result file as read.
type File struct {
	Name     string // as given on the command line
	Form     string // FormDocument, FormLines, FormNCCLTests or FormNCCLTestsJSON
	Complete bool   // the run finished writing: always for a document; an end record for lines, a footer for nccl-tests' text
	Notices  []string
	Coll     *Coll // a collective run, or
	P2P      *P2P  // a p2p run
}

// ReadFile reads and checks a result file.
func ReadFile(path string) (*File, error) {
	data, err := input.ReadFile(path, input.ResultsLimit)
	if err != nil {
		return nil, err
	}
	return Read(path, data)
}

// Read parses the contents of a result file named name. The form is told by content: a first
// object with a "record" field starts JSON lines; another JSON object must be one document from a
// collective command or p2p, or nccl-tests -J's file; text must be nccl-tests' output, its table
// (nccltests.go). Errors name the file and, for JSON lines and text, the line.
func Read(name string, data []byte) (*File, error) {
	name = input.Safe(name) // printed in tables and errors
	f, err := read(name, data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

func read(name string, data []byte) (*File, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("empty file: expected gpubench JSON results (--output json or --out FILE) or nccl-tests output")
	}
	if trimmed[0] != '{' {
		return readNCCLTests(name, data) // text: nccl-tests' table, or nothing this package reads
	}
	if at, r, bad := jsonControl(data); bad {
		return nil, fmt.Errorf("a string at byte %d holds the control character %q: gpubench never writes one, and it would be printed raw", at, r)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	var first json.RawMessage
	firstErr := dec.Decode(&first)
	if firstErr == nil || isLinesStart(trimmed) {
		var probe struct {
			Record *string `json:"record"`
		}
		if firstErr == nil {
			_ = json.Unmarshal(first, &probe)
		}
		if probe.Record != nil || firstErr != nil {
			return readLines(name, data)
		}
	}
	if firstErr != nil {
		return nil, fmt.Errorf("not valid JSON: %v", jsonErr(firstErr))
	}
	if dec.More() || dec.InputOffset() != int64(len(trimmed)) {
		return nil, errors.New("more than one JSON value, and the first has no \"record\" field: expected one document (--output json) or JSON lines (--out FILE)")
	}
	f := &File{Name: name, Form: FormDocument, Complete: true}
	var kind struct {
		Command     *string         `json:"command"`
		Collective  *string         `json:"collective"`
		Format      string          `json:"format"`
		Chosen      json.RawMessage `json:"chosen"`
		Calibration json.RawMessage `json:"calibration"`
		Comparisons json.RawMessage `json:"comparisons"`
	}
	if err := json.Unmarshal(first, &kind); err != nil {
		return nil, fmt.Errorf("not gpubench results: %v", jsonErr(err))
	}
	// gpubench's other JSON, given where results go: say what it is and where it belongs.
	switch {
	case strings.HasPrefix(kind.Format, "gpubench-topology/"):
		return nil, errors.New("a gpubench topology file, not results: give it as --topology")
	case kind.Calibration != nil && kind.Collective == nil:
		return nil, errors.New("calibrate's report, not results: the calibrated topology it wrote (-o) goes to --topology")
	case kind.Comparisons != nil:
		return nil, errors.New("compare's report, not results: compare the result files it was made from")
	case kind.Chosen != nil && kind.Collective != nil:
		return nil, errors.New("gpubench explain's output, not results: give a collective's --output json or --out file")
	}
	switch {
	case kind.Collective != nil:
		var c Coll
		if err := decode(first, &c); err != nil {
			return nil, err
		}
		if c.Results == nil {
			return nil, errors.New("no \"results\" array: not a complete gpubench collective result")
		}
		if err := c.checkRun(); err != nil {
			return nil, err
		}
		for i := range c.Results {
			if err := c.Results[i].check(); err != nil {
				return nil, fmt.Errorf("results[%d]: %v", i, err)
			}
		}
		var err error
		if f.Notices, err = checkRows(&c); err != nil {
			return nil, err
		}
		f.Coll = &c
	case kind.Command == nil && isNCCLTestsJSON(first):
		return readNCCLTestsJSON(name, first)
	case kind.Command != nil && *kind.Command == "p2p":
		var p P2P
		if err := decode(first, &p); err != nil {
			return nil, err
		}
		if err := p.check(); err != nil {
			return nil, err
		}
		f.P2P = &p
	default:
		return nil, errors.New("not gpubench results: no \"collective\" field, \"command\" is not \"p2p\", and it is not nccl-tests -J JSON")
	}
	return f, nil
}

// jsonControl finds a control character in the strings of JSON text (escaped as \n, \u001b, or a
// raw C1 control in UTF-8), returning its offset.
func jsonControl(data []byte) (at int, r rune, found bool) {
	in := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			in = !in
		case c == '\n':
			in = false // a string cut by the end of its line: the JSON reader names the broken line
		case !in:
		case c == '\\' && i+1 < len(data):
			i++
			switch data[i] {
			case 'n', 't', 'r', 'b', 'f':
				return i - 1, rune(map[byte]byte{'n': '\n', 't': '\t', 'r': '\r', 'b': '\b', 'f': '\f'}[data[i]]), true
			case 'u':
				if i+4 < len(data) {
					if v, err := strconv.ParseUint(string(data[i+1:i+5]), 16, 32); err == nil && unicode.IsControl(rune(v)) {
						return i - 1, rune(v), true
					}
				}
			}
		case c < 0x20 || c == 0x7f:
			return i, rune(c), true
		case c == 0xc2 && i+1 < len(data) && data[i+1] >= 0x80 && data[i+1] <= 0x9f:
			return i, rune(data[i+1]), true
		}
	}
	return 0, 0, false
}

// isLinesStart says whether data opens with a one-line object that carries a "record" field, for
// a first line the whole-document decoder cannot take.
func isLinesStart(data []byte) bool {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	var probe struct {
		Record *string `json:"record"`
	}
	return json.Unmarshal(line, &probe) == nil && probe.Record != nil
}

// decode reads JSON text into one of the schema's types.
func decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("not gpubench results: %v", jsonErr(err))
	}
	return nil
}

// jsonErr words encoding/json's errors for a user: a wrong type names the field.
func jsonErr(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %q holds a JSON %s, expected %s", te.Field, te.Value, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "the JSON ends early (a cut-short file?)"
	}
	return err.Error()
}

// checkRun checks a collective run's fields other than its rows, and counts its ranks from its
// devices when config.ranks is missing.
func (c *Coll) checkRun() error {
	if c.Collective == "" {
		return errors.New("no \"collective\" field")
	}
	if !knownCollective(c.Collective) {
		return fmt.Errorf("unknown collective %q: expected one of %s", c.Collective, collectiveNames())
	}
	if c.Backend == "" {
		return errors.New("no \"backend\" field")
	}
	if c.Config.Ranks == 0 {
		c.Config.Ranks = len(c.Devices)
	}
	if c.Config.Ranks < 0 || c.Config.Ranks > 1<<20 {
		return fmt.Errorf("config.ranks %d is not a count of ranks", c.Config.Ranks)
	}
	if bp := c.BusPeak; bp != nil && (!(bp.GBs > 0) || math.IsInf(bp.GBs, 0)) {
		return fmt.Errorf("bus_peak.gbs %v is not a bandwidth", bp.GBs)
	}
	return nil
}

// check refuses a row without its required fields or with figures no run writes.
func (r *Row) check() error {
	switch {
	case r.absent == "size_bytes":
		return errors.New("no \"size_bytes\"")
	case r.Size < 0:
		return fmt.Errorf("size_bytes %d is negative", r.Size)
	case r.Type == "":
		return errors.New("no \"type\"")
	case r.absent != "":
		return fmt.Errorf("no %q", r.absent)
	case r.Cycle < 0:
		return fmt.Errorf("cycle %d is not a cycle number (from 1)", r.Cycle)
	}
	if err := r.OutOfPlace.check(); err != nil {
		return fmt.Errorf("out_of_place: %v", err)
	}
	if err := r.InPlace.check(); err != nil {
		return fmt.Errorf("in_place: %v", err)
	}
	return nil
}

func (p *Placement) check() error {
	if p.absent != "" {
		return fmt.Errorf("no %q", p.absent)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"time_us", p.TimeUS}, {"algbw_gbs", p.AlgBW}, {"busbw_gbs", p.BusBW}} {
		if err := nonNegative(f.name, f.v); err != nil {
			return err
		}
	}
	if p.TimeUS == 0 && (p.AlgBW > 0 || p.BusBW > 0) {
		return fmt.Errorf("time_us 0 with algbw_gbs %v and busbw_gbs %v: a bandwidth needs a time", p.AlgBW, p.BusBW)
	}
	if p.CPUTimeUS != nil {
		if err := nonNegative("cpu_time_us", *p.CPUTimeUS); err != nil {
			return err
		}
	}
	if err := allValid("rank_time_us", p.RankTimesUS); err != nil {
		return err
	}
	if p.SlowestRank != nil && *p.SlowestRank < 0 {
		return fmt.Errorf("slowest_rank %d is negative", *p.SlowestRank)
	}
	if p.Wrong != nil && *p.Wrong < 0 {
		return fmt.Errorf("wrong %d is negative", *p.Wrong)
	}
	if p.PerIter != nil {
		if err := p.PerIter.check(); err != nil {
			return fmt.Errorf("per_iter: %v", err)
		}
	}
	return nil
}

func (p *PerIter) check() error {
	if p.N < 1 {
		return errors.New("no iteration count \"n\" of at least 1")
	}
	if p.absent != "" {
		return fmt.Errorf("no %q", p.absent)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"mean_us", p.MeanUS}, {"p50_us", p.P50US}, {"p95_us", p.P95US}, {"p99_us", p.P99US}, {"max_us", p.MaxUS}, {"cv", p.CV}} {
		if err := nonNegative(f.name, f.v); err != nil {
			return err
		}
	}
	if !(p.P50US <= p.P95US && p.P95US <= p.P99US && p.P99US <= p.MaxUS) {
		return fmt.Errorf("percentiles out of order (p50 %g, p95 %g, p99 %g, max %g)", p.P50US, p.P95US, p.P99US, p.MaxUS)
	}
	if err := allValid("times_us", p.TimesUS); err != nil {
		return err
	}
	if len(p.TimesUS) > p.N {
		return fmt.Errorf("%d times_us for n = %d iterations", len(p.TimesUS), p.N)
	}
	return nil
}

func nonNegative(name string, v float64) error {
	if !valid(v) {
		return fmt.Errorf("%s %v is not a number from 0 to 1e12", name, v)
	}
	return nil
}

// maxFigure bounds every figure a run writes (µs, GB/s, bytes a second): past it a file is broken,
// not a measurement, and would only break the tables it is printed in.
const maxFigure = 1e12

// valid says whether v is a figure a run can write: a number from 0 to maxFigure.
func valid(v float64) bool { return v >= 0 && v <= maxFigure }

// allValid checks a list of figures named name, naming the first bad one.
func allValid(name string, vs []float64) error {
	for i, v := range vs {
		if !valid(v) {
			return nonNegative(fmt.Sprintf("%s[%d]", name, i), v)
		}
	}
	return nil
}

// checkRows refuses a run that holds the same row twice: rows are told apart by type, op, root and
// size, and compare matches them on that. A row that repeats the key of the row just before it is
// another measurement of the same size, not a second run: a sweep whose sizes round to one count
// on many ranks (all-gather's 8 B to 64 B on 8 GPUs are all 0 B rows, as nccl-tests prints them).
// Such repeats are kept once, the first; a notice says so for sizes above 0 B, where it is rare.
func checkRows(c *Coll) (notices []string, err error) {
	seen := map[RowKey]bool{}
	var rows []Row
	repeats := 0
	for i := range c.Results {
		if r := &c.Results[i]; c.Collective == "sendrecv" && (r.Op == "" || r.Op == "none") {
			r.Op = "sum" // earlier gpubench named no op for send/recv; it ran -o's default, as sendrecv_perf names it
		}
		r := c.Results[i]
		k := r.Key(c.Collective)
		switch {
		case i > 0 && k == c.Results[i-1].Key(c.Collective):
			if k.Size > 0 {
				repeats++
			}
			continue
		case seen[k]:
			return nil, fmt.Errorf("the row %s appears twice", k)
		}
		seen[k] = true
		rows = append(rows, r)
	}
	c.Results = rows
	if repeats > 0 {
		notices = append(notices, fmt.Sprintf("repeated sizes above 0 B (a sweep whose sizes round to one count on %d ranks): %d rows dropped, each size is kept once", c.Config.Ranks, repeats))
	}
	return notices, nil
}

// RowKey tells rows apart: collective, cycle (-N), type, op, root (-1 when none) and size.
type RowKey struct {
	Collective string
	Cycle      int
	Type, Op   string
	Root       int
	Size       int64
}

// Key is the row's key within a run of collective c.
func (r Row) Key(c string) RowKey {
	root := -1
	if r.Root != nil {
		root = *r.Root
	}
	return RowKey{Collective: c, Cycle: r.Cycle, Type: r.Type, Op: string(r.Op), Root: root, Size: r.Size}
}

func (k RowKey) String() string {
	s := fmt.Sprintf("%s %d B %s", k.Collective, k.Size, k.Type)
	if k.Op != "" {
		s += " " + k.Op
	}
	if k.Root >= 0 {
		s += fmt.Sprintf(" root %d", k.Root)
	}
	if k.Cycle > 0 {
		s += fmt.Sprintf(" cycle %d", k.Cycle)
	}
	return s
}

func knownCollective(name string) bool {
	return slices.ContainsFunc(coll.Collectives, func(c *coll.Collective) bool { return c.Name == name })
}

func collectiveNames() string {
	var names []string
	for _, c := range coll.Collectives {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ") + " or p2p"
}
