"""All-reduce on GPU 0 as torch.distributed (NCCL, world size 1) and CuPy's NCCL binding measure
it, at 8 B and 1 GiB of float32, to set beside `gpubench allreduce -g 1` (docs/validation.md).
Same method as gpubench and nccl-tests: one untimed call, then 20 calls timed from the host
between a synchronize before and after; time per call in microseconds; algbw in GB (1e9 bytes)/s.
With one rank, busbw is 0 by definition.

Then the host's cost of a group of point-to-point operations: ncclGroupStart, k pairs of 8 B
ncclSend and ncclRecv from the rank to itself, ncclGroupEnd, timed on the host alone (the stream
is synchronized outside the timing), for k = 1, 8 and 64; the slope is what one more operation in
a group costs the calling thread (an all-to-all of n ranks driven by one thread queues 2n^2)."""
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


def cupy_group_figures():
    import cupy
    from cupy.cuda import nccl

    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    stream = cupy.cuda.Stream(non_blocking=True)
    out = {}
    pairs = (1, 8, 64)
    bufs = [cupy.zeros(2, dtype=cupy.float32) for _ in range(2 * max(pairs))]  # 8 B each, one per operation

    def group(k):
        nccl.groupStart()
        for i in range(k):
            comm.send(bufs[2 * i].data.ptr, 2, nccl.NCCL_FLOAT32, 0, stream.ptr)
            comm.recv(bufs[2 * i + 1].data.ptr, 2, nccl.NCCL_FLOAT32, 0, stream.ptr)
        nccl.groupEnd()

    for k in pairs:
        group(k)  # untimed: connections and plans made once
        stream.synchronize()
        host = []
        for _ in range(ITERS):
            t0 = time.perf_counter()
            group(k)
            host.append(time.perf_counter() - t0)
            stream.synchronize()
        host.sort()
        out[f"cupy_group_{k}_pairs_host_us"] = host[len(host) // 2] * 1e6  # median
    lo, hi = pairs[0], pairs[-1]
    out["cupy_group_op_host_us"] = (out[f"cupy_group_{hi}_pairs_host_us"] - out[f"cupy_group_{lo}_pairs_host_us"]) / (2 * (hi - lo))
    return out


result = {}
for name, f in (("torch", torch_figures), ("cupy", cupy_figures), ("cupy_group", cupy_group_figures)):
    try:
        result.update(f())
    except Exception as e:  # report what could not be measured, and go on
        result[name + "_error"] = repr(e)
print(json.dumps(result, indent=1))
