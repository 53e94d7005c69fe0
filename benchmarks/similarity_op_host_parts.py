"""Where the host time of one ``tunelab.ops.similarity_search`` call goes, step by step, and how much of it the
measurement protocol sees.

The op's host path (validation, the eager gate, the cached call shape (config resolution only on a miss), the
stream look-up, the candidate buffers kept between calls, two output allocations and one replay of its two launches)
runs on the CPU before its first kernel is queued. Under the
protocol (the core's timer: an L2 flush, then the call between two events) the GPU sits idle from the flush's end
until that first kernel arrives, so host time beyond the flush's own GPU time is timed as if it were the kernels'.
This script measures, on the GPU's host:

  steps     each step of the path alone: "idle", the host time of one call with the GPU idle (synchronized before
            each call, outside the timed region), and "hot", the host time per call of a burst of BURST calls back
            to back (as a loop of calls, or the timer's samples, run them: warm CPU caches; BURST is small enough
            that the launch queue never fills); medians over CALLS calls, in ROUNDS interleaved rounds. Some steps
            are the op's (validate .. workspace, launch_search / _select or graph; run_search is the op without
            its validation and eager gate), some its forms before (resolve,
            shape_key: a cached call shape skips them; empty_keys: kept between calls now; the two launches, made
            one by one until a pointer set's second use) or another form (new_empty)
  protocol  the op, its own two prepared launches (the launches the op's cache holds for these inputs) and their
            LaunchGraph (one replay, as the op makes them from a pointer set's second use) under the core's timer
            after the protocol's flush, and the op and launches again with a GPU sleep of SLEEP_US queued after the
            flush (the timer's untimed ``prepare``), which gives the host time to queue the op's launches before
            the GPU reaches them: if the op is slower than its launches only without the sleep, its host path is
            what the protocol sees
  flush     the GPU time of the flush itself (a write of tunelab.timing.l2_flush_bytes())

Results: benchmarks/results/similarity_op_host_parts[_TAG].json; a table last. About 20 s on an H200.

    python3 benchmarks/similarity_op_host_parts.py [--nq 100 --n 50000] [--tag h200]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (current_stream, draw_search_inputs, int_in, speedup, summarize, time_rounds,  # noqa: E402
                     warm_up_gpu, write_result)

D, K = 768, 10
CALLS, ROUNDS, BURST = 400, 5, 20
SLEEP_US = 150.0
PROTOCOL_ROUNDS, PROTOCOL_SAMPLES = 6, 20


def host_us(fn, calls: int) -> list[float]:
    """The host time of ``calls`` single calls of ``fn``, each with the GPU idle (synchronized before, untimed)."""
    import torch

    out = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e3)
    torch.cuda.synchronize()
    return out


def burst_us(fn, calls: int) -> list[float]:
    """The host time per call of bursts of BURST back-to-back calls of ``fn`` (synchronized before each burst)."""
    import torch

    out = []
    for _ in range(max(1, calls // BURST)):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(BURST):
            fn()
        out.append((time.perf_counter_ns() - t0) / 1e3 / BURST)
    torch.cuda.synchronize()
    return out


def steps_of(q, c, k: int) -> dict:
    """Step name -> a callable doing that step of the op's path for (q, c, k) alone (its caches warm)."""
    import torch

    from tunelab import _core
    from tunelab.ops import eager as _eager
    from tunelab.ops import similarity as sim
    from tunelab.ops import workspace
    from tunelab.ops.loading import current_stream as op_stream  # the op's own look-up

    nq, n = q.shape[0], c.shape[0]
    dev, dt = q.get_device(), sim._dtype_name(q)
    cfg, _ = sim.resolve_config(dev, nq=nq, n=n, d=q.shape[1], k=k, dtype=dt, metric="ip")
    sim.similarity_search(q, c, k)  # fills the op's caches for these inputs
    shape_key = next(key for key in sim._SEARCH_SHAPES if key[0] == dev and key[5:9] == (nq, n, q.shape[1], k))
    compiled, plan, layout, nbytes = sim._SEARCH_SHAPES[shape_key]
    launches = next(v for key, v in sim._SEARCH_LAUNCHES.items() if key[0] == shape_key).launches
    keys, _ = compiled.candidate_buffers(plan, nq, n, k, q.device)
    stream = op_stream(q.device)
    graph = _core.LaunchGraph(list(launches))
    return {
        "op": lambda: sim.similarity_search(q, c, k),
        "validate": lambda: sim.validate_search_inputs(q, c, k, "ip"),
        "eager_gate": lambda: _eager.direct_call_ok(q, c),
        "resolve": lambda: sim.resolve_config(dev, nq=nq, n=n, d=q.shape[1], k=k, dtype=dt, metric="ip"),
        "run_search": lambda: sim._run_search(q, c, k, "ip", "", 0.85, 0, 0, 2),
        "search_gpu": lambda: sim._search_gpu(q, c, k, "ip", cfg, False, dev=dev, dt=dt),
        "empty_keys": lambda: torch.empty(tuple(keys.shape), dtype=torch.float32, device=q.device),
        "empty_scores": lambda: torch.empty((nq, k), dtype=torch.float32, device=q.device),
        "new_empty": lambda: q.new_empty((nq, k), dtype=torch.float32),
        "stream": lambda: op_stream(dev),
        "capturing": lambda: _core.stream_is_capturing(stream),
        "workspace": lambda: workspace.reuse(dev, stream, layout, nbytes, lambda: (keys, None)),
        "launch_search": lambda: launches[0](stream),
        "launch_select": lambda: launches[1](stream),
        "graph": lambda: graph(stream),
        "shape_key": lambda: tuple(cfg.items()),
    }, launches, graph


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nq", type=int_in(1, 1 << 16, "queries"), default=100)
    ap.add_argument("--n", type=int_in(16, 1 << 26, "corpus rows"), default=50_000)
    ap.add_argument("--tag", default="", help="suffix of the result file's name")
    args = ap.parse_args()

    import torch

    from tunelab.ops import eager
    from tunelab.timing import l2_flush_bytes

    clock = warm_up_gpu()
    q, c = draw_search_inputs(args.nq, args.n, D, torch.float16, seed=3)
    steps, launches, graph = steps_of(q, c, K)

    samples = {(mode, name): [] for mode in ("idle", "hot") for name in steps}
    for _ in range(ROUNDS):  # interleaved, so that a slow stretch of the host hits every step alike
        for name, fn in steps.items():
            for _ in range(10):
                fn()
            samples[("idle", name)].extend(host_us(fn, CALLS // ROUNDS))
            samples[("hot", name)].extend(burst_us(fn, CALLS // ROUNDS))
    host = {mode: {name: {"median": statistics.median(v), "p10": sorted(v)[len(v) // 10],
                          "p90": sorted(v)[9 * len(v) // 10]}
                   for (m, name), v in samples.items() if m == mode} for mode in ("idle", "hot")}

    def pair():  # the op's own launches, on torch's current stream, as the op launches them
        stream = current_stream()
        for launch in launches:
            launch(stream)

    cycles = int(SLEEP_US * (clock if clock > 0 else 1980.0))  # SM clock in MHz = cycles per us

    def sleep():
        torch.cuda._sleep(cycles)

    flush_buf = torch.empty(l2_flush_bytes() // 4, dtype=torch.int32, device="cuda")
    calls = {"op": (steps["op"], {"flush_l2": True}), "launches": (pair, {"flush_l2": True}),
             "op+sleep": (steps["op"], {"flush_l2": True, "prepare": sleep}),
             "launches+sleep": (pair, {"flush_l2": True, "prepare": sleep}),
             "graph": (steps["graph"], {"flush_l2": True}),
             "flush": (lambda: flush_buf.fill_(0x5a5a5a5a), {"flush_l2": False})}
    timed = time_rounds(calls, rounds=PROTOCOL_ROUNDS, samples=PROTOCOL_SAMPLES)
    protocol = {name: summarize(s) for name, s in timed.items()}
    # whether the op's calls here skip torch's custom-op dispatcher, as plain eager calls should: the whole-op burst
    # read 37.7 us at bd0f69c where the op's own steps (and the A/B's processes) add up to ~21-25; at 214efa9, on
    # another host, they were skipped and the burst read 27.6 (results/similarity_op_host_parts_next_h200.json)
    payload = {"eager_direct_call": bool(eager.direct_call_ok(q, c)),
               "nq": args.nq, "n": args.n, "d": D, "k": K, "calls": CALLS, "rounds": ROUNDS,
               "sm_mhz_after_warmup": clock, "sleep_us": SLEEP_US, "host_us": host,
               "host_samples_us": {f"{m}/{name}": v for (m, name), v in samples.items()},
               "protocol_us": protocol,
               "op_vs_launches": speedup(timed["launches"], timed["op"]),
               "op_vs_launches_after_sleep": speedup(timed["launches+sleep"], timed["op+sleep"])}
    path = write_result("similarity_op_host_parts", payload, args.tag)
    print(f"wrote {path}")
    print(f"eager calls skip the custom-op dispatcher here: {payload['eager_direct_call']}")
    print(f"host time of one call's steps at {args.nq} x {args.n} (median, p10-p90, us):  idle | hot")
    for name in steps:
        i, h = host["idle"][name], host["hot"][name]
        print(f"  {name:14} {i['median']:7.2f} ({i['p10']:.2f}-{i['p90']:.2f}) | {h['median']:7.2f} "
              f"({h['p10']:.2f}-{h['p90']:.2f})")
    print("under the core's timer (median us): " + ", ".join(f"{k} {v['median']:.1f}" for k, v in protocol.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
