"""The dense search (MERGE=5: every key to an nq x N matrix, then the select kernel) against the fused search and
torch, on the shapes where the choice between them is made.

For each shape (fp16, d = 768, k = 10, inner product) the script times, interleaved in rounds with the core's
protocol (L2 flush, CUDA events; CUDA-graph replay for all when one is under 20 µs):

  torch       torch.topk(Q @ C.T) (cuBLAS + torch's top-k), the family's baseline
  fused       the fused default (a running top-k per block, then the merge of the splits' lists): default_config
              without N, what the op used before MERGE=5
  dense       the dense default for the shape's store bucket (default_config(n=next_pow2(N)) with MERGE=5 forced)
  dense-192   dense with 192-row tiles (at N = 50K: 2 tiles per split, one per ping-pong warpgroup)
  dense-s6    dense with 6 stages (the ring takes the score tile's shared memory)

and, for the 50K / 100 shape, each variant's two kernels alone (search, then merge or select: prepared launches).
Every variant's indices are checked against the fused ones (the same keys and tie rule: identical). The crossover
of the default (``tunelab.ops.similarity.DENSE_MAX_N``) is read from these rows. Results:
benchmarks/results/similarity_dense.json (environment fingerprint inside); a short table last. About 2 minutes on
an H200.

    python3 benchmarks/similarity_dense.py [--quick]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (current_stream, draw_search_inputs, speedup, summarize, time_rounds, warm_up_gpu,  # noqa: E402
                     write_result)

K = 10
D = 768
GRAPH_BELOW_US = 20.0
SHAPES = [(100, 50_000), (100, 100_000), (100, 200_000), (100, 1_000_000), (32, 50_000), (1, 50_000), (1, 1_000_000)]
QUICK_SHAPES = [(100, 50_000), (100, 200_000), (1, 50_000)]


class Prepared:
    """One search config over fixed GPU tensors: the two prepared launches and their buffers (``splits``: a forced
    split count, as CompiledSearch.plan takes it; None: one resident wave)."""

    def __init__(self, cfg: dict, q, c, splits: int | None = None):
        import torch

        from tunelab.ops import similarity as sim

        dev = q.device.index or 0
        nq, n = q.shape[0], c.shape[0]
        dtype = sim._dtype_name(q)
        self.config = sim.fit_config(cfg, K, dtype, sim.smem_limit(sim._arch(dev)), "ip")
        self.cs = sim.compile_search(self.config, dtype=dtype, metric="ip", arch=sim._arch(dev))
        self.plan = self.cs.plan(dev, nq, n, K, splits)
        self.ck, self.ci = self.cs.candidate_buffers(self.plan, nq, n, K, q.device)
        self.scores = torch.empty((nq, K), dtype=torch.float32, device=q.device)
        self.indices = torch.empty((nq, K), dtype=torch.int64, device=q.device)
        self.search, self.merge = self.cs.prepare(dev, q, c, K, self.ck, self.ci, self.scores, self.indices,
                                                  self.plan)

    def __call__(self):
        stream = current_stream()
        self.search(stream)
        self.merge(stream)


def storeless(prep: Prepared, q, c):
    """A prepared launch of ``prep``'s config's diagnosis build over its buffers: the key stores compiled out, so the
    search's stream without its 20 MB of keys at 50K / 100 (the keys it leaves are its block timelines)."""
    from tunelab.ops import similarity as sim

    dev = q.device.index or 0
    traced = sim.compile_search(prep.config, dtype=sim._dtype_name(q), metric="ip", arch=sim._arch(dev), trace=True)
    return traced.prepare(dev, q, c, K, prep.ck, prep.ci, prep.scores, prep.indices, prep.plan)[0]


def variants(nq: int, n: int, q, c) -> dict:
    from tunelab.ops import similarity as sim
    from tunelab.tuning.family import next_pow2

    fused = sim.default_config(nq, K, "float16", D)
    dense = dict(sim.default_config(nq, K, "float16", D, n=next_pow2(n)), MERGE=sim.MERGE_DENSE)
    out = {"fused": Prepared(fused, q, c), "dense": Prepared(dense, q, c)}
    if dense["MMA"] == 3:
        out["dense-192"] = Prepared(dict(dense, BLOCK_N=192), q, c)
        out["dense-s6"] = Prepared(dict(dense, STAGES=6), q, c)
    return out


