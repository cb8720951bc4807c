package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/diag"
	"github.com/gpubench/gpubench/internal/golden"
	"github.com/gpubench/gpubench/internal/topo"
	"github.com/gpubench/gpubench/internal/topo/topotest"
)

// diagHost is a fixture tree of a host's /proc: /dev/shm at Docker's 64 MiB default, memlock
// limited, the driver loaded.
func diagHost(t *testing.T) string {
	tr := topotest.DGX(t)
	tr.Write("proc/self/mounts", "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0")
	tr.Write("proc/self/limits", "Max locked memory         8388608              8388608              bytes")
	tr.Write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 2024")
	tr.Write("proc/modules", "nvidia_peermem 16384 0 - Live 0x0")
	tr.Write("proc/cmdline", "ro quiet")
	return tr.Root
}

// fixEnv makes diag see only these variables.
func fixEnv(t *testing.T, vars ...string) {
	old := diagEnviron
	diagEnviron = func() []string { return vars }
	t.Cleanup(func() { diagEnviron = old })
}

// diagRun runs gpubench diag with a given NVML reader.
func diagRun(t *testing.T, read func(string, topo.Options) (*diag.Devices, error), args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut, pid: 4242, version: "test",
		now: func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) }}
	g := &globals{}
	root := &cobra.Command{Use: "gpubench", SilenceErrors: true, SilenceUsage: true}
	root.SetFlagErrorFunc(flagErr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.backend, "backend", "auto", "")
	pf.StringVar(&g.topology, "topology", "dgx-h100", "")
	pf.StringVar(&g.output, "output", "table", "")
	pf.StringVar(&g.cudaLib, "cuda-lib", "", "")
	pf.StringVar(&g.ncclLib, "nccl-lib", "", "")
	pf.StringVar(&g.dataCap, "sim-data-cap", "8MiB", "")
	pf.StringArrayVar(&g.faults, "sim-fault", nil, "")
	root.AddCommand(newDiagCmdWith(e, g, read))
	root.SetArgs(append([]string{"diag"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = exitCode(&errOut, root.ExecuteContext(context.Background()))
	return out.String(), errOut.String(), code
}

// The simulated DGX H100 in a container with too little /dev/shm, locked memory and a mistyped
// NCCL variable: the table, JSON and Markdown, byte for byte; warnings alone exit 0.
func TestGoldenDiagSim(t *testing.T) {
	fixEnv(t, "NCCL_DEUBG=INFO", "NCCL_SOCKET_IFNAME=eno", "PATH=/bin")
	root := diagHost(t)
	for _, format := range []string{"table", "json", "markdown"} {
		out, errOut, code := gpubench(t, "diag", "--backend", "sim", "--root", root, "--output", format)
		if code != 0 || errOut != "" {
			t.Fatalf("%s: exit %d, stderr %q", format, code, errOut)
		}
		golden.Check(t, "diag-sim-dgx-h100."+map[string]string{"table": "txt", "json": "json", "markdown": "md"}[format], out)
	}
}

// A slow link on the simulator fails the data checks: exit 3, the failed checks named on stderr.
func TestDiagSlowLinkFails(t *testing.T) {
	fixEnv(t)
	out, errOut, code := gpubench(t, "diag", "--backend", "sim", "--root", diagHost(t), "--sim-fault", "slow-link=gpu5,nvswitch,0.2", "--output", "json")
	if code != exitCheck || errOut != "gpubench: diag: 2 checks failed: p2p-bandwidth, allreduce-bandwidth\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var doc struct {
		Failed []string
		Checks []diag.Result
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Failed) != 2 || len(doc.Checks) != len(diag.Checks()) {
		t.Fatalf("json %v: %+v", err, doc.Failed)
	}
}

// A GPU that corrupts data fails both data checks, which name it, at the default --sim-data-cap:
// the measured sizes are past it, so the checks check data at a size within it.
func TestDiagCorruptFails(t *testing.T) {
	fixEnv(t)
	out, errOut, code := gpubench(t, "diag", "--backend", "sim", "--root", diagHost(t), "--sim-fault", "corrupt=3", "--output", "json")
	if code != exitCheck || errOut != "gpubench: diag: 2 checks failed: p2p-bandwidth, allreduce-bandwidth\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var doc struct{ Checks []diag.Result }
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Checks {
		if r.Group == "data" && !strings.Contains(r.Finding, "GPU 3") {
			t.Errorf("%s: %q; want it to name GPU 3", r.Check, r.Finding)
		}
	}
}

func TestDiagUsage(t *testing.T) {
	fixEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--output", "csv", "--backend", "sim"}, "unknown --output \"csv\" for diag: use table, json, markdown"},
		{[]string{"--root", "/nonexistent", "--backend", "sim"}, "invalid --root \"/nonexistent\": give a directory that holds sys/ and proc/"},
		{[]string{"--nvml-lib", "/x.so", "--backend", "sim"}, "--nvml-lib reads a real machine's GPUs: drop it, or drop --backend sim"},
		{[]string{"--backend", "gpu"}, "unknown --backend \"gpu\" for diag: use auto or cuda or sim"},
		{[]string{"extra", "--backend", "sim"}, "diag takes no arguments, and was given \"extra\""},
		{[]string{"--backend", "sim", "--nccl-lib", "x.so"}, "--nccl-lib does not apply to --backend sim, which loads no library: drop it, or use --backend cuda"},
	} {
		out, errOut, code := gpubench(t, append([]string{"diag"}, c.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// NCCL values the simulator refuses are diag's finding, not a refusal to run: nccl-names fails
// with CheckEnv's message and the other checks run (the data checks skip, saying why); exit 3.
// The flags are still checked.
func TestDiagBadNCCLValues(t *testing.T) {
	t.Setenv("NCCL_ALGO", "garbage")
	t.Setenv("NCCL_MAX_NCHANNELS", "four")
	fixEnv(t, "NCCL_ALGO=garbage", "NCCL_MAX_NCHANNELS=four")
	root := diagHost(t)
	for _, quick := range []bool{true, false} {
		args := []string{"diag", "--backend", "sim", "--root", root, "--output", "json"}
		if quick {
			args = append(args, "--quick")
		}
		out, errOut, code := gpubench(t, args...)
		if code != exitCheck || errOut != "gpubench: diag: 1 check failed: nccl-names\n" {
			t.Fatalf("quick %v: exit %d, stderr %q", quick, code, errOut)
		}
		var doc struct{ Checks []diag.Result }
		if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Checks) != len(diag.Checks()) {
			t.Fatalf("json %v, %d checks", err, len(doc.Checks))
		}
		for _, r := range doc.Checks {
			switch {
			case r.Check == "nccl-names" && (r.Status != diag.Fail || r.Remedy == "" ||
				!strings.Contains(r.Finding, `NCCL_ALGO="garbage": unknown "garbage"`) || !strings.Contains(r.Finding, `NCCL_MAX_NCHANNELS="four": give a whole number`)):
				t.Errorf("nccl-names: %s %q, remedy %q", r.Status, r.Finding, r.Remedy)
			case r.Group == "data" && !quick && (r.Status != diag.Skip || !strings.HasPrefix(r.Finding, "the simulator refuses the NCCL variables: NCCL_ALGO=")):
				t.Errorf("%s: %s %q", r.Check, r.Status, r.Finding)
			}
		}
	}
	out, errOut, code := gpubench(t, "diag", "--backend", "sim", "--root", root, "--quick", "--sim-data-cap", "lots")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "invalid --sim-data-cap \"lots\"") {
		t.Errorf("a bad flag beside bad NCCL values: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
