"""Whether a change to the similarity kernels' sources changes their machine code: the SASS of the search kernel
(and of every kernel in its module) compiled from the installed kernel tree with ``--before DIR``'s files in place
and with ``--after DIR``'s (default: none, the installed tree as it is; each DIR laid out as csrc/kernels, holding only
the files to replace: _common.kernel_variant; ``--after csrc/kernels`` takes a working tree without reinstalling), for
a fixed set of builds that covers the defaults of each main loop and merge kind (builds()). No GPU is needed: NVRTC
compiles, cuobjdump disassembles.

Each build's module is compiled --compiles times (3) from each tree: NVRTC's SASS of a few kernels varies from compile
to compile of one source (the merge kernels of the cosine and l2 metrics, two variants each), and a function that
varied on either side is reported as unstable and left out of the comparison. A refactor or a comment-only change
whose SASS is identical in every build needs no GPU run to show it costs nothing; one that changes any build's SASS
does (a changed instruction order or register assignment can move a kernel's time). Results:
benchmarks/results/similarity_sass_compare[_TAG].json (per build: identical or not, the functions that differ or
vary, the search's instruction count and registers on each side); a table last. About a minute a build on two cores.

    git archive REV csrc/kernels | tar -x -C /tmp/old   # the other version's kernel tree
    python3 benchmarks/similarity_sass_compare.py --before /tmp/old/csrc/kernels [--after csrc/kernels]
                                                  [--builds NAME,...] [--compiles 3] [--tag T]

cuobjdump is looked up on PATH, then in the bin folder of the toolkit the compiler uses (next to
_core.default_cuda_include_dir(): TUNELAB_CUDA_INCLUDE, CUDA_HOME, CUDA_PATH or the build's), then in triton's
bundled binaries.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import headers_dir, int_in, kernel_variant, names_in, write_result  # noqa: E402


def builds() -> dict:
    """Name -> (config, dtype, metric, arch, trace): the defaults of each main loop and merge kind at 50K and 200K
    rows (dense, fused thread lists, shared lists, filtered, filter warps), fp16, bf16 and fp32, the diagnosis builds
    and sm_80 (mma.sync)."""
    from tunelab.ops import similarity as sim

    out = {}
    for nq, n, dt in ((100, 50_000, "float16"), (100, 50_000, "bfloat16"), (1, 50_000, "float16"),
                      (100, 200_000, "float16"), (1024, 50_000, "float16"), (100, 50_000, "float32"),
                      (1, 1_000_000, "float32"), (16, 20_000, "float16")):
        out[f"{nq}x{n}x{dt}"] = (sim.default_config(nq, 10, dt, d=768, n=n), dt, "ip", "sm_90", False)
    dense = sim.default_config(100, 10, "float16", d=768, n=50_000)
    out["merge6"] = (dict(dense, MERGE=6), "float16", "ip", "sm_90", False)
    out["merge7"] = (dict(dense, MERGE=7), "float16", "ip", "sm_90", False)
    out["merge6_bf16_cosine"] = (dict(sim.default_config(100, 10, "bfloat16", d=768, n=50_000), MERGE=6), "bfloat16",
                                 "cosine", "sm_90", False)
    out["dense_l2"] = (dense, "float16", "l2", "sm_90", False)
    out["dense_trace"] = (dense, "float16", "ip", "sm_90", True)
    out["merge7_trace"] = (dict(dense, MERGE=7), "float16", "ip", "sm_90", True)
    out["merge4"] = (dict(sim.default_config(100, 10, "float16", d=768, n=262_144), MERGE=4), "float16", "ip", "sm_90",
                     False)
    s80 = sim.default_config(100, 10, "float16", d=768, n=262_144, arch="sm_80")
    out["sm80_100x200000"] = (s80, "float16", "ip", "sm_80", False)
    out["sm80_1x50000"] = (sim.default_config(1, 10, "float16", d=768, n=50_000, arch="sm_80"), "float16", "ip",
                           "sm_80", False)
    for m in (0, 1, 2, 5):
        out[f"sm80_merge{m}"] = (dict(s80, MERGE=m), "float16", "ip", "sm_80", False)
    out["sm80_merge2_cosine"] = (dict(s80, MERGE=2), "float16", "cosine", "sm_80", False)
    return out


def find_cuobjdump() -> str:
    """The path of a cuobjdump; SystemExit naming the places looked in when there is none."""
    from tunelab import _core

    places = [shutil.which("cuobjdump"), str(Path(_core.default_cuda_include_dir()).parent / "bin" / "cuobjdump")]
    try:
        import triton

        places.append(str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"))
    except ImportError:
        pass
    for p in places:
        if p and Path(p).is_file() and os.access(p, os.X_OK):
            return p
    raise SystemExit(f"no cuobjdump: looked in {', '.join(p for p in places if p)}; install the CUDA toolkit's "
                     "cuobjdump (or put its bin folder on PATH, or install triton, which bundles one)")


def sass_of(build, headers: Path | None, cuobjdump: str) -> dict:
    """The disassembly of one build's module (every kernel in it) from the installed tree, or with ``headers``."""
    from tunelab.ops import similarity as sim

    cfg, dtype, metric, arch, trace = build
    with kernel_variant(headers=headers):
        cs = sim.compile_search(cfg, dtype=dtype, metric=metric, arch=arch, use_cache=False, trace=trace)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cs.result.cubin)
        f.flush()
        text = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    functions = {part.split("\n", 1)[0].strip(): hashlib.md5(part.encode()).hexdigest()
                 for part in text.split("Function : ")[1:]}
    search = [part for part in text.split("Function : ") if part.startswith("_ZN7tunelab3sim15similarity_topk")]
    return {"functions": functions, "search_instructions": sum(part.count(";") for part in search),
            "registers": cs.resources.registers, "spill_store_bytes": cs.resources.spill_store_bytes}


