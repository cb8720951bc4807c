package diag

import (
	"errors"

	"github.com/gpubench/gpubench/internal/topo"
)

// ErrNoCgo is why a build without cgo has no NVML: go-nvml needs cgo.
var ErrNoCgo = errors.New("this gpubench was built without cgo, which NVML needs; build it with CGO_ENABLED=1 and gcc")

// Devices is what NVML says of the machine.
type Devices struct {
	Driver      string // the driver version NVML reports
	CUDAVersion int    // the CUDA version the driver supports, 1000*major+10*minor; 0 unknown
	GPUs        []GPU
	Topo        *topo.Report // the machine as gpubench topo reads it, with the P2P read matrix
	TopoErr     error        // why Topo is nil
}

// GPU is one GPU's health and configuration; nil pointers are what NVML could not answer.
type GPU struct {
	Index                        int
	Name, UUID, BusID            string
	PState                       int // performance state: 0 busy ... 15 idle; -1 unknown
	Persistence                  *bool
	ECC, ECCPending              *bool
	RetiredPending               *bool
	RemapPending, RemapFailed    *bool
	MIG, MIGPending              *bool
	ClockEvents                  *uint64      // active clock event ("throttle") reasons, NVML's bits
	Gen, Width, GenMax, WidthMax int          // PCIe link now and at most; 0 unknown
	NVLinks                      map[int]bool // each link NVML answers for, by number: up or not
}
