"""Copy bandwidth on this machine's GPU 0 as PyTorch and CuPy measure it, to set beside
`gpubench p2p`'s host and device-local figures (docs/validation.md). Same method as gpubench:
512 MiB buffers, 16 copies per sample timed with CUDA events, median of 3 samples, GB = 1e9 bytes.
The local figure counts one copy's bytes, like gpubench's Local column (nvbandwidth's
device_local_copy).

Also a 1 GiB device-to-device cudaMemcpyAsync, issued on a stream and replayed from a captured CUDA
graph: NCCL's out-of-place call on one rank is that copy, and under `-G` a capture makes it a
graph memcpy node; on 2026-11-29 a 1 GiB all-reduce took 776 us in graph mode against 504 without
it (docs/validation.md). Equal figures here put the difference in gpubench; a slower graph copy
puts it in the graph's copy itself."""
import json
import statistics

SIZE, REPEAT, SAMPLES = 512 << 20, 16, 3


def torch_figures():
    import torch

    dev = torch.device("cuda:0")
    src = torch.empty(SIZE, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    host = torch.empty(SIZE, dtype=torch.uint8, pin_memory=True)

    def timed(copy):
        out = []
        copy()  # warm-up
        for _ in range(SAMPLES):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(REPEAT):
                copy()
            b.record()
            torch.cuda.synchronize()
            out.append(SIZE * REPEAT / (a.elapsed_time(b) / 1e3) / 1e9)
        return statistics.median(out)

    return {
        "torch": torch.__version__,
        "torch_local_gbs": timed(lambda: dst.copy_(src)),
        "torch_h2d_gbs": timed(lambda: dst.copy_(host, non_blocking=True)),
        "torch_d2h_gbs": timed(lambda: host.copy_(src, non_blocking=True)),
    }


def cupy_figures():
    import cupy

    src = cupy.empty(SIZE, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    out = []
    dst[...] = src
    for _ in range(SAMPLES):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        for _ in range(REPEAT):
            dst[...] = src
        b.record()
        b.synchronize()
        out.append(SIZE * REPEAT / (cupy.cuda.get_elapsed_time(a, b) / 1e3) / 1e9)
    return {"cupy": cupy.__version__, "cupy_local_gbs": statistics.median(out)}


def graph_copy_figures():
    import cupy

    rt, size = cupy.cuda.runtime, 1 << 30
    src = cupy.empty(size, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    src.fill(1)
    stream = cupy.cuda.Stream(non_blocking=True)

    def copies():
        for _ in range(REPEAT):
            rt.memcpyAsync(dst.data.ptr, src.data.ptr, size, rt.memcpyDeviceToDevice, stream.ptr)

    def timed(launch):
        out = []
        launch()  # warm-up
        for _ in range(SAMPLES):
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record(stream)
            launch()
            b.record(stream)
            b.synchronize()
            out.append(cupy.cuda.get_elapsed_time(a, b) * 1e3 / REPEAT)
        return statistics.median(out)

    stream.begin_capture()
    copies()
    graph = stream.end_capture()
    return {
        "memcpy_1g_us": timed(copies),
        "graph_memcpy_1g_us": timed(lambda: graph.launch(stream)),
    }


result = {}
for name, f in (("torch", torch_figures), ("cupy", cupy_figures), ("graph_copy", graph_copy_figures)):
    try:
        result.update(f())
    except Exception as e:  # report what could not be measured, and go on
        result[name + "_error"] = repr(e)
print(json.dumps(result, indent=1))
