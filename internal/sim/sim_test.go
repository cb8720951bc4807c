package sim

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

func backend(t *testing.T, topo string, opt Options) *Backend {
	t.Helper()
	tp, err := LoadTopology(topo)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(tp, opt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ranks(n int) []int {
	v := make([]int, n)
	for i := range v {
		v[i] = i
	}
	return v
}

// commOn is a communicator over b's first n devices, with a buffer of bytes on each.
func commOn(tb testing.TB, b *Backend, n int, bytes int64) (gpu.Comm, []gpu.Buffer) {
	tb.Helper()
	comm, err := b.NewComm(ranks(n))
	if err != nil {
		tb.Fatal(err)
	}
	bufs := make([]gpu.Buffer, n)
	for i := range bufs {
		if bufs[i], err = b.Alloc(i, bytes); err != nil {
			tb.Fatal(err)
		}
	}
	return comm, bufs
}

// The tuner's choices and figures on the presets, against NCCL's own model and published
// measurements (docs/model.md).
func TestModelMatchesNCCL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		topo         string
		ringBus      float64 // NCCL's ring bus bandwidth for the machine, GB/s
		small, large string  // the tuner's pick at 8 B and 1 GiB all-reduce
		busLo, busHi float64 // all-reduce busbw at 1 GiB, GB/s
	}{
		{"dgx-h100", 370.8, "Ring/LL", "NVLS/Simple", 470, 485},     // ~480 NVLS measured
		{"hgx-h200", 370.8, "Ring/LL", "NVLS/Simple", 470, 485},     // same fabric
		{"dgx-a100", 240, "Ring/LL", "Ring/Simple", 230, 240},       // NCCL model 240, ~230 measured
		{"dgx-h100x2", 384, "Tree/LL", "NVLSTree/Simple", 445, 465}, // NVLink SHARP in each node, a tree between: 8 channels x 57.7 (NCCL's cap)
		{"pcie-l40sx4", 24, "Ring/LL", "Ring/Simple", 23, 24.01},    // Gen4 x16 as NCCL counts it
		{"pcie-4090x8", 8.76, "Ring/LL", "Ring/Simple", 8.4, 8.77},  // two GPUs share each uplink (12), staged through host memory (x 0.73)
	}
	for _, c := range cases {
		t.Run(c.topo, func(t *testing.T) {
			t.Parallel()
			b := backend(t, c.topo, Options{})
			m := newModel(b.topo, ranks(b.topo.NumGPUs()), nil)
			if math.Abs(m.ringBus-c.ringBus) > 1e-6 {
				t.Errorf("ring bus bandwidth %v; want %v", m.ringBus, c.ringBus)
			}
			if got := m.collTime(collAllReduce, 8).String(); got != c.small {
				t.Errorf("8 B pick %s; want %s", got, c.small)
			}
			big := m.collTime(collAllReduce, 1<<30)
			if big.String() != c.large {
				t.Errorf("1 GiB pick %s; want %s", big, c.large)
			}
			// NCCL's own estimate (the simulated NVLS call on one node moves more: TestNVLSOneNode).
			n, nccl := float64(m.n), m.decide(collAllReduce, 1<<30).Chosen().TimeUS
			if bus := float64(1<<30) / nccl / 1e3 * 2 * (n - 1) / n; bus < c.busLo || bus > c.busHi {
				t.Errorf("1 GiB busbw by NCCL's estimate %.1f; want %v-%v", bus, c.busLo, c.busHi)
			}
		})
	}
}

// LL128 is NCCL's default only over NVLink; PCIe machines never pick it.
func TestLL128OnlyOverNVLink(t *testing.T) {
	t.Parallel()
	pcie := newModel(backend(t, "pcie-l40sx4", Options{}).topo, ranks(4), nil)
	nvl := newModel(backend(t, "dgx-a100", Options{}).topo, ranks(8), nil)
	if pcie.protoOK(collAllReduce, algoRing, protoLL128) || !nvl.protoOK(collAllReduce, algoRing, protoLL128) {
		t.Error("LL128 must be off on PCIe and on over NVLink")
	}
	// NCCL_PROTO names LL128 per collective: a broadcast entry turns it on for broadcast alone.
	forced := newModel(backend(t, "pcie-l40sx4", Options{}).topo, ranks(4), map[string]string{"NCCL_PROTO": "broadcast:LL128"})
	if !forced.protoOK(collBroadcast, algoRing, protoLL128) || forced.protoOK(collAllReduce, algoRing, protoLL128) {
		t.Error("NCCL_PROTO=broadcast:LL128 must turn LL128 on for broadcast and only for it")
	}
	for size := int64(8); size <= 1<<30; size *= 4 {
		if c := pcie.collTime(collAllReduce, size); c.proto == "LL128" {
			t.Errorf("pcie picked %s at %d B", c, size)
		}
	}
}

