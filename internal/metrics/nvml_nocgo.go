//go:build !cgo

package metrics

import (
	"fmt"

	"github.com/gpubench/gpubench/internal/metrics/telemetry"
	"github.com/gpubench/gpubench/internal/topo"
)

// OpenNVML needs cgo (go-nvml does not build without it); this gpubench was built without.
func OpenNVML(string) (telemetry.Source, error) {
	return nil, fmt.Errorf("%w: this gpubench was built without cgo, which NVML needs; build it with CGO_ENABLED=1 and gcc", topo.ErrUnavailable)
}
