package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/sim"
)

// peakRSS reports the process's peak resident memory so far: benchmarks run smallest first, so
// each one's figure is its own unless a smaller one before it peaked higher.
func peakRSS(b *testing.B) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MB")
}

// BenchmarkSweep measures what `gpubench COLLECTIVE --backend sim --topology dgx-h100 --nodes N
// --sizes 8B:8GB` costs the host at 8, 64, 512 and 8,192 simulated GPUs: CPU seconds per run and
// the process's peak resident memory (make bench prints both). Goals at 8,192 GPUs: all-reduce
// under 10 s of CPU, all-to-all under 60 s, each under 1 GB.
func BenchmarkSweep(b *testing.B) {
	for _, coll := range []string{"allreduce", "alltoall"} {
		for _, nodes := range []int{1, 8, 64, 1024} {
			b.Run(fmt.Sprintf("%s/gpus=%d", coll, 8*nodes), func(b *testing.B) {
				e := &env{stdout: io.Discard, stderr: io.Discard, pid: 1, version: "bench", now: time.Now}
				args := []string{coll, "--backend", "sim", "--topology", "dgx-h100", "--nodes", strconv.Itoa(nodes), "--sizes", "8B:8GB"}
				start := cpuTime(b)
				for i := 0; i < b.N; i++ {
					if code := run(context.Background(), e, args); code != 0 {
						b.Fatalf("exit %d", code)
					}
				}
				b.ReportMetric((cpuTime(b)-start).Seconds()/float64(b.N), "cpu-s/op")
				peakRSS(b)
			})
		}
	}
}

// BenchmarkLoadTopology measures loading 1,024 DGX H100 (8,192 GPUs) on their fabric, before
// anything runs. Goal: under 1 s.
func BenchmarkLoadTopology(b *testing.B) {
	one, err := sim.LoadTopology("dgx-h100")
	if err != nil {
		b.Fatal(err)
	}
	benchWithNodes(b, one, 1024)
}

// BenchmarkLoadWideNodes measures loading the widest cluster a topology may describe: 64 nodes of
// 256 GPUs (16,384 in all), each GPU behind its own PCIe switch under one of two CPUs, one NIC a
// node. Every GPU's way to its NIC crosses the node's CPUs; the ways come from one search from
// each NIC (it took 2.2 s while each GPU searched its node three times).
func BenchmarkLoadWideNodes(b *testing.B) {
	n := gpu.Node{Hostname: "wide", CPUs: []gpu.CPU{{ID: "cpu0"}, {ID: "cpu1"}},
		NICs:  []gpu.NIC{{ID: "nic0", Kind: "infiniband", Gbps: 400}},
		Links: []gpu.Link{{A: "cpu0", B: "cpu1", Kind: gpu.LinkSMP, GBs: 64}, {A: "nic0", B: "cpu0", Kind: gpu.LinkPCIe, GBs: 64}}}
	for i := range gpu.MaxNodeGPUs {
		g, sw := fmt.Sprintf("gpu%d", i), fmt.Sprintf("sw%d", i)
		n.GPUs = append(n.GPUs, gpu.GPU{ID: g, Name: "NVIDIA H100 PCIe", MemoryBytes: 80 << 30, MemoryGBs: 2000, ComputeCapability: "9.0"})
		n.Switches = append(n.Switches, gpu.Switch{ID: sw, Kind: "pcie"})
		n.Links = append(n.Links, gpu.Link{A: g, B: sw, Kind: gpu.LinkPCIe, GBs: 64},
			gpu.Link{A: sw, B: fmt.Sprintf("cpu%d", i%2), Kind: gpu.LinkPCIe, GBs: 64})
	}
	one := &gpu.Topology{Format: gpu.TopologyFormat2, Name: "wide", Nodes: []gpu.Node{n}}
	if err := one.Validate(); err != nil {
		b.Fatal(err)
	}
	benchWithNodes(b, one, 64)
}

// benchWithNodes reports the CPU seconds of making (and validating) a cluster of nodes copies of
// one's node.
func benchWithNodes(b *testing.B, one *gpu.Topology, nodes int) {
	start := cpuTime(b)
	for i := 0; i < b.N; i++ {
		if _, err := one.WithNodes(nodes); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((cpuTime(b)-start).Seconds()/float64(b.N), "cpu-s/op")
}
