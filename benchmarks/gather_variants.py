"""Zero-copy gather kernels side by side on one GPU: which layout reaches pinned memcpy bandwidth (issue 28, item 6).

    python benchmarks/gather_variants.py    # needs CUDA; prints a table, writes benchmarks/out/gather_variants.json

A 1 GiB float32 table in pinned host memory, 10% of its rows requested (uniform random ids), per row size. Every
variant copies the same rows into device memory and is checked against ``table[ids]``; each is timed with CUDA events
around the kernel alone (ids already sorted, views already made) and, for the library path, end to end
(``PinnedFeatures.gather``: sort, launch, whatever Python runs around them): each call waited for, the output given
or allocated, ids on the device or the host, and calls queued back to back (one wait at the end: the host work of a
call overlaps the kernels before it); then the sort and the kernel alone with no Python between them. The reference
is a pinned host-to-device ``memcpy`` of 256 MiB.

Variants:
- ``numba, word per thread``: the library's kernel (``storage/cuda_gather.py``): thread ``g`` copies word ``g % W`` of
  sorted row ``g // W``, grid-stride, one load in flight per thread, each id checked against the table.
- ``numba, word per thread, ids not sorted``: the same in the ids' own order (whether the store's sort pays for itself).
- ``numba, 4 loads in flight``: the same mapping, each thread loads four words (one grid stride apart) before it
  stores any, so a thread has four PCIe reads outstanding.
- ``cuda c++, 4 loads in flight``: the same as a CuPy raw kernel (nvcc-quality code, 32-bit word index, ``__ldg``-free
  plain loads of host memory), launched with a full grid.
- ``cuda c++, warp per row``: lanes of a warp split a row; each warp copies 4 rows per step (their loads first).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sparsetrain._numba_cuda import cuda  # noqa: E402
from sparsetrain.storage import PinnedFeatures  # noqa: E402
from sparsetrain.storage.cuda_gather import launch_gather, word_bytes, word_view  # noqa: E402

UNROLL = 4
CPP_TYPES = {16: "uint4", 8: "uint2", 4: "unsigned int", 2: "unsigned short", 1: "unsigned char"}

CPP_SOURCE = r"""
typedef WORD word_t;
extern "C" __global__ void gather_ilp(const word_t* src, const long long* ids, const long long* pos, word_t* out,
                                      long long total, int words) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x; g < total; g += 4 * stride) {
        word_t v[4];
        long long at[4];
        #pragma unroll
        for (int u = 0; u < 4; ++u) {
            long long e = g + u * stride;
            if (e < total) {
                long long k = e / words;
                int w = (int)(e - k * words);
                v[u] = src[ids[k] * words + w];
                at[u] = pos[k] * words + w;
            }
        }
        #pragma unroll
        for (int u = 0; u < 4; ++u) {
            if (g + u * stride < total) out[at[u]] = v[u];
        }
    }
}

