//go:build !cgo

package diag

import (
	"fmt"

	"github.com/gpubench/gpubench/internal/topo"
)

// cgoBuild says whether this build has cgo, and so NVML and the CUDA and NCCL bindings.
const cgoBuild = false

// ReadDevices needs NVML, which go-nvml reaches through cgo; a build without cgo has no NVML.
func ReadDevices(string, topo.Options) (*Devices, error) {
	return nil, fmt.Errorf("%w: %w", topo.ErrUnavailable, ErrNoCgo)
}
