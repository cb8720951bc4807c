package burnin

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/gpubench/gpubench/internal/coll"
)

// Reference is bus bandwidth to hold to, GB/s by collective and size, from result files that
// `gpubench <collective> --output json` wrote.
type Reference map[string]map[int64]float64

// ParseReference reads one such result file and adds its out-of-place busbw to ref.
func ParseReference(data []byte, ref Reference) error {
	var doc struct {
		Collective *string `json:"collective"`
		Results    []struct {
			Size       *int64 `json:"size_bytes"`
			OutOfPlace struct {
				BusBW *float64 `json:"busbw_gbs"`
			} `json:"out_of_place"`
		} `json:"results"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("not a gpubench result file (JSON): %v", err)
	}
	if doc.Collective == nil {
		return fmt.Errorf("no \"collective\" field: use a file from gpubench <collective> --output json")
	}
	known := false
	for _, c := range coll.Collectives {
		known = known || c.Name == *doc.Collective
	}
	if !known {
		return fmt.Errorf("unknown collective %q", *doc.Collective)
	}
	if len(doc.Results) == 0 {
		return fmt.Errorf("no results for %s", *doc.Collective)
	}
	m := ref[*doc.Collective]
	if m == nil {
		m = map[int64]float64{}
	}
	for i, r := range doc.Results {
		if r.Size == nil || *r.Size <= 0 || r.OutOfPlace.BusBW == nil {
			return fmt.Errorf("result %d lacks a positive size_bytes or out_of_place.busbw_gbs", i)
		}
		bw := *r.OutOfPlace.BusBW
		if math.IsNaN(bw) || math.IsInf(bw, 0) || bw < 0 {
			return fmt.Errorf("result %d has busbw %v", i, bw)
		}
		m[*r.Size] = math.Max(m[*r.Size], bw)
	}
	ref[*doc.Collective] = m
	return nil
}
