"""What the second kernel after a search costs at 50K / 100 (fp16, d = 768, k = 10, inner product), whatever it does:
the search, or a stand-in for it, followed by kernels that do nothing, and the selects run twice, on one GPU.

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
  search, pair      the dense default's search alone, and search then select (the op's pair)
  pair+select       the pair, then its select once more (programmatic, reading the rows the first one read)
  warps, warps_pair MERGE=7's search alone, and search then its select (where the config has the TMA producer)
  warps+nop_pdl     MERGE=7's search, then the programmatic nop
  warps_pair+select MERGE=7's pair, then its select once more

So ``X+nop_pdl - X`` is what any second kernel costs past X, ``pair - search`` what the select costs past its
search, and ``pair+select - pair`` what it costs once its rows and instructions are in the caches.

Results: benchmarks/results/similarity_second_kernel[_TAG].json (environment fingerprint inside); a table last.
About a minute on an H100.

    python3 benchmarks/similarity_second_kernel.py [--rounds 7] [--tag h100]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (corpus_reader, current_stream, draw_search_inputs, summarize, warm_up_gpu,  # noqa: E402
                     write_result)

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


def nop_kernel():
    """NOP_SRC's kernel (config {"WAIT": 0 or 1}); its launch rule (one block of 32 threads) serves plain launches
    only: nop_launch() gives the grid itself."""
    import tunelab

    return tunelab.Kernel(NOP_SRC, "nop<{WAIT}>", launch=lambda cfg, flag: (1, 32))


def nop_launch(flag, *, blocks: int, threads: int, programmatic: bool, smem: int = 0):
    """A prepared launch of NOP_SRC's kernel: ``blocks`` x ``threads`` with ``smem`` bytes of dynamic shared memory
    (unused), waiting for the prior grid when ``programmatic`` (and then launched as a programmatic dependent
    launch)."""
    ck = nop_kernel().compile({"WAIT": int(programmatic)})
    return ck.function().prepare((blocks, 1, 1), (threads, 1, 1), smem, ck.pack([flag]), programmatic=programmatic)


def main() -> int:
    import torch

    from tunelab.ops import similarity as sim
    from tunelab.tuning.family import next_pow2

    from similarity_dense import Prepared, storeless, time_all

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (similarity_dense.time_all)")
    ap.add_argument("--tag", default="", help="suffix of the result file's name (e.g. h100)")
    args = ap.parse_args()

    clock = warm_up_gpu()
    q, c = draw_search_inputs(NQ, N, D, torch.float16, seed=1)
    dense_cfg = dict(sim.default_config(NQ, K, "float16", D, n=next_pow2(N)), MERGE=sim.MERGE_DENSE)
    dense = Prepared(dense_cfg, q, c)
    nostores = storeless(dense, q, c)
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
        return lambda: [launch(current_stream()) for launch in launches]

    fns = {"read": lambda: read(current_stream()), "read+nop": then(read, nop), "read+nop_pdl": then(read, nop_pdl),
           "nostores": lambda: nostores(current_stream()), "nostores+nop": then(nostores, nop),
           "nostores+nop_pdl": then(nostores, nop_pdl), "nostores+nop_wide": then(nostores, nop_wide),
           "nostores+nop_wide_smem": then(nostores, nop_wide_smem),
           "nostores+nop_warp_smem": then(nostores, nop_warp_smem),
           "search": lambda: dense.search(current_stream()), "pair": dense,
           "pair+select": then(dense.search, dense.merge, dense.merge)}
    if sim.uses_tma(dense_cfg):
        warps = Prepared(dict(dense_cfg, MERGE=sim.MERGE_FILTER_WARPS), q, c)
        fns.update({"warps": lambda: warps.search(current_stream()), "warps_pair": warps,
                    "warps+nop_pdl": then(warps.search, nop_pdl),
                    "warps_pair+select": then(warps.search, warps.merge, warps.merge)})
    samples, _ = time_all(fns, budget_s=1.0, rounds=args.rounds, graph_below_us=0)
    us = {k: summarize(v) for k, v in samples.items()}
    med = {k: v["median"] for k, v in us.items()}
    pairs = [(k, base) for base in ("read", "nostores", "warps") for k in med if k.startswith(base + "+")]
    pairs += [("pair", "search"), ("pair+select", "pair"), ("warps_pair", "warps"), ("warps_pair+select", "warps_pair")]
    past = {f"{k} - {base}": med[k] - med[base] for k, base in pairs if k in med}
    path = write_result("similarity_second_kernel", {"nq": NQ, "n": N, "d": D, "k": K, "dtype": "fp16",
                                                     "sm_mhz_after_warmup": clock, "dense_config": dense.config,
                                                     "select_smem_bytes": select_smem,
                                                     "filter_select_smem_bytes": filter_smem,
                                                     "splits": dense.plan["splits"], "us": us,
                                                     "median_differences_us": past}, args.tag)
    print(f"wrote {path}")
    for k, v in us.items():
        print(f"{k:<20} {v['median']:7.1f} us  [{v['ci95'][0]:.1f}, {v['ci95'][1]:.1f}]")
    for k, v in past.items():
        print(f"{k:<32} {v:+6.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
