package diag

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/topo"
)

var containerChecks = []Check{
	{Name: "dev-shm", Group: "containers", Run: checkDevShm},
	{Name: "memlock", Group: "containers", Run: checkMemlock},
	{Name: "visible-devices", Group: "containers", Run: checkVisibleDevices},
	{Name: "slurm", Group: "containers", Run: checkSlurm},
}

var ncclChecks = []Check{
	{Name: "nccl-names", Group: "nccl", Run: checkNCCLNames},
	{Name: "nccl-transports", Group: "nccl", Run: checkNCCLTransports},
	{Name: "nccl-socket-ifname", Group: "nccl", Run: checkSocketIfname},
	{Name: "nccl-debug", Group: "nccl", Run: checkNCCLDebug},
}

// NCCL's advice for containers, "--shm-size=1g --ulimit memlock=-1" (NCCL user guide,
// Troubleshooting, "Runtime and MPI issues" > "Shared memory" > Docker): NCCL keeps its buffers
// between processes in /dev/shm, and Docker gives a container 64 MiB of it by default.
const shmAdvised = 1 << 30

func bytesText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// checkDevShm: /dev/shm mounted, and at least the 1 GiB NCCL advises.
func checkDevShm(f *Facts) Result {
	mounts, ok := f.fs.read("proc", "self", "mounts")
	if !ok {
		return skip(f.fs.path("proc", "self", "mounts")+" cannot be read", "")
	}
	size, fstype, found := parseMountSize(mounts, "/dev/shm")
	const remedy = "give the container more shared memory: docker run --shm-size=1g (Kubernetes: an emptyDir with medium: Memory on /dev/shm), or mount -o remount,size=1G /dev/shm"
	if !found {
		return fail("mount a tmpfs on /dev/shm (mount -t tmpfs -o size=1G tmpfs /dev/shm)",
			"nothing is mounted on /dev/shm: NCCL cannot create its shared memory segments and fails to start")
	}
	how := "size=" + bytesText(size)
	if size < 0 { // tmpfs without size= takes half of RAM
		mem, ok := parseMemTotal(func() string { s, _ := f.fs.read("proc", "meminfo"); return s }())
		if !ok {
			return pass(fstype + " with no size limit of its own (half of RAM)")
		}
		size, how = mem/2, "half of RAM"
	}
	r := Result{Finding: fmt.Sprintf("%s %s (%s)", fstype, bytesText(size), how)}.with("bytes", size)
	if size < shmAdvised {
		r.Status, r.Remedy = Warn, remedy
		r.Finding += ", below the 1 GiB NCCL advises: NCCL fails with \"failed to extend /dev/shm\" when it runs out"
		return r
	}
	r.Status = Pass
	return r
}

// checkMemlock: the locked-memory limit unlimited, as NCCL advises (memlock=-1): pinned host
// buffers and RDMA memory registration count against it.
func checkMemlock(f *Facts) Result {
	limits, ok := f.fs.read("proc", "self", "limits")
	if !ok {
		return skip(f.fs.path("proc", "self", "limits")+" cannot be read", "")
	}
	n, ok := parseMemlock(limits)
	switch {
	case !ok:
		return skip("no \"Max locked memory\" line in "+f.fs.path("proc", "self", "limits"), "")
	case n < 0:
		return pass("unlimited")
	}
	return warn("docker run --ulimit memlock=-1; elsewhere \"* - memlock unlimited\" in /etc/security/limits.conf (Slurm: PropagateResourceLimits, systemd: LimitMEMLOCK=infinity)",
		fmt.Sprintf("limited to %s: pinned host memory and RDMA registration can fail", bytesText(n))).with("bytes", n)
}