def compare(build, before: Path, after: Path | None, cuobjdump: str, compiles: int = 3) -> dict:
    """One build's verdict from ``compiles`` compiles of its module from each tree. NVRTC's SASS of a few kernels
    varies from compile to compile of one source (the merge kernels of the cosine and l2 metrics: two variants), so a
    function is compared by the set of variants each tree gave: one that varied on either side is listed as unstable
    and not compared; any other must be the same on both sides."""
    runs = {side: [sass_of(build, tree, cuobjdump) for _ in range(compiles)]
            for side, tree in (("before", before), ("after", after))}
    variants = {side: {} for side in runs}
    for side, rs in runs.items():
        for r in rs:
            for f, digest in r["functions"].items():
                variants[side].setdefault(f, set()).add(digest)
    names = set(variants["before"]) | set(variants["after"])
    unstable = sorted(f for f in names if any(len(variants[side].get(f, ())) > 1 for side in variants))
    differ = sorted(f for f in names if f not in unstable and variants["before"].get(f) != variants["after"].get(f))
    return {"identical": not differ, "differ": differ, "unstable": unstable, "compiles_per_side": compiles,
            "before": runs["before"][0], "after": runs["after"][0]}


def main() -> int:
    all_builds = builds()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=headers_dir(), required=True,
                    help="directory laid out as csrc/kernels with the other version's files (e.g. from git archive)")
    ap.add_argument("--after", type=headers_dir(), default=None,
                    help="directory laid out as csrc/kernels with this version's files (default: the installed tree)")
    ap.add_argument("--builds", type=names_in(tuple(all_builds), "--builds", "merge6,dense_trace"),
                    default=list(all_builds), help="comma-separated builds (default: all of them)")
    ap.add_argument("--compiles", type=int_in(1, 10, "compiles of each build from each tree"), default=3,
                    help="compiles of each build from each tree (3): NVRTC's output of a few kernels varies")
    ap.add_argument("--tag", help="suffix of the result file's name")
    args = ap.parse_args()
    cuobjdump = find_cuobjdump()
    rows = {}
    for name in args.builds:
        rows[name] = r = compare(all_builds[name], args.before, args.after, cuobjdump, args.compiles)
        print(f"{name:>24}: {'identical' if r['identical'] else 'DIFFERENT'}"
              + (f" ({len(r['unstable'])} function(s) unstable from compile to compile)" if r["unstable"] else ""),
              flush=True)
    same = sum(r["identical"] for r in rows.values())
    path = write_result("similarity_sass_compare", {
        "before_dir": str(args.before), "after_dir": str(args.after), "compiles_per_side": args.compiles,
        "builds": rows, "identical": same, "different": len(rows) - same}, args.tag)
    print(f"wrote {path}")
    print(f"{same} of {len(rows)} builds identical")
    for name, r in rows.items():
        if not r["identical"]:
            b, a = r["before"], r["after"]
            print(f"  {name}: {', '.join(r['differ'])[:200]}; search instructions {b['search_instructions']} -> "
                  f"{a['search_instructions']}, registers {b['registers']} -> {a['registers']}, spills "
                  f"{b['spill_store_bytes']} -> {a['spill_store_bytes']} bytes")
    return 0 if same == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
