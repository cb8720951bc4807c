// Package results reads the result files gpubench writes, collective runs (one JSON document, or
// JSON lines streamed with --out) and p2p runs, and compares collective runs (docs/results.md).
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

// Forms of a result file.
const (
	FormDocument = "json"  // one JSON document (--output json)
	FormLines    = "jsonl" // JSON lines streamed as the run went (--out FILE)
)

// File is one result file as read.
type File struct {
	Name     string // as given on the command line
	Form     string // FormDocument or FormLines
	Complete bool   // the run finished writing: always for a document; an end record for lines
	Notices  []string
	Coll     *Coll // a collective run, or
	P2P      *P2P  // a p2p run
}

// Coll is a collective run.
type Coll struct {
	Version     string
	Collective  string
	Backend     string
	Topology    string // empty on real GPUs
	StartTime   string
	Ranks       int
	Rows        []Row
	BusPeak     *BusPeak // nil when the run had none, or stopped before writing it
	ZeroBusBW   bool     // one rank: busbw is 0 by definition
	Interrupted bool
	Error       string
}

// BusPeak is the topology's nominal bus peak.
type BusPeak struct {
	GBs  float64
	Link string
}

// Row is one size of a sweep, for one type, op and root.
type Row struct {
	Cycle      int // which repeat of a run with -N, from 1; 0 in a run without
	Size       int64
	Count      int64
	Type       string
	Op         string // empty for collectives that do not reduce
	Root       *int   // nil for collectives without a root
	OutOfPlace Placement
	InPlace    Placement
}

// Placement is one placement's figures.
type Placement struct {
	CPUTimeUS   *float64 // the host's launch time (-C)
	TimeUS      float64
	AlgBW       float64
	BusBW       float64
	Wrong       *int64
	TimingOnly  bool
	SlowestRank *int     // multi-process runs only
	PerIter     *PerIter // with --per-iter only
}

// PerIter is the per-iteration statistics of a placement, times in microseconds.
type PerIter struct {
	N                        int
	Mean, P50, P95, P99, Max float64
	CV                       float64 // standard deviation / mean
	Times                    []float64
}

// P2P is a p2p run: its matrices keyed by name (uni_enabled, bi_disabled, lat_enabled, ...).
type P2P struct {
	Version  string
	Backend  string
	Topology string
	Devices  []int // the ordinals labelling rows and columns
	Matrices map[string]Matrix
}

