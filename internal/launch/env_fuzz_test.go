package launch

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
)

// oneLine fails the test when a refusal is not one line of ErrConfig.
func oneLine(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrConfig) || strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("%s: error %q is not one line of ErrConfig", what, err)
	}
}

// FuzzDetect gives each launcher's variables any values: Detect places the process in its world
// with the numbers the variables hold (0 <= rank < size, local rank >= 0), or refuses them with
// one line. The variables of the launchers believed after it are set too, as an outer launcher's
// (torchrun's RANK and WORLD_SIZE set by hand over it make a notice).
func FuzzDetect(f *testing.F) {
	f.Add(uint8(0), "3", "8", "1", "4", "job", "16")
	f.Add(uint8(1), "0", "2", "0", "2", "", "1")
	f.Add(uint8(2), " 1 ", "+2", "01", "", "", "x")
	f.Add(uint8(3), "-1", "99999999999999999999", "a", "0", "7", "")
	f.Add(uint8(0), "2", "2", "0", "0", "", "3")
	f.Add(uint8(1), "5", "8", "", "4", "", "")
	f.Fuzz(func(t *testing.T, which uint8, rank, size, localRank, local, job, other string) {
		i := int(which) % len(launchers)
		l := launchers[i]
		env := map[string]string{}
		for _, o := range launchers[i+1:] { // launchers believed after l: an outer one
			env[o.rank], env[o.size] = "0", other
		}
		env["SLURM_STEP_ID"] = "0"
		env[l.rank], env[l.size] = rank, size
		if localRank != "" { // unset: the rank modulo the processes on this host
			env[l.localRank] = localRank
		}
		if l.local != "" {
			env[l.local] = local
		}
		for _, name := range l.job {
			env[name] = job
		}
		p, err := Detect(envOf(env), none)
		if err != nil {
			oneLine(t, "Detect", err)
			return
		}
		num := func(s string) int { n, _ := strconv.Atoi(strings.TrimSpace(s)); return n }
		wantLocal := num(localRank)
		if localRank == "" {
			wantLocal = p.Rank
			if p.LocalSize > 0 {
				wantLocal %= p.LocalSize
			}
		}
		if p.Rank != num(rank) || p.Size != num(size) || p.LocalRank != wantLocal {
			t.Fatalf("%s: rank %q, size %q, local rank %q read as %d, %d, %d", l.name, rank, size, localRank, p.Rank, p.Size, p.LocalRank)
		}
		if p.Rank < 0 || p.Rank >= p.Size || p.LocalRank < 0 || p.LocalSize < 0 {
			t.Fatalf("%s: accepted %+v", l.name, p)
		}
		if strings.ContainsAny(p.Notice, "\n\r") {
			t.Fatalf("notice %q", p.Notice)
		}
	})
}

// FuzzAddressEnv gives MASTER_ADDR, MASTER_PORT and Slurm's job id and node list any values:
// Address gives HOST:PORT with the host MASTER_ADDR names and the port MASTER_PORT names (one
// more beside torchrun's agent store), a port from 1 to 65535, or refuses them with one line.
func FuzzAddressEnv(f *testing.F) {
	f.Add("10.0.0.5", "29400", false, "", "", true)
	f.Add("head", "65535", true, "", "", true)
	f.Add("[::1]", " 7 ", false, "", "", true)
	f.Add("", "", false, "123456", "gpu[07-09]", false)
	f.Add("node1:29500", "0", false, "-7", "a b", true)
	f.Add("[]", "+1", true, "x", "", true)
	f.Add("", "1", false, "", "0", true) // empty MASTER_ADDR: the node list names the host
	f.Fuzz(func(t *testing.T, addr, port string, agent bool, job, nodes string, set bool) {
		env := map[string]string{"SLURM_JOB_ID": job, "SLURM_STEP_NODELIST": nodes}
		if set {
			env["MASTER_ADDR"], env["MASTER_PORT"] = addr, port
		}
		if agent {
			env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
		}
		p := Process{Size: 2, Source: "slurm", env: envOf(env)}
		got, err := p.Address("")
		if err != nil {
			oneLine(t, "Address", err)
			return
		}
		host, ps, err := net.SplitHostPort(got)
		n, _ := strconv.Atoi(ps)
		if err != nil || host == "" || strings.ContainsAny(host, "[]/ \t\n\r") || n < 1 || n > 65535 {
			t.Fatalf("MASTER_ADDR %q, MASTER_PORT %q, nodes %q: address %q", addr, port, nodes, got)
		}
		if !set || strings.TrimSpace(addr) == "" { // an empty MASTER_ADDR is no MASTER_ADDR: Slurm's node list names rank 0's host
			return
		}
		if want := strings.Trim(strings.TrimSpace(addr), "[]"); host != want {
			t.Fatalf("MASTER_ADDR %q gave host %q", addr, host)
		}
		want, _ := strconv.Atoi(strings.TrimSpace(port))
		if agent && want < 65535 {
			want++
		}
		if n != want {
			t.Fatalf("MASTER_PORT %q gave port %d", port, n)
		}
	})
}

