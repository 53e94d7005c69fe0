"""Does the L2 policy of the dense search's key stores move the 50K / 100 time? (An experiment on MERGE=5.)

The dense search writes 20 MB of keys at N = 50K, nq = 100 (fp16, d = 768, k = 10) and on an H100 they cost it
8 us (results/similarity_dense_parts_h100.json: 44.4 against 36.5 us without the stores). Each variant compiles
the dense default with TUNELAB_SIM_KEY_STORE (kernels/similarity/ptx.cuh, store_key):

  plain        st.global (0)
  evict_last   st.global.L2::cache_hint with an evict_last policy (1): the keys the select reads next stay
  cs           st.global.cs (2): streaming
  evict_first  an evict_first policy (3)
  cg           st.global.cg (4)
  key16        each key's top 16 bits as a u16 (5): half the bytes. The select kernel cannot read them, so its pair is
               the 16-bit search, then the select of the default build over rows of N / 2 fp32 entries laid over
               the same buffer (a select over 100 KB rows, as a 16-bit select's window would be; its answer is
               meaningless, and a 16-bit select would also need an exact re-rank of the rows reaching its bar)
  key16w       key16's keys, two rows a 32-bit word after two shuffles (7): every 32-byte sector a warp store writes is
               full, so half the sectors of the fp32 keys (key16 writes as many sectors as plain, half full); its pair
               as key16's
  never        every key compared with a value it never equals at run time: the stores in the code, none run (8)
  one          one store per thread and tile, the largest of its keys (9)
               (never and one: the search alone; their keys are not the matrix, so no pair)
  zero_late    plain, with the accumulators cleared for the next tile just before its first slice's MMAs instead of
               right after the epilogue's stores (TUNELAB_SIM_ZERO_LATE=1, topk.cuh)
  bulk         each tile group's keys staged in shared memory, then one bulk copy (cp.async.bulk) per query column
               (6): whole lines instead of four 32-byte sectors per warp store; the launch gets the staging region's
               shared memory added (the launcher does not count it)

and times, interleaved with the core's protocol (memset flush, CUDA events; similarity_dense.time_all), the
search alone and the search + select pair; plus the read-only kernel, the search with its stores compiled out
and torch. Indices and scores are checked against the plain variant's (not the 16-bit ones'; their two layouts'
keys against each other). Results: benchmarks/results/similarity_key_stores[_TAG].json; a table last.

    python3 benchmarks/similarity_key_stores.py [--tag h200]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (corpus_reader, draw_search_inputs, kernel_variant, speedup, summarize, warm_up_gpu,  # noqa: E402
                     write_result)

NQ, N, D, K = 100, 50_000, 768, 10
VARIANTS = {"plain": 0, "evict_last": 1, "cs": 2, "evict_first": 3, "cg": 4, "key16": 5, "key16w": 7, "bulk": 6,
            "never": 8, "one": 9, "zero_late": 0}
MORE_DEFINES = {"zero_late": {"TUNELAB_SIM_ZERO_LATE": "1"}}
SEARCH_ONLY = ("never", "one")  # their keys are not the matrix: no pair


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6, help="interleaved rounds")
    ap.add_argument("--budget-s", type=float, default=2.0, help="seconds of samples (similarity_dense.time_all)")
    ap.add_argument("--tag", default="")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated, from {', '.join(VARIANTS)} (plain is always run: the reference)")
    args = ap.parse_args()
    chosen = ["plain"] + [v for v in args.variants.split(",") if v and v != "plain"]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: {', '.join(unknown)} unknown; choose from {', '.join(VARIANTS)}")
    import torch

    from tunelab.ops import similarity as sim
    from similarity_dense import Prepared, storeless, time_all
    from tunelab.tuning.families.similarity import torch_topk
    from tunelab.tuning.family import next_pow2

    clock = warm_up_gpu()
    q, c = draw_search_inputs(NQ, N, D, torch.float16, seed=1)
    cfg = sim.default_config(NQ, K, "float16", D, n=next_pow2(N))
    preps = {}
    real_smem = sim.CompiledSearch.smem_bytes
    stage = 2 * cfg["BLOCK_Q"] * (cfg["BLOCK_N"] + 4) * 4  # the bulk variant's two staging tiles (topk.cuh)
    for name in chosen:
        v = VARIANTS[name]
        if name == "bulk":
            sim.CompiledSearch.smem_bytes = lambda self, k: real_smem(self, k) + stage
        try:
            with kernel_variant(defines={"TUNELAB_SIM_KEY_STORE": str(v), **MORE_DEFINES.get(name, {})}):
                preps[name] = Prepared(cfg, q, c)
        finally:
            sim.CompiledSearch.smem_bytes = real_smem
    for p in preps.values():
        p()
    torch.cuda.synchronize()
    want = preps["plain"].indices.clone()
    # the answers of the searches that write every fp32 key
    fp32 = {k: p for k, p in preps.items() if not k.startswith("key16") and k not in SEARCH_ONLY}
    agree = {k: bool(torch.equal(p.indices, want)) for k, p in fp32.items()}
    agree_scores = {k: bool(torch.equal(p.scores, preps["plain"].scores)) for k, p in fp32.items()}
    read = corpus_reader()(c)
    stream = lambda: int(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    fns = {"read": lambda: read(stream()), "torch": torch_topk(q, c, K, "ip")}
    bare = storeless(preps["plain"], q, c)  # the search with its key stores compiled out (similarity_dense.storeless)
    fns["storeless"] = lambda: bare(stream())
    # key16's pair: its search, then a select over N / 2 fp32 entries a row of its buffer (see the docstring)
    half = Prepared(cfg, q, c[: N // 2])
    half_merges = {name: half.cs.prepare(q.device.index or 0, q, c[: N // 2], K, preps[name].ck, preps[name].ci,
                                         half.scores, half.indices, half.plan)[1]
                   for name in preps if name.startswith("key16")}

    def half_pair(name):
        def pair():
            s = stream()
            preps[name].search(s)
            half_merges[name](s)
        return pair

    # the two 16-bit layouts hold the same keys: the nq x N u16 matrix at the start of each buffer, row stride dense_ld
    ld = sim.dense_ld(N)
    u16 = {name: preps[name].ck.reshape(-1).view(torch.int16)[: NQ * ld].view(NQ, ld)[:, :N] for name in half_merges}
    if len(u16) == 2:
        agree["key16w_keys_equal_key16"] = bool(torch.equal(u16["key16"], u16["key16w"]))

    for name, p in preps.items():
        fns[f"{name}/search"] = p.search
        if name not in SEARCH_ONLY:
            fns[f"{name}/pair"] = half_pair(name) if name.startswith("key16") else p
    samples, _ = time_all(fns, budget_s=args.budget_s, rounds=args.rounds, graph_below_us=0)
    rows = {k: summarize(v) for k, v in samples.items()}
    speed = {}
    for name in preps:
        for part in ("search", "pair"):
            if f"{name}/{part}" in samples:
                speed[f"{name}/{part}"] = speedup(samples[f"plain/{part}"], samples[f"{name}/{part}"])
    path = write_result("similarity_key_stores",
                        {"nq": NQ, "n": N, "d": D, "k": K, "dtype": "fp16", "config": preps["plain"].config,
                         "splits": preps["plain"].plan["splits"], "sm_mhz_after_warmup": clock,
                         "indices_equal_plain": agree, "scores_equal_plain": agree_scores, "us": rows,
                         "speedup_vs_plain": speed}, args.tag)
    print(f"wrote {path}")
    print(f"read {rows['read']['median']:.1f} us, the search without its stores {rows['storeless']['median']:.1f} us, "
          f"torch {rows['torch']['median']:.1f} us")
    for name in preps:
        s = rows[f"{name}/search"]
        line = f"{name:>12}: search {s['median']:6.1f} us ({speed[f'{name}/search']['estimate']:.3f}x)"
        if f"{name}/pair" in rows:
            line += f", pair {rows[f'{name}/pair']['median']:6.1f} us ({speed[f'{name}/pair']['estimate']:.3f}x)"
        print(line + ("" if agree.get(name, True) else "  DIFFER"))
    if "key16w_keys_equal_key16" in agree:
        print(f"16-bit layouts hold the same keys: {agree['key16w_keys_equal_key16']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