// The host clock moves by the launch cost and waits for the slowest stream on Synchronize.
func TestVirtualClock(t *testing.T) {
	t.Parallel()
	b := backend(t, "dgx-h100", Options{DataCap: 1 << 20})
	comm, err := b.NewComm(ranks(8))
	if err != nil {
		t.Fatal(err)
	}
	bufs := make([]gpu.Buffer, 8)
	for i := range bufs {
		if bufs[i], err = b.Alloc(i, 1<<30); err != nil {
			t.Fatal(err)
		}
		if bufs[i].HasData() {
			t.Fatal("a 1 GiB buffer past a 1 MiB data cap holds data")
		}
	}
	if err := comm.AllReduce(bufs, bufs, 1<<28, gpu.Float, gpu.Sum); err != nil {
		t.Fatal(err)
	}
	if got := b.Now(); got != time.Duration(8*launchUS*1e3) {
		t.Errorf("after the launch the host clock is %v; want %v", got, time.Duration(8*launchUS*1e3))
	}
	if err := comm.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := 8*launchUS + newModel(b.topo, ranks(8), nil).collTime(collAllReduce, 1<<30).us
	if got := b.Now(); math.Abs(got.Seconds()*1e6-want) > 0.01 {
		t.Errorf("after Synchronize the host clock is %v; want %.2f µs", got, want)
	}
}

// Jitter only slows operations down, is repeatable for a seed, and differs between seeds.
func TestJitter(t *testing.T) {
	t.Parallel()
	run := func(opt Options) []time.Duration {
		b := backend(t, "dgx-h100", opt)
		comm, _ := b.NewComm(ranks(8))
		bufs := make([]gpu.Buffer, 8)
		for i := range bufs {
			bufs[i], _ = b.Alloc(i, 1<<20)
		}
		var d []time.Duration
		for range 5 {
			t0 := b.Now()
			if err := comm.AllReduce(bufs, bufs, 1<<18, gpu.Float, gpu.Sum); err != nil {
				t.Fatal(err)
			}
			_ = comm.Synchronize(context.Background())
			d = append(d, b.Now()-t0)
		}
		return d
	}
	plain, a, again, other := run(Options{}), run(Options{Jitter: 0.1, Seed: 1}), run(Options{Jitter: 0.1, Seed: 1}), run(Options{Jitter: 0.1, Seed: 2})
	distinct := map[time.Duration]bool{}
	for i := range plain {
		if d := plain[i] - plain[0]; d < -2 || d > 2 {
			t.Errorf("without jitter, times differ: %v", plain)
		}
		if a[i] < plain[i] || a[i] != again[i] {
			t.Errorf("jittered %v, again %v, plain %v: want slower and repeatable", a, again, plain)
		}
		distinct[a[i]] = true
	}
	if len(distinct) < 3 || a[0] == other[0] && a[1] == other[1] {
		t.Errorf("jitter does not vary: seed 1 %v, seed 2 %v", a, other)
	}
}

func TestMemoryAndArguments(t *testing.T) {
	t.Parallel()
	b := backend(t, "pcie-l40sx4", Options{DataCap: 1 << 20})
	if _, err := b.Alloc(0, 48305799168+1); !errors.Is(err, gpu.ErrOutOfMemory) {
		t.Errorf("allocating more than the device holds: %v; want ErrOutOfMemory", err)
	}
	x, err := b.Alloc(0, 1<<20)
	if err != nil || !x.HasData() {
		t.Fatalf("1 MiB within the cap: %v, data %v", err, x != nil && x.HasData())
	}
	y, _ := b.Alloc(1, 16)
	if y.HasData() {
		t.Error("16 B past a full data cap holds data")
	}
	if err := b.CopyIn(y, make([]byte, 16)); !errors.Is(err, gpu.ErrNoData) {
		t.Errorf("copy into a timing-only buffer: %v; want ErrNoData", err)
	}
	if err := b.Free(x); err != nil {
		t.Fatal(err)
	}
	if z, _ := b.Alloc(2, 1<<20); !z.HasData() {
		t.Error("freeing did not return the data cap")
	}
	if _, err := b.NewComm([]int{0, 0}); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("two ranks on one device: %v; want ErrInvalid", err)
	}
	comm, _ := b.NewComm([]int{0, 1})
	bad := []gpu.Buffer{y, y} // both on device 1
	if err := comm.AllReduce(bad, bad, 4, gpu.Float, gpu.Sum); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("rank 0 passing device 1's buffer: %v; want ErrInvalid", err)
	}
}

