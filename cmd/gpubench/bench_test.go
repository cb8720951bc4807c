package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"syscall"
	"testing"
	"time"

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
	start := cpuTime(b)
	for i := 0; i < b.N; i++ {
		if _, err := one.WithNodes(1024); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((cpuTime(b)-start).Seconds()/float64(b.N), "cpu-s/op")
}
