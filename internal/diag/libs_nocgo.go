//go:build !cgo

package diag

import (
	"github.com/gpubench/gpubench/internal/cuda"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/nccl"
)

// OpenLibraries cannot load anything without cgo: the CUDA and NCCL bindings need it.
func OpenLibraries(string, string) (cu, nc LibInfo, b gpu.Backend, why error) {
	cu.Err, nc.Err = cuda.ErrNotFound, nccl.ErrNotFound
	return cu, nc, nil, cuda.ErrNotFound
}
