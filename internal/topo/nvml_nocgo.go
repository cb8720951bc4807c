//go:build !cgo

package topo

import "fmt"

// Discover needs NVML, which go-nvml reaches through cgo; a build without cgo has no NVML.
func Discover(Options) (*Report, error) {
	return nil, fmt.Errorf("%w: this gpubench was built without cgo, which NVML needs; build it with CGO_ENABLED=1 and gcc", ErrUnavailable)
}
