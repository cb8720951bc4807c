package gpu_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// FuzzParseTopology checks that ParseTopology never panics on any input, and that a topology it
// accepts is usable: GPUs have routes to each other (pairs sampled as below), the ring bus peak
// is a finite non-negative number, and the topology survives a JSON round trip. Seeds: every
// preset, the files in testdata/fuzz/FuzzParseTopology, and a few broken inputs below.
func FuzzParseTopology(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(presetDir, "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no presets in %s: %v", presetDir, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	minimal, err := json.Marshal(minimalTopology())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(minimal)
	for _, s := range []string{
		"",
		"{}",
		"null",
		`{"format":"gpubench-topology/1"}`,
		`{"format":"gpubench-topology/1","name":"x","nodes":[{"hostname":"h","gpus":[{"id":"g","name":"n","memory_bytes":1,"memory_bandwidth_gbs":1,"compute_capability":"8.0"}]}]} {}`,
		`{"format":"gpubench-topology/2","name":"x","calibration":{"launch_us":4,"algorithms":{"Ring/LL":{"latency_us":-1,"bandwidth":0.9}},"local_copy_efficiency":0.8,"measured":{"min_bytes":8,"max_bytes":1024,"max_ranks":1},"from":["a.json"]},"nodes":[{"hostname":"h","gpus":[{"id":"g","name":"n","memory_bytes":1,"memory_bandwidth_gbs":1,"compute_capability":"8.0"}]}]}`,
		`{"format":"gpubench-topology/2","name":"x","network":{"kind":"efa","layout":"fat-tree","nodes_per_leaf":1,"tiers":3,"switch_latency_us":0.5,"message_us":4,"plugin_latency_us":35},"templates":{"t":{"gpus":[{"id":"g","name":"n","memory_bytes":1,"memory_bandwidth_gbs":1,"compute_capability":"9.0"}],"nics":[{"id":"n0","kind":"efa","gbps":400}],"links":[{"a":"g","b":"n0","kind":"pcie","gen":5,"width":16}]}},"nodes":[{"hostname":"h{i}","template":"t","count":3}]}`,
		`{"format":"gpubench-topology/1","name":"x","p2p":"none","nodes":[{"hostname":"h","gpus":[{"id":"g0","name":"n","memory_bytes":1,"memory_bandwidth_gbs":1,"compute_capability":"8.0"},{"id":"g1","name":"n","memory_bytes":1,"memory_bandwidth_gbs":1,"compute_capability":"8.0"}],"links":[{"a":"g0","b":"g1","kind":"nvlink","gbs":1}]}]}`,
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		topo, err := gpu.ParseTopology(data)
		if err != nil {
			if topo != nil {
				t.Fatalf("ParseTopology returned a topology with error %v", err)
			}
			return
		}
		n := topo.NumGPUs()
		if n < 1 {
			t.Fatalf("accepted a topology with %d GPUs", n)
		}
		// Every pair among the first 16 GPUs, and every GPU both ways with the one as far along
		// the numbering from it: a cluster's every pair would make each input take seconds.
		var pairs [][2]int
		for i := range min(n, 16) {
			for j := range min(n, 16) {
				pairs = append(pairs, [2]int{i, j})
			}
		}
		for i := range n {
			pairs = append(pairs, [2]int{i, n - 1 - i}, [2]int{n - 1 - i, i})
		}
		for _, ij := range pairs {
			i, j := ij[0], ij[1]
			if i == j {
				continue
			}
			p := topo.Route(i, j)
			if p.Hops == nil {
				t.Fatalf("Route(%d, %d) has nil Hops in an accepted topology", i, j)
			}
			if math.IsNaN(p.LatencyUS) || math.IsInf(p.LatencyUS, 0) || p.LatencyUS < 0 {
				t.Fatalf("Route(%d, %d).LatencyUS = %v", i, j, p.LatencyUS)
			}
		}
		gbs, _ := topo.BusPeak(allGPUs(topo))
		if math.IsNaN(gbs) || math.IsInf(gbs, 0) || gbs < 0 {
			t.Fatalf("BusPeak(all %d GPUs) = %v; want a finite number >= 0", n, gbs)
		}
		out, err := json.Marshal(topo)
		if err != nil {
			t.Fatalf("json.Marshal of an accepted topology: %v", err)
		}
		again, err := gpu.ParseTopology(out)
		if err != nil {
			t.Fatalf("ParseTopology(json.Marshal(accepted topology)): %v\n%s", err, out)
		}
		if again.NumGPUs() != n {
			t.Fatalf("round trip changed NumGPUs from %d to %d", n, again.NumGPUs())
		}
	})
}

// FuzzParseDType: a name is a type or an operation whose own name reads back to it, or an error
// of one line; never a panic.
func FuzzParseDType(f *testing.F) {
	for _, s := range []string{"float", "FLOAT", " half ", "bf16", "int8", "sum", "avg", "all", "", "\x00", "floatx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := gpu.ParseDType(s); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseDType(%q): error is not one line: %q", s, err)
			}
		} else if again, err := gpu.ParseDType(d.String()); err != nil || again != d || d.Size() <= 0 {
			t.Fatalf("ParseDType(%q) = %v, which reads back as %v, %v", s, d, again, err)
		}
		if op, err := gpu.ParseRedOp(s); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseRedOp(%q): error is not one line: %q", s, err)
			}
		} else if again, err := gpu.ParseRedOp(op.String()); err != nil || again != op {
			t.Fatalf("ParseRedOp(%q) = %v, which reads back as %v, %v", s, op, again, err)
		}
	})
}
