//go:build !cgo

package metrics

import (
	"fmt"

	"github.com/gpubench/gpubench/internal/metrics/telemetry"
	"github.com/gpubench/gpubench/internal/nvmlib"
)

// OpenNVML needs cgo (go-nvml does not build without it); this gpubench was built without.
func OpenNVML(string) (telemetry.Source, error) {
	return nil, fmt.Errorf("%w: %s", nvmlib.ErrUnavailable, nvmlib.NoCgo)
}
