package sim

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

// FuzzSimulate checks that any topology the parser accepts can be simulated: every collective,
// a send/receive ring and the explanation of each run on its first GPUs (at most 64, so that one
// input stays quick), end within a second of the host's time, and take a finite, non-negative
// simulated time. Seeds: every preset and the accuracy table's topology files.
func FuzzSimulate(f *testing.F) {
	files, _ := filepath.Glob("presets/*.json")
	more, _ := filepath.Glob("../../accuracy/topologies/*.json")
	if len(files) == 0 || len(more) == 0 {
		f.Fatalf("no seeds: %d presets, %d accuracy topologies", len(files), len(more))
	}
	for _, file := range append(files, more...) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, int64(1<<20))
	}
	f.Fuzz(func(t *testing.T, data []byte, size int64) {
		topo, err := gpu.ParseTopology(data)
		if err != nil {
			return
		}
		b, err := New(topo, Options{DataCap: 0})
		if err != nil {
			return // a topology the simulator refuses, with its reason
		}
		devs := ranks(min(topo.NumGPUs(), 64))
		c, err := b.NewComm(devs)
		if err != nil {
			t.Fatalf("NewComm over %d GPUs of an accepted topology: %v", len(devs), err)
		}
		count := max(min(size, 1<<40)/4, 1)
		n := len(devs)
		buf := func(floats int64) []gpu.Buffer {
			bufs := make([]gpu.Buffer, n)
			for r, d := range devs {
				if bufs[r], err = b.Alloc(d, 4*floats); err != nil {
					return nil // more than the GPU's memory, refused
				}
			}
			return bufs
		}
		one, all := buf(count), buf(count*int64(n))
		if one == nil || all == nil {
			return
		}
		var ops []gpu.P2POp
		for r := range n {
			ops = append(ops, gpu.P2POp{Rank: r, Peer: (r + 1) % n, Send: true, Buf: one[r]}, gpu.P2POp{Rank: r, Peer: (r + n - 1) % n, Buf: one[r]})
		}
		calls := map[string]func() error{
			"allreduce":     func() error { return c.AllReduce(one, one, count, gpu.Float, gpu.Sum) },
			"allgather":     func() error { return c.AllGather(one, all, count, gpu.Float) },
			"reducescatter": func() error { return c.ReduceScatter(all, one, count, gpu.Float, gpu.Sum) },
			"broadcast":     func() error { return c.Broadcast(one, one, count, gpu.Float, n-1) },
			"reduce":        func() error { return c.Reduce(one, one, count, gpu.Float, gpu.Sum, 0) },
			"alltoall":      func() error { return c.AllToAll(all, all, count, gpu.Float) },
			"sendrecv":      func() error { return c.SendRecv(ops, count, gpu.Float) },
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for name, call := range calls {
			if e, ok := c.(gpu.Explainer); ok {
				e.Explain(name, 4*count, gpu.Float, gpu.Sum)
			}
			start := b.hostUS
			if err := call(); err != nil {
				t.Fatalf("%s of %d bytes on %d GPUs: %v", name, 4*count, n, err)
			}
			if err := c.Synchronize(ctx); err != nil {
				t.Fatalf("%s of %d bytes on %d GPUs: %v", name, 4*count, n, err)
			}
			if us := b.hostUS - start; math.IsNaN(us) || math.IsInf(us, 0) || us < 0 {
				t.Fatalf("%s of %d bytes on %d GPUs took %v µs", name, 4*count, n, us)
			}
		}
	})
}

// FuzzTunerEnv gives the integer NCCL_* variables any values (each set or not, by the bits of
// set): CheckEnv refuses what is not a whole number with one line naming the variable, and for
// what it accepts parseTunerEnv reads the number NCCL would (cNumber, checked here against Go's
// own reading of C's literals), held to NCCL's range; clampChannels stays within 1 to 64.
func FuzzTunerEnv(f *testing.F) {
	f.Add("2", "8", "0", "1", "0", "1", "0", uint8(0x7f))
	f.Add("16", "4", "", "", "", "", "", uint8(3))
	f.Add("0", "0", "-1", "x", " 1 ", "1025", "+1", uint8(0x7f))
	f.Add("99999999999999999999", "-5", "1\n", "", "", "", "", uint8(0x0f))
	f.Add("0x20", "010", "0X0", "08", "-0x1", "2", "0", uint8(0x7f))
	f.Fuzz(func(t *testing.T, minCh, maxCh, nvls, collnet, p2p, pxn, ib string, set uint8) {
		names := []string{"NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_P2P_DISABLE", "NCCL_PXN_DISABLE", "NCCL_IB_DISABLE"}
		defaults := []int64{0, 64, 2, 0, 0, 0, 0}
		env := map[string]string{}
		for i, v := range []string{minCh, maxCh, nvls, collnet, p2p, pxn, ib} {
			if set&(1<<i) != 0 {
				env[names[i]] = v
			}
		}
		e := parseTunerEnv(env)
		for _, n := range []int{-1, 0, 1, 64, 2000} {
			if c := e.clampChannels(n); c < 1 || c > 64 {
				t.Fatalf("%q: %d channels clamped to %d", env, n, c)
			}
		}
		if err := CheckEnv(env); err != nil {
			named := false
			for _, name := range names {
				_, ok := env[name]
				named = named || ok && strings.HasPrefix(err.Error(), name+"=")
			}
			if !named || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("%q: error %q", env, err)
			}
			return
		}
		got := []int64{int64(e.minCh), int64(e.maxCh), b2i(e.nvls), b2i(e.collnet), b2i(e.p2pDisable), b2i(e.noPXN), b2i(e.ibDisable)}
		for i, name := range names {
			want := defaults[i]
			if v := strings.TrimSpace(env[name]); v != "" {
				want = cLiteral(t, v)
			}
			switch i {
			case 0:
				want = min(max(want, 0), 64)
			case 1:
				want = min(max(want, 1), 64)
			case 2, 6: // on when not 0
				want = b2i(want != 0)
			default: // on at 1 alone
				want = b2i(want == 1)
			}
			if got[i] != want {
				t.Fatalf("%s=%q accepted and read as %d; want %d", name, env[name], got[i], want)
			}
		}
	})
}

// cLiteral reads an accepted value with Go's parser, which reads C's octal only after 0o.
func cLiteral(t *testing.T, v string) int64 {
	sign, digits := "", v
	if digits[0] == '+' || digits[0] == '-' {
		sign, digits = digits[:1], digits[1:]
	}
	if len(digits) > 1 && digits[0] == '0' && digits[1] != 'x' && digits[1] != 'X' {
		digits = "0o" + digits[1:]
	}
	n, err := strconv.ParseInt(sign+digits, 0, 64)
	if err != nil && !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("%q accepted, but Go reads it as %v", v, err)
	}
	return n
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
