// Package launch runs gpubench as one rank of many processes under the launchers people already
// use (mpirun, srun, torchrun, Kubernetes jobs): it reads this process's rank from their
// environment, picks its GPU, and meets the other processes at a small TCP rendezvous that hands
// out the communicator's id and gathers every rank's figures (docs/multinode.md).
package launch

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ErrConfig marks errors in how the processes were started (environment, flags, a port in use,
// ranks that disagree): the user fixes them, and gpubench exits 2.
var ErrConfig = errors.New("launch configuration")

func configErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
}

// Process is this process's place in a launch.
type Process struct {
	Rank, Size int
	LocalRank  int
	LocalSize  int    // processes on this host; 0 when the launcher does not say
	Source     string // who said so: torchrun, env (RANK, WORLD_SIZE), openmpi, mpich, slurm, flags; "" for one process
	Job        string // the launcher's job id, when it gives one: ranks of other jobs are refused
	env        func(string) (string, bool)
}

// Multi reports whether the run spans processes.
func (p Process) Multi() bool { return p.Size > 1 }

// launcher is how one launcher describes a process.
type launcher struct {
	name                         string
	rank, size, localRank, local string // variable names; local may be ""
	sizeAlt                      string // read when size is not set
	job                          []string
	// active, when set, must hold too (Slurm's variables are also set outside srun).
	active func(env func(string) (string, bool)) bool
}

// launchers in the order they are believed: a launcher started by another (torchrun under srun,
// mpirun inside a Slurm allocation) sets its own variables beside the outer one's.
var launchers = []launcher{
	{name: "torchrun", rank: "RANK", size: "WORLD_SIZE", localRank: "LOCAL_RANK", local: "LOCAL_WORLD_SIZE",
		job: []string{"TORCHELASTIC_RUN_ID"}},
	{name: "openmpi", rank: "OMPI_COMM_WORLD_RANK", size: "OMPI_COMM_WORLD_SIZE",
		localRank: "OMPI_COMM_WORLD_LOCAL_RANK", local: "OMPI_COMM_WORLD_LOCAL_SIZE"},
	// MPICH's and Intel MPI's Hydra.
	{name: "mpich", rank: "PMI_RANK", size: "PMI_SIZE", localRank: "MPI_LOCALRANKID", local: "MPI_LOCALNRANKS"},
	// srun: the batch script itself also has SLURM_PROCID and SLURM_NTASKS, but no step id.
	{name: "slurm", rank: "SLURM_PROCID", size: "SLURM_STEP_NUM_TASKS", sizeAlt: "SLURM_NTASKS", localRank: "SLURM_LOCALID",
		job: []string{"SLURM_JOB_ID", "SLURM_STEP_ID"},
		active: func(env func(string) (string, bool)) bool {
			_, ok := env("SLURM_STEP_ID")
			return ok
		}},
}

// Overrides are the --rank, --world-size and --local-rank flags; -1 means not given.
type Overrides struct{ Rank, Size, LocalRank int }

// Detect reads this process's place from the launcher's environment, with the flags over it. A
// process that no launcher started, and no flag places, is a single process (Size 1).
func Detect(env func(string) (string, bool), o Overrides) (Process, error) {
	p := Process{Size: 1, env: env}
	for _, l := range launchers {
		if _, ok := env(l.rank); !ok || (l.active != nil && !l.active(env)) {
			continue
		}
		var err error
		p.Source = l.name
		if p.Rank, err = intVar(env, l.rank); err != nil {
			return p, err
		}
		size := l.size
		if _, ok := env(size); !ok && l.sizeAlt != "" {
			size = l.sizeAlt
		}
		if p.Size, err = intVar(env, size); err != nil {
			return p, err
		}
		if p.LocalRank, err = intVar(env, l.localRank); err != nil {
			return p, err
		}
		if l.local != "" {
			if _, ok := env(l.local); ok {
				if p.LocalSize, err = intVar(env, l.local); err != nil {
					return p, err
				}
			}
		}
		var job []string
		for _, name := range l.job {
			if v, ok := env(name); ok {
				job = append(job, v)
			}
		}
		p.Job = strings.Join(job, ".")
		if l.name == "torchrun" && p.Job == "" {
			p.Source = "env" // RANK and WORLD_SIZE set by hand or by a job spec, not by torchrun
		}
		break
	}
	if o.Rank >= 0 || o.Size >= 0 || o.LocalRank >= 0 {
		if p.Source == "" {
			if o.Rank < 0 || o.Size < 0 {
				return p, configErr("--rank and --world-size go together (and --local-rank, which defaults to --rank)")
			}
			p.Source = "flags"
			p.LocalRank = o.Rank
		} else {
			p.Source = "flags over " + p.Source
		}
		if o.Rank >= 0 {
			p.Rank = o.Rank
		}
		if o.Size >= 0 {
			p.Size = o.Size
		}
		if o.LocalRank >= 0 {
			p.LocalRank = o.LocalRank
		}
	}
	switch {
	case p.Size < 1:
		return p, configErr("a world of %d ranks (%s): it needs at least 1", p.Size, p.Source)
	case p.Rank < 0 || p.Rank >= p.Size:
		return p, configErr("rank %d is outside a world of %d ranks (%s): ranks run from 0 to %d", p.Rank, p.Size, p.Source, p.Size-1)
	case p.LocalRank < 0:
		return p, configErr("local rank %d (%s) is negative", p.LocalRank, p.Source)
	}
	return p, nil
}

