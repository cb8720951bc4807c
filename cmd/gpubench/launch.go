package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/launch"
	"github.com/gpubench/gpubench/internal/sim"
)

// launchFlags place a collective command's process among many (docs/multinode.md).
type launchFlags struct {
	rank, worldSize, localRank int
	rendezvous                 string
	runKey                     string
	timeout                    time.Duration
}

func (l *launchFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&l.rank, "rank", -1, "this process's rank (default: from mpirun, srun or torchrun's variables)")
	fl.IntVar(&l.worldSize, "world-size", -1, "number of processes, one GPU each (default: from the launcher)")
	fl.IntVar(&l.localRank, "local-rank", -1, "rank among this host's processes, which picks the GPU (default: from the launcher)")
	fl.StringVar(&l.rendezvous, "rendezvous", "", "HOST:PORT where rank 0 meets the others (default: MASTER_ADDR:MASTER_PORT, or what the launcher implies)")
	fl.DurationVar(&l.timeout, "rendezvous-timeout", 5*time.Minute, "how long ranks wait for each other to start")
	fl.StringVar(&l.runKey, "run-key", "", "key every rank of a run shares, so that no other process can join it (default: $"+launch.RunKeyEnv+", else the launcher's job id)")
}

// process is this process's place: from the launcher's variables, with the flags over them.
func (l *launchFlags) process() (launch.Process, error) {
	p, err := launch.Detect(os.LookupEnv, launch.Overrides{Rank: l.rank, Size: l.worldSize, LocalRank: l.localRank, RunKey: l.runKey})
	if err != nil {
		return p, usageErr("%v", launchMsg(err))
	}
	if l.timeout <= 0 {
		return p, usageErr("invalid --rendezvous-timeout %v: use a positive duration such as 5m", l.timeout)
	}
	return p, nil
}

// launchMsg drops the error class's prefix from a configuration error.
func launchMsg(err error) string {
	msg, _ := strings.CutPrefix(err.Error(), launch.ErrConfig.Error()+": ")
	return msg
}

// world is this process's share of a run across processes.
type world struct {
	ctx   context.Context // this process's own: it ends on a signal to this process
	group *launch.Group
	comm  gpu.Comm
	pids  []int
	line  string // the header's launch line
}

// joinWorld picks this process's GPU, meets the other ranks and joins the communicator; it fills
// opt so that the engine drives this rank only.
func joinWorld(cmd *cobra.Command, e *env, g *globals, b gpu.Backend, p launch.Process, addr string, l *launchFlags, opt *coll.Options) (*world, error) {
	joiner, ok := b.(gpu.Joiner)
	if !ok {
		return nil, runtimeErr(fmt.Errorf("the %s backend cannot run across processes", b.Name()))
	}
	devs := b.Devices()
	// A local rank past the GPUs this process sees is a launch error on every backend, though the
	// simulator runs rank r on its GPU r: the topology is the whole world.
	dev, err := p.Device(len(devs))
	if err != nil {
		return nil, usageErr("%v", launchMsg(err))
	}
	if b.Name() == "sim" {
		if p.Size > len(devs) {
			return nil, usageErr("%d ranks, but the simulated %s has %d GPUs: use a --topology with at least %d", p.Size, b.Topology().Name, len(devs), p.Size)
		}
		dev = p.Rank
	}
	run, err := runOf(b, g, opt)
	if err != nil {
		return nil, err
	}
	online, _ := os.ReadFile("/sys/devices/system/cpu/online")
	if n := procsPerRank(p.LocalSize, runtime.GOMAXPROCS(0), runtime.NumCPU(), launch.CountCPUs(string(online)), os.Getenv("GOMAXPROCS") != ""); n > 0 && e.procs != nil {
		e.procs(n)
	}
	host, _ := os.Hostname()
	me := launch.Member{Host: host, PID: e.pid, Device: devs[dev], Run: run}
	grp, err := launch.Join(cmd.Context(), p, addr, l.timeout, me, joiner.NewUniqueID)
	if err != nil {
		if errors.Is(err, launch.ErrConfig) {
			return nil, usageErr("%s", launchMsg(err))
		}
		return nil, runtimeErr(fmt.Errorf("rank %d: %w", p.Rank, err))
	}
	comm, err := joiner.JoinComm(grp.Context(), grp.ID(), p.Size, p.Rank, dev)
	if err != nil {
		if cause := grp.Err(); cause != nil { // another rank failed first: name it
			err = cause
		} else {
			err = fmt.Errorf("rank %d joining the communicator: %w", p.Rank, err)
		}
		grp.Close(err)
		return nil, runtimeErr(err)
	}
	key := "no run key"
	if p.KeyFrom() != "" {
		key = "run key from " + p.KeyFrom()
	}
	w := &world{ctx: cmd.Context(), group: grp, comm: comm, line: fmt.Sprintf("%s, %d processes, rendezvous %s, %s", p.Source, p.Size, addr, key)}
	opt.Comm, opt.Rank, opt.Group = comm, p.Rank, grp
	for _, m := range grp.Members() {
		opt.Devices = append(opt.Devices, m.Device)
		w.pids = append(w.pids, m.PID)
	}
	return w, nil
}

