package coll

import "github.com/gpubench/gpubench/internal/gpu"

// The size at which diag and fleet check data where the sizes they time carry none: the
// simulator backs only --sim-data-cap bytes of device memory (8 MiB by default) with data, and
// calls past it are timed without. CheckBytes, halved until every GPU's two buffers fit, down to
// MinCheckBytes.
const (
	CheckBytes    = 256 << 10
	MinCheckBytes = 1 << 10
)

// CheckSize is the size at which n GPUs' two buffers each (source and destination, or send and
// receive) fit in the backend's data cap: CheckBytes, halved until they fit; 0 when not even
// MinCheckBytes does. A backend without a data cap (a real one) holds data at every size.
func CheckSize(b gpu.Backend, n int) int64 {
	c, ok := b.(interface{ DataCap() int64 })
	if !ok {
		return CheckBytes
	}
	for size := int64(CheckBytes); size >= MinCheckBytes; size /= 2 {
		if int64(2*n)*size <= c.DataCap() {
			return size
		}
	}
	return 0
}
