package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
)

// collOptions parses a collective's command line into engine options, without running anything.
func collOptions(t *testing.T, name string, args ...string) (coll.Options, error) {
	t.Helper()
	var c *coll.Collective
	for _, x := range coll.Collectives {
		if x.Name == name {
			c = x
		}
	}
	e := &env{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, now: time.Now}
	g := &globals{}
	var opt coll.Options
	cmd := newCollCmdWith(e, g, c, func(cmd *cobra.Command, f *collFlags) (err error) {
		opt, err = f.options(cmd, c, 0)
		return err
	})
	cmd.SetArgs(args)
	cmd.SetOut(e.stdout)
	cmd.SetErr(e.stderr)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.ExecuteContext(context.Background())
	return opt, err
}

// Command lines and the options they give: gpubench's flags, nccl-tests' short and long ones.
func TestCollFlagsToOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		coll string
		args string
		want func(coll.Options) bool
	}{
		{"allreduce", "", func(o coll.Options) bool {
			return o.Sweep == coll.Sweep{Min: 8, Max: 8 << 30, Factor: 2} && o.Iters == 20 && o.Warmup == 1 && o.Check == 1 && o.Average == 1 &&
				len(o.DTypes) == 1 && o.DTypes[0] == gpu.Float && len(o.Ops) == 1 && o.Ops[0] == gpu.Sum && o.Cycles == 1
		}},
		{"allreduce", "-b 8 -e 128M -f 2", func(o coll.Options) bool { w := o.Sweep; return w.Min == 8 && w.Max == 128<<20 && w.Factor == 2 }},
		{"allreduce", "-b 1K -e 3M", func(o coll.Options) bool {
			return o.Sweep == coll.Sweep{Min: 1024, Max: 3 << 20, Factor: 1, Step: 1 << 20}
		}},
		{"allreduce", "--sizes 1K:1M:+4K", func(o coll.Options) bool { return o.Sweep.Step == 4096 }},
		{"allreduce", "-n 5 -w 0 -c 0 -a 3", func(o coll.Options) bool { return o.Iters == 5 && o.Warmup == 0 && o.Check == 0 && o.Average == 3 }},
		{"allreduce", "--warmup_iters 3 --datatype half -o all", func(o coll.Options) bool {
			return o.Warmup == 3 && o.DTypes[0] == gpu.Half && len(o.Ops) == len(gpu.RedOps)
		}},
		{"allreduce", "-d all", func(o coll.Options) bool { return len(o.DTypes) == len(gpu.DTypes) }},
		{"allreduce", "-g 4", func(o coll.Options) bool { return o.NGPUs == 4 }},
		{"allreduce", "-t 2 -g 3", func(o coll.Options) bool { return o.NGPUs == 6 }},
		{"allreduce", "-t 4", func(o coll.Options) bool { return o.NGPUs == 4 }},
		{"allreduce", "-G 5 -z 3", func(o coll.Options) bool { return o.Graph == 5 && o.Blocking == 0 }},
		{"allreduce", "--cudagraph 2 -z 1", func(o coll.Options) bool { return o.Graph == 2 && o.Blocking == 1 }},
		{"allreduce", "-N 0 -C 1", func(o coll.Options) bool { return o.Cycles < 0 && o.CPUTime }},
		{"allreduce", "-I 1 -K 2", func(o coll.Options) bool { return o.PerIter && o.PerIterSkip == 2 }},
		{"allreduce", "-r 3", func(o coll.Options) bool { return o.Root == 0 }},
		{"broadcast", "-r 3", func(o coll.Options) bool { return o.Root == 3 && o.Ops == nil }},
		{"reduce", "-r -1 -o max", func(o coll.Options) bool { return o.Root == -1 && o.Ops[0] == gpu.Max }},
		{"allreduce", "-T 30", func(o coll.Options) bool { return o.Timeout == 30*time.Second }},
	} {
		opt, err := collOptions(t, c.coll, strings.Fields(c.args)...)
		if err != nil || !c.want(opt) {
			t.Errorf("%s %s: %v; options %+v", c.coll, c.args, err, opt)
		}
	}
	for _, c := range []struct{ coll, args, want string }{
		{"allreduce", "--sizes 1K:1M -b 8", "use either --sizes or -b/-e/-f/-i"},
		{"allreduce", "-f 0", "invalid -f 0"},
		{"allreduce", "-n 0", "invalid -n 0"},
		{"allreduce", "-a 4", "invalid -a 4"},
		{"allreduce", "-z 4", "invalid -z 4"},
		{"allreduce", "-g 0", "invalid -g 0"},
		{"broadcast", "-r -2", "invalid -r -2"},
		{"allreduce", "-d fp7", "invalid -d"},
		{"allreduce", "-o mean", "invalid -o"},
	} {
		if _, err := collOptions(t, c.coll, strings.Fields(c.args)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v; want %q", c.coll, c.args, err, c.want)
		}
	}
}

// nccl-tests' own variables: NCCL_TESTS_MIN_BW fails a run whose average bus bandwidth is under
// 0.9 of it, with OK or FAILED after the footer's average, as nccl-tests prints it; the ones
// that split the ranks or offset the devices, which gpubench does not do, are refused.
func TestNCCLTestsEnv(t *testing.T) {
	args := []string{"allreduce", "--backend", "sim", "-b", "1M", "-e", "1M", "-g", "4"}
	t.Setenv("NCCL_TESTS_MIN_BW", "1000")
	out, errOut, code := gpubench(t, args...)
	if code != exitCheck || !strings.Contains(out, "\n# Avg bus bandwidth    : 70.4213 FAILED\n") ||
		errOut != "gpubench: allreduce: the average bus bandwidth, 70.4213 GB/s, is under 0.9 of NCCL_TESTS_MIN_BW=1000\n" {
		t.Errorf("1000 GB/s: exit %d, stderr %q\n%s", code, errOut, out)
	}
	t.Setenv("NCCL_TESTS_MIN_BW", "78")
	if out, errOut, code = gpubench(t, args...); code != 0 || !strings.Contains(out, "\n# Avg bus bandwidth    : 70.4213 OK\n") {
		t.Errorf("78 GB/s (0.9 of it is 70.2): exit %d, stderr %q\n%s", code, errOut, out)
	}
	if out, _, _ = gpubench(t, append(args, "--output", "json")...); !strings.Contains(out, `"min_busbw_gbs": 78`) {
		t.Errorf("json without min_busbw_gbs:\n%s", out)
	}
	for k, v := range map[string]string{"NCCL_TESTS_MIN_BW": "fast", "NCCL_TESTS_SPLIT": "MOD 2", "NCCL_TESTS_DEVICE": "4"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv("NCCL_TESTS_MIN_BW", "")
			os.Unsetenv("NCCL_TESTS_MIN_BW")
			t.Setenv(k, v)
			out, errOut, code := gpubench(t, args...)
			if code != exitUsage || out != "" || !strings.Contains(errOut, k) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("%s=%s: exit %d, stdout %q, stderr %q; want one line naming it, exit 2", k, v, code, out, errOut)
			}
		})
	}
}