func intVar(env func(string) (string, bool), name string) (int, error) {
	v, ok := env(name)
	if !ok {
		return 0, configErr("%s is not set, though the launcher's other variables are", name)
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, configErr("%s=%q is not a rank or a count", name, v)
	}
	return n, nil
}

// DefaultPort is torchrun's MASTER_PORT default, which gpubench shares.
const DefaultPort = 29500

// Address is where the processes meet: flag (--rendezvous HOST:PORT) first, then MASTER_ADDR
// and MASTER_PORT, then what the launcher implies (docs/multinode.md, "Rendezvous").
func (p Process) Address(flag string) (string, error) {
	if flag != "" {
		host, port, err := splitHostPort(flag)
		if err != nil {
			return "", configErr("--rendezvous %q: %v; use HOST:PORT", flag, err)
		}
		return hostPort(host, port), nil
	}
	port := DefaultPort
	if v, ok := p.env("MASTER_PORT"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 65535 {
			return "", configErr("MASTER_PORT=%q is not a port number (1-65535)", v)
		}
		port = n
		if v, _ := p.env("TORCHELASTIC_USE_AGENT_STORE"); v == "True" && n < 65535 {
			// torchrun's agent already serves its own store at MASTER_PORT on rank 0's host.
			port = n + 1
		}
	} else if job, ok := p.env("SLURM_JOB_ID"); ok && p.Source == "slurm" {
		// One port per job, so that jobs sharing a node do not meet at each other's rendezvous.
		if n, err := strconv.Atoi(job); err == nil {
			port = 20000 + n%20000
		}
	}
	if host, ok := p.env("MASTER_ADDR"); ok && strings.TrimSpace(host) != "" {
		return hostPort(strings.TrimSpace(host), port), nil
	}
	if p.Source == "slurm" {
		for _, name := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
			if list, ok := p.env(name); ok {
				host, err := FirstHost(list)
				if err != nil {
					return "", configErr("%s=%q: %v", name, list, err)
				}
				return hostPort(host, port), nil
			}
		}
	}
	if p.LocalSize == p.Size { // every rank on this host
		return hostPort("127.0.0.1", port), nil
	}
	return "", configErr("%d ranks (%s) need to know rank 0's host: set MASTER_ADDR (and MASTER_PORT) in every process, e.g. mpirun -x MASTER_ADDR=$(hostname), or pass --rendezvous HOST:PORT", p.Size, p.Source)
}

func hostPort(host string, port int) string {
	return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port))
}

// splitHostPort reads --rendezvous: net.SplitHostPort's forms, with a port from 1 to 65535.
func splitHostPort(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not 1-65535", p)
	}
	if host == "" || strings.ContainsAny(host, "[] /") {
		return "", 0, fmt.Errorf("host %q is not a host name or address", host)
	}
	return host, port, nil
}

// FirstHost returns the first host of a Slurm host list, such as "gpu[07-09,12],login1" (gpu07).
func FirstHost(list string) (string, error) {
	var b strings.Builder
	depth := 0
	for i := 0; i < len(list); i++ {
		c := list[i]
		switch {
		case c == '[':
			if depth > 0 {
				return "", errors.New("nested brackets")
			}
			depth = 1
			end := strings.IndexAny(list[i+1:], "-,]")
			if end <= 0 {
				return "", errors.New("an empty or unclosed range")
			}
			first := list[i+1 : i+1+end]
			if strings.Trim(first, "0123456789") != "" {
				return "", fmt.Errorf("range %q is not numeric", first)
			}
			b.WriteString(first)
			i += end
		case c == ']':
			if depth == 0 {
				return "", errors.New("a ']' without '['")
			}
			depth = 0
		case depth > 0:
			// the rest of a range
		case c == ',':
			i = len(list)
		case c <= ' ' || c == '/':
			return "", fmt.Errorf("%q in a host name", c)
		default:
			b.WriteByte(c)
		}
	}
	if depth > 0 {
		return "", errors.New("an unclosed '['")
	}
	if b.Len() == 0 {
		return "", errors.New("no host")
	}
	return b.String(), nil
}

// Device picks this process's GPU among the n it sees: the only one, when the scheduler gave it
// exactly one (CUDA_VISIBLE_DEVICES per process); otherwise the one at its local rank.
func (p Process) Device(n int) (int, error) {
	switch {
	case n == 1:
		return 0, nil
	case p.LocalRank < n:
		return p.LocalRank, nil
	}
	return 0, configErr("local rank %d, but this process sees %d GPUs: start at most one process per GPU on each host, or give each process its own GPU (CUDA_VISIBLE_DEVICES)", p.LocalRank, n)
}
