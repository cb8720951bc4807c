// Package launch runs gpubench as one rank of many processes under the launchers people already
// use (mpirun, srun, torchrun, Kubernetes jobs): it reads this process's rank from their
// environment, picks its GPU, and meets the other processes at a small TCP rendezvous that hands
// out the communicator's id and gathers every rank's figures (docs/multinode.md).
package launch

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
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
	Job        string // the launcher's job id, when it gives one
	// Notice says that RANK and WORLD_SIZE, set by hand (no torchrun job), are believed over a
	// launcher that placed this process in a larger world: often a shell that exported them and
	// then ran mpirun or srun. "" otherwise.
	Notice string
	// key is what every rank of the run shares and proves at the rendezvous: --run-key, else
	// GPUBENCH_RUN_KEY, else the launcher's job id ("" when there is none); keyFrom says which.
	key, keyFrom string
	env          func(string) (string, bool)
}

// KeyFrom says where the run's key came from: --run-key, GPUBENCH_RUN_KEY, or the launcher's job
// variables; "" when the run has none, and any process that speaks gpubench's rendezvous can join.
func (p Process) KeyFrom() string { return p.keyFrom }

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
// mpirun inside a Slurm allocation) sets its own variables beside the outer one's. Their job
// variables are the same in every process of one launch, and differ between launches.
var launchers = []launcher{
	{name: "torchrun", rank: "RANK", size: "WORLD_SIZE", localRank: "LOCAL_RANK", local: "LOCAL_WORLD_SIZE",
		job: []string{"TORCHELASTIC_RUN_ID"}},
	// Open MPI 4 and 5 (PMIx) name the job; Open MPI 4 adds a random key per job.
	{name: "openmpi", rank: "OMPI_COMM_WORLD_RANK", size: "OMPI_COMM_WORLD_SIZE",
		localRank: "OMPI_COMM_WORLD_LOCAL_RANK", local: "OMPI_COMM_WORLD_LOCAL_SIZE",
		job: []string{"PMIX_NAMESPACE", "OMPI_MCA_orte_precondition_transports"}},
	// MPICH's and Intel MPI's Hydra, which put no job id in the environment.
	{name: "mpich", rank: "PMI_RANK", size: "PMI_SIZE", localRank: "MPI_LOCALRANKID", local: "MPI_LOCALNRANKS"},
	// srun: the batch script itself also has SLURM_PROCID and SLURM_NTASKS, but no step id.
	{name: "slurm", rank: "SLURM_PROCID", size: "SLURM_STEP_NUM_TASKS", sizeAlt: "SLURM_NTASKS", localRank: "SLURM_LOCALID",
		job: []string{"SLURM_JOB_ID", "SLURM_STEP_ID"},
		active: func(env func(string) (string, bool)) bool {
			_, ok := env("SLURM_STEP_ID")
			return ok
		}},
}

// Overrides are the --rank, --world-size and --local-rank flags (-1: not given), and --run-key.
type Overrides struct {
	Rank, Size, LocalRank int
	RunKey                string
}

// RunKeyEnv names the variable that gives every rank of a run its key, when --run-key does not.
const RunKeyEnv = "GPUBENCH_RUN_KEY"

