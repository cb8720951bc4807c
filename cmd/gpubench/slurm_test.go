package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubench/gpubench/internal/launch"
)

// TestSlurm runs gpubench on the simulator through a real Slurm: srun of two ranks, sbatch of a
// job script that runs srun, and the variables Slurm really sets in a step's tasks, read by
// internal/launch as gpubench reads them. scripts/slurm-up.sh starts a one-host cluster (.ci/run
// does); without one the test skips, and under CI it fails.
func TestSlurm(t *testing.T) {
	node := requireSlurm(t)
	bin := gpubenchOnPath(t)

	t.Run("env", func(t *testing.T) { testSlurmEnv(t, node) })
	t.Run("srun", func(t *testing.T) { testSlurmSrun(t, bin, node) })
	t.Run("sbatch", func(t *testing.T) { testSlurmSbatch(t, bin, node) })
	t.Run("fleet", func(t *testing.T) { testSlurmFleet(t, bin) })
}

// srun -n 3 gpubench fleet: one process per simulated node through Slurm's launcher (three tasks
// on the one host's two CPUs: --overcommit); each tests its own node (GPU 1 of the second
// corrupts its data and is named), rank 0 tests every rail across the two good nodes' processes,
// leaving the failed node out, and reports, and every task exits 3 as the verdict says.
func testSlurmFleet(t *testing.T, bin string) {
	var stdout, stderr string
	var err error
	for try := 1; ; try++ {
		stdout, stderr, err = slurmJob(t, t.TempDir(), slurmEnv(), "srun", "--ntasks=3", "--overcommit", bin,
			"fleet", "--backend", "sim", "--nodes", "3", "--size", "4MiB", "--sim-fault", "corrupt=9", "--output", "json")
		if !strings.Contains(stderr, "for the rendezvous: it is in use") || try == 3 {
			break
		}
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitCheck || strings.Count(stderr, "gpubench: fleet: 1 suspect: GPU 1 of dgx-h100-1 FAILED") != 3 {
		t.Fatalf("srun fleet: %v (want exit 3 from every task)\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	var rep struct {
		Nodes []struct{ Host, Status string }
		Rails []struct {
			Status   string
			Untested []string
		}
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || len(rep.Nodes) != 3 || rep.Nodes[1].Status != "failed" ||
		rep.Nodes[0].Status != "healthy" || rep.Nodes[2].Status != "healthy" {
		t.Fatalf("%v: %s", err, stdout)
	}
	for i, r := range rep.Rails {
		if r.Status != "healthy" || len(r.Untested) != 1 || r.Untested[0] != "dgx-h100-1" {
			t.Errorf("rail %d: %+v; want healthy across the good nodes, dgx-h100-1 not tested", i, r)
		}
	}
	if len(rep.Rails) != 8 {
		t.Errorf("%d rails; want 8", len(rep.Rails))
	}
}

// slurmTimeout bounds every Slurm command of the test; the jobs themselves ask for a minute
// (--time=1) and are cancelled by name when a test ends.
const slurmTimeout = 45 * time.Second

// requireSlurm finds srun, sbatch, sinfo and scancel and a cluster whose node takes jobs, and
// returns the node's name; it skips without them, except under CI, where it fails.
func requireSlurm(t *testing.T) string {
	t.Helper()
	missing := func(format string, a ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, a...)
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (CI requires it: .ci/run installs slurmctld, slurmd and munge and runs scripts/slurm-up.sh)", msg)
		}
		t.Skipf("%s (sudo scripts/slurm-up.sh starts a one-host cluster)", msg)
	}
	for _, tool := range []string{"srun", "sbatch", "sinfo", "scancel"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing("%s is not installed", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sinfo", "--noheader", "--format=%n %T").CombinedOutput()
	if err != nil {
		missing("no Slurm cluster answers: sinfo: %v: %s", err, bytes.TrimSpace(out))
	}
	for line := range strings.Lines(string(out)) {
		name, state, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch state {
		case "idle", "mixed", "allocated", "completing":
			return name
		}
	}
	missing("no Slurm node takes jobs: sinfo says %q", bytes.TrimSpace(out))
	return ""
}

// gpubenchOnPath puts a gpubench on PATH for Slurm to start, as a user installs it: a script that
// runs this test binary as the CLI (TestMain), so that nothing more is built, and under -race the
// ranks that srun starts are checked for races too. It returns the script's path.
func gpubenchOnPath(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gpubench")
	script := "#!/bin/bash\n# gpubench: this test binary as the CLI (cmd/gpubench/slurm_test.go)\n" +
		"GPUBENCH_AS_CLI=\"$(IFS=$'\\x1f'; printf %s \"$*\")\" GPUBENCH_TEST_REAL_PID=1 exec '" +
		strings.ReplaceAll(self, "'", `'\''`) + "'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// slurmEnv is this process's environment without what another launcher or a stale shell would
// add to gpubench's view (rank variables, MASTER_ADDR, a run key), and with extra appended.
func slurmEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "RANK", name == "WORLD_SIZE", name == "LOCAL_RANK", name == "LOCAL_WORLD_SIZE",
			name == "MASTER_ADDR", name == "MASTER_PORT", name == launch.RunKeyEnv, name == "GPUBENCH_AS_CLI",
			strings.HasPrefix(name, "OMPI_"), strings.HasPrefix(name, "PMI"), strings.HasPrefix(name, "TORCHELASTIC_"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// slurmJob runs a Slurm command (srun or sbatch) for a job named after the test, in dir, and
// cancels that job when the test ends, should it still be queued or running.
func slurmJob(t *testing.T, dir string, env []string, tool string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	name := fmt.Sprintf("gpubench-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, "scancel", "--name="+name).Run()
	})
	ctx, cancel := context.WithTimeout(context.Background(), slurmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, append([]string{"--job-name=" + name, "--time=1"}, args...)...)
	cmd.Dir, cmd.Env = dir, env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not end within %v: %w", tool, slurmTimeout, err)
	}
	return out.String(), errOut.String(), err
}

// slurmResult is what the Slurm tests read of gpubench's JSON.
type slurmResult struct {
	Launch *string `json:"launch"`
	Config struct {
		Ranks int `json:"ranks"`
	} `json:"config"`
	Devices []struct {
		Rank int `json:"rank"`
		PID  int `json:"pid"`
	} `json:"devices"`
	Results []struct {
		Size       int64 `json:"size_bytes"`
		OutOfPlace struct {
			Wrong *int64 `json:"wrong"`
		} `json:"out_of_place"`
		InPlace struct {
			Wrong *int64 `json:"wrong"`
		} `json:"in_place"`
	} `json:"results"`
}

// slurmSweep is the all-reduce that srun runs in the tests: sizes 8 B to 512 KiB by 4, all checked.
var slurmSweep = []string{"allreduce", "--backend", "sim", "-b", "8", "-e", "1M", "-f", "4", "--output", "json"}

// slurmLaunchLine is the run's launch description under srun on the node: two processes meeting at the
// step's first node, on the port that the job id gives, keyed by the job and step ids.
func slurmLaunchLine(node string) *regexp.Regexp {
	return regexp.MustCompile(`^slurm, 2 processes, rendezvous ` + regexp.QuoteMeta(node) +
		`:(\d+), run key from SLURM_JOB_ID\+SLURM_STEP_ID$`)
}

// checkSlurmSweep holds a two-rank JSON result of slurmSweep to what it must be.
func checkSlurmSweep(t *testing.T, node, out string) {
	t.Helper()
	var r slurmResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not gpubench's JSON: %v\n%s", err, out)
	}
	if r.Launch == nil || !slurmLaunchLine(node).MatchString(*r.Launch) {
		t.Errorf("launch %v, want %s", r.Launch, slurmLaunchLine(node))
	} else if port, _ := strconv.Atoi(slurmLaunchLine(node).FindStringSubmatch(*r.Launch)[1]); port < 20000 || port >= 40000 {
		t.Errorf("rendezvous port %d, want 20000 + SLURM_JOB_ID mod 20000", port)
	}
	if r.Config.Ranks != 2 || len(r.Devices) != 2 || r.Devices[0].Rank != 0 || r.Devices[1].Rank != 1 ||
		r.Devices[0].PID == r.Devices[1].PID {
		t.Errorf("want ranks 0 and 1 in two processes: ranks %d, devices %+v", r.Config.Ranks, r.Devices)
	}
	var sizes []int64
	for _, res := range r.Results {
		sizes = append(sizes, res.Size)
		for _, wrong := range []*int64{res.OutOfPlace.Wrong, res.InPlace.Wrong} {
			if wrong == nil || *wrong != 0 {
				t.Errorf("size %d: wrong %v, want 0 (checked)", res.Size, wrong)
			}
		}
	}
	if want := []int64{8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288}; fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("sizes %v, want %v", sizes, want)
	}
}

// srun -n 2 gpubench: two ranks through Slurm's own launcher, one JSON from rank 0.
func testSlurmSrun(t *testing.T, bin, node string) {
	var stdout, stderr string
	var err error
	for try := 1; ; try++ {
		stdout, stderr, err = slurmJob(t, t.TempDir(), slurmEnv(), "srun",
			append([]string{"--ntasks=2", "--kill-on-bad-exit=1", bin}, slurmSweep...)...)
		// The rendezvous port comes from the job id; the next job has the next port.
		if err == nil || !strings.Contains(stderr, "for the rendezvous: it is in use") || try == 3 {
			break
		}
	}
	if err != nil {
		t.Fatalf("srun: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	checkSlurmSweep(t, node, stdout)
}

// sbatch --wait of a job script as a user writes one: srun gpubench, with its JSON to a file. The
// batch script itself has SLURM_PROCID and SLURM_NTASKS but no step: gpubench run there directly
// is one process, not rank 0 of two.
func testSlurmSbatch(t *testing.T, bin, node string) {
	dir := t.TempDir()
	script := `#!/bin/bash
set -euo pipefail
env | grep '^SLURM_' | sort >batch.env
gpubench allreduce --backend sim -b 8 -e 8 --output json >alone.json
srun --kill-on-bad-exit=1 gpubench ` + strings.Join(slurmSweep, " ") + ` >result.json
`
	if err := os.WriteFile(filepath.Join(dir, "job.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	path := "PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	var stdout, stderr string
	var err error
	for try := 1; ; try++ {
		stdout, stderr, err = slurmJob(t, dir, slurmEnv(path), "sbatch", "--wait", "--ntasks=2", "--output=job.out", "job.sh")
		jobOut, _ := os.ReadFile(filepath.Join(dir, "job.out"))
		if err == nil || !strings.Contains(string(jobOut), "for the rendezvous: it is in use") || try == 3 {
			if err != nil {
				t.Fatalf("sbatch: %v\nstdout:\n%s\nstderr:\n%s\njob.out:\n%s", err, stdout, stderr, jobOut)
			}
			break
		}
	}
	if !regexp.MustCompile(`^Submitted batch job \d+\n$`).MatchString(stdout) {
		t.Errorf("sbatch said %q", stdout)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	checkSlurmSweep(t, node, read("result.json"))

	var alone slurmResult
	if err := json.Unmarshal([]byte(read("alone.json")), &alone); err != nil {
		t.Fatalf("gpubench in the batch script: %v", err)
	}
	if alone.Launch != nil || alone.Config.Ranks != 8 {
		t.Errorf("gpubench in the batch script, outside srun: launch %v, %d ranks; want one process driving the topology's 8 GPUs", alone.Launch, alone.Config.Ranks)
	}
	// What Slurm sets in the batch script, and how gpubench reads it.
	env := map[string]string{}
	for line := range strings.Lines(read("batch.env")) {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\n"), "="); ok {
			env[k] = v
		}
	}
	for k, want := range map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": node} {
		if env[k] != want {
			t.Errorf("batch script: %s=%q, want %q", k, env[k], want)
		}
	}
	for _, k := range []string{"SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS"} {
		if v, ok := env[k]; ok {
			t.Errorf("batch script: %s=%q is set; internal/launch takes SLURM_STEP_ID for a step started by srun", k, v)
		}
	}
	p, err := launch.Detect(slurmLookup(env), launch.Overrides{Rank: -1, Size: -1, LocalRank: -1})
	if err != nil || p.Multi() || p.Source != "" {
		t.Errorf("launch.Detect in the batch script: %+v, %v; want one process", p, err)
	}
}

func slurmLookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// The variables Slurm sets in each task of srun -n 2, and what internal/launch makes of them: the
// rank, world size, local rank, job and rendezvous that the srun test's run used.
func testSlurmEnv(t *testing.T, node string) {
	stdout, stderr, err := slurmJob(t, t.TempDir(), slurmEnv(), "srun", "--ntasks=2", "--label", "env")
	if err != nil {
		t.Fatalf("srun env: %v\nstderr:\n%s", err, stderr)
	}
	tasks := map[int]map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		label, kv, ok := strings.Cut(sc.Text(), ": ")
		task, err := strconv.Atoi(strings.TrimSpace(label))
		k, v, isVar := strings.Cut(kv, "=")
		if !ok || err != nil || !isVar || !strings.HasPrefix(k, "SLURM") {
			continue
		}
		if tasks[task] == nil {
			tasks[task] = map[string]string{}
		}
		tasks[task][k] = v
	}
	if len(tasks) != 2 {
		t.Fatalf("want the variables of tasks 0 and 1, got %d tasks:\n%s", len(tasks), stdout)
	}
	job := tasks[0]["SLURM_JOB_ID"]
	id, err := strconv.Atoi(job)
	if err != nil || id < 1 {
		t.Fatalf("SLURM_JOB_ID=%q is not a job id", job)
	}
	for task := range 2 {
		env := tasks[task]
		r := strconv.Itoa(task)
		want := map[string]string{
			"SLURM_PROCID": r, "SLURM_LOCALID": r, // one node: the local rank is the rank
			"SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NPROCS": "2",
			"SLURM_JOB_ID": job, "SLURM_JOBID": job, "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
			"SLURM_NODEID": "0", "SLURM_STEP_NODELIST": node, "SLURM_JOB_NODELIST": node, "SLURM_NODELIST": node,
		}
		for k, w := range want {
			if v, ok := env[k]; !ok || v != w {
				t.Errorf("task %d: %s=%q (set: %v), want %q", task, k, v, ok, w)
			}
		}
		p, err := launch.Detect(slurmLookup(env), launch.Overrides{Rank: -1, Size: -1, LocalRank: -1})
		if err != nil {
			t.Fatalf("task %d: launch.Detect: %v", task, err)
		}
		if p.Rank != task || p.Size != 2 || p.LocalRank != task || p.Source != "slurm" || p.Job != job+".0" ||
			p.KeyFrom() != "SLURM_JOB_ID+SLURM_STEP_ID" {
			t.Errorf("task %d: launch.Detect read rank %d of %d, local rank %d, from %q, job %q, key from %q",
				task, p.Rank, p.Size, p.LocalRank, p.Source, p.Job, p.KeyFrom())
		}
		addr, err := p.Address("")
		if want := fmt.Sprintf("%s:%d", node, 20000+id%20000); err != nil || addr != want {
			t.Errorf("task %d: rendezvous %q, %v; want %s", task, addr, err, want)
		}
	}
}