// procsPerRank is how many cpus a rank's Go code runs on when local processes share the host:
// its share of the processors the runtime would use (procs: the cpus this process may run on,
// within a container's cpu quota), at least one, as torchrun gives each of its processes one
// OpenMP thread. Each Go runtime otherwise keeps a processor per cpu, and its idle ones spin and
// sleep against the other ranks': 16 simulated ranks on two cpus took a fifth less CPU on one
// each (docs/model.md, "Scale"). 0 leaves the runtime as it is: one process on the host (or the
// launcher does not say); GOMAXPROCS set by the user; or a process bound to some of the host's
// cpus (affinity, of online), as mpirun and srun bind each rank to its own share, which is then
// already divided (a container's cpuset looks the same, and keeps the runtime's choice).
func procsPerRank(local, procs, affinity, online int, userSet bool) int {
	if local <= 1 || userSet || online > 0 && affinity < online {
		return 0
	}
	return max(1, procs/local)
}

// close leaves the run, telling the others why when this rank failed; it returns the error to
// report: a failure elsewhere that ended this rank's run is reported as that failure, unless a
// signal stopped this process too.
func (w *world) close(runErr error) error {
	if runErr != nil && w.group.Err() == nil {
		// A rank that died breaks the communicator at once; the rendezvous's word on who it was
		// may take a moment longer.
		select {
		case <-w.group.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}
	cause := w.group.Err()
	w.group.Close(runErr)
	w.comm.Close()
	if runErr != nil && cause != nil {
		if w.ctx.Err() != nil {
			return context.Cause(w.ctx)
		}
		return cause
	}
	return runErr
}

// runOf says what a rank will run: the collective and every option that decides how many calls
// it makes, of what, with what data, and what results it expects, which all ranks must share. It
// is a list of fields separated by "; ", so that a refusal can name the ones that differ.
func runOf(b gpu.Backend, g *globals, opt *coll.Options) (string, error) {
	fields := []string{
		"collective " + opt.Coll.Name,
		"backend " + b.Name(),
		fmt.Sprintf("sizes %d-%d x%d +%d", opt.Sweep.Min, opt.Sweep.Max, opt.Sweep.Factor, opt.Sweep.Step),
		fmt.Sprintf("-d %v", opt.DTypes),
		fmt.Sprintf("-o %v", opt.Ops),
		fmt.Sprintf("-r %d", opt.Root),
		fmt.Sprintf("-n %d", opt.Iters),
		fmt.Sprintf("-w %d", opt.Warmup),
		fmt.Sprintf("-c %d", opt.Check),
		fmt.Sprintf("-a %d", opt.Average),
		fmt.Sprintf("-G %d", opt.Graph),
		fmt.Sprintf("-z %d", opt.Blocking),
		fmt.Sprintf("--per-iter %v", opt.PerIter),
		fmt.Sprintf("-N %d", opt.Cycles), // how many times the sweep's calls are made
		fmt.Sprintf("-C %v", opt.CPUTime),
		fmt.Sprintf("--seed %d", opt.Seed), // the inputs, and so the expected results
	}
	if t := b.Topology(); b.Name() == "sim" && t != nil {
		// The simulator's machine, data and faults decide every time and every result.
		js, err := json.Marshal(t)
		if err != nil {
			return "", runtimeErr(fmt.Errorf("describing the topology to the other ranks: %w", err))
		}
		capBytes, err := parseCap(g.dataCap)
		if err != nil {
			return "", usageErr("invalid --sim-data-cap %q: %v", g.dataCap, err)
		}
		faults := make([]string, len(g.faults))
		for i, f := range g.faults {
			fault, err := sim.ParseFault(f)
			if err != nil {
				return "", usageErr("invalid --sim-fault: %v", err)
			}
			faults[i] = fmt.Sprintf("%+v", fault)
		}
		// The NCCL_* variables the simulator reads steer every simulated clock too (each process
		// computes them all).
		var nccl []string
		env := ncclEnv()
		for _, k := range sim.EnvVars {
			if v, ok := env[k]; ok {
				nccl = append(nccl, k+"="+v)
			}
		}
		sum := sha256.Sum256(js)
		fields = append(fields, fmt.Sprintf("--topology %s (%x)", t.Name, sum[:6]),
			fmt.Sprintf("--sim-data-cap %d", capBytes), fmt.Sprintf("--sim-jitter %v", g.jitter),
			"--sim-fault ["+strings.Join(faults, " ")+"]", "NCCL_* ["+strings.Join(nccl, " ")+"]")
	}
	return strings.Join(fields, "; "), nil
}

// hubHost is the host part of a rendezvous address: where rank 0 is reached.
func hubHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return host
}
