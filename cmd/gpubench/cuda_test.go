//go:build cgo

package main

import (
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/cuda/cudatest"
)

// The real binding through the CLI, on the stand-in library, each run in its own process; a
// missing library is exit 4.
func TestP2PCUDABackend(t *testing.T) {
	lib := cudatest.Standin(t)
	_, errOut, code := gpubenchProcess(t, nil, "p2p", "--backend", "cuda", "--cuda-lib", "/nonexistent/libcudart.so")
	if code != 4 || !strings.Contains(errOut, "tried /nonexistent/libcudart.so") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("missing library: exit %d, %q; want exit 4 naming what was tried", code, errOut)
	}
	out, errOut, code := gpubenchProcess(t, []string{"GPUBENCH_STANDIN_DEVICES=2"}, "p2p", "--backend", "cuda", "--cuda-lib", lib, "--size", "1M", "--repeat", "2", "--samples", "1")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"p2p, backend cuda\n# CUDA driver 12.4, runtime 12.4, " + lib + "\n", "Device: 1, gpubench stand-in device 1, pciBusID: 11", "Device=0 CAN Access Peer Device=1", "0 mismatched, 0 not checked"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
