package results

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzRead: the reader never panics, and what it accepts is consistent: exactly one kind of run,
// rows with sizes and figures that are not negative, square matrices, and every error names the
// file. Seeds include nccl-tests' output (its logs and -J JSON) and a gpubench table.
func FuzzRead(f *testing.F) {
	for _, pattern := range []string{"testdata/*.json", "testdata/*.jsonl", "../../cmd/gpubench/testdata/*.json",
		"testdata/nccl-tests/*.log", "testdata/nccl-tests/*.json", "../../cmd/gpubench/testdata/allreduce.golden"} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte(p2pDoc))
	f.Add([]byte(`{"record":"start","collective":"broadcast","backend":"sim"}` + "\n" +
		`{"record":"result","size_bytes":8,"type":"float","root":0,"out_of_place":{"time_us":1,"algbw_gbs":0,"busbw_gbs":0},"in_place":{"time_us":1,"algbw_gbs":0,"busbw_gbs":0}}` + "\n" +
		`{"record":"end","bus_peak":{"gbs":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Read("f.json", data)
		if err != nil {
			if len(err.Error()) < len("f.json: ") || err.Error()[:8] != "f.json: " {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if (file.Coll == nil) == (file.P2P == nil) {
			t.Fatalf("accepted file holds %v and %v", file.Coll, file.P2P)
		}
		if c := file.Coll; c != nil {
			seen := map[RowKey]bool{}
			for _, r := range c.Results {
				k := r.Key(c.Collective)
				if r.Size < 0 || seen[k] || r.OutOfPlace.BusBW < 0 || r.InPlace.TimeUS < 0 {
					t.Fatalf("accepted row %+v", r)
				}
				seen[k] = true
				for _, p := range []Placement{r.OutOfPlace, r.InPlace} {
					if !valid(p.AlgBW) || !valid(p.BusBW) || !valid(p.TimeUS) {
						t.Fatalf("accepted figures %+v", p)
					}
					if pi := p.PerIter; pi != nil && (pi.N < 1 || pi.P50US > pi.P95US || len(pi.TimesUS) > pi.N) {
						t.Fatalf("accepted per_iter %+v", pi)
					}
				}
			}
			if c.BusPeak != nil && !(c.BusPeak.GBs > 0) {
				t.Fatalf("accepted bus peak %+v", c.BusPeak)
			}
			if !file.Complete && file.Form == FormDocument {
				t.Fatal("an incomplete document")
			}
		}
		if p := file.P2P; p != nil {
			for name, m := range p.Matrices {
				if len(m.Values) != len(p.Devices) {
					t.Fatalf("matrix %s: %d rows for %d devices", name, len(m.Values), len(p.Devices))
				}
				for _, row := range m.Values {
					if len(row) != len(p.Devices) {
						t.Fatalf("matrix %s: a row of %d", name, len(row))
					}
				}
			}
		}
	})
}

// FuzzParseThreshold: a threshold that is accepted is a percentage from 0 to 100, and a bare
// number below 1 is never taken.
func FuzzParseThreshold(f *testing.F) {
	for _, s := range []string{"5%", "5", "0.05", "0.05%", "0", "99.9%", "100", "-1", "nan", "inf%", " 2 % ", "1e1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseThreshold(s)
		if err != nil {
			return
		}
		if !(p >= 0 && p < 100) {
			t.Fatalf("ParseThreshold(%q) = %v, outside [0, 100)", s, p)
		}
		if p > 0 && p < 1 && !strings.Contains(s, "%") {
			t.Fatalf("ParseThreshold(%q) = %v: a bare number below 1 was taken", s, p)
		}
	})
}
