"""What the dense search's key stores cost at 50K / 100, and what moves it (L2 policy, config, macros, L2 state).

The dense search writes 20 MB of keys at N = 50K, nq = 100 (fp16, d = 768, k = 10) and on an H100 they cost it
8 us (results/similarity_dense_parts_h100.json: 44.4 against 36.5 us without the stores). Each variant compiles
the dense default with TUNELAB_SIM_KEY_STORE (kernels/similarity/ptx.cuh, store_key):

  plain        st.global (0)
  evict_last   st.global.L2::cache_hint with an evict_last policy (1): the keys the select reads next stay
  cs           st.global.cs (2): streaming
  evict_first  an evict_first policy (3)
  cg           st.global.cg (4)

and times, interleaved with the core's protocol (memset flush, CUDA events; similarity_dense.time_all), the
search alone and the search + select pair; plus the read-only kernel, the search with its stores compiled out
(similarity_dense.storeless) and torch. Indices and scores are checked against the plain variant's. Results:
benchmarks/results/similarity_key_stores[_TAG].json; a table last.

    python3 benchmarks/similarity_key_stores.py [--variants plain,cs,...] [--arm NAME:KEY=VALUE,...]
                                                [--macro NAME:MACRO=VALUE,...] [--l2 write,read,none] [--tag h200]

--arm NAME:KEY=VALUE,... adds the dense default with those config entries replaced (e.g. c2:CLUSTER=2: two blocks
multicast each query slice, so L2 serves the queries half as often), timed with its own storeless build. --macro
NAME:MACRO=VALUE,... adds the dense default compiled with those macros (an experiment's, in the kernel for the run),
whose stores' cost is taken over the plain build's storeless search.

With --l2 the same arms are timed again after each named preparation of L2 (_common.L2_STATES, the core's timer with
its prepare hook, _common.time_after): "write" the protocol's own flush (L2 full of dirty lines), "read" a read of a
buffer twice the L2 (the same eviction, no dirty lines), "none" back-to-back calls (the keys' lines of the previous
call still in L2). What the stores cost after each (search minus the storeless search) says how much of it is the
write-back of the dirty lines the protocol leaves, which every line the keys take must first evict.

What the stores cost beyond their policy (16-bit keys, packed 16-bit keys, bulk copies from shared memory, no store
run, one store a tile, the accumulators cleared late) was measured with this script at 83d9989, whose kernel held
those variants (TUNELAB_SIM_KEY_STORE 5-9, TUNELAB_SIM_ZERO_LATE), and half the stores, a shuffle in place of each
store and every store to one word at f548531 (8, 10-12), and the accumulators overwritten by each tile's first MMAs
instead of cleared at 6d95941 (TUNELAB_SIM_SCALE_D0), the stores paced (a pause after each n8 column block's, so that
they spread over the other group's main loop) at 64584de (TUNELAB_SIM_STORE_PACE_NS, its --pace), and only the first
S n8 column blocks' keys stored at d6f2d0f (--macro s1:TUNELAB_SIM_STORE_NT=1 --macro s4:TUNELAB_SIM_STORE_NT=4);
ptx.cuh keeps the figures (results/similarity_key_stores_what_h200.json, _mio_h200.json, _same_h200.json,
_scale_d0_h200.json, _l2_h200.json, _pace_h200.json, _cluster_h200.json, _count_h200.json and their neighbours).

A search that filters by bars known before it starts (TUNELAB_SIM_BAR_PROBE=V, one constant bar, with _ANY, _SMEM
and _WALK for how the passing keys are found and appended) was measured with --macro at 1dec25a, 95929d2, 9d1d8cd,
07c6fe5 and b909d0c, whose kernels held the macros (commit messages: the run commands); topk.cuh's dense_epilogue and
SIMILARITY.md keep the figures (results/similarity_key_stores_bar_probe{,_any,_smem,_walk,_ring}_h200.json).

What L2's query reads cost the search was measured with --macro at fefcd8a, whose producer copied the query boxes on
the ring's first lap only when TUNELAB_SIM_QSKIP=1 (wrong keys; with TUNELAB_SIM_TRACE=1 also without the stores):
nothing (results/similarity_key_stores_qskip_h200.json; topk.cuh's produce() and SIMILARITY.md keep the figures).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (L2_STATES, corpus_reader, draw_search_inputs, int_in, int_pair, kernel_variant,  # noqa: E402
                     l2_preparations, l2_states, named_pairs, names_in, speedup, summarize, time_after,
                     warm_up_gpu, write_result)
from tunelab.kernel import parse_define  # noqa: E402

NQ, N, D, K = 100, 50_000, 768, 10
VARIANTS = {"plain": 0, "evict_last": 1, "cs": 2, "evict_first": 3, "cg": 4}


def parse_variants(text: str) -> list[str]:
    """--variants: comma-separated names of VARIANTS, plain first whether named or not (the reference)."""
    names = names_in(tuple(VARIANTS), "--variants", "plain,cs")(text)
    return ["plain"] + [v for v in names if v != "plain"]


#: --arm NAME:KEY=VALUE,... -> (NAME, {KEY: int VALUE}): the dense default with these config entries replaced (the
#: keys are checked against the config once it is known)
parse_arm = named_pairs("--arm", "KEY=VALUE", "c2:CLUSTER=2", int_pair, reserved=tuple(VARIANTS))
#: --macro NAME:MACRO=VALUE,... -> (NAME, {MACRO: VALUE}): the dense default compiled with them
parse_macro_arm = named_pairs("--macro", "MACRO=VALUE", "cs2:TUNELAB_SIM_KEY_STORE=2", parse_define,
                              reserved=tuple(VARIANTS))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6, help="interleaved rounds")
    ap.add_argument("--budget-s", type=float, default=2.0, help="seconds of samples (similarity_dense.time_all)")
    ap.add_argument("--tag", default="")
    ap.add_argument("--variants", type=parse_variants, default=list(VARIANTS), metavar="NAME,...",
                    help=f"from {', '.join(VARIANTS)} (plain is always run: the reference)")
    ap.add_argument("--arm", type=parse_arm, action="append", default=[], metavar="NAME:KEY=VALUE,...",
                    help="also the dense default with these config entries replaced (plain stores; repeatable), with "
                         "its own storeless build as the reference of its stores' cost, e.g. c2:CLUSTER=2")
    ap.add_argument("--macro", type=parse_macro_arm, action="append", default=[], metavar="NAME:MACRO=VALUE,...",
                    help="also the dense default compiled with these macros (repeatable), e.g. "
                         "cs2:TUNELAB_SIM_KEY_STORE=2")
    ap.add_argument("--l2", type=l2_states, default=[], metavar="STATE,...",
                    help=f"also time every arm after each of these preparations of L2 (of {', '.join(L2_STATES)})")
    ap.add_argument("--l2-samples", type=int_in(1, 1000, "samples a round and arm"), default=15,
                    metavar="N", help="samples a round and arm with --l2 (1..1000)")
    args = ap.parse_args()
    import torch

    from tunelab.ops import similarity as sim
    from similarity_dense import Prepared, storeless, time_all
    from tunelab.tuning.families.similarity import torch_topk
    from tunelab.tuning.family import next_pow2

    cfg = sim.default_config(NQ, K, "float16", D, n=next_pow2(N))
    unknown = sorted({k for _, over in args.arm for k in over} - set(cfg))
    if unknown:
        ap.error(f"--arm: config keys {unknown} unknown; the dense config has {', '.join(cfg)}")
    names = list(args.variants) + [n for n, _ in args.macro] + [n for n, _ in args.arm]
    if len(set(names)) < len(names):
        ap.error(f"arm names {sorted({n for n in names if names.count(n) > 1})} given twice (--variants, --macro, "
                 f"--arm share one namespace); give each arm its own name")
    clock = warm_up_gpu()  # (the arguments are checked first: no GPU time for a typo)
    q, c = draw_search_inputs(NQ, N, D, torch.float16, seed=1)
    builds = {name: {"TUNELAB_SIM_KEY_STORE": str(VARIANTS[name])} for name in args.variants}
    builds.update(dict(args.macro))
    preps = {}
    for name, defines in builds.items():
        with kernel_variant(defines=defines):
            preps[name] = Prepared(cfg, q, c)
    arms = dict(args.arm)
    smem = sim.smem_limit(sim._arch(torch.cuda.current_device()))
    for name, over in arms.items():
        preps[name] = Prepared(sim.fit_config(dict(cfg, **over), K, "float16", smem, "ip"), q, c)
    for p in preps.values():
        p()
    torch.cuda.synchronize()
    agree = {k: bool(torch.equal(p.indices, preps["plain"].indices)) for k, p in preps.items()}
    agree_scores = {k: bool(torch.equal(p.scores, preps["plain"].scores)) for k, p in preps.items()}
    reader = corpus_reader()
    read = reader(c)
    bare = storeless(preps["plain"], q, c)
    # prepared launches as they are, as each arm's search is: its stores' cost (search - storeless) compares like
    # with like (a lambda around the storeless launch put a Python call in only one side of it)
    fns = {"read": read, "storeless": bare, "torch": torch_topk(q, c, K, "ip")}
    for name in arms:
        fns[f"{name}/storeless"] = storeless(preps[name], q, c)
    for name, p in preps.items():
        fns[f"{name}/search"] = p.search
        fns[f"{name}/pair"] = p
    samples, _ = time_all(fns, budget_s=args.budget_s, rounds=args.rounds, graph_below_us=0)
    rows = {k: summarize(v) for k, v in samples.items()}
    speed = {}
    for name in preps:
        for part in ("search", "pair"):
            speed[f"{name}/{part}"] = speedup(samples[f"plain/{part}"], samples[f"{name}/{part}"])
    ref = {name: f"{name}/storeless" if name in arms else "storeless" for name in preps}  # each build's storeless
    cost = {name: rows[f"{name}/search"]["median"] - rows[ref[name]]["median"] for name in preps}
    by_l2, stores_cost = {}, {}
    if args.l2:
        after = time_after(fns, [(st, name) for st in args.l2 for name in fns], l2_preparations(reader),
                           rounds=args.rounds, samples=args.l2_samples)
        for st in args.l2:
            by_l2[st] = {name: summarize(after[(st, name)]) for name in fns}
            stores_cost[st] = {name: by_l2[st][f"{name}/search"]["median"] - by_l2[st][ref[name]]["median"]
                               for name in preps}
    path = write_result("similarity_key_stores",
                        {"nq": NQ, "n": N, "d": D, "k": K, "dtype": "fp16", "config": preps["plain"].config,
                         "splits": preps["plain"].plan["splits"], "sm_mhz_after_warmup": clock, "builds": builds,
                         "indices_equal_plain": agree, "scores_equal_plain": agree_scores, "us": rows,
                         "arms": arms, "arm_configs": {name: preps[name].config for name in arms},
                         "speedup_vs_plain": speed, "stores_cost_us": cost,
                         "l2_samples": args.l2_samples if args.l2 else None,
                         "us_after_l2": by_l2, "stores_cost_us_after_l2": stores_cost}, args.tag)
    print(f"wrote {path}")
    print(f"read {rows['read']['median']:.1f} us, the search without its stores {rows['storeless']['median']:.1f} us, "
          f"torch {rows['torch']['median']:.1f} us")
    for name in preps:
        s, pr = rows[f"{name}/search"], rows[f"{name}/pair"]
        same = agree[name] and agree_scores[name]
        print(f"{name:>12}: search {s['median']:6.1f} us ({speed[f'{name}/search']['estimate']:.3f}x), pair "
              f"{pr['median']:6.1f} us ({speed[f'{name}/pair']['estimate']:.3f}x), stores {cost[name]:4.1f} us (over "
              f"{ref[name]} {rows[ref[name]]['median']:.1f}){'' if same else '  DIFFER'}")
    if by_l2:
        print("after each L2 state (us, medians; stores = search - storeless):")
        print(f"{'':>8}" + "".join(f"{name:>18}" for name in fns) + "".join(f"{'stores ' + n:>16}" for n in preps))
        for st in args.l2:
            print(f"{st:>8}" + "".join(f"{by_l2[st][name]['median']:18.1f}" for name in fns)
                  + "".join(f"{stores_cost[st][n]:16.1f}" for n in preps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
