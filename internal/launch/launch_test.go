package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/gpu"
	"github.com/gpubench/gpubench/internal/sim"
)

func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

var none = Overrides{Rank: -1, Size: -1, LocalRank: -1}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		o    Overrides
		want Process // env is not compared
		err  string
	}{
		{name: "single process", env: map[string]string{}, want: Process{Size: 1}},
		{name: "RANK and WORLD_SIZE left over in a shell that ran mpirun", env: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
			want: Process{Size: 1, Source: "env", Notice: "RANK and WORLD_SIZE (a world of 1) are set and believed over openmpi's 2 processes: unset them if openmpi started this process"}},
		{name: "RANK and WORLD_SIZE that agree with mpirun", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
			want: Process{Rank: 1, Size: 2, LocalRank: 1, Source: "env"}},
		{name: "torchrun", env: map[string]string{"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "j1"},
			want: Process{Rank: 5, Size: 16, LocalRank: 5, LocalSize: 8, Source: "torchrun", Job: "j1", key: "j1"}},
		{name: "openmpi", env: map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
			want: Process{Rank: 3, Size: 4, LocalRank: 3, LocalSize: 4, Source: "openmpi"}},
		{name: "mpich", env: map[string]string{"PMI_RANK": "9", "PMI_SIZE": "16", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "8"},
			want: Process{Rank: 9, Size: 16, LocalRank: 1, LocalSize: 8, Source: "mpich"}},
		{name: "srun", env: map[string]string{"SLURM_PROCID": "7", "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "64", "SLURM_LOCALID": "3", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "4411"},
			want: Process{Rank: 7, Size: 8, LocalRank: 3, Source: "slurm", Job: "4411.0", key: "4411.0"}},
		{name: "srun without the step's task count", env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0"},
			want: Process{Rank: 1, Size: 2, LocalRank: 1, Source: "slurm", Job: "0", key: "0"}},
		{name: "a batch script outside srun is one process", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "16", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "1"},
			want: Process{Size: 1}},
		{name: "torchrun wins over the srun that started it", env: map[string]string{"RANK": "12", "WORLD_SIZE": "16", "LOCAL_RANK": "4", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0"},
			want: Process{Rank: 12, Size: 16, LocalRank: 4, Source: "env"}},
		{name: "flags alone", env: map[string]string{}, o: Overrides{Rank: 2, Size: 4, LocalRank: -1},
			want: Process{Rank: 2, Size: 4, LocalRank: 2, Source: "flags"}},
		{name: "flags over a launcher", env: map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3"}, o: Overrides{Rank: -1, Size: -1, LocalRank: 0},
			want: Process{Rank: 3, Size: 4, LocalRank: 0, Source: "flags over openmpi"}},
		{name: "rank without world size", env: map[string]string{}, o: Overrides{Rank: 1, Size: -1, LocalRank: -1}, err: "--rank and --world-size go together"},
		{name: "not a number", env: map[string]string{"RANK": "one", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, err: `RANK="one" is not a rank`},
		// Flags win: --rank and --world-size place the process without the launcher's variables,
		// even half of them or garbled ones.
		{name: "flags over half a launcher", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2"}, o: Overrides{Rank: 0, Size: 1, LocalRank: -1},
			want: Process{Rank: 0, Size: 1, LocalRank: 0, Source: "flags"}},
		{name: "flags over garbled variables", env: map[string]string{"RANK": "x", "OMPI_COMM_WORLD_RANK": "y", "LOCAL_RANK": "z"}, o: Overrides{Rank: 1, Size: 2, LocalRank: -1},
			want: Process{Rank: 1, Size: 2, LocalRank: 1, Source: "flags"}},
		{name: "a flag fills in a missing variable", env: map[string]string{"RANK": "1", "TORCHELASTIC_RUN_ID": "r"}, o: Overrides{Rank: -1, Size: 4, LocalRank: -1},
			want: Process{Rank: 1, Size: 4, LocalRank: 1, Source: "flags over torchrun", Job: "r", key: "r"}},
		// A missing local rank defaults to the rank modulo the processes on this host, else the rank.
		{name: "no local rank", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2"},
			want: Process{Rank: 1, Size: 2, LocalRank: 1, Source: "env"}},
		{name: "no local rank, but a local size", env: map[string]string{"RANK": "9", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"},
			want: Process{Rank: 9, Size: 16, LocalRank: 1, LocalSize: 8, Source: "env"}},
		{name: "no world size", env: map[string]string{"RANK": "1", "LOCAL_RANK": "1"}, err: "RANK is set but WORLD_SIZE is not: set it in every process, or pass --world-size"},
		// The run's key: --run-key, else GPUBENCH_RUN_KEY, else the launcher's job id.
		{name: "Open MPI's job", env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
			"PMIX_NAMESPACE": "1435500545", "OMPI_MCA_orte_precondition_transports": "d0bbdf2130777296-6d2fd689ea7f1498"},
			want: Process{Rank: 1, Size: 2, LocalRank: 1, Source: "openmpi", Job: "1435500545.d0bbdf2130777296-6d2fd689ea7f1498", key: "1435500545.d0bbdf2130777296-6d2fd689ea7f1498"}},
		{name: "key from the environment", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "r", "GPUBENCH_RUN_KEY": "k"},
			want: Process{Rank: 1, Size: 2, LocalRank: 1, Source: "torchrun", Job: "r", key: "k"}},
		{name: "key from the flag", env: map[string]string{"GPUBENCH_RUN_KEY": "k"}, o: Overrides{Rank: 1, Size: 2, LocalRank: -1, RunKey: "f"},
			want: Process{Rank: 1, Size: 2, LocalRank: 1, Source: "flags", key: "f"}},
		{name: "rank outside the world", env: map[string]string{"RANK": "4", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}, err: "rank 4 is outside a world of 4 ranks (env)"},
		{name: "empty world", env: map[string]string{"PMI_RANK": "0", "PMI_SIZE": "0", "MPI_LOCALRANKID": "0"}, err: "a world of 0 ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			if o == (Overrides{}) {
				o = none
			}
			got, err := Detect(envOf(tc.env), o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrConfig) {
					t.Fatalf("error %v, want a configuration error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.env, got.keyFrom = nil, ""
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestAddress(t *testing.T) {
	for _, tc := range []struct {
		name, flag string
		env        map[string]string
		want, err  string
	}{
		{name: "flag", flag: "node7:1234", env: map[string]string{"MASTER_ADDR": "x", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, want: "node7:1234"},
		{name: "IPv6 flag", flag: "[fe80::1]:99", env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, want: "[fe80::1]:99"},
		{name: "torchrun's variables", env: map[string]string{"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29400", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, want: "10.0.0.5:29400"},
		{name: "beside torchrun's own store", env: map[string]string{"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29400", "TORCHELASTIC_USE_AGENT_STORE": "True", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "x"}, want: "10.0.0.5:29401"},
		{name: "default port", env: map[string]string{"MASTER_ADDR": "head", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, want: "head:29500"},
		{name: "slurm's first node and a port per job", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "16", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "123456", "SLURM_STEP_NODELIST": "gpu[07-08,11]"}, want: "gpu07:23456"},
		{name: "mpirun on one host", env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, want: "127.0.0.1:29500"},
		{name: "mpirun on several hosts", env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, err: "set MASTER_ADDR"},
		{name: "bad port", env: map[string]string{"MASTER_ADDR": "h", "MASTER_PORT": "70000", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, err: "MASTER_PORT=\"70000\""},
		{name: "bad flag", flag: "node7", env: map[string]string{}, err: "--rendezvous \"node7\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Detect(envOf(tc.env), none)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Address(tc.flag)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrConfig) {
					t.Fatalf("error %v, want a configuration error containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestFirstHost(t *testing.T) {
	for list, want := range map[string]string{
		"node1": "node1", "a,b": "a", "gpu[07-09,12],login": "gpu07", "rack1-n[3-4]-ib": "rack1-n3-ib", "x[5]": "x5",
	} {
		if got, err := FirstHost(list); err != nil || got != want {
			t.Errorf("FirstHost(%q) = %q, %v; want %q", list, got, err, want)
		}
	}
	for _, bad := range []string{"", "[", "a[1-2", "a]", "a[[1]]", "a[]", "a b", ","} {
		if got, err := FirstHost(bad); err == nil {
			t.Errorf("FirstHost(%q) = %q, want an error", bad, got)
		}
	}
}

func FuzzFirstHost(f *testing.F) {
	for _, s := range []string{"gpu[07-09,12],login", "a", "x[1]y[2]", "[", "a,b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		host, err := FirstHost(list)
		if err == nil && (host == "" || strings.ContainsAny(host, "[], ")) {
			t.Fatalf("FirstHost(%q) = %q", list, host)
		}
	})
}

func FuzzAddressFlag(f *testing.F) {
	for _, s := range []string{"node7:1234", "[::1]:5", "h:0", ":9", "a:b:c"} {
		f.Add(s)
	}
	p := Process{Size: 2, env: envOf(nil)}
	f.Fuzz(func(t *testing.T, flag string) {
		addr, err := p.Address(flag)
		if flag != "" && err == nil {
			host, port, err := net.SplitHostPort(addr)
			if err != nil || host == "" || port == "0" {
				t.Fatalf("--rendezvous %q gave %q (%v)", flag, addr, err)
			}
		}
	})
}

func TestDevice(t *testing.T) {
	p := Process{Rank: 9, Size: 16, LocalRank: 1}
	if d, err := p.Device(1); d != 0 || err != nil { // one visible GPU: that one, whatever the local rank
		t.Errorf("one GPU: %d, %v", d, err)
	}
	if d, err := p.Device(8); d != 1 || err != nil {
		t.Errorf("eight GPUs: %d, %v", d, err)
	}
	p.LocalRank = 8
	if _, err := p.Device(8); err == nil || !strings.Contains(err.Error(), "local rank 8, but this process sees 8 GPUs") {
		t.Errorf("too few GPUs: %v", err)
	}
}

// listenLoopback opens a listener on a free loopback port, which rank 0 is handed, so that no
// other process can take the port between choosing it and listening on it.
func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// refusingAddr returns a loopback address that refuses connections for the whole test: a socket
// bound to it, and held, that does not listen.
func refusingAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}

// world joins size goroutines at ln, which rank 0 serves; fn runs in each with its group, or
// its join error.
func world(t testing.TB, size int, ln net.Listener, timeout time.Duration, hello func(rank int) (Process, Member), fn func(rank int, g *Group, err error)) {
	t.Helper()
	var wg sync.WaitGroup
	for rank := range size {
		wg.Go(func() {
			p, me := Process{Rank: rank, Size: size, LocalRank: rank, Source: "flags"}, Member{Host: "h" + strconv.Itoa(rank), PID: 100 + rank}
			if hello != nil {
				p, me = hello(rank)
			}
			var l net.Listener
			if p.Rank == 0 {
				l = ln
			}
			g, err := join(context.Background(), p, ln.Addr().String(), l, timeout, me, func() ([]byte, error) { return []byte("the id"), nil })
			fn(rank, g, err)
		})
	}
	wg.Wait()
}

func TestRendezvous(t *testing.T) {
	world(t, 4, listenLoopback(t), 30*time.Second, nil, func(rank int, g *Group, err error) {
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return
		}
		defer g.Close(nil)
		if string(g.ID()) != "the id" || len(g.Members()) != 4 {
			t.Errorf("rank %d: id %q, %d members", rank, g.ID(), len(g.Members()))
		}
		for r, m := range g.Members() {
			if m.Rank != r || m.PID != 100+r || m.Host != "h"+strconv.Itoa(r) {
				t.Errorf("rank %d sees member %d as %+v", rank, r, m)
			}
		}
		for step := range 3 {
			all, err := g.AllGather(context.Background(), []float64{float64(rank), float64(step)})
			if err != nil {
				t.Errorf("rank %d step %d: %v", rank, step, err)
				return
			}
			for r, v := range all {
				if len(v) != 2 || v[0] != float64(r) || v[1] != float64(step) {
					t.Errorf("rank %d step %d: rank %d sent %v", rank, step, r, v)
				}
			}
		}
	})
}

func TestRendezvousRefusesBadLaunches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hello func(rank int) (Process, Member)
		want  string
	}{
		{"world sizes differ", func(rank int) (Process, Member) {
			size := 3
			if rank == 2 {
				size = 4
			}
			return Process{Rank: rank, Size: size}, Member{Host: "h", PID: rank}
		}, "was started with a world of 4 ranks, rank 0 with 3"},
		{"rank 0's world is larger", func(rank int) (Process, Member) {
			size := 3
			if rank == 0 {
				size = 4
			}
			return Process{Rank: rank, Size: size}, Member{Host: "h", PID: rank}
		}, "was started with a world of 3 ranks, rank 0 with 4"},
		{"two processes claim one rank", func(rank int) (Process, Member) {
			return Process{Rank: min(rank, 1), Size: 3}, Member{Host: "h", PID: rank}
		}, "rank 1 is claimed by two processes"},
		{"options differ", func(rank int) (Process, Member) {
			run := "collective allreduce; -n 20; --seed 0"
			if rank == 1 {
				run = "collective allreduce; -n 20; --seed 7"
			}
			return Process{Rank: rank, Size: 3, key: "k"}, Member{Host: "h", PID: rank, Run: run}
		}, "rank 1 (h, pid 1) was started with --seed 7, rank 0 with --seed 0: start every process with the same command and options"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := make([]error, 3)
			world(t, 3, listenLoopback(t), 20*time.Second, tc.hello, func(rank int, g *Group, err error) {
				errs[rank] = err
				if g != nil {
					g.Close(nil)
				}
			})
			for r, err := range errs {
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("rank %d: %v, want a configuration error containing %q", r, err, tc.want)
				}
			}
		})
	}
}

// Ranks of a larger world that arrive after rank 0 has refused a smaller one are told the same,
// not left to time out on a rendezvous that is gone: rank 1 claims a world of 2 and is refused at
// once; rank 2, of rank 0's world of 3, comes a moment later.
func TestRefusalReachesLateRanks(t *testing.T) {
	errs := make([]error, 3)
	world(t, 3, listenLoopback(t), 20*time.Second, func(rank int) (Process, Member) {
		size := 3
		switch rank {
		case 1:
			size = 2
		case 2:
			time.Sleep(300 * time.Millisecond) // after rank 0 has refused rank 1
		}
		return Process{Rank: rank, Size: size}, Member{Host: "h", PID: rank}
	}, func(rank int, g *Group, err error) {
		errs[rank] = err
		if g != nil {
			g.Close(nil)
		}
	})
	for r, err := range errs {
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "was started with a world of 2 ranks, rank 0 with 3") {
			t.Errorf("rank %d: %v, want the world-size refusal", r, err)
		}
	}
}

// A process that claims a rank already taken fills the count rank 0 waits for: the rank still to
// come after it is told the refusal too, not left to wait out its timeout (rank 2 would fail with
// "rank 0 did not answer" after 20 s).
func TestRefusalReachesTheRankDisplaced(t *testing.T) {
	errs := make([]error, 4)
	world(t, 4, listenLoopback(t), 20*time.Second, func(rank int) (Process, Member) {
		r := rank
		switch rank {
		case 2:
			r = 1
		case 3:
			r = 2
			time.Sleep(300 * time.Millisecond) // after rank 0 has refused the second rank 1
		}
		return Process{Rank: r, Size: 3}, Member{Host: "h", PID: rank}
	}, func(rank int, g *Group, err error) {
		errs[rank] = err
		if g != nil {
			g.Close(nil)
		}
	})
	for i, err := range errs {
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "rank 1 is claimed by two processes") {
			t.Errorf("process %d: %v, want the refusal of rank 1 claimed twice", i, err)
		}
	}
}

// A rank started with another command is refused on every rank, a rank that arrives after it
// included: the refusal waits until the world has arrived.
func TestRefusalReachesEveryRank(t *testing.T) {
	errs := make([]error, 3)
	refused := make(chan struct{})
	world(t, 3, listenLoopback(t), 20*time.Second, func(rank int) (Process, Member) {
		run := "collective allreduce; -n 20"
		switch rank {
		case 1:
			run = "collective allgather; -n 20"
		case 2:
			select { // after rank 1 has been judged
			case <-refused:
			case <-time.After(500 * time.Millisecond):
			}
		}
		return Process{Rank: rank, Size: 3, key: "k"}, Member{Host: "h", PID: rank, Run: run}
	}, func(rank int, g *Group, err error) {
		errs[rank] = err
		if rank == 1 {
			close(refused)
		}
		if g != nil {
			g.Close(nil)
		}
	})
	want := "rank 1 (h, pid 1) was started with collective allgather, rank 0 with collective allreduce"
	for r, err := range errs {
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want a configuration error containing %q", r, err, want)
		}
	}
}

// Connections that are not ranks of this run: idle ones, garbage, hellos without the run's key
// (with another run string, as a rank already there, as the rank still missing), and a rank of
// another run. Rank 0 drops them all, tells them nothing of the key or of the run, and the real
// ranks meet as if they had not come.
func TestRendezvousIgnoresStrangers(t *testing.T) {
	ln := listenLoopback(t)
	addr := ln.Addr().String()
	const key, run = "the-run-key-4411", "collective allreduce; -n 20"
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for range 40 { // idle, from before rank 0 starts until the run has met
		dial()
	}
	strangersGone := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		world(t, 3, ln, 30*time.Second, func(rank int) (Process, Member) {
			if rank == 2 { // the last rank comes after every stranger
				<-strangersGone
			}
			return Process{Rank: rank, Size: 3, key: key}, Member{Host: "h" + strconv.Itoa(rank), PID: 100 + rank, Run: run}
		}, func(rank int, g *Group, err error) {
			if err != nil {
				t.Errorf("rank %d: %v", rank, err)
				return
			}
			defer g.Close(nil)
			if m := g.Members()[2]; m.PID != 102 {
				t.Errorf("rank %d: rank 2 is %v", rank, m)
			}
			all, err := g.AllGather(context.Background(), []float64{float64(rank)})
			if err != nil || len(all) != 3 || all[2][0] != 2 {
				t.Errorf("rank %d: %v, %v", rank, all, err)
			}
		})
	})

	garbage := dial()
	if _, err := garbage.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if reply, _ := io.ReadAll(garbage); strings.Contains(string(reply), "abort") {
		t.Errorf("garbage got %q", reply)
	}
	for _, h := range []hello{
		{Member: Member{Rank: 1, Host: "x", Run: "collective allgather; -n 20"}, Size: 3},
		{Member: Member{Rank: 1, Host: "x", Run: run}, Size: 3},
		{Member: Member{Rank: 2, Host: "x", Run: run}, Size: 3},
		{Member: Member{Rank: 7, Host: "x", Run: run}, Size: 9},
	} {
		c := dial()
		dec := json.NewDecoder(c)
		var m message
		if err := dec.Decode(&m); err != nil || len(m.Challenge) == 0 {
			t.Fatalf("no challenge: %+v, %v", m, err)
		}
		h.Proof = prove("a guess", m.Challenge)
		if err := json.NewEncoder(c).Encode(message{Hello: &h}); err != nil {
			t.Fatal(err)
		}
		reply, _ := io.ReadAll(io.MultiReader(dec.Buffered(), c))
		for _, secret := range []string{key, run, "h0"} {
			if strings.Contains(string(reply), secret) {
				t.Errorf("a hello without the key learned %q: %s", secret, reply)
			}
		}
		if !strings.Contains(string(reply), "of another run") {
			t.Errorf("a hello without the key got %q", reply)
		}
	}
	// A rank of another run at the same port is told so, and the run goes on.
	_, err := Join(context.Background(), Process{Rank: 2, Size: 3, key: "another run's key"}, addr, 30*time.Second, Member{Host: "y", Run: run}, nil)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "rank 2 (y, pid 0) reached the rendezvous at "+addr+" of another run") {
		t.Errorf("a rank of another run: %v", err)
	}
	close(strangersGone)
	wg.Wait()
}

