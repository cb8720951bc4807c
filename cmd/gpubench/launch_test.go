package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/launch"
	"github.com/gpubench/gpubench/internal/sim"
)

// loopbackPort returns a loopback port that was free a moment ago. Another process can take it
// before gpubench listens there; callers start again on another when gpubench says so
// (portTaken).
func loopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// portTaken reports whether gpubench's stderr says another process had its rendezvous port.
func portTaken(stderr string) bool {
	return strings.Contains(stderr, "for the rendezvous: it is in use")
}

// attempts is how many ports a test tries before it believes gpubench's error.
const attempts = 5

// syncBuffer is a bytes.Buffer that a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rankProcess is one gpubench process of a run across processes.
type rankProcess struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	code           int
}

// startRanks starts size gpubench processes with torchrun's variables, as torchrun would.
func startRanks(t *testing.T, ctx context.Context, size int, extraEnv []string, args ...string) []*rankProcess {
	t.Helper()
	return startRanksWith(t, ctx, size, extraEnv, func(int) []string { return args }, nil)
}

// startRanksWith is startRanks with each rank's own arguments. Rank 0 starts first, on a port
// found free, and the others once it listens there (on another port when the first was taken
// meanwhile); pace, when set, runs before each other rank starts, with the ranks started so far.
func startRanksWith(t *testing.T, ctx context.Context, size int, extraEnv []string, argsOf func(rank int) []string, pace func(rank int, started []*rankProcess)) []*rankProcess {
	t.Helper()
	for try := 1; ; try++ {
		port := loopbackPort(t)
		start := func(rank int) *rankProcess {
			p := &rankProcess{done: make(chan struct{})}
			p.cmd = exec.CommandContext(ctx, os.Args[0])
			p.cmd.Env = append(append(os.Environ(), "GPUBENCH_AS_CLI="+strings.Join(argsOf(rank), "\x1f"),
				"RANK="+strconv.Itoa(rank), "WORLD_SIZE="+strconv.Itoa(size), "LOCAL_RANK="+strconv.Itoa(rank),
				"LOCAL_WORLD_SIZE="+strconv.Itoa(size), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port,
				"TORCHELASTIC_RUN_ID=test-"+port), extraEnv...)
			p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
			if err := p.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() {
				p.cmd.Wait()
				p.code = p.cmd.ProcessState.ExitCode()
				close(p.done)
			}()
			t.Cleanup(func() {
				p.cmd.Process.Kill()
				<-p.done
			})
			return p
		}
		ps := []*rankProcess{start(0)}
		if !listening(port, ps[0]) && portTaken(ps[0].stderr.String()) && try < attempts {
			continue
		}
		for rank := 1; rank < size; rank++ {
			if pace != nil {
				pace(rank, ps)
			}
			ps = append(ps, start(rank))
		}
		return ps
	}
}

