//go:build cgo

package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/cuda/cudatest"
)

// The real binding through the CLI, on the stand-in library, each run in its own process; a
// missing library is exit 4.
func TestP2PCUDABackend(t *testing.T) {
	lib := cudatest.Standin(t)
	_, errOut, code := gpubenchProcess(t, nil, "p2p", "--backend", "cuda", "--cuda-lib", "/nonexistent/libcudart.so")
	if code != 4 || !strings.Contains(errOut, "tried /nonexistent/libcudart.so") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("missing library: exit %d, %q; want exit 4 naming what was tried", code, errOut)
	}
	// --topology on real GPUs names the machine the copies are set beside.
	out, errOut, code := gpubenchProcess(t, []string{"GPUBENCH_STANDIN_DEVICES=2"}, "p2p", "--backend", "cuda", "--cuda-lib", lib, "--size", "1M", "--repeat", "2", "--samples", "1", "--topology", "pcie-4090x8-p2p")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"p2p, backend cuda\n# CUDA driver 12.4, runtime 12.4, " + lib + "\n", "Device: 1, gpubench stand-in device 1, pciBusID: 11", "Device=0 CAN Access Peer Device=1", "0 mismatched, 0 not checked",
		"Expected: from the simulator on topology pcie-4090x8-p2p; "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// standinEnv is the environment a gpubench process needs to run on the stand-in libraries.
func standinEnv(t *testing.T, extra ...string) (env, args []string) {
	rt, lib := cudatest.StandinNCCL(t)
	env = append([]string{"GPUBENCH_STANDIN_DEVICES=4", "GPUBENCH_STANDIN_MEMORY=8589934592", "GPUBENCH_STANDIN_CUDART=" + rt}, extra...)
	return env, []string{"--backend", "cuda", "--cuda-lib", rt, "--nccl-lib", lib}
}

// Every collective through the real CUDA and NCCL bindings, on the stand-ins, with the check on,
// set beside what a DGX H100's first four GPUs would do (--topology on real GPUs names the
// machine expectations come from).
func TestCollectivesOnStandins(t *testing.T) {
	env, backend := standinEnv(t)
	for _, c := range []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv", "gather", "scatter"} {
		t.Run(c, func(t *testing.T) {
			out, errOut, code := gpubenchProcess(t, env, append([]string{c, "--sizes", "8B:64K:x8", "-n", "3", "-d", "all", "-T", "60", "--topology", "dgx-h100"}, backend...)...)
			// -d all says which of nccl-tests' types it leaves out, and nothing else is said.
			if code != 0 || !strings.HasPrefix(errOut, "gpubench: -d all runs int8, ") || strings.Count(errOut, "\n") != 1 {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if !strings.Contains(out, "backend cuda\n# CUDA driver 12.4, runtime 12.4, ") || !strings.Contains(out, "NCCL 2.30.7") ||
				!strings.Contains(out, "# Out of bounds values : 0 OK") || strings.Contains(out, "Timing only") ||
				!strings.Contains(out, "# Expected             : from the simulator on topology dgx-h100;") {
				t.Errorf("output:\n%s", out)
			}
			if strings.Count(out, "  bfloat16 ") != 5 { // 8B:64K:x8 is five sizes
				t.Errorf("want five bfloat16 rows:\n%s", out)
			}
		})
	}
}

// On real GPUs expectations are on by default; where the machine cannot be read (no NVML here)
// the run goes on without them and says why, once.
func TestExpectWithoutTheMachine(t *testing.T) {
	env, backend := standinEnv(t)
	out, errOut, code := gpubenchProcess(t, env, append([]string{"allreduce", "--sizes", "8B", "-n", "1"}, backend...)...)
	if code != 0 || strings.Contains(out, "Expected") || !strings.HasPrefix(errOut, "gpubench: no expected figures: gpubench topo cannot read this machine (") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exit %d, stderr %q\n%s", code, errOut, out)
	}
}

