//go:build !cgo

// Package nccl binds NCCL; this build has no cgo, so it only reports that.
package nccl

import (
	"errors"

	"github.com/gpubench/gpubench/internal/cuda"
)

// ErrNotFound is what Open reports in a build without cgo.
var ErrNotFound = errors.New("this gpubench was built without cgo, so it cannot load NCCL; rebuild with CGO_ENABLED=1 or use --backend sim")

// Backend is absent without cgo.
type Backend struct{ *cuda.Backend }

// Describe is empty without cgo.
func (b *Backend) Describe() string { return "" }

// Open always fails without cgo.
func Open(*cuda.Backend, string) (*Backend, error) { return nil, ErrNotFound }
