package diag

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/sim"
	"github.com/gpubench/gpubench/internal/topo"
)

// NCCL values that gpubench refuses elsewhere are named in nccl-names with CheckEnv's message,
// every one of them: they fail it on the simulator, which cannot run with them, and warn on the
// real machine, where NCCL may clamp or ignore them. On the simulator, a refusal beyond the
// values alone (SimEnvErr: NCCL_IB_HCA naming no NIC) fails it too.
func TestNCCLValues(t *testing.T) {
	root := host(t).Root
	for machine, bad := range map[string]Status{"": Warn, "x": Fail} {
		run := func(env ...string) Result {
			return result(t, Options{Root: root, Sim: machine, ReadDevices: noNVML, Quick: true, Env: env}, "nccl-names")
		}
		expect(t, run("NCCL_ALGO=ring", "NCCL_MAX_NCHANNELS=8"), Pass, "2 NCCL variables set, all known")
		expect(t, run("NCCL_ALGO=garbage"), bad, `NCCL values gpubench cannot read: NCCL_ALGO="garbage": unknown "garbage": use Tree, Ring`)
		expect(t, run("NCCL_MAX_NCHANNELS=four"), bad, `NCCL_MAX_NCHANNELS="four": give a whole number, such as 1`)
		r := run("NCCL_PROTO=fast", "NCCL_NVLS_ENABLE=yes", "NCCL_DEUBG=INFO")
		expect(t, r, bad, `NCCL_PROTO="fast": unknown "fast"`)
		expect(t, r, bad, `; NCCL_NVLS_ENABLE="yes": give a whole number, such as 1 (decimal, or hex after 0x); unknown NCCL variables: NCCL_DEUBG (did you mean NCCL_DEBUG?)`)
		// NCCL reads these as it clamps them (connect.cc: MAX first, then MIN, which wins).
		expect(t, run("NCCL_MIN_NCHANNELS=16", "NCCL_MAX_NCHANNELS=0"), Pass, "2 NCCL variables set, all known")
		expect(t, run("NCCL_MAX_NRINGS=0x4"), Pass, "1 NCCL variable set, all known")
	}
	r := result(t, Options{Root: root, Sim: "x", ReadDevices: noNVML, Quick: true, Env: []string{"NCCL_IB_HCA=foo"},
		SimEnvErr: errors.New(`sim: NCCL_IB_HCA="foo" leaves node n none of its NICs`)}, "nccl-names")
	expect(t, r, Fail, `NCCL values gpubench cannot read: NCCL_IB_HCA="foo" leaves node n none of its NICs`)
}

// Slurm's GPU variables are read strictly: a malformed value is reported as such, not counted.
func TestSlurmStrict(t *testing.T) {
	root := host(t).Root
	run := func(env ...string) Result {
		return result(t, Options{Root: root, ReadDevices: eightGPUs, Env: append(env, "SLURM_JOB_ID=1", "CUDA_VISIBLE_DEVICES=0,1,2")}, "slurm")
	}
	expect(t, run("SLURM_STEP_GPUS=0,,x"), Warn, `Slurm job 1: SLURM_STEP_GPUS="0,,x" is malformed: entry 2 is empty`)
	expect(t, run("SLURM_JOB_GPUS=0,x"), Warn, `SLURM_JOB_GPUS="0,x" is malformed: "x" is not a GPU index`)
	expect(t, run("SLURM_JOB_GPUS=0, 1"), Warn, `" 1" is not a GPU index`)
	expect(t, run("SLURM_STEP_GPUS=3,3,4"), Warn, "GPU 3 is listed twice")
	expect(t, run("SLURM_GPUS_ON_NODE=garbage"), Warn, `SLURM_GPUS_ON_NODE="garbage" is malformed: not a count of GPUs`)
	expect(t, run("SLURM_GPUS_ON_NODE=-3"), Warn, "not a count of GPUs")
	expect(t, run("SLURM_GPUS_ON_NODE=0"), Warn, "has no GPUs on this node (SLURM_GPUS_ON_NODE=0)")
	expect(t, run("SLURM_STEP_GPUS=4,5,6"), Pass, "3 GPUs")
	expect(t, run("SLURM_GPUS_ON_NODE=3"), Pass, "3 GPUs")
}