// Whatever a connection says, rank 0 lets no one in without the key's proof, and reads no more
// than a hello's worth.
func FuzzGreet(f *testing.F) {
	f.Add([]byte(`{"hello":{"rank":1,"size":2,"run":"r","proof":"AAAA"}}` + "\n"))
	f.Add([]byte(`{"hello":{"rank":1,"size":2}}{"bye":true}`))
	f.Add([]byte("GET / HTTP/1.0\r\n\r\n"))
	f.Add(append([]byte(`{"hello":{"run":"`), bytes.Repeat([]byte("x"), maxHello)...))
	g := &Group{p: Process{Rank: 0, Size: 2, key: "k"}, addr: "127.0.0.1:1"}
	f.Fuzz(func(t *testing.T, said []byte) {
		ours, theirs := net.Pipe()
		go func() {
			var m message
			if json.NewDecoder(theirs).Decode(&m) == nil {
				go io.Copy(io.Discard, theirs) // rank 0's answer
				theirs.Write(said)             // returns once rank 0 has read it all, or closed
			}
			theirs.Close()
		}()
		arrivals, done := make(chan arrival, 1), make(chan struct{})
		g.greet(ours, arrivals, done)
		select {
		case a := <-arrivals:
			t.Fatalf("%q got in as %+v", said, a.h)
		default:
		}
	})
}

