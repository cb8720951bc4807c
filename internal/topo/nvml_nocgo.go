//go:build !cgo

package topo

import (
	"fmt"

	"github.com/gpubench/gpubench/internal/nvmlib"
)

// Discover needs NVML, which go-nvml reaches through cgo; a build without cgo has no NVML.
func Discover(Options) (*Report, error) {
	return nil, fmt.Errorf("%w: %s", ErrUnavailable, nvmlib.NoCgo)
}
