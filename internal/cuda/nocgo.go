//go:build !cgo

// Package cuda binds the CUDA runtime; this build has no cgo, so it only reports that.
package cuda

import (
	"errors"

	"github.com/gpubench/gpubench/internal/gpu"
)

// ErrNotFound is what Open reports in a build without cgo.
var ErrNotFound = errors.New("this gpubench was built without cgo, so it cannot load the CUDA runtime; rebuild with CGO_ENABLED=1 or use --backend sim")

// Backend is absent without cgo.
type Backend struct {
	gpu.Backend
	gpu.Copier
}

// Describe is empty without cgo.
func (b *Backend) Describe() string { return "" }

// Open always fails without cgo.
func Open(string) (*Backend, error) { return nil, ErrNotFound }