func TestRendezvousNamesRanksThatNeverCome(t *testing.T) {
	ln := listenLoopback(t)
	addr := ln.Addr().String()
	world(t, 2, ln, 2*time.Second, func(rank int) (Process, Member) {
		return Process{Rank: rank * 2, Size: 4}, Member{Host: "h", PID: rank} // ranks 0 and 2 of 4
	}, func(rank int, g *Group, err error) {
		if rank == 0 && (err == nil || !strings.Contains(err.Error(), "rank 1,3 did not reach the rendezvous at "+addr+" within 2s")) {
			t.Errorf("rank 0: %v", err)
		}
		if rank == 1 && (err == nil || !strings.Contains(err.Error(), "rank 1,3 did not reach")) {
			t.Errorf("rank 2: %v", err)
		}
	})
	// And a rank with no rank 0 to call gives up too.
	addr = refusingAddr(t)
	_, err := Join(context.Background(), Process{Rank: 1, Size: 2}, addr, time.Second, Member{}, nil)
	if err == nil || !strings.Contains(err.Error(), "rank 0 did not open the rendezvous at "+addr) {
		t.Errorf("rank 1 alone: %v", err)
	}
}

func TestRendezvousPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	_, err = Join(context.Background(), Process{Size: 2}, "127.0.0.1:"+port, time.Second, Member{}, nil)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "port "+port+" for the rendezvous: it is in use") {
		t.Errorf("got %v", err)
	}
}

