package burnin

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/coll"
)

func TestParseIgnoredXIDs(t *testing.T) {
	for in, want := range map[string][]int{"13,31,43,45,68": DefaultIgnoredXIDs, " 13 , 48": {13, 48}, "none": nil, "": nil, "65536": {65536}} {
		if got, err := ParseIgnoredXIDs(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseIgnoredXIDs(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	// An XID past what --sim-fault xid= takes (99999999 was taken), a sign, a repeat: refused.
	for in, want := range map[string]string{"99999999": "out of range", "0": "out of range", "65537": "out of range", "13,x": `"x" is not an XID`,
		"+13": `"+13" is not an XID`, "-1": "not an XID", "13,": `"" is not an XID`, "13,13": "named twice", "none,13": "not an XID"} {
		if _, err := ParseIgnoredXIDs(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseIgnoredXIDs(%q) = %v; want %q", in, err, want)
		}
	}
}

func TestParseCollectives(t *testing.T) {
	if got, err := ParseCollectives(" allreduce,alltoall"); err != nil || len(got) != 2 || got[0] != coll.AllReduce || got[1] != coll.AllToAll {
		t.Errorf("ParseCollectives = %v, %v", got, err)
	}
	if got, err := ParseCollectives("none"); err != nil || got != nil {
		t.Errorf("none = %v, %v", got, err)
	}
	for in, want := range map[string]string{"allreduce,bogus": `unknown collective "bogus"`, "": `unknown collective ""`, "allreduce, allreduce": "named twice", "allreduce,none": `unknown collective "none"`} {
		if _, err := ParseCollectives(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCollectives(%q) = %v; want %q", in, err, want)
		}
	}
}

func FuzzParseIgnoredXIDs(f *testing.F) {
	for _, s := range []string{"13,31,43,45,68", "none", "", "13,x", "99999999", "0", "+13", " 13 , 48", "13,13", "013,13", ",", "65536", "1e3", "0x10", "９"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		xids, err := ParseIgnoredXIDs(s)
		if err != nil {
			if xids != nil || strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseIgnoredXIDs(%q) = %v with error %q", s, xids, err)
			}
			return
		}
		seen := map[int]bool{}
		for _, x := range xids {
			if x < 1 || x > MaxXID || seen[x] {
				t.Fatalf("ParseIgnoredXIDs(%q) = %v", s, xids)
			}
			seen[x] = true
		}
	})
}

func FuzzParseCollectives(f *testing.F) {
	for _, s := range []string{"allreduce,allgather,reducescatter,alltoall", "none", "", "allreduce,bogus", "allreduce,allreduce", " broadcast ", ",", "None", "sendrecv,reduce"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cs, err := ParseCollectives(s)
		if err != nil {
			if cs != nil || strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseCollectives(%q) = %v with error %q", s, cs, err)
			}
			return
		}
		if len(cs) == 0 && s != "none" {
			t.Fatalf("ParseCollectives(%q) accepted no collectives", s)
		}
		for i, c := range cs {
			if c == nil || !slices.Contains(coll.Collectives, c) || slices.Contains(cs[:i], c) {
				t.Fatalf("ParseCollectives(%q) = %v", s, cs)
			}
		}
	})
}
