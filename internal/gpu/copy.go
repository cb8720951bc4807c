package gpu

import (
	"context"
	"errors"
	"time"
)

// HostDevice is the Device() of pinned host memory.
const HostDevice = -1

// PeerInfo is what a backend says about one ordered pair of devices.
type PeerInfo struct {
	Access        bool // dev can map peer's memory (cudaDeviceCanAccessPeer)
	PerfRank      int  // relative link quality; lower is better (cudaDevP2PAttrPerformanceRank)
	NativeAtomics bool // atomics over the link (cudaDevP2PAttrNativeAtomicSupported)
}

// Copy is one copy for TimedCopies: Src to Dst, Repeat times back to back on a stream of the
// Issuer device.
type Copy struct {
	Dst, Src Buffer
	Issuer   int
	Repeat   int
}

// Copier is what the P2P benchmark needs from a backend besides memory: peer access, pinned host
// memory and copies that start together.
type Copier interface {
	PeerInfo(dev, peer int) (PeerInfo, error)
	// EnablePeer lets dev access peer's memory; DisablePeer takes that back.
	EnablePeer(dev, peer int) error
	DisablePeer(dev, peer int) error
	// AllocHost allocates pinned host memory on the NUMA node nearest device near, as nvbandwidth
	// places it; free it with Backend.Free.
	AllocHost(near int, n int64) (Buffer, error)
	// FreeMemory is how much device memory dev has free.
	FreeMemory(dev int) (int64, error)
	// TimedCopies runs the copies together: each on its own stream, all released at once, and
	// returns how long each took (all its repeats), timed on the device.
	TimedCopies(ctx context.Context, copies []Copy) ([]time.Duration, error)
}

// Peer-access errors every backend reports in the same way.
var (
	ErrPeerUnsupported = errors.New("peer access is not supported between these devices")
	ErrPeerEnabled     = errors.New("peer access is already enabled")
	ErrPeerNotEnabled  = errors.New("peer access is not enabled")
	ErrTimeout         = errors.New("operation did not finish in time")
	ErrNotSupported    = errors.New("operation not supported on this system")
	ErrNoCollectives   = errors.New("this backend has no collectives")
)
