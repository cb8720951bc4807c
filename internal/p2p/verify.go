package p2p

import (
	"bytes"
	"encoding/binary"

	"github.com/gpubench/gpubench/internal/gpu"
)

// chunk bounds the host memory that filling and checking use.
const chunk = 4 << 20

// fill writes a pattern that differs from device to device into buf, so that a copy from the wrong
// source shows as well as a corrupted one.
func (r *runner) fill(buf gpu.Buffer, seed int) error {
	if !buf.HasData() {
		return nil
	}
	host, _ := r.hostChunks(min(chunk, buf.Len()))
	state := uint64(seed+2) * 0x9e3779b97f4a7c15
	for off := int64(0); off < buf.Len(); off += chunk {
		n := min(chunk, buf.Len()-off)
		for i := int64(0); i < n; i += 8 {
			state ^= state << 13
			state ^= state >> 7
			state ^= state << 17
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], state)
			copy(host[i:n], w[:])
		}
		if err := r.b.CopyIn(buf.Slice(off, n), host[:n]); err != nil {
			return err
		}
	}
	return nil
}

// hostChunks returns two host buffers of n bytes (at most chunk), in memory the runner keeps: a
// sweep fills and checks thousands of buffers, and fresh memory for each costs page faults.
func (r *runner) hostChunks(n int64) (a, b []byte) {
	if int64(len(r.host)) < 2*n {
		r.host = make([]byte, 2*n)
	}
	return r.host[:n], r.host[n : 2*n]
}

// verify compares a copy's destination with its source. checked is false when there is no data to
// compare (verification off, or buffers past the simulator's data cap).
func (r *runner) verify(c gpu.Copy) (ok, checked bool, err error) {
	if !r.opt.Verify || !c.Src.HasData() || !c.Dst.HasData() {
		return false, false, nil
	}
	n := c.Src.Len()
	a, b := r.hostChunks(min(chunk, n))
	for off := int64(0); off < n; off += chunk {
		m := min(chunk, n-off)
		if err := r.b.CopyOut(a[:m], c.Src.Slice(off, m)); err != nil {
			return false, false, err
		}
		if err := r.b.CopyOut(b[:m], c.Dst.Slice(off, m)); err != nil {
			return false, false, err
		}
		if !bytes.Equal(a[:m], b[:m]) {
			return false, true, nil
		}
	}
	return true, true, nil
}