// Real data: an all-reduce of known values, and a corrupt fault that flips a bit on one device.
func TestDataAndCorruption(t *testing.T) {
	t.Parallel()
	b := backend(t, "pcie-l40sx4", Options{DataCap: 1 << 20, Faults: []Fault{{Kind: "corrupt", Device: 3, After: 1}}})
	comm, _ := b.NewComm(ranks(4))
	send, recv := make([]gpu.Buffer, 4), make([]gpu.Buffer, 4)
	for r := range 4 {
		send[r], _ = b.Alloc(r, 8)
		recv[r], _ = b.Alloc(r, 8)
		_ = b.CopyIn(send[r], []byte{byte(r + 1), 0, 0, 0, 10, 0, 0, 0})
	}
	for call := range 2 {
		if err := comm.AllReduce(send, recv, 2, gpu.Int32, gpu.Sum); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 8)
		for r := range 4 {
			_ = b.CopyOut(got, recv[r])
			want := []byte{10, 0, 0, 0, 40, 0, 0, 0}
			if call == 1 && r == 3 {
				want[3] ^= 0x40 // corrupt=3@1: from the second call, the top byte of element 0
			}
			if string(got) != string(want) {
				t.Errorf("call %d rank %d: %v; want %v", call, r, got, want)
			}
		}
	}
}

