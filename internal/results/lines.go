package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// readLines reads a run streamed as JSON lines: a start record, a result record per row, and an
// end record. Without the end record the run stopped early (a crash, a kill): the rows are kept and
// a notice says so. A last line cut short without its newline is what such a stop leaves; it is
// dropped with a notice. Any other bad line is an error naming it.
func readLines(name string, data []byte) (*File, error) {
	f := &File{Name: name, Form: FormLines}
	var c *Coll
	lines := bytes.Split(data, []byte("\n"))
	for i, raw := range lines {
		n, line := i+1, bytes.TrimSpace(raw)
		if len(line) == 0 {
			continue
		}
		if f.Complete {
			return nil, fmt.Errorf("line %d: a record after the end record", n)
		}
		var rec struct {
			Record *string `json:"record"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			if i == len(lines)-1 && c != nil {
				f.Notices = append(f.Notices, fmt.Sprintf("line %d is cut short (the run stopped while writing it); ignored", n))
				break
			}
			return nil, fmt.Errorf("line %d: not valid JSON: %v", n, jsonErr(err))
		}
		if rec.Record == nil {
			return nil, fmt.Errorf("line %d: no \"record\" field (each line of streamed results has one)", n)
		}
		switch *rec.Record {
		case "start":
			if c != nil {
				return nil, fmt.Errorf("line %d: a second start record", n)
			}
			var s jsonStart
			if err := json.Unmarshal(line, &s); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, jsonErr(err))
			}
			var err error
			if c, err = s.coll(); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
		case "result":
			if c == nil {
				return nil, fmt.Errorf("line %d: a result record before the start record", n)
			}
			var r jsonRow
			if err := json.Unmarshal(line, &r); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, jsonErr(err))
			}
			row, err := r.row()
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			c.Rows = append(c.Rows, row)
		case "end":
			if c == nil {
				return nil, fmt.Errorf("line %d: an end record before the start record", n)
			}
			var e jsonEnd
			if err := json.Unmarshal(line, &e); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, jsonErr(err))
			}
			if err := e.apply(c); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			f.Complete = true
		default:
			return nil, fmt.Errorf("line %d: unknown record %q (expected start, result or end)", n, *rec.Record)
		}
	}
	if c == nil {
		return nil, errors.New("no start record")
	}
	notices, err := checkRows(c)
	if err != nil {
		return nil, err
	}
	f.Notices = append(f.Notices, notices...)
	if !f.Complete {
		f.Notices = append(f.Notices, fmt.Sprintf("the run did not finish (no end record): %d rows were written before it stopped", len(c.Rows)))
	}
	f.Coll = c
	return f, nil
}
