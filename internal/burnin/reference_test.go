package burnin

import (
	"math"
	"strings"
	"testing"
)

func TestParseReference(t *testing.T) {
	ref := Reference{}
	doc := `{"collective":"allreduce","results":[{"size_bytes":1024,"out_of_place":{"busbw_gbs":1.5}},{"size_bytes":1073741824,"out_of_place":{"busbw_gbs":361.2}}]}`
	if err := ParseReference([]byte(doc), ref); err != nil {
		t.Fatal(err)
	}
	if ref["allreduce"][1<<30] != 361.2 || ref["allreduce"][1024] != 1.5 {
		t.Errorf("reference %v", ref)
	}
	for _, tc := range []struct{ doc, want string }{
		{`nope`, "not a gpubench result file"},
		{`{"results":[]}`, `no "collective" field`},
		{`{"collective":"allsum","results":[{"size_bytes":1,"out_of_place":{"busbw_gbs":1}}]}`, `unknown collective "allsum"`},
		{`{"collective":"allgather","results":[]}`, "no results for allgather"},
		{`{"collective":"allgather","results":[{"size_bytes":0,"out_of_place":{"busbw_gbs":1}}]}`, "result 0 lacks"},
		{`{"collective":"allgather","results":[{"size_bytes":8,"out_of_place":{"busbw_gbs":-1}}]}`, "result 0 has busbw -1"},
		{`{"collective":"allgather","results":[{"size_bytes":8,"out_of_place":{}}]}`, "result 0 lacks"},
	} {
		if err := ParseReference([]byte(tc.doc), Reference{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseReference(%s) = %v; want %q", tc.doc, err, tc.want)
		}
	}
}

func FuzzParseReference(f *testing.F) {
	f.Add(`{"collective":"allreduce","results":[{"size_bytes":1024,"out_of_place":{"busbw_gbs":1.5}}]}`)
	f.Add(`{"collective":"sendrecv","results":[{"size_bytes":8,"out_of_place":{"busbw_gbs":0}}]}`)
	f.Add(`{"collective":"allreduce","results":[{"size_bytes":-1}]}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		ref := Reference{}
		if err := ParseReference([]byte(s), ref); err != nil {
			if len(ref) != 0 {
				t.Fatalf("ParseReference(%q) failed (%v) but filled %v", s, err, ref)
			}
			return
		}
		for c, m := range ref {
			for size, bw := range m {
				if size <= 0 || bw < 0 || math.IsNaN(bw) || math.IsInf(bw, 0) {
					t.Fatalf("ParseReference(%q): %s %d -> %v", s, c, size, bw)
				}
			}
		}
	})
}