// A rank that dies mid-run (its connection drops without a goodbye) is named on every other rank.
func TestRankThatLeavesIsNamed(t *testing.T) {
	world(t, 3, listenLoopback(t), 20*time.Second, nil, func(rank int, g *Group, err error) {
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return
		}
		if _, err := g.AllGather(context.Background(), []float64{1}); err != nil {
			t.Errorf("rank %d: %v", rank, err)
		}
		if rank == 2 {
			g.peers[0].conn.Close() // as the kernel does for a killed process
			return
		}
		_, err = g.AllGather(context.Background(), []float64{2})
		if err == nil || !strings.Contains(err.Error(), "rank 2 (h2, pid 102) left the run") {
			t.Errorf("rank %d: %v", rank, err)
		}
		if cause := context.Cause(g.Context()); cause == nil || !strings.Contains(cause.Error(), "rank 2 (h2, pid 102)") {
			t.Errorf("rank %d: context cause %v", rank, cause)
		}
		g.Close(err)
	})
}

// After KeepGoing, a rank that leaves, one that fails and two that stop answering are set aside,
// each named with why, and the others go on: their figures arrive, the set-aside ranks' are nil.
func TestKeepGoingSetsRanksAside(t *testing.T) {
	const size = 6
	hung := make(chan struct{})
	world(t, size, listenLoopback(t), 20*time.Second, nil, func(rank int, g *Group, err error) {
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return
		}
		g.KeepGoing(500 * time.Millisecond)
		if _, err := g.AllGather(context.Background(), []float64{1}); err != nil {
			t.Errorf("rank %d: %v", rank, err)
		}
		switch rank {
		case 2:
			g.peers[0].conn.Close() // as the kernel does for a killed process
			return
		case 3:
			g.Close(errors.New("out of memory"))
			return
		case 4, 5:
			<-hung // alive, connected, and not at the next step until rank 0 is done
			<-g.Context().Done()
			if cause := context.Cause(g.Context()); cause == nil || !strings.Contains(cause.Error(), fmt.Sprintf("rank 0 went on without rank %d (h%d, pid 10%d): it did not reach step 2", rank, rank, rank)) {
				t.Errorf("rank %d set aside hears %v", rank, cause)
			}
			g.Close(nil)
			return
		}
		for step := 2; step <= 3; step++ {
			all, err := g.AllGather(context.Background(), []float64{float64(10*step + rank)})
			if err != nil {
				t.Errorf("rank %d step %d: %v", rank, step, err)
				return
			}
			if len(all) != size || all[0][0] != float64(10*step) || all[1][0] != float64(10*step+1) || all[2] != nil || all[3] != nil || all[4] != nil || all[5] != nil {
				t.Errorf("rank %d step %d: %v", rank, step, all)
			}
		}
		if rank == 0 {
			gone := g.Gone()
			for r, want := range map[int]string{2: "its process exited or lost its connection", 3: "it failed: out of memory", 4: "did not reach step 2 of the run within 500ms of rank 0", 5: "did not reach step 2 of the run within 500ms of rank 0"} {
				if !strings.Contains(gone[r], want) {
					t.Errorf("rank %d set aside for %q, want %q", r, gone[r], want)
				}
			}
			close(hung)
		}
		g.Close(nil)
	})
}

