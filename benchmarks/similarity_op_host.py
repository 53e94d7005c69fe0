"""Host time of one ``tunelab.ops.similarity_search`` call (Python, the custom op's dispatch, config resolution,
argument packing, two launches) next to the GPU time of its kernels, and where the host time goes (cProfile).

At N = 50K, nq = 100 the kernels take ~46 us; a call whose host path takes longer leaves the GPU idle between
calls of a loop. Times ``CALLS`` back-to-back calls by wall clock (no synchronization inside the loop: the host is
the bottleneck when the per-call time exceeds the GPU's), the same through ``torch.ops.tunelab`` (the custom op's
dispatcher, which plain eager calls skip) and for torch.topk(Q @ C.T), the time per call of the same loops by CUDA
events (the GPU's time per call when the host keeps ahead), each in ``ROUNDS`` interleaved rounds (medians reported,
every round's figure kept), then profiles the op.
Results: benchmarks/results/similarity_op_host[_TAG].json; the profile's top entries last.

    python3 benchmarks/similarity_op_host.py [--tag h200]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import draw_search_inputs, write_result  # noqa: E402

NQ, N, D, K = 100, 50_000, 768, 10
CALLS = 300
ROUNDS = 7


def per_call_us(fn, calls: int = CALLS) -> float:
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return host / calls * 1e6


def gpu_us(fn, calls: int = CALLS) -> float:
    """GPU time per call in a back-to-back loop (events around the loop; the host queues ahead when it is faster)."""
    import torch

    for _ in range(20):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tag", default="", help="suffix of the result file: similarity_op_host_TAG.json")
    args = ap.parse_args(argv)

    import torch

    from tunelab.ops import similarity as sim

    q, c = draw_search_inputs(NQ, N, D, torch.float16, seed=3)
    out = {"nq": NQ, "n": N, "d": D, "k": K, "calls": CALLS, "rounds": ROUNDS}
    out["device"] = torch.cuda.get_device_name()
    op = lambda: sim.similarity_search(q, c, K)  # noqa: E731
    dispatched = lambda: torch.ops.tunelab.similarity_search(q, c, K, "ip", "", 0.85, 0, 0, 2)  # noqa: E731
    baseline = lambda: torch.topk(q @ c.T, K, dim=-1)  # noqa: E731
    loops = {"op_us_per_call": (per_call_us, op), "op_dispatcher_us_per_call": (per_call_us, dispatched),
             "torch_us_per_call": (per_call_us, baseline), "op_gpu_us_per_call": (gpu_us, op),
             "torch_gpu_us_per_call": (gpu_us, baseline)}
    samples = {name: [] for name in loops}
    for _ in range(ROUNDS):  # interleaved rounds: one slow loop (a CPU clock ramp, a page fault) is one sample
        for name, (measure, fn) in loops.items():
            samples[name].append(measure(fn))
    out["samples"] = samples
    out.update({name: statistics.median(v) for name, v in samples.items()})
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(CALLS):
        sim.similarity_search(q, c, K)
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    out["profile_tottime_top25"] = buf.getvalue()
    path = write_result("similarity_op_host", out, args.tag)
    print(f"wrote {path}")
    print(f"{out['device']}: op {out['op_us_per_call']:.1f} us of host time per call "
          f"({out['op_dispatcher_us_per_call']:.1f} through torch.ops' dispatcher), "
          f"{out['op_gpu_us_per_call']:.1f} us a call in a loop by events; torch.topk(Q @ C.T): "
          f"{out['torch_us_per_call']:.1f} us host, {out['torch_gpu_us_per_call']:.1f} us by events")
    print("\n".join(out["profile_tottime_top25"].splitlines()[:40]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
