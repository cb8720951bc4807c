//go:build cgo

package cuda_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/cuda"
	"github.com/gpubench/gpubench/internal/cuda/cudatest"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/p2p"
)

// The library is loaded once per process, so one test walks through the load failures first and
// then everything that needs the stand-in, in order.
func TestBindingAgainstStandin(t *testing.T) {
	t.Setenv("GPUBENCH_STANDIN_DEVICES", "3")
	t.Setenv("GPUBENCH_STANDIN_NO_P2P", "0-2")
	t.Setenv("GPUBENCH_STANDIN_COPY_GBPS", "20")
	t.Setenv("GPUBENCH_STANDIN_MEMORY", "268435456")
	lib := cudatest.Standin(t)

	t.Run("missing library", func(t *testing.T) {
		_, err := cuda.Open("/nonexistent/libcudart.so.12")
		if !errors.Is(err, cuda.ErrNotFound) || !strings.Contains(err.Error(), "/nonexistent/libcudart.so.12") || !strings.Contains(err.Error(), "--backend sim") {
			t.Errorf("err = %v; want ErrNotFound naming the path tried and the way out", err)
		}
	})
	t.Run("library without the runtime's symbols", func(t *testing.T) {
		libc, _ := filepath.Glob("/lib/x86_64-linux-gnu/libm.so.6")
		if len(libc) == 0 {
			t.Skip("no libm to try")
		}
		_, err := cuda.Open(libc[0])
		if !errors.Is(err, cuda.ErrNotFound) || !strings.Contains(err.Error(), "missing symbol cudaGetDeviceCount") {
			t.Errorf("err = %v; want the missing symbol named", err)
		}
	})
	t.Run("environment path comes first", func(t *testing.T) {
		t.Setenv("GPUBENCH_CUDART", "/x/libcudart.so")
		if c := cuda.Candidates(""); len(c) != 1 || c[0] != "/x/libcudart.so" {
			t.Errorf("Candidates = %v", c)
		}
		if c := cuda.Candidates("/y.so"); len(c) != 1 || c[0] != "/y.so" {
			t.Errorf("an explicit path must win: %v", c)
		}
	})

	b, err := cuda.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("devices and versions", func(t *testing.T) {
		if b.Driver != 12040 || b.Runtime != 12040 || len(b.Devices()) != 3 {
			t.Fatalf("versions %d/%d, %d devices", b.Driver, b.Runtime, len(b.Devices()))
		}
		d := b.Devices()[2]
		if d.Name != "gpubench stand-in device 2" || d.PCIBusID != "0000:12:00.0" || d.MemoryBytes != 268435456 {
			t.Errorf("device 2 = %+v", d)
		}
		// A failure names the call that failed, not the last one the helper makes.
		var cerr *cuda.Error
		if _, err := cuda.Device(7); !errors.As(err, &cerr) || cerr.Func != "cudaSetDevice" || cerr.Code != cuda.ErrorInvalidDevice || !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("device 7 of 3: %v; want cudaSetDevice's cudaErrorInvalidDevice", err)
		}
	})
	t.Run("memory round trip", func(t *testing.T) {
		x, err := b.Alloc(1, 4096)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(x)
		in := bytes.Repeat([]byte("gpubench"), 512)
		if err := b.CopyIn(x, in); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 4096)
		if err := b.CopyOut(out, x); err != nil || !bytes.Equal(in, out) {
			t.Fatalf("round trip: %v", err)
		}
		if err := b.Memset(x.Slice(8, 8), 0); err != nil {
			t.Fatal(err)
		}
		_ = b.CopyOut(out, x)
		if !bytes.Equal(out[:8], in[:8]) || !bytes.Equal(out[8:16], make([]byte, 8)) || !bytes.Equal(out[16:], in[16:]) {
			t.Error("memset of a slice touched the wrong bytes")
		}
		if _, err := b.Alloc(0, 1<<30); !errors.Is(err, gpu.ErrOutOfMemory) {
			t.Errorf("1 GiB on a 256 MiB device: %v; want ErrOutOfMemory", err)
		}
		if _, err := b.Alloc(7, 16); !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("device 7: %v; want ErrInvalid", err)
		}
	})
	t.Run("peer access errors", func(t *testing.T) {
		info, err := b.PeerInfo(0, 2)
		if err != nil || info.Access {
			t.Errorf("0-2 = %+v, %v; want no access", info, err)
		}
		if err := b.EnablePeer(0, 2); !errors.Is(err, gpu.ErrPeerUnsupported) {
			t.Errorf("enable 0->2: %v; want ErrPeerUnsupported", err)
		}
		if err := b.EnablePeer(0, 1); err != nil {
			t.Fatal(err)
		}
		var cerr *cuda.Error
		if err := b.EnablePeer(0, 1); !errors.Is(err, gpu.ErrPeerEnabled) || !errors.As(err, &cerr) || cerr.Code != 704 || cerr.Name != "cudaErrorPeerAccessAlreadyEnabled" {
			t.Errorf("enable 0->1 twice: %v; want code 704 by name", err)
		}
		if err := b.DisablePeer(0, 1); err != nil {
			t.Errorf("disable 0->1: %v", err)
		}
		if err := b.DisablePeer(0, 1); !errors.Is(err, gpu.ErrPeerNotEnabled) {
			t.Errorf("disable 0->1 twice: %v; want ErrPeerNotEnabled", err)
		}
		// The sticky error was cleared: the next call succeeds.
		if _, err := b.PeerInfo(1, 0); err != nil {
			t.Errorf("a call after the peer errors: %v", err)
		}
	})
	t.Run("copies start together and are timed", func(t *testing.T) {
		const n = 8 << 20
		var bufs []gpu.Buffer
		for _, d := range []int{0, 1, 2, 1} {
			x, err := b.Alloc(d, n)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free(x)
			bufs = append(bufs, x)
		}
		// Copies issued by three devices at once: the stand-in fails any copy issued under the
		// wrong current device, so this passes only if every helper sets its device.
		d, err := b.TimedCopies(context.Background(), []gpu.Copy{
			{Src: bufs[0], Dst: bufs[1], Issuer: 0, Repeat: 2},
			{Src: bufs[2], Dst: bufs[3], Issuer: 2, Repeat: 2},
			{Src: bufs[1], Dst: bufs[3], Issuer: 1, Repeat: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		least := 2 * n * time.Second / 20e9 // 20 GB/s throttle, two copies
		if d[0] < least || d[1] < least || d[2] < least/2 {
			t.Errorf("durations %v; want at least %v for two 8 MiB copies at 20 GB/s", d, least)
		}
	})
	t.Run("goroutines on many threads", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 30)
		for i := 0; i < 30; i++ {
			wg.Add(1)
			go func(dev int) {
				defer wg.Done()
				x, err := b.Alloc(dev, 1<<16)
				if err == nil {
					err = b.Memset(x, 1)
				}
				if err == nil {
					err = b.Free(x)
				}
				errs <- err
			}(i % 3)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})
	t.Run("p2p benchmark", func(t *testing.T) {
		res, err := p2p.Run(context.Background(), b, p2p.Options{Size: 4 << 20, Repeat: 2, Samples: 1, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Mismatched != 0 || res.Verified == 0 || res.Unverified != 0 {
			t.Errorf("verified %d, mismatched %d, unverified %d", res.Verified, res.Mismatched, res.Unverified)
		}
		for _, m := range res.Matrices {
			if m.Key == "uni_enabled" && (m.Cells[0][2].Value != nil || m.Cells[0][1].Value == nil) {
				t.Errorf("uni enabled: 0->2 %+v, 0->1 %+v; want N/A and a figure", m.Cells[0][2], m.Cells[0][1])
			}
		}
		if len(res.Host) != 3 || *res.Host[0].H2D.Value > 25 {
			t.Errorf("host rows %+v; want about 20 GB/s, the stand-in's throttle", res.Host)
		}
	})
}

// The NCCL wheel in the environment of the python3 on PATH is found without VIRTUAL_ENV, as in
// images that put their PyTorch environment first on PATH.
func TestCandidatesIncludeThePythonOnPath(t *testing.T) {
	env := t.TempDir()
	lib := filepath.Join(env, "lib", "python3.12", "site-packages", "nvidia", "nccl", "lib", "libnccl.so.2")
	for _, f := range []string{filepath.Join(env, "bin", "python3"), lib} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", filepath.Join(env, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("VIRTUAL_ENV", "")
	t.Setenv("GPUBENCH_NCCL", "")
	got := cuda.LibraryCandidates("", "GPUBENCH_NCCL", []string{"libnccl.so.2"}, []string{"nvidia/nccl/lib"})
	if !slices.Contains(got, lib) {
		t.Errorf("candidates %v lack %s", got, lib)
	}
}
