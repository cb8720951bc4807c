package report

import (
	"encoding/json"
	"errors"
	"io"

	"github.com/gpubench/gpubench/internal/coll"
)

// endFields are the JSON document's fields known only once a run ends: the stream's end record
// carries them; its start record carries every other field but results.
var endFields = []string{"out_of_bounds", "avg_busbw_gbs", "best", "bus_peak", "timing_only_from_bytes",
	"interrupted", "error", "notes", "wrong_ranks"}

// NewCollStream returns a writer that streams a run as JSON lines (--out FILE): a start record,
// a result record per row as it is measured, and an end record, each written whole in one
// write, so that a run that stops loses none of the rows it measured (docs/output.md).
func NewCollStream(w io.Writer) CollWriter { return &streamWriter{w: w} }

type streamWriter struct{ w io.Writer }

func (s *streamWriter) Start(r *CollRun) error {
	m, err := fields(CollJSON(r))
	if err != nil {
		return err
	}
	delete(m, "results")
	for _, f := range endFields {
		delete(m, f)
	}
	return s.record("start", m)
}

func (s *streamWriter) Row(r *CollRun, res coll.Result) error {
	m, err := fields(jsonRow(r, res))
	if err != nil {
		return err
	}
	return s.record("result", m)
}

func (s *streamWriter) End(r *CollRun) error {
	all, err := fields(CollJSON(r))
	if err != nil {
		return err
	}
	m := map[string]json.RawMessage{}
	for _, f := range endFields {
		m[f] = all[f]
	}
	return s.record("end", m)
}

func (s *streamWriter) record(kind string, m map[string]json.RawMessage) error {
	m["record"], _ = json.Marshal(kind)
	line, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = s.w.Write(append(line, '\n'))
	return err
}

// fields is a JSON object's fields.
func fields(v any) (map[string]json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	return m, json.Unmarshal(b, &m)
}

// Tee writes a run to every writer; a writer that fails does not stop the others (a closed
// stdout must not cost the --out file its rows), and it is not written to again.
func Tee(ws ...CollWriter) CollWriter { return &tee{ws: ws, errs: make([]error, len(ws))} }

type tee struct {
	ws   []CollWriter
	errs []error
}

func (t *tee) each(f func(CollWriter) error) error {
	for i, w := range t.ws {
		if t.errs[i] == nil {
			t.errs[i] = f(w)
		}
	}
	return errors.Join(t.errs...)
}

func (t *tee) Start(r *CollRun) error { return t.each(func(w CollWriter) error { return w.Start(r) }) }

func (t *tee) Row(r *CollRun, res coll.Result) error {
	return t.each(func(w CollWriter) error { return w.Row(r, res) })
}

func (t *tee) End(r *CollRun) error { return t.each(func(w CollWriter) error { return w.End(r) }) }
