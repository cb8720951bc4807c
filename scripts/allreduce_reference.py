"""All-reduce on GPU 0 as torch.distributed (NCCL, world size 1) and CuPy's NCCL binding measure
it, at 8 B and 1 GiB of float32, to set beside `gpubench allreduce -g 1` (docs/validation.md).
Same method as gpubench and nccl-tests: one untimed call, then 20 calls timed from the host
between a synchronize before and after; time per call in microseconds; algbw in GB (1e9 bytes)/s.
With one rank, busbw is 0 by definition."""
import json
import time

SIZES, ITERS = (8, 1 << 30), 20


def timed(call, sync):
    call()
    sync()
    t0 = time.perf_counter()
    for _ in range(ITERS):
        call()
    sync()
    return (time.perf_counter() - t0) / ITERS * 1e6


def torch_figures():
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29577", rank=0, world_size=1)
    out = {"torch": torch.__version__, "torch_nccl": ".".join(map(str, torch.cuda.nccl.version()))}
    for size in SIZES:
        x = torch.ones(size // 4, dtype=torch.float32, device="cuda:0")
        us = timed(lambda: dist.all_reduce(x), torch.cuda.synchronize)
        out[f"torch_allreduce_{size}_us"] = us
        out[f"torch_allreduce_{size}_algbw_gbs"] = size / us / 1e3
    dist.destroy_process_group()
    return out


def cupy_figures():
    import cupy
    from cupy.cuda import nccl

    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    stream = cupy.cuda.Stream(non_blocking=True)
    out = {"cupy": cupy.__version__, "cupy_nccl": nccl.get_version()}
    for size in SIZES:
        x = cupy.ones(size // 4, dtype=cupy.float32)
        call = lambda: comm.allReduce(x.data.ptr, x.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
        us = timed(call, stream.synchronize)
        out[f"cupy_allreduce_{size}_us"] = us
        out[f"cupy_allreduce_{size}_algbw_gbs"] = size / us / 1e3
    return out


result = {}
for name, f in (("torch", torch_figures), ("cupy", cupy_figures)):
    try:
        result.update(f())
    except Exception as e:  # report what could not be measured, and go on
        result[name + "_error"] = repr(e)
print(json.dumps(result, indent=1))
