"""Build and run the similarity kernels on the CPU emulator over a matrix of configs and scenarios.

    python3 tests/similarity_emulator/run_emulator.py [--quick] [--jobs N] [--only 0,15] [--define MACRO=VALUE]
        [--sched-seed N]

Each kernel instance (a traits tuple) is one binary; each scenario one run. A run passes when the kernel's
results match the float64 reference (exactly, tie rule included, for integer-valued inputs) and the emulator
saw no shared-memory race, no premature read of cp.async data and no out-of-bounds copy (configs with a TMA
producer, MMA 2 and 3, synchronize by mbarriers and named barriers, which the race detector does not order: their
runs report races=unchecked and check the rest). --sched-seed N (EMU_SCHED_SEED in a binary's environment) lets
warps drift apart (tests/emulator/emu_runtime.cpp), so that an order a kernel only assumes shows up. Used by
tests/test_similarity_cpu.py (a quick subset) and by hand after kernel changes (the full matrix); needs g++ and the
tunelab package installed (tunelab.paths reads the kernels' constants, tunelab.kernel the --define syntax).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from tunelab.paths import header_constant

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent.parent / "csrc" / "kernels"
RUNTIME = HERE.parent / "emulator"  # runtime and shims shared with the attention emulator


class TopkConfig(NamedTuple):
    """One kernel instance: TopkTraits' template parameters (csrc/kernels/similarity/topk.cuh), in their order."""
    dtype: int  # 0 fp16, 1 bf16, 2 fp32
    metric: int  # 0 ip, 1 cosine, 2 l2
    block_n: int
    block_q: int
    block_k: int
    warps_n: int
    warps_q: int
    stages: int
    vec: int
    merge: int
    epi_rows: int
    min_blocks: int
    mma: int = 0  # 0 mma.sync, 1 wgmma, 2 and 3 a TMA producer (3: ping-pong), 4 FFMA


class TopkScenario(NamedTuple):
    """One run of a top-k binary: its command-line arguments (emu_similarity.cpp), d for 16-bit inputs."""
    nq: int
    n: int
    d16: int
    k: int
    splits: int
    chunks: int
    data: int
    seed: int
    land_late: int


class GramConfig(NamedTuple):
    """One Gram kernel instance: GramTraits' template parameters (csrc/kernels/similarity/gram.cuh), in order."""
    dtype: int  # 0 fp16, 1 bf16, 2 fp32, 3 complex64
    tile_m: int
    tile_n: int
    tile_k: int
    warps_m: int
    warps_n: int
    stages: int
    vec: int
    symmetric: int
    mirror: int


