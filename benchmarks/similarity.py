"""Similarity search and Gram matrices on the GPU (issue 5's benchmark).

Sections (all in one run, results in benchmarks/results/similarity.json with the environment fingerprint):

  ceilings   device-to-device copy bandwidth (read + write bytes / time), fp16 and fp32 (no TF32) matmul rates
             (8192^3 through torch), pinned and pageable host-to-device bandwidth (1 GiB copies).
  search     N in {50K, 1M, 10M}, d = 768, nq in {1, 100, 1024}, k = 10, fp16 and fp32, inner product: our
             search (its config from the tuned store, else the documented default; its two launches replayed as
             one graph, as the op replays them) against torch.topk(Q @ C.T)
             (cuBLAS + torch's top-k). Both are timed with tunelab.timing.time_callable (L2 flush, CUDA events;
             CUDA-graph replay for both when either is under 20 µs), interleaved in rounds (A B A B ...). Reported:
             median µs with 95% BCa CIs, the speedup with its CI, corpus vectors per second, and the fraction of
             the floor = max(corpus bytes / copy bandwidth, 2 nq N d / matmul rate) reached. fp32 at N = 10M,
             nq = 1024 is skipped: torch's 41 GB score matrix and ~0.5 s per call would not fit the time budget.
             Correctness: every case up to N = 1M against a float64 reference (tie-aware rule of the tuner's
             numerics gate); at 10M the index agreement with torch.
  ooc        out-of-core: an fp16 corpus 1.5x a forced GPU memory budget (4 GiB; --quick 1 GiB) streamed from host
             memory, nq = 100; throughput against the measured pinned host-to-device bandwidth (goal >= 80%);
             checked bit-identical to the in-memory search. Timed by wall clock around call + synchronize (the
             pipeline spans several streams and host copies, which one stream's events would not cover).
  ablation   fused top-k vs our own GEMM writing the score matrix then our merge kernel selecting the top k;
             pinned vs pageable host memory; one stream vs the two/three-stream pipeline; automatic vs fixed
             (256 MiB) chunks.
  sustained  the pinned streamed search repeated for 60 s (--quick 10 s) while NVML samples GPU utilization,
             power, SM clock, temperature and clock-throttle reasons every 0.25 s.
  gram       N in {2K, 8K, 20K} complex64 states of dimension 256: ours (symmetric half + mirror: the full matrix;
             triangle only; the full product) against torch.matmul(X, X^H).abs().square(); the exponent of a
             log-log fit of time vs N (quadratic: 2).

Prints a short table last. About 4-5 minutes on an H200; ``--quick`` (N <= 1M, nq in {1, 100}, fp16, smaller
out-of-core corpus, 10 s sustained, Gram up to 8K) about 1 minute.
``--readme-table RESULT.json`` prints the README's search table of a run's result file (no GPU).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import current_stream, speedup, summarize, write_result  # noqa: E402

GRAPH_BELOW_US = 20.0
K = 10
D = 768


def _torch():
    import torch

    return torch


def sync():
    _torch().cuda.synchronize()


def time_pair(fn_a, fn_b, *, budget_s: float = 1.5, rounds: int = 5):
    """Interleaved timing of two zero-argument callables with the core's protocol: (samples_a, samples_b, graph).

    A quick probe sizes the sample count to the budget; when either side is under 20 µs both are timed with
    CUDA-graph replay so launch overhead does not rank them.
    """
    import numpy as np

    from tunelab.timing import time_callable

    probe_a = float(np.median(time_callable(fn_a, warmup=2, samples=3)))
    probe_b = float(np.median(time_callable(fn_b, warmup=2, samples=3)))
    graph = min(probe_a, probe_b) < GRAPH_BELOW_US
    per = max(probe_a, probe_b) * 1e-6
    n = int(max(2, min(20, budget_s / max(per, 1e-7) / (2 * rounds))))
    a, b = [], []
    for _ in range(rounds):
        a.extend(time_callable(fn_a, warmup=1, samples=n, cuda_graph=graph, graph_launches=10))
        b.extend(time_callable(fn_b, warmup=1, samples=n, cuda_graph=graph, graph_launches=10))
    return np.asarray(a), np.asarray(b), graph


# ------------------------------------------------------------------------------------------------ ceilings
def measure_ceilings() -> dict:
    import numpy as np

    from tunelab.timing import time_callable

    torch = _torch()
    out = {}
    n = 1 << 30  # 1 GiB
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = float(np.median(time_callable(lambda: b.copy_(a), warmup=3, samples=20)))
    out["copy_bandwidth_Bps"] = 2 * n / (t * 1e-6)  # read + write
    a = b = None  # free before the matmuls
    for name, dt, tf32 in (("fp16", torch.float16, False), ("fp32", torch.float32, False)):
        x = torch.randn(8192, 8192, device="cuda").to(dt)
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        t = float(np.median(time_callable(lambda: x @ x, warmup=3, samples=10)))
        torch.backends.cuda.matmul.allow_tf32 = old
        out[f"matmul_{name}_flops"] = 2 * 8192 ** 3 / (t * 1e-6)
        x = None
    host = torch.empty(n, dtype=torch.uint8).pin_memory()
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    ts = []
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        dev.copy_(host, non_blocking=True)
        sync()
        ts.append(time.perf_counter() - t0)
    out["h2d_pinned_Bps"] = n / float(np.median(ts))
    pageable = torch.empty(n // 4, dtype=torch.uint8)
    pageable.fill_(1)
    ts = []
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        dev[: n // 4].copy_(pageable)
        sync()
        ts.append(time.perf_counter() - t0)
    out["h2d_pageable_Bps"] = (n // 4) / float(np.median(ts))
    del host, dev, pageable
    torch.cuda.empty_cache()
    return out


# ------------------------------------------------------------------------------------------------ search
def make_corpus(n: int, d: int, dtype, seed: int):
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    c = torch.empty((n, d), dtype=dtype, device="cuda")
    step = 1 << 20
    for r0 in range(0, n, step):
        c[r0:r0 + step] = torch.randn((min(step, n - r0), d), generator=g, device="cuda").to(dtype)
    return c


class OurSearch:
    """Our search over fixed GPU tensors as a zero-argument callable (workspace allocated once): its two launches
    replayed as one LaunchGraph, as the op replays them from a pointer set's second use."""

    def __init__(self, q, c, k: int, metric: str = "ip"):
        torch = _torch()
        from tunelab import _core
        from tunelab.ops import similarity as sim

        dev = q.device.index or 0
        dt = str(q.dtype).replace("torch.", "")
        nq, d = q.shape
        self.config, self.source = sim.resolve_config(dev, nq=nq, n=c.shape[0], d=d, k=k, dtype=dt, metric=metric)
        self.cs = sim.compile_search(self.config, dtype=dt, metric=metric, arch=sim._arch(dev))
        self.plan = self.cs.plan(dev, nq, c.shape[0], k)
        ck, ci = self.cs.candidate_buffers(self.plan, nq, c.shape[0], k, q.device)
        self.scores = torch.empty((nq, k), dtype=torch.float32, device=q.device)
        self.indices = torch.empty((nq, k), dtype=torch.int64, device=q.device)
        self.p1, self.p2 = self.cs.prepare(dev, q, c, k, ck, ci, self.scores, self.indices, self.plan)
        self.graph = _core.LaunchGraph([self.p1, self.p2])
        self._keep = (ck, ci)

    def __call__(self):
        self.graph(current_stream())


