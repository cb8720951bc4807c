// Package nvmlib owns loading NVML through go-nvml for the packages that read it (topo, diag,
// metrics): one way to name the library, one set of words for why it did not start, and the small
// helpers every reader needs. go-nvml needs cgo; without it NVML is unavailable, and says so.
package nvmlib

import "errors"

// ErrUnavailable is wrapped, with the reason and how to fix it, by every error that means NVML
// cannot be used on this machine.
var ErrUnavailable = errors.New("NVML is not available")

// NoCgo is why a build without cgo has no NVML.
const NoCgo = "this gpubench was built without cgo, which NVML needs; build it with CGO_ENABLED=1 and gcc"