# TopkConfig fields in order: (DTYPE, METRIC, BLOCK_N, BLOCK_Q, BLOCK_K, WARPS_N, WARPS_Q, STAGES, VEC, MERGE,
# EPI_ROWS, MIN_BLOCKS[, MMA])
TOPK_CONFIGS = [TopkConfig(*c) for c in [
    (0, 0, 64, 16, 32, 2, 2, 3, 16, 0, 128, 1),     # fp16 ip, 64-byte rows
    (0, 1, 128, 24, 64, 4, 1, 2, 16, 1, 64, 2),     # fp16 cosine, odd n8 count (ldmatrix.x2), bitonic, 2 passes
    (1, 2, 64, 8, 128, 4, 1, 4, 8, 2, 128, 1),      # bf16 l2, one n8 column (nq = 1 layout), 256-byte rows, 8-byte copies
    (2, 0, 64, 16, 16, 2, 2, 3, 16, 0, 128, 1),     # fp32 (3xTF32) ip
    (2, 1, 128, 32, 32, 2, 2, 3, 4, 2, 128, 1),     # fp32 cosine, 4-byte copies
    (2, 2, 256, 16, 32, 4, 1, 2, 16, 1, 128, 1),    # fp32 l2, BLOCK_N 256: two epilogue passes
    (0, 2, 256, 16, 32, 1, 2, 2, 16, 0, 64, 1),     # fp16 l2, one warp's rows spanning all four epilogue passes
    (1, 0, 64, 104, 32, 4, 1, 2, 16, 2, 128, 1),    # bf16 ip, 13 n8 tiles per warp (nq = 100 layout)
    # wgmma main loop (MMA = 1): descriptors, swizzle, one group in flight, prefetch distance STAGES - 2
    (0, 0, 128, 24, 64, 4, 1, 3, 16, 2, 128, 1, 1),   # fp16 ip, one warpgroup, two m64 blocks
    (1, 1, 256, 16, 64, 8, 1, 4, 16, 0, 64, 1, 1),    # bf16 cosine (norms by ldmatrix), two warpgroups, 4 passes
    (0, 2, 64, 40, 64, 4, 1, 3, 8, 1, 128, 1, 1),     # fp16 l2, one m64 block, 8-byte copies
    # thread lists (MERGE 3: k <= 16, 4: k <= 32): parts per column 1, 2 and 4, one and several epilogue passes
    (0, 0, 128, 112, 64, 8, 1, 4, 16, 3, 128, 1, 1),  # fp16 ip, the nq = 100 default: 2 parts of 64 rows
    (1, 1, 256, 24, 64, 8, 1, 3, 16, 4, 64, 1, 1),    # bf16 cosine, wgmma, 4 parts of 16 rows, 4 passes
    (2, 2, 64, 16, 32, 2, 2, 3, 16, 3, 128, 1),       # fp32 l2, mma.sync, 4 parts of 16 rows
    (0, 1, 128, 64, 64, 2, 1, 2, 16, 4, 128, 1),      # fp16 cosine, one part per column (64 threads)
    # 32 accumulator holders per column and 16-entry lists: the bound pass selects per thread (kLaneBounds)
    (0, 2, 64, 40, 32, 4, 1, 3, 16, 3, 64, 1),        # fp16 l2, 4 warps of 16 rows, 2 parts of 32 rows
    # dense (MERGE=5): every key to the [nq][N] matrix, then the select kernel (one-corpus scenarios, k <= 32)
    (0, 0, 64, 16, 32, 2, 2, 3, 16, 5, 128, 1),       # fp16 ip, mma.sync
    (1, 2, 128, 24, 64, 4, 1, 3, 16, 5, 128, 1, 1),   # bf16 l2, wgmma (norms by ldmatrix)
    (2, 1, 64, 16, 32, 2, 2, 3, 4, 5, 128, 1),        # fp32 cosine, 4-byte copies (odd d)
    # fp32 with more than 112 accumulator and norm registers a thread: the cvt tf32 split (WarpMma::kCvtSplit)
    (2, 1, 128, 64, 32, 2, 1, 2, 16, 2, 128, 1),      # fp32 cosine, 64 x 64 warp tiles: 128 accumulators
    # filtered (MERGE=6): the keys that reach their block's bar (first-tile bounds) to the split's segment of the
    # candidate rows, then the select kernel over them (one-corpus scenarios, k <= 32)
    (0, 0, 64, 16, 32, 2, 2, 3, 16, 6, 128, 1),       # fp16 ip, mma.sync: 16 holders per column (no bound for k > 16)
    (1, 2, 128, 24, 64, 8, 1, 3, 16, 6, 128, 1, 1),   # bf16 l2, wgmma, 64 holders: a lane offers two holders' maxima
    (2, 1, 128, 32, 32, 4, 2, 2, 16, 6, 64, 1),       # fp32 cosine, the fp32 dense default's warps: 32 holders
    (0, 2, 64, 40, 32, 4, 1, 3, 16, 6, 64, 1),        # fp16 l2, 32 holders: one thread selects a column's bound
    # fp32 products by FFMA (MMA = 4): 1, 2, 4 or 8 query columns per warp by the scenarios' nq, then the quad's sums
    # laid out as the m16n8 accumulators every epilogue reads
    (2, 0, 256, 8, 64, 8, 1, 3, 16, 2, 128, 1, 4),    # fp32 ip, the nq <= 8 default's layout (hybrid merge)
    (2, 2, 64, 16, 32, 2, 2, 3, 16, 5, 128, 1, 4),    # fp32 l2, dense, two warps along the queries (one n8 tile each)
    (2, 1, 128, 8, 16, 4, 1, 2, 4, 3, 64, 1, 4),      # fp32 cosine, thread lists, 64-byte slices, 4-byte copies
    (2, 0, 128, 8, 32, 4, 1, 2, 16, 6, 64, 1, 4),     # fp32 ip, filtered: 32 holders
    # a TMA producer warpgroup (MMA 2, 3: mbarriers, named barriers, TMA boxes; races unchecked, see emu_runtime.h)
    (0, 0, 128, 104, 64, 8, 1, 4, 16, 5, 64, 1, 3),   # fp16 ip, ping-pong dense: the 50K / 100 default
    (0, 0, 128, 104, 64, 8, 1, 4, 16, 6, 64, 1, 3),   # fp16 ip, ping-pong filtered: words and the bounded wait
    (1, 1, 192, 72, 64, 8, 1, 4, 16, 3, 64, 1, 3),    # bf16 cosine, ping-pong thread lists, 192-row tiles
    (0, 2, 128, 32, 64, 8, 1, 5, 16, 2, 128, 1, 2),   # fp16 l2, MMA=2: two warpgroups split a tile, shared lists
    # filter warps (MERGE=7): the MMA warps copy each tile to shared memory, the producer warpgroup's spare warps
    # filter it into MERGE=6's candidate rows (score tile handover by mbarriers, their bars staged ahead)
    (0, 0, 128, 104, 64, 8, 1, 4, 16, 7, 64, 1, 3),   # fp16 ip, ping-pong: the 50K / 100 candidate default
    (1, 2, 64, 40, 64, 4, 1, 3, 16, 7, 128, 1, 2),    # bf16 l2, MMA=2 with one MMA warpgroup, 2 keys a filter lane
    (0, 1, 192, 24, 64, 8, 1, 4, 16, 7, 64, 1, 3),    # fp16 cosine, ping-pong 192-row tiles, 6 keys a filter lane
]]
#: run in the quick matrix (tests/test_similarity_cpu.py): the first four mma.sync configs, the first wgmma one,
#: the first two thread-list ones, the per-thread bound selection, two dense ones, the cvt tf32 split (19: the
#: Veltkamp split runs in 3), three filtered ones (the last: its per-thread bound selection, k up to 32) and the
#: FFMA main loop with the nq <= 8 default's layout; the ping-pong dense, filtered and thread-list configs (the sm_90
#: defaults at nq = 100 with and without a corpus size); two filter-warp configs (ping-pong and MMA=2)
QUICK_CONFIGS = [0, 1, 2, 3, 8, 11, 12, 15, 16, 17, 19, 20, 21, 23, 24, 28, 29, 30, 32, 33]