def precompile(jobs):
    """Compile the configs the sweep will use, in parallel (NVRTC releases the GIL)."""
    from tunelab.ops import similarity as sim

    def one(job):
        nq, dt = job
        cfg = sim.default_config(nq, K, dt, D)
        return sim.compile_search(cfg, dtype=dt, metric="ip")

    with cf.ThreadPoolExecutor(8) as pool:
        list(pool.map(one, jobs))


def search_case(q, c, ceil: dict, dt_name: str, check: bool) -> dict:
    import numpy as np

    torch = _torch()
    from tunelab.tuning.families.similarity import check_topk, torch_topk

    nq, d = q.shape
    n = c.shape[0]
    ours = OurSearch(q, c, K)
    base = torch_topk(q, c, K, "ip")
    ours()
    ref = base()
    sync()
    res = {"nq": nq, "n": n, "d": d, "k": K, "dtype": dt_name, "config": ours.config, "config_source": ours.source,
           "splits": ours.plan["splits"]}
    if check:
        rep = check_topk(ours.scores, ours.indices, q, c, K, "ip")
        res["numerics"] = {"ok": rep.ok, "reason": rep.reason, **rep.errors}
    res["index_agreement_with_torch"] = float((ours.indices == ref[1]).float().mean())
    del ref
    a, b, graph = time_pair(ours, base)
    eb = c.element_size()
    floor_bytes = n * d * eb / ceil["copy_bandwidth_Bps"] * 1e6
    rate = ceil["matmul_fp16_flops"] if dt_name == "fp16" else ceil["matmul_fp32_flops"]
    floor_flops = 2.0 * nq * n * d / rate * 1e6
    floor = max(floor_bytes, floor_flops)
    mo, mb = float(np.median(a)), float(np.median(b))
    res.update({
        "timer": "cuda_graph" if graph else "events",
        "ours_us": summarize(a), "torch_us": summarize(b), "speedup": speedup(b, a),
        "floor_us": floor, "floor_kind": "hbm" if floor_bytes >= floor_flops else "matmul",
        "hbm_floor_us": floor_bytes, "matmul_floor_us": floor_flops,
        "ours_fraction_of_floor": floor / mo, "torch_fraction_of_floor": floor / mb,
        "ours_vectors_per_s": n / (mo * 1e-6), "torch_vectors_per_s": n / (mb * 1e-6),
        "ours_pairs_per_s": n * nq / (mo * 1e-6),
    })
    del ours, base
    torch.cuda.empty_cache()
    return res


