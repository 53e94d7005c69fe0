"""What the second kernel after a search costs at 50K / 100 (fp16, d = 768, k = 10, inner product), whatever it does:
the search, or a stand-in for it, followed by kernels that do almost nothing, on one GPU.

Every arm is timed interleaved in rounds with the core's protocol (similarity_dense.time_all: an L2 flush by a
memset before every call, CUDA events; no CUDA graphs):

  read              a streaming read of the corpus (_common.corpus_reader): the floor of any search
  read+nop          the read, then ``nop`` (one 32-thread block that writes one word), a plain launch
  read+nop_pdl      the same nop as a programmatic launch (sm_90) that waits for the read (griddepcontrol.wait)
  nostores          the dense default's diagnosis build (its key stores compiled out): the search's stream
  nostores+nop      ... then the plain nop
  nostores+nop_pdl  ... then the programmatic nop, launched as the op launches its select
  nostores+nop_wide ... then a programmatic nop of the select's shape (nq blocks of 1024 threads)
  nostores+nop_wide_smem  the same nop with the select's dynamic shared memory (allocated, unused)
  nostores+nop_warp_smem  a programmatic nop of the filtered select's shape (nq blocks of 32 threads) and shared
                    memory
  nostores+select_k ... then the select kernel launched as in the pair, over the first k keys of each row (the
                    keys it reads are the diagnosis build's stamps): a select with no work
  search, pair      the dense default's search alone, and search then select (the op's pair)
  warps, warps_pair MERGE=7's search alone, and search then its select (where the config has the TMA producer)
  warps+nop_pdl     MERGE=7's search, then the programmatic nop

and whether a select's time is its cold start (its instructions and the row's lines fetched after the flush and the
stream) or its work:

  nostores+select_k+select_k, pair+select, warps_pair+select   the pair, then its select once more (programmatic,
                    reading what the first read): the second select's cost past the pair is a select with warm caches
  select_k_hot, select_hot, warps_select_hot   the select alone, back to back without the flush (warm caches)

With --trace the no-work select's diagnosis build (TUNELAB_SIM_SELECT_TRACE, similarity_select_trace.one_run)
also runs --trace times after the storeless search, each after a flush: when its blocks enter, when their wait
returns and how long each step takes, against the dense select's after the real search (medians over blocks and
runs, us).

So ``X+nop_pdl - X`` is what any second kernel costs past X, and ``pair - search`` against
``nostores+select_k - nostores`` says how much of the select's time past the search is its work.

Results: benchmarks/results/similarity_second_kernel[_TAG].json (environment fingerprint inside); a table last.
About a minute on an H100.

    python3 benchmarks/similarity_second_kernel.py [--rounds 7] [--trace 20] [--tag h100]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import corpus_reader, draw_search_inputs, summarize, warm_up_gpu, write_result  # noqa: E402

NQ, N, D, K = 100, 50_000, 768, 10

NOP_SRC = r"""
template <int WAIT>
__global__ void nop(int* flag) {
#if __CUDA_ARCH__ >= 900
  if (WAIT) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (threadIdx.x == 0 && blockIdx.x == 0) flag[0] = 1;
}
"""


def nop_launch(flag, *, blocks: int, threads: int, programmatic: bool, smem: int = 0):
    """A prepared launch of NOP_SRC's kernel: ``blocks`` x ``threads`` with ``smem`` bytes of dynamic shared memory
    (unused), waiting for the prior grid when ``programmatic`` (and then launched as a programmatic dependent
    launch)."""
    import tunelab

    kern = tunelab.Kernel(NOP_SRC, "nop<{WAIT}>", launch=lambda cfg, f: (blocks, threads))
    ck = kern.compile({"WAIT": int(programmatic)})
    return ck.function().prepare((blocks, 1, 1), (threads, 1, 1), smem, ck.pack([flag]), programmatic=programmatic)


def select_traces(q, c, dense_cfg: dict, runs: int) -> dict:
    """The select's diagnosis build after the storeless search over the first k keys of each row ("select_k") and
    after the real search ("pair"): per run the blocks' stamps (similarity_select_trace.one_run), then medians over
    runs of the median over blocks, and how many blocks entered more than 0.5 us before their wait returned."""
    import numpy as np
    import torch

    from _common import kernel_variant
    from similarity_dense import Prepared, storeless
    from similarity_select_trace import TRACE, VARIANTS, one_run

    _, steps, stamps = VARIANTS["dense"]
    with kernel_variant(defines=TRACE):
        prep = Prepared(dense_cfg, q, c)
        nostores, select_k = storeless(prep, q, c)

    class NoWork:  # one_run's interface: a callable over the search's buffers
        ck = prep.ck

        def __call__(self):
            stream = int(torch.cuda.current_stream().cuda_stream)
            nostores(stream)
            select_k(stream)

    out = {}
    for name, run in (("select_k", NoWork()), ("pair", prep)):
        rs = [one_run(run, steps, stamps) for _ in range(runs + 2)][2:]  # the first two warm up
        out[name] = {
            "runs": len(rs),
            "median_over_blocks_us": {k: float(np.median([np.median(r["blocks"][k]) for r in rs]))
                                      for k in rs[0]["blocks"]},
            "span_past_search_us": float(np.median([r["span_past_search_us"] for r in rs])),
            "blocks_entered_before_wait": float(np.median([100.0 * np.mean(r["blocks"]["entry_to_wait_us"] > 0.5)
                                                           for r in rs]))}
    return out


def main() -> int:
    import torch

    from tunelab.ops import similarity as sim
    from tunelab.tuning.family import next_pow2

    from similarity_dense import Prepared, storeless, time_all

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (similarity_dense.time_all)")
    ap.add_argument("--trace", type=int, default=0, metavar="RUNS",
                    help="also trace the no-work select and the pair's select RUNS times each (0: not)")
    ap.add_argument("--tag", default="", help="suffix of the result file's name (e.g. h100)")
    args = ap.parse_args()

    clock = warm_up_gpu()
    stream = lambda: int(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    q, c = draw_search_inputs(NQ, N, D, torch.float16, seed=1)
    dense_cfg = dict(sim.default_config(NQ, K, "float16", D, n=next_pow2(N)), MERGE=sim.MERGE_DENSE)
    dense = Prepared(dense_cfg, q, c)
    nostores, select_k = storeless(dense, q, c)
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    nop = nop_launch(flag, blocks=1, threads=32, programmatic=False)
    nop_pdl = nop_launch(flag, blocks=1, threads=32, programmatic=True)
    nop_wide = nop_launch(flag, blocks=NQ, threads=1024, programmatic=True)
    select_smem = int(sim._S.merge_smem_bytes(sim.MERGE_SELECT, K))
    filter_smem = int(sim._S.merge_smem_bytes(sim.MERGE_FILTER_SELECT, K))
    nop_wide_smem = nop_launch(flag, blocks=NQ, threads=int(sim._S.merge_threads(sim.MERGE_SELECT)),
                               programmatic=True, smem=select_smem)
    nop_warp_smem = nop_launch(flag, blocks=NQ, threads=int(sim._S.merge_threads(sim.MERGE_FILTER_SELECT)),
                               programmatic=True, smem=filter_smem)
    read = corpus_reader()(c)

    def then(*launches):
        return lambda: [launch(stream()) for launch in launches]

    fns = {"read": lambda: read(stream()), "read+nop": then(read, nop), "read+nop_pdl": then(read, nop_pdl),
           "nostores": lambda: nostores(stream()), "nostores+nop": then(nostores, nop),
           "nostores+nop_pdl": then(nostores, nop_pdl), "nostores+nop_wide": then(nostores, nop_wide),
           "nostores+nop_wide_smem": then(nostores, nop_wide_smem),
           "nostores+nop_warp_smem": then(nostores, nop_warp_smem),
           "nostores+select_k": then(nostores, select_k),
           "nostores+select_k+select_k": then(nostores, select_k, select_k), "select_k_hot": then(select_k),
           "search": lambda: dense.search(stream()), "pair": dense, "pair+select": then(dense.search, dense.merge,
                                                                                         dense.merge),
           "select_hot": then(dense.merge)}
    if sim.uses_tma(dense_cfg):
        warps = Prepared(dict(dense_cfg, MERGE=sim.MERGE_FILTER_WARPS), q, c)
        fns.update({"warps": lambda: warps.search(stream()), "warps_pair": warps,
                    "warps+nop_pdl": then(warps.search, nop_pdl),
                    "warps_pair+select": then(warps.search, warps.merge, warps.merge),
                    "warps_select_hot": then(warps.merge)})
    hot = frozenset(k for k in fns if k.endswith("_hot"))
    samples, _ = time_all(fns, budget_s=1.0, rounds=args.rounds, graph_below_us=0, unflushed=hot)
    us = {k: summarize(v) for k, v in samples.items()}
    med = {k: v["median"] for k, v in us.items()}
    pairs = [(k, base) for base in ("read", "nostores", "warps") for k in med if k.startswith(base + "+")]
    pairs += [("pair", "search"), ("nostores+select_k+select_k", "nostores+select_k"), ("pair+select", "pair"),
              ("warps_pair", "warps"), ("warps_pair+select", "warps_pair")]
    past = {f"{k} - {base}": med[k] - med[base] for k, base in pairs if k in med}
    traces = select_traces(q, c, dense_cfg, args.trace) if args.trace else None
    path = write_result("similarity_second_kernel", {"nq": NQ, "n": N, "d": D, "k": K, "dtype": "fp16",
                                                     "sm_mhz_after_warmup": clock, "dense_config": dense.config,
                                                     "select_smem_bytes": select_smem,
                                                     "filter_select_smem_bytes": filter_smem,
                                                     "splits": dense.plan["splits"], "us": us,
                                                     "median_differences_us": past, "select_traces": traces},
                        args.tag)
    print(f"wrote {path}")
    for k, v in us.items():
        print(f"{k:<20} {v['median']:7.1f} us  [{v['ci95'][0]:.1f}, {v['ci95'][1]:.1f}]")
    for k, v in past.items():
        print(f"{k:<32} {v:+6.1f} us")
    for name, t in (traces or {}).items():
        print(f"{name:<10} " + ", ".join(f"{k} {v:.2f}" for k, v in t["median_over_blocks_us"].items())
              + f"; span past the first wait {t['span_past_search_us']:.2f} us, entries before the search's end "
                f"{t['blocks_entered_before_wait']:.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