// firstRow waits until rank 0 has printed a row (its stdout holds marker, the redop column's).
func firstRow(t *testing.T, rank0 *rankProcess, marker string) {
	t.Helper()
	for !strings.Contains(rank0.stdout.String(), marker) {
		select {
		case <-rank0.done:
			t.Fatalf("rank 0 ended before its first row: exit %d, %s", rank0.code, rank0.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// listening waits until rank 0 answers at port as gpubench does, or has exited.
func listening(port string, rank0 *rankProcess) bool {
	for {
		if conn, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			var m map[string]any
			conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // something else may listen there
			err = json.NewDecoder(conn).Decode(&m)
			conn.Close()
			if err == nil && m["challenge"] != nil {
				return true
			}
		}
		select {
		case <-rank0.done:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Four processes started with torchrun's variables: rank 0 prints one table for the world,
// naming every rank's process, and the others print nothing.
func TestRanksStartedAsTorchrunDoes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	procs := t.TempDir()
	ps := startRanks(t, ctx, 4, []string{"GPUBENCH_TEST_REAL_PID=1", "GOMAXPROCS=", "GPUBENCH_TEST_PROCS=" + procs},
		"allreduce", "--backend", "sim", "--sizes", "1K:1M:x32", "--output", "json")
	for _, p := range ps {
		<-p.done
	}
	for rank, p := range ps {
		if p.code != 0 || p.stderr.String() != "" {
			t.Fatalf("rank %d: exit %d, stderr %q", rank, p.code, p.stderr.String())
		}
		if rank > 0 && p.stdout.String() != "" {
			t.Errorf("rank %d printed %q", rank, p.stdout.String())
		}
		// Four processes share this host: each runs its Go code on its share of the cpus, unless
		// this test runs bound to some of them (taskset), which the ranks then leave alone.
		n, err := os.ReadFile(filepath.Join(procs, strconv.Itoa(p.cmd.Process.Pid)))
		online, _ := os.ReadFile("/sys/devices/system/cpu/online")
		if bound := runtime.NumCPU() < launch.CountCPUs(string(online)); bound {
			if err == nil {
				t.Errorf("rank %d, bound to %d cpus, set GOMAXPROCS to %s", rank, runtime.NumCPU(), n)
			}
		} else if want := strconv.Itoa(max(1, runtime.NumCPU()/4)); err != nil || string(n) != want {
			t.Errorf("rank %d set GOMAXPROCS to %q (%v); want %s", rank, n, err, want)
		}
	}
	var doc struct {
		Launch  string `json:"launch"`
		Devices []struct {
			Rank, PID, Device int
		} `json:"devices"`
		Results []struct {
			OutOfPlace struct {
				Wrong       *int64    `json:"wrong"`
				RankTimesUS []float64 `json:"rank_time_us"`
			} `json:"out_of_place"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(ps[0].stdout.String()), &doc); err != nil {
		t.Fatalf("%v: %s", err, ps[0].stdout.String())
	}
	if !strings.HasPrefix(doc.Launch, "torchrun, 4 processes, rendezvous 127.0.0.1:") || len(doc.Devices) != 4 || len(doc.Results) != 3 {
		t.Fatalf("launch %q, %d devices, %d results", doc.Launch, len(doc.Devices), len(doc.Results))
	}
	for rank, d := range doc.Devices {
		if d.Rank != rank || d.Device != rank || d.PID != ps[rank].cmd.Process.Pid {
			t.Errorf("device %d: %+v, want rank %d's pid %d", rank, d, rank, ps[rank].cmd.Process.Pid)
		}
	}
	for _, r := range doc.Results {
		if r.OutOfPlace.Wrong == nil || *r.OutOfPlace.Wrong != 0 || len(r.OutOfPlace.RankTimesUS) != 4 {
			t.Errorf("result %+v", r)
		}
	}
}

// A rank killed mid-run, rank 0 included, is named by every rank that is left, within moments,
// and none of them waits for ever.
func TestKilledRankIsNamedByTheOthers(t *testing.T) {
	t.Parallel()
	for _, victim := range []int{2, 0} {
		t.Run("rank "+strconv.Itoa(victim), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ps := startRanks(t, ctx, 4, nil, "sendrecv", "--backend", "sim", "--sizes", "8B:1M", "-n", "2000", "-w", "0", "-c", "0")
			firstRow(t, ps[0], "     sum  ")
			if err := ps[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			name := "rank " + strconv.Itoa(victim)
			for rank, p := range ps {
				if rank == victim {
					continue
				}
				<-p.done
				if p.code != exitFailure || !strings.Contains(p.stderr.String(), name+" (") || !strings.Contains(p.stderr.String(), "left") {
					t.Errorf("rank %d: exit %d, stderr %q; want exit %d naming %s", rank, p.code, p.stderr.String(), exitFailure, name)
				}
			}
			t.Logf("the others stopped within %v", time.Since(killed))
		})
	}
}

// Ctrl-C under a launcher signals every rank, and every rank says it was interrupted (exit 130),
// none that another "left"; a signal to one rank alone stops all, each naming that rank. Rank 0
// keeps the rows it measured.
func TestSignalStopsEveryRank(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		target int // -1: every rank
	}{{"every rank", -1}, {"rank 1", 1}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ps := startRanks(t, ctx, 4, nil, "allreduce", "--backend", "sim", "--sizes", "8B:1M", "-n", "5000", "-w", "0", "-c", "0")
			firstRow(t, ps[0], "     sum  ")
			for rank, p := range ps {
				if c.target < 0 || rank == c.target {
					if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
						t.Fatal(err)
					}
				}
			}
			for rank, p := range ps {
				<-p.done
				// Signalled, a rank says so, unless word that another was stopped came first.
				want := []string{"gpubench: interrupted: interrupt signal received\n", "gpubench: interrupted: rank "}
				if c.target >= 0 && rank != c.target {
					want = []string{"gpubench: interrupted: rank 1 ("}
				}
				stderr := p.stderr.String()
				if p.code != exitInterrupt || !slices.ContainsFunc(want, func(w string) bool { return strings.HasPrefix(stderr, w) }) || strings.Contains(stderr, "left") {
					t.Errorf("rank %d: exit %d, stderr %q; want exit %d, one of %q", rank, p.code, stderr, exitInterrupt, want)
				}
			}
			if out := ps[0].stdout.String(); !strings.Contains(out, "# Stopped early") || !strings.Contains(out, "# Collective test concluded") {
				t.Errorf("rank 0's table does not end as a stopped run's:\n%s", out)
			}
		})
	}
}

// A hang on one rank's GPU ends every rank's run as a hang (exit 5), whichever rank finds it and
// whichever hears of it from another.
func TestHangStopsEveryRank(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := startRanks(t, ctx, 4, nil, "allreduce", "--backend", "sim", "--sizes", "8B:1M", "--sim-fault", "hang=2@10", "-T", "1")
	for rank, p := range ps {
		<-p.done
		if stderr := p.stderr.String(); p.code != exitHang || !strings.HasPrefix(stderr, "gpubench: hang: ") || !strings.Contains(stderr, "rank 2 did not finish") {
			t.Errorf("rank %d: exit %d, stderr %q; want exit %d naming rank 2", rank, p.code, stderr, exitHang)
		}
	}
}

// A stopped rank (SIGSTOP: its process answers the network but never comes) is a hang for -T,
// also where the others meet only to gather each row's times: each other rank exits 5.
func TestStoppedRankIsAHang(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := startRanks(t, ctx, 4, nil, "allreduce", "--backend", "sim", "--sizes", "1M:4G:+1M", "-n", "20", "-w", "0", "--sim-data-cap", "0", "-T", "2")
	firstRow(t, ps[0], "     sum  ")
	if err := ps[2].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Rank 0, where the figures meet, names rank 2, whether the others wait for it at a row's
	// times or at a meeting of a call's data; the others, waiting a little longer, hear it.
	for rank, p := range ps {
		if rank == 2 {
			continue
		}
		<-p.done
		want := "gpubench: hang: rank 0 ("
		if rank == 0 {
			want = "gpubench: hang: allreduce at "
		}
		if stderr := p.stderr.String(); p.code != exitHang || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "rank 2 did not finish") {
			t.Errorf("rank %d: exit %d, stderr %q; want exit %d, %q naming rank 2", rank, p.code, stderr, exitHang, want)
		}
	}
	ps[2].cmd.Process.Signal(syscall.SIGCONT)
}

// Wrong data on one rank's GPU, with several check iterations: every rank runs the same number
// of check collectives, finds the error and exits 3.
func TestWrongDataAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := startRanks(t, ctx, 2, nil, "allreduce", "--backend", "sim", "--sizes", "1K:4K", "-c", "3", "--sim-fault", "corrupt=1", "-T", "60")
	for rank, p := range ps {
		<-p.done
		if p.code != exitCheck {
			t.Errorf("rank %d: exit %d, stderr %q; want %d", rank, p.code, p.stderr.String(), exitCheck)
		}
	}
	if !strings.Contains(ps[0].stdout.String(), "# Out of bounds values : 6 FAILED") {
		t.Errorf("rank 0's table:\n%s", ps[0].stdout.String())
	}
}

// Ranks started with different options are refused before they run anything.
func TestRanksMustRunTheSameThing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := startRanksWith(t, ctx, 2, nil, func(rank int) []string {
		args := []string{"allreduce", "--backend", "sim", "--sizes", "1K:4K"}
		if rank == 0 {
			args = append(args, "--per-iter")
		}
		return args
	}, nil)
	for rank, p := range ps {
		<-p.done
		if p.code != exitUsage || !strings.Contains(p.stderr.String(), "start every process with the same command and options") {
			t.Errorf("rank %d: exit %d, stderr %q", rank, p.code, p.stderr.String())
		}
	}
}

// A rank started with another collective is refused on every rank, deterministically: a rank
// that starts after rank 0 has judged the odd one hears it too, rather than waiting for a rank 0
// that has gone.
func TestRanksMustRunTheSameCollective(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := startRanksWith(t, ctx, 3, nil, func(rank int) []string {
		c := "allreduce"
		if rank == 1 {
			c = "allgather"
		}
		return []string{c, "--backend", "sim", "--sizes", "1K:4K", "--rendezvous-timeout", "30s"}
	}, func(rank int, started []*rankProcess) {
		if rank == 2 { // once rank 1 has been refused, or has had time to be
			select {
			case <-started[1].done:
			case <-time.After(time.Second):
			}
		}
	})
	for rank, p := range ps {
		<-p.done
		if p.code != exitUsage || !strings.Contains(p.stderr.String(), "rank 1 (") ||
			!strings.Contains(p.stderr.String(), "was started with collective allgather, -o [], rank 0 with collective allreduce, -o [sum]:") {
			t.Errorf("rank %d: exit %d, stderr %q", rank, p.code, p.stderr.String())
		}
	}
}

// Every option that changes the data or the results expected of it is one the ranks must share:
// a rank started with another is refused, exit 2, naming it, rather than every rank reporting
// wrong data.
func TestRanksMustAgreeOnTheData(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ args []string }{
		{[]string{"--seed", "7"}},
		{[]string{"--sim-data-cap", "0"}},
		{[]string{"--sim-fault", "corrupt=1"}},
		{[]string{"--sim-jitter", "0.1"}},
		{[]string{"-d", "int32"}},
		{[]string{"-N", "2"}}, // the calls made: rank 0 would wait for ever for a second cycle
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ps := startRanksWith(t, ctx, 2, nil, func(rank int) []string {
				args := []string{"allreduce", "--backend", "sim", "--sizes", "1K:4K"}
				if rank == 1 {
					args = append(args, tc.args...)
				}
				return args
			}, nil)
			for rank, p := range ps {
				<-p.done
				if p.code != exitUsage || !strings.Contains(p.stderr.String(), "was started with "+tc.args[0]) {
					t.Errorf("rank %d: exit %d, stderr %q", rank, p.code, p.stderr.String())
				}
			}
		})
	}
}

// The flags place a process whatever the launcher's variables say, even half of them: the
// missing local rank is not asked for.
func TestFlagsOverHalfALauncher(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := gpubenchProcess(t, []string{"RANK=1", "WORLD_SIZE=2"},
		"allreduce", "--backend", "sim", "--sizes", "1K", "--rank", "0", "--world-size", "1", "--rendezvous", "127.0.0.1:1")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "# Out of bounds values : 0 OK") {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
}

// Launches that cannot work are refused with one line and exit 2.
func TestBadLaunches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"rank outside the world", []string{"RANK=4", "WORLD_SIZE=4", "LOCAL_RANK=0"}, nil, "rank 4 is outside a world of 4 ranks (env)"},
		{"garbled variable", []string{"OMPI_COMM_WORLD_RANK=x", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0"}, nil, `OMPI_COMM_WORLD_RANK="x" is not a rank`},
		{"several GPUs per process", []string{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1"}, []string{"-g", "2"}, "invalid -g 2: across processes each process drives one GPU"},
		{"-C across processes", []string{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1"}, []string{"-C", "1"}, "-C 1 across processes is not simulated"},
		{"several threads per process", []string{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1"}, []string{"-t", "2", "-g", "1"}, "invalid -t 2: across processes each process drives one GPU from one thread"},
		{"no rendezvous across hosts", []string{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=16", "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=8"}, nil, "set MASTER_ADDR"},
		{"a world larger than the topology", []string{"RANK=0", "WORLD_SIZE=9", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1"}, nil, "9 ranks, but the simulated dgx-h100 has 8 GPUs"},
		{"rank without world size", nil, []string{"--rank", "1"}, "--rank and --world-size go together"},
		{"a local rank past the GPUs", []string{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=99", "MASTER_ADDR=127.0.0.1"}, []string{"--rendezvous-timeout", "1s"},
			"local rank 99, but this process sees 8 GPUs"},
		{"a world size missing", []string{"RANK=0", "LOCAL_RANK=0"}, nil, "RANK is set but WORLD_SIZE is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"allreduce", "--backend", "sim", "--sizes", "1K"}, tc.args...)
			stdout, stderr, code := gpubenchProcess(t, tc.env, args...)
			if code != exitUsage || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line containing %q", code, stdout, stderr, tc.want)
			}
		})
	}
	t.Run("port in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		_, stderr, code := gpubenchProcess(t, []string{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port},
			"allreduce", "--backend", "sim", "--sizes", "1K")
		if code != exitUsage || !strings.Contains(stderr, "port "+port+" for the rendezvous: it is in use") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("a rank that never comes", func(t *testing.T) {
		var stderr string
		var code int
		for try := 1; try == 1 || portTaken(stderr) && try <= attempts; try++ {
			_, stderr, code = gpubenchProcess(t, []string{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + loopbackPort(t)},
				"allreduce", "--backend", "sim", "--sizes", "1K", "--rendezvous-timeout", "1s")
		}
		if code != exitFailure || !strings.Contains(stderr, "rank 1 did not reach the rendezvous") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
}

// Debian's Open MPI starts four ranks; rank 0 prints one table with all four.
func TestUnderMpirun(t *testing.T) {
	t.Parallel()
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mpirun is not installed (CI installs openmpi-bin)")
		}
		t.Skip("mpirun is not installed (apt-get install openmpi-bin)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := strings.Join([]string{"allreduce", "--backend", "sim", "--sizes", "8B:1M:x8"}, "\x1f")
	var stdout, stderr bytes.Buffer
	for try := 1; ; try++ {
		cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4",
			"-x", "GPUBENCH_AS_CLI", "-x", "MASTER_PORT", os.Args[0])
		cmd.Env = append(os.Environ(), "GPUBENCH_AS_CLI="+args, "MASTER_PORT="+loopbackPort(t),
			"OMPI_MCA_plm_rsh_agent=", "OMPI_MCA_btl_vader_single_copy_mechanism=none")
		stdout.Reset()
		stderr.Reset()
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil {
			break
		}
		if !portTaken(stderr.String()) || try == attempts {
			t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	}
	out := stdout.String()
	if strings.Count(out, "# Collective test concluded: all_reduce_perf") != 1 || strings.Count(out, "#  Rank ") != 4 ||
		!strings.Contains(out, "# Launch: openmpi, 4 processes, rendezvous 127.0.0.1:") || !strings.Contains(out, "# Out of bounds values : 0 OK") ||
		!strings.Contains(out, ", run key from PMIX_NAMESPACE") { // Open MPI names its job in every process
		t.Errorf("want one table of four ranks from rank 0, keyed by Open MPI's job:\n%s\nstderr:\n%s", out, stderr.String())
	}
	for rank := range 4 {
		if !strings.Contains(out, "#  Rank  "+strconv.Itoa(rank)+" Group  0 Pid") {
			t.Errorf("rank %d missing from the header", rank)
		}
	}
}

// The NCCL_* variables the simulator reads steer every simulated clock, which each process
// computes itself: they are part of what the ranks must share, so a rank started with others is
// refused; a variable the simulator does not read is not compared.
func TestRunOfHoldsNCCLEnv(t *testing.T) {
	tp, err := sim.LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(tp, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range sim.EnvVars { // the environment's own, such as CI's
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("NCCL_GRAPH_MIXING_SUPPORT", "0")
	g := &globals{dataCap: "8MiB"}
	opt := &coll.Options{Coll: coll.AllReduce, Sweep: coll.Sweep{Min: 8, Max: 8, Factor: 2}}
	without, err := runOf(b, g, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NCCL_PROTO", "LL")
	t.Setenv("NCCL_ALGO", "Ring")
	with, err := runOf(b, g, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(without, "NCCL_* []") || !strings.HasSuffix(with, "NCCL_* [NCCL_ALGO=Ring NCCL_PROTO=LL]") {
		t.Errorf("with NCCL_ALGO and NCCL_PROTO set: %q; without: %q", with, without)
	}
}

// A rank whose launcher says how many processes share the host runs its Go code on its share of
// the host's cpus, at least one; alone on its host, or with GOMAXPROCS set, it is left alone.
func TestProcsPerRank(t *testing.T) {
	for _, tc := range []struct {
		local, procs, affinity, online int
		userSet                        bool
		want                           int
	}{
		{16, 2, 2, 2, false, 1},       // this machine: 16 ranks on 2 cpus
		{8, 128, 128, 128, false, 16}, // a whole host
		{3, 8, 8, 8, false, 2},
		{2, 4, 64, 64, false, 2},   // a container's quota of 4 cpus on a 64-cpu host: the share of 4
		{8, 16, 16, 128, false, 0}, // bound to 16 of 128 cpus by the launcher: already its share
		{8, 16, 16, 0, false, 2},   // online cpus unknown: the share
		{1, 8, 8, 8, false, 0}, {0, 8, 8, 8, false, 0}, {16, 2, 2, 2, true, 0},
	} {
		if got := procsPerRank(tc.local, tc.procs, tc.affinity, tc.online, tc.userSet); got != tc.want {
			t.Errorf("procsPerRank(%d, %d, %d, %d, %v) = %d; want %d", tc.local, tc.procs, tc.affinity, tc.online, tc.userSet, got, tc.want)
		}
	}
}
