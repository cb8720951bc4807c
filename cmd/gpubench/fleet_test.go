package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/fleet"
)

// 32 simulated DGX H100 with six faults of six kinds: each is found and named for what it is,
// and nothing else is; the drain file and the metrics name the same nodes.
func TestFleetFindsEachFault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	drain, metrics := filepath.Join(dir, "drain.sh"), filepath.Join(dir, "fleet.prom")
	out, errOut, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", "32", "-T", "0.2", "--size", "64MiB", "--output", "json",
		"--drain-file", drain, "--metrics-file", metrics,
		"--sim-fault", "slow-nic=dgx-h100-27/mlx5_5,0.4", // a NIC at 40%
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
		"nic dgx-h100-27 degraded mlx5_5 rail3",
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
	t.Parallel()
	drain := filepath.Join(t.TempDir(), "drain.sh")
	out, errOut, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", "8", "--size", "64MiB", "--drain-file", drain)
	if code != 0 || errOut != "" || !strings.Contains(out, "# every node, GPU and NIC healthy") || strings.Count(out, "healthy, 100% of expected") != 8 {
		t.Errorf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	if d, _ := os.ReadFile(drain); !strings.Contains(string(d), "# no suspect: nothing to drain") || strings.Contains(string(d), "scontrol update") {
		t.Errorf("drain file:\n%s", d)
	}
}

// Three GPUs a node: an all-to-all of 64 MiB runs 67108848 bytes (a count every rank divides),
// which is the size judged; it was taken as not measured, 0% of an expected 0, and every node
// degraded.
func TestFleetThreeGPUsANode(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", "2", "--gpus-per-node", "3", "--size", "64MiB")
	if code != 0 || strings.Count(out, "healthy           100%        100%        100%") != 2 {
		t.Errorf("exit %d, stderr %q\n%s", code, errOut, out)
	}
}