def run_search(ceil: dict, quick: bool, log) -> list[dict]:
    torch = _torch()
    out = []
    dtypes = [("fp16", torch.float16)] if quick else [("fp16", torch.float16), ("fp32", torch.float32)]
    ns = [50_000, 1_000_000] if quick else [50_000, 1_000_000, 10_000_000]
    nqs = [1, 100] if quick else [1, 100, 1024]
    precompile([(nq, "float16" if name == "fp16" else "float32") for name, _ in dtypes for nq in nqs])
    for name, dt in dtypes:
        for n in ns:
            c = make_corpus(n, D, dt, seed=n)
            for nq in nqs:
                if name == "fp32" and n >= 10_000_000 and nq >= 1024:
                    out.append({"nq": nq, "n": n, "dtype": name, "skipped": "torch's fp32 score matrix (41 GB) and "
                                                                            "~0.5 s per call exceed the budget"})
                    continue
                g = torch.Generator(device="cuda").manual_seed(nq)
                q = torch.randn((nq, D), generator=g, device="cuda").to(dt)
                t0 = time.perf_counter()
                res = search_case(q, c, ceil, name, check=n <= 1_000_000)
                res["wall_s"] = time.perf_counter() - t0
                log(f"search {name} N={n:>8} nq={nq:>4}: ours {res['ours_us']['median']:10.1f} us, torch "
                    f"{res['torch_us']['median']:10.1f} us, x{res['speedup']['estimate']:.2f}, "
                    f"{100 * res['ours_fraction_of_floor']:.0f}% of {res['floor_kind']} floor")
                out.append(res)
            del c
            torch.cuda.empty_cache()
    return out


