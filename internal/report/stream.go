package report

import (
	"errors"
	"io"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/results"
)

// NewCollStream returns a writer that streams a run as JSON lines (--out FILE): a start record,
// a result record per row as it is measured, and an end record, each written whole in one
// write, so that a run that stops loses none of the rows it measured (docs/output.md). The
// records are internal/results', which reads them back.
func NewCollStream(w io.Writer) CollWriter { return &streamWriter{w: w} }

type streamWriter struct{ w io.Writer }

func (s *streamWriter) Start(r *CollRun) error {
	return s.write(results.StartRecord(CollJSON(r)))
}

func (s *streamWriter) Row(r *CollRun, res coll.Result) error {
	row := jsonRow(r, res)
	return s.write(results.ResultRecord(&row))
}

func (s *streamWriter) End(r *CollRun) error {
	return s.write(results.EndRecord(CollJSON(r)))
}

func (s *streamWriter) write(line []byte, err error) error {
	if err != nil {
		return err
	}
	_, err = s.w.Write(line)
	return err
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
