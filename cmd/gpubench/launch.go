package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/launch"
)

// launchFlags place a collective command's process among many (docs/multinode.md).
type launchFlags struct {
	rank, worldSize, localRank int
	rendezvous                 string
	timeout                    time.Duration
}

func (l *launchFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&l.rank, "rank", -1, "this process's rank (default: from mpirun, srun or torchrun's variables)")
	fl.IntVar(&l.worldSize, "world-size", -1, "number of processes, one GPU each (default: from the launcher)")
	fl.IntVar(&l.localRank, "local-rank", -1, "rank among this host's processes, which picks the GPU (default: from the launcher)")
	fl.StringVar(&l.rendezvous, "rendezvous", "", "HOST:PORT where rank 0 meets the others (default: MASTER_ADDR:MASTER_PORT, or what the launcher implies)")
	fl.DurationVar(&l.timeout, "rendezvous-timeout", 5*time.Minute, "how long ranks wait for each other to start")
}

// process is this process's place: from the launcher's variables, with the flags over them.
func (l *launchFlags) process() (launch.Process, error) {
	p, err := launch.Detect(os.LookupEnv, launch.Overrides{Rank: l.rank, Size: l.worldSize, LocalRank: l.localRank})
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
	group *launch.Group
	comm  gpu.Comm
	pids  []int
	line  string // the header's launch line
}

// joinWorld picks this process's GPU, meets the other ranks and joins the communicator; it fills
// opt so that the engine drives this rank only.
func joinWorld(cmd *cobra.Command, e *env, b gpu.Backend, p launch.Process, addr string, l *launchFlags, opt *coll.Options) (*world, error) {
	joiner, ok := b.(gpu.Joiner)
	if !ok {
		return nil, runtimeErr(fmt.Errorf("the %s backend cannot run across processes", b.Name()))
	}
	devs := b.Devices()
	var dev int
	if b.Name() == "sim" { // the topology is the whole world: rank r is its GPU r
		if p.Size > len(devs) {
			return nil, usageErr("%d ranks, but the simulated %s has %d GPUs: use a --topology with at least %d", p.Size, b.Topology().Name, len(devs), p.Size)
		}
		dev = p.Rank
	} else {
		var err error
		if dev, err = p.Device(len(devs)); err != nil {
			return nil, usageErr("%v", launchMsg(err))
		}
	}
	host, _ := os.Hostname()
	me := launch.Member{Host: host, PID: e.pid, Device: devs[dev], Run: runOf(b, opt)}
	g, err := launch.Join(cmd.Context(), p, addr, l.timeout, me, joiner.NewUniqueID)
	if err != nil {
		if errors.Is(err, launch.ErrConfig) {
			return nil, usageErr("%s", launchMsg(err))
		}
		return nil, runtimeErr(fmt.Errorf("rank %d: %w", p.Rank, err))
	}
	comm, err := joiner.JoinComm(g.Context(), g.ID(), p.Size, p.Rank, dev)
	if err != nil {
		if cause := g.Err(); cause != nil { // another rank failed first: name it
			err = cause
		} else {
			err = fmt.Errorf("rank %d joining the communicator: %w", p.Rank, err)
		}
		g.Close(err)
		return nil, runtimeErr(err)
	}
	w := &world{group: g, comm: comm, line: fmt.Sprintf("%s, %d processes, rendezvous %s", p.Source, p.Size, addr)}
	opt.Comm, opt.Rank, opt.Group = comm, p.Rank, g
	for _, m := range g.Members() {
		opt.Devices = append(opt.Devices, m.Device)
		w.pids = append(w.pids, m.PID)
	}
	return w, nil
}

// close leaves the run, telling the others why when this rank failed; it returns the error to
// report: a failure elsewhere that ended this rank's run is reported as that failure.
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
		return cause
	}
	return runErr
}

// runOf says what a rank will run: the collective and every option that decides how many calls
// it makes and of what, which all ranks must share.
func runOf(b gpu.Backend, opt *coll.Options) string {
	where := b.Name()
	if t := b.Topology(); b.Name() == "sim" && t != nil {
		where += " " + t.Name
	}
	return fmt.Sprintf("%s on %s, sizes %d-%d x%d +%d, types %v, ops %v, root %d, -n %d -w %d -c %d -a %d -G %d -z %d, per-iter %v",
		opt.Coll.Name, where, opt.Sweep.Min, opt.Sweep.Max, opt.Sweep.Factor, opt.Sweep.Step, opt.DTypes, opt.Ops, opt.Root,
		opt.Iters, opt.Warmup, opt.Check, opt.Average, opt.Graph, opt.Blocking, opt.PerIter)
}

// hubHost is the host part of a rendezvous address: where rank 0 is reached.
func hubHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return host
}
