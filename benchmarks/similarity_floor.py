"""What the L2 flush of the measurement protocol costs a kernel that reads a 77 MB corpus: the floor of the
N = 50K, nq = 100 search under that protocol, measured rather than computed.

The protocol flushes L2 before every sample by writing a buffer twice its size (cuMemsetD32Async, as triton's
do_bench zeroes one), so each sample starts with L2 full of dirty lines. A kernel that then reads more than L2
holds must first write those lines back to HBM: at N = 50K (76.8 MB of fp16 rows, d = 768) that is up to the
whole L2 (60 MB on the H200) of writes next to the 77 MB of reads, which the bytes / bandwidth floor (18 us in
ANCHORS.md) does not count. This script times, with CUDA events around each call (interleaved rounds, medians
with bootstrap CIs):

  read          a streaming read of the corpus (16-byte loads, nothing written): the floor of any search
  ours          tunelab.ops.similarity_search (the op, its resolved default config)
  fused, dense  the fused default and the dense one (MERGE=5) as prepared launches (search + merge)
  cublas        Q @ C.T alone;  torch  torch.topk(Q @ C.T) (the baseline)

after each of three preparations of L2: "write" (the protocol's flush: a memset of twice the L2), "read" (a read
of a buffer twice the L2: the same eviction, no dirty lines) and, for the read kernel, "none" (what it left).
Results: benchmarks/results/similarity_floor[_TAG].json; a table last. About 30 s on an H200.

    python3 benchmarks/similarity_floor.py [--tag h200]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (corpus_reader, current_stream, draw_search_inputs, l2_preparations, speedup,  # noqa: E402
                     summarize, time_after, warm_up_gpu, write_result)

NQ, N, D, K = 100, 50_000, 768, 10
ROUNDS, SAMPLES = 6, 15


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tag", default="", help="suffix of the result file: similarity_floor_TAG.json")
    args = ap.parse_args(argv)

    import torch

    from tunelab.ops import similarity as sim
    from tunelab.timing import l2_flush_bytes
    from tunelab.tuning.families.similarity import torch_topk

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from similarity_dense import Prepared

    clock = warm_up_gpu()
    reader = corpus_reader()
    flushes = l2_preparations(reader)

    q, c = draw_search_inputs(NQ, N, D, torch.float16, seed=1)
    read_corpus = reader(c)
    from tunelab.tuning.family import next_pow2
    fused = Prepared(sim.default_config(NQ, K, "float16", D), q, c)
    dense = Prepared(dict(sim.default_config(NQ, K, "float16", D, n=next_pow2(N)), MERGE=sim.MERGE_DENSE), q, c)
    fns = {"read": lambda: read_corpus(current_stream()), "ours": lambda: sim.similarity_search(q, c, K),
           "fused": fused, "dense": dense, "cublas": lambda: q @ c.T, "torch": torch_topk(q, c, K, "ip")}
    plan = [(f, name) for f in ("write", "read") for name in fns] + [("none", "read")]
    samples = time_after(fns, plan, flushes, rounds=ROUNDS, samples=SAMPLES)
    rows = {f"{name}/{f}": summarize(s) for (f, name), s in samples.items()}
    ratio = {}
    for f in ("write", "read"):
        for name in ("ours", "fused", "dense"):
            ratio[f"{name}/{f}"] = speedup(samples[(f, "torch")], samples[(f, name)])
    corpus_bytes = c.numel() * c.element_size()
    payload = {"nq": NQ, "n": N, "d": D, "k": K, "dtype": "fp16", "corpus_bytes": corpus_bytes,
               "l2_flush_bytes": l2_flush_bytes(), "sm_mhz_after_warmup": clock, "rounds": ROUNDS,
               "samples_per_round": SAMPLES, "us": rows, "speedup_vs_torch": ratio,
               "read_GBps": {f: corpus_bytes / rows[f"read/{f}"]["median"] / 1e3 for f in ("write", "read", "none")},
               "configs": {"fused": fused.config, "dense": dense.config}}
    path = write_result("similarity_floor", payload, args.tag)
    print(f"wrote {path}")
    print(f"{'':8}" + "".join(f"{n:>10}" for n in fns))
    for f in ("write", "read", "none"):
        print(f"{f:8}" + "".join(f"{rows[f'{n}/{f}']['median']:10.1f}" if f"{n}/{f}" in rows else f"{'-':>10}"
                                 for n in fns))
    print("speedup vs torch: " + ", ".join(f"{k} {v['estimate']:.2f}x" for k, v in ratio.items()))
    print("read GB/s: " + ", ".join(f"{k} {v:.0f}" for k, v in payload["read_GBps"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
