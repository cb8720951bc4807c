// Package telemetry is the vocabulary of GPU health telemetry that gpubench samples, exports and
// judges: what a source (NVML on real GPUs, the simulator's model) reports about each GPU. It is
// pure Go and imports nothing else of gpubench, so that every source can depend on it.
package telemetry

import (
	"math"
	"time"
)

// Unknown marks a figure the source cannot report (not supported, or the call failed).
var Unknown = math.NaN()

// Known reports whether v holds a figure.
func Known(v float64) bool { return !math.IsNaN(v) }

// Device is what does not change while gpubench runs.
type Device struct {
	Index    int    // NVML index (the simulator's device number)
	UUID     string // GPU-... (the simulator makes a stable one)
	Name     string
	PCIBusID string
	NUMANode int // -1 when unknown
	// MemoryBytes is the device memory's capacity.
	MemoryBytes float64
	// BaseSMClockHz is the SM clock the GPU guarantees under load (Unknown when not reported).
	BaseSMClockHz float64
	// NVLinks is how many NVLinks the GPU has up (0 on PCIe-only GPUs).
	NVLinks int
}

// Inventory is the machine's static description.
type Inventory struct {
	DriverVersion string
	CUDAVersion   string
	Devices       []Device
}

// Clock-event ("throttle") reasons, NVML's bits.
const (
	ReasonGPUIdle          uint64 = 1
	ReasonSWPowerCap       uint64 = 4
	ReasonHWSlowdown       uint64 = 8
	ReasonSWThermal        uint64 = 32
	ReasonHWThermal        uint64 = 64
	ReasonHWPowerBrake     uint64 = 128
	ReasonsHardwareSlowing        = ReasonHWSlowdown | ReasonHWThermal | ReasonHWPowerBrake
)

// ReasonNames names the clock-event bits gpubench exports, in export order.
var ReasonNames = []struct {
	Bit  uint64
	Name string
}{
	{ReasonGPUIdle, "gpu_idle"},
	{ReasonSWPowerCap, "sw_power_cap"},
	{ReasonHWSlowdown, "hw_slowdown"},
	{ReasonSWThermal, "sw_thermal_slowdown"},
	{ReasonHWThermal, "hw_thermal_slowdown"},
	{ReasonHWPowerBrake, "hw_power_brake_slowdown"},
}

// NVLink error counters, in export order (NVML's NVLINK_ERROR_DL_*).
var NVLinkErrorNames = []string{"replay", "recovery", "crc_flit", "crc_data"}

// Link is one NVLink's state and error counters (Unknown where not reported).
type Link struct {
	Link   int
	Up     bool
	Errors [4]float64 // indexed as NVLinkErrorNames
}

// GPU is one sample of one GPU. Every float64 is Unknown when the source cannot report it.
type GPU struct {
	Index                 int
	TemperatureCelsius    float64
	SlowdownTempCelsius   float64
	PowerWatts            float64
	PowerLimitWatts       float64
	EnergyJoules          float64 // since the driver loaded
	SMClockHz             float64
	MemoryClockHz         float64
	Utilization           float64 // 0-1
	MemoryUtilization     float64 // 0-1
	MemoryUsedBytes       float64
	ECCCorrected          float64 // volatile counts
	ECCUncorrected        float64
	RemappedRowsCorrected float64
	RemappedRowsUncorr    float64
	RemapFailed           float64 // 1 when a row remap failed, 0 when not
	PCIeReplays           float64
	ClockReasons          uint64
	ReasonsKnown          bool
	Links                 []Link
}

// XID is one XID event.
type XID struct {
	GPU  int
	Code int
	// At is when it happened on the source's clock (the simulator's virtual time; wall time
	// since the source opened on real GPUs).
	At time.Duration
}

// Sample is one poll of every GPU.
type Sample struct {
	GPUs []GPU
	// XIDs are the events since the previous Sample.
	XIDs []XID
	// Errors are the parts that failed, by collector name ("gpu", "xid"); absent when they worked.
	Errors map[string]error
	// Durations are how long each part took, by collector name.
	Durations map[string]time.Duration
}

// Source is anything that reports telemetry: NVML, or the simulator.
type Source interface {
	Inventory() Inventory
	// Sample polls every GPU now. It is called from one goroutine at a time.
	Sample() Sample
	Close() error
}

// NewGPU returns a GPU sample with every figure Unknown.
func NewGPU(index int) GPU {
	u := Unknown
	return GPU{Index: index, TemperatureCelsius: u, SlowdownTempCelsius: u, PowerWatts: u, PowerLimitWatts: u,
		EnergyJoules: u, SMClockHz: u, MemoryClockHz: u, Utilization: u, MemoryUtilization: u, MemoryUsedBytes: u,
		ECCCorrected: u, ECCUncorrected: u, RemappedRowsCorrected: u, RemappedRowsUncorr: u, RemapFailed: u,
		PCIeReplays: u}
}