// checkVisibleDevices: CUDA_VISIBLE_DEVICES leaves CUDA some devices and names only GPUs NVML
// sees; NVIDIA_VISIBLE_DEVICES (the container toolkit's) agrees with the GPUs the container has.
func checkVisibleDevices(f *Facts) Result {
	value, set := f.lookup("CUDA_VISIBLE_DEVICES")
	v := topo.ParseVisibleDevices(value, set)
	const remedy = "set CUDA_VISIBLE_DEVICES to a comma-separated list of distinct indices or GPU UUIDs that nvidia-smi -L shows, or unset it"
	switch {
	case v.Repeated != "":
		return fail(remedy, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q names %q twice, so CUDA sees no device at all", value, v.Repeated))
	case set && len(v.Entries) == 0 && !v.Stopped:
		return fail(remedy, "CUDA_VISIBLE_DEVICES is set but empty, so CUDA sees no device")
	case set && len(v.Entries) == 0:
		return fail(remedy, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q: CUDA reads no device from it", value))
	case v.Stopped:
		return fail(remedy, fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %q is not of the first entry's kind, so CUDA ignores it and every entry after it", v.Stop))
	}
	nv, nvSet := f.lookup("NVIDIA_VISIBLE_DEVICES")
	asked, err := parseNvidiaVisible(nv)
	if nvSet && err != nil {
		return warn("set NVIDIA_VISIBLE_DEVICES to all, none, or GPU indices or UUIDs separated by commas (docker run --gpus sets it)",
			fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%q is malformed: %v", nv, err))
	}
	if f.sim || f.Devs == nil {
		finding := "CUDA_VISIBLE_DEVICES unset: every GPU visible"
		if set {
			finding = fmt.Sprintf("CUDA_VISIBLE_DEVICES=%s is well formed", input.Safe(value))
		}
		why := "no NVML to compare it with the GPUs"
		if f.sim {
			why = "not compared with the GPUs on the simulator"
		}
		return skip(finding+"; "+why, "")
	}
	gpus := f.Devs.GPUs
	if set {
		for _, e := range v.Entries {
			switch v.Kind {
			case "index":
				if k, _ := strconv.Atoi(e); k >= len(gpus) {
					return fail(remedy, fmt.Sprintf("CUDA_VISIBLE_DEVICES names device %s, but NVML sees %d %s: CUDA ignores it and every entry after it", e, len(gpus), plural(len(gpus), "GPU", "GPUs")))
				}
			case "gpu":
				if matches(e, gpus) != 1 {
					return fail(remedy, fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %s names %s: CUDA ignores it and every entry after it", e, []string{"no GPU NVML sees", "one GPU", "more than one GPU"}[min(matches(e, gpus), 2)]))
				}
			}
		}
	}
	if nvSet {
		switch {
		case asked == 0 && len(gpus) > 0:
			return warn("this process sees GPUs its container was not given: check how it was started", fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%s, yet NVML sees %d GPUs", strings.TrimSpace(nv), len(gpus)))
		case asked > 0 && asked != len(gpus):
			return warn("give the container the GPUs it should have (docker run --gpus, or the device plugin's resource limit), or fix NVIDIA_VISIBLE_DEVICES",
				fmt.Sprintf("NVIDIA_VISIBLE_DEVICES names %d %s but NVML sees %d", asked, plural(asked, "GPU", "GPUs"), len(gpus))).with("asked", asked).with("seen", len(gpus))
		}
	}
	if !set {
		return pass(fmt.Sprintf("CUDA_VISIBLE_DEVICES unset: all %d GPUs visible", len(gpus)))
	}
	return pass(fmt.Sprintf("CUDA_VISIBLE_DEVICES=%s: %d of %d GPUs", input.Safe(value), len(v.Entries), len(gpus)))
}

// parseNvidiaVisible reads NVIDIA_VISIBLE_DEVICES as the NVIDIA Container Toolkit's user guide
// gives it: "all" or "" (-1: not a count), "none" or "void" (0), or GPU indices or UUIDs separated
// by commas, which it counts. An empty or repeated entry is an error.
func parseNvidiaVisible(v string) (int, error) {
	switch v = strings.TrimSpace(v); v {
	case "all", "":
		return -1, nil
	case "none", "void":
		return 0, nil
	}
	seen := map[string]bool{}
	for i, e := range strings.Split(v, ",") {
		switch e = strings.TrimSpace(e); {
		case e == "":
			return 0, fmt.Errorf("entry %d is empty", i+1)
		case seen[e]:
			return 0, fmt.Errorf("%q is named twice", e)
		}
		seen[e] = true
	}
	return len(seen), nil
}

// matches counts the GPUs whose UUID starts with the entry (CUDA accepts a unique prefix).
func matches(e string, gpus []GPU) int {
	n := 0
	for _, g := range gpus {
		if g.UUID != "" && strings.HasPrefix(g.UUID, e) {
			n++
		}
	}
	return n
}

// checkSlurm: inside a Slurm job, the job was given GPUs, and CUDA_VISIBLE_DEVICES (which Slurm
// sets from its allocation) holds as many as the job has on this node.
func checkSlurm(f *Facts) Result {
	job, inJob := f.lookup("SLURM_JOB_ID")
	if !inJob {
		return skip("not in a Slurm job (SLURM_JOB_ID is unset)", "")
	}
	const remedy = "ask Slurm for GPUs: srun --gpus-per-node=N (or --gres=gpu:N), and let it set CUDA_VISIBLE_DEVICES"
	job = input.Safe(job)
	onNode, from := -1, ""
	for _, name := range []string{"SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"} {
		v, ok := f.lookup(name)
		if !ok || v == "" {
			continue
		}
		n, err := slurmGPUs(name, v)
		if err != nil {
			return warn("unset "+name+" and let Slurm set it (a count of GPUs in SLURM_GPUS_ON_NODE, GPU indices separated by commas in SLURM_STEP_GPUS and SLURM_JOB_GPUS)",
				fmt.Sprintf("Slurm job %s: %s=%q is malformed: %v", job, name, v, err))
		}
		onNode, from = n, name
		break
	}
	switch {
	case onNode < 0:
		return warn(remedy, "Slurm job "+job+" has no GPUs on this node (SLURM_GPUS_ON_NODE, SLURM_STEP_GPUS and SLURM_JOB_GPUS are unset)")
	case onNode == 0:
		return warn(remedy, "Slurm job "+job+" has no GPUs on this node ("+from+"=0)")
	}
	value, set := f.lookup("CUDA_VISIBLE_DEVICES")
	if !set {
		return warn(remedy, fmt.Sprintf("Slurm job %s has %d GPUs here but CUDA_VISIBLE_DEVICES is unset: unless cgroups confine the job (ConstrainDevices=yes), it sees other jobs' GPUs too", job, onNode))
	}
	v := topo.ParseVisibleDevices(value, set)
	if len(v.Entries) != onNode {
		return warn(remedy, fmt.Sprintf("Slurm job %s has %d GPUs here but CUDA_VISIBLE_DEVICES=%s names %d", job, onNode, input.Safe(value), len(v.Entries))).
			with("slurm_gpus", onNode).with("cuda_visible", len(v.Entries))
	}
	return pass(fmt.Sprintf("Slurm job %s: %d GPUs, as CUDA_VISIBLE_DEVICES names", job, onNode))
}

// slurmGPUs reads one of Slurm's GPU variables (sbatch(1) and srun(1), "OUTPUT ENVIRONMENT
// VARIABLES"):
// SLURM_GPUS_ON_NODE is a count; SLURM_STEP_GPUS and SLURM_JOB_GPUS list the GPUs' indices,
// separated by commas ("0,1,2,3"), which it counts. Anything else is an error: Slurm writes no
// other form, so the value was set by hand.
func slurmGPUs(name, v string) (int, error) {
	digits := func(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
	if name == "SLURM_GPUS_ON_NODE" {
		n, err := strconv.Atoi(v)
		if !digits(v) || err != nil {
			return 0, errors.New("not a count of GPUs")
		}
		return n, nil
	}
	seen := map[int]bool{}
	for i, e := range strings.Split(v, ",") {
		k, err := strconv.Atoi(e)
		switch {
		case e == "":
			return 0, fmt.Errorf("entry %d is empty", i+1)
		case !digits(e) || err != nil:
			return 0, fmt.Errorf("%q is not a GPU index", e)
		case seen[k]:
			return 0, fmt.Errorf("GPU %d is listed twice", k)
		}
		seen[k] = true
	}
	return len(seen), nil
}