// One GPU a node (--gpus-per-node 1) tests the network alone: a node has no collective of its own
// to run, so none is judged, and the rail round still finds a slow NIC.
func TestFleetOneGPUANode(t *testing.T) {
	t.Parallel()
	args := []string{"fleet", "--backend", "sim", "--nodes", "4", "--gpus-per-node", "1", "--size", "1MiB", "--sim-data-cap", "0", "--output", "json"}
	out, errOut, code := gpubench(t, args...)
	var rep struct {
		Nodes []struct {
			Status    string
			AllReduce *json.RawMessage
		}
		Suspects []struct{ Host, NIC string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || len(rep.Nodes) != 4 {
		t.Fatalf("healthy: exit %d, %v, stderr %q\n%s", code, err, errOut, out)
	}
	for _, n := range rep.Nodes {
		if n.Status != "healthy" || n.AllReduce != nil {
			t.Errorf("healthy fleet of one GPU a node: node %+v; want healthy with no all-reduce of its own", n)
		}
	}
	out, _, code = gpubench(t, append(args, "--sim-fault", "slow-nic=dgx-h100-2/mlx5_0,0.3")...)
	rep.Suspects = nil
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitCheck || len(rep.Suspects) != 1 || rep.Suspects[0].Host != "dgx-h100-2" || rep.Suspects[0].NIC != "mlx5_0" {
		t.Errorf("slow NIC on dgx-h100-2: exit %d, %v, suspects %+v", code, err, rep.Suspects)
	}
}

func TestFleetRefuses(t *testing.T) {
	// Output files: one file by two names.
	dir := t.TempDir()
	drain, hard := filepath.Join(dir, "drain.sh"), filepath.Join(dir, "hard.prom")
	if err := os.WriteFile(drain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(drain, hard); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--floor", "0"}, "gpubench: invalid --floor 0: give a fraction of the expected busbw in (0, 1], e.g. 0.75\n"},
		{[]string{"--group", "1"}, "gpubench: invalid --group 1: give 2 to 4096 nodes per group\n"},
		{[]string{"--repeat", "0"}, "gpubench: invalid --repeat 0: confirm each suspect 1 to 100 times\n"},
		{[]string{"-T", "0"}, "gpubench: invalid --timeout 0: give seconds, above 0 and at most 3600\n"},
		{[]string{"--sim-fault", "slow-nic=mlx5_3,0.5"}, "gpubench: invalid --sim-fault: bad fault \"slow-nic=mlx5_3,0.5\": name the NIC as HOST/NIC, e.g. node-3/mlx5_3\n"},
		{[]string{"--sim-fault", "slow-nic=nowhere/mlx5_3,0.5"}, "gpubench: invalid --sim-fault slow-nic=nowhere/mlx5_3,0.5: no NIC nowhere/mlx5_3 on a network in topology dgx-h100 x4: name it host/id, as gpubench topo lists NICs\n"},
		{[]string{"--output", "csv"}, "gpubench: unknown --output \"csv\" for fleet: use table, json or markdown\n"},
		{[]string{"--drain-file", "/no/such/dir/drain.sh"}, "gpubench: cannot write --drain-file /no/such/dir/drain.sh: /no/such/dir is not a folder; give a file in one\n"},
		{[]string{"--drain-file", "x.out", "--metrics-file", "x.out"}, "gpubench: --drain-file x.out and --metrics-file x.out name the same file: give each its own file\n"},
		{[]string{"--drain-file", "x.out", "--metrics-file", "./x.out"}, "gpubench: --drain-file x.out and --metrics-file ./x.out name the same file: give each its own file\n"},
		{[]string{"--drain-file", drain, "--metrics-file", hard}, "gpubench: --drain-file " + drain + " and --metrics-file " + hard + " name the same file: give each its own file\n"},
		{[]string{"--size", "8XB"}, "gpubench: invalid --size \"8XB\": unknown unit \"XB\" in \"8XB\": use B, K, M, G or T (or KiB, MiB, GiB, TiB); give 1KiB to 1TiB, e.g. 256MiB\n"},
		{[]string{"--size", "32G"}, "gpubench: invalid --size 32G: more than the GPUs hold for a checked all-reduce (79.6 GiB of memory): give at most 25479MiB\n"},
		{[]string{"--metrics-file", os.TempDir()}, "gpubench: cannot write --metrics-file " + os.TempDir() + ": it is a folder; name a file in it\n"},
		{[]string{"--sim-fault", "xid=1"}, "gpubench: --sim-fault xid=1: fleet reads no XID events (burnin does): give hang, corrupt, slow-link, slow-nic, slow-node or flaky-link\n"},
	} {
		out, errOut, code := gpubench(t, append([]string{"fleet", "--backend", "sim", "--nodes", "4"}, tc.args...)...)
		if code != exitUsage || out != "" || errOut != tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errOut, tc.want)
		}
	}
	t.Setenv("RANK", "0")
	t.Setenv("WORLD_SIZE", "2")
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	t.Setenv("LOCAL_WORLD_SIZE", "2")
	if _, errOut, code := gpubench(t, "fleet", "--backend", "cuda"); code != exitUsage || errOut != "gpubench: gpubench fleet runs one process per node, and 2 run on this host: start one per node (srun --ntasks-per-node=1, mpirun --map-by ppr:1:node)\n" {
		t.Errorf("2 processes on one host: exit %d, %q", code, errOut)
	}
}

