package results

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// lines turns a collective document into the JSON lines --out streams: a start record, a result
// record per row and, withEnd, an end record.
func lines(t *testing.T, doc []byte, withEnd bool) []byte {
	t.Helper()
	var c Coll
	if err := json.Unmarshal(doc, &c); err != nil {
		t.Fatal(err)
	}
	out, err := StartRecord(&c)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Results {
		line, err := ResultRecord(&c.Results[i])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, line...)
	}
	if withEnd {
		line, err := EndRecord(&c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, line...)
	}
	return out
}

func readFixture(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goldenDoc is a document gpubench allreduce --output json wrote (on dgx-h100x2, 1K:256M:x16),
// kept here so that the reader's tests do not follow the simulator's figures.
const goldenDoc = "testdata/allreduce-doc.json"

// The document gpubench allreduce --output json writes reads back with every figure.
func TestReadDocument(t *testing.T) {
	f, err := Read("a.json", readFixture(t, goldenDoc))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Coll
	if f.Form != FormDocument || !f.Complete || c == nil || f.P2P != nil || len(f.Notices) != 0 {
		t.Fatalf("file %+v; want a complete collective document without notices", f)
	}
	if c.Collective != "allreduce" || c.Backend != "sim" || c.Topology != "dgx-h100x2" || c.Config.Ranks != 16 || len(c.Results) != 5 {
		t.Fatalf("run %+v; want allreduce on sim dgx-h100x2, 16 ranks, 5 rows", c)
	}
	if c.BusPeak == nil || c.BusPeak.GBs != 400 || c.BusPeak.Link != "infiniband" {
		t.Errorf("bus peak %+v; want 400 GB/s infiniband", c.BusPeak)
	}
	r := c.Results[4]
	if r.Size != 67108864 || r.Type != "float" || r.Op != "sum" || r.Root != nil || r.OutOfPlace.BusBW != 249.37728571844764 ||
		r.InPlace.TimeUS != 504.57325 || !r.OutOfPlace.TimingOnly || r.OutOfPlace.Wrong != nil || r.OutOfPlace.PerIter != nil {
		t.Errorf("last row %+v", r)
	}
	if w := c.Results[0].OutOfPlace.Wrong; w == nil || *w != 0 {
		t.Errorf("first row wrong = %v; want 0", w)
	}
}

// Streamed JSON lines read the same as the document; without the end record the rows are kept,
// the file is incomplete, and a notice says so.
func TestReadLines(t *testing.T) {
	doc := readFixture(t, goldenDoc)
	want, err := Read("a.json", doc)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Read("a.jsonl", lines(t, doc, true))
	if err != nil {
		t.Fatal(err)
	}
	if f.Form != FormLines || !f.Complete || len(f.Notices) != 0 {
		t.Fatalf("file %+v; want complete JSON lines", f)
	}
	gotJSON, _ := json.Marshal(f.Coll)
	wantJSON, _ := json.Marshal(want.Coll)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("lines read as\n%s\nwant\n%s", gotJSON, wantJSON)
	}
	f, err = Read("a.jsonl", lines(t, doc, false))
	if err != nil {
		t.Fatal(err)
	}
	if f.Complete || len(f.Coll.Results) != 5 || f.Coll.BusPeak != nil || len(f.Notices) != 1 || !strings.Contains(f.Notices[0], "did not finish") {
		t.Errorf("without an end record: complete %v, %d rows, notices %q; want incomplete, 5 rows, a notice", f.Complete, len(f.Coll.Results), f.Notices)
	}
}

// A run that stopped in the middle of writing a line keeps the rows before it.
func TestReadCrashedStream(t *testing.T) {
	f, err := ReadFile("testdata/stream-crashed.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if f.Complete || len(f.Coll.Results) != 1 || len(f.Notices) != 2 || !strings.Contains(f.Notices[0], "line 3 is cut short") {
		t.Errorf("complete %v, %d rows, notices %q; want incomplete, 1 row, the cut line and the missing end noticed", f.Complete, len(f.Coll.Results), f.Notices)
	}
}

func TestReadPerIter(t *testing.T) {
	f, err := ReadFile("testdata/periter-old.json")
	if err != nil {
		t.Fatal(err)
	}
	p := f.Coll.Results[0].OutOfPlace.PerIter
	if p == nil || p.N != 4 || p.P50US != 18.3 || p.P95US != 19 || p.CV != 0.02 || len(p.TimesUS) != 4 {
		t.Errorf("per_iter %+v", p)
	}
	if f.Coll.Results[2].OutOfPlace.PerIter != nil {
		t.Error("a row without per_iter read with one")
	}
}