func TestHangBlocksUntilDeadline(t *testing.T) {
	t.Parallel()
	b := backend(t, "dgx-h100", Options{Faults: []Fault{{Kind: "hang", Device: 5}}})
	comm, _ := b.NewComm([]int{4, 5, 6})
	bufs := make([]gpu.Buffer, 3)
	for i := range bufs {
		bufs[i], _ = b.Alloc(4+i, 64)
	}
	if err := comm.Broadcast(bufs, bufs, 16, gpu.Float, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	var hang *gpu.HangError
	if err := comm.Synchronize(ctx); !errors.As(err, &hang) || len(hang.Ranks) != 1 || hang.Ranks[0] != 1 {
		t.Errorf("Synchronize: %v; want rank 1 (device 5) hung", err)
	}
}

// Peer access follows the file: with "p2p": "all", pairs across CPU sockets have it too, at the
// worst rank, as gpubench topo records a machine.
func TestPeerInfoFollowsTheFile(t *testing.T) {
	t.Parallel()
	tp, err := LoadTopology("pcie-4090x8")
	if err != nil {
		t.Fatal(err)
	}
	tp.P2P = "all"
	b, err := New(tp, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a, b int
		rank int
	}{{0, 1, 1}, {0, 2, 3}, {0, 5, 4}} {
		info, err := b.PeerInfo(c.a, c.b)
		if err != nil || !info.Access || info.PerfRank != c.rank || info.NativeAtomics {
			t.Errorf("PeerInfo(%d, %d) = %+v, %v; want access at rank %d without native atomics", c.a, c.b, info, err, c.rank)
		}
	}
	none := backend(t, "pcie-4090x8", Options{})
	if info, _ := none.PeerInfo(0, 1); info.Access {
		t.Error(`"p2p": "none" gives no access`)
	}
}

// NCCL's node is the NVLink domain: two GB200 NVL72 racks have 72 NICs a domain, 4 a tray.
func TestDomainNICs(t *testing.T) {
	topo, err := LoadTopology("gb200-nvl72")
	if err != nil {
		t.Fatal(err)
	}
	if topo, err = topo.WithNodes(36); err != nil {
		t.Fatal(err)
	}
	devs := make([]int, topo.NumGPUs())
	for i := range devs {
		devs[i] = i
	}
	m := newModel(topo, devs, nil)
	if m.nodes != 2 || m.heads != 72 || math.Abs(m.netGBs-72*50) > 1e-9 {
		t.Errorf("2 racks: %d domains, %d heads, %v GB/s of NICs; want 2, 72, 3600", m.nodes, m.heads, m.netGBs)
	}
}

// NCCL corrects NVLSTree's bandwidth on Blackwell with x86 hosts only: a GB200's Grace CPUs
// leave it alone.
func TestNVLSTreeCorrectionOnX86Only(t *testing.T) {
	for name, arm := range map[string]bool{"gb200-nvl72": true, "dgx-b200": false} {
		topo, err := LoadTopology(name)
		if err != nil {
			t.Fatal(err)
		}
		m := newModel(topo, []int{0, 1}, nil)
		if m.arm != arm {
			t.Errorf("%s: arm %v; want %v", name, m.arm, arm)
		}
	}
}

// NCCL's list syntax as NCCL parses it: entries and elements split as strtok does, so that empty
// ones are skipped; names are NCCL's, any case; a later entry replaces an earlier one.
func TestParseNCCLList(t *testing.T) {
	for in, want := range map[string][]string{
		"ring":                     {"allreduce:Ring", "broadcast:Ring"},
		"Ring,,tree;":              {"allreduce:Tree,Ring", "reduce:Tree,Ring"},
		"^nvls;allreduce:tree":     {"allreduce:Tree", "allgather:Tree,Ring,CollNetDirect,CollNetChain,NVLSTree,PAT"},
		";;broadcast:ring;":        {"broadcast:Ring"},
		"ring;allreduce:^ring,pat": {"allreduce:Tree,CollNetDirect,CollNetChain,NVLS,NVLSTree", "broadcast:Ring"},
		// parseList reads an entry to its second ':' (strtok skips the empty piece between two).
		"allreduce:ring:tree": {"allreduce:Ring", "broadcast:Tree,Ring,CollNetDirect,CollNetChain,NVLS,NVLSTree,PAT"},
		"allreduce::tree":     {"allreduce:Tree"},
		":ring":               {"allreduce:Ring", "broadcast:Ring"}, // the first entry, at the start: no prefix
		"":                    {"allreduce:Tree,Ring,CollNetDirect,CollNetChain,NVLS,NVLSTree,PAT"},
		"^":                   {"allreduce:Tree,Ring,CollNetDirect,CollNetChain,NVLS,NVLSTree,PAT"},
	} {
		got, err := parseNCCLList(in, algoNames[:])
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		for _, w := range want {
			coll, names, _ := strings.Cut(w, ":")
			c := slices.IndexFunc(collNames[:], func(x string) bool { return strings.EqualFold(x, coll) })
			var on []string
			row := got[c]
			if row == nil { // left alone: all on
				row = slices.Repeat([]bool{true}, numAlgos)
			}
			for a, ok := range row {
				if ok {
					on = append(on, algoNames[a])
				}
			}
			if strings.Join(on, ",") != names {
				t.Errorf("%q: %s gets %v; want %s", in, coll, on, names)
			}
		}
	}
	// NCCL trims nothing (" ring" is an unknown name), reads "broadcast:" as the name broadcast,
	// and takes an entry without a prefix only at the string's start.
	for _, bad := range []string{"rings", "allreduce:ring;tree", "allreducer:ring", " ring", "ring ", "broadcast:", ";ring", "ring;:tree", ":"} {
		if _, err := parseNCCLList(bad, algoNames[:]); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// CheckEnv and the list parser take any text: no panic, and an accepted list has a full row per
// collective it names.
func FuzzParseNCCLList(f *testing.F) {
	for _, s := range []string{"ring", "^nvls;allreduce:tree", "Ring,,tree;", ";;", "allreduce:", ":", "^", "allreduce:^", "a:b:c", "ring;tree"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rows, err := parseNCCLList(s, algoNames[:])
		if err == nil {
			for c, row := range rows {
				if row != nil && len(row) != numAlgos {
					t.Fatalf("%q: collective %d has %d flags", s, c, len(row))
				}
			}
		}
		_ = CheckEnv(map[string]string{"NCCL_ALGO": s, "NCCL_PROTO": s, "NCCL_IB_HCA": s, "NCCL_MIN_NCHANNELS": s})
		if e := parseTunerEnv(map[string]string{"NCCL_ALGO": s, "NCCL_PROTO": s, "NCCL_IB_HCA": s}); e.hca != nil {
			e.hca("mlx5_0")
		}
	})
}

// Every preset loads, and its description says where its figures come from ("Sources:") and
// what it assumes ("Assumed"), as a reader of a simulated number needs to know.
func TestPresetsCiteSources(t *testing.T) {
	t.Parallel()
	for _, name := range Presets() {
		tp, err := LoadTopology(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !strings.Contains(tp.Description, "Sources:") || !strings.Contains(tp.Description, "Assumed") {
			t.Errorf("%s: the description names no sources or no assumptions: %q", name, tp.Description)
		}
	}
}
