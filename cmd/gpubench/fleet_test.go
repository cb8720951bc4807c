package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// 32 simulated DGX H100 with six faults of six kinds: each is found and named for what it is,
// and nothing else is; the drain file and the metrics name the same nodes.
func TestFleetFindsEachFault(t *testing.T) {
	dir := t.TempDir()
	drain, metrics := filepath.Join(dir, "drain.sh"), filepath.Join(dir, "fleet.prom")
	out, errOut, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", "32", "-T", "0.2", "--size", "64MiB", "--output", "json",
		"--drain-file", drain, "--metrics-file", metrics,
		"--sim-fault", "slow-nic=dgx-h100-27/mlx5_3,0.4", // a NIC at 40%
		"--sim-fault", "slow-node=dgx-h100-28,0.5", // every link of a node at half speed
		"--sim-fault", "corrupt=81", // GPU 1 of node 10 corrupts its output
		"--sim-fault", "hang=170", // GPU 2 of node 21 hangs
		"--sim-fault", "flaky-link=dgx-h100-25/gpu1,dgx-h100-25/nvswitch,3", // drops one call in three
		"--sim-fault", "slow-link=dgx-h100-30/gpu5,dgx-h100-30/nvswitch,0.5") // one GPU's NVLink at half speed
	if code != exitCheck || !strings.HasPrefix(errOut, "gpubench: fleet: 6 suspects: ") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rep struct {
		Nodes []struct {
			Host   string `json:"host"`
			Status string `json:"status"`
		} `json:"nodes"`
		Suspects []struct {
			Kind   string `json:"kind"`
			Host   string `json:"host"`
			GPU    *int   `json:"gpu"`
			NIC    string `json:"nic"`
			Rail   *int   `json:"rail"`
			Status string `json:"status"`
		} `json:"suspects"`
		Tests, Rounds int
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range rep.Suspects {
		what := s.Kind + " " + s.Host + " " + s.Status
		if s.GPU != nil {
			what += " gpu" + string(rune('0'+*s.GPU))
		}
		if s.NIC != "" {
			what += " " + s.NIC + " rail" + string(rune('0'+*s.Rail))
		}
		got = append(got, what)
	}
	want := []string{
		"gpu dgx-h100-10 failed gpu1",
		"gpu dgx-h100-21 failed gpu2",
		"node dgx-h100-25 failed",
		"nic dgx-h100-27 degraded mlx5_3 rail3",
		"node dgx-h100-28 degraded",
		"gpu dgx-h100-30 degraded gpu5",
	}
	if !slices.Equal(got, want) {
		t.Errorf("suspects\n%q\nwant\n%q", got, want)
	}
	bad := 0
	for _, n := range rep.Nodes {
		if n.Status != "healthy" {
			bad++
		}
	}
	if len(rep.Nodes) != 32 || bad != 6 || rep.Rounds < 4 || rep.Rounds > 30 || rep.Tests > 300 {
		t.Errorf("%d nodes, %d not healthy, %d tests in %d rounds", len(rep.Nodes), bad, rep.Tests, rep.Rounds)
	}
	d, err := os.ReadFile(drain)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"dgx-h100-10", "dgx-h100-21", "dgx-h100-25", "dgx-h100-27", "dgx-h100-28", "dgx-h100-30"} {
		if !strings.Contains(string(d), "scontrol update NodeName="+h+" State=DRAIN Reason=\"gpubench fleet: ") ||
			!strings.Contains(string(d), "kubectl taint node "+h+" gpubench.io/fleet=suspect:NoSchedule --overwrite") {
			t.Errorf("drain file lacks %s:\n%s", h, d)
		}
	}
	if strings.Count(string(d), "scontrol") != 6 {
		t.Errorf("drain file drains other nodes too:\n%s", d)
	}
	m, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`gpubench_fleet_node_healthy{host="dgx-h100-27",status="degraded"} 0`, `gpubench_fleet_node_healthy{host="dgx-h100-0",status="healthy"} 1`, "gpubench_fleet_suspects 6"} {
		if !strings.Contains(string(m), w) {
			t.Errorf("metrics lack %q", w)
		}
	}
}