# ------------------------------------------------------------------------------------------------ out-of-core
def wall(fn, reps: int = 3) -> float:
    import numpy as np

    ts = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def run_out_of_core(ceil: dict, quick: bool, sustain_s: float, log) -> dict:
    torch = _torch()
    from tunelab.ops import similarity as sim
    from tunelab.ops import streaming

    budget = (1 if quick else 4) << 30
    row = D * 2
    n = int(1.5 * budget / row)
    c_gpu = make_corpus(n, D, torch.float16, seed=7)
    q = torch.randn((100, D), device="cuda").to(torch.float16)
    want = sim.similarity_search(q, c_gpu, K)
    pageable = c_gpu.cpu()
    del c_gpu
    torch.cuda.empty_cache()
    pinned = pageable.pin_memory()
    bytes_ = n * row
    res = {"corpus_bytes": bytes_, "budget_bytes": budget, "n": n, "nq": 100, "d": D, "k": K}

    def run(host, **kw):
        stats = {}
        out = streaming.search_streamed(q, host, K, memory_budget=budget, stats=stats, **kw)
        return out, stats

    variants = {
        "pinned_pipeline": dict(host=pinned, streams=2),
        "pinned_3_streams": dict(host=pinned, streams=3),
        "pinned_one_stream": dict(host=pinned, streams=1),
        "pinned_fixed_256MiB_chunks": dict(host=pinned, streams=2, chunk_rows=(256 << 20) // row),
        "pageable_pipeline": dict(host=pageable, streams=2),
    }
    for name, kw in variants.items():
        host = kw.pop("host")
        (got, stats) = run(host, **kw)
        sync()
        same = bool(torch.equal(got[1], want[1]) and torch.equal(got[0], want[0]))
        t = wall(lambda: run(host, **kw), reps=2 if "pageable" in name else 3)
        res[name] = {"seconds": t, "GBps": bytes_ / t / 1e9,
                     "fraction_of_pinned_h2d": bytes_ / t / ceil["h2d_pinned_Bps"],
                     "identical_to_in_memory": same, "chunks": stats["num_chunks"], "chunk_rows": stats["chunk_rows"],
                     "streams": stats["streams"]}
        log(f"out-of-core {name:28s}: {bytes_ / t / 1e9:6.1f} GB/s ({100 * res[name]['fraction_of_pinned_h2d']:.0f}% "
            f"of pinned H2D), {stats['num_chunks']} chunks, identical={same}")
    res["sustained"] = sustained(lambda: run(pinned, streams=2), sustain_s, bytes_)
    log(f"sustained {sustain_s:.0f} s: {res['sustained']['GBps']:.1f} GB/s, util mean "
        f"{res['sustained'].get('gpu_util_mean', float('nan')):.0f}%, power mean "
        f"{res['sustained'].get('power_w_mean', float('nan')):.0f} W, "
        f"throttle {res['sustained'].get('throttle_reasons')}")
    pinned = pageable = None  # the sustained closure is done with them
    sim.release_memory()
    return res


_THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                  0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                  0x100: "display_clock"}


def sustained(fn, seconds: float, bytes_per_call: int) -> dict:
    """Repeat ``fn`` for ``seconds`` while NVML samples utilization, power, clocks and throttle reasons."""
    import numpy as np

    samples = []
    stop = threading.Event()
    nvml = None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(_torch().cuda.current_device())
        nvml = pynvml
    except Exception as exc:  # noqa: BLE001 - no NVML: run anyway, report why
        nvml_error = f"{type(exc).__name__}: {exc}"

    def sampler():
        while not stop.is_set():
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                try:
                    reasons = int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
                except Exception:  # noqa: BLE001 - older NVML name
                    reasons = int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
                samples.append({"t": time.perf_counter(), "gpu_util": util.gpu, "mem_util": util.memory,
                                "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                                "sm_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
                                "temp_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
                                "reasons": reasons})
            except Exception:  # noqa: BLE001
                pass
            stop.wait(0.25)

    th = threading.Thread(target=sampler, daemon=True) if nvml is not None else None
    if th:
        th.start()
    calls = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        sync()
        calls += 1
    dt = time.perf_counter() - t0
    stop.set()
    if th:
        th.join()
    out = {"seconds": dt, "calls": calls, "GBps": calls * bytes_per_call / dt / 1e9}
    if nvml is None:
        out["nvml"] = f"unavailable: {nvml_error}"
        return out
    if samples:
        for key in ("gpu_util", "mem_util", "power_w", "sm_mhz", "temp_c"):
            v = np.array([s[key] for s in samples], dtype=float)
            out[f"{key}_mean"], out[f"{key}_min"], out[f"{key}_max"] = float(v.mean()), float(v.min()), float(v.max())
        union = 0
        for s in samples:
            union |= s["reasons"]
        out["throttle_reasons"] = [name for bit, name in _THROTTLE_BITS.items() if union & bit] or ["none"]
        out["throttle_bits_union"] = union
        out["nvml_samples"] = len(samples)
    return out