// Under a launcher, one process per node: each tests its own node, rank 0 tests the rails across
// the processes (a slow NIC is found on its node and rail), and a process that stops answering is
// reported failed while the others finish; rank 0 reports every node, and every rank that finished
// exits as the fleet's verdict says.
func TestFleetAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := startRanks(t, ctx, 6, nil, "fleet", "--backend", "sim", "--nodes", "6", "--size", "16MiB", "--output", "json",
		"--sim-fault", "corrupt=9", // GPU 1 of node 1
		"--sim-fault", "slow-nic=dgx-h100-2/mlx5_5,0.4",
		"--sim-fault", "hang=33", "-T", "100", // node 4's process is stuck for 100 s in its own round
		"--rendezvous-timeout", "5s") // and rank 0 waits 5 s for it at each step
	for rank, p := range ps {
		if rank != 4 {
			<-p.done
		}
	}
	for rank, p := range ps {
		if rank == 4 {
			continue
		}
		if p.code != exitCheck || !strings.Contains(p.stderr.String(), "gpubench: fleet: 3 suspects: ") {
			t.Errorf("rank %d: exit %d, stderr %q", rank, p.code, p.stderr.String())
		}
		if rank > 0 && p.stdout.String() != "" {
			t.Errorf("rank %d printed %q", rank, p.stdout.String())
		}
	}
	var rep struct {
		Nodes    []struct{ Host, Status, Why string }
		Suspects []struct {
			Kind, Host, NIC, Status string
			GPU, Rail               *int
		}
		Rails []struct{ Rail int }
	}
	if err := json.Unmarshal([]byte(ps[0].stdout.String()), &rep); err != nil || len(rep.Nodes) != 6 {
		t.Fatalf("%v: %s", err, ps[0].stdout.String())
	}
	for n, want := range []string{"healthy", "failed", "degraded", "healthy", "failed", "healthy"} {
		if rep.Nodes[n].Host != fmt.Sprintf("dgx-h100-%d", n) || rep.Nodes[n].Status != want {
			t.Errorf("node %d: %+v, want %s", n, rep.Nodes[n], want)
		}
	}
	if w := rep.Nodes[4].Why; !strings.Contains(w, "its process left the run: it did not reach step 1 of the run within 5s of rank 0") {
		t.Errorf("node 4: %q", w)
	}
	var got []string
	for _, s := range rep.Suspects {
		what := s.Kind + " " + s.Host + " " + s.Status
		if s.GPU != nil {
			what += fmt.Sprint(" gpu", *s.GPU)
		}
		if s.Rail != nil {
			what += fmt.Sprint(" ", s.NIC, " rail", *s.Rail)
		}
		got = append(got, what)
	}
	if want := []string{"gpu dgx-h100-1 failed gpu1", "nic dgx-h100-2 degraded mlx5_5 rail3", "node dgx-h100-4 failed"}; !slices.Equal(got, want) {
		t.Errorf("suspects %q, want %q", got, want)
	}
	if len(rep.Rails) != 8 {
		t.Errorf("%d rails tested across the processes, want 8", len(rep.Rails))
	}
}