extern "C" __global__ void gather_warp_rows(const word_t* src, const long long* ids, const long long* pos, word_t* out,
                                            long long n, int words) {
    int lane = threadIdx.x & 31;
    long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long r = warp * 4; r < n; r += warps * 4) {
        for (int w0 = 0; w0 < words; w0 += 32) {
            int w = w0 + lane;
            word_t v[4];
            #pragma unroll
            for (int u = 0; u < 4; ++u)
                if (r + u < n && w < words) v[u] = src[ids[r + u] * words + w];
            #pragma unroll
            for (int u = 0; u < 4; ++u)
                if (r + u < n && w < words) out[pos[r + u] * words + w] = v[u];
        }
    }
}
"""


@cuda.jit
def numba_gather_ilp(src, sorted_ids, positions, out):
    """``out[positions[k]] = src[sorted_ids[k]]``, four words loaded per thread before any is stored."""
    words = src.shape[1]
    total = sorted_ids.shape[0] * words
    stride = cuda.gridsize(1)
    g = cuda.grid(1)
    while g < total:
        e1, e2, e3 = g + stride, g + 2 * stride, g + 3 * stride
        k0 = g // words
        v0 = src[sorted_ids[k0], g - k0 * words]
        k1 = e1 // words if e1 < total else k0
        v1 = src[sorted_ids[k1], e1 - k1 * words] if e1 < total else v0
        k2 = e2 // words if e2 < total else k0
        v2 = src[sorted_ids[k2], e2 - k2 * words] if e2 < total else v0
        k3 = e3 // words if e3 < total else k0
        v3 = src[sorted_ids[k3], e3 - k3 * words] if e3 < total else v0
        out[positions[k0], g - k0 * words] = v0
        if e1 < total:
            out[positions[k1], e1 - k1 * words] = v1
        if e2 < total:
            out[positions[k2], e2 - k2 * words] = v2
        if e3 < total:
            out[positions[k3], e3 - k3 * words] = v3
        g += 4 * stride


def event_ms(fn, reps: int) -> float:
    """Median milliseconds of ``fn`` between CUDA events on the current stream (after one warm-up call), the host
    waiting for each call: whatever the host does before a launch is time the GPU waits."""
    fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def back_to_back_ms(fn, reps: int) -> float:
    """Milliseconds a call of ``fn`` with ``reps`` calls queued one after the other and one wait at the end: the host
    work of a call overlaps the kernels before it (how a loader calls it)."""
    fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def memcpy_gbs(reps: int) -> float:
    big = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty_like(big, device="cuda")
    ms = event_ms(lambda: dev.copy_(big, non_blocking=True), reps)
    return big.numel() / ms / 1e6


def _cupy_kernels(word: int):
    import cupy

    module = cupy.RawModule(code=CPP_SOURCE.replace("WORD", CPP_TYPES[word]), options=("-std=c++17",))
    return cupy, module.get_function("gather_ilp"), module.get_function("gather_warp_rows")


def measure(width: int, reps: int, table_bytes: int = 1 << 30, fraction: float = 0.1) -> list[dict]:
    """Every variant at rows of ``width`` float32: GB/s of rows copied, checked against ``table[ids]``."""
    rows = table_bytes // (width * 4)
    table = torch.randn(rows, width)
    store = PinnedFeatures(table, device="cuda")
    ids = torch.randint(0, rows, (int(rows * fraction),), device="cuda")
    host_ids = ids.cpu()
    expected = table[host_ids].cuda()
    row_bytes = width * 4
    moved = ids.numel() * row_bytes
    sorted_ids, positions = torch.sort(ids)
    out = torch.empty(ids.numel(), width, device="cuda")
    word = word_bytes(row_bytes, store.host.data_ptr(), out.data_ptr())
    src = word_view(store.host.data_ptr(), rows, row_bytes, word, owner=store.host)
    dst = word_view(out.data_ptr(), out.shape[0], row_bytes, word, owner=out)
    flag = torch.zeros(1, dtype=torch.int64, device="cuda")
    nb_ids, nb_pos, nb_flag = (cuda.as_cuda_array(t, sync=False) for t in (sorted_ids, positions, flag))
    stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results = []

    def add(name, fn, timer=event_ms):
        """``fn`` fills ``out`` or returns the rows it gathered."""
        out.fill_(float("nan"))
        got = fn()
        torch.cuda.synchronize()
        exact = bool(torch.equal(out if got is None else got, expected))
        ms = timer(fn, reps)
        results.append({"row_bytes": row_bytes, "variant": name, "GB_per_s": moved / ms / 1e6, "exact": exact,
                        "word_bytes": word})
        if name.startswith("PinnedFeatures"):  # what the last call queued, as the store counts it
            results[-1]["counts"] = store.last_gather_counts.as_dict()

    def sort_and_kernel():
        torch.sort(ids, out=(sorted_ids, positions))
        launch_gather(src, nb_ids, nb_pos, ids.numel(), dst, nb_flag, stream)

    add("PinnedFeatures.gather(out=), end to end", lambda: store.gather(ids, out=out))
    add("PinnedFeatures.gather(out=), end to end, calls back to back", lambda: store.gather(ids, out=out),
        back_to_back_ms)
    add("PinnedFeatures.gather, end to end, new output", lambda: store.gather(ids))
    add("PinnedFeatures.gather(out=), end to end, ids on the host", lambda: store.gather(host_ids, out=out))
    add("sort + kernel, views made before", sort_and_kernel)
    add("numba, word per thread (the store's kernel)",
        lambda: launch_gather(src, nb_ids, nb_pos, ids.numel(), dst, nb_flag, stream))
    arange = torch.arange(ids.numel(), device="cuda")
    nb_unsorted, nb_arange = cuda.as_cuda_array(ids, sync=False), cuda.as_cuda_array(arange, sync=False)
    add("numba, word per thread, ids not sorted",
        lambda: launch_gather(src, nb_unsorted, nb_arange, ids.numel(), dst, nb_flag, stream))
    total = ids.numel() * (row_bytes // word)
    add("numba, 4 loads in flight", lambda: numba_gather_ilp[min(65535, -(-total // (256 * UNROLL))), 256, stream](
        src, nb_ids, nb_pos, dst))
    try:
        cupy, ilp, warp_rows = _cupy_kernels(word)
    except Exception as exc:  # no CuPy / no compiler: the row says so
        results.append({"row_bytes": row_bytes, "variant": "cuda c++", "error": f"{type(exc).__name__}: {exc}"[:200]})
    else:
        s_ptr, o_ptr = store.host.data_ptr(), out.data_ptr()
        words = row_bytes // word
        cp_stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

        def launch(kernel, grid, n):
            with cp_stream:
                kernel((grid,), (256,), (cupy.uint64(s_ptr), cupy.uint64(sorted_ids.data_ptr()),
                                         cupy.uint64(positions.data_ptr()), cupy.uint64(o_ptr), cupy.int64(n),
                                         cupy.int32(words)))

        add("cuda c++, 4 loads in flight", lambda: launch(ilp, max(1, min(1 << 20, -(-total // 1024))), total))
        add("cuda c++, 4 loads in flight, 8 blocks per SM", lambda: launch(ilp, sms * 8, total))
        add("cuda c++, warp per row", lambda: launch(warp_rows, max(1, min(1 << 20, -(-ids.numel() // 32))),
                                                     ids.numel()))
    store.close()  # raises if the kernel met an id out of range (none here)
    assert int(flag) == 0
    return results


def bench(reps: int = 10, widths=(47, 64, 128, 256)) -> dict:
    memcpy = memcpy_gbs(reps)
    rows = []
    for width in widths:
        for r in measure(width, reps):
            if "GB_per_s" in r:
                r["fraction_of_memcpy"] = r["GB_per_s"] / memcpy
            rows.append(r)
    return {"device": torch.cuda.get_device_name(), "memcpy_GB_per_s": memcpy, "rows": rows}


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("gather_variants.py needs a CUDA GPU")
    result = bench()
    print(f"{result['device']}: pinned host-to-device memcpy {result['memcpy_GB_per_s']:.1f} GB/s")
    for r in result["rows"]:
        if "error" in r:
            print(f"  {r['row_bytes']:5d} B  {r['variant']:48} {r['error']}")
        else:
            print(f"  {r['row_bytes']:5d} B  {r['variant']:48} {r['GB_per_s']:7.1f} GB/s {r['fraction_of_memcpy']:5.0%}"
                  f" {'exact' if r['exact'] else 'WRONG'}")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "gather_variants.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