const p2pDoc = `{"gpubench_version": "test", "command": "p2p", "backend": "sim", "topology": "t",
 "devices": [{"device": 0}, {"device": 1}],
 "matrices": {"uni_enabled": {"title": "Uni", "unit": "GB/s", "values": [[100, null], [50, 100]],
   "na_reasons": [[null, "no P2P access"], [null, null]], "data_mismatch": [[false, false], [false, false]]}}}`

func TestReadP2P(t *testing.T) {
	f, err := Read("p.json", []byte(p2pDoc))
	if err != nil {
		t.Fatal(err)
	}
	p := f.P2P
	if f.Coll != nil || p == nil || len(p.Devices) != 2 || len(p.Matrices) != 1 {
		t.Fatalf("file %+v", f)
	}
	m := p.Matrices["uni_enabled"]
	if m.Values[0][1] != nil || m.NA[0][1] != "no P2P access" || *m.Values[1][0] != 50 || m.Unit != "GB/s" || p.Devices[1].Device != 1 {
		t.Errorf("matrix %+v", m)
	}
}

// Anything else is refused with an error naming the file and what was wrong.
func TestReadRejects(t *testing.T) {
	doc := string(readFixture(t, goldenDoc))
	start := `{"record":"start","collective":"allreduce","backend":"sim"}`
	res := `{"record":"result","size_bytes":8,"type":"float","out_of_place":{"time_us":1,"algbw_gbs":0,"busbw_gbs":0},"in_place":{"time_us":1,"algbw_gbs":0,"busbw_gbs":0}}`
	cases := []struct{ name, data, want string }{
		{"empty", "  \n", "empty file"},
		{"text", "# nThread 1 nGpus 8", "does not start with a JSON object"},
		{"array", "[1, 2]", "does not start with a JSON object"},
		{"cut", doc[:len(doc)/2], "ends early"},
		{"two docs", doc + doc, "more than one JSON value"},
		{"other json", `{"name": "x"}`, "no \"collective\" field"},
		{"unknown collective", strings.Replace(doc, `"collective": "allreduce"`, `"collective": "allsum"`, 1), `unknown collective "allsum"`},
		{"no results", `{"collective": "allreduce", "backend": "sim"}`, `no "results" array`},
		{"string size", strings.Replace(doc, `"size_bytes": 1024`, `"size_bytes": "1K"`, 1), `field "results.size_bytes"`},
		{"negative busbw", strings.Replace(doc, `"busbw_gbs": 0.073680797134124`, `"busbw_gbs": -1`, 1), "busbw_gbs -1"},
		{"absurd busbw", strings.Replace(doc, `"busbw_gbs": 0.073680797134124`, `"busbw_gbs": 1e308`, 1), "busbw_gbs 1e+308 is not a number from 0 to 1e12"},
		{"bandwidth without time", strings.Replace(doc, `"time_us": 26.05835,`, `"time_us": 0,`, 1), "time_us 0 with algbw_gbs"},
		{"missing time", strings.Replace(doc, `"time_us": 26.05835,`, ``, 1), `results[0]: out_of_place: no "time_us"`},
		{"missing size", strings.Replace(doc, `"size_bytes": 16384,`, ``, 1), `results[1]: no "size_bytes"`},
		{"null time", strings.Replace(doc, `"time_us": 26.05835,`, `"time_us": null,`, 1), `results[0]: out_of_place: no "time_us"`},
		{"missing in_place", `{"collective": "allreduce", "backend": "sim", "results": [{"size_bytes": 8, "type": "float", "out_of_place": {"time_us": 1, "algbw_gbs": 0, "busbw_gbs": 0}}]}`, `results[0]: no "in_place"`},
		{"negative rank time", strings.Replace(doc, `"timing_only": false
      },
      "in_place"`, `"timing_only": false, "rank_time_us": [1, -2]
      },
      "in_place"`, 1), "results[0]: out_of_place: rank_time_us[1] -2"},
		{"per_iter without p95", strings.Replace(doc, `"timing_only": false
      },
      "in_place"`, `"timing_only": false, "per_iter": {"n": 2, "mean_us": 1, "p50_us": 1, "p99_us": 4, "max_us": 5, "cv": 0.1}
      },
      "in_place"`, 1), `results[0]: out_of_place: per_iter: no "p95_us"`},
		{"string per_iter time", strings.Replace(doc, `"timing_only": false
      },
      "in_place"`, `"timing_only": false, "per_iter": {"n": 2, "times_us": ["1"]}
      },
      "in_place"`, 1), `field "results.out_of_place.per_iter.times_us" holds a JSON string`},
		{"bus peak without gbs", strings.Replace(doc, `"gbs": 400,`, ``, 1), "bus_peak.gbs 0 is not a bandwidth"},
		{"number topology", strings.Replace(doc, `"topology": "dgx-h100x2"`, `"topology": 7`, 1), `field "topology" holds a JSON number`},
		{"p2p device without ordinal", strings.Replace(p2pDoc, `{"device": 1}`, `{"rank": 1}`, 1), `devices[1]: no "device"`},
		{"duplicate row", strings.Replace(doc, `"size_bytes": 262144`, `"size_bytes": 1024`, 1), "appears twice"},
		{"percentiles", strings.Replace(doc, `"timing_only": false
      },
      "in_place"`, `"timing_only": false, "per_iter": {"n": 2, "mean_us": 1, "p50_us": 3, "p95_us": 2, "p99_us": 4, "max_us": 5, "cv": 0.1}
      },
      "in_place"`, 1), "percentiles out of order"},
		{"p2p ragged", strings.Replace(p2pDoc, `[50, 100]`, `[50]`, 1), "row 1 has 1 cells for 2 devices"},
		{"p2p no matrices", `{"command": "p2p", "backend": "sim", "devices": []}`, `no "matrices"`},
		{"lines bad middle", start + "\n{oops\n" + res + "\n", "line 2: not valid JSON"},
		{"lines cut in a string", start + "\n" + `{"algorithm":"R` + "\n" + res + "\n", "line 2: not valid JSON"},
		{"lines result first", res + "\n" + start + "\n", "line 1: a result record before the start record"},
		{"lines after end", start + "\n" + `{"record":"end"}` + "\n" + res + "\n", "line 3: a record after the end record"},
		{"lines unknown record", start + "\n" + `{"record":"middle"}` + "\n", `line 2: unknown record "middle"`},
		{"lines no record", start + "\n" + `{"size_bytes": 8}` + "\n", `line 2: no "record" field`},
		{"lines two starts", start + "\n" + start + "\n", "line 2: a second start record"},
		{"lines bad end", start + "\n" + res + "\n" + `{"record":"end","bus_peak":{"gbs":-1}}` + "\n", "line 3: bus_peak.gbs -1 is not a bandwidth"},
		{"lines row without time", start + "\n" + strings.Replace(res, `"time_us":1,`, ``, 1) + "\n", `line 2: out_of_place: no "time_us"`},
		{"lines bad row", start + "\n" + strings.Replace(res, `"type":"float",`, ``, 1) + "\n", `line 2: no "type"`},
		{"lines no start", `{"record":"end"}` + "\n", "line 1: an end record before the start record"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read("x.json", []byte(c.data))
			if err == nil {
				t.Fatalf("read; want an error containing %q", c.want)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "x.json: ") || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q; want one line naming x.json and containing %q", msg, c.want)
			}
		})
	}
}

