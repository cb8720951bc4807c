//go:build cgo

package p2p_test

import (
	"context"
	"os"
	"testing"

	"github.com/gpubench/gpubench/internal/cuda"
	"github.com/gpubench/gpubench/internal/p2p"
)

// TestRealGPU runs the benchmark on the machine's GPUs. It skips where there are none, unless
// GPUBENCH_REQUIRE_GPU=1 says a GPU must be there.
func TestRealGPU(t *testing.T) {
	b, err := cuda.Open("")
	if err != nil {
		if os.Getenv("GPUBENCH_REQUIRE_GPU") == "1" {
			t.Fatalf("GPUBENCH_REQUIRE_GPU=1 but no GPU could be used: %v", err)
		}
		t.Skipf("no GPU: %v", err)
	}
	res, err := p2p.Run(context.Background(), b, p2p.Options{Size: 64 << 20, Repeat: 8, Samples: 3, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mismatched != 0 || res.Verified == 0 {
		t.Errorf("verified %d, mismatched %d: every copy must arrive intact", res.Verified, res.Mismatched)
	}
	for i, h := range res.Host {
		// Any PCIe or C2C link moves a pinned 64 MiB copy at well over 1 GB/s, and a GPU copies
		// inside its own memory faster than over PCIe.
		if h.H2D.Value == nil || *h.H2D.Value < 1 || h.Local.Value == nil || *h.Local.Value < *h.H2D.Value {
			t.Errorf("device %d: H2D %v, local %v", i, h.H2D.Value, h.Local.Value)
		}
	}
	t.Logf("driver %d runtime %d, %s: H2D %.2f D2H %.2f local %.2f GB/s", b.Driver, b.Runtime, b.Devices()[0].Name,
		*res.Host[0].H2D.Value, *res.Host[0].D2H.Value, *res.Host[0].Local.Value)
}
