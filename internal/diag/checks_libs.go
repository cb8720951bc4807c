package diag

import (
	"errors"
	"fmt"
	"strings"
)

var libraryChecks = []Check{
	{Name: "driver", Group: "libraries", Run: checkDriver},
	{Name: "nvml", Group: "libraries", Run: checkNVML},
	{Name: "cuda-runtime", Group: "libraries", Run: checkCUDA},
	{Name: "nccl", Group: "libraries", Run: checkNCCL},
}

// checkDriver: the NVIDIA kernel module is loaded (/proc/driver/nvidia/version), and NVML's
// user-space library is of the same version.
func checkDriver(f *Facts) Result {
	if r, ok := f.simSkip("NVIDIA driver"); ok {
		return r
	}
	text, found := f.fs.read("proc", "driver", "nvidia", "version")
	if !found {
		return fail("install the NVIDIA driver and load it (sudo modprobe nvidia); nvidia-smi should then list the GPUs",
			"no NVIDIA kernel module is loaded ("+f.fs.path("proc", "driver", "nvidia", "version")+" is missing)")
	}
	v, ok := parseDriverVersion(text)
	if !ok {
		return warn("check the driver install: nvidia-smi should print its version",
			"the NVIDIA kernel module is loaded, but its version line cannot be read")
	}
	if f.Devs != nil && f.Devs.Driver != "" && f.Devs.Driver != v {
		return fail("reboot, or unload and reload the nvidia modules, so that the kernel module matches the libraries installed with it",
			fmt.Sprintf("kernel module %s but NVML library %s: a driver upgrade without a reboot (nvidia-smi says \"Driver/library version mismatch\")", v, f.Devs.Driver)).
			with("kernel_module", v).with("nvml", f.Devs.Driver)
	}
	return pass("kernel module "+v+" loaded").with("kernel_module", v)
}

// checkNVML: NVML loads and sees the GPUs.
func checkNVML(f *Facts) Result {
	if r, ok := f.simSkip("NVML"); ok {
		return r
	}
	if f.Devs == nil {
		if errors.Is(f.DevsErr, ErrNoCgo) {
			return skip(f.DevsErr.Error(), "use a gpubench built with cgo")
		}
		return fail("install the NVIDIA driver (NVML comes with it) or give its path with --nvml-lib", f.DevsErr.Error())
	}
	if len(f.Devs.GPUs) == 0 {
		return fail("check that the GPUs are seated and powered, and that dmesg shows no NVRM errors", "NVML loads but sees no GPU")
	}
	cuda := "unknown"
	if f.Devs.CUDAVersion > 0 {
		cuda = cudaText(f.Devs.CUDAVersion)
	}
	return pass(fmt.Sprintf("NVML, driver %s (CUDA %s), %d %s", orUnknown(f.Devs.Driver), cuda, len(f.Devs.GPUs), plural(len(f.Devs.GPUs), "GPU", "GPUs"))).
		with("driver", f.Devs.Driver).with("cuda_driver_version", f.Devs.CUDAVersion).with("gpus", len(f.Devs.GPUs))
}

// minDriverBranch is the oldest driver branch that runs each CUDA major through minor version
// compatibility (NVIDIA CUDA Compatibility guide, "Minor Version Compatibility", Table 1: CUDA
// 11.x >= 450, 12.x >= 525, 13.x >= 580).
var minDriverBranch = map[int]int{11: 450, 12: 525, 13: 580}

// cudaVerdict decides whether a driver runs a CUDA runtime. runtime and driver are CUDA versions
// (1000*major + 10*minor; the driver's is what cudaDriverGetVersion reports, "the latest version of
// CUDA supported by the driver"), branch the driver's major version (550) or 0.
func cudaVerdict(runtime, driver, branch int) (Status, string) {
	rt, dr := cudaText(runtime), cudaText(driver)
	switch {
	case driver >= runtime:
		return Pass, fmt.Sprintf("the driver supports CUDA %s, the runtime is %s", dr, rt)
	case driver/1000 == runtime/1000 && runtime >= 11000 && branch >= minDriverBranch[runtime/1000] && minDriverBranch[runtime/1000] > 0:
		return Warn, fmt.Sprintf("runtime %s is newer than the driver's CUDA %s: it runs through minor version compatibility, without the features that need the newer driver", rt, dr)
	}
	return Fail, fmt.Sprintf("runtime %s needs a newer driver than this one (CUDA %s): CUDA calls fail with cudaErrorInsufficientDriver", rt, dr)
}

// checkCUDA: libcudart loads, and the driver supports its CUDA version.
func checkCUDA(f *Facts) Result {
	if r, ok := f.simSkip("CUDA runtime"); ok {
		return r
	}
	if !cgoBuild {
		return skip("this gpubench was built without cgo, so it cannot load the CUDA runtime", "use a gpubench built with cgo")
	}
	c := f.opt.CUDA
	if c.Path == "" && c.Err == nil {
		return skip("the CUDA runtime was not loaded", "")
	}
	if c.Err != nil {
		return fail("install the CUDA runtime (pip install nvidia-cuda-runtime-cu12, or the CUDA toolkit) or point --cuda-lib or GPUBENCH_CUDART at libcudart.so",
			c.Err.Error())
	}
	branch := 0
	if f.Devs != nil {
		branch = driverBranch(f.Devs.Driver)
	}
	if branch == 0 {
		text, _ := f.fs.read("proc", "driver", "nvidia", "version")
		v, _ := parseDriverVersion(text)
		branch = driverBranch(v)
	}
	st, why := cudaVerdict(c.Version, c.Driver, branch)
	r := Result{Status: st, Finding: c.Path + ": " + why}
	if st != Pass {
		r.Remedy = fmt.Sprintf("upgrade the driver to one that supports CUDA %s, or use a CUDA %s runtime (--cuda-lib)", cudaText(c.Version), cudaText(c.Driver))
	}
	return r.with("path", c.Path).with("runtime_version", c.Version).with("driver_cuda_version", c.Driver)
}

// checkNCCL: libnccl loads.
func checkNCCL(f *Facts) Result {
	if r, ok := f.simSkip("NCCL library"); ok {
		return r
	}
	if !cgoBuild {
		return skip("this gpubench was built without cgo, so it cannot load NCCL", "use a gpubench built with cgo")
	}
	if f.opt.CUDA.Err != nil {
		return skip("NCCL needs the CUDA runtime, which did not load", "see the cuda-runtime check")
	}
	n := f.opt.NCCL
	if n.Path == "" && n.Err == nil {
		return skip("NCCL was not loaded", "")
	}
	if n.Err != nil {
		return fail("install NCCL (pip install nvidia-nccl-cu12) or point --nccl-lib or GPUBENCH_NCCL at libnccl.so.2", n.Err.Error())
	}
	return pass(fmt.Sprintf("NCCL %s (%s)", ncclText(n.Version), n.Path)).with("path", n.Path).with("version", ncclText(n.Version))
}

// cudaText writes 1000*major + 10*minor as major.minor.
func cudaText(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// ncclText decodes an NCCL version code in either encoding (cuda-nccl-abi.md §1.5).
func ncclText(v int) string {
	if v < 10000 {
		return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "unknown"
	}
	return s
}
