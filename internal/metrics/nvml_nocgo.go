//go:build !cgo

package metrics

import (
	"errors"

	"github.com/gpubench/gpubench/internal/metrics/telemetry"
)

// OpenNVML needs cgo (go-nvml does not build without it); this gpubench was built without.
func OpenNVML(string) (telemetry.Source, error) {
	return nil, errors.New("NVML: this gpubench was built without cgo, so it cannot read GPU telemetry")
}