# TopkScenario fields in order: (nq, n, d16, k, splits, chunks, data, seed, land_late)
TOPK_SCENARIOS = [TopkScenario(*sc) for sc in [
    (20, 300, 40, 10, 3, 1, 0, 1, 1),
    (20, 300, 40, 10, 3, 1, 1, 2, 1),       # exact ties
    (7, 260, 72, 10, 2, 1, 2, 3, 1),        # increasing similarity: every row passes the filter
    (9, 300, 40, 10, 3, 1, 3, 4, 1),        # NaN rows never enter
    (20, 333, 40, 10, 4, 3, 0, 5, 1),       # streamed: 3 chunks, running list merged in place
    (11, 290, 40, 10, 3, 3, 1, 6, 0),       # streamed, exact ties, copies land at issue
    (5, 700, 40, 40, 3, 1, 0, 7, 1),        # k > 32: no lane-max bound
    (5, 700, 40, 40, 2, 2, 1, 8, 1),
    (33, 150, 40, 1, 2, 1, 0, 9, 1),        # k = 1
    (3, 90, 40, 90, 2, 1, 1, 10, 1),        # k = n
    (4, 400, 40, 32, 3, 1, 1, 11, 1),       # k = 32: the bound's edge
    (6, 500, 40, 20, 2, 1, 0, 25, 1),       # 16 < k < 32: the filtered search's bound selection by negation
    (2, 600, 40, 300, 2, 1, 0, 12, 1),      # k = 300 (> 256: 4-warp merge kernel)
    (5, 4000, 40, 5, 1, 1, 0, 15, 1),       # many tiles per split: the epilogue pre-check skips most tiles
    (4, 3000, 40, 8, 1, 1, 1, 16, 1),       # ... with exact ties
    (13, 700, 40, 10, 1, 0, 1, 13, 1),      # unfused ablation: GEMM + dense merge (ip configs only), exact ties
    (5, 333, 40, 40, 1, 0, 0, 14, 1),
    (40, 250, 40, 10, 1, 1, 0, 17, 1),      # one split of 1-4 tiles: the first tile's bound decides the answer
    (40, 250, 40, 16, 2, 1, 0, 18, 1),      # ... at a thread list's capacity (MERGE 3)
    # the sorted-list merge (merge kind 4) with more lists than k, so the list heads bound the candidates
    (6, 2600, 40, 5, 40, 1, 0, 20, 1),      # 40 lists of 5
    (6, 2600, 40, 8, 40, 2, 1, 21, 1),      # streamed (the running list is one more), exact ties at the bound
    (3, 17920, 40, 3, 280, 1, 0, 23, 1),    # 280 lists (64-row tiles): a second batch of list heads (merge_sorted.cuh)
    (3, 2500, 40, 10, 2, 1, 4, 24, 1),      # every key ties: queues overflow, the select kernel raises its bar
    (4, 5000, 72, 10, 2, 1, 2, 26, 1),      # every row passes: 2500 candidates a segment, the best appended last
    # 100 queries (configs of BLOCK_Q > FILTER_THREADS only), 21 tiles in 7 splits of 3 (10 asked): MERGE=7's
    # filter threads with two query columns, as at 50K / 100, their words and bars past the first tile
    (100, 2600, 40, 10, 10, 1, 1, 27, 1),
]]
QUICK_SCENARIOS = [0, 1, 2, 4, 6, 9, 12, 14, 16, 19, 20, 21, 24]
#: scenarios run only for configs whose query tile passes FILTER_THREADS, where they cover what the others do not
WIDE_SCENARIOS = [24]
#: MERGE=7's filter threads (32 * kFilterWarpCount of params.cuh): a query tile wider than this gives some of them two
#: columns, which only the WIDE_SCENARIOS reach
FILTER_THREADS = 32 * header_constant("kFilterWarpCount", "similarity/params.cuh", KERNELS)  # this checkout's tree

