package sim

import (
	"bytes"
	"testing"
)

// A meeting's scratch hands out slices that do not overlap, keeps what was written to a slice
// when it grows past it, and after a reset hands the same memory out again, so that meetings of
// one size allocate nothing after the first.
func TestScratchReusesMemory(t *testing.T) {
	var s scratch
	a := s.take(3)
	copy(a, "abc")
	b := s.take(5) // past the 3 bytes held: fresh memory, twice as much or more (6)
	copy(b, "defgh")
	c := s.take(4) // past the 6: 12 fresh bytes
	copy(c, "ijkl")
	if string(a) != "abc" || string(b) != "defgh" || string(c) != "ijkl" {
		t.Fatalf("slices of one meeting overwrote each other: %q %q %q", a, b, c)
	}
	if cap(a) != 3 || cap(b) != 5 {
		t.Errorf("capacities %d and %d; an append to a slice must not reach the next", cap(a), cap(b))
	}
	s.reset()
	d := s.take(5)
	if &d[0] != &c[0] { // the memory the scratch last grew to
		t.Error("after a reset the scratch did not hand out the memory it held")
	}
	if allocs := testing.AllocsPerRun(100, func() {
		s.reset()
		s.take(5)
		s.take(4)
	}); allocs != 0 {
		t.Errorf("a meeting of sizes the scratch has held allocated %v times", allocs)
	}
	s.reset()
	big := s.take(1 << 20)
	if len(big) != 1<<20 || !bytes.Equal(b, []byte("defgh")) {
		t.Errorf("growing to %d bytes lost what earlier slices held: %q", len(big), b)
	}
}