// A healthy fleet under a launcher runs the same tests in the same rounds as one process does,
// and its rails and groups across the processes reach the figures one process simulates.
func TestFleetAcrossProcessesMatchesOneProcess(t *testing.T) {
	t.Parallel()
	args := []string{"fleet", "--backend", "sim", "--nodes", "4", "--size", "16MiB", "--group", "4", "--output", "json"}
	one, errOut, code := gpubench(t, args...)
	if code != 0 {
		t.Fatalf("one process: exit %d, %s", code, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := startRanks(t, ctx, 4, nil, args...)
	for _, p := range ps {
		<-p.done
	}
	for rank, p := range ps {
		if p.code != 0 || p.stderr.String() != "" {
			t.Fatalf("rank %d: exit %d, stderr %q", rank, p.code, p.stderr.String())
		}
	}
	type report struct {
		Rails []struct {
			Rail      int
			Status    string
			AllReduce struct{ Ratio float64 } `json:"allreduce"`
		}
		Tests, Rounds int
	}
	var a, b report
	if err := json.Unmarshal([]byte(one), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(ps[0].stdout.String()), &b); err != nil {
		t.Fatal(err)
	}
	if a.Tests != b.Tests || a.Rounds != b.Rounds || len(b.Rails) != 8 {
		t.Errorf("one process: %d tests in %d rounds; four: %d tests in %d rounds, %d rails", a.Tests, a.Rounds, b.Tests, b.Rounds, len(b.Rails))
	}
	for i, r := range b.Rails {
		if r.Status != "healthy" || math.Abs(r.AllReduce.Ratio-1) > 1e-9 {
			t.Errorf("rail %d across processes: %+v", i, r)
		}
	}
}

// What a node's quick diag found is printed with the node, in the table and in Markdown.
func TestFleetPrintsDiag(t *testing.T) {
	t.Parallel()
	rep := &fleet.Report{Floor: 0.75, Nodes: []fleet.Node{
		{Host: "n0", Status: fleet.Failed, Why: "diag: ecc: GPU 3: 2 uncorrected errors", Diag: []string{"ecc: GPU 3: 2 uncorrected errors", "nccl: no NCCL library"}},
		{Host: "n1", Status: fleet.Healthy},
	}, Suspects: []fleet.Suspect{{Kind: "node", Host: "n0", Status: fleet.Failed, Why: "diag: ecc: GPU 3: 2 uncorrected errors"}}}
	for format, want := range map[string]string{
		"table":    "# diag on n0: ecc: GPU 3: 2 uncorrected errors; nccl: no NCCL library\n",
		"markdown": "- diag on n0: ecc: GPU 3: 2 uncorrected errors; nccl: no NCCL library\n",
	} {
		var b strings.Builder
		if err := writeFleet(&b, format, rep); err != nil || !strings.Contains(b.String(), want) || strings.Contains(b.String(), "diag on n1") {
			t.Errorf("%s: %v\n%s", format, err, b.String())
		}
	}
}

// Bisection names the bad NIC's node alone in a fleet of three, first or in the middle: a half is
// padded with nodes cleared by a passed test, never first with its own sibling or a node found.
// Two nodes alone cannot be told apart, and both are named.
func TestFleetSmallFleets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		nodes, bad int
		want       []string
	}{
		{3, 0, []string{"dgx-h100-0"}}, {3, 1, []string{"dgx-h100-1"}}, {2, 1, []string{"dgx-h100-0", "dgx-h100-1"}},
	} {
		// No data (--sim-data-cap 0): a slow NIC is found by time alone, and the test runs in a
		// tenth of the CPU.
		out, _, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", fmt.Sprint(tc.nodes), "--size", "1MiB", "--output", "json",
			"--sim-data-cap", "0", "--sim-fault", fmt.Sprintf("slow-nic=dgx-h100-%d/mlx5_5,0.4", tc.bad))
		var rep struct{ Suspects []struct{ Host, NIC string } }
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitCheck {
			t.Fatalf("exit %d: %v", code, err)
		}
		var got []string
		for _, s := range rep.Suspects {
			if s.NIC == "mlx5_5" {
				got = append(got, s.Host)
			}
		}
		if !slices.Equal(got, tc.want) || len(rep.Suspects) != len(tc.want) {
			t.Errorf("%d nodes, slow NIC on node %d: suspects %+v, want %v", tc.nodes, tc.bad, rep.Suspects, tc.want)
		}
	}
}

// Processes of one fleet that would not run the same thing are refused at the rendezvous, every
// one of them at once, and the refusal names what differs; a world of another size than the
// nodes is refused by every process after it, none left to wait for one that exited alone.
func TestFleetLaunchRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := []string{"fleet", "--backend", "sim", "--size", "1MiB", "--rendezvous-timeout", "40s"}
	for _, tc := range []struct {
		name string
		args func(rank int) []string
		want string
	}{
		{"world of 2, 1 node", func(int) []string { return base }, "gpubench: gpubench fleet runs one process per node: 2 processes for the 1 nodes of dgx-h100; start 1, or give --nodes 2\n"},
		{"--nodes", func(r int) []string { return append(slices.Clone(base), "--nodes", fmt.Sprint(2+r)) }, "--nodes 3"},
		{"--seed", func(r int) []string { return append(slices.Clone(base), "--nodes", "2", "--seed", fmt.Sprint(1+r)) }, "was started with --seed 2, rank 0 with --seed 1: start every process"},
		{"--sim-jitter", func(r int) []string {
			return append(slices.Clone(base), "--nodes", "2", "--sim-jitter", fmt.Sprint(0.1*float64(r)))
		}, "was started with --sim-jitter 0.1, rank 0 with --sim-jitter 0: start every process"},
	} {
		ps := startRanksWith(t, ctx, 2, nil, tc.args, nil)
		for rank, p := range ps {
			<-p.done
			if p.code != exitUsage || !strings.Contains(p.stderr.String(), tc.want) || strings.Count(p.stderr.String(), "\n") != 1 {
				t.Errorf("%s: rank %d: exit %d, stderr %q; want exit 2 and %q", tc.name, rank, p.code, p.stderr.String(), tc.want)
			}
		}
	}
}

