"""The filtered search (MERGE=6: only the keys that reach their block's bar go to the split's segment of a candidate
row, then the select kernel) against the dense search (MERGE=5, every key), the fused search and torch.

For each shape (d = 768, k = 10, inner product) the script times, interleaved in rounds with the core's protocol
(L2 flush, CUDA events; CUDA-graph replay for all when one is under 20 µs):

  torch       torch.topk(Q @ C.T) (cuBLAS + torch's top-k), the family's baseline
  fused       the fused search (a running top-k per block, then the merge of the splits' lists): default_config
              without N
  dense       default_config for the shape's store bucket (at most DENSE_MAX_N) with MERGE=5
  filtered    the same config with MERGE=6
  warps       the same config with MERGE=7 (MERGE=6's rows and select, filtered by the TMA producer's spare warps;
              only where that config has the TMA producer, MMA 2 or 3)
  filtered-before   (with --before DIR) the same MERGE=6 config compiled from DIR's headers (laid out as
              csrc/kernels, holding only the files to replace: _common.kernel_variant), e.g. topk.cuh before the
              global bars, so that a kernel change is measured in one process against what it replaced; and
              warps-before, the MERGE=7 config so compiled, where there is a warps arm
  filtered-NAME     (with --variant NAME:MACRO=VALUE[,MACRO=VALUE...], repeatable) the same MERGE=6 config compiled
              with those macros defined, e.g. --variant nowait:TUNELAB_SIM_FILTER_WAIT_NS=0 (params.cuh); and
              warps-NAME, the MERGE=7 config with them, where there is a warps arm. --variant-arms names the arms
              so compiled (default filtered,warps; e.g. fused,dense,filtered,warps for a macro of a shared header,
              so that no arm the macros cannot reach takes timing rounds)

Checks: the filtered searches' indices and scores (filtered, warps and their -NAME and -before builds, and dense-NAME)
equal the dense search's (the same main loop, so the same keys, and the same tie rule: identical; MISMATCH in the
table otherwise). The fused arms' answers are compared too and recorded (answers_equal_dense; "(fused differs)" in
the table): their running lists are another code path, whose scores need not round alike. Reported besides the times:
the candidates per query the filtered search appended (mean and largest; the select reads those), and at 50K / 100
the fused, dense and filtered arms' two kernels alone. Results: benchmarks/results/similarity_filtered<tag>.json
(environment fingerprint inside); a short table last. About 3 minutes on an H100.

    python3 benchmarks/similarity_filtered.py [--quick] [--shapes NQxNxDTYPE,...] [--tag h100] [--before DIR]
                                              [--variant NAME:M=V ...]

--shapes names the shapes instead (e.g. 100x50000xfloat16,32x25000xbfloat16; with --quick's fewer samples, a run
that fits one device call); the kernels alone are timed only at 100 x 50K fp16, as always.

The before directory of the global bars' A/B (results/similarity_filtered_h100_gbar.json):

    mkdir -p ab_before/similarity
    git show 9295b4c:csrc/kernels/similarity/topk.cuh > ab_before/similarity/topk.cuh

and of the select by the global bar's (540a19b against 320310b, results/similarity_filtered_h100_gselect.json,
--quick): 320310b's similarity/select.cuh.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (current_stream, draw_search_inputs, headers_dir, kernel_variant, named_pairs,  # noqa: E402
                     names_in, nq_n, warm_up_gpu, write_result)
from tunelab.kernel import parse_define  # noqa: E402
from similarity_dense import K, Prepared, kernels_alone, time_all, variant_rows  # noqa: E402

D = 768
# (nq, n, dtype): the open goal's shape first, then the dense rule's other corners and two corpora past it
SHAPES = [(100, 50_000, "float16"), (100, 10_000, "float16"), (100, 25_000, "float16"), (100, 60_000, "float16"),
          (32, 50_000, "float16"), (8, 50_000, "float16"), (1, 50_000, "float16"), (1, 10_000, "float16"),
          (100, 50_000, "bfloat16"), (100, 50_000, "float32"), (16, 50_000, "float32"),
          (100, 100_000, "float16"), (100, 200_000, "float16")]
QUICK_SHAPES = [(100, 50_000, "float16"), (1, 50_000, "float16"), (100, 50_000, "float32")]


ARMS = ("fused", "dense", "filtered", "warps")  # the arms a --variant may compile again
VARIANT_ARMS = ("filtered", "warps")  # those it compiles unless --variant-arms says otherwise
#: the arms (by name prefix) whose answers must equal the dense search's bit for bit: the same main loop's keys and
#: the same tie rule; the fused arms' running lists are another code path, compared and recorded only
EXACT_ARMS = ("filtered", "warps", "dense-")


def variants(nq: int, n: int, dtype: str, q, c, before: Path | None = None,
             defined: dict[str, dict[str, str]] | None = None,
             variant_arms: tuple[str, ...] = VARIANT_ARMS) -> dict:
    """The arms of one shape (the module docstring's table): name -> Prepared. ``defined`` (--variant) compiles
    the arms named in ``variant_arms`` (--variant-arms) again with its macros, as NAME-VARIANT."""
    from tunelab.ops import similarity as sim
    from tunelab.tuning.family import next_pow2

    fused = sim.default_config(nq, K, dtype, D)
    bucket = min(next_pow2(n), sim.DENSE_MAX_N)  # past the rule: its largest bucket's config
    dense = dict(sim.default_config(nq, K, dtype, D, n=bucket), MERGE=sim.MERGE_DENSE)
    arms = {"fused": fused, "dense": dense, "filtered": dict(dense, MERGE=sim.MERGE_FILTERED)}
    if sim.uses_tma(dense):
        arms["warps"] = dict(dense, MERGE=sim.MERGE_FILTER_WARPS)
    out = {name: Prepared(cfg, q, c) for name, cfg in arms.items()}
    if before is not None:
        with kernel_variant(headers=before):
            for name in ("filtered", "warps"):
                if name in arms:
                    out[f"{name}-before"] = Prepared(arms[name], q, c)
    for variant, defines in (defined or {}).items():
        with kernel_variant(defines=defines):
            for name in variant_arms:
                if name in arms:
                    out[f"{name}-{variant}"] = Prepared(arms[name], q, c)
    return out


#: --variant NAME:MACRO=VALUE,... -> (NAME, {MACRO: VALUE})
parse_variant = named_pairs("--variant", "MACRO=VALUE", "nowait:TUNELAB_SIM_FILTER_WAIT_NS=0", parse_define)


def parse_arms(text: str) -> tuple[str, ...]:
    """``ARM[,ARM...]`` (--variant-arms) -> the arms, each one of ARMS."""
    return tuple(names_in(ARMS, "--variant-arms", "dense,warps")(text))


def parse_shapes(text: str) -> list[tuple[int, int, str]]:
    """``NQxNxDTYPE[,NQxNxDTYPE...]`` (--shapes) -> [(nq, n, dtype)], in the order given; DTYPE one the search takes
    (tunelab.ops.similarity.DTYPE_CODES)."""
    from tunelab.ops.similarity import DTYPE_CODES

    shapes = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        head, _, dtype = part.rpartition("x")
        shape = nq_n(head)
        if shape is None or dtype not in DTYPE_CODES:
            raise argparse.ArgumentTypeError(
                f"--shapes {text!r}: {part!r} is not NQxNxDTYPE with positive integers NQ and N and DTYPE one of "
                f"{', '.join(DTYPE_CODES)}, e.g. 100x50000xfloat16")
        shapes.append((*shape, dtype))
    if not shapes:
        raise argparse.ArgumentTypeError(f"--shapes {text!r}: names no shape; e.g. 100x50000xfloat16,32x50000xfloat16")
    return shapes


def candidates(prep: Prepared) -> dict:
    """Run the filtered search and read its counts: the candidates per query the select reads."""
    import torch

    from tunelab.ops import similarity as sim

    prep.search(current_stream())
    torch.cuda.synchronize()
    counts = sim.filter_counts(prep.ci, prep.plan, prep.config).sum(1).to(torch.float64).cpu()
    return {"mean": float(counts.mean()), "max": int(counts.max()), "min": int(counts.min())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples, and three shapes unless --shapes")
    ap.add_argument("--shapes", type=parse_shapes, default=None, metavar="NQxNxDTYPE,...",
                    help="these shapes instead of the full (or --quick) list")
    ap.add_argument("--tag", default="", help="suffix of the result file's name (e.g. h100)")
    ap.add_argument("--before", type=headers_dir(), default=None,
                    help="directory laid out as csrc/kernels with the headers of the 'filtered-before' and "
                         "'warps-before' arms")
    ap.add_argument("--variant", type=parse_variant, action="append", default=[], metavar="NAME:MACRO=VALUE,...",
                    help="the --variant-arms compiled again with these macros defined, as ARM-NAME (repeatable)")
    ap.add_argument("--variant-arms", type=parse_arms, default=VARIANT_ARMS, metavar="ARM,...",
                    help=f"the arms each --variant compiles (of {', '.join(ARMS)}; default {','.join(VARIANT_ARMS)})")
    args = ap.parse_args()
    defined = dict(args.variant)
    import torch

    from tunelab.tuning.families.similarity import torch_topk

    clock = warm_up_gpu()
    rows = []
    for nq, n, dtype in args.shapes or (QUICK_SHAPES if args.quick else SHAPES):
        q, c = draw_search_inputs(nq, n, D, getattr(torch, dtype), seed=n + nq)
        fns = variants(nq, n, dtype, q, c, args.before, defined, args.variant_arms)
        cand = candidates(fns["filtered"])
        cand_before = candidates(fns["filtered-before"]) if args.before else None
        cand_variants = {name: candidates(fns[name]) for name in fns
                         if name.startswith(("filtered-", "warps")) and name != "filtered-before"}
        for f in fns.values():
            f()
        torch.cuda.synchronize()
        # every arm's answer against the dense search's (EXACT_ARMS must equal it)
        equal = {a: bool(torch.equal(fns[a].indices, fns["dense"].indices)
                         and torch.equal(fns[a].scores, fns["dense"].scores)) for a in fns if a != "dense"}
        same = all(v for a, v in equal.items() if a.startswith(EXACT_ARMS))
        fns = {"torch": torch_topk(q, c, K, "ip"), **fns}
        samples, graph = time_all(fns, budget_s=1.0 if args.quick else 2.0, rounds=5)
        row = {"nq": nq, "n": n, "d": D, "k": K, "dtype": dtype, "timer": "cuda_graph" if graph else "events",
               "filtered_equals_dense": same, "answers_equal_dense": equal, "candidates_per_query": cand,
               **({"candidates_per_query_before": cand_before} if cand_before else {}),
               **({"candidates_per_query_variants": cand_variants} if cand_variants else {}),
               "variants": variant_rows(samples, fns, "dense")}
        if (nq, n, dtype) == (100, 50_000, "float16"):
            row["kernels_alone"] = {k: kernels_alone(fns[k]) for k in fns if k != "torch"}
        rows.append(row)
        del fns, q, c
        torch.cuda.empty_cache()
    path = write_result("similarity_filtered", {"quick": args.quick, "shapes": args.shapes,
                                                "sm_mhz_after_warmup": clock,
                                                "before": str(args.before) if args.before else None,
                                                "variants_defined": defined,
                                                "variant_arms": list(args.variant_arms),
                                                "rows": rows}, args.tag)
    print(f"wrote {path}")
    # every arm by its base (ARMS' order), each followed by its before and variant builds
    arms = ("torch",) + tuple(a for base in ARMS for a in (base, f"{base}-before", *(f"{base}-{v}" for v in defined))
                              if any(a in r["variants"] for r in rows))
    print(f"{'nq':>4} {'N':>7} {'dtype':>8} {'cand':>7}  " + "  ".join(f"{k:>15}" for k in arms) + "  filt/dense")
    for r in rows:
        cells = []
        for k in arms:
            v = r["variants"].get(k)
            if v is None:  # (no warps arm without the TMA producer)
                cells.append(f"{'-':>15}")
                continue
            sp = v.get("speedup_vs_torch", {}).get("estimate")
            cells.append(f"{v['us']['median']:8.1f}" + (f" {sp:5.2f}x" if sp else " " * 7))
        gain = r["variants"]["filtered"]["speedup_vs_dense"]
        ok = "" if r["filtered_equals_dense"] else "  MISMATCH"
        ok += "".join(f"  ({a} differs)" for a, v in r["answers_equal_dense"].items()
                      if not v and not a.startswith(EXACT_ARMS))
        before = r.get("candidates_per_query_before")
        others = "".join(f" ({v['mean']:.0f} {name})" for name, v in r.get("candidates_per_query_variants", {}).items())
        print(f"{r['nq']:>4} {r['n']:>7} {r['dtype']:>8} {r['candidates_per_query']['mean']:7.0f}"
              + (f" ({before['mean']:.0f} before)" if before else "") + others + "  " +
              "  ".join(cells) + f"  {gain['estimate']:.3f} [{gain['ci95'][0]:.3f}, {gain['ci95'][1]:.3f}]" + ok)
    for r in rows:
        if "kernels_alone" in r:
            for k, v in r["kernels_alone"].items():
                print(f"50K/100 {k:>9}: search {v['search_us']['median']:.1f} us, merge/select "
                      f"{v['merge_us']['median']:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