// A healthy fleet is healthy: exit 0, no suspect, every rail at its expected figure; the table
// says so, and the drain file drains nothing.
func TestFleetHealthy(t *testing.T) {
	drain := filepath.Join(t.TempDir(), "drain.sh")
	out, errOut, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", "8", "--size", "64MiB", "--drain-file", drain)
	if code != 0 || errOut != "" || !strings.Contains(out, "# every node, GPU and NIC healthy") || strings.Count(out, "healthy, 100% of expected") != 8 {
		t.Errorf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	if d, _ := os.ReadFile(drain); !strings.Contains(string(d), "# no suspect: nothing to drain") || strings.Contains(string(d), "scontrol update") {
		t.Errorf("drain file:\n%s", d)
	}
}

func TestFleetRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--floor", "0"}, "gpubench: invalid --floor 0: give a fraction of the expected busbw in (0, 1], e.g. 0.75\n"},
		{[]string{"--group", "1"}, "gpubench: invalid --group 1: give 2 to 4096 nodes per group\n"},
		{[]string{"--repeat", "0"}, "gpubench: invalid --repeat 0: confirm each suspect 1 to 100 times\n"},
		{[]string{"-T", "0"}, "gpubench: invalid --timeout 0: give seconds, above 0 and at most 3600\n"},
		{[]string{"--sim-fault", "slow-nic=mlx5_3,0.5"}, "gpubench: invalid --sim-fault: bad fault \"slow-nic=mlx5_3,0.5\": name the NIC as HOST/NIC, e.g. node-3/mlx5_3\n"},
		{[]string{"--sim-fault", "slow-nic=nowhere/mlx5_3,0.5"}, "gpubench: no NIC nowhere/mlx5_3 on a network in topology dgx-h100 x4: name it host/id, as gpubench topo lists NICs\n"},
		{[]string{"--output", "csv"}, "gpubench: unknown --output \"csv\" for fleet: use table, json or markdown\n"},
		{[]string{"--drain-file", "/no/such/dir/drain.sh"}, "gpubench: cannot write --drain-file /no/such/dir/drain.sh: /no/such/dir is not a folder; give a file in one, before the fleet runs\n"},
	} {
		out, errOut, code := gpubench(t, append([]string{"fleet", "--backend", "sim", "--nodes", "4"}, tc.args...)...)
		if code != exitUsage || out != "" || errOut != tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errOut, tc.want)
		}
	}
	t.Setenv("RANK", "0")
	t.Setenv("WORLD_SIZE", "2")
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	if _, errOut, code := gpubench(t, "fleet", "--backend", "sim"); code != exitUsage || errOut != "gpubench: gpubench fleet runs one process per node: 2 processes for the 1 nodes of dgx-h100; start 1\n" {
		t.Errorf("2 processes for 1 node: exit %d, %q", code, errOut)
	}
}

// Under a launcher, one process per node: each tests its own node, and rank 0 reports every
// node's verdict (the corrupting GPU named), saying that the rounds across nodes were left out;
// every rank exits as the fleet's verdict says.
func TestFleetAcrossProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := startRanks(t, ctx, 4, nil, "fleet", "--backend", "sim", "--nodes", "4", "--sim-fault", "corrupt=9", "--size", "16MiB", "--output", "json")
	for _, p := range ps {
		<-p.done
	}
	for rank, p := range ps {
		if p.code != exitCheck || !strings.Contains(p.stderr.String(), "gpubench: fleet: 1 suspect: GPU 1 of dgx-h100-1 FAILED") {
			t.Errorf("rank %d: exit %d, stderr %q", rank, p.code, p.stderr.String())
		}
		if rank > 0 && p.stdout.String() != "" {
			t.Errorf("rank %d printed %q", rank, p.stdout.String())
		}
	}
	if !strings.Contains(ps[0].stderr.String(), "4 processes tested their own nodes; the rounds across nodes (rails, groups) run from one process only") {
		t.Errorf("rank 0's stderr %q", ps[0].stderr.String())
	}
	var rep struct {
		Nodes []struct{ Host, Status string }
	}
	if err := json.Unmarshal([]byte(ps[0].stdout.String()), &rep); err != nil || len(rep.Nodes) != 4 || rep.Nodes[1].Host != "dgx-h100-1" || rep.Nodes[1].Status != "failed" || rep.Nodes[2].Status != "healthy" {
		t.Errorf("%v: %+v", err, rep)
	}
}