// NVIDIA_VISIBLE_DEVICES: an empty or repeated entry is reported, not counted as a GPU.
func TestNvidiaVisibleStrict(t *testing.T) {
	root := host(t).Root
	run := func(sim, v string) Result {
		return result(t, Options{Root: root, Sim: sim, ReadDevices: eightGPUs, Env: []string{"NVIDIA_VISIBLE_DEVICES=" + v}}, "visible-devices")
	}
	expect(t, run("", "0,,1"), Warn, `NVIDIA_VISIBLE_DEVICES="0,,1" is malformed: entry 2 is empty`)
	expect(t, run("x", "0,1,"), Warn, "entry 3 is empty")
	expect(t, run("", "2,2"), Warn, `"2" is named twice`)
	expect(t, run("", "0, 1"), Warn, "NVIDIA_VISIBLE_DEVICES names 2 GPUs but NVML sees 8")
	expect(t, run("", "none"), Warn, "NVIDIA_VISIBLE_DEVICES=none, yet NVML sees 8 GPUs")
	expect(t, run("", " all "), Pass, "all 8 GPUs")
	expect(t, run("", "0,1,2,3,4,5,6,7"), Pass, "all 8 GPUs")
}

// FuzzEnvChecks gives the container checks' variables any values: Slurm's GPU variables count
// what they list or are refused, NVIDIA_VISIBLE_DEVICES likewise; nccl-names fails exactly the
// NCCL values sim.CheckEnv refuses; and every check that reads them says what it found in one
// line of plain text, with a remedy when it warns or fails.
func FuzzEnvChecks(f *testing.F) {
	f.Add("0,,x", "4", "0,1", "0,1,2,3", "1")
	f.Add("1,2", "x", "", "all", "")
	f.Add("", "007", "3,3", "none", "7\n")
	f.Add("GPU-1", "-1", "0,1,2,3,4,5,6,7", "0,,1", "\x1b[2J")
	f.Add("0", "1", "0\x06", "0", "1") // a control character CUDA skips after the entry
	f.Fuzz(func(t *testing.T, stepGPUs, onNode, cudaVisible, nvVisible, job string) {
		if n, err := slurmGPUs("SLURM_GPUS_ON_NODE", onNode); err == nil {
			if n < 0 || strconv.Itoa(n) != strings.TrimLeft(onNode, "0") && (n != 0 || strings.Trim(onNode, "0") != "") {
				t.Fatalf("SLURM_GPUS_ON_NODE=%q read as %d", onNode, n)
			}
		} else if strings.ContainsAny(err.Error(), "\n\r") {
			t.Fatalf("error %q", err)
		}
		if n, err := slurmGPUs("SLURM_STEP_GPUS", stepGPUs); err == nil {
			entries := strings.Split(stepGPUs, ",")
			for _, e := range entries {
				if k, err := strconv.Atoi(e); err != nil || k < 0 || e == "" || e[0] == '+' {
					t.Fatalf("SLURM_STEP_GPUS=%q accepted entry %q", stepGPUs, e)
				}
			}
			if n != len(entries) {
				t.Fatalf("SLURM_STEP_GPUS=%q counted as %d", stepGPUs, n)
			}
		} else if _, bad := input.Unsafe(err.Error()); bad {
			t.Fatalf("error %q", err)
		}
		if n, err := parseNvidiaVisible(nvVisible); err == nil {
			v := strings.TrimSpace(nvVisible)
			want := len(strings.Split(v, ","))
			switch v {
			case "all", "":
				want = -1
			case "none", "void":
				want = 0
			}
			if n != want {
				t.Fatalf("NVIDIA_VISIBLE_DEVICES=%q counted as %d", nvVisible, n)
			}
		} else if _, bad := input.Unsafe(err.Error()); bad {
			t.Fatalf("error %q", err)
		}
		devs, _ := eightGPUs("", topo.Options{})
		for _, onSim := range []bool{false, true} {
			fa := &Facts{env: map[string]string{"SLURM_JOB_ID": job, "SLURM_STEP_GPUS": stepGPUs, "SLURM_GPUS_ON_NODE": onNode,
				"CUDA_VISIBLE_DEVICES": cudaVisible, "NVIDIA_VISIBLE_DEVICES": nvVisible}, sim: onSim, Devs: devs}
			fa.env["NCCL_ALGO"], fa.env["NCCL_MAX_NCHANNELS"] = job, onNode
			names := checkNCCLNames(fa)
			refused := Warn // on the real machine
			if onSim {
				refused = Fail
			}
			if (names.Status == refused) != (sim.CheckEnv(fa.env) != nil) {
				t.Fatalf("NCCL_ALGO=%q NCCL_MAX_NCHANNELS=%q: nccl-names %s %q", job, onNode, names.Status, names.Finding)
			}
			for _, r := range []Result{checkSlurm(fa), checkVisibleDevices(fa), names} {
				if _, bad := input.Unsafe(r.Finding + r.Remedy); bad {
					t.Fatalf("finding %q, remedy %q", r.Finding, r.Remedy)
				}
				if (r.Status == Warn || r.Status == Fail) && r.Remedy == "" {
					t.Fatalf("%s %q without a remedy", r.Status, r.Finding)
				}
			}
		}
	})
}