# GramConfig fields in order: (DTYPE, TILE_M, TILE_N, TILE_K, WARPS_M, WARPS_N, STAGES, VEC, SYMMETRIC, MIRROR)
GRAM_CONFIGS = [GramConfig(*g) for g in [
    (0, 64, 64, 32, 2, 2, 3, 16, 0, 0),
    (0, 64, 64, 64, 2, 2, 2, 16, 1, 0),
    (2, 32, 32, 16, 2, 2, 3, 16, 1, 1),
    (3, 32, 32, 16, 1, 2, 3, 16, 1, 1),
    (3, 64, 32, 32, 2, 1, 2, 8, 0, 0),
    (1, 64, 64, 32, 4, 1, 2, 16, 1, 0),
]]
GRAM_SCENARIOS = [(75, 40, 1, 1), (130, 24, 2, 0)]  # (n, dim, seed, land_late)


#: The select kernel's shared-memory window of row entries in the emulator's builds (51 Ki on GPUs): scenario rows of
#: up to 2048 entries stay in it, longer ones are read from global memory past it.
SELECT_WINDOW = 2048


def _d_for(dtype: int, vec: int, d16: int) -> int:
    """A feature dim close to d16 that the config's copy width allows (d * element bytes % VEC == 0)."""
    eb = 2 if dtype in (0, 1) else 4
    d = d16
    while (d * eb) % vec:
        d += 1
    if vec == 4 and eb == 4:
        d = d16 + 1  # fp32 with 4-byte copies takes any d: use an odd one
    return d