// A rank that fails tells the others why at once.
func TestRankFailureReachesEveryRank(t *testing.T) {
	world(t, 3, listenLoopback(t), 20*time.Second, nil, func(rank int, g *Group, err error) {
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return
		}
		if rank == 1 {
			g.Close(errors.New("out of memory"))
			return
		}
		_, err = g.AllGather(context.Background(), nil)
		if err == nil || !strings.Contains(err.Error(), "rank 1 (h1, pid 101) failed: out of memory") {
			t.Errorf("rank %d: %v", rank, err)
		}
		g.Close(err)
	})
}

// A signal that stops one rank, and a hang one rank finds, reach every rank as what they are, so
// that every process exits as an interrupted or a hung run does, naming where it began. The
// signal ends the stopped rank's group before it closes, as the command's context does.
func TestInterruptionAndHangReachEveryRank(t *testing.T) {
	sig := fmt.Errorf("interrupt signal received: %w", context.Canceled)
	for _, c := range []struct {
		name, want string
		from       int
		err        error
		is         func(error) bool
	}{
		{"interrupted", "rank 1 (h1, pid 101) was stopped: interrupt signal received", 1, sig,
			func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"interrupted rank 0", "rank 0 (h0, pid 100) was stopped: interrupt signal received", 0, sig,
			func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"hang", "rank 2 (h2, pid 102) failed: rank 1 did not finish", 2, &gpu.HangError{Ranks: []int{1}, Err: context.DeadlineExceeded},
			func(err error) bool { var h *gpu.HangError; return errors.As(err, &h) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			world(t, 3, listenLoopback(t), 20*time.Second, nil, func(rank int, g *Group, err error) {
				if err != nil {
					t.Errorf("rank %d: %v", rank, err)
					return
				}
				if rank == c.from {
					if errors.Is(c.err, context.Canceled) {
						g.cancel(c.err)
					}
					g.Close(c.err)
					return
				}
				_, err = g.AllGather(context.Background(), nil)
				if err == nil || !strings.Contains(err.Error(), c.want) || !c.is(err) {
					t.Errorf("rank %d: %v (%T), want %q of its class", rank, err, err, c.want)
				}
				g.Close(err)
			})
		})
	}
}