// A rail that falls short is never "healthy" in the verdict: with every NIC of the rail slow, no
// two nodes pass together and no one is named, yet the run exits 3 and says which rail.
func TestFleetRailShortNamingNoOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The metrics file is named through a link, which is written through and kept, as a shell's
	// redirect keeps it.
	metrics, link := filepath.Join(dir, "fleet.prom"), filepath.Join(dir, "link.prom")
	if err := os.Symlink("fleet.prom", link); err != nil {
		t.Fatal(err)
	}
	args := []string{"fleet", "--backend", "sim", "--nodes", "4", "--gpus-per-node", "1", "--size", "64MiB", "--sim-data-cap", "0", "--metrics-file", link}
	for n := range 4 {
		args = append(args, "--sim-fault", fmt.Sprintf("slow-nic=dgx-h100-%d/mlx5_0,0.4", n))
	}
	out, errOut, code := gpubench(t, args...)
	if code != exitCheck || !strings.HasPrefix(errOut, "gpubench: fleet: no suspect named, but rail 0 (mlx5_0): degraded, ") ||
		strings.Contains(out, "every node, GPU and NIC healthy") || !strings.Contains(out, "# rail 0 (mlx5_0): degraded, ") {
		t.Errorf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	if m, _ := os.ReadFile(metrics); !strings.Contains(string(m), `gpubench_fleet_rail_healthy{nic="mlx5_0",rail="0",status="degraded"} 0`) {
		t.Errorf("metrics:\n%s", m)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v", err)
	}
}

// A node whose two NICs are slow has both named, each on its rail; a NIC's rail is not called
// healthy for a node it did not test.
func TestFleetTwoSlowNICsOnANode(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", "6", "--size", "64MiB", "--output", "json",
		"--sim-fault", "slow-nic=dgx-h100-2/mlx5_3,0.4", "--sim-fault", "slow-nic=dgx-h100-2/mlx5_10,0.3", "--sim-fault", "corrupt=9") // GPU 1 of node 1
	var rep fleet.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitCheck {
		t.Fatalf("exit %d, %v, stderr %q", code, err, errOut)
	}
	var nics []string
	for _, s := range rep.Suspects {
		if s.Kind == "nic" {
			nics = append(nics, s.Host+" "+s.NIC)
		}
	}
	if want := []string{"dgx-h100-2 mlx5_3", "dgx-h100-2 mlx5_10"}; !slices.Equal(nics, want) {
		t.Errorf("NICs named %q, want %q", nics, want)
	}
	for _, r := range rep.Rails {
		if !slices.Equal(r.Untested, []string{"dgx-h100-1"}) { // failed by its GPU: its NICs are not tested
			t.Errorf("rail %d: untested %q, want dgx-h100-1", r.Rail, r.Untested)
		}
	}
}

// A healthy fleet's noise (--sim-jitter) drains no one: a P2P pair under the floor once is
// measured again before the node is named.
func TestFleetNoisyP2P(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", "24", "--size", "64MiB", "--sim-jitter", "0.1", "--seed", "1")
	if code != 0 || errOut != "" || !strings.Contains(out, "# every node, GPU and NIC healthy") {
		t.Errorf("exit %d, stderr %q\n%s", code, errOut, out)
	}
}