// MASTER_ADDR and the Slurm node list give a host alone: a port, brackets round more than an IPv6
// address, spaces or control characters are refused with the variable named, not joined into an
// address no process can meet at.
func TestAddressHost(t *testing.T) {
	for addr, want := range map[string]string{"head": "head:29500", " 10.0.0.5 ": "10.0.0.5:29500", "[::1]": "[::1]:29500",
		"::1": "[::1]:29500", "fe80::1%eth0": "[fe80::1%eth0]:29500"} {
		p := Process{Size: 2, env: envOf(map[string]string{"MASTER_ADDR": addr})}
		if got, err := p.Address(""); err != nil || got != want {
			t.Errorf("MASTER_ADDR=%q: %q, %v; want %q", addr, got, err, want)
		}
	}
	for _, addr := range []string{"node1:29500", "[]", "[[x]]", "a b", "h\x7f", "x/y", "[node1]:5"} {
		p := Process{Size: 2, env: envOf(map[string]string{"MASTER_ADDR": addr})}
		if got, err := p.Address(""); err == nil || !strings.Contains(err.Error(), "MASTER_ADDR=") || !strings.Contains(err.Error(), "the port goes in MASTER_PORT") {
			t.Errorf("MASTER_ADDR=%q: %q, %v; want it refused", addr, got, err)
		}
	}
	p := Process{Size: 2, Source: "slurm", env: envOf(map[string]string{"SLURM_STEP_NODELIST": "gpu\x7f[1-2]"})}
	if got, err := p.Address(""); err == nil || !strings.Contains(err.Error(), "SLURM_STEP_NODELIST=") {
		t.Errorf("a control character in the node list: %q, %v", got, err)
	}
}

// FuzzCountCPUs gives CountCPUs any text: a count within the bound, and never one for text with
// spaces inside.
func FuzzCountCPUs(f *testing.F) {
	for _, s := range []string{"0-1\n", "0-63,128-191", "3", "0-3,2-5", "5-2", "", "a", "-1", "0-8192", "+1", "1,,2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		n := CountCPUs(list)
		if n < 0 || n > maxCPUs {
			t.Fatalf("CountCPUs(%q) = %d, outside [0, %d]", list, n, maxCPUs)
		}
		if n > 0 && strings.TrimSpace(list) != strings.Join(strings.Fields(list), "") {
			t.Fatalf("CountCPUs(%q) = %d for a list with spaces inside", list, n)
		}
	})
}

func TestCountCPUs(t *testing.T) {
	for list, want := range map[string]int{
		"0-1\n": 2, "0-63,128-191": 128, "3": 1, "0,2,4-7": 6, "0-8191": 8192,
		"": 0, "5-2": 0, "a": 0, "-1": 0, "0-8192": 0, "+1": 0, "1,,2": 0, "1-": 0, "0 - 3": 0,
	} {
		if got := CountCPUs(list); got != want {
			t.Errorf("CountCPUs(%q) = %d; want %d", list, got, want)
		}
	}
}