// Detect reads this process's place from the launcher's environment, with the flags over it:
// --rank and --world-size together place it without the launcher, whose variables are then not
// read; a flag alone replaces the launcher's variable. A local rank that neither gives is the
// rank modulo the launcher's count of processes on this host, or the rank itself. A process that
// no launcher started, and no flag places, is a single process (Size 1).
func Detect(env func(string) (string, bool), o Overrides) (Process, error) {
	p := Process{Size: 1, env: env}
	var l *launcher
	if o.Rank < 0 || o.Size < 0 {
		for i := range launchers {
			if _, ok := env(launchers[i].rank); ok && (launchers[i].active == nil || launchers[i].active(env)) {
				l = &launchers[i]
				break
			}
		}
	}
	flags := o.Rank >= 0 || o.Size >= 0 || o.LocalRank >= 0
	switch {
	case l == nil && !flags:
		return p, nil
	case l == nil && (o.Rank < 0 || o.Size < 0):
		return p, configErr("--rank and --world-size go together (and --local-rank, which defaults to --rank)")
	case l == nil:
		p.Source = "flags"
	default:
		var job, from []string
		for _, name := range l.job {
			if v, ok := env(name); ok {
				job, from = append(job, v), append(from, name)
			}
		}
		p.Job, p.keyFrom = strings.Join(job, "."), strings.Join(from, "+")
		p.Source = l.name
		if l.name == "torchrun" && p.Job == "" {
			p.Source = "env" // RANK and WORLD_SIZE set by hand or by a job spec, not by torchrun
		}
		if flags {
			p.Source = "flags over " + p.Source
		}
	}
	// value is the flag when given, else the launcher's variable; ok is false when neither is.
	value := func(flag int, names ...string) (n int, ok bool, err error) {
		if flag >= 0 {
			return flag, true, nil
		}
		for _, name := range names {
			if _, set := env(name); name != "" && set {
				n, err = intVar(env, name)
				return n, true, err
			}
		}
		return 0, false, nil
	}
	if l == nil {
		l = &launcher{} // flags alone: no variables
	}
	var ok bool
	var err error
	if p.Rank, _, err = value(o.Rank, l.rank); err != nil {
		return p, err
	}
	if p.Size, ok, err = value(o.Size, l.size, l.sizeAlt); err != nil {
		return p, err
	} else if !ok {
		return p, configErr("%s is set but %s is not: set it in every process, or pass --world-size", l.rank, l.size)
	}
	if o.Size < 0 { // the launcher's count of processes on this host belongs to its world
		if p.LocalSize, _, err = value(-1, l.local); err != nil {
			return p, err
		}
	}
	if p.LocalRank, ok, err = value(o.LocalRank, l.localRank); err != nil {
		return p, err
	} else if !ok {
		p.LocalRank = p.Rank
		if p.LocalSize > 0 {
			p.LocalRank = p.Rank % p.LocalSize
		}
	}
	if v, _ := env(RunKeyEnv); v != "" {
		p.key, p.keyFrom = v, RunKeyEnv
	} else {
		p.key = p.Job
	}
	if o.RunKey != "" {
		p.key, p.keyFrom = o.RunKey, "--run-key"
	}
	if p.Source == "env" {
		for _, other := range launchers[1:] {
			if _, ok := env(other.rank); !ok || other.active != nil && !other.active(env) {
				continue
			}
			// A launcher started inside another makes a larger world (torchrun under srun); a
			// smaller one is left over from elsewhere.
			if n, ok, err := value(-1, other.size, other.sizeAlt); err == nil && ok && n > p.Size {
				p.Notice = fmt.Sprintf("RANK and WORLD_SIZE (a world of %d) are set and believed over %s's %d processes: unset them if %s started this process", p.Size, other.name, n, other.name)
				break
			}
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

// intVar reads a variable that is set: a rank or a count.
func intVar(env func(string) (string, bool), name string) (int, error) {
	v, _ := env(name)
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, configErr("%s=%q is not a rank or a count: give a whole number from 0, as the launcher sets it", name, v)
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
	if v, ok := p.env("MASTER_ADDR"); ok && strings.TrimSpace(v) != "" {
		host := strings.TrimSpace(v)
		if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' { // an IPv6 address as in a URL
			host = host[1 : len(host)-1]
		}
		if err := checkHost(host); err != nil {
			return "", configErr("MASTER_ADDR=%q: %v; give rank 0's host name or address alone (the port goes in MASTER_PORT)", v, err)
		}
		return hostPort(host, port), nil
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
	if err := checkHost(host); err != nil {
		return "", 0, err
	}
	return host, port, nil
}

// checkHost refuses what is not a host name or an IP address: empty, brackets, a slash, spaces or
// control characters, or a colon outside an IPv6 address (a port, which goes elsewhere).
func checkHost(host string) error {
	bad := host == "" || strings.ContainsAny(host, "[]/") || strings.IndexFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0
	if _, err := netip.ParseAddr(host); !bad && strings.Contains(host, ":") && err != nil {
		bad = true
	}
	if bad {
		return fmt.Errorf("host %q is not a host name or address", host)
	}
	return nil
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
	if err := checkHost(b.String()); err != nil {
		return "", err
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

// CountCPUs is how many cpus a Linux cpu list names ("0-63,128-191", as
// /sys/devices/system/cpu/online holds it); 0 when list is not one, or names more than maxCPUs.
func CountCPUs(list string) int {
	list = strings.TrimSpace(list)
	if list == "" {
		return 0
	}
	n := 0
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a >= maxCPUs || strings.HasPrefix(lo, "+") {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b >= maxCPUs || strings.HasPrefix(hi, "+") {
				return 0
			}
		}
		if n += b - a + 1; n > maxCPUs {
			return 0
		}
	}
	return n
}

// maxCPUs bounds a cpu list: Linux's own limit (CONFIG_NR_CPUS) is at most 8,192.
const maxCPUs = 8192