# ------------------------------------------------------------------------------------------------ ablation
def run_fused_vs_unfused(ceil: dict, quick: bool, log) -> list[dict]:
    import numpy as np

    torch = _torch()
    from tunelab.ops import similarity as sim

    out = []
    for n in ([1_000_000] if quick else [1_000_000, 10_000_000]):
        c = make_corpus(n, D, torch.float16, seed=3)
        q = torch.randn((100, D), device="cuda").to(torch.float16)
        fused = OurSearch(q, c, K)
        ws = {}
        unfused = lambda: sim.search_unfused(q, c, K, workspace=ws)  # noqa: E731
        fused()
        s_u, i_u = unfused()
        sync()
        agree = float((i_u == fused.indices).float().mean())
        a, b, graph = time_pair(fused, unfused)
        res = {"n": n, "nq": 100, "fused_us": summarize(a), "unfused_us": summarize(b),
               "fused_speedup_over_unfused": speedup(b, a), "index_agreement": agree,
               "score_matrix_bytes": 100 * n * 4}
        log(f"ablation fused vs GEMM+top-k N={n}: fused {np.median(a):.1f} us, unfused {np.median(b):.1f} us "
            f"(x{res['fused_speedup_over_unfused']['estimate']:.2f}), agreement {agree:.4f}")
        out.append(res)
        c = fused = ws = unfused = None
        torch.cuda.empty_cache()
    return out


