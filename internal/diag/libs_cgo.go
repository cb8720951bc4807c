//go:build cgo

package diag

import (
	"fmt"

	"github.com/gpubench/gpubench/internal/cuda"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/nccl"
)

// OpenLibraries loads the CUDA runtime and NCCL as every command does (cuda.Open, nccl.Open),
// and returns what each load gave, with the NCCL backend when both loaded (else nil and why).
func OpenLibraries(cudaLib, ncclLib string) (cu, nc LibInfo, b gpu.Backend, why error) {
	cb, err := cuda.Open(cudaLib)
	if err != nil {
		cu.Err = err
		return cu, nc, nil, fmt.Errorf("the CUDA runtime did not load: %w", err)
	}
	cu = LibInfo{Path: cb.Path, Version: cb.Runtime, Driver: cb.Driver}
	nb, err := nccl.Open(cb, ncclLib)
	if err != nil {
		nc.Err = err
		return cu, nc, nil, fmt.Errorf("NCCL did not load: %w", err)
	}
	nc = LibInfo{Path: nb.NCCLPath, Version: nb.Version}
	return cu, nc, nb, nil
}
