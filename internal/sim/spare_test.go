package sim

import (
	"testing"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Freed memory kept for reuse counts against the data cap with the memory buffers hold, so the cap
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
		if b.held+b.spareBytes > dataCap || b.held != b.backed {
			t.Fatalf("size %d: %d bytes held (%d backed) and %d spare, over the %d-byte cap", size, b.held, b.backed, b.spareBytes, dataCap)
		}
		for _, x := range bufs {
			if err := b.Free(x); err != nil {
				t.Fatal(err)
			}
		}
		if b.held+b.spareBytes > dataCap || b.backed != 0 || b.held != 0 {
			t.Fatalf("after freeing size %d: %d backed, %d held, %d spare", size, b.backed, b.held, b.spareBytes)
		}
	}
}

// Buffers that fill the cap, freed and allocated again at the same sizes (a burn-in's every pass,
// a benchmark's every size), take back the memory the last ones had: the new buffers are backed
// before they take any, and counting them then would have dropped the spare memory first.
func TestSpareMemoryReusedWhenBuffersFillTheCap(t *testing.T) {
	topo, err := LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	const dataCap, size = 1 << 20, 1 << 18
	b, err := New(topo, Options{DataCap: dataCap})
	if err != nil {
		t.Fatal(err)
	}
	had := map[*byte]bool{}
	for pass := range 3 {
		var bufs []gpu.Buffer
		for dev := range 4 { // 4 x 256 KiB: the whole cap
			x, err := b.Alloc(dev, size)
			if err != nil {
				t.Fatal(err)
			}
			bufs = append(bufs, x)
		}
		for _, x := range bufs {
			if err := b.CopyIn(x, make([]byte, size)); err != nil {
				t.Fatal(err)
			}
			p := &x.(*buffer).data[0]
			if pass > 0 && !had[p] {
				t.Errorf("pass %d: a buffer took fresh memory where %d spare bytes of its size were kept", pass, b.spareBytes+size)
			}
			had[p] = true
		}
		for _, x := range bufs {
			if err := b.Free(x); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(had) != 4 {
		t.Errorf("three passes of 4 buffers took %d pieces of memory; want the first pass's 4", len(had))
	}
}