def time_all(fns: dict, *, budget_s: float, rounds: int, graph_below_us: float = GRAPH_BELOW_US,
             unflushed: frozenset = frozenset()) -> tuple[dict, bool]:
    """Interleaved samples of every callable (name -> µs array) and whether CUDA graphs were used (when one of them
    takes under ``graph_below_us``; 0: never, every call after its own flush). The callables named in ``unflushed``
    run without the L2 flush (back to back, over what the previous call left in L2)."""
    import numpy as np

    from tunelab.timing import time_callable

    unknown = set(unflushed) - set(fns)
    if unknown:
        raise ValueError(f"time_all: unflushed names {sorted(unknown)} are not among the callables {sorted(fns)}")
    probe = {k: float(np.median(time_callable(f, warmup=2, samples=3, flush_l2=k not in unflushed)))
             for k, f in fns.items()}
    graph = min(probe.values()) < graph_below_us
    per = sum(probe.values()) * 1e-6
    n = int(max(3, min(30, budget_s / max(per, 1e-7) / rounds)))
    calls = {k: (f, {"cuda_graph": graph, "graph_launches": 10, "flush_l2": k not in unflushed})
             for k, f in fns.items()}
    return time_rounds(calls, rounds=rounds, samples=n), graph


def variant_rows(samples: dict, fns: dict, ref: str) -> dict:
    """Per variant of ``samples`` (name -> µs array; "torch" the baseline): its µs summary and, for ours, the speedup
    over torch and over the variant ``ref`` (bootstrap 95% CIs), its config and split count."""
    out = {}
    for name, s in samples.items():
        v = {"us": summarize(s)}
        if name != "torch":
            for base in ("torch", ref):
                v[f"speedup_vs_{base}"] = speedup(samples[base], s)
            v["config"] = fns[name].config
            v["splits"] = fns[name].plan["splits"]
        out[name] = v
    return out


def kernels_alone(prep: Prepared, samples: int = 60) -> dict:
    """Each of a variant's two kernels timed alone (prepared launch, L2 flushed before each)."""
    from tunelab.timing import time_callable

    return {"search_us": summarize(time_callable(prep.search, warmup=3, samples=samples)),
            "merge_us": summarize(time_callable(prep.merge, warmup=3, samples=samples))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three shapes, fewer samples")
    args = ap.parse_args()
    import torch

    from tunelab.tuning.families.similarity import torch_topk

    clock = warm_up_gpu()
    rows = []
    for nq, n in (QUICK_SHAPES if args.quick else SHAPES):
        q, c = draw_search_inputs(nq, n, D, torch.float16, seed=n + nq)
        fns = variants(nq, n, q, c)
        for f in fns.values():
            f()
        torch.cuda.synchronize()
        want = fns["fused"].indices.clone()
        agree = {k: bool(torch.equal(f.indices, want)) for k, f in fns.items()}
        fns = {"torch": torch_topk(q, c, K, "ip"), **fns}
        samples, graph = time_all(fns, budget_s=1.0 if args.quick else 2.5, rounds=5)
        row = {"nq": nq, "n": n, "d": D, "k": K, "dtype": "fp16", "timer": "cuda_graph" if graph else "events",
               "dense_matrix_bytes": nq * ((n + 3) // 4 * 4) * 4, "indices_equal_fused": agree,
               "variants": variant_rows(samples, fns, "fused")}
        if (nq, n) == (100, 50_000):
            row["kernels_alone"] = {k: kernels_alone(f) for k, f in fns.items() if k != "torch"}
        rows.append(row)
        del fns, q, c
        torch.cuda.empty_cache()
    path = write_result("similarity_dense", {"quick": args.quick, "sm_mhz_after_warmup": clock, "rows": rows})
    print(f"wrote {path}")
    print(f"{'nq':>5} {'N':>9} {'MB':>6}  " + "  ".join(f"{k:>16}" for k in ("torch", "fused", "dense", "dense-192",
                                                                             "dense-s6")))
    for r in rows:
        cells = []
        for k in ("torch", "fused", "dense", "dense-192", "dense-s6"):
            v = r["variants"].get(k)
            if v is None:
                cells.append(f"{'-':>16}")
                continue
            sp = v.get("speedup_vs_torch", {}).get("estimate")
            cells.append(f"{v['us']['median']:9.1f}" + (f" {sp:5.2f}x" if sp else " " * 7))
        ok = "" if all(r["indices_equal_fused"].values()) else "  INDICES DIFFER"
        print(f"{r['nq']:>5} {r['n']:>9} {r['dense_matrix_bytes'] / 1e6:6.1f}  " + "  ".join(cells) + ok)
    if rows and "kernels_alone" in rows[0]:
        for k, v in rows[0]["kernels_alone"].items():
            print(f"50K/100 {k:>10}: search {v['search_us']['median']:.1f} us, merge/select {v['merge_us']['median']:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
