"""Where the fused top-k search spends its time (issue 5's diagnosis), on the GPU.

For each shape (fp16, d = 768, k = 10, inner product) and each config variant, times with the core's protocol
(L2 flush, CUDA events, median of the samples):

  search    the search kernel alone (grid: query tiles x splits), random normal queries;
  mainloop  the same kernel on all-zero queries: every key is 0, so after a split's first tile its list holds the
            split's first k rows and no later key passes the pre-check (ties go to the smaller index); the top-k
            epilogue runs once per split, and the time is the GEMM main loop plus that one epilogue. That first
            epilogue is the most expensive one possible (every key ties, so every key enters the merge), so the
            figure means "main loop" only when a split has many tiles (N=1M and up); at N=50K (2 tiles per split)
            it exceeds the search time and says nothing;
  loop      the same kernel on all-NaN queries: every key is NaN, which never passes the pre-check nor enters a
            list, so no tile runs the top-k epilogue past its pre-check, with any MERGE: the main loop's time. (The
            result is empty lists; only the time is kept.)
  merge     the merge kernel alone over the lists the search just wrote: merge_lists / merge_shared /
            merge_sorted the thread-list (kind 0), shared-list (kind 2) and sorted-list (kind 4) merges on the same
            lists, and merge the one the op picks (merge_kind; params.cuh: over the search's lists with k <= 32 the
            sorted-list merge). (Before 2026-11-25 these were timed on the lists the all-NaN search had left:
            6.7 us for the shared-list merge at nq = 100 against 15-16 on real lists, similarity_gap.py);
  total     the search and then the merge, as the op launches them.
            (A programmatic dependent launch of the merge, griddepcontrol, was measured 15-20 us slower than this
            at N = 50K and 1M, nq = 100, probe at 4ac82fb, and dropped; probably the merge blocks, scheduled
            early, piled onto the first SMs the search freed, up to 8 per SM, instead of one per SM. The plain
            launch's latency is already hidden behind the search.)
  torch     torch.topk(Q @ C.T) on the same inputs, once per shape.

The difference search - loop is what the per-tile top-k epilogue costs (the table's "epilogue"). Results go to
benchmarks/results/similarity_probe.json with the environment fingerprint; a table is printed last.

  python3 benchmarks/similarity_probe.py [--shapes 100x50000,100x10000000]
      [--variants sync|wgmma|tma|pingpong|cluster|prefetch|merge|stream|filtered|all] [--only 'NAME;NAME']
  python3 benchmarks/similarity_probe.py --ncu 100x50000   # one search launch per variant, for ncu
  python3 benchmarks/similarity_probe.py --variants stream --only default --trace 100x50000   # block timelines
  python3 benchmarks/similarity_probe.py --variants merge --dtype float32 --shapes 1x50000,1x1000000,1x10000000 \
      --from-study benchmarks/results/tune_similarity_1x10000000x768x10_fp32.json   # a study's configs elsewhere

``--variants tma`` probes the TMA-fed wgmma main loop (MMA=2) into similarity_probe_tma.json, ``--variants
pingpong`` its ping-pong form (MMA=3) into similarity_probe_pingpong.json, ``--variants cluster`` thread-block
clusters sharing the query slices (CLUSTER 2, 4) into similarity_probe_cluster.json, ``--variants prefetch`` the
L2 prefetch of later corpus tiles (PREFETCH 1, 2) into similarity_probe_prefetch.json, ``--variants stream`` what
bounds the TMA ring's corpus stream (ring depth, tile height, a cluster; at nq = 8 the queries cost almost nothing)
into similarity_probe_stream.json, ``--variants filtered`` the dense search (MERGE=5) and the filtered one (MERGE=6)
on the same config (with ``--trace``: where the filtered epilogue spends its time) into
similarity_probe_filtered.json. Every row also records the fraction of
its indices equal to the first variant's (1.0 expected: the same products).

``--trace NQxN`` runs each variant's diagnosis build (compile_search(trace=True): every block writes the
%globaltimer of its events, see TopkBlock::trace in csrc/kernels/similarity/topk.cuh) once after an L2 flush
and prints when each event happens across the blocks (median, min, max, in us from the first block's start)
and how long each tile group's turns take (main loop, bound pass and pre-check, queue insertion), and for the
filtered search (MERGE=6) the steps of each group's first-tile epilogue (maxima, bounds, words, wait, stage, count,
append), into similarity_probe_SET_trace.json (thread-list configs with a TMA producer, MMA 2 and 3).
``--define MACRO=VALUE`` (repeatable) compiles every variant with that macro, e.g. the filtered search's wait
(params.cuh):

  python3 benchmarks/similarity_probe.py --variants filtered --only filtered --trace 100x50000 \
      --define TUNELAB_SIM_FILTER_WAIT_NS=0 --tag nowait_h200

``--variants wgmma`` probes the wgmma main loop (MMA=1, sm_90) against the default and writes
benchmarks/results/similarity_probe_wgmma.json instead; ``--variants merge`` the running top-k strategies (thread
lists, MERGE 3 and 4, against the shared lists merged by a warp, MERGE 0..2) on the default tiling, into
similarity_probe_merge.json. With thread lists the all-zero "mainloop" run is no main loop: every tied key passes
the pre-check (a bar of key >= k-th key), so every tile runs the store-and-scan epilogue.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (DRAW_ORDERS, current_stream, draw_search_inputs, kernel_variant, summarize,  # noqa: E402
                     write_result)
from tunelab import _core  # noqa: E402
from tunelab.errors import ConfigError  # noqa: E402
from tunelab.kernel import parse_define  # noqa: E402

D, K = 768, 10


def wgmma_variants(nq: int) -> list[tuple[str, dict, int | None]]:
    """The wgmma main loop (MMA=1: 128-byte slices, WARPS_Q=1) in one or two warpgroups, tile heights and depths."""
    wg = {"MMA": 1, "BLOCK_K": 64, "WARPS_Q": 1}
    sync = ({"MMA": 0, "BLOCK_N": 256, "WARPS_N": 4, "WARPS_Q": 2, "STAGES": 3, "EPI_ROWS": 128} if nq <= 112 else
            {"MMA": 0, "BLOCK_N": 128, "WARPS_N": 2, "WARPS_Q": 4, "STAGES": 3, "EPI_ROWS": 128})
    v = [("default", {}, None), ("mma.sync tiling", sync, None)]
    for bn, wn, st, epi in ((256, 8, 3, 64), (256, 8, 3, 128), (128, 8, 4, 64), (128, 8, 4, 128), (128, 8, 3, 128),
                            (128, 4, 4, 128), (64, 4, 4, 128)):
        v.append((f"wg BN={bn},WN={wn},S={st},E={epi}",
                  {**wg, "BLOCK_N": bn, "WARPS_N": wn, "STAGES": st, "EPI_ROWS": epi}, None))
    v.append(("wg BN=128,WN=8,S=4 2x", {**wg, "BLOCK_N": 128, "WARPS_N": 8, "STAGES": 4, "EPI_ROWS": 128}, 264))
    return v


def tma_variants(nq: int) -> list[tuple[str, dict, int | None]]:
    """The TMA-fed wgmma main loop (MMA=2: a producer warpgroup, mbarrier ring) against the cp.async wgmma loop
    (MMA=1, the sm_90 default before MMA=2, named explicitly: the default is MMA=2 now): the same tiling, deeper
    rings, and 256-row tiles (half the query bytes per corpus row)."""
    tma = {"MMA": 2, "BLOCK_K": 64, "WARPS_Q": 1, "WARPS_N": 8}
    mma1 = {**tma, "MMA": 1, "BLOCK_N": 128, "STAGES": 4, "EPI_ROWS": 64 if nq > 112 else 128}
    v = [("MMA=1", mma1, None), ("tma same tiling", {**mma1, "MMA": 2}, None)]
    for bn, st, epi in ((128, 5, 128), (256, 4, 64), (256, 3, 128), (256, 3, 64)):
        v.append((f"tma BN={bn},S={st},E={epi}", {**tma, "BLOCK_N": bn, "STAGES": st, "EPI_ROWS": epi}, None))
    v.append(("tma BN=256,S=4,E=64,M2", {**tma, "BLOCK_N": 256, "STAGES": 4, "EPI_ROWS": 64, "MERGE": 2}, None))
    return v


def merge_variants(nq: int) -> list[tuple[str, dict, int | None]]:
    """The running top-k strategies on the default tiling: thread lists (3: 16 entries, 4: 32) and shared lists
    (0 rank, 1 bitonic, 2 hybrid)."""
    return [("default", {}, None)] + [(f"MERGE={m}", {"MERGE": m}, None) for m in (3, 4, 2, 0, 1)]


def variants(nq: int) -> list[tuple[str, dict, int | None]]:
    """(name, config overrides on the default, forced splits or None) to probe for nq queries."""
    v = [("default", {}, None)]
    for s in (132, 264, 396):
        v.append((f"splits={s}", {}, s))
    v += [
        ("BLOCK_N=128,WARPS_N=2", {"BLOCK_N": 128, "WARPS_N": 2}, None),
        ("BLOCK_N=128,WARPS_N=4", {"BLOCK_N": 128, "WARPS_N": 4}, None),
        ("BLOCK_N=64,WARPS_N=2", {"BLOCK_N": 64, "WARPS_N": 2}, None),
        ("EPI_ROWS=64", {"EPI_ROWS": 64}, None),
        ("MERGE=0", {"MERGE": 0}, None),
        ("MERGE=1", {"MERGE": 1}, None),
        ("BLOCK_K=32", {"BLOCK_K": 32}, None),
        ("BLOCK_K=128,STAGES=2", {"BLOCK_K": 128, "STAGES": 2}, None),
        ("STAGES=4", {"STAGES": 4}, None),
        ("WARPS_Q=1", {"WARPS_Q": 1}, None),
        ("WARPS_Q=4,WARPS_N=2", {"WARPS_Q": 4, "WARPS_N": 2}, None),
    ]
    return v


def pingpong_variants(nq: int) -> list[tuple[str, dict, int | None]]:
    """Ping-pong warpgroups (MMA=3: each MMA warpgroup owns every other tile, so one's top-k epilogue overlaps the
    other's MMAs) against the cooperative TMA loop (MMA=2, both warpgroups on every tile; the default before MMA=3,
    named explicitly): 128-row tiles (a warpgroup's 2 m64 blocks x BLOCK_Q columns) with deeper or shallower rings,
    192-row tiles (3 m64 blocks; BLOCK_Q = nq rounded up to 8, or 128 above 112 queries: 156 or 192 accumulators
    per thread, more than the space admits: ptxas spills a few words at 104 queries) and 256-row tiles where the
    accumulators allow them (BLOCK_Q <= 64)."""
    tma = {"MMA": 2, "BLOCK_K": 64, "WARPS_Q": 1, "WARPS_N": 8, "MERGE": 3}
    if nq <= 112:
        v = [("MMA=2 BN=128,S=5,E=128", {**tma, "BLOCK_N": 128, "STAGES": 5, "EPI_ROWS": 128}, None),
             ("MMA=2 BN=256,S=4,E=64", {**tma, "BLOCK_N": 256, "STAGES": 4, "EPI_ROWS": 64}, None)]
    else:
        v = [("MMA=2 BN=256,S=3,E=64", {**tma, "BLOCK_N": 256, "STAGES": 3, "EPI_ROWS": 64}, None)]
    pp = {**tma, "MMA": 3, "BLOCK_N": 128, "EPI_ROWS": 64}
    for st in (5, 4, 3):
        v.append((f"pp BN=128,S={st},E=64", {**pp, "STAGES": st}, None))
    # 192-row tiles: 42% fewer query bytes per corpus row than 128 (the queries are re-read from L2 for every tile)
    bq = -(-nq // 8) * 8 if nq <= 112 else 128
    for st in (4, 3):
        v.append((f"pp BN=192,BQ={bq},S={st}", {**pp, "BLOCK_N": 192, "BLOCK_Q": bq, "STAGES": st}, None))
    if nq <= 64:
        v.append(("pp BN=256,S=3,E=64", {**pp, "BLOCK_N": 256, "STAGES": 3}, None))
    return v


def cluster_variants(nq: int) -> list[tuple[str, dict, int | None]]:
    """Thread-block clusters (CLUSTER: the blocks of a cluster take consecutive splits of one query tile and each
    TMA-multicasts 1 / CLUSTER of every query slice to all of them, so L2 serves each query byte once per cluster)
    on the ping-pong loop (MMA=3) and the cooperative one (MMA=2, whose 256-row tiles halve the query bytes per
    corpus row again), against the unclustered default."""
    pp = {"MMA": 3, "BLOCK_K": 64, "WARPS_Q": 1, "WARPS_N": 8, "MERGE": 3, "EPI_ROWS": 64}
    v = [("default", {}, None)]
    if nq <= 112:
        v += [("pp BN=128,S=4,C=2", {**pp, "BLOCK_N": 128, "STAGES": 4, "CLUSTER": 2}, None),
              ("pp BN=128,S=5,C=2", {**pp, "BLOCK_N": 128, "STAGES": 5, "CLUSTER": 2}, None),
              ("pp BN=128,S=4,C=4", {**pp, "BLOCK_N": 128, "STAGES": 4, "CLUSTER": 4}, None),
              ("MMA=2 BN=256,S=4,C=2", {**pp, "MMA": 2, "BLOCK_N": 256, "STAGES": 4, "CLUSTER": 2}, None),
              ("MMA=2 BN=256,S=4,C=4", {**pp, "MMA": 2, "BLOCK_N": 256, "STAGES": 4, "CLUSTER": 4}, None)]
    else:
        v += [("pp BN=128,S=4,C=2", {**pp, "BLOCK_N": 128, "BLOCK_Q": 128, "STAGES": 4, "CLUSTER": 2}, None),
              ("pp BN=128,S=4,C=4", {**pp, "BLOCK_N": 128, "BLOCK_Q": 128, "STAGES": 4, "CLUSTER": 4}, None),
              ("pp BN=128,S=3,C=4", {**pp, "BLOCK_N": 128, "BLOCK_Q": 128, "STAGES": 3, "CLUSTER": 4}, None)]
    return v


def prefetch_variants(nq: int) -> list[tuple[str, dict, int | None]]:
    """L2 prefetch (PREFETCH: when a block starts a corpus tile, its producer asks L2 for every slice of the tile 1
    or 2 ahead at once, so DRAM serves whole rows instead of one 128-byte piece per row and slice) on the default
    tiling, with a cluster of 2, and on MMA=2's 256-row tiles."""
    v = [("default", {}, None), ("PREFETCH=1", {"PREFETCH": 1}, None), ("PREFETCH=2", {"PREFETCH": 2}, None),
         ("PREFETCH=1,C=2", {"PREFETCH": 1, "CLUSTER": 2}, None)]
    if nq <= 112:
        v.append(("MMA=2 BN=256,S=4,P=1", {"MMA": 2, "BLOCK_N": 256, "STAGES": 4, "PREFETCH": 1}, None))
    return v


def stream_variants(nq: int) -> list[tuple[str, dict, int | None]]:
    """What bounds the TMA ring's corpus stream: the ping-pong loop (MMA=3) and the cooperative one (MMA=2) with
    shallow and deep rings, 256-row tiles, and a cluster of 2 sharing the query slices, at any nq. Run at nq = 8
    (query bytes ~6% of a stage, tensor work ~8% of nq = 100's) it says how fast the ring streams the corpus alone,
    against the cp.async mma.sync default (MMA=0) that nq = 1 uses at the HBM floor. At small N (a split of a few
    tiles) the tile height sets how evenly the ping-pong groups share a split: 64-row tiles (twice the tiles), and
    the cooperative loop's 128-row tiles, whose epilogue both warpgroups share."""
    bq = -(-nq // 8) * 8 if nq <= 128 else 128
    pp = {"MMA": 3, "BLOCK_K": 64, "WARPS_Q": 1, "WARPS_N": 8, "MERGE": 3, "EPI_ROWS": 64, "BLOCK_Q": bq,
          "BLOCK_N": 128}
    v = [("default", {}, None), ("pp BN=128,S=4", {**pp, "STAGES": 4}, None),
         ("pp BN=128,S=6", {**pp, "STAGES": 6}, None),
         ("MMA=2 BN=256,S=4", {**pp, "MMA": 2, "BLOCK_N": 256, "STAGES": 4}, None),
         ("pp BN=128,S=4,C=2", {**pp, "STAGES": 4, "CLUSTER": 2}, None),
         ("pp BN=64,S=6", {**pp, "BLOCK_N": 64, "STAGES": 6}, None),
         ("MMA=2 BN=128,S=5", {**pp, "MMA": 2, "STAGES": 5}, None)]
    if nq <= 64:
        v.append(("pp BN=256,S=4", {**pp, "BLOCK_N": 256, "STAGES": 4}, None))
    return v


# The trace build's slots (csrc/kernels/similarity/params.cuh, through the binding): per block TRACE_SLOTS
# %globaltimer stamps, then as many clock64 values
_SLOT = _core.similarity.TRACE_SLOTS
TRACE_SLOTS, TRACE_TURN0, TRACE_TURNS, TRACE_WHY = _SLOT["slots"], _SLOT["turn0"], _SLOT["turns"], _SLOT["why"]
TRACE_EVENTS = {name: _SLOT[name] for name in ("entry", "producer_start", "producer_done", "mma_start", "end_barrier",
                                               "done")}
# scan: the group's last store-and-scan (a queue overflowed)
TRACE_EVENTS.update({"scan_group0": _SLOT["scan"], "scan_group1": _SLOT["scan"] + 1})
TURN_EVENTS = ("loop_start", "loop_done", "precheck_done", "epilogue_done")
# MERGE=6, a group's first tile (TopkBlock::trace_first()): the spans between its main loop's end, the steps'
# stamps, its keys counted and its epilogue's end
FIRST_STEPS = ("maxima", "bounds", "words", "wait", "stage", "count", "append")
# MERGE=7's filter warps, first tile (thread 0's): from the MMAs' end, the dump and the bounds' and words' raises; the
# keys at the bounds held and the tile released; the bars staged and the held keys appended
FILTER_WARP_STEPS = ("dump_and_raise", "hold_and_release", "stage_and_append")


def block_timeline(launch, cand_key, blocks: int, merge: int | None = None, keys_kept: bool = False) -> dict:
    """Run a trace build's search once after an L2 flush (the timer's protocol) and decode every block's events:
    per event the median, min and max over blocks in us from the earliest block entry; per tile group turn the
    median durations (main loop, epilogue, and for thread lists its bound pass + pre-check and queue insertion; a
    dense search's epilogue stamps no pre-check: None) in us; the kernel's span. The first-tile step slots are
    decoded as the config's MERGE writes them: each group's MERGE=6 steps, or (MERGE=7) the filter warps'.
    ``keys_kept``: the dense search's build stores its keys too (TUNELAB_SIM_TRACE_KEYS=1), all but query 0's, so
    the timelines must fit in that first row of the key matrix."""
    import numpy as np
    import torch

    from tunelab.timing import time_callable

    need = blocks * 2 * TRACE_SLOTS * 8
    if keys_kept and cand_key[0].numel() * 4 < need:
        raise SystemExit(f"--trace with TUNELAB_SIM_TRACE_KEYS: the {blocks} blocks' timelines take {need} bytes, more "
                         f"than the key matrix's first row ({cand_key[0].numel() * 4} bytes), which the stores leave "
                         f"them; trace a larger N (at least {-(-need // 4)} rows) or leave the macro out")
    if cand_key.numel() * 4 < need:
        raise SystemExit(f"--trace: a block's timeline takes {2 * TRACE_SLOTS * 8} bytes of the candidate-key buffer, "
                         f"which holds {cand_key.numel() * 4} bytes for {blocks} blocks (nq * k * 4 per split); "
                         f"trace a shape with nq * k >= {2 * TRACE_SLOTS * 2} per query tile (at k = {K}: "
                         f"nq >= {-(-2 * TRACE_SLOTS * 2 // K)})")
    raw = cand_key.view(torch.int64).flatten()
    raw.zero_()
    time_callable(launch, warmup=3, samples=1)  # the last launch (after a flush) leaves its timeline
    torch.cuda.synchronize()
    t = raw[: blocks * 2 * TRACE_SLOTS].view(blocks, 2, TRACE_SLOTS).cpu().numpy()
    ns = t[:, 0, :].astype(np.float64)
    t0 = ns[:, TRACE_EVENTS["entry"]].min()

    def stat(col):
        v = ns[:, col]
        v = (v[v > 0] - t0) / 1e3
        return None if v.size == 0 else {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
                                         "blocks": int(v.size)}

    events = {name: stat(col) for name, col in TRACE_EVENTS.items()}
    turns = []
    for g in range(2):
        for u in range(TRACE_TURNS):
            base = TRACE_TURN0 + (g * TRACE_TURNS + u) * 4
            cols = ns[:, base:base + 4]
            have = (cols[:, [0, 1, 3]] > 0).all(axis=1)  # the pre-check stamp (2) is the thread lists' only
            if not have.any():
                continue
            c = cols[have]
            pre = bool((c[:, 2] > 0).all())
            med = lambda a, b: float(np.median(c[:, b] - c[:, a]) / 1e3)  # noqa: E731
            turns.append({"group": g, "turn": u, "blocks": int(have.sum()),
                          **{f"{e}_us": float(np.median((c[:, i] - t0) / 1e3)) if i != 2 or pre else None
                             for i, e in enumerate(TURN_EVENTS)},
                          "main_loop_us": med(0, 1), "epilogue_us": med(1, 3),
                          "bound_and_precheck_us": med(1, 2) if pre else None,
                          "insertion_us": med(2, 3) if pre else None})
    first = []  # MERGE=6, a group's first tile: its epilogue's steps (params.cuh kTraceFirst0), median us each
    f0, fsteps = _SLOT["first0"], _SLOT["first_steps"]
    filter_warps = merge == _core.similarity.MERGE_FILTER_WARPS
    for g in range(0 if filter_warps else 2):
        base = TRACE_TURN0 + g * TRACE_TURNS * 4  # turn 0's events
        cols = np.concatenate([ns[:, [base + 1]], ns[:, f0 + g * fsteps: f0 + (g + 1) * fsteps],
                               ns[:, [base + 2, base + 3]]], axis=1)
        have = (cols > 0).all(axis=1)
        if have.any():
            d = np.diff(cols[have], axis=1) / 1e3
            first.append({"group": g, "blocks": int(have.sum()),
                          **{f"{name}_us": float(np.median(d[:, i])) for i, name in enumerate(FIRST_STEPS)}})
    if filter_warps:  # the filter warps' first tile (topk.cuh fw_trace(), group 0's slots 0..2), from its MMAs' end
        cols = np.concatenate([ns[:, [TRACE_TURN0 + 1]], ns[:, f0: f0 + len(FILTER_WARP_STEPS)]], axis=1)
        have = (cols > 0).all(axis=1)
        if have.any():
            d = np.diff(cols[have], axis=1) / 1e3
            first.append({"group": "filter warps", "blocks": int(have.sum()),
                          **{f"{name}_us": float(np.median(d[:, i])) for i, name in enumerate(FILTER_WARP_STEPS)}})
    why = []  # TopkBlock::trace_why(): per block and tile group, why its pre-check took the store-and-scan path
    for b in range(blocks):
        for grp in range(2):
            v = int(t[b, 0, TRACE_WHY + grp]) & 0xFFFF_FFFF_FFFF_FFFF  # stored as int64: the reason's top bit
            if v:
                why.append({"block": b, "group": grp, "reason": {1: "bar -inf", 2: "queue full"}.get(v >> 62, v >> 62),
                            "column": v & 0xFFFF, "tile": (v >> 16) & 0xFFFF, "count": (v >> 32) & 0xFFFF})
    done = ns[:, TRACE_EVENTS["done"]]
    cyc = t[:, 1, :].astype(np.float64)
    span_cyc = cyc[:, TRACE_EVENTS["done"]] - cyc[:, TRACE_EVENTS["entry"]]
    span_ns = done - ns[:, TRACE_EVENTS["entry"]]
    ok = (span_ns > 0) & (span_cyc > 0)
    return {"events": events, "turns": turns, "first_tile_steps": first, "scans": why,
            "span_us": float((done.max() - t0) / 1e3),
            "sm_clock_ghz": float(np.median(span_cyc[ok] / span_ns[ok])) if ok.any() else None,
            "smids": sorted({int(x) for x in t[:, 0, _SLOT["smid"]]})[:8]}


def print_timeline(row: dict) -> None:
    """The block timeline of one variant as a short table."""
    print(f"== {row['nq']} x {row['n']} {row['variant']}: span {row['span_us']:.1f} us, SM clock "
          f"{row['sm_clock_ghz'] or 0:.2f} GHz, {row['tiles_per_split']} tiles per split", flush=True)
    for sc in row.get("scans", []):
        print(f"   store-and-scan: block {sc['block']} group {sc['group']} tile {sc['tile']} column {sc['column']}: "
              f"{sc['reason']} ({sc['count']} keys)")
    for name, st in row["events"].items():
        if st:
            print(f"   {name:<16} median {st['median']:7.2f}  min {st['min']:7.2f}  max {st['max']:7.2f} us"
                  f"  ({st['blocks']} blocks)")
    us = lambda v: f"{v:7.2f}" if v is not None else f"{'-':>7}"  # noqa: E731
    print(f"   {'group turn':<12} {'start':>7} {'loop':>7} {'epilog':>7} {'pre-chk':>7} {'insert':>7} {'ends':>7}  "
          f"blocks")
    for tr in row["turns"]:
        print(f"   g{tr['group']} t{tr['turn']:<8} {us(tr['loop_start_us'])} {us(tr['main_loop_us'])} "
              f"{us(tr['epilogue_us'])} {us(tr['bound_and_precheck_us'])} {us(tr['insertion_us'])} "
              f"{us(tr['epilogue_done_us'])}  {tr['blocks']}", flush=True)
    for fs in row.get("first_tile_steps", []):
        names = FIRST_STEPS if isinstance(fs["group"], int) else FILTER_WARP_STEPS
        print(f"   g{fs['group']} first tile: " + " ".join(f"{n} {fs[n + '_us']:.2f}" for n in names) +
              f"  ({fs['blocks']} blocks)", flush=True)


def filtered_variants(nq: int) -> list[tuple[str, dict, int | None]]:
    """The dense search (MERGE=5, default_config of the 65536-row bucket), the filtered one (MERGE=6) and, with the
    TMA producer, the filter warps' (MERGE=7) on the same config: with --trace, where the filtered search's epilogue
    spends its time (its "pre-check" stamp is taken once the tile's keys are counted and their places taken: the
    bound pass, counts and shared atomics before it, the stores after)."""
    from tunelab.ops import similarity as sim

    dense = dict(sim.default_config(nq, K, "float16", D, n=sim.DENSE_MAX_N), MERGE=sim.MERGE_DENSE)
    out = [("dense", dense, None), ("filtered", dict(dense, MERGE=sim.MERGE_FILTERED), None)]
    if sim.uses_tma(dense):  # MERGE=7: its first-tile steps are the filter warps' (topk.cuh fw_trace())
        out.append(("warps", dict(dense, MERGE=sim.MERGE_FILTER_WARPS), None))
    return out


#: --variants NAME -> the function listing that set's variants for nq queries ("all": sync and wgmma)
VARIANT_SETS = {"sync": variants, "wgmma": wgmma_variants, "tma": tma_variants, "pingpong": pingpong_variants,
                "cluster": cluster_variants, "prefetch": prefetch_variants, "merge": merge_variants,
                "stream": stream_variants, "filtered": filtered_variants}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="100x50000,100x10000000", help="comma-separated NQxN list")
    ap.add_argument("--ncu", default=None, help="one NQxN shape: launch each variant's search once, no timing")
    ap.add_argument("--trace", default=None, help="one NQxN shape: each variant's block timeline (diagnosis build)")
    ap.add_argument("--data", choices=DRAW_ORDERS, default="corpus-first",
                    help="how the random inputs are drawn (_common.draw_search_inputs)")
    ap.add_argument("--seed", type=int, default=0, help="the inputs' generator seed")
    ap.add_argument("--variants", choices=(*VARIANT_SETS, "all"), default="sync",
                    help="sync: the mma.sync tiling variants (default); wgmma: MMA=1 variants; tma: MMA=2 variants; "
                         "pingpong: MMA=3 against MMA=2; cluster: CLUSTER 2, 4 against the default; prefetch: "
                         "PREFETCH 1, 2 (L2 prefetch); merge: the running top-k strategies (MERGE); stream: what "
                         "bounds the TMA ring (run it at nq = 8 too); all: sync and wgmma")
    ap.add_argument("--only", default=None,
                    help="the variants of the set to run, by name, separated by ';' (names contain commas): "
                         "e.g. 'default;pp BN=128,S=4,C=2'")
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    ap.add_argument("--tag", default=None, help="appended to the results file's name (similarity_probe_SET_TAG.json)")
    ap.add_argument("--from-study", type=Path, default=None,
                    help="a tuning results JSON (tune_seed.py --family similarity): its confirmed configs are added "
                         "as variants ('study 1', ...), to see how they do at other shapes")
    ap.add_argument("--define", action="append", default=[], metavar="MACRO=VALUE",
                    help="compile every variant with this macro defined (repeatable), e.g. "
                         "TUNELAB_SIM_FILTER_WAIT_NS=0 (csrc/kernels/similarity/params.cuh); recorded with the rows")
    args = ap.parse_args()
    try:
        defines = dict(parse_define(text) for text in args.define)
    except ConfigError as exc:
        ap.error(f"--define: {exc}")
    with kernel_variant(defines=defines):
        return probe(args, defines, ap.error)


def probe(args, defines: dict[str, str], error) -> int:
    """main() past its arguments: compile, run and record every variant of ``args`` (with ``defines``). ``error``
    (argparse's ``error``) reports an argument that only proves bad here (--from-study, --only) and exits."""
    import torch

    from tunelab.errors import TunelabError
    from tunelab.ops import similarity as S
    from tunelab.timing import time_callable

    tdtype = getattr(torch, args.dtype)
    study_variants = []
    if args.from_study:
        from tunelab.tuning.results import load_results

        doc = load_results(args.from_study)
        arms = [a for a in (doc.get("confirmation") or {}).get("arms", [])
                if a.get("kind") == "config" and not a.get("is_default")]
        if not arms:
            error(f"--from-study {args.from_study}: the study has no confirmed configs (it ran without "
                  f"confirmation); rerun it with confirmation, or pass another results file")
        study_variants = [(f"study {i + 1}", a["config"], None) for i, a in enumerate(arms)]

    def variant_list(nq):
        return base_variants(nq) + study_variants

    def base_variants(nq):
        if args.variants == "all":
            return variants(nq) + wgmma_variants(nq)[1:]
        vs = VARIANT_SETS[args.variants](nq)
        if args.only:
            keep = [x.strip() for x in args.only.split(";")]
            unknown = [x for x in keep if x not in {name for name, _, _ in vs}]
            if unknown:
                error(f"--only {unknown}: not in --variants {args.variants} at nq={nq}; its variants are "
                      f"{[name for name, _, _ in vs]}")
            vs = [v for v in vs if v[0] in keep]
        return vs
    shapes = [tuple(int(x) for x in s.split("x")) for s in (args.ncu or args.trace or args.shapes).split(",")]

    dev = torch.cuda.current_device()
    arch = S._arch(dev)
    stream = current_stream()

    def requested(nq, over):  # a variant's config before fitting it to the shared memory
        return {**S.default_config(nq, K, args.dtype, D), **over}

    def fitted(nq, over):
        return S.fit_config(requested(nq, over), K, args.dtype, S.smem_limit(arch), "ip")

    # Compile every variant up front, in parallel (NVRTC releases the GIL; a wgmma config takes ~15 s alone).
    # Failures are left for the loop below, which records them.
    def warm(nq, over):
        try:
            S.compile_search(fitted(nq, over), dtype=args.dtype, metric="ip", arch=arch, trace=bool(args.trace))
        except TunelabError:
            pass

    with cf.ThreadPoolExecutor(min(16, os.cpu_count() or 2)) as pool:
        list(pool.map(lambda a: warm(*a), [(nq, over) for nq, _ in shapes for _, over, _ in variant_list(nq)]))
    rows = []
    for nq, n in shapes:
        queries, corpus = draw_search_inputs(nq, n, D, tdtype, args.data, args.seed)
        zeros = torch.zeros_like(queries)
        nans = torch.full_like(queries, float("nan"))
        torch_us = None
        if not args.ncu and not args.trace:
            torch_us = summarize(time_callable(lambda: torch.topk(queries @ corpus.T, K, dim=1), samples=30))
        base_idx = None  # the default's indices: every variant must return the same (the same products and order)
        for name, over, splits in variant_list(nq):
            try:
                cfg = fitted(nq, over)
                comp = S.compile_search(cfg, dtype=args.dtype, metric="ip", arch=arch, trace=bool(args.trace))
            except TunelabError as exc:
                rows.append({"nq": nq, "n": n, "variant": name, "config": requested(nq, over), "error": str(exc)[:200]})
                continue
            plan = comp.plan(dev, nq, n, K, splits)
            if comp.selects and not (args.trace or args.ncu):  # the timing rows below read the splits' lists
                rows.append({"nq": nq, "n": n, "variant": name, "config": cfg,
                             "error": "MERGE 5, 6 (no candidate lists): --trace or --ncu only; "
                                      "benchmarks/similarity_filtered.py times them"})
                continue
            if comp.selects:  # MERGE 5, 6: the key matrix or candidate rows
                ck, ci = comp.candidate_buffers(plan, nq, n, K, queries.device)
            else:
                ck = torch.empty((plan["splits"], nq, K), dtype=torch.float32, device="cuda")
                ci = torch.empty((plan["splits"], nq, K), dtype=torch.int32, device="cuda")
            sc = torch.empty((nq, K), dtype=torch.float32, device="cuda")
            ix = torch.empty((nq, K), dtype=torch.int64, device="cuda")
            p_search, p_merge = comp.prepare(dev, queries, corpus, K, ck, ci, sc, ix, plan)
            p_zero, _ = comp.prepare(dev, zeros, corpus, K, ck, ci, sc, ix, plan)
            p_nan, _ = comp.prepare(dev, nans, corpus, K, ck, ci, sc, ix, plan)
            if args.trace:
                launch = p_search
                rows.append({"nq": nq, "n": n, "variant": name, "config": cfg, "splits": plan["splits"],
                             "tiles_per_split": plan["tiles_per_split"],
                             **block_timeline(launch, ck, plan["q_tiles"] * plan["splits"], cfg["MERGE"],
                                              keys_kept=cfg["MERGE"] == S.MERGE_DENSE
                                              and defines.get("TUNELAB_SIM_TRACE_KEYS", "0") != "0")})
                print_timeline(rows[-1])
                continue
            if args.ncu:
                for p in (p_search, p_zero, p_nan):
                    p(stream)
                torch.cuda.synchronize()
                print(f"launched {name}: grid {plan['q_tiles']}x{plan['splits']}", flush=True)
                continue
            p_search(stream)
            p_merge(stream)
            torch.cuda.synchronize()
            if base_idx is None:
                base_idx = ix.clone()
            agreement = float((ix == base_idx).float().mean())
            samples = 30 if n >= 1_000_000 else 100
            t_search = summarize(time_callable(p_search, samples=samples))
            t_zero = summarize(time_callable(p_zero, samples=samples))
            t_nan = summarize(time_callable(p_nan, samples=samples))
            t_kind = {}  # the thread-list (0), shared-list (2) and sorted-list (4) merges, on the real lists
            p_search(stream)  # the NaN search above left empty lists
            for kind in (0, 2, 4):
                _, p_kind = comp.prepare(dev, queries, corpus, K, ck, ci, sc, ix, plan, merge_kind=kind)
                t_kind[kind] = summarize(time_callable(p_kind, samples=samples))
            op_kind = comp.merge_args(ck, ci, queries, K, plan["splits"])[4]
            t_merge, t_merge_lists, t_merge_shared, t_merge_sorted = t_kind[op_kind], t_kind[0], t_kind[2], t_kind[4]
            t_total = summarize(time_callable(lambda: (p_search(stream), p_merge(stream)), samples=samples))
            res = comp.resources
            rows.append({"nq": nq, "n": n, "variant": name, "config": cfg, "splits": plan["splits"],
                         "tiles_per_split": plan["tiles_per_split"], "registers": res.registers,
                         "blocks_per_sm": comp.blocks_per_sm(dev, K),
                         "resident_blocks": comp.resident_blocks(dev, K), "search_us": t_search,
                         "mainloop_us": t_zero, "loop_us": t_nan, "merge_kind": op_kind, "merge_us": t_merge,
                         "merge_lists_us": t_merge_lists,
                         "merge_shared_us": t_merge_shared, "merge_sorted_us": t_merge_sorted, "total_us": t_total,
                         "torch_us": torch_us, "index_agreement_with_default": agreement})
            print(f"{nq:>5} {n:>9} {name:<24} splits {plan['splits']:>4} regs {res.registers:>3} "
                  f"search {t_search['median']:>9.1f} mainloop {t_zero['median']:>9.1f} loop {t_nan['median']:>9.1f} "
                  f"merge {t_merge['median']:>7.1f} (lists {t_merge_lists['median']:.1f}, shared "
                  f"{t_merge_shared['median']:.1f}, sorted {t_merge_sorted['median']:.1f}) total {t_total['median']:.1f} "
                  f"torch {torch_us['median']:>9.1f} "
                  f"agree {agreement:.4f}", flush=True)
        corpus = queries = zeros = nans = None
        torch.cuda.empty_cache()
    if args.ncu:
        return 0
    name = "similarity_probe" if args.variants == "sync" else f"similarity_probe_{args.variants}"
    if args.trace:
        path = write_result(f"{name}_trace", {"rows": rows, "dtype": args.dtype, "defines": defines}, args.tag)
        print(f"wrote {path}")
        return 0
    if args.dtype != "float16" or args.from_study:
        name += f"_{args.dtype}" + ("_study" if args.from_study else "")
    path = write_result(name, {"rows": rows, "dtype": args.dtype, "defines": defines,
                               "from_study": str(args.from_study) if args.from_study else None}, args.tag)
    print(f"wrote {path}")
    print(f"{'nq':>5} {'n':>9} {'variant':<24} {'search':>9} {'mainloop':>9} {'loop':>9} {'epilogue':>9} {'merge':>7} "
          f"{'lists':>7} {'shared':>7} {'sorted':>7} {'total':>9} {'torch':>9} {'agree':>6}")
    for r in rows:
        if "error" in r:
            print(f"{r['nq']:>5} {r['n']:>9} {r['variant']:<24} error: {r['error'][:60]}")
            continue
        s, m, lp = r["search_us"]["median"], r["mainloop_us"]["median"], r["loop_us"]["median"]
        print(f"{r['nq']:>5} {r['n']:>9} {r['variant']:<24} {s:>9.1f} {m:>9.1f} {lp:>9.1f} {s - lp:>9.1f} "
              f"{r['merge_us']['median']:>7.1f} {r['merge_lists_us']['median']:>7.1f} "
              f"{r['merge_shared_us']['median']:>7.1f} {r['merge_sorted_us']['median']:>7.1f} "
              f"{r['total_us']['median']:>9.1f} {r['torch_us']['median']:>9.1f} "
              f"{r['index_agreement_with_default']:>6.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
