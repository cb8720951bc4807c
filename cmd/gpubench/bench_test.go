package main

import (
	"context"
	"io"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAllReduceSweep measures what `gpubench allreduce --backend sim --topology dgx-h100
// --sizes 8B:8GB` costs the host: CPU seconds per run and the process's peak resident memory
// (make bench prints both; the goal is well under 1 s and under 300 MB).
func BenchmarkAllReduceSweep(b *testing.B) {
	e := &env{stdout: io.Discard, stderr: io.Discard, pid: 1, version: "bench", now: time.Now}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	for i := 0; i < b.N; i++ {
		if code := run(context.Background(), e, []string{"allreduce", "--backend", "sim", "--topology", "dgx-h100", "--sizes", "8B:8GB"}); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
	b.ReportMetric((cpu()-start).Seconds()/float64(b.N), "cpu-s/op")
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MB")
}