// On 8 GPUs all-gather's smallest sizes round down to 0-byte rows, as nccl-tests prints them; a
// fine additive sweep can round two sizes to one. Such adjacent repeats read as one row.
func TestReadRepeatedSizes(t *testing.T) {
	doc := string(readFixture(t, goldenDoc))
	zero := strings.Replace(strings.Replace(doc, `"size_bytes": 16384`, `"size_bytes": 1024`, 1), `"size_bytes": 1024`, `"size_bytes": 0`, 2)
	f, err := Read("zero.json", []byte(zero))
	if err != nil {
		t.Fatalf("0-byte rows repeated: %v", err)
	}
	if f.Coll.Results[0].Size != 0 || f.Coll.Results[1].Size != 262144 || len(f.Notices) != 0 {
		t.Errorf("rows %d, %d B; notices %q: want the 0 B row once, then 256 KiB, no notice", f.Coll.Results[0].Size, f.Coll.Results[1].Size, f.Notices)
	}
	f, err = Read("step.json", []byte(strings.Replace(doc, `"size_bytes": 16384`, `"size_bytes": 1024`, 1)))
	if err != nil {
		t.Fatalf("a size repeated: %v", err)
	}
	if f.Coll.Results[1].Size != 262144 || len(f.Notices) != 1 || !strings.Contains(f.Notices[0], "1 rows dropped") {
		t.Errorf("second row %d B; notices %q: want the repeat dropped with a notice", f.Coll.Results[1].Size, f.Notices)
	}
	streamed, err := Read("step.jsonl", lines(t, []byte(zero), true))
	if err != nil || len(streamed.Coll.Results) != len(f.Coll.Results) {
		t.Fatalf("JSON lines with repeats: %v", err)
	}
}

// gpubench's other JSON given where results go is named, with where it belongs.
func TestReadOtherGpubenchJSON(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`{"format": "gpubench-topology/2", "name": "x"}`, "a gpubench topology file, not results: give it as --topology"},
		{`{"topology": "dgx-h100", "out": "c.json", "calibration": {}}`, "calibrate's report, not results"},
		{`{"threshold_percent": 5, "comparisons": []}`, "compare's report, not results"},
		{`{"collective": "allreduce", "bytes": 8, "chosen": {}}`, "gpubench explain's output, not results"},
	} {
		if _, err := Read("x.json", []byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.doc, err, c.want)
		}
	}
}
