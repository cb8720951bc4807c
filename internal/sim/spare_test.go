package sim

import (
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Freed memory kept for reuse counts against the data cap with the memory in use, so the cap
// bounds what the simulated devices hold, whatever the order of sizes.
func TestSpareMemoryWithinTheCap(t *testing.T) {
	topo, err := LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	const dataCap = 1 << 20
	b, err := New(topo, Options{DataCap: dataCap})
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{1 << 18, 1 << 19, 1 << 17, 1 << 19, 3 << 18, 1 << 16, 1 << 20} {
		var bufs []gpu.Buffer
		for dev := range 4 {
			x, err := b.Alloc(dev, size)
			if err != nil {
				t.Fatal(err)
			}
			if x.HasData() {
				if err := b.CopyIn(x, make([]byte, size)); err != nil { // takes host memory
					t.Fatal(err)
				}
			}
			bufs = append(bufs, x)
		}
		if b.backed+b.spareBytes > dataCap {
			t.Fatalf("size %d: %d bytes in use and %d spare, over the %d-byte cap", size, b.backed, b.spareBytes, dataCap)
		}
		for _, x := range bufs {
			if err := b.Free(x); err != nil {
				t.Fatal(err)
			}
		}
		if b.backed+b.spareBytes > dataCap || b.backed != 0 {
			t.Fatalf("after freeing size %d: %d in use, %d spare", size, b.backed, b.spareBytes)
		}
	}
}