// The engine over the simulator with one goroutine per rank, as one process per rank runs it:
// every rank agrees on every figure, the data is right, and the times are the model's.
func TestEngineAcrossProcesses(t *testing.T) {
	for _, c := range coll.Collectives {
		t.Run(c.Name, func(t *testing.T) {
			sums, errs := runWorld(t, 4, c, nil, worldCap)
			for rank, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", rank, err)
				}
			}
			want := sums[0]
			if len(want.Results) != 5 || want.OutOfBounds != 0 {
				t.Fatalf("rank 0: %d results, %d wrong", len(want.Results), want.OutOfBounds)
			}
			for _, res := range want.Results {
				for _, p := range []coll.Placement{res.OutOfPlace, res.InPlace} {
					if !c.InPlaceUnchecked && (p.Wrong == nil || *p.Wrong != 0) || p.TimeUS <= 0 || len(p.RankTimesUS) != 4 {
						t.Errorf("%d B: %+v", res.Size, p)
					}
				}
			}
			w, _ := json.Marshal(want.Results)
			for rank, s := range sums[1:] {
				if got, _ := json.Marshal(s.Results); string(got) != string(w) {
					t.Errorf("rank %d's results differ from rank 0's:\n%s\n%s", rank+1, got, w)
				}
			}
		})
	}
}