// A GPU that hangs in a rail's test is named, failed, from the rank that did not finish, with one
// wait of -T; one process and a launcher's run give the same verdict in the same tests. One that
// hangs after its first call stalls every rank (each process reports its own): no one is named
// for that, and a bisection finds the GPU. Either way the rail passes without it.
func TestFleetHangOnARail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault, why string
		tests      int
	}{
		{"hang=2", "rail 0's all-reduce through mlx5_0 hung: rank 2 did not finish", 3},
		{"hang=2@1", "rail 0's all-reduce through mlx5_0 hung with this node, and passed without it: ranks 0,1 did not finish", 6},
	} {
		args := []string{"fleet", "--backend", "sim", "--nodes", "4", "--gpus-per-node", "1", "-T", "0.3", "--size", "1MiB", "--sim-data-cap", "0", "--sim-fault", tc.fault, "--output", "json"}
		one, errOut, code := gpubench(t, args...)
		if code != exitCheck || !strings.HasPrefix(errOut, "gpubench: fleet: 1 suspect: GPU 0 of dgx-h100-2 FAILED: "+tc.why) {
			t.Fatalf("%s: one process: exit %d, stderr %q", tc.fault, code, errOut)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		ps := startRanks(t, ctx, 4, nil, args...)
		for rank, p := range ps {
			<-p.done
			if p.code != exitCheck || p.stderr.String() != errOut {
				t.Errorf("%s: rank %d: exit %d, stderr %q; want what one process says, %q", tc.fault, rank, p.code, p.stderr.String(), errOut)
			}
		}
		cancel()
		var a, b fleet.Report
		if err := json.Unmarshal([]byte(one), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(ps[0].stdout.String()), &b); err != nil {
			t.Fatal(err)
		}
		for _, r := range []fleet.Report{a, b} {
			if r.Tests != tc.tests || r.Rounds != a.Rounds || r.Rails[0].Status != fleet.Healthy || !slices.Equal(r.Rails[0].Untested, []string{"dgx-h100-2"}) {
				t.Errorf("%s: %d tests in %d rounds, rail %+v; want %d tests, as one process, and the rail healthy without dgx-h100-2", tc.fault, r.Tests, r.Rounds, r.Rails[0], tc.tests)
			}
		}
	}
}

// The table and Markdown carry every rail: its verdict and figure, or its error, and the nodes it
// did not test; an untested rail is said so, never healthy.
func TestFleetPrintsRails(t *testing.T) {
	t.Parallel()
	rep := &fleet.Report{Floor: 0.75, Nodes: []fleet.Node{{Host: "n0", Status: fleet.Healthy}, {Host: "n1", Status: fleet.Failed, Why: "x"}},
		Rails: []fleet.Rail{
			{Rail: 0, NIC: "mlx5_0", Status: fleet.Healthy, Figure: &fleet.Figure{Ratio: 1}, Untested: []string{"n1"}},
			{Rail: 1, NIC: "mlx5_1", Status: fleet.Failed, Figure: &fleet.Figure{Error: "rank 1 did not finish"}},
			{Rail: 2, NIC: "mlx5_2", Status: fleet.Untested},
		}}
	for format, prefix := range map[string]string{"table": "# ", "markdown": "- "} {
		var b strings.Builder
		if err := writeFleet(&b, format, rep); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"rail 0 (mlx5_0): healthy, 100% of expected; not tested on n1\n", "rail 1 (mlx5_1): failed: rank 1 did not finish\n", "rail 2 (mlx5_2): untested\n"} {
			if !strings.Contains(b.String(), prefix+want) {
				t.Errorf("%s lacks %q:\n%s", format, prefix+want, b.String())
			}
		}
		if strings.Contains(b.String(), "every node, GPU and NIC healthy") {
			t.Errorf("%s calls a fleet with a failed node healthy:\n%s", format, b.String())
		}
	}
}

// A machine that is one NVLink domain (a GB200 NVL72 rack) sends nothing through its NICs: its
// rails are untested, never healthy, and fail no one.
func TestFleetOneNVLinkDomain(t *testing.T) {
	t.Parallel()
	out, errOut, code := gpubench(t, "fleet", "--backend", "sim", "--topology", "gb200-nvl72", "--size", "64MiB", "--output", "json")
	var rep fleet.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || len(rep.Rails) == 0 {
		t.Fatalf("exit %d, %v, stderr %q", code, err, errOut)
	}
	for _, r := range rep.Rails {
		if r.Status != fleet.Untested || r.Figure != nil || r.Why != "one NVLink domain" {
			t.Errorf("rail %+v; want untested, for one NVLink domain", r)
		}
	}
	// No rail tested the NICs: the verdict does not call them healthy.
	for format, want := range map[string]string{"table": "# every node and GPU healthy; NICs not tested (one NVLink domain)\n", "markdown": "- every node and GPU healthy; NICs not tested (one NVLink domain)\n"} {
		var b strings.Builder
		if err := writeFleet(&b, format, &rep); err != nil || !strings.Contains(b.String(), want) || strings.Contains(b.String(), "NIC healthy") {
			t.Errorf("%s: %v\n%s", format, err, b.String())
		}
	}
}

