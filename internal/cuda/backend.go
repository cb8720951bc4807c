//go:build cgo

package cuda

import (
	"context"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Backend is the real GPUs, through the CUDA runtime. Collectives come with the NCCL binding;
// until then NewComm reports gpu.ErrNoCollectives.
type Backend struct {
	Path            string // the library loaded
	Driver, Runtime int    // CUDA versions, 1000*major + 10*minor
	devices         []gpu.Device
	start           time.Time
}

var (
	_ gpu.Backend = (*Backend)(nil)
	_ gpu.Copier  = (*Backend)(nil)
)

// Open loads the CUDA runtime (see Load) and lists its devices. It fails with ErrNotFound when no
// library loads, and with a CUDA error (cudaErrorNoDevice, cudaErrorInsufficientDriver, ...) when
// the library loads but offers no usable device.
func Open(libPath string) (*Backend, error) {
	path, err := Load(libPath)
	if err != nil {
		return nil, err
	}
	b := &Backend{Path: path, start: time.Now()}
	if b.Driver, b.Runtime, err = Versions(); err != nil {
		return nil, err
	}
	n, err := DeviceCount()
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	for i := 0; i < n; i++ {
		d, err := Device(i)
		if err != nil {
			return nil, err
		}
		b.devices = append(b.devices, gpu.Device{Ordinal: i, Name: d.Name, PCIBusID: d.PCIBusID, MemoryBytes: d.MemoryBytes, Host: host})
	}
	return b, nil
}

// Describe says which CUDA driver and runtime versions run, and which library was loaded.
func (b *Backend) Describe() string {
	return fmt.Sprintf("CUDA driver %s, runtime %s, %s", version(b.Driver), version(b.Runtime), b.Path)
}

// version writes CUDA's 1000*major + 10*minor as major.minor.
func version(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

func (b *Backend) Name() string            { return "cuda" }
func (b *Backend) Devices() []gpu.Device   { return b.devices }
func (b *Backend) Topology() *gpu.Topology { return nil }
func (b *Backend) Now() time.Duration      { return time.Since(b.start) }
func (b *Backend) Close() error            { return nil }

// NewComm needs NCCL, which this backend does not bind yet.
func (b *Backend) NewComm([]int) (gpu.Comm, error) { return nil, gpu.ErrNoCollectives }

func (b *Backend) valid(dev int) error {
	if dev < 0 || dev >= len(b.devices) {
		return fmt.Errorf("no device %d (%d devices): %w", dev, len(b.devices), gpu.ErrInvalid)
	}
	return nil
}

// buffer is device memory (dev >= 0) or pinned host memory (dev == gpu.HostDevice).
type buffer struct {
	dev     int
	ptr     unsafe.Pointer // where this view starts
	n       int64
	root    bool         // from Alloc, AllocHost or AllocWith, so Free may release it
	release func() error // from AllocWith: how Free releases it
}

func (x *buffer) Device() int   { return x.dev }
func (x *buffer) Len() int64    { return x.n }
func (x *buffer) HasData() bool { return true }

func (x *buffer) Slice(off, n int64) gpu.Buffer {
	if off < 0 || n < 0 || off+n > x.n {
		panic(fmt.Sprintf("cuda: slice [%d, %d) of a %d-byte buffer", off, off+n, x.n))
	}
	return &buffer{dev: x.dev, ptr: unsafe.Add(x.ptr, off), n: n}
}

// Pointer returns the device address a buffer from this backend starts at, and its device, for
// the NCCL binding.
func Pointer(b gpu.Buffer) (unsafe.Pointer, int, error) {
	x, err := asBuffer(b)
	if err != nil {
		return nil, 0, err
	}
	return x.ptr, x.dev, nil
}

func asBuffer(b gpu.Buffer) (*buffer, error) {
	x, ok := b.(*buffer)
	if !ok {
		return nil, fmt.Errorf("not a CUDA buffer: %w", gpu.ErrInvalid)
	}
	return x, nil
}

func (b *Backend) Alloc(dev int, n int64) (gpu.Buffer, error) {
	if err := b.valid(dev); err != nil {
		return nil, err
	}
	p, err := malloc(dev, max(n, 1))
	if err != nil {
		return nil, err
	}
	return &buffer{dev: dev, ptr: p, n: n, root: true}, nil
}

// AllocWith allocates n bytes on device dev with another library's allocator (NCCL's
// ncclMemAlloc), whose buffer Free then gives back to release.
func (b *Backend) AllocWith(dev int, n int64, alloc func(dev int, n int64) (unsafe.Pointer, error), release func(dev int, p unsafe.Pointer) error) (gpu.Buffer, error) {
	if err := b.valid(dev); err != nil {
		return nil, err
	}
	p, err := alloc(dev, max(n, 1))
	if err != nil {
		return nil, err
	}
	return &buffer{dev: dev, ptr: p, n: n, root: true, release: func() error { return release(dev, p) }}, nil
}

// AllocHost allocates pinned host memory with its pages on the CPUs nearest device near, read from
// sysfs (nvbandwidth sets the CPU affinity through NVML for the same reason); where sysfs says
// nothing, the memory lands wherever the thread runs.
func (b *Backend) AllocHost(near int, n int64) (gpu.Buffer, error) {
	busID := ""
	if near >= 0 && near < len(b.devices) {
		busID = b.devices[near].PCIBusID
	}
	p, err := hostAlloc(busID, max(n, 1))
	if err != nil {
		return nil, err
	}
	return &buffer{dev: gpu.HostDevice, ptr: p, n: n, root: true}, nil
}

func (b *Backend) Free(buf gpu.Buffer) error {
	x, err := asBuffer(buf)
	if err != nil {
		return err
	}
	if !x.root {
		return fmt.Errorf("free of a slice: %w", gpu.ErrInvalid)
	}
	if x.release != nil {
		return x.release()
	}
	if x.dev == gpu.HostDevice {
		return freeHost(x.ptr)
	}
	return free(x.dev, x.ptr)
}

func (b *Backend) CopyIn(dst gpu.Buffer, src []byte) error {
	x, err := asBuffer(dst)
	if err != nil {
		return err
	}
	if int64(len(src)) > x.n {
		return fmt.Errorf("copy of %d bytes into a %d-byte buffer: %w", len(src), x.n, gpu.ErrInvalid)
	}
	if x.dev == gpu.HostDevice {
		copy(unsafe.Slice((*byte)(x.ptr), x.n), src)
		return nil
	}
	return copyToDevice(x.dev, x.ptr, src)
}

func (b *Backend) CopyOut(dst []byte, src gpu.Buffer) error {
	x, err := asBuffer(src)
	if err != nil {
		return err
	}
	if int64(len(dst)) > x.n {
		return fmt.Errorf("copy of %d bytes out of a %d-byte buffer: %w", len(dst), x.n, gpu.ErrInvalid)
	}
	if x.dev == gpu.HostDevice {
		copy(dst, unsafe.Slice((*byte)(x.ptr), x.n))
		return nil
	}
	return copyFromDevice(x.dev, dst, x.ptr)
}

func (b *Backend) Memset(dst gpu.Buffer, v byte) error {
	x, err := asBuffer(dst)
	if err != nil {
		return err
	}
	if x.dev == gpu.HostDevice {
		host := unsafe.Slice((*byte)(x.ptr), x.n)
		for i := range host {
			host[i] = v
		}
		return nil
	}
	return memset(x.dev, x.ptr, v, x.n)
}

func (b *Backend) PeerInfo(dev, peer int) (gpu.PeerInfo, error) {
	if err := b.valid(dev); err != nil {
		return gpu.PeerInfo{}, err
	}
	if err := b.valid(peer); err != nil {
		return gpu.PeerInfo{}, err
	}
	return peerInfo(dev, peer)
}

func (b *Backend) EnablePeer(dev, peer int) error  { return enablePeer(dev, peer) }
func (b *Backend) DisablePeer(dev, peer int) error { return disablePeer(dev, peer) }

func (b *Backend) FreeMemory(dev int) (int64, error) {
	if err := b.valid(dev); err != nil {
		return 0, err
	}
	f, _, err := MemInfo(dev)
	return f, err
}

// TimedCopies runs the copies behind one gate, as nvbandwidth does, and times each with events on
// its own stream. The wait is bounded by ctx's deadline, or a minute.
func (b *Backend) TimedCopies(ctx context.Context, copies []gpu.Copy) ([]time.Duration, error) {
	specs := make([]copySpec, len(copies))
	for i, c := range copies {
		dst, err := asBuffer(c.Dst)
		if err != nil {
			return nil, err
		}
		src, err := asBuffer(c.Src)
		if err != nil {
			return nil, err
		}
		if dst.n < src.n || b.valid(c.Issuer) != nil || c.Repeat < 1 {
			return nil, fmt.Errorf("copy %d: %d bytes into %d on device %d, %d times: %w", i, src.n, dst.n, c.Issuer, c.Repeat, gpu.ErrInvalid)
		}
		specs[i] = copySpec{dst: dst.ptr, src: src.ptr, bytes: src.n, dstDev: dst.dev, srcDev: src.dev, issuer: c.Issuer, repeat: c.Repeat}
	}
	timeout := time.Minute
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return timedCopies(specs, timeout)
}