// A corrupt result on one rank's device is found, and counted on every rank.
func TestEngineAcrossProcessesFindsWrongData(t *testing.T) {
	sums, errs := runWorld(t, 3, coll.AllReduce, []sim.Fault{{Kind: "corrupt", Device: 2}}, worldCap)
	for rank, s := range sums {
		if errs[rank] != nil || s.OutOfBounds == 0 {
			t.Errorf("rank %d: %v, %d wrong", rank, errs[rank], s.OutOfBounds)
		}
	}
}

// runWorld runs c on size simulated ranks, each with its own backend, meeting at a rendezvous.
// worldCap is a data cap that backs every size runRank runs with data: the cap is the whole
// world's, and 4 ranks' all-gather buffers at 1 MiB take 4 × (1 + 4) MiB.
const worldCap = 32 << 20

// The data cap means the same sizes with a launcher as without: a world of processes, one rank
// each, checks the sizes that one process simulating the same GPUs checks, and times the rest.
func TestDataCapIsTheWorlds(t *testing.T) {
	const dataCap = 1 << 20
	sums, errs := runWorld(t, 4, coll.AllReduce, nil, dataCap)
	for rank, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}
	topo, err := sim.LoadTopology("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(topo, sim.Options{DataCap: dataCap})
	if err != nil {
		t.Fatal(err)
	}
	one, err := coll.Run(context.Background(), b, coll.Options{Coll: coll.AllReduce, Sweep: worldSweep, DTypes: []gpu.DType{gpu.Float},
		Ops: []gpu.RedOp{gpu.Sum}, Iters: 3, Warmup: 1, Check: 1, Average: 1, NGPUs: 4})
	if err != nil {
		t.Fatal(err)
	}
	timingOnly := func(s *coll.Summary) (sizes []int64) {
		for _, r := range s.Results {
			if r.OutOfPlace.TimingOnly {
				sizes = append(sizes, r.Size)
			}
		}
		return sizes
	}
	got, want := timingOnly(sums[0]), timingOnly(one)
	if len(want) == 0 || len(want) == len(one.Results) || !slices.Equal(got, want) {
		t.Errorf("timing-only sizes: %v across processes, %v in one process; want the same, some but not all", got, want)
	}
}

