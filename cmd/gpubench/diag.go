package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/diag"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/topo"
)

// diagEnviron is the environment diag checks; tests fix it.
var diagEnviron = os.Environ

type diagFlags struct {
	quick   bool
	root    string
	nvmlLib string
}

// newDiagCmd builds `gpubench diag`, which checks the machine, its libraries and environment.
func newDiagCmd(e *env, g *globals) *cobra.Command {
	return newDiagCmdWith(e, g, diag.ReadDevices)
}

// newDiagCmdWith is newDiagCmd with the NVML reader it uses (a mock NVML in tests).
func newDiagCmdWith(e *env, g *globals, read func(string, topo.Options) (*diag.Devices, error)) *cobra.Command {
	f := &diagFlags{}
	cmd := &cobra.Command{
		Use:   "diag",
		Short: "Find what is wrong with the machine and say how to fix it (driver, GPUs, NVLink, P2P, RDMA, containers, NCCL)",
		Long: "diag checks the driver and libraries, each GPU's health and settings, NVLink, P2P, ACS and the\n" +
			"IOMMU, RDMA, the container and scheduler, and the NCCL environment, then (without --quick) runs a\n" +
			"short P2P and all-reduce measurement against what the simulator expects of the topology. Each check passes,\n" +
			"warns, fails or is skipped with the reason, with a remedy; the exit status is 3 when any fails.",
		Example: "  gpubench diag\n  gpubench diag --quick --output json\n" +
			"  gpubench diag --root /host    # a container reading the host's /sys and /proc mounted under /host\n" +
			"  gpubench diag --backend sim --topology pcie-4090x8",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, e, g, read)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.quick, "quick", false, "skip the checks that move data (the P2P and all-reduce measurements)")
	fl.StringVar(&f.root, "root", "/", "directory whose sys/ and proc/ to read instead of the machine's own (as node_exporter's --path.sysfs and --path.procfs)")
	fl.StringVar(&f.nvmlLib, "nvml-lib", "", "path of the NVML library to load (default libnvidia-ml.so.1 where the system loader finds it)")
	return cmd
}

func (f *diagFlags) run(cmd *cobra.Command, e *env, g *globals, read func(string, topo.Options) (*diag.Devices, error)) error {
	backends := []string{"auto", "cuda", "sim"}
	if !slices.Contains(backends, g.backend) {
		return usageErr("unknown --backend %q for diag: use %s", g.backend, strings.Join(backends, " or "))
	}
	if !slices.Contains(diag.Formats, g.output) {
		return usageErr("unknown --output %q for diag: use %s", g.output, strings.Join(diag.Formats, ", "))
	}
	if st, err := os.Stat(f.root); err != nil || !st.IsDir() {
		return usageErr("invalid --root %q: give a directory that holds sys/ and proc/", f.root)
	}
	if g.backend == "sim" && cmd.Flags().Changed("nvml-lib") {
		return usageErr("--nvml-lib reads a real machine's GPUs: drop it, or drop --backend sim")
	}
	if err := g.noLibsForSim(); err != nil {
		return err
	}
	if err := refuseBlindFaults(g.faults, map[string]string{"xid": "diag reads no XID events (burnin does)"},
		"hang, corrupt, slow-link, slow-nic, slow-node or flaky-link"); err != nil {
		return err
	}
	opt := diag.Options{Root: f.root, Env: diagEnviron(), NVMLLib: f.nvmlLib, Quick: f.quick, ReadDevices: read, Context: cmd.Context()}
	if g.backend == "sim" {
		b, _, err := g.openSim()
		if envErr := err; err != nil && len(ncclEnv()) > 0 {
			// When the NCCL_* variables are what the simulator refuses, diag reports them
			// (nccl-names) and runs its other checks: the flags are checked without them.
			if b, _, err = g.openSimEnv(nil); err == nil {
				b.Close()
				b, opt.BackendErr, opt.SimEnvErr = nil, fmt.Errorf("the simulator refuses the NCCL variables: %w", envErr), envErr
			}
		}
		if err != nil {
			return err
		}
		if b != nil {
			defer b.Close()
			opt.Backend = b
		}
		// The nominal figures come from the topology as written, without --sim-fault's slow links.
		nominal, err := g.loadTopology()
		if err != nil {
			return err
		}
		opt.Sim, opt.Nominal = nominal.Name, nominal
	} else {
		var b gpu.Backend
		opt.CUDA, opt.NCCL, b, opt.BackendErr = diag.OpenLibraries(g.cudaLib, g.ncclLib)
		if b != nil {
			defer b.Close()
			opt.Backend = b
		}
	}
	if e.progress {
		fmt.Fprintln(e.stderr, "gpubench: diag: checking")
	}
	rep := diag.Run(opt)
	if err := diag.Write(e.stdout, g.output, e.version, rep); err != nil {
		return runtimeErr(fmt.Errorf("writing the report: %w", err))
	}
	if failed := rep.Failed(); len(failed) > 0 {
		return &exitError{code: exitCheck, err: fmt.Errorf("diag: %d %s failed: %s", len(failed), map[bool]string{true: "check", false: "checks"}[len(failed) == 1], strings.Join(failed, ", "))}
	}
	return nil
}