// A healthy run never says healthy what no test measured: with one GPU a node no test checks a
// GPU's data, and with fewer GPUs a node than NICs the NICs on no GPU's rail carry nothing.
func TestFleetSaysWhatWasNotTested(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpus-per-node", "1", "--sim-fault", "corrupt=3"}, "; not tested: the GPUs' data on their own (one GPU a node: no test of a node checks it); NICs mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_9, mlx5_10, mlx5_11 (no GPU of the run on their rails)\n"},
		{[]string{"--gpus-per-node", "2", "--sim-fault", "slow-nic=dgx-h100-3/mlx5_5,0.4"}, "# every node, GPU and NIC tested healthy; not tested: NICs mlx5_4, mlx5_5, mlx5_6, mlx5_9, mlx5_10, mlx5_11 (no GPU of the run on their rails)\n"},
		{nil, "# every node, GPU and NIC healthy\n"},
	} {
		out, errOut, code := gpubench(t, append([]string{"fleet", "--backend", "sim", "--nodes", "4"}, tc.args...)...)
		if code != 0 || !strings.HasSuffix(out, tc.want) {
			t.Errorf("%v: exit %d, stderr %q\n%s\nwant it to end %q", tc.args, code, errOut, out, tc.want)
		}
	}
	out, _, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", "4", "--size", "1MiB", "--gpus-per-node", "2", "--output", "json")
	var rep struct {
		NotTested []string `json:"not_tested"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || len(rep.NotTested) != 1 {
		t.Errorf("json: exit %d, %v, not_tested %q", code, err, rep.NotTested)
	}
}

// An interrupted run gives no verdict of the fleet: it says which nodes and rounds it did not
// test, never that every node is healthy.
func TestFleetInterruptedNoVerdict(t *testing.T) {
	rep := &fleet.Report{Nodes: []fleet.Node{{Host: "dgx-h100-0", Status: fleet.Healthy}, {Host: "dgx-h100-1", Status: fleet.Healthy}},
		Rails: []fleet.Rail{}, Suspects: []fleet.Suspect{}, Tests: 6, Rounds: 1, Floor: 0.75, Interrupted: true, NotReached: []string{"dgx-h100-2", "dgx-h100-3"}}
	for _, format := range []string{"table", "markdown"} {
		var b strings.Builder
		if err := writeFleet(&b, format, rep); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.Contains(out, "every node") || !strings.Contains(out, "2 of 4") ||
			!strings.Contains(out, "interrupted: no verdict of the fleet; not tested: 2 nodes (dgx-h100-2, dgx-h100-3); the rails and the groups across nodes\n") {
			t.Errorf("%s:\n%s", format, out)
		}
	}
}

// The nodes' data is checked at a size --sim-data-cap holds, and where none does the run says so:
// a corrupting GPU is never passed over as healthy.
func TestFleetChecksDataWithinTheCap(t *testing.T) {
	t.Parallel()
	_, errOut, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", "2", "--size", "64MiB", "--sim-data-cap", "3M", "--sim-fault", "corrupt=3")
	if code != exitCheck || errOut != "gpubench: fleet: 1 suspect: GPU 3 of dgx-h100-0 FAILED: allreduce delivered wrong data\n" {
		t.Errorf("3M cap: exit %d, stderr %q; want GPU 3 named", code, errOut)
	}
	out, errOut, code := gpubench(t, "fleet", "--backend", "sim", "--nodes", "2", "--size", "64MiB", "--sim-data-cap", "8K", "--sim-fault", "corrupt=3")
	want := "# every node, GPU and NIC tested healthy; not tested: the GPUs' data on dgx-h100-0, dgx-h100-1 (their collectives carried none even at 1KiB: the simulator's --sim-data-cap is too small; raise it)\n"
	if code != 0 || !strings.HasSuffix(out, want) {
		t.Errorf("8K cap: exit %d, stderr %q\n%s\nwant it to end %q", code, errOut, out, want)
	}
}
