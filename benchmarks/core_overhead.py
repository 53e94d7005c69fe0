"""Core overhead on the GPU: host cost per launch, NVRTC compile time, cache-hit load time.

Run on a GPU machine from the repository root:  python benchmarks/core_overhead.py
Writes benchmarks/results/core_overhead.json. Goals (issue 2): cache hit under 1 ms; launch overhead under 5 µs.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_result  # noqa: E402

SRC = r"""
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


def host_us_per_call(fn, n: int, sync) -> float:
    """Wall-clock host time per call over n calls, the queue drained before and after."""
    for _ in range(200):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    sync()
    return (t1 - t0) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--launches", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5, help="repeat each launch loop; the median is reported")
    args = ap.parse_args()

    import torch
    import tunelab
    from tunelab import _core

    torch.cuda.init()
    x = torch.randn(1024, device="cuda")
    y = torch.empty_like(x)
    kernel = tunelab.Kernel(SRC, "scale<{BLOCK}>", launch=lambda c, x, y, a, n: ((n + c["BLOCK"] - 1) // c["BLOCK"], c["BLOCK"]))
    ck = kernel.compile({"BLOCK": 256})
    prepared = ck.prepare(x, y, 2.0, x.numel())
    stream = torch.cuda.current_stream().cuda_stream
    fn = ck.function()
    pack = ck.pack([x, y, 2.0, x.numel()])
    sync = torch.cuda.synchronize

    def rep(f):
        return statistics.median(host_us_per_call(f, args.launches, sync) for _ in range(args.repeats))

    launch = {
        "prepared_launch_us": rep(lambda: prepared(stream)),
        "function_launch_prepacked_us": rep(lambda: fn.launch((4,), (256,), 0, stream, pack)),
        "kernel_call_full_path_us": rep(lambda: ck(x, y, 2.0, 1024)),
        "torch_add_out_us": rep(lambda: torch.add(x, x, out=y)),
        "torch_mul_scalar_us": rep(lambda: torch.mul(x, 2.0, out=y)),
    }

    # NVRTC compile time of a small kernel (cache off) and the cache-hit path (fresh cache dir).
    compile_ms, hit_ms, hit_wall_ms, load_ms = [], [], [], []
    with tempfile.TemporaryDirectory() as cache:
        for i in range(5):
            r = _core.compile(SRC, [f"scale<{128 + 32 * i}>"], "sm_90", use_cache=False)
            compile_ms.append(r.compile_ms)
        _core.compile(SRC, ["scale<256>"], "sm_90", cache_dir=cache)
        for _ in range(50):
            t0 = time.perf_counter()
            r = _core.compile(SRC, ["scale<256>"], "sm_90", cache_dir=cache)
            hit_wall_ms.append((time.perf_counter() - t0) * 1e3)
            assert r.cache_hit
            hit_ms.append(r.compile_ms)
        for _ in range(20):
            t0 = time.perf_counter()
            _core.Module(r.cubin).function(r.lowered_names["scale<256>"])
            load_ms.append((time.perf_counter() - t0) * 1e3)

    result = {
        "launches_per_loop": args.launches,
        "repeats": args.repeats,
        "launch_overhead": launch,
        "nvrtc_compile_ms": {"median": statistics.median(compile_ms), "all": compile_ms},
        "cache_hit_ms": {"median": statistics.median(hit_ms), "wall_median": statistics.median(hit_wall_ms)},
        "module_load_ms": {"median": statistics.median(load_ms)},
        "goals": {"cache_hit_under_1ms": statistics.median(hit_wall_ms) < 1.0,
                  "launch_overhead_under_5us": launch["prepared_launch_us"] < 5.0},
    }
    path = write_result("core_overhead", result)
    print(f"\nwrote {path}")
    print(f"{'what':42s} {'value':>10s}")
    for k, v in launch.items():
        print(f"{'host per launch: ' + k:42s} {v:9.2f} us")
    print(f"{'NVRTC compile, small kernel (median)':42s} {statistics.median(compile_ms):9.1f} ms")
    print(f"{'cache hit (core / wall, median)':42s} {statistics.median(hit_ms):6.3f} / {statistics.median(hit_wall_ms):.3f} ms")
    print(f"{'module load + function lookup (median)':42s} {statistics.median(load_ms):9.3f} ms")
    print("goals:", result["goals"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