// Matrix is one p2p matrix; a nil value is an N/A cell, with its reason in NA.
type Matrix struct {
	Title  string
	Unit   string
	Values [][]*float64
	NA     [][]string
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
// object with a "record" field starts JSON lines; anything else must be one JSON document from a
// collective command or p2p. Errors name the file and, for JSON lines, the line.
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
	if at, r, bad := jsonControl(data); bad {
		return nil, fmt.Errorf("a string at byte %d holds the control character %q: gpubench never writes one, and it would be printed raw", at, r)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("empty file: expected gpubench JSON results (--output json or --out FILE)")
	}
	if trimmed[0] != '{' {
		return nil, errors.New("not gpubench JSON results (--output json or --out FILE): the file does not start with a JSON object")
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
		Command    *string `json:"command"`
		Collective *string `json:"collective"`
	}
	if err := json.Unmarshal(first, &kind); err != nil {
		return nil, fmt.Errorf("not gpubench results: %v", jsonErr(err))
	}
	switch {
	case kind.Collective != nil:
		var doc jsonDoc
		if err := strictUnmarshal(first, &doc); err != nil {
			return nil, err
		}
		if doc.Results == nil {
			return nil, errors.New("no \"results\" array: not a complete gpubench collective result")
		}
		c, err := doc.jsonStart.coll()
		if err != nil {
			return nil, err
		}
		for i, r := range *doc.Results {
			row, err := r.row()
			if err != nil {
				return nil, fmt.Errorf("results[%d]: %v", i, err)
			}
			c.Rows = append(c.Rows, row)
		}
		if err := doc.jsonEnd.apply(c); err != nil {
			return nil, err
		}
		if f.Notices, err = checkRows(c); err != nil {
			return nil, err
		}
		f.Coll = c
	case kind.Command != nil && *kind.Command == "p2p":
		p, err := readP2P(first)
		if err != nil {
			return nil, err
		}
		f.P2P = p
	default:
		return nil, errors.New("not gpubench results: no \"collective\" field, and \"command\" is not \"p2p\"")
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

func strictUnmarshal(data []byte, v any) error {
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

// The JSON forms as gpubench writes them (docs/output.md); pointers tell missing from zero.

type jsonStart struct {
	Version    *string `json:"gpubench_version"`
	Collective *string `json:"collective"`
	Backend    *string `json:"backend"`
	Topology   *string `json:"topology"`
	StartTime  *string `json:"start_time"`
	Config     *struct {
		Ranks *int `json:"ranks"`
	} `json:"config"`
	Devices   []json.RawMessage `json:"devices"`
	ZeroBusBW bool              `json:"busbw_zero_by_definition"`
}

type jsonEnd struct {
	BusPeak *struct {
		GBs  *float64 `json:"gbs"`
		Link string   `json:"link"`
	} `json:"bus_peak"`
	Interrupted bool    `json:"interrupted"`
	Error       *string `json:"error"`
}

// jsonDoc is the whole document: the fields of a start record, the results, those of an end record.
type jsonDoc struct {
	jsonStart
	Results *[]jsonRow `json:"results"`
	jsonEnd
}

type jsonRow struct {
	Cycle      *int           `json:"cycle"`
	Size       *int64         `json:"size_bytes"`
	Count      *int64         `json:"count"`
	Type       *string        `json:"type"`
	Op         *string        `json:"redop"`
	Root       *int           `json:"root"`
	OutOfPlace *jsonPlacement `json:"out_of_place"`
	InPlace    *jsonPlacement `json:"in_place"`
}

type jsonPlacement struct {
	TimeUS      *float64     `json:"time_us"`
	AlgBW       *float64     `json:"algbw_gbs"`
	BusBW       *float64     `json:"busbw_gbs"`
	Wrong       *int64       `json:"wrong"`
	TimingOnly  bool         `json:"timing_only"`
	CPUTimeUS   *float64     `json:"cpu_time_us"`
	SlowestRank *int         `json:"slowest_rank"`
	PerIter     *jsonPerIter `json:"per_iter"`
}

type jsonPerIter struct {
	N     *int      `json:"n"`
	Mean  *float64  `json:"mean_us"`
	P50   *float64  `json:"p50_us"`
	P95   *float64  `json:"p95_us"`
	P99   *float64  `json:"p99_us"`
	Max   *float64  `json:"max_us"`
	CV    *float64  `json:"cv"`
	Times []float64 `json:"times_us"`
}

func (s *jsonStart) coll() (*Coll, error) {
	if s.Collective == nil {
		return nil, errors.New("no \"collective\" field")
	}
	if !knownCollective(*s.Collective) {
		return nil, fmt.Errorf("unknown collective %q: expected one of %s", *s.Collective, collectiveNames())
	}
	if s.Backend == nil || *s.Backend == "" {
		return nil, errors.New("no \"backend\" field")
	}
	c := &Coll{Collective: *s.Collective, Backend: *s.Backend, ZeroBusBW: s.ZeroBusBW}
	if s.Version != nil {
		c.Version = *s.Version
	}
	if s.Topology != nil {
		c.Topology = *s.Topology
	}
	if s.StartTime != nil {
		c.StartTime = *s.StartTime
	}
	switch {
	case s.Config != nil && s.Config.Ranks != nil:
		c.Ranks = *s.Config.Ranks
	default:
		c.Ranks = len(s.Devices)
	}
	if c.Ranks < 0 || c.Ranks > 1<<20 {
		return nil, fmt.Errorf("config.ranks %d is not a count of ranks", c.Ranks)
	}
	return c, nil
}

func (e *jsonEnd) apply(c *Coll) error {
	if e.BusPeak != nil && e.BusPeak.GBs != nil {
		if !(*e.BusPeak.GBs > 0) || math.IsInf(*e.BusPeak.GBs, 0) {
			return fmt.Errorf("bus_peak.gbs %v is not a bandwidth", *e.BusPeak.GBs)
		}
		c.BusPeak = &BusPeak{GBs: *e.BusPeak.GBs, Link: e.BusPeak.Link}
	}
	c.Interrupted = e.Interrupted
	if e.Error != nil {
		c.Error = *e.Error
	}
	return nil
}

func (r *jsonRow) row() (Row, error) {
	switch {
	case r.Size == nil:
		return Row{}, errors.New("no \"size_bytes\"")
	case *r.Size < 0:
		return Row{}, fmt.Errorf("size_bytes %d is negative", *r.Size)
	case r.Type == nil || *r.Type == "":
		return Row{}, errors.New("no \"type\"")
	case r.OutOfPlace == nil:
		return Row{}, errors.New("no \"out_of_place\"")
	case r.InPlace == nil:
		return Row{}, errors.New("no \"in_place\"")
	}
	row := Row{Size: *r.Size, Type: *r.Type, Root: r.Root}
	if r.Cycle != nil {
		if *r.Cycle < 1 {
			return Row{}, fmt.Errorf("cycle %d is not a cycle number (from 1)", *r.Cycle)
		}
		row.Cycle = *r.Cycle
	}
	if r.Count != nil {
		row.Count = *r.Count
	}
	if r.Op != nil {
		row.Op = *r.Op
	}
	var err error
	if row.OutOfPlace, err = r.OutOfPlace.placement(); err != nil {
		return Row{}, fmt.Errorf("out_of_place: %v", err)
	}
	if row.InPlace, err = r.InPlace.placement(); err != nil {
		return Row{}, fmt.Errorf("in_place: %v", err)
	}
	return row, nil
}

func (p *jsonPlacement) placement() (Placement, error) {
	for _, f := range []struct {
		name string
		v    *float64
	}{{"time_us", p.TimeUS}, {"algbw_gbs", p.AlgBW}, {"busbw_gbs", p.BusBW}} {
		if f.v == nil {
			return Placement{}, fmt.Errorf("no %q", f.name)
		}
		if err := nonNegative(f.name, *f.v); err != nil {
			return Placement{}, err
		}
	}
	out := Placement{TimeUS: *p.TimeUS, AlgBW: *p.AlgBW, BusBW: *p.BusBW, Wrong: p.Wrong, TimingOnly: p.TimingOnly, SlowestRank: p.SlowestRank, CPUTimeUS: p.CPUTimeUS}
	if p.CPUTimeUS != nil {
		if err := nonNegative("cpu_time_us", *p.CPUTimeUS); err != nil {
			return Placement{}, err
		}
	}
	if p.SlowestRank != nil && *p.SlowestRank < 0 {
		return Placement{}, fmt.Errorf("slowest_rank %d is negative", *p.SlowestRank)
	}
	if p.Wrong != nil && *p.Wrong < 0 {
		return Placement{}, fmt.Errorf("wrong %d is negative", *p.Wrong)
	}
	if p.PerIter != nil {
		pi, err := p.PerIter.perIter()
		if err != nil {
			return Placement{}, fmt.Errorf("per_iter: %v", err)
		}
		out.PerIter = pi
	}
	return out, nil
}

func (j *jsonPerIter) perIter() (*PerIter, error) {
	if j.N == nil || *j.N < 1 {
		return nil, errors.New("no iteration count \"n\" of at least 1")
	}
	p := &PerIter{N: *j.N, Times: j.Times}
	for _, f := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"mean_us", j.Mean, &p.Mean}, {"p50_us", j.P50, &p.P50}, {"p95_us", j.P95, &p.P95}, {"p99_us", j.P99, &p.P99}, {"max_us", j.Max, &p.Max}, {"cv", j.CV, &p.CV}} {
		if f.v == nil {
			return nil, fmt.Errorf("no %q", f.name)
		}
		if err := nonNegative(f.name, *f.v); err != nil {
			return nil, err
		}
		*f.dst = *f.v
	}
	if !(p.P50 <= p.P95 && p.P95 <= p.P99 && p.P99 <= p.Max) {
		return nil, fmt.Errorf("percentiles out of order (p50 %g, p95 %g, p99 %g, max %g)", p.P50, p.P95, p.P99, p.Max)
	}
	for i, t := range p.Times {
		if err := nonNegative(fmt.Sprintf("times_us[%d]", i), t); err != nil {
			return nil, err
		}
	}
	if len(p.Times) > p.N {
		return nil, fmt.Errorf("%d times_us for n = %d iterations", len(p.Times), p.N)
	}
	return p, nil
}

func nonNegative(name string, v float64) error {
	if v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return fmt.Errorf("%s %v is not a non-negative number", name, v)
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
	for i, r := range c.Rows {
		k := r.Key(c.Collective)
		switch {
		case i > 0 && k == c.Rows[i-1].Key(c.Collective):
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
	c.Rows = rows
	if repeats > 0 {
		notices = append(notices, fmt.Sprintf("repeated sizes above 0 B (a sweep whose sizes round to one count on %d ranks): %d rows dropped, each size is kept once", c.Ranks, repeats))
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
	return RowKey{Collective: c, Cycle: r.Cycle, Type: r.Type, Op: r.Op, Root: root, Size: r.Size}
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
