package p2p_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/p2p"
	"github.com/gpubench/gpubench/internal/sim"
)

func simBackend(t *testing.T, topo string, opt sim.Options) *sim.Backend {
	t.Helper()
	tp, err := sim.LoadTopology(topo)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(tp, opt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func matrix(t *testing.T, res *p2p.Result, key string) p2p.Matrix {
	t.Helper()
	for _, m := range res.Matrices {
		if m.Key == key {
			return m
		}
	}
	t.Fatalf("no matrix %s", key)
	return p2p.Matrix{}
}

// On a DGX H100 the simulated figures land where published p2pBandwidthLatencyTest runs on 8x H100
// land: P2P writes 371-377 GB/s, bidirectional 739-773, P2P disabled 36-38, diagonal 2474-2578.
func TestDGXH100Figures(t *testing.T) {
	t.Parallel()
	b := simBackend(t, "dgx-h100", sim.Options{DataCap: 64 << 20})
	res, err := p2p.Run(context.Background(), b, p2p.Options{Size: 512 << 20, Repeat: 16, Samples: 3, Verify: true, Devices: []int{0, 1, 5}})
	if err != nil {
		t.Fatal(err)
	}
	within := func(what string, v *float64, lo, hi float64) {
		t.Helper()
		if v == nil || *v < lo || *v > hi {
			t.Errorf("%s = %v; want %v-%v", what, v, lo, hi)
		}
	}
	within("uni enabled 0->1", matrix(t, res, "uni_enabled").Cells[0][1].Value, 360, 380)
	within("bi enabled 0<->2", matrix(t, res, "bi_enabled").Cells[0][2].Value, 720, 760)
	within("uni disabled 1->0", matrix(t, res, "uni_disabled").Cells[1][0].Value, 34, 39)
	within("diagonal", matrix(t, res, "uni_enabled").Cells[2][2].Value, 2350, 2600)
	within("latency enabled", matrix(t, res, "lat_enabled").Cells[0][1].Value, 0.5, 2)
	if l := matrix(t, res, "lat_disabled").Cells[0][1].Value; l == nil || *l < 10 {
		t.Errorf("staged latency %v; want well above the direct one", l)
	}
	if h := res.Host[0]; h.H2D.Value == nil || *h.H2D.Value < 45 || *h.H2D.Value > 55 {
		t.Errorf("H2D %v; want about 50 GB/s on Gen5 x16", h.H2D.Value)
	}
	for i := range res.Access {
		for j, a := range res.Access[i] {
			if i != j && (!a.Info.Access || a.Enable != "ok" || !a.Info.NativeAtomics) {
				t.Errorf("access %d->%d = %+v; want NVLink access enabled", i, j, a)
			}
		}
	}
	// 512 MiB buffers are past the data cap: nothing could be checked, and the run says so.
	if res.Verified != 0 || res.Unverified == 0 {
		t.Errorf("verified %d, unverified %d", res.Verified, res.Unverified)
	}
	if len(res.Matrices) != 6 || res.Matrices[0].Title != "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)" || res.Matrices[5].Title != "P2P=Enabled Latency (P2P Writes) Matrix (us)" {
		t.Errorf("matrices out of p2pBandwidthLatencyTest's order: %v", res.Matrices)
	}
}

// GeForce cards have no P2P: the access matrix says so and every enabled cell is N/A with why.
func TestNoP2P(t *testing.T) {
	t.Parallel()
	b := simBackend(t, "pcie-4090x8", sim.Options{DataCap: 64 << 20})
	res, err := p2p.Run(context.Background(), b, p2p.Options{Size: 1 << 20, Repeat: 2, Samples: 1, Verify: true, Devices: []int{0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"uni_enabled", "bi_enabled", "lat_enabled"} {
		m := matrix(t, res, key)
		for i, row := range m.Cells {
			for j, c := range row {
				if i != j && (c.Value != nil || !strings.Contains(c.NA, "no P2P access")) {
					t.Errorf("%s %d->%d = %+v; want N/A for lack of P2P", key, i, j, c)
				}
				if i == j && c.Value == nil {
					t.Errorf("%s diagonal %d is N/A", key, i)
				}
			}
		}
	}
	if v := matrix(t, res, "uni_disabled").Cells[0][1].Value; v == nil || *v <= 0 {
		t.Errorf("staged copy 0->1 = %v; want a figure", v)
	}
	if res.Mismatched != 0 || res.Verified == 0 {
		t.Errorf("verified %d, mismatched %d; want every copy checked and right", res.Verified, res.Mismatched)
	}
}

// A device that corrupts what it receives fails the check on the cells that write to it.
func TestCorruptionIsCaught(t *testing.T) {
	t.Parallel()
	b := simBackend(t, "pcie-l40sx4", sim.Options{DataCap: 64 << 20, Faults: []sim.Fault{{Kind: "corrupt", Device: 1}}})
	res, err := p2p.Run(context.Background(), b, p2p.Options{Size: 64 << 10, Repeat: 1, Samples: 1, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	m := matrix(t, res, "uni_enabled")
	if !m.Cells[0][1].Bad || m.Cells[1][0].Bad || res.Mismatched == 0 {
		t.Errorf("0->1 bad %v, 1->0 bad %v, mismatched %d; want only copies into device 1 caught", m.Cells[0][1].Bad, m.Cells[1][0].Bad, res.Mismatched)
	}
}

func TestPairsSweepAndLimits(t *testing.T) {
	t.Parallel()
	b := simBackend(t, "dgx-a100", sim.Options{DataCap: 64 << 20})
	var steps []string
	res, err := p2p.Run(context.Background(), b, p2p.Options{Size: 1 << 20, Repeat: 2, Samples: 1, Verify: true,
		Pairs: []p2p.Pair{{2, 5}}, Sweep: []int64{1 << 10, 1 << 20, 64 << 20}, Progress: func(s string) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 10 || steps[6] != "host and local copies" || steps[9] != "sweep of pair 2-5 at 67108864 B" {
		t.Errorf("progress %q; want six matrices, the host copies and three sweep sizes", steps)
	}
	m := matrix(t, res, "uni_enabled")
	if m.Cells[2][5].Value == nil || m.Cells[5][2].Value == nil || m.Cells[0][1].NA != "not requested" {
		t.Errorf("pair 2-5 measured both ways and 0-1 skipped: got %+v, %+v, %+v", m.Cells[2][5], m.Cells[5][2], m.Cells[0][1])
	}
	if len(res.Sweep) != 3 || res.SweepPair == nil || !res.Sweep[0].P2P || *res.Sweep[2].Uni.Value <= *res.Sweep[0].Uni.Value {
		t.Errorf("sweep %+v; want 3 sizes with P2P and bandwidth rising with size", res.Sweep)
	}
	_, err = p2p.Run(context.Background(), b, p2p.Options{Size: 60 << 30, Repeat: 1, Samples: 1})
	if !errors.Is(err, p2p.ErrTooBig) {
		t.Errorf("60 GiB buffers on 80 GB cards: %v; want ErrTooBig", err)
	}
}

func TestHangTimesOut(t *testing.T) {
	t.Parallel()
	b := simBackend(t, "dgx-h100", sim.Options{Faults: []sim.Fault{{Kind: "hang", Device: 1}}})
	_, err := p2p.Run(context.Background(), b, p2p.Options{Size: 1 << 20, Repeat: 1, Samples: 1, Devices: []int{0, 1}, Timeout: 20 * time.Millisecond})
	var hang *gpu.HangError
	if !errors.As(err, &hang) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v; want a hang past its deadline", err)
	}
}

func TestParsers(t *testing.T) {
	t.Parallel()
	devs, err := p2p.ParseDevices("3,0-1,5", 8)
	if err != nil || len(devs) != 4 || devs[0] != 0 || devs[3] != 5 {
		t.Errorf("ParseDevices = %v, %v", devs, err)
	}
	pairs, err := p2p.ParsePairs("1-0,2-7", 8)
	if err != nil || len(pairs) != 2 || pairs[0] != (p2p.Pair{0, 1}) {
		t.Errorf("ParsePairs = %v, %v", pairs, err)
	}
	for in, want := range map[string]string{"9": "out of range", "1,1": "twice", "3-1": "backwards", "a": "not a device", "": "not a device", "-1": "device numbers are 0 or more", "+1": "not a device"} {
		if _, err := p2p.ParseDevices(in, 8); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDevices(%q) = %v; want %q", in, err, want)
		}
	}
	for in, want := range map[string]string{"0-0": "one device twice", "0-8": "out of range", "0": "not A-B", "0-1,1-0": "twice", "0-1-2": "not a device", "": "not A-B"} {
		if _, err := p2p.ParsePairs(in, 8); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePairs(%q) = %v; want %q", in, err, want)
		}
	}
}

func FuzzParsePairs(f *testing.F) {
	for _, s := range []string{"0-1", "0-1,2-3", "7-0", "0-0", "1,2", "0-1-2", "", "-", "00-01", " 1-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pairs, err := p2p.ParsePairs(s, 8)
		if err == nil {
			seen := map[p2p.Pair]bool{}
			for _, p := range pairs {
				if p.A < 0 || p.B > 7 || p.A >= p.B || seen[p] {
					t.Fatalf("ParsePairs(%q) gave %v", s, pairs)
				}
				seen[p] = true
			}
		}
		devs, err := p2p.ParseDevices(s, 8)
		if err == nil {
			for i, d := range devs {
				if d < 0 || d > 7 || i > 0 && devs[i-1] >= d {
					t.Fatalf("ParseDevices(%q) gave %v", s, devs)
				}
			}
		}
	})
}

// refusing is a backend whose driver refuses peer copies without peer access, as under
// confidential computing, instead of staging them through the host.
type refusing struct{ *sim.Backend }

func (b refusing) TimedCopies(ctx context.Context, copies []gpu.Copy) ([]time.Duration, error) {
	for _, c := range copies {
		if s, d := c.Src.Device(), c.Dst.Device(); s >= 0 && d >= 0 && s != d && b.EnablePeer(s, d) == nil {
			_ = b.DisablePeer(s, d)
			return nil, fmt.Errorf("cudaMemcpyPeerAsync: %w", gpu.ErrPeerNotEnabled)
		}
	}
	return b.Backend.TimedCopies(ctx, copies)
}

func TestRefusedPeerCopiesAreCells(t *testing.T) {
	t.Parallel()
	b := refusing{simBackend(t, "pcie-l40sx4", sim.Options{DataCap: 64 << 20})}
	res, err := p2p.Run(context.Background(), b, p2p.Options{Size: 64 << 10, Repeat: 1, Samples: 1, Verify: true, Devices: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if c := matrix(t, res, "uni_disabled").Cells[0][1]; c.Value != nil || !strings.Contains(c.NA, "the driver refused the copy") {
		t.Errorf("refused staged copy: %+v; want an N/A cell saying why", c)
	}
	if c := matrix(t, res, "uni_enabled").Cells[0][1]; c.Value == nil {
		t.Errorf("with peer access the copy works: %+v", c)
	}
}

// GPUs of two hosts have no copy between them (NCCL's network joins them, not a peer copy):
// their cells are N/A, both with P2P and without; a run whose context has ended copies nothing
// more and says so, though the simulator's copies take no wall time.
func TestHostsAndStop(t *testing.T) {
	t.Parallel()
	b := simBackend(t, "dgx-h100x2", sim.Options{})
	res, err := p2p.Run(context.Background(), b, p2p.Options{Size: 1 << 20, Repeat: 1, Samples: 1, Devices: []int{0, 1, 8}})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"uni_disabled", "uni_enabled", "bi_disabled", "lat_enabled"} {
		m := matrix(t, res, key)
		if c := m.Cells[0][2]; c.Value != nil || !strings.HasPrefix(c.NA, "different hosts") {
			t.Errorf("%s: GPU 0 to GPU 8 of the other host: %+v; want N/A, different hosts", key, c)
		}
		if c := m.Cells[0][1]; c.Value == nil {
			t.Errorf("%s: GPU 0 to GPU 1 of the same host: %+v; want a figure", key, c)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p2p.Run(ctx, b, p2p.Options{Size: 1 << 20, Repeat: 1, Samples: 1000, Devices: []int{0, 1}}); !errors.Is(err, context.Canceled) {
		t.Errorf("a stopped run: %v; want context.Canceled", err)
	}
}

// A sweep of a pair on two hosts has no figures either, as the pair's matrix cells have none: no
// copy joins the two GPUs.
func TestSweepAcrossHosts(t *testing.T) {
	t.Parallel()
	b := simBackend(t, "dgx-h100x2", sim.Options{})
	res, err := p2p.Run(context.Background(), b, p2p.Options{Size: 1 << 20, Repeat: 1, Samples: 1, Pairs: []p2p.Pair{{0, 8}}, Sweep: []int64{4 << 10, 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sweep) != 2 {
		t.Fatalf("sweep %+v; want 2 sizes", res.Sweep)
	}
	for _, row := range res.Sweep {
		for _, c := range []p2p.Cell{row.Uni, row.Bidir} {
			if c.Value != nil || !strings.HasPrefix(c.NA, "different hosts") {
				t.Errorf("sweep of GPU 0 and GPU 8 of the other host at %d B: %+v; want N/A, different hosts", row.Size, c)
			}
		}
	}
}

// Pairs are measured host by host, at most MaxDevices GPUs at once: the matrices grow with the
// square of their GPUs, and no copy between hosts is peer-to-peer.
func TestGroups(t *testing.T) {
	var devs []gpu.Device
	for i := range 103 {
		h := "a"
		if i >= 100 {
			h = "b"
		}
		devs = append(devs, gpu.Device{Ordinal: i, Host: h})
	}
	groups, split := p2p.Groups(devs)
	if len(groups) != 3 || len(groups[0]) != p2p.MaxDevices || len(groups[1]) != 28 || groups[1][0] != 72 || !slices.Equal(groups[2], []int{100, 101, 102}) || !split {
		t.Errorf("100 GPUs on a and 3 on b: %d groups (%v), split %v; want 72 and 28 of a, then b's 3, split", len(groups), groups, split)
	}
	groups, split = p2p.Groups(devs[98:])
	if len(groups) != 2 || !slices.Equal(groups[0], []int{98, 99}) || split {
		t.Errorf("2 GPUs on a and 3 on b: groups %v, split %v; want a's 2, then b's 3, unsplit", groups, split)
	}
}

// Checking copies reuses host memory: a run that verifies over a hundred 1 MiB copies allocates
// the devices' buffers (8 MiB) and a few MiB more, not two fresh buffers of the copy's size for
// each check (245 MB).
func TestVerifyReusesHostMemory(t *testing.T) {
	b := simBackend(t, "dgx-h100", sim.Options{DataCap: 64 << 20})
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	res, err := p2p.Run(context.Background(), b, p2p.Options{Size: 1 << 20, Repeat: 1, Samples: 1, Verify: true, Devices: []int{0, 1, 2, 3}})
	runtime.ReadMemStats(&m1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verified < 24 || res.Mismatched != 0 {
		t.Fatalf("verified %d, mismatched %d; want at least 24 copies checked and right", res.Verified, res.Mismatched)
	}
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 32<<20 {
		t.Errorf("the run allocated %d bytes to check %d copies of 1 MiB; want under 32 MiB", got, res.Verified)
	}
}
