package sim

import "github.com/gpubench/gpubench/internal/gpu"

// Received is how many bytes a communicator across processes has read from its exchange.
func Received(c gpu.Comm) int64 { return c.(*joined).received }

// MaxDeferred is how many timing-only calls a rank keeps before it meets anyway.
const MaxDeferred = maxDeferred