// Older NCCL: no bfloat16 or avg before 2.10 (a usage error naming the version needed), no graph
// mode before 2.9 (the run fails saying so), and all-to-all as grouped send/recv before 2.28.
func TestOlderNCCL(t *testing.T) {
	env, backend := standinEnv(t, "GPUBENCH_STANDIN_NCCL_VERSION=2804")
	for _, args := range [][]string{{"allreduce", "-d", "bfloat16"}, {"reduce", "-o", "avg"}} {
		out, errOut, code := gpubenchProcess(t, env, append(args, backend...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, "needs NCCL 2.10 or later; the loaded NCCL is 2.8.4") {
			t.Errorf("%v on NCCL 2.8.4: exit %d, %q", args, code, errOut)
		}
	}
	_, errOut, code := gpubenchProcess(t, env, append([]string{"allreduce", "--sizes", "1K", "-G", "2"}, backend...)...)
	if code != 1 || !strings.Contains(errOut, "graph mode (-G) needs CUDA graphs (cudaStreamBeginCapture, cudaGraphInstantiateWithFlags: CUDA 11.4 or later) and NCCL 2.9 or later") {
		t.Errorf("-G on NCCL 2.8.4: exit %d, %q", code, errOut)
	}
	env, backend = standinEnv(t, "GPUBENCH_STANDIN_NCCL_VERSION=22703")
	out, errOut, code := gpubenchProcess(t, env, append([]string{"alltoall", "--sizes", "1K:1M:x32", "-n", "2"}, backend...)...)
	if code != 0 || !strings.Contains(out, "NCCL 2.27.3") || !strings.Contains(out, "# Out of bounds values : 0 OK") {
		t.Errorf("alltoall on NCCL 2.27.3 (send/recv): exit %d, %s\n%s", code, errOut, out)
	}
}

// A rank that never finishes is caught within the timeout plus one second, and exits 5; a rank
// that corrupts what it receives exits 3; no libnccl exits 4.
func TestNCCLFaults(t *testing.T) {
	env, backend := standinEnv(t, "GPUBENCH_STANDIN_NCCL_HANG=2@50")
	out, errOut, code := gpubenchProcess(t, env, append([]string{"allreduce", "--sizes", "1K:64K", "-w", "0", "-T", "2"}, backend...)...)
	if code != 5 || !strings.Contains(errOut, "gpubench: hang: allreduce at") || !strings.Contains(errOut, "did not finish") {
		t.Errorf("hang: exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "        1024           256") {
		t.Errorf("the rows measured before the hang are missing:\n%s", out)
	}
	// Before NCCL 2.14 every rank aborts on its own thread, together.
	env, backend = standinEnv(t, "GPUBENCH_STANDIN_NCCL_HANG=1@10", "GPUBENCH_STANDIN_NCCL_VERSION=21304")
	_, errOut, code = gpubenchProcess(t, env, append([]string{"allreduce", "--sizes", "1K", "-w", "0", "-T", "1"}, backend...)...)
	if code != 5 || !strings.Contains(errOut, "did not finish") {
		t.Errorf("hang on NCCL 2.13: exit %d, stderr %q", code, errOut)
	}
	env, backend = standinEnv(t, "GPUBENCH_STANDIN_NCCL_CORRUPT=1")
	out, _, code = gpubenchProcess(t, env, append([]string{"allgather", "--sizes", "1K:4K"}, backend...)...)
	if code != 3 || !strings.Contains(out, "# Out of bounds values : 6 FAILED") {
		t.Errorf("corrupt: exit %d\n%s", code, out)
	}
	_, errOut, code = gpubenchProcess(t, env, "allreduce", "--backend", "cuda", "--cuda-lib", backend[3], "--nccl-lib", "/nonexistent/libnccl.so.2")
	if code != 4 || !strings.Contains(errOut, "tried /nonexistent/libnccl.so.2") {
		t.Errorf("no libnccl: exit %d, %q", code, errOut)
	}
}

// burnin on the real path with a named NVML that does not load is exit 4, not a burn-in without
// telemetry.
func TestBurninNamedNVMLMustLoad(t *testing.T) {
	env, backend := standinEnv(t)
	_, errOut, code := gpubenchProcess(t, env, append([]string{"burnin", "--duration", "1s", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"}, backend...)...)
	if code != exitNoGPU || !strings.Contains(errOut, "--nvml-lib /nonexistent/libnvidia-ml.so.1 names a library that did not load") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// fleet on real GPUs (the stand-ins) runs the per-node round on this machine, set beside the
// topology given: one node, its verdict, and no rails.
func TestFleetOnStandins(t *testing.T) {
	env, backend := standinEnv(t)
	out, errOut, code := gpubenchProcess(t, env, append([]string{"fleet", "--topology", "pcie-l40sx4", "--size", "1MiB", "--output", "json", "-T", "30"}, backend...)...)
	if code != 0 && code != exitCheck {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rep struct {
		Nodes []struct {
			Status    string
			AllReduce *struct {
				Expected float64 `json:"expected_gbs"`
			} `json:"allreduce"`
		}
		Rails []any
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Nodes) != 1 || len(rep.Rails) != 0 || rep.Nodes[0].AllReduce == nil || rep.Nodes[0].AllReduce.Expected <= 0 {
		t.Errorf("%v: %s", err, out)
	}
	_, errOut, code = gpubenchProcess(t, env, append([]string{"fleet", "--topology", "dgx-h100", "--size", "1MiB"}, backend...)...)
	if code != exitFailure || !strings.Contains(errOut, "the backend has 4 GPUs and the machine it is set beside another count") {
		t.Errorf("4 GPUs beside an 8-GPU topology: exit %d, %q", code, errOut)
	}
}

// Under a launcher, a node whose GPU libraries do not load is untestable, never a bad node, and
// the others finish: rank 1 names an NCCL that is not there, rank 0 tests its node on the
// stand-ins and reports both.
func TestFleetUntestableNodeOnStandins(t *testing.T) {
	env, backend := standinEnv(t, "GPUBENCH_STANDIN_DEVICES=8")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env = append(env, "LOCAL_WORLD_SIZE=1", "LOCAL_RANK=0") // as if each on its own host
	ps := startRanksWith(t, ctx, 2, env, func(rank int) []string {
		args := append([]string{"fleet", "--topology", "dgx-h100", "--size", "1MiB", "--output", "json", "-T", "30", "--rendezvous-timeout", "30s",
			"--floor", "0.0001"}, backend...) // the stand-ins are far slower than a DGX H100
		if rank == 1 {
			args = append(args, "--nccl-lib", filepath.Join(t.TempDir(), "libnccl.so.2"))
		}
		return args
	}, nil)
	for _, p := range ps {
		<-p.done
	}
	for rank, p := range ps {
		if p.code != exitCheck || !strings.Contains(p.stderr.String(), "gpubench: fleet: 1 suspect: node ") || !strings.Contains(p.stderr.String(), "names a library that did not load") {
			t.Errorf("rank %d: exit %d, stderr %q", rank, p.code, p.stderr.String())
		}
	}
	var rep struct {
		Nodes []struct {
			Status, Why string
			Diag        []string
		}
		Suspects []struct{ Kind, Status string }
	}
	if err := json.Unmarshal([]byte(ps[0].stdout.String()), &rep); err != nil || len(rep.Nodes) != 2 {
		t.Fatalf("%v: %s", err, ps[0].stdout.String())
	}
	if n := rep.Nodes[1]; n.Status != "untestable" || !strings.Contains(n.Why, "names a library that did not load") || len(n.Diag) == 0 {
		t.Errorf("node 1: %+v", n)
	}
	if rep.Nodes[0].Status != "healthy" {
		t.Errorf("node 0: %+v", rep.Nodes[0])
	}
	for _, s := range rep.Suspects {
		if s.Status != "untestable" {
			t.Errorf("suspect %+v: an untestable node is not bad hardware", s)
		}
	}
}