def _build(defn: str, value: tuple, out_dir: Path, compiler: str, defines: dict[str, str] | None = None,
           kernels: Path = KERNELS) -> Path:
    extra = [f"-D{k}={v}" for k, v in sorted((defines or {}).items())]
    tag = hashlib.sha1(f"{defn}={value} {extra} {kernels}".encode()).hexdigest()[:10]
    exe = out_dir / f"emu_{defn.lower()}_{tag}"
    if exe.exists():
        return exe
    cmd = [compiler, "-std=c++17", "-O1", "-w", f"-I{HERE / 'shim'}", f"-I{RUNTIME / 'shim'}", f"-I{RUNTIME}",
           f"-I{HERE}", f"-I{kernels}", f"-D{defn}={','.join(map(str, value))}",
           f"-DTUNELAB_SIM_SELECT_WINDOW={SELECT_WINDOW}", *extra, str(HERE / "emu_similarity.cpp"),
           str(RUNTIME / "emu_runtime.cpp"), "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"build of {defn}={value} failed:\n{r.stderr[-3000:]}")
    return exe


def _run(exe: Path, args: list, sched_seed: int = 0) -> tuple[bool, str]:
    env = dict(os.environ, EMU_SCHED_SEED=str(sched_seed)) if sched_seed else None
    r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=600, env=env)
    lines = (r.stdout + r.stderr).strip().splitlines()
    last = lines[-1] if lines else f"(no output, exit {r.returncode})"
    ok = r.returncode == 0 and (last.startswith("RESULT ok=1") or last.startswith("RESULT skip"))
    return ok, "\n".join(lines[-4:]) if not ok else last


def topk_run_args(cfg: TopkConfig, si: int) -> list | None:
    """The run arguments of TOPK_SCENARIOS[si] for the config ``cfg`` (its feature dim fitted to the config), or None
    where the pair is not run: a WIDE_SCENARIOS entry for a config of BLOCK_Q <= FILTER_THREADS, the unfused ablation
    (chunks 0) for a metric other than the inner product."""
    if si in WIDE_SCENARIOS and cfg.block_q <= FILTER_THREADS:
        return None
    sc = TOPK_SCENARIOS[si]
    if sc.chunks == 0 and cfg.metric != 0:
        return None  # the unfused ablation is inner product only
    d16 = sc.d16
    if cfg.mma == 1:
        # wgmma: several 64-element slices per tile (and a short last one), so that an MMA group is in
        # flight across the barrier that precedes a stage's refill
        d16 = max(d16, 136)
    if cfg.mma in (2, 3):
        # a TMA producer: more slices per tile than stages (and a short last one), so that the ring wraps
        # within a tile and a wait on the wrong phase of a stage reads a slice that is not there
        d16 = max(d16, 328)
    d = _d_for(cfg.dtype, 16 if sc.chunks == 0 else cfg.vec, d16)  # (the unfused ablation's GEMM copies 16 bytes)
    return list(sc._replace(d16=d))  # the binary's arguments are the scenario's fields, with d for this dtype


def jobs_for(quick: bool, only: list[int] | None = None) -> list[tuple[str, tuple, list]]:
    """(define, traits, run args) for every run of the matrix (``only``: those TOPK_CONFIGS indices, no Gram); the
    pairs topk_run_args() skips are left out."""
    out = []
    scen_ids = QUICK_SCENARIOS if quick else range(len(TOPK_SCENARIOS))
    cfgs = [TOPK_CONFIGS[i] for i in QUICK_CONFIGS] if quick else TOPK_CONFIGS
    if only is not None:
        cfgs = [TOPK_CONFIGS[i] for i in only]
    for cfg in cfgs:
        for si in scen_ids:
            args = topk_run_args(cfg, si)
            if args is not None:
                out.append(("EMU_TOPK", cfg, args))
    gcfgs = [] if only is not None else GRAM_CONFIGS[:3] if quick else GRAM_CONFIGS
    for cfg in gcfgs:
        for (n, dim, seed, late) in (GRAM_SCENARIOS[:1] if quick else GRAM_SCENARIOS):
            eb = 2 if cfg.dtype in (0, 1) else 4
            per = 2 if cfg.dtype == 3 else 1
            while (dim * per * eb) % cfg.vec:
                dim += 1
            out.append(("EMU_GRAM", cfg, [n, dim, seed, late]))
    return out


