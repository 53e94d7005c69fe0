"""Helpers shared by the benchmark scripts: result files with the environment fingerprint, summaries."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def summarize(samples_us) -> dict[str, float]:
    """Median, mean, min, p10/p90 and the bootstrap 95% CI of the median of a set of samples (µs)."""
    a = np.asarray(samples_us, dtype=np.float64)
    out = {"n": int(a.size), "median": float(np.median(a)), "mean": float(a.mean()), "min": float(a.min()),
           "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90))}
    from tunelab.stats import median_ci

    ci = median_ci(a, seed=0)
    out["ci95"] = [float(ci.low), float(ci.high)]
    return out


#: how draw_search_inputs() draws the random inputs from one generator
DRAW_ORDERS = ("corpus-first", "queries-first")


def draw_search_inputs(nq: int, n: int, d: int, dtype, order: str = "corpus-first", seed: int = 0):
    """(queries, corpus) on the GPU from one CUDA generator seeded with ``seed``. ``order``: "corpus-first" draws
    the corpus, then the queries, directly in ``dtype`` (as similarity_probe.py has always made them);
    "queries-first" draws the queries, then the corpus, in float32 and casts them. Statistically the same data;
    a different draw (benchmarks/similarity_gap.py and similarity_probe.py compare them)."""
    import torch

    if order not in DRAW_ORDERS:
        raise ValueError(f"order={order!r} is not one of {DRAW_ORDERS}")
    g = torch.Generator(device="cuda").manual_seed(seed)
    if order == "corpus-first":
        corpus = torch.randn((n, d), generator=g, device="cuda", dtype=dtype)
        queries = torch.randn((nq, d), generator=g, device="cuda", dtype=dtype)
    else:
        queries = torch.randn((nq, d), generator=g, device="cuda").to(dtype)
        corpus = torch.randn((n, d), generator=g, device="cuda").to(dtype)
    return queries, corpus


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` plus the environment fingerprint to ``benchmarks/results/<name>.json`` (or $OUT too)."""
    from tunelab.env import fingerprint
    from tunelab.jsonfile import write_json

    doc = {"benchmark": name, "environment": fingerprint(), **payload}
    path = RESULTS / f"{name}.json"
    write_json(path, doc, indent=2, default=float)
    copy_to_out(path)
    return path


def copy_to_out(path: Path) -> None:
    """Copy a written result into $OUT when it is set: device runs bring back only what lies there."""
    extra = os.environ.get("OUT")
    if extra:
        import shutil

        dest = Path(extra) / Path(path).name
        Path(extra).mkdir(parents=True, exist_ok=True)
        if not dest.exists() or not dest.samefile(path):  # a result written straight into $OUT stays as it is
            shutil.copy(path, dest)


def warm_up_gpu(seconds: float = 2.0) -> float:
    """Keep the GPU busy with large matrix products for ``seconds`` so its clocks have ramped up before the
    first timed shape (an idle H200 sits at a few hundred MHz; the first shape measured cold read 30% slow).
    Returns the SM clock (MHz) seen afterwards, or -1 without NVML."""
    import time

    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    from tunelab.env import sm_clocks
    clocks = sm_clocks()
    return float(clocks["sm_mhz"]) if clocks else -1.0
