package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// A collective run streamed with --out is JSON lines, each an object with a "record" field: a
// start record with every field of the document (Coll) but its results and the end fields, a
// result record per row (Row), and an end record with the end fields, those known only once the
// run ends (docs/output.md). Each line's keys are sorted.

// endFields are the document's fields that the end record carries.
var endFields = []string{"out_of_bounds", "avg_busbw_gbs", "best", "bus_peak", "timing_only_from_bytes",
	"interrupted", "error", "notes", "wrong_ranks", "expect"}

// StartRecord is the first line of a streamed run: c without its results and end fields.
func StartRecord(c *Coll) ([]byte, error) {
	m, err := fields(c)
	if err != nil {
		return nil, err
	}
	delete(m, "results")
	for _, f := range endFields {
		delete(m, f)
	}
	return record("start", m)
}

// ResultRecord is the line of one row.
func ResultRecord(r *Row) ([]byte, error) {
	m, err := fields(r)
	if err != nil {
		return nil, err
	}
	return record("result", m)
}

// EndRecord is the last line of a streamed run: c's end fields (null where c omits one).
func EndRecord(c *Coll) ([]byte, error) {
	all, err := fields(c)
	if err != nil {
		return nil, err
	}
	m := map[string]json.RawMessage{}
	for _, f := range endFields {
		m[f] = all[f]
	}
	return record("end", m)
}

// record is one line: the fields m and the record kind, with a newline.
func record(kind string, m map[string]json.RawMessage) ([]byte, error) {
	m["record"], _ = json.Marshal(kind)
	line, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
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
		var err error
		switch *rec.Record {
		case "start":
			if c != nil {
				return nil, fmt.Errorf("line %d: a second start record", n)
			}
			c = &Coll{}
			if err = unmarshalLine(line, c); err == nil {
				c.Results = nil // rows come in result records
				err = c.checkRun()
			}
		case "result":
			if c == nil {
				return nil, fmt.Errorf("line %d: a result record before the start record", n)
			}
			var r Row
			if err = unmarshalLine(line, &r); err == nil {
				err = r.check()
			}
			if err == nil {
				c.Results = append(c.Results, r)
			}
		case "end":
			if c == nil {
				return nil, fmt.Errorf("line %d: an end record before the start record", n)
			}
			rows := c.Results
			if err = unmarshalLine(line, c); err == nil {
				err = c.checkRun()
			}
			c.Results = rows
			f.Complete = true
		default:
			return nil, fmt.Errorf("line %d: unknown record %q (expected start, result or end)", n, *rec.Record)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
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
		f.Notices = append(f.Notices, fmt.Sprintf("the run did not finish (no end record): %d rows were written before it stopped", len(c.Results)))
	}
	f.Coll = c
	return f, nil
}

// unmarshalLine reads a record into one of the schema's types, its own fields over v's.
func unmarshalLine(line []byte, v any) error {
	if err := json.Unmarshal(line, v); err != nil {
		return errors.New(jsonErr(err))
	}
	return nil
}