def run_matrix(quick: bool = False, jobs: int | None = None, build_dir: str | None = None,
               compiler: str | None = None, log=print, only: list[int] | None = None,
               defines: dict[str, str] | None = None, sched_seed: int = 0, kernels: Path = KERNELS) -> list[str]:
    """Build and run the matrix (every kernel compiled with ``defines`` besides its own, e.g. an experiment macro of
    csrc/kernels/similarity/params.cuh, from the kernel tree ``kernels``; ``sched_seed`` not 0: warps drift apart,
    EMU_SCHED_SEED); returns the failure reports (empty when everything passed)."""
    compiler = compiler or os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (g++) found for the emulator")
    out_dir = Path(build_dir or tempfile.mkdtemp(prefix="tunelab-simemu-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = jobs_for(quick, only)
    jobs = jobs or os.cpu_count() or 2
    binaries: dict[tuple, Path] = {}
    failures: list[str] = []
    with cf.ThreadPoolExecutor(jobs) as pool:
        builds = {(d, c): pool.submit(_build, d, c, out_dir, compiler, defines, Path(kernels))
                  for d, c in {(d, c) for d, c, _ in todo}}
        for key, fut in builds.items():
            try:
                binaries[key] = fut.result()
            except RuntimeError as exc:
                failures.append(str(exc))
                log(f"FAIL {exc}")
        runs = {}
        for d, c, args in todo:
            if (d, c) in binaries:
                runs[pool.submit(_run, binaries[(d, c)], args, sched_seed)] = (d, c, args)
        executed: set = set()
        for fut in cf.as_completed(runs):
            d, c, args = runs[fut]
            ok, text = fut.result()
            if not (ok and text.startswith("RESULT skip")):  # failed runs ran too
                executed.add((d, c))
            label = f"{d}={','.join(map(str, c))} args={' '.join(map(str, args))}"
            if ok:
                log(f"ok   {label}: {text}")
            else:
                failures.append(f"{label}:\n{text}")
                log(f"FAIL {label}:\n{text}")
    for d, c in binaries:  # a config whose every run was skipped (smem, k above its capacity) tested nothing
        if (d, c) not in executed:
            failures.append(f"{d}={','.join(map(str, c))}: every run was skipped")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset (what the CPU test suite runs)")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--build-dir", default=None)
    ap.add_argument("--only", default=None,
                    help=f"comma-separated TOPK_CONFIGS indices (0..{len(TOPK_CONFIGS) - 1}) to run alone, no Gram")
    ap.add_argument("--sched-seed", type=int, default=0,
                    help="not 0: warps drift apart by this seed's schedule (EMU_SCHED_SEED, emu_runtime.cpp)")
    ap.add_argument("--define", action="append", default=[], metavar="MACRO=VALUE",
                    help="compile every kernel with this macro (repeatable), e.g. TUNELAB_SIM_FILTER_WAIT_NS=0")
    args = ap.parse_args()
    from tunelab.errors import ConfigError
    from tunelab.kernel import parse_define

    try:
        defines = dict(parse_define(text) for text in args.define)
    except ConfigError as exc:
        ap.error(f"--define: {exc}")
    only = None
    if args.only is not None:
        try:
            only = [int(x) for x in args.only.split(",")]
        except ValueError:
            ap.error(f"--only {args.only!r}: expected comma-separated integers")
        bad = [i for i in only if not 0 <= i < len(TOPK_CONFIGS)]
        if bad:
            ap.error(f"--only {bad}: TOPK_CONFIGS indices are 0..{len(TOPK_CONFIGS) - 1}")
    failures = run_matrix(args.quick, args.jobs, args.build_dir, only=only, defines=defines,
                          sched_seed=args.sched_seed)
    print(f"\n{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