var worldSweep = coll.Sweep{Min: 64, Max: 1 << 20, Factor: 8}

func runWorld(t *testing.T, size int, c *coll.Collective, faults []sim.Fault, dataCap int64) ([]*coll.Summary, []error) {
	ln := listenLoopback(t)
	sums, errs := make([]*coll.Summary, size), make([]error, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Go(func() { sums[rank], errs[rank] = runRank(c, rank, size, ln, faults, dataCap) })
	}
	wg.Wait()
	return sums, errs
}

// runRank runs one rank; rank 0 serves the rendezvous on ln.
func runRank(c *coll.Collective, rank, size int, ln net.Listener, faults []sim.Fault, dataCap int64) (*coll.Summary, error) {
	topo, err := sim.LoadTopology("dgx-h100")
	if err != nil {
		return nil, err
	}
	b, err := sim.New(topo, sim.Options{DataCap: dataCap, Faults: faults})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	me := Member{Host: "h", PID: rank, Device: b.Devices()[rank]}
	var l net.Listener
	if rank == 0 {
		l = ln
	}
	g, err := join(context.Background(), Process{Rank: rank, Size: size}, ln.Addr().String(), l, 20*time.Second, me, b.NewUniqueID)
	if err != nil {
		return nil, err
	}
	comm, err := b.JoinComm(g.Context(), g.ID(), size, rank, rank)
	if err != nil {
		g.Close(err)
		return nil, err
	}
	defer comm.Close()
	devs := make([]gpu.Device, size)
	for r, m := range g.Members() {
		devs[r] = m.Device
	}
	opt := coll.Options{Coll: c, Sweep: worldSweep, DTypes: []gpu.DType{gpu.Float},
		Ops: []gpu.RedOp{gpu.Sum}, Iters: 3, Warmup: 1, Check: 1, Average: 1,
		Comm: comm, Rank: rank, Devices: devs, Group: g}
	s, err := coll.Run(g.Context(), b, opt)
	g.Close(err)
	return s, err
}

// The rendezvous serves 1,024 ranks (a fleet of 128 nodes of 8 GPUs, one process each): all meet,
// each knows every other, and one exchange among all of them completes. BenchmarkRendezvous
// measures its cost per rank.
func TestRendezvousScale(t *testing.T) {
	size := 1024
	if raceEnabled { // the race detector makes each rank about 10x dearer: the same test, smaller
		size = 256
	}
	var met atomic.Int64
	world(t, size, listenLoopback(t), time.Minute, nil, func(rank int, g *Group, err error) {
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return
		}
		defer g.Close(nil)
		all, err := g.AllGather(context.Background(), []float64{float64(rank)})
		if err != nil || len(all) != size || len(g.Members()) != size || all[size-1][0] != float64(size-1) {
			t.Errorf("rank %d: %d values, %d members, %v", rank, len(all), len(g.Members()), err)
			return
		}
		met.Add(1)
	})
	if met.Load() != int64(size) {
		t.Errorf("%d of %d ranks met and exchanged", met.Load(), size)
	}
}

// BenchmarkRendezvous is the CPU one rank costs the rendezvous and one exchange, in a world of
// 1,024 ranks in one process (make bench prints it).
func BenchmarkRendezvous(b *testing.B) {
	const size = 1024
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	for range b.N {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		world(b, size, ln, time.Minute, nil, func(rank int, g *Group, err error) {
			if err != nil {
				b.Error(err)
				return
			}
			g.AllGather(context.Background(), []float64{1})
			g.Close(nil)
		})
		ln.Close()
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / time.Duration(b.N)
	b.ReportMetric(float64(cpu.Microseconds())/size, "cpu-us/rank")
}