# ------------------------------------------------------------------------------------------------ Gram
def run_gram(quick: bool, log) -> dict:
    import numpy as np

    torch = _torch()
    from tunelab.ops import similarity as sim
    from tunelab.tuning.families.gram import torch_gram

    ns = [2048, 8192] if quick else [2048, 8192, 20480]
    dim = 256
    rows = []
    for n in ns:
        g = torch.Generator(device="cuda").manual_seed(n)
        x = torch.randn((n, dim), generator=g, device="cuda", dtype=torch.complex64)
        out_full = torch.empty((n, n), device="cuda")
        out_tri = torch.empty((n, n), device="cuda")
        mirrored = lambda: sim.gram(x, mirror=True, out=out_full)  # noqa: E731
        tri = lambda: sim.gram(x, out=out_tri)  # noqa: E731
        full = lambda: sim.gram(x, symmetric=False, out=out_full)  # noqa: E731
        base = torch_gram(x)
        mirrored()
        ref_rows = torch.arange(0, n, max(1, n // 64), device="cuda")
        xd = x.to(torch.complex128)
        ref = (xd[ref_rows].conj() @ xd.T).abs() ** 2
        theirs = base()
        sync()
        err_ours = float((out_full[ref_rows].double() - ref).abs().max())
        err_torch = float((theirs[ref_rows].double() - ref).abs().max())
        del theirs, xd, ref
        a, b, _ = time_pair(mirrored, base)
        t_tri = time_pair(tri, full, rounds=3)
        flops = 8.0 * n * n * dim  # useful real flops of X X^H (4 real multiply-adds per complex one)
        row = {"n": n, "dim": dim, "ours_mirrored_us": summarize(a), "torch_us": summarize(b),
               "speedup": speedup(b, a), "ours_triangle_only_us": summarize(t_tri[0]),
               "ours_full_product_us": summarize(t_tri[1]),
               "ours_tflops_equiv": flops / (np.median(a) * 1e-6) / 1e12,
               "torch_tflops": flops / (np.median(b) * 1e-6) / 1e12,
               "max_abs_err_ours": err_ours, "max_abs_err_torch": err_torch}
        log(f"gram n={n:>6}: ours {np.median(a):9.1f} us (triangle {np.median(t_tri[0]):9.1f}), torch "
            f"{np.median(b):9.1f} us, x{row['speedup']['estimate']:.2f}; err {err_ours:.3g} vs torch {err_torch:.3g}")
        rows.append(row)
        x = out_full = out_tri = base = mirrored = tri = full = None
        torch.cuda.empty_cache()
    lx = np.log([r["n"] for r in rows])
    fit = {}
    for key in ("ours_mirrored_us", "ours_triangle_only_us", "torch_us"):
        ly = np.log([r[key]["median"] for r in rows])
        fit[key] = float(np.polyfit(lx, ly, 1)[0])
    return {"rows": rows, "loglog_exponent": fit}


# ------------------------------------------------------------------------------------------------ main
def goals(search: list[dict], ooc: dict) -> dict:
    def find(n, nq, dt="fp16"):
        for r in search:
            if r.get("n") == n and r.get("nq") == nq and r.get("dtype") == dt and "skipped" not in r:
                return r
        return None

    out = {}
    r = find(50_000, 100)
    if r:
        out["N50K_nq100_speedup_ge_4x"] = {"value": r["speedup"]["estimate"], "ci95": r["speedup"]["ci95"],
                                           "met": r["speedup"]["ci95"][0] >= 4}
    r = find(10_000_000, 100)
    if r:
        v = r["ours_us"]["median"] / r["hbm_floor_us"]
        out["N10M_nq100_within_1.3x_of_bw_floor"] = {"value": v, "met": v <= 1.3}
    r = find(10_000_000, 1024)
    if r:
        out["N10M_nq1024_speedup_ge_3x"] = {"value": r["speedup"]["estimate"], "ci95": r["speedup"]["ci95"],
                                            "met": r["speedup"]["ci95"][0] >= 3}
    for n in (1_000_000, 10_000_000):
        r = find(n, 1)
        if r:
            v = r["hbm_floor_us"] / r["ours_us"]["median"]
            out[f"N{n // 1_000_000}M_nq1_ge_95pct_of_bw_floor"] = {"value": v, "met": v >= 0.95}
    if ooc and "pinned_pipeline" in ooc:
        v = ooc["pinned_pipeline"]["fraction_of_pinned_h2d"]
        out["out_of_core_ge_80pct_of_pinned_h2d"] = {"value": v, "met": v >= 0.8}
    return out


def readme_table(search: list[dict]) -> str:
    """The README's table of a run's searches (Markdown; skipped cases left out): ``python3 benchmarks/similarity.py
    --readme-table benchmarks/results/similarity.json`` prints it, and a CPU test checks the README holds it."""
    def rows(n: int) -> str:
        return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}K"

    def duration(us: float) -> str:
        return f"{us:.1f} µs" if us < 1000 else f"{us / 1000:.2f} ms"

    lines = ["| dtype | N | nq | ours | torch | speedup [95% CI] | of the floor |", "|---|---|---|---|---|---|---|"]
    for r in search:
        if "skipped" in r:
            continue
        sp = r["speedup"]
        floor = "HBM" if r["floor_kind"] == "hbm" else r["floor_kind"]
        lines.append(f"| {r['dtype']} | {rows(r['n'])} | {r['nq']} | {duration(r['ours_us']['median'])} | "
                     f"{duration(r['torch_us']['median'])} | {sp['estimate']:.2f}x [{sp['ci95'][0]:.2f}, "
                     f"{sp['ci95'][1]:.2f}] | {100 * r['ours_fraction_of_floor']:.0f}% ({floor}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a 1-minute subset")
    ap.add_argument("--sustain-s", type=float, default=None, help="seconds of the sustained run (default 60; quick 10)")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: search,ooc,ablation,gram")
    ap.add_argument("--readme-table", metavar="RESULT.json", type=Path,
                    help="print the README's search table of an earlier run's result file and stop (no GPU)")
    args = ap.parse_args(argv)
    if args.readme_table is not None:
        if not args.readme_table.is_file():
            ap.error(f"--readme-table {args.readme_table}: no such file; pass a result of this script, e.g. "
                     "benchmarks/results/similarity.json")
        print(readme_table(json.loads(args.readme_table.read_text())["search"]))
        return 0
    torch = _torch()
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs a GPU")
        return 1
    skip = set(filter(None, args.skip.split(",")))
    sustain_s = args.sustain_s if args.sustain_s is not None else (10.0 if args.quick else 60.0)
    t_start = time.perf_counter()
    lines = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    torch.cuda.init()
    ceil = measure_ceilings()
    log(f"ceilings: copy {ceil['copy_bandwidth_Bps'] / 1e12:.2f} TB/s, "
        f"fp16 matmul {ceil['matmul_fp16_flops'] / 1e12:.0f} "
        f"TFLOP/s, fp32 {ceil['matmul_fp32_flops'] / 1e12:.1f} TFLOP/s, H2D pinned "
        f"{ceil['h2d_pinned_Bps'] / 1e9:.1f} GB/s, pageable {ceil['h2d_pageable_Bps'] / 1e9:.1f} GB/s")
    search = run_search(ceil, args.quick, log) if "search" not in skip else []
    ooc = run_out_of_core(ceil, args.quick, sustain_s, log) if "ooc" not in skip else {}
    ablation = {"fused_vs_unfused": run_fused_vs_unfused(ceil, args.quick, log)} if "ablation" not in skip else {}
    if ooc:
        base = ooc["pinned_pipeline"]["seconds"]
        ablation["streaming"] = {
            "pinned_vs_pageable_speedup": ooc["pageable_pipeline"]["seconds"] / base,
            "pipeline_vs_one_stream_speedup": ooc["pinned_one_stream"]["seconds"] / base,
            "three_vs_two_streams_speedup": base / ooc["pinned_3_streams"]["seconds"],
            "auto_vs_fixed_256MiB_chunks_speedup": ooc["pinned_fixed_256MiB_chunks"]["seconds"] / base,
        }
    gram = run_gram(args.quick, log) if "gram" not in skip else {}
    summary = goals(search, ooc)
    payload = {"quick": args.quick, "ceilings": ceil, "search": search, "out_of_core": ooc, "ablation": ablation,
               "gram": gram, "goals": summary, "wall_s": time.perf_counter() - t_start}
    # a partial run (--skip) gets a file of its own and never overwrites the full result
    ran = [s for s in ("search", "ooc", "ablation", "gram") if s not in skip]
    name = "similarity" + ("_quick" if args.quick else "") + (f"_only_{'_'.join(ran)}" if skip else "")
    path = write_result(name, payload)

    # ---- the short table, last
    print("\n=== similarity search (fp16 unless noted, d=768, k=10) ===")
    print(f"{'dtype':5} {'N':>9} {'nq':>5} {'ours us':>10} {'torch us':>10} {'speedup':>8} {'floor%':>7} {'Mvec/s':>9}")
    for r in search:
        if "skipped" in r:
            print(f"{r['dtype']:5} {r['n']:>9} {r['nq']:>5}  skipped: {r['skipped']}")
            continue
        print(f"{r['dtype']:5} {r['n']:>9} {r['nq']:>5} {r['ours_us']['median']:>10.1f} "
              f"{r['torch_us']['median']:>10.1f} "
              f"{r['speedup']['estimate']:>8.2f} {100 * r['ours_fraction_of_floor']:>6.0f}% "
              f"{r['ours_vectors_per_s'] / 1e6:>9.0f}")
    if ooc:
        print(f"out-of-core: {ooc['pinned_pipeline']['GBps']:.1f} GB/s = "
              f"{100 * ooc['pinned_pipeline']['fraction_of_pinned_h2d']:.0f}% of pinned H2D; sustained "
              f"{ooc['sustained']['GBps']:.1f} GB/s, throttle {ooc['sustained'].get('throttle_reasons')}")
    if gram:
        for r in gram["rows"]:
            print(f"gram n={r['n']:>6}: ours {r['ours_mirrored_us']['median']:>9.1f} us, "
                  f"torch {r['torch_us']['median']:>9.1f} us, x{r['speedup']['estimate']:.2f}")
        print(f"gram log-log exponents: {gram['loglog_exponent']}")
    for name, g in summary.items():
        print(f"goal {name}: {'MET' if g['met'] else 'not met'} ({g['value']:.3g})")
    print(f"results: {path} ({payload['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
