package burnin

import (
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/results"
)

func TestReferenceAdd(t *testing.T) {
	ref := Reference{}
	doc := `{"collective":"allgather","backend":"sim","results":[
	{"size_bytes":0,"count":0,"type":"float","out_of_place":{"time_us":1,"algbw_gbs":0,"busbw_gbs":0},"in_place":{"time_us":1,"algbw_gbs":0,"busbw_gbs":0}},
	{"size_bytes":0,"count":0,"type":"float","out_of_place":{"time_us":1,"algbw_gbs":0,"busbw_gbs":0},"in_place":{"time_us":1,"algbw_gbs":0,"busbw_gbs":0}},
	{"size_bytes":1024,"count":32,"type":"float","out_of_place":{"time_us":9,"algbw_gbs":0.1,"busbw_gbs":1.5},"in_place":{"time_us":9,"algbw_gbs":0.1,"busbw_gbs":1.5}},
	{"size_bytes":1073741824,"count":33554432,"type":"float","out_of_place":{"time_us":3000,"algbw_gbs":358,"busbw_gbs":361.2},"in_place":{"time_us":3000,"algbw_gbs":358,"busbw_gbs":361.2}}]}`
	f, err := results.Read("ref.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.Add(f.Coll); err != nil {
		t.Fatal(err)
	}
	if got := ref["allgather"]; got[1<<30] != 361.2 || got[1024] != 1.5 || len(got) != 2 {
		t.Errorf("reference %v; want 1 KiB and 1 GiB, the 0-byte rows skipped", got)
	}
	f.Coll.Results = f.Coll.Results[:1]
	if err := (Reference{}).Add(f.Coll); err == nil || !strings.Contains(err.Error(), "no row of allgather above 0 bytes") {
		t.Errorf("only 0-byte rows: %v", err)
	}
}
