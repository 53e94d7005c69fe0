"""``tunelab.ops.similarity_search`` and ``tunelab.ops.gram``: exact top-k vector search with the top-k fused into
a tensor-core GEMM, and Gram matrices of state vectors.

::

    scores, idx = tunelab.ops.similarity_search(queries, corpus, k=10)                  # inner product
    scores, idx = tunelab.ops.similarity_search(queries, corpus, k=10, metric="cosine")
    dist, idx = tunelab.ops.similarity_search(queries, corpus, k=10, metric="l2")       # squared L2, ascending
    scores, idx = tunelab.ops.similarity_search(queries, cpu_corpus, k=10)              # streamed from host memory
    K = tunelab.ops.gram(states)                                    # K_ij = |<x_i, x_j>|^2, upper triangle
    K = tunelab.ops.gram(states, mirror=True)                       # full matrix, half the arithmetic

Search semantics:

* ``queries`` (nq, d) on a GPU, ``corpus`` (N, d) on the same GPU or in host memory (then streamed through
  pinned buffers and CUDA streams, see :mod:`tunelab.ops.streaming`); same dtype, float16, bfloat16 or float32;
  rows must be contiguous (any row stride). A 1-D query is one query and gives 1-D results.
* Returns ``(scores, indices)``, (nq, k) float32 and int64, best first. ``ip``: ``<q, c>`` descending;
  ``cosine``: ``<q, c> / (max(|q|, 1e-12) max(|c|, 1e-12))`` descending (``F.normalize``'s convention);
  ``l2``: squared Euclidean distance ``|q - c|^2`` ascending (computed as ``|q|^2 - 2<q, c> + |c|^2``, like FAISS).
* **Ties** have one rule everywhere: a larger score (smaller distance) first, then the smaller corpus index. The
  order is total, so the result is deterministic and does not depend on the config, the number of splits or the
  chunking of a streamed corpus (a streamed search returns bit-identical results to an in-memory one).
* Arithmetic: fp16/bf16 products are exact and accumulate in fp32 (tensor cores); fp32 inputs use 3xTF32 tensor
  cores, accurate to fp32 level, so indices agree with an fp32 reference up to ties within fp32 rounding; configs
  with ``MMA=4`` (the sm_90 default for fp32 searches of a few queries, see :func:`default_config`) multiply and
  add in plain fp32 on the CUDA cores instead.
* Range: fp32 elements above ~4.15e34 in magnitude (above ~1.8e19 for cosine and l2, whose squared norms overflow)
  are out of range: the split of an element into its two tf32 halves, or the norm, overflows. A corpus row holding
  one scores NaN (never returned), a query holding one has every score NaN (all k entries missing); ip configs
  whose warp tiles keep more than 112 accumulators (explicit ones only: defaults and tuned configs stay at or
  below) split the other way and give a finite but meaningless score instead. ``MMA=4`` has no split: any finite
  element scores as fp32 arithmetic gives it, and a score that overflows is NaN. An inf element makes the score NaN.
* Rows with a NaN score never enter the results; if fewer than k rows are left, the missing entries have index
  -1 and score -inf (ip, cosine) or +inf (l2).
* 1 <= k <= min(N, 1024) (on GPUs with ~100 KiB of shared memory per block, sm_86/89, k up to ~380: the
  running lists of 8 queries need 128 * k bytes).

The fused search never writes the nq x N score matrix: each block keeps a running top-k per query (by default in its
threads' registers for k <= 16 and more than 8 queries, else in shared memory) and writes only k candidates per
query; a small second kernel merges the candidates. Where that matrix is small next to L2 (sm_90, N <= 65536, see
:func:`default_config`) the default is the dense search instead (``MERGE=5``): every key goes to an nq x N float32
matrix, which mostly stays in L2, and a select kernel takes each row's k best; pass a config with another ``MERGE``
to keep the matrix out of memory there too. Config: without ``config`` the op
uses the tuned config stored for this device and problem bucket (``tunelab tune similarity ...``), else
:func:`default_config`. Both ops are torch custom ops (``torch.ops.tunelab.similarity_search``,
``torch.ops.tunelab.gram``, ``torch.ops.tunelab.gram_out``) with fake implementations for ``torch.compile``; a plain
eager call skips the custom op's dispatch (:mod:`tunelab.ops.eager`), and a repeated search of one shape reuses its
prepared launches (``_search_gpu``).
"""
from __future__ import annotations

import atexit
import functools
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from tunelab import _core
from tunelab import dtypes as _dtypes
from tunelab.ops import config as _config
from tunelab.ops import dispatch as _dispatch
from tunelab.ops import eager as _eager
from tunelab.ops import workspace as _workspace
from tunelab.ops.loading import DeviceFunctions, current_stream
from tunelab.errors import ConfigError, InputError
from tunelab.kernel import smem_limit

_S = _core.similarity

#: Search tunables, in template order.
PARAM_NAMES: tuple[str, ...] = tuple(_S.topk_param_names())
PARAM_CHOICES: dict[str, tuple[int, ...]] = {k: tuple(v) for k, v in _S.topk_param_choices().items()}
#: tunables a config may leave out, and what they then mean (configs written before they existed)
PARAM_DEFAULTS: dict[str, int] = dict(_S.topk_param_defaults())
#: Gram tunables.
GRAM_PARAM_NAMES: tuple[str, ...] = tuple(_S.gram_param_names())
GRAM_PARAM_CHOICES: dict[str, tuple[int, ...]] = {k: tuple(v) for k, v in _S.gram_param_choices().items()}

DTYPE_CODES = {"float16": 0, "bfloat16": 1, "float32": 2}
GRAM_DTYPE_CODES = {"float16": 0, "bfloat16": 1, "float32": 2, "complex64": 3}
METRICS = {"ip": 0, "cosine": 1, "l2": 2}
MAX_K = 1024
#: Merge kernel variants (:func:`_S.merge_kind`; params.cuh, through the binding): 0, 1 thread lists of 16 and 32
#: entries, 2, 3 shared lists over 8 and 4 warps, 4 sorted lists (the search's, k <= 32: one warp per query walks only
#: the lists whose best entry can reach the top k), 5 select (one row of a dense key matrix per query, k <= 32: the
#: search with MERGE=5). Not the search's MERGE codes (there 0..2 are shared lists, 3 and 4 thread lists, 5 dense).
MERGE_KINDS = tuple(_S.MERGE_KINDS)
#: The merge kind that needs every list sorted best first (the search's candidate lists, not a dense score matrix).
MERGE_SORTED = int(_S.MERGE_SORTED)
#: The merge kind that selects from the rows of the dense key matrix a MERGE=5 search writes.
MERGE_SELECT = int(_S.MERGE_SELECT)
#: The merge kind that selects from the candidate rows of a MERGE=6 search (one warp per query).
MERGE_FILTER_SELECT = int(_S.MERGE_FILTER_SELECT)
#: The search's MERGE value that keeps no top-k and writes every key to a dense nq x N matrix (see
#: :func:`default_config` for when it is chosen), and the largest k its select kernel takes.
MERGE_DENSE = int(_S.MERGE_DENSE)
#: The search's MERGE value that keeps no top-k either but writes only the keys that reach their query's bar in
#: their block (its tile groups' first-tile bounds, the larger of two with ping-pong), with their rows, to the
#: split's segment of a candidate row per query; the select kernel takes each row's k best (params.cuh
#: ``topk_candidate_rows``).
MERGE_FILTERED = int(_S.MERGE_FILTERED)
#: ``MERGE=6``'s candidate rows and select, but the MMA warps only copy each tile's keys to shared memory and three
#: spare warps of the TMA producer's warpgroup filter them (``MMA`` 2 or 3; topk.cuh ``filter_warps_run``).
MERGE_FILTER_WARPS = int(_S.MERGE_FILTER_WARPS)
#: The MERGE values whose search writes candidate rows for the filtered select.
MERGES_FILTERED = (MERGE_FILTERED, MERGE_FILTER_WARPS)
SELECT_MAX_K = int(_S.SELECT_MAX_K)
#: Candidate-list workspace cap: more splits than this would need are merged in fewer, longer splits.
WORKSPACE_CAP_BYTES = 256 << 20

_SEARCH_SOURCE = ('#include "similarity/topk.cuh"\n#include "similarity/merge_sorted.cuh"\n'
                  '#include "similarity/select.cuh"\n#include "similarity/select_filtered.cuh"\n')
_GRAM_SOURCE = '#include "similarity/gram.cuh"\n'


def _cfg(bn, bq, bk, wn, wq, stages, vec=16, merge=2, epi=128, min_blocks=1, mma=0, cluster=1,
         prefetch=0) -> dict[str, int]:
    return dict(BLOCK_N=bn, BLOCK_Q=bq, BLOCK_K=bk, WARPS_N=wn, WARPS_Q=wq, STAGES=stages, VEC=vec, MERGE=merge,
                EPI_ROWS=epi, MIN_BLOCKS=min_blocks, MMA=mma, CLUSTER=cluster, PREFETCH=prefetch)


#: Archs whose tensor cores take warpgroup MMAs (``MMA`` 1, 2 and 3); kernels for them are compiled for the
#: arch-specific target (``sm_90a``), which only that arch runs.
WGMMA_ARCHS = ("sm_90", "sm_90a")


def wgmma_supported(arch: str) -> bool:
    """True when ``arch`` runs the search's wgmma main loops (``MMA`` 1, 2, 3): Hopper, sm_90."""
    return arch in WGMMA_ARCHS


def uses_wgmma(config: Mapping[str, Any]) -> bool:
    """True when a search config's main loop runs wgmma warpgroup tiles (``MMA`` 1, 2 and 3: sm_90, 16-bit inputs)."""
    return bool(_S.topk_uses_wgmma(int(config.get("MMA", 0))))


def uses_fma(config: Mapping[str, Any]) -> bool:
    """True when a search config computes its fp32 products on the CUDA cores (``MMA=4``: FFMA instead of 3xTF32;
    fp32 inputs, one n8 query tile per warp)."""
    return bool(_S.topk_uses_fma(int(config.get("MMA", 0))))


def uses_tma(config: Mapping[str, Any]) -> bool:
    """True when a search config's main loop is fed by the TMA producer warpgroup (``MMA`` 2 and 3), which reads
    rows 16 bytes at a time from 16-byte aligned pointers and row strides."""
    return bool(_S.topk_uses_tma(int(config.get("MMA", 0))))


def _with_mma(config: Mapping[str, Any], mma: int) -> dict:
    """``config`` moved to main loop ``mma``: MMA=3's 192-row tile (3 m64 blocks per warpgroup) becomes 128 rows,
    which the other main loops split among their warps; without the TMA producer (``MMA`` 0, 1) there are no
    clusters (CLUSTER=1) and no L2 prefetch (PREFETCH=0)."""
    cfg = dict(config, MMA=mma)
    if mma != 3 and cfg["BLOCK_N"] == 192:
        cfg["BLOCK_N"] = 128
    if not _S.topk_uses_tma(mma):
        cfg.update(CLUSTER=1, PREFETCH=0)
    return cfg


def compile_arch(config: Mapping[str, Any], arch: str) -> str:
    """The NVRTC target for a search config on ``arch``: ``sm_90a`` for a wgmma config (``MMA`` 1, 2 or 3) on
    sm_90, ``arch`` otherwise; ConfigError when ``arch`` has no wgmma."""
    mma = int(config.get("MMA", 0))
    if not uses_wgmma(config):
        return arch
    if not wgmma_supported(arch):
        raise ConfigError(f"similarity config MMA={mma} (wgmma warpgroup tiles) needs an sm_90 (Hopper) GPU; the "
                          f"target is {arch}: use MMA=0 (mma.sync), which every supported arch runs")
    return "sm_90a"


def dense_ld(n: int) -> int:
    """Row stride (floats) of the dense key matrix of a ``MERGE=5`` search over ``n`` rows: n rounded up to 4, so
    that every row is 16-byte aligned for the select kernel's copies (the launcher's rule, ``topk_dense_ld`` in
    ``params.cuh``)."""
    return int(_S.dense_ld(int(n)))


def filter_rows(plan: Mapping[str, Any], config: Mapping[str, Any]) -> int:
    """Entries of one split's segment in a ``MERGE=6`` candidate row: the split's corpus rows (tiles per split x
    ``BLOCK_N``)."""
    return int(plan["tiles_per_split"]) * int(config["BLOCK_N"])


def filter_ld(plan: Mapping[str, Any], config: Mapping[str, Any]) -> int:
    """Row stride (elements) of a ``MERGE=6`` search's candidate rows for the grid ``plan``: a segment of
    :func:`filter_rows` entries per split, then (in the index rows) the segments' counts, rounded up to 4."""
    return int(_S.filter_ld(int(plan["splits"]), filter_rows(plan, config)))


def filter_counts(cand_idx, plan: Mapping[str, Any], config: Mapping[str, Any]):
    """The candidates a ``MERGE=6`` search appended, per query and split: an [nq][splits] int32 view of the counts
    in its index rows (``cand_idx`` of :meth:`CompiledSearch.candidate_buffers` for ``plan``), valid once the search
    has run. Their sum over a row is what the select kernel reads for that query."""
    at = int(plan["splits"]) * filter_rows(plan, config)
    return cand_idx[:, at:at + int(plan["splits"])]


def _few_query_mma_dense(vec: int = 16) -> dict[str, int]:
    """The dense search of at most 8 queries on the mma.sync loop (16-bit: 128-row tiles, 256-byte slices, 8 warps,
    3 stages): :func:`default_config`'s choice up to FEW_QUERIES_MMA_DENSE_MAX_N rows."""
    return _cfg(128, 8, 128, 8, 1, 3, vec=vec, merge=MERGE_DENSE)


def _round8(n: int) -> int:
    return max(8, (int(n) + 7) // 8 * 8)


def _round16(n: int) -> int:
    return max(16, (int(n) + 15) // 16 * 16)


#: The largest corpus (the store bucket's N: the next power of two) for which the default config is MERGE=5 (see
#: :func:`default_config`): the select kernel holds rows of up to 51 Ki keys in shared memory.
DENSE_MAX_N = 65536


#: The largest corpus (the store bucket's N) for which the default config of 16-bit searches of at most 8 queries
#: tiles 128 corpus rows instead of 256 (see :func:`default_config`).
SHORT_TILES_MAX_N = 262144

#: The largest corpus (the store bucket's N) for which the sm_90 default of 16-bit searches of at most 8 queries is
#: the dense search on the mma.sync main loop; above it, up to :data:`DENSE_MAX_N`, on the ping-pong warpgroups (see
#: :func:`default_config`).
FEW_QUERIES_MMA_DENSE_MAX_N = 32768


#: fp32 searches of at most this many queries take the FFMA main loop (``MMA=4``) by default on sm_90 (see
#: :func:`default_config`).
FMA_MAX_NQ = 2

#: The largest corpus (the store bucket's N) for which the FFMA default (fp32, at most :data:`FMA_MAX_NQ` queries,
#: sm_90) tiles 128 corpus rows instead of 256 (see :func:`default_config`).
FMA_SHORT_TILES_MAX_N = 131072


def dense_bytes(nq: int, n: int) -> int:
    """Bytes of the dense key matrix of a ``MERGE=5`` search: nq rows of :func:`dense_ld` floats."""
    return int(nq) * dense_ld(n) * 4


def default_config(nq: int, k: int = 10, dtype: str = "float16", d: int | None = None,
                   arch: str | None = None, n: int | None = None) -> dict:
    """The documented search config used when nothing is tuned, for ``nq`` queries and ``k`` (and, when given,
    ``n`` corpus rows: streamed searches pass none and get a fused config).

    Chosen from shared-memory traffic per MMA (ldmatrix bytes feeding each mma.sync must stay below the ~128 B/clk
    an SM's shared memory delivers) and bytes in flight (memory-bound cases):

    * nq <= 8 (memory-bound, one n8 query tile): 256-row corpus tiles over 8 warps, 256-byte row slices,
      3 stages (~130 KB of corpus in flight per SM). 16-bit inputs up to :data:`SHORT_TILES_MAX_N` rows take
      128-row tiles: at N = 50K the 256-row tiles make 196 tiles, 98 splits of two, so 34 of 132 SMs stream
      nothing. Measured on an H100 at nq = 1 (benchmarks/similarity_small_nq.py,
      results/similarity_small_nq_h100_a767144.json, search then merge): fp16 46.4 against 48.9 us at 50K,
      121.6 against 123.5 at 200K, 524.2 against 520.0 at 1M (256 rows stay); fp32 78.7 against 79.5 at 50K
      but 251.8 against 229.0 at 200K, so fp32 keeps 256 rows (but for the FFMA loop's short tiles, below).
    * nq <= 8 on sm_90 with fp16/bf16, k <= :data:`SELECT_MAX_K` and a store bucket of at most
      :data:`DENSE_MAX_N` rows: the dense search (MERGE=5, every key to the nq x N matrix, then the select
      kernel), on the mma.sync loop above with 128-row tiles up to :data:`FEW_QUERIES_MMA_DENSE_MAX_N` rows, on
      the ping-pong warpgroups (MMA=3, 128-row tiles, 5 stages) above. Found by the tuner at 1 x 50K on an H100
      (results/tune_similarity_1x50000x768x10_h100.json: MMA=3 with MERGE=5 41.8 against the default's 45.3 us)
      and measured on an H100 against the fused default (benchmarks/similarity_small_nq.py,
      results/similarity_small_nq_pp*_h100.json, fp16, search then select or merge; nq = 1, and nq = 8 within 2
      us of it): 10.7 against 12.3 us at 10K, 14.1 against 17.9 at 17K, 17.2 against 20.0 at 25K, 34.8 against
      35.1 at 32K (where the ping-pong loop would take 31.9, but 21.7 at 25K), then with the ping-pong loop 32.2
      against 37.0 at 34K, 36.5 against 40.6 at 40K, 42.8 against 46.1 at 50K, 52.4 against 54.7 at 64K; from
      100K the fused default wins (71.8 against 75.7 at 100K).
    * fp32 with nq <= :data:`FMA_MAX_NQ` on sm_90: the same tiles with the products by FFMA (``MMA=4``) instead of
      3xTF32, which splits every corpus element into tf32 halves and runs 3 MMAs for one useful query column in
      eight, so that its instructions bound it at about the share of the H200's HBM rate each SM gets. Measured on
      an H100 (benchmarks/similarity_fp32_fma.py, results/similarity_fp32_fma_h100.json):
      over an L2-resident corpus it consumes 44.1 against 33.1 GB/s per SM at nq = 1, 42.8 against 33.0 at 2,
      38.9 against 33.2 at 4 and 31.1 against 33.4 at 8 (the H200's HBM gives each SM ~35); under the protocol,
      where the H100's HBM (23.6 GB/s per SM at 10M) bounds both, 1.001-1.003x at 1M and 10M for nq <= 4,
      1.010x at 50K for nq <= 2, but 0.987x at 50K / 4 and 0.97-0.99x at nq = 8; on the H200
      (results/similarity_fp32_fma_h200.json) 1.010x and 1.026x at 10M for nq = 1 and 2 (4.67 TB/s), 1.042x and
      1.028x at 50K, 0.99-1.005x at nq = 4, 0.90-0.94x at nq = 8. So the rule stops at 2 queries
      (it does not depend on N, so a streamed search keeps the in-memory one's arithmetic and answer); 3 and 4 are
      the tuner's (its fp32 space offers MMA 0 and 4). sm_8x keeps 3xTF32 (not measured there; sm_80's SMs have
      half the FFMA lanes). Up to :data:`FMA_SHORT_TILES_MAX_N` rows its tiles have 128 rows (one m16 block per
      warp; the rows' arithmetic, and so the answer, is the same): measured against 256 rows
      (benchmarks/similarity_fp32_fma.py --short-tiles) on an H100 (results/similarity_fp32_fma_band_h100.json)
      1.05-1.06x at 16K, 1.06-1.07x at 50K, 1.03x at 100K, 1.02x at 131K, 1.01x at 160K and 200K for nq = 1 and 2;
      on the H200 (results/similarity_fp32_fma_short_h200.json) 1.06x at 50K, 1.02-1.03x at 100K, 0.99-1.00x at
      25K and 200K, but 0.98x at 1M, hence the bound.
    * 8 < nq <= 112 (memory-bound at large N, arithmetic close behind): all queries of a block in one tile
      (BLOCK_Q = nq rounded up to 16), 256-row tiles, 4 x 2 warps of 64 rows x BLOCK_Q/2 queries, 128-byte
      slices, 3 stages.
    * nq > 112 (compute-bound): 128 x 128 tiles, 2 x 4 warps of 64 x 32, 128-byte slices, 3 stages.
    * GPUs with less than 200 KiB of shared memory per block (sm_8x) get 128-row tiles in the first two cases.
    * sm_90 with fp16/bf16 and nq > 8: the wgmma main loop fed by a TMA producer warpgroup (MMA=2), two MMA
      warpgroups, 64-element slices: up to 112 queries 128-row tiles and 5 stages, above 256-row tiles (half the
      query bytes per corpus row) and 3 stages. Measured on the H200 (benchmarks/similarity_probe.py --variants
      tma, results/similarity_probe_tma.json) against the cp.async wgmma loop (MMA=1, 128-row tiles, 4 stages)
      that was the default before: 11% faster at N = 50K / nq = 100, 20% at 1M / 100, 22% at 10M / 100, 21% at
      10M / 1024. (256-row tiles are 3% faster still at 10M / 100 and 18% slower at 50K / 100: the tuner's
      choice.) MMA=1 measured 6-18% faster than the mma.sync tiling (--variants wgmma).
    * sm_90 with fp16/bf16, nq > 8 and k <= 16: ping-pong warpgroups on that TMA ring (MMA=3, thread lists, 4
      stages, 64-row epilogue passes): up to 112 queries BLOCK_Q = nq rounded up to 8 and 192-row tiles (3 m64
      blocks per warpgroup), or 128-row tiles where 192 rows would pass :data:`MAX_ACCUMULATORS_PINGPONG_192`
      (above 72 queries, :func:`max_accumulators`); above 112 queries 128 x 128 tiles and 5 stages. Measured on the H200
      (benchmarks/similarity_probe.py --variants pingpong, results/similarity_probe_pingpong.json) against the
      MMA=2 defaults: at nq = 100 (112 queries per block), 128-row tiles 8% faster at 10M and 10% at 1M, 192-row
      tiles (104 queries, which spill a few words: not a default) 13% and 12%, 5% at 50K; at 10M / 1024 10%.
    * CLUSTER=1 everywhere: thread-block clusters that share the query slices by TMA multicast (CLUSTER 2, 4)
      measured no faster on the H200 (benchmarks/similarity_probe.py --variants cluster,
      results/similarity_probe_cluster.json: 5.72 against 5.81 ms at 10M / 100, 46.7 against 46.3 ms at
      10M / 1024, slower at 1M and 50K with 4 blocks). PREFETCH=0: the L2 prefetch of later corpus tiles measured
      2-23% slower at every nq = 100 shape and no faster at 10M / 1024 (--variants prefetch,
      results/similarity_probe_prefetch.json). Neither is in the
      tuner's space; explicit configs take both.
    * Re-measured with the thread lists' candidate queues (--variants stream,
      results/similarity_probe_stream_queues.json): against the ping-pong default, 5 stages are within 2% either
      way (faster at 1M and 50K, slower at 10M), MMA=2's 256-row tiles 1-44% slower, CLUSTER=2 within 3%, so the
      defaults stay.

    * Dense (MERGE=5) for corpora up to :data:`DENSE_MAX_N` rows (sm_90, fp16/bf16, 8 < nq <= 112,
      k <= :data:`SELECT_MAX_K`; at most 29 MB of keys, which L2 holds): the ping-pong main loop writes every key
      and the select kernel takes each row's k best. At N = 50K a split has only ~3 tiles, and the fused top-k
      epilogue of its first and last tile is on the critical path. Measured on the H200
      (benchmarks/similarity_dense.py, results/similarity_dense.json; fp16, k = 10, search + merge): 45.9 against
      48.1 us at 50K / 100 and 40.1 against 50.8 at 50K / 32; from 100K up the fused search wins (69 against 82 us
      at 100K / 100: the select kernel's block per query reads its row from global memory past 51 Ki keys).
    * Dense for fp32 too, on the mma.sync loop (sm_90, 8 < nq <= 112, k <= :data:`SELECT_MAX_K`, a store bucket
      of at most :data:`DENSE_MAX_N` rows): 128-row tiles, BLOCK_Q = nq rounded up to 16, 64-element slices, 4 x
      2 warps, 2 stages, the tuner's best at 100 x 50K on an H100
      (results/tune_similarity_100x50000x768x10_fp32_h100.json: 162 against the default's 251 us). Measured on
      an H100 against the fused default (benchmarks/similarity_fp32_small.py,
      results/similarity_fp32_small_h100.json, search then select or merge): at nq = 100 1.54x at 50K, 1.20x at
      64K, 2.21x at 10K; at nq = 16 1.10-1.48x; at nq = 32 1.00-1.69x (equal at 25K and 64K).
    * The running top-k: above 8 queries and for k <= 16, thread lists (MERGE=3: a sorted 16-entry register list
      per thread), unless that would pass 128 registers with the accumulators (MMA=2 gives its MMA warps 240);
      else one list per query in shared memory, merged by a warp per tile (MERGE=2). Measured on the H200
      (benchmarks/similarity_probe.py --variants merge, fp16, k = 10; results/similarity_probe_merge.json, with the
      MMA=1 main loop), MERGE=3 against 2: 7% faster at
      N = 10M / nq = 1024, 2% at 10M / 100, 4% at 1M / 100, 5% slower at 50K / 100, 0.6% slower at nq = 1
      (which keeps 2). MERGE=4 (32 entries) is slower than 2 at nq = 100 and is left to the tuner for k <= 32.

    fp32 slices hold half as many elements. STAGES, then BLOCK_Q, shrink until the running top-k lists
    (2 * BLOCK_Q * k * 8 bytes) fit in the shared memory of ``arch`` (default: the current GPU's); every default
    compiles without spills for sm_80 and sm_90 (tests check it).
    """
    from tunelab.kernel import current_arch
    dt = _dtypes.canonical(dtype, DTYPE_CODES, "similarity search")
    code = DTYPE_CODES[dt]
    eb = 4 if code == 2 else 2
    limit = smem_limit(arch or current_arch())
    # below ~200 KiB (sm_80: 163, sm_86/89: 99) the 256-row tile keeps only 2 stages and ptxas spills its 112
    # accumulators; 128-row tiles (56 accumulators) keep 3 stages there
    big = limit >= 200 * 1024
    sm90 = wgmma_supported(arch or current_arch())
    wgmma = eb == 2 and sm90
    lists_hold_k = k <= _S.thread_list_capacity(3)  # MERGE=3's 16-entry thread lists
    pingpong = wgmma and lists_hold_k  # MMA=3 keeps thread lists
    # the dense search's rule (sm_90, a key matrix of at most DENSE_MAX_N rows, k within the select kernel's)
    dense = sm90 and n is not None and n <= DENSE_MAX_N and k <= SELECT_MAX_K
    if nq <= 8 and dense and wgmma and n <= FEW_QUERIES_MMA_DENSE_MAX_N:
        cfg = _few_query_mma_dense()
    elif nq <= 8 and dense and wgmma:
        cfg = _cfg(128, 8, 64, 8, 1, 5, merge=MERGE_DENSE, epi=64, mma=3)
    elif nq <= 8:
        fma = eb == 4 and sm90 and nq <= FMA_MAX_NQ  # fp32 products by FFMA
        # 128-row tiles up to a corpus size: 16-bit inputs and FFMA have one; fp32 on 3xTF32 keeps 256 rows
        short_max_n = FMA_SHORT_TILES_MAX_N if fma else SHORT_TILES_MAX_N if eb == 2 else None
        short = not big or (n is not None and short_max_n is not None and n <= short_max_n)
        cfg = _cfg(128 if short else 256, 8, 256 // eb, 8, 1, 3, mma=4 if fma else 0)
    elif nq <= 112 and dense and wgmma:
        cfg = _cfg(128, _round8(nq), 64, 8, 1, 4, merge=MERGE_DENSE, epi=64, mma=3)
    elif nq <= 112 and dense and eb == 4:
        cfg = _cfg(128, _round16(nq), 64, 4, 2, 2, merge=MERGE_DENSE, epi=64)
    elif nq <= 112 and pingpong:
        cfg = _cfg(192, _round8(nq), 64, 8, 1, 4, merge=3, epi=64, mma=3)
        if accumulators(cfg) > max_accumulators(cfg):  # 192-row tiles of more than 72 queries spill
            cfg["BLOCK_N"] = 128
    elif nq <= 112:
        bq = _round16(nq)
        cfg = _cfg(128, bq, 64, 8, 1, 5, mma=2) if wgmma else _cfg(256 if big else 128, bq, 128 // eb, 4, 2, 3)
    elif pingpong:
        cfg = _cfg(128, 128, 64, 8, 1, 5, merge=3, epi=64, mma=3)
    else:
        cfg = _cfg(256, 128, 64, 8, 1, 3, mma=2) if wgmma else _cfg(128, 128, 128 // eb, 2, 4, 3)
    # the running top-k: thread lists (16 entries) for k <= 16 above 8 queries, when the accumulators leave room
    if nq > 8 and lists_hold_k and cfg["MERGE"] != MERGE_DENSE and _thread_lists_fit(dict(cfg, MERGE=3)):
        cfg["MERGE"] = 3
    if d is not None:  # the widest copy that rows of d elements allow (contiguous, aligned tensors)
        cfg["VEC"] = next((v for v in (16, 8, 4) if (int(d) * eb) % v == 0), 4)
        if uses_tma(cfg) and cfg["VEC"] < 16:  # TMA reads rows of 16-byte multiples only
            return without_tma(cfg, k, dt, "l2", limit)
    return fit_config(cfg, k, dt, limit)


def _thread_lists_fit(config: Mapping[str, Any]) -> bool:
    """Whether a thread-list config (MERGE 3, 4) keeps its list (2 registers per entry) next to the accumulators:
    within 128 registers, or with MMA 2 and 3, whose MMA warps get 240 (fp32's 256-row tiles do not fit: ptxas
    spills)."""
    return uses_tma(config) or accumulators(config) + 2 * _S.thread_list_capacity(config["MERGE"]) <= 128


def without_tma(config: Mapping[str, Any], k: int, dtype: str, metric: str, limit: int) -> dict:
    """An MMA 2 or 3 config moved to the cp.async wgmma loop (MMA=1, STAGES >= 3), for rows TMA cannot read: thread
    lists give way to shared lists (MERGE=2) where MMA=1's registers cannot hold them, the filter warps (MERGE=7)
    to the MMA warps' filter (MERGE=6), then the shared memory is
    fitted again. Tiles whose accumulators MMA=1 cannot hold (256 rows of 128 queries) are halved. A dense search of
    one query tile of 8 (the few-query default above FEW_QUERIES_MMA_DENSE_MAX_N) takes the few-query dense config
    of the mma.sync loop instead, the one measured below that size."""
    if config["MERGE"] == MERGE_DENSE and config["BLOCK_Q"] == 8:
        return fit_config(_few_query_mma_dense(vec=config["VEC"]), k, dtype, limit, metric)
    cfg = dict(_with_mma(config, 1), STAGES=max(3, config["STAGES"]))
    if cfg["MERGE"] == MERGE_FILTER_WARPS:  # (its filter warps are the TMA producer's): the MMA warps filter
        cfg["MERGE"] = MERGE_FILTERED
    while accumulators(cfg) > max_accumulators(cfg) and cfg["BLOCK_N"] > 64 * (cfg["WARPS_N"] // 4):
        cfg["BLOCK_N"] //= 2
    if _S.topk_thread_lists(cfg["MERGE"]) and not _thread_lists_fit(cfg):
        cfg["MERGE"] = 2
    return fit_config(cfg, k, dtype, limit, metric)


def accumulators(config: Mapping[str, Any]) -> int:
    """fp32 accumulator registers per thread of a search config (wgmma: a warpgroup's m64 blocks x every query
    column, where ping-pong's warpgroup (MMA=3) has every row of its tiles; mma.sync: the warp tile's m16 x n8
    blocks x 4; MMA=4 (FFMA): those and, per m16 block, partial sums of 2 rows x 8 query columns)."""
    c = config
    if uses_wgmma(c):
        tile_warpgroups = max(1, c["WARPS_N"] // 4 // _S.topk_tile_groups(c["MMA"]))
        return (c["BLOCK_N"] // (64 * tile_warpgroups)) * (c["BLOCK_Q"] // 8) * 4
    m16 = c["BLOCK_N"] // c["WARPS_N"] // 16
    return m16 * (c["BLOCK_Q"] // c["WARPS_Q"] // 8) * 4 + (m16 * 16 if uses_fma(c) else 0)


#: fp32 accumulators per thread above which configs spill (sm_90 sample: 128 spills, 104 and below do not).
MAX_ACCUMULATORS = 112
#: The same for MMA 2 and 3 with two MMA warpgroups, whose threads get 240 registers (setmaxnreg): 128 compile
#: clean, and so do MMA=3's 128-row tiles; its 192-row tiles (three m64 blocks per thread, more values live per
#: query column in the epilogue) compile clean at 108 (72 queries) and spill at 120 with cosine (80 queries) and
#: at 144 (96; sm_90, CUDA 13.0): their bound is MAX_ACCUMULATORS_PINGPONG_192.
MAX_ACCUMULATORS_TMA = 128
MAX_ACCUMULATORS_PINGPONG = 128
MAX_ACCUMULATORS_PINGPONG_192 = 108


def max_accumulators(config: Mapping[str, Any]) -> int:
    """The accumulator bound of a search config: for MMA=3 :data:`MAX_ACCUMULATORS_PINGPONG`, or
    :data:`MAX_ACCUMULATORS_PINGPONG_192` with 192-row tiles; :data:`MAX_ACCUMULATORS_TMA` for MMA=2 with 8 MMA
    warps, else :data:`MAX_ACCUMULATORS`."""
    c = config
    if c.get("MMA", 0) == 3:
        return MAX_ACCUMULATORS_PINGPONG_192 if c["BLOCK_N"] == 192 else MAX_ACCUMULATORS_PINGPONG
    return MAX_ACCUMULATORS_TMA if uses_tma(c) and c["WARPS_N"] * c["WARPS_Q"] == 8 else MAX_ACCUMULATORS


def fit_config(config: Mapping[str, Any], k: int, dtype: str = "float16", limit: int = 227 * 1024,
               metric: str = "l2") -> dict:
    """``config`` with STAGES, EPI_ROWS, BLOCK_Q, BLOCK_K and BLOCK_N lowered (in that order) until its shared
    memory for ``k`` and ``metric`` fits ``limit`` bytes (the default metric is the most demanding one: cosine
    and l2 keep the tile's row norms). A wgmma config keeps STAGES >= 3 (``MMA=1``) or >= 2 (``MMA`` 2, 3) and
    switches to ``MMA=0`` before BLOCK_K and BLOCK_N."""
    code = DTYPE_CODES[_dtypes.canonical(dtype, DTYPE_CODES, "similarity search")]
    mcode = METRICS[metric]
    cfg = canonical_config(config)
    eb = 4 if code == 2 else 2
    while _S.topk_smem_bytes(cfg, code, mcode, k) > limit:
        if cfg["STAGES"] > (3 if cfg["MMA"] == 1 else 2):  # MMA=1 keeps one slice in flight: STAGES >= 3
            cfg["STAGES"] -= 1
        elif cfg["EPI_ROWS"] > 64 and cfg["BLOCK_N"] > 64:  # a shorter score tile
            cfg["EPI_ROWS"] = 64
        elif cfg["BLOCK_Q"] > 8:
            new_bq = 8  # the next lower power of two: the values every search space offers
            while new_bq * 2 < cfg["BLOCK_Q"]:
                new_bq *= 2
            wq = cfg["WARPS_Q"]
            while new_bq % (8 * wq):
                wq //= 2
            if cfg["WARPS_N"] * wq < 2:
                cfg["WARPS_N"] = 2 if cfg["BLOCK_N"] % 32 == 0 else cfg["WARPS_N"]
            cfg.update(BLOCK_Q=new_bq, WARPS_Q=max(1, wq))
        elif uses_wgmma(cfg):  # the wgmma rules allow nothing smaller; mma.sync goes on (2 stages, thinner slices)
            cfg = _with_mma(cfg, 0)
        elif cfg["BLOCK_K"] * eb > 64:  # thinner pipeline slices
            cfg["BLOCK_K"] //= 2
        elif cfg["BLOCK_N"] > 64:  # shorter corpus tiles (the score tile and scratch shrink with them)
            cfg["BLOCK_N"] //= 2
            while cfg["BLOCK_N"] % (16 * cfg["WARPS_N"]):
                cfg["WARPS_N"] //= 2
            if cfg["WARPS_N"] * cfg["WARPS_Q"] < 2:
                cfg["WARPS_N"] = 2
        else:
            raise InputError(f"k={k} needs {_S.topk_smem_bytes(cfg, code, mcode, k)} bytes of shared memory even "
                             f"with 8 queries per block, 2 stages and 64-row tiles; the limit is {limit} bytes: use a "
                             f"smaller k")
    return cfg


def canonical_config(config: Mapping[str, Any]) -> dict[str, int]:
    """``config`` as plain ints in :data:`PARAM_NAMES` order; ConfigError for unknown, missing or bad values.

    The tunables of :data:`PARAM_DEFAULTS` may be left out (configs written before the wgmma main loop, clusters and
    the L2 prefetch existed): they then mean MMA=0 (mma.sync), CLUSTER=1 (no cluster) and PREFETCH=0."""
    if isinstance(config, Mapping):
        config = {**PARAM_DEFAULTS, **config}
    return _config.canonical(config, PARAM_NAMES, PARAM_CHOICES, "similarity")


def canonical_gram_config(config: Mapping[str, Any]) -> dict[str, int]:
    """Gram config as plain ints in :data:`GRAM_PARAM_NAMES` order."""
    return _config.canonical(config, GRAM_PARAM_NAMES, GRAM_PARAM_CHOICES, "gram")


def config_string(config: Mapping[str, Any], names=PARAM_NAMES) -> str:
    """Compact identity of a config: ``"BLOCK_N=128,BLOCK_Q=104,..."``."""
    return _config.to_string(config, names)


def parse_config_string(text: str) -> dict[str, int]:
    """Inverse of :func:`config_string` (either family's names)."""
    return _config.from_string(text)


def default_gram_config(dtype: str = "complex64", symmetric: bool = True) -> dict:
    """Gram default: 64 x 64 tiles (square: symmetric mode needs it), 4 warps of 32 x 32, 3 stages.

    fp16/bf16 take 64-element slices (128 bytes), fp32 32, complex64 16 complex = 32 floats; complex keeps two
    accumulator sets (real and imaginary parts), so its warps own 32 x 32 as well.
    """
    dt = _dtypes.canonical(dtype, GRAM_DTYPE_CODES, "gram")
    tk = 64 if dt in ("float16", "bfloat16") else 32
    return dict(TILE_M=64, TILE_N=64, TILE_K=tk, WARPS_M=2, WARPS_N=2, STAGES=3, VEC=16)


# ------------------------------------------------------------------------------------------- compile & launch
def source_hash() -> str:
    """SHA-256 (16 hex digits) of the family's kernel sources (similarity/ and the common/ helpers it uses)."""
    from tunelab.paths import kernel_source_hash

    return kernel_source_hash("similarity", "common")


def _device_index(t) -> int:
    import torch

    return t.device.index if t.device.index is not None else torch.cuda.current_device()


_DEVICE_SMS: dict[int, int] = {}


def _sm_count(device: int) -> int:
    if device not in _DEVICE_SMS:
        _DEVICE_SMS[device] = int(_core.device_info(device)["sm_count"])
    return _DEVICE_SMS[device]


@dataclass
class CompiledSearch:
    """One search config compiled for one arch: the top-k kernel and every merge-kernel variant (one per
    :data:`MERGE_KINDS` entry; :func:`_S.merge_kind` picks one for k)."""

    config: dict
    dtype: str
    metric: str
    arch: str
    search_expr: str
    merge_exprs: dict  # merge kind -> name expression
    result: Any
    threads: int
    _occupancy: dict = field(default_factory=dict, repr=False)
    _smem: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        names = self.result.lowered_names
        self._loaded = DeviceFunctions(self.result.cubin, [names[self.search_expr]] +
                                       [names[self.merge_exprs[kind]] for kind in MERGE_KINDS])

    @property
    def dtype_code(self) -> int:
        """The kernel's dtype code (:data:`DTYPE_CODES`: float16 0, bfloat16 1, float32 2)."""
        return DTYPE_CODES[self.dtype]

    @property
    def metric_code(self) -> int:
        """The kernel's metric code (:data:`METRICS`: ip 0, cosine 1, l2 2)."""
        return METRICS[self.metric]

    @property
    def resources(self):
        """ptxas's report for the search kernel (registers, spills, stack)."""
        return self.result.resources[self.search_expr]

    def merge_resources(self, kind: int = 0):
        """ptxas's report for the merge kernel of kind ``kind`` (:data:`MERGE_KINDS`)."""
        return self.result.resources[self.merge_exprs[kind]]

    def smem_bytes(self, k: int) -> int:
        """Dynamic shared memory of the search kernel for ``k`` (the launcher's formula, once per k)."""
        k = int(k)
        if k not in self._smem:
            self._smem[k] = int(_S.topk_smem_bytes(self.config, self.dtype_code, self.metric_code, k))
        return self._smem[k]

    def functions(self, device: int):
        """(search, merge kinds 0 .. 6 in :data:`MERGE_KINDS` order) loaded on ``device`` (once per device)."""
        return self._loaded.get(device)

    def merge_function(self, device: int, kind: int):
        """The merge kernel of kind ``kind`` (:func:`_S.merge_kind`) loaded on ``device``."""
        return self.functions(device)[1 + MERGE_KINDS.index(kind)]

    def blocks_per_sm(self, device: int, k: int) -> int:
        """Resident search blocks per SM for ``k`` (the driver's occupancy answer)."""
        key = (device, k)
        if key not in self._occupancy:
            fn = self.functions(device)[0]
            self._occupancy[key] = max(1, int(fn.driver_occupancy(self.threads, self.smem_bytes(k))))
        return self._occupancy[key]

    @property
    def cluster(self) -> int:
        """Blocks per thread-block cluster (the config's CLUSTER; 1 without clusters)."""
        return self.config["CLUSTER"]

    @property
    def cluster_dims(self) -> tuple[int, int, int]:
        """The launch's cluster shape: CLUSTER blocks along the splits (grid y)."""
        return 1, self.cluster, 1

    def resident_blocks(self, device: int, k: int) -> int:
        """Search blocks the whole GPU holds at once for ``k``: SMs x blocks per SM, or with clusters the driver's
        count of resident clusters x CLUSTER (a cluster must fit in one GPC, which can leave SMs idle)."""
        if self.cluster == 1:
            return _sm_count(device) * self.blocks_per_sm(device, k)
        key = (device, k, "clusters")
        if key not in self._occupancy:
            fn = self.functions(device)[0]
            clusters = int(fn.driver_max_active_clusters(self.threads, self.smem_bytes(k), self.cluster))
            if clusters < 1:
                raise ConfigError(f"similarity config CLUSTER={self.cluster}: no cluster of {self.cluster} blocks "
                                  f"with {self.smem_bytes(k)} bytes of shared memory each fits this GPU; use "
                                  f"CLUSTER=1")
            self._occupancy[key] = clusters * self.cluster
        return self._occupancy[key]

    def plan(self, device: int, nq: int, n: int, k: int, splits: int | None = None) -> dict:
        """Grid of one search launch: query tiles x splits (one resident wave unless ``splits`` is given)."""
        if splits is not None:  # forced (ablations, tests): exactly `splits` splits, as far as there are tiles
            q_tiles = -(-nq // self.config["BLOCK_Q"])
            return dict(_S.topk_plan(self.config, nq, n, int(splits) * q_tiles, int(splits)))
        cap = max(self.cluster, WORKSPACE_CAP_BYTES // max(1, nq * k * 8))
        return dict(_S.topk_plan(self.config, nq, n, self.resident_blocks(device, k), cap))

    @property
    def dense(self) -> bool:
        """Whether the search writes every key to a dense nq x N matrix (``MERGE=5``) instead of candidate lists."""
        return self.config["MERGE"] == MERGE_DENSE

    @property
    def filtered(self) -> bool:
        """Whether the search appends the keys that reach their query's bar to a candidate row per query
        (``MERGE`` 6 or 7)."""
        return self.config["MERGE"] in MERGES_FILTERED

    @property
    def selects(self) -> bool:
        """Whether the search keeps no top-k and the select kernel follows it (``MERGE`` 5, 6 or 7)."""
        return self.dense or self.filtered

    def candidate_layout(self, plan: dict, nq: int, n: int, k: int) -> tuple:
        """The shapes and dtypes of :meth:`candidate_buffers`' two tensors: ``((shape, dtype name) or None,
        (shape, dtype name) or None)`` (every dtype is 4 bytes wide)."""
        if self.selects:
            ld = filter_ld(plan, self.config) if self.filtered else dense_ld(n)
            return ((nq, ld), "float32"), (((nq, ld), "int32") if self.filtered else None)
        return ((plan["splits"], nq, k), "float32"), ((plan["splits"], nq, k), "int32")

    def candidate_buffers(self, plan: dict, nq: int, n: int, k: int, device):
        """(cand_key, cand_idx) for one search launch: the splits' candidate lists, [splits][nq][k] float32 and
        int32; with ``MERGE=5`` the dense key matrix, [nq][N rounded up to 4] float32, and None; with ``MERGE=6``
        the candidate rows, [nq][:func:`filter_ld`] float32 and int32 (a segment per split with room for its every
        row, then the segments' counts). Their layout: :meth:`candidate_layout`."""
        import torch

        return tuple(None if spec is None else torch.empty(spec[0], dtype=getattr(torch, spec[1]), device=device)
                     for spec in self.candidate_layout(plan, nq, n, k))

    def search_args(self, queries, corpus_ptr: int, c_stride: int, n: int, k: int, cand_key, cand_idx,
                    index_base: int, list_offset: int, plan: dict):
        """(grid, block, smem, ArgPack) of the search kernel (``MERGE=5``: ``cand_key`` is the dense key matrix of
        :meth:`candidate_buffers` and ``cand_idx`` may be None; ``MERGE=6``: both are its candidate rows)."""
        nq, d = queries.shape
        blob = _S.topk_pack(self.config, self.dtype_code, queries.data_ptr(), int(corpus_ptr), cand_key.data_ptr(),
                            0 if cand_idx is None else cand_idx.data_ptr(), queries.stride(0), int(c_stride),
                            int(index_base), nq, int(n), d, int(k), plan["num_tiles"], plan["tiles_per_split"],
                            int(list_offset), cand_key.stride(0) if self.selects else 0)
        pack = _core.ArgPack()
        pack.raw(blob, 8)
        return (plan["q_tiles"], plan["splits"], 1), (self.threads, 1, 1), self.smem_bytes(k), pack

    def merge_args(self, cand_key, cand_idx, queries, k: int, num_lists: int, out_key=None, out_idx=None,
                   out_score=None, out_index=None, dense: tuple[int, int, int] | None = None,
                   kind: int | None = None, filtered_rows: bool = False):
        """(grid, block, smem, ArgPack, kind) of the merge kernel. ``dense`` = (list_len, list_stride,
        query_stride): the lists are rows of a dense score matrix with implicit indices (``cand_idx`` None)
        instead of the search's candidate lists. ``kind`` forces a merge variant (:data:`MERGE_KINDS`; ConfigError
        when it takes no list of k, or for :data:`MERGE_SORTED` with ``dense``, whose rows are not sorted); default
        :func:`_S.merge_kind` of k, the candidates per query and whether the lists are the search's (sorted).
        ``filtered_rows``: the select after a ``MERGE=6`` search, :data:`MERGE_FILTER_SELECT` (``dense`` = (rows per
        split, 0, row stride) and ``num_lists`` the splits: each row is a segment per split with the explicit
        indices ``cand_idx``, then the segments' counts and the search's bar words)."""
        nq, d = queries.shape
        candidates = int(num_lists) * (dense[0] if dense else int(k))
        if kind is None:
            kind = MERGE_FILTER_SELECT if filtered_rows else int(_S.merge_kind(int(k), candidates, dense is None))
        kind = int(kind)
        if kind == MERGE_SORTED and dense is not None:
            raise ConfigError(f"merge kind {MERGE_SORTED} needs sorted lists; the rows of a dense score matrix are "
                              f"not: pass kind=None (or 0..3)")
        if filtered_rows != (kind == MERGE_FILTER_SELECT):
            raise ConfigError(f"filtered_rows (a MERGE=6 search's candidate rows) are read by the filtered select "
                              f"only (kind={MERGE_FILTER_SELECT}), and it reads nothing else; got kind={kind}, "
                              f"filtered_rows={filtered_rows}: pass kind=None")
        if (kind == MERGE_FILTER_SELECT and dense is None) or (
                kind == MERGE_SELECT and (dense is None or int(num_lists) != 1)):
            raise ConfigError(f"merge kind {MERGE_SELECT} (select) reads one dense row per query (dense=(N, 0, "
                              f"row stride), num_lists=1) and kind {MERGE_FILTER_SELECT} a filtered search's rows "
                              f"(dense=(rows per split, 0, row stride), filtered_rows=True); got kind={kind}, "
                              f"num_lists={num_lists}, dense={dense}: pass kind=None")
        smem = int(_S.merge_smem_bytes(kind, int(k)))  # checks that the kind holds k
        ptr = lambda t: 0 if t is None else t.data_ptr()  # noqa: E731
        list_len, list_stride, query_stride = dense or (0, 0, 0)
        blob = _S.merge_pack(cand_key.data_ptr(), ptr(cand_idx), queries.data_ptr(), queries.stride(0), ptr(out_key),
                             ptr(out_idx), ptr(out_score), ptr(out_index), nq, d, int(k), int(num_lists), list_len,
                             list_stride, query_stride, dense is not None and not filtered_rows, bool(filtered_rows))
        pack = _core.ArgPack()
        pack.raw(blob, 8)
        return (nq, 1, 1), (int(_S.merge_threads(kind)), 1, 1), smem, pack, kind

    def launch_search(self, device: int, stream: int, *args, **kwargs) -> None:
        """Launch the search kernel on ``device`` and ``stream`` (raising its dynamic shared-memory limit if
        needed); the other arguments are :meth:`search_args`'s."""
        grid, block, smem, pack = self.search_args(*args, **kwargs)
        self.functions(device)[0].launch(grid, block, smem, stream, pack, cluster=self.cluster_dims)

    def final_merge_args(self, cand_key, cand_idx, queries, k: int, n: int, plan: dict, scores, indices,
                         kind: int | None = None):
        """:meth:`merge_args` of the merge that follows one search launch over ``n`` corpus rows: the select kernel
        over the dense key matrix (``MERGE=5``) or the candidate rows (``MERGE=6``), else the merge of the splits'
        candidate lists (``kind``: as :meth:`merge_args`'s)."""
        if self.dense:
            return self.merge_args(cand_key, None, queries, k, 1, out_score=scores, out_index=indices,
                                   dense=(int(n), 0, cand_key.stride(0)), kind=MERGE_SELECT)
        if self.filtered:
            return self.merge_args(cand_key, cand_idx, queries, k, plan["splits"], out_score=scores,
                                   out_index=indices, dense=(filter_rows(plan, self.config), 0, cand_key.stride(0)),
                                   kind=MERGE_FILTER_SELECT, filtered_rows=True)
        return self.merge_args(cand_key, cand_idx, queries, k, plan["splits"], out_score=scores, out_index=indices,
                               kind=kind)

    def launch_merge(self, device: int, stream: int, *args, **kwargs) -> None:
        """Launch the merge kernel of the kind :meth:`merge_args` picks for k on ``device`` and ``stream``; the
        other arguments are :meth:`merge_args`'s."""
        grid, block, smem, pack, kind = self.merge_args(*args, **kwargs)
        self.merge_function(device, kind).launch(grid, block, smem, stream, pack)

    def prepare(self, device: int, queries, corpus, k: int, cand_key, cand_idx, scores, indices, plan: dict,
                merge_kind: int | None = None):
        """Two ``_core.PreparedLaunch`` (search, merge) over a GPU corpus, for the timer and the op's cached
        launches (``cand_key``, ``cand_idx``: :meth:`candidate_buffers`; ``merge_kind``: as :meth:`merge_args`'s
        ``kind``, not for ``MERGE`` 5 and 6)."""
        n = corpus.shape[0]
        grid, block, smem, pack = self.search_args(queries, corpus.data_ptr(), corpus.stride(0), n, k, cand_key,
                                                   cand_idx, 0, 0, plan)
        p1 = self.functions(device)[0].prepare(grid, block, smem, pack, cluster=self.cluster_dims)
        grid, block, smem, pack, kind = self.final_merge_args(cand_key, cand_idx, queries, k, n, plan, scores, indices,
                                                              kind=merge_kind)
        p2 = self.merge_function(device, kind).prepare(grid, block, smem, pack, programmatic=self.programmatic_merge)
        return p1, p2

    @functools.cached_property  # the arch is fixed: looked up once, not at every prepare()
    def programmatic_merge(self) -> bool:
        """Whether :meth:`prepare`'s merge (or select) launch is a programmatic dependent launch (sm_90 and later):
        it may start while the search's last blocks still run, and waits for their results in the kernel
        (``kernels/common/pdl.cuh``), which hides its launch behind the search's tail. Launch it right after the
        search, on the same stream."""
        return tuple(_core.arch_limits(self.arch)["compute_capability"]) >= (9, 0)


_COMPILED: dict[tuple, Any] = {}
_COMPILED_LOCK = threading.Lock()


def compile_search(config: Mapping[str, Any], *, dtype: str = "float16", metric: str = "ip", arch: str | None = None,
                   use_cache: bool = True, trace: bool = False) -> CompiledSearch:
    """Compile the search config (and every merge-kernel variant, :data:`MERGE_KINDS`) with NVRTC for ``arch``, once per process.

    The launcher's shared-memory formula is passed as ``TUNELAB_EXPECTED_SMEM``; the kernel static_asserts that
    its own layout needs exactly that. Raises ConfigError for an invalid config, CompileError when NVRTC fails.
    Needs no GPU.

    ``trace=True`` builds the diagnosis variant (``TUNELAB_SIM_TRACE``): every search block writes a timeline of
    its events into the candidate-key buffer instead of candidate keys (layout: ``TopkBlock::trace`` in
    ``kernels/similarity/topk.cuh``), so its search results are meaningless; ``benchmarks/similarity_probe.py
    --trace`` decodes it.
    """
    from tunelab.kernel import current_arch
    from tunelab.paths import kernels_dir

    dt = _dtypes.canonical(dtype, DTYPE_CODES, "similarity search")
    if metric not in METRICS:
        raise InputError(f"metric={metric!r} is not accepted; use one of {list(METRICS)}")
    cfg = canonical_config(config)
    arch = arch or current_arch()
    key = ("search", tuple(cfg.values()), dt, metric, arch, bool(trace))
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit
    code, mcode = DTYPE_CODES[dt], METRICS[metric]
    _S.topk_validate(cfg, code, mcode)
    expr = _S.topk_name_expression(cfg, code, mcode)
    merges = {kind: _S.merge_name_expression(code, mcode, kind) for kind in MERGE_KINDS}
    static = int(_S.topk_static_smem_bytes(cfg, code, mcode))  # the kernel static_asserts its layout against it
    from tunelab.errors import CompileError

    try:
        result = _core.compile(_SEARCH_SOURCE, [expr, *merges.values()], compile_arch(cfg, arch), [],
                               {"TUNELAB_EXPECTED_SMEM": str(static), **({"TUNELAB_SIM_TRACE": "1"} if trace else {})},
                               {}, [str(kernels_dir())], 0, use_cache)
    except CompileError as exc:
        exc.config = dict(cfg)
        raise
    compiled = CompiledSearch(cfg, dt, metric, arch, expr, merges, result, int(_S.topk_threads(cfg)))
    with _COMPILED_LOCK:
        return _COMPILED.setdefault(key, compiled)


@dataclass
class CompiledGram:
    """One Gram config compiled for one arch, dtype and mode (epilogue 0: |<x_i, x_j>|^2; 1: the plain product
    <x_i, y_j> of two matrices, used by :func:`search_unfused`)."""

    config: dict
    dtype: str
    symmetric: bool
    mirror: bool
    arch: str
    expr: str
    result: Any
    threads: int
    smem: int
    epilogue: int = 0

    def __post_init__(self):
        self._loaded = DeviceFunctions(self.result.cubin, [self.result.lowered_names[self.expr]])

    @property
    def dtype_code(self) -> int:
        """The kernel's dtype code (:data:`GRAM_DTYPE_CODES`: float16 0, bfloat16 1, float32 2, complex64 3)."""
        return GRAM_DTYPE_CODES[self.dtype]

    @property
    def resources(self):
        """ptxas's report for the Gram kernel (registers, spills, stack)."""
        return self.result.resources[self.expr]

    def function(self, device: int):
        """The loaded Gram kernel on CUDA device ``device`` (loaded once per device; needs a GPU)."""
        return self._loaded.get(device)[0]

    def launch_args(self, x, out, y=None):
        """(grid, block, smem, ArgPack) for states ``x`` (n, dim) and output ``out`` (n, n) float32; with ``y``
        (m2, dim), the product of x's and y's rows into ``out`` (n, m2)."""
        xr = _real_view(x)
        yr = xr if y is None else _real_view(y)
        m, n = xr.shape[0], yr.shape[0]
        blob = _S.gram_pack(self.config, self.dtype_code, self.symmetric, xr.data_ptr(), yr.data_ptr(), out.data_ptr(),
                            xr.stride(0), yr.stride(0), out.stride(0), m, n, xr.shape[1])
        pack = _core.ArgPack()
        pack.raw(blob, 8)
        return tuple(_S.gram_grid(self.config, m, n, self.symmetric)), (self.threads, 1, 1), self.smem, pack

    def launch(self, x, out, stream: int | None = None, y=None) -> None:
        """Launch on ``stream`` (default: torch's current stream of x's device); arguments as :meth:`launch_args`."""
        grid, block, smem, pack = self.launch_args(x, out, y)
        dev = _device_index(x)
        if stream is None:
            stream = current_stream(x.device)
        self.function(dev).launch(grid, block, smem, stream, pack)

    def prepare(self, x, out, y=None):
        """A ``_core.PreparedLaunch`` for the timer (same launch as :meth:`launch`, resolved once)."""
        grid, block, smem, pack = self.launch_args(x, out, y)
        return self.function(_device_index(x)).prepare(grid, block, smem, pack)


def _real_view(x):
    """complex64 (n, dim) -> float32 (n, 2 dim) view of the interleaved (re, im) pairs; others unchanged."""
    import torch

    if x.dtype == torch.complex64:
        return torch.view_as_real(x).flatten(1)  # a view: rows have stride 1 in complex elements
    return x


def compile_gram(config: Mapping[str, Any], *, dtype: str = "complex64", symmetric: bool = True, mirror: bool = False,
                 arch: str | None = None, use_cache: bool = True, epilogue: int = 0) -> CompiledGram:
    """Compile a Gram config with NVRTC (once per process). ``mirror`` needs ``symmetric``; ``epilogue=1`` is the
    plain product of two real matrices (no square; non-symmetric)."""
    from tunelab.kernel import current_arch
    from tunelab.paths import kernels_dir

    dt = _dtypes.canonical(dtype, GRAM_DTYPE_CODES, "gram")
    if mirror and not symmetric:
        raise InputError("mirror=True applies to symmetric=True only (the full product already writes both halves)")
    cfg = canonical_gram_config(config)
    arch = arch or current_arch()
    key = ("gram", tuple(cfg.values()), dt, bool(symmetric), bool(mirror), arch, int(epilogue))
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit
    code = GRAM_DTYPE_CODES[dt]
    _S.gram_validate(cfg, code, bool(symmetric))
    expr = _S.gram_name_expression(cfg, code, bool(symmetric), bool(mirror), int(epilogue))
    smem = int(_S.gram_smem_bytes(cfg, code))
    from tunelab.errors import CompileError

    try:
        result = _core.compile(_GRAM_SOURCE, [expr], arch, [], {"TUNELAB_EXPECTED_SMEM": str(smem)}, {},
                               [str(kernels_dir())], 0, use_cache)
    except CompileError as exc:
        exc.config = dict(cfg)
        raise
    compiled = CompiledGram(cfg, dt, bool(symmetric), bool(mirror), arch, expr, result, int(_S.gram_threads(cfg)), smem,
                            int(epilogue))
    with _COMPILED_LOCK:
        return _COMPILED.setdefault(key, compiled)


# ------------------------------------------------------------------------------------------------ validation
_DTYPE_NAMES: dict = {}


def _dtype_name(t) -> str:
    """torch's name of ``t``'s dtype without the module ("float16"), memoized per dtype: on every call's path."""
    dtype = t.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES.setdefault(dtype, str(dtype).replace("torch.", ""))
    return name


def validate_search_inputs(queries, corpus, k, metric):
    """Raise InputError for anything the search cannot take; returns (queries 2-D, squeeze flag)."""
    import torch

    for name, t in (("queries", queries), ("corpus", corpus)):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if metric not in METRICS:
        raise InputError(f"metric={metric!r} is not accepted; use one of {list(METRICS)}")
    squeeze = queries.dim() == 1
    if squeeze:
        queries = queries.unsqueeze(0)
    if queries.dim() != 2:
        raise InputError(f"queries has shape {tuple(queries.shape)}; pass (nq, d) or a single (d,) query")
    if corpus.dim() != 2:
        raise InputError(f"corpus has shape {tuple(corpus.shape)}; pass a 2-D (N, d) tensor")
    if not queries.is_cuda:
        raise InputError(f"queries are on {queries.device}; similarity_search runs on a GPU: move them with .cuda() "
                         "(the corpus may stay in host memory: it is then streamed)")
    # (each attribute read once: this runs on every call, and a tensor's attribute costs ~0.1-0.4 us)
    if corpus.is_cuda:
        if corpus.get_device() != queries.get_device():
            raise InputError(f"queries are on {queries.device} but the corpus is on {corpus.device}; put both on one "
                             "GPU or keep the corpus in host memory")
    elif corpus.device.type != "cpu":
        raise InputError(f"corpus is on {corpus.device}; pass a CUDA or a CPU tensor")
    names = (_dtype_name(queries), _dtype_name(corpus))
    for name, dt in zip(("queries", "corpus"), names):
        if dt not in DTYPE_CODES:
            raise InputError(f"{name} has dtype {dt}; accepted dtypes are {list(DTYPE_CODES)}")
    if names[0] != names[1]:
        raise InputError(f"queries ({names[0]}) and corpus ({names[1]}) must have the same dtype; convert one with "
                         ".to()")
    (nq, d), (n, dc) = queries.shape, corpus.shape
    if d != dc:
        raise InputError(f"dimension mismatch: queries have d={d}, the corpus d={dc}")
    if d == 0:
        raise InputError("d=0: vectors must have at least one component")
    for name, rows, (row_stride, stride) in (("queries", nq, queries.stride()), ("corpus", n, corpus.stride())):
        if d > 1 and stride != 1:
            raise InputError(f"{name} rows are not contiguous (strides {(row_stride, stride)}); the last dimension "
                             f"must have stride 1: call .contiguous() on {name}")
        if rows > 1 and row_stride < d:
            raise InputError(f"{name} rows overlap (row stride {row_stride} < d={d}, e.g. an expanded tensor); call "
                             f".contiguous() on {name}")
    if not isinstance(k, int) or isinstance(k, bool):
        raise InputError(f"k={k!r} must be an int (1 <= k <= N)")
    if k < 1:
        raise InputError(f"k={k} must be >= 1 (and at most N={n}, the corpus rows)")
    if k > n:
        raise InputError(f"k={k} is larger than the corpus (N={n} rows); use k <= {n}")
    if k > MAX_K:
        raise InputError(f"k={k} is above the supported maximum {MAX_K}")
    if n >= 2 ** 31 - 1:
        raise InputError(f"N={n} rows: indices are 32-bit inside the kernels; split the corpus below 2^31 rows")
    return queries, squeeze


# ------------------------------------------------------------------------------------------- config resolution
def problem_of(nq: int, n: int, d: int, k: int, dtype: str, metric: str) -> dict:
    """The problem dict of the similarity family (what the tuner and the store key on)."""
    return {"nq": int(nq), "n": int(n), "d": int(d), "k": int(k), "dtype": _dtypes.short_name(dtype),
            "metric": metric}


def resolve_config(device_index: int, *, nq: int, n: int, d: int, k: int, dtype: str, metric: str) -> tuple[dict, str]:
    """The config the op uses without an explicit one, and where it came from (``"store"`` or ``"default"``).

    The stored or default config is fitted to this exact k and nq (shared memory grows with both), so the cache
    keys on them and on the store bucket's n."""
    from tunelab.tuning.family import next_pow2

    return _dispatch.resolve(  # the problem and the arch are made only on a cache miss, inside the callables
        "similarity", device_index, lambda: problem_of(nq, n, d, k, dtype, metric),
        ("search", int(nq), next_pow2(n), int(d), int(k), dtype, metric),
        lambda found: fit_config(found, k, dtype, smem_limit(_arch(device_index)), metric),
        lambda: default_config(nq, k, dtype, d, arch=_arch(device_index), n=next_pow2(n)))


def clear_caches() -> None:
    """Forget resolved configs of every op and the search's cached call shapes and launches (compiled kernels stay
    loaded; the search's scratch buffers are :func:`release_memory`'s)."""
    _dispatch.clear_caches()  # and, through its on_clear, _forget_call_shapes()


def _fit_vec(cfg: dict, dtype: str, pointers, strides, d: int, explicit: bool, k: int, metric: str,
             arch: str) -> dict:
    """``cfg`` with the copy width (VEC) and main loop (MMA 2, 3 read rows by TMA) these inputs allow; InputError for
    an explicit config they do not allow (MMA 2, 3: ``topk_pack`` raises it, naming the rule)."""
    dtype_code = DTYPE_CODES[dtype]
    pointers, strides = [int(p) for p in pointers], [int(s) for s in strides]
    allowed = int(_S.max_vec(dtype_code, pointers, strides, int(d)))
    if allowed == 0:
        raise InputError("the inputs are not even 4-byte aligned (pointers, row strides or d * element size); "
                         "call .contiguous() (16-bit inputs with odd d are padded automatically)")
    if cfg["VEC"] > allowed:
        if explicit:
            raise InputError(f"config VEC={cfg['VEC']} needs {cfg['VEC']}-byte aligned rows; these inputs allow "
                             f"VEC <= {allowed}")
        cfg = dict(cfg, VEC=allowed)
    # TMA reads 16-byte aligned pointers and row strides (d may be anything: the tail of a row reads as zeros)
    if uses_tma(cfg) and not explicit and int(_S.max_vec(dtype_code, pointers, strides, 0)) < 16:
        cfg = without_tma(cfg, k, dtype, metric, smem_limit(arch))
    return cfg


def _pad_d(t, d_pad: int):
    import torch

    out = torch.zeros((t.shape[0], d_pad), dtype=t.dtype, device=t.device)
    out[:, : t.shape[1]] = t
    return out


def _row_strided(t):
    """A single-row tensor may carry any row stride; give it a well-formed one (>= d) without copying data."""
    if t.shape[0] == 1 and t.stride(0) < t.shape[1]:
        return t.as_strided(t.shape, (t.shape[1], 1))
    return t


def needs_padding(dtype_code: int, d: int) -> bool:
    """16-bit vectors of odd length cannot be copied in 4-byte units: such inputs are zero-padded to even d."""
    return dtype_code in (0, 1) and d % 2 == 1


# ------------------------------------------------------------------------------------------------ the search
#: The host path of an in-memory search, cached so that a repeated call costs two allocations (its outputs) and one
#: graph launch (``benchmarks/similarity_op_host_parts.py``): per call shape (device, config or, for the op, its
#: config string, dtype, metric, sizes, row strides, pointer alignment) the compiled search, its grid plan and the
#: layout of its candidate buffers (kept between calls on a stream: ``ops/workspace.py``); per set of pointers
#: (inputs, candidate buffers, outputs: torch's caching allocator hands a loop the same few) the two prepared
#: launches, whose argument blobs (TMA descriptors included) are functions of exactly those keys, replayed as one
#: CUDA graph from their GRAPH_AFTER-th use (:class:`_Launches`). Each dict is emptied when it reaches
#: _LAUNCH_CACHE_MAX entries, and both when ``ops.dispatch`` forgets its resolved configs (_forget_call_shapes).
_SEARCH_SHAPES: dict[tuple, tuple] = {}
_SEARCH_LAUNCHES: dict[tuple, "_Launches"] = {}
_LAUNCH_CACHE_MAX = 256
#: Uses of one set of prepared launches before they are recorded into a graph: a pointer set seen once (new
#: inputs every call) never pays the graph's capture (~0.1-0.3 ms).
GRAPH_AFTER = 2


def _remember(cache: dict, key: tuple, value):
    if len(cache) >= _LAUNCH_CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


_GRAPHS_FAILED: list[str] = []  # why recording launches into a graph failed in this process, once it has


class _Launches:
    """The prepared launches (search, then the merge or select of its candidates) of one call shape and pointer
    set. Made one by one for their first GRAPH_AFTER - 1 uses, then recorded into a ``_core.LaunchGraph`` and
    replayed with one driver call (which, on a stream being captured into a caller's graph, makes them one by one:
    they become nodes of that graph). The use that would record them on a stream being captured does not (the next
    use outside the capture does). Once a recording has failed (an old driver), no other is tried in this process: the
    launches are made one by one, with one warning."""

    __slots__ = ("launches", "graph", "uses")

    def __init__(self, launches: tuple):
        self.launches = launches
        self.graph = None
        self.uses = 0  # calls made launch by launch

    def __call__(self, stream: int) -> None:
        graph = self.graph
        if graph is not None:
            graph(stream)
            return
        for launch in self.launches:
            launch(stream)  # (makes the launches' context current: the capture check asks in it)
        self.uses += 1
        if self.uses != GRAPH_AFTER or _GRAPHS_FAILED:
            return
        if _core.stream_is_capturing(stream):
            self.uses -= 1  # recorded at a call outside the capture
            return
        from tunelab.errors import PoisonedContextError

        try:
            self.graph = _core.LaunchGraph(list(self.launches))
        except PoisonedContextError:
            raise
        except Exception as exc:  # noqa: BLE001 - the launches still work one by one
            import warnings

            _GRAPHS_FAILED.append(str(exc))
            warnings.warn(f"the search's launches could not be recorded into a CUDA graph ({exc}); in this process "
                          "they are made one by one", stacklevel=2)


def _search_gpu(queries, corpus, k: int, metric: str, cfg, explicit: bool, splits: int | None = None,
                dev: int | None = None, dt: str | None = None, cfg_key=None):
    """Search a GPU corpus (``queries``, ``corpus``: validated) with ``cfg``; returns (scores, indices).

    ``cfg``: the config dict; or, with ``cfg_key`` (what the config is a function of besides this call's shapes:
    the op's config string), a callable that makes it, called only when the call shape is not cached yet."""
    import torch

    dev = _device_index(queries) if dev is None else dev
    dt = _dtype_name(queries) if dt is None else dt
    nq, d = queries.shape
    n = corpus.shape[0]
    if needs_padding(DTYPE_CODES[dt], d):
        queries, corpus = _pad_d(queries, d + 1), _pad_d(corpus, d + 1)
        d += 1
    if nq == 1:
        queries = _row_strided(queries)
    if n == 1:
        corpus = _row_strided(corpus)
    qp, cp, qs, cs = queries.data_ptr(), corpus.data_ptr(), queries.stride(0), corpus.stride(0)
    shape_key = (dev, tuple(cfg.items()) if cfg_key is None else cfg_key, explicit, dt, metric, nq, n, d, k, splits,
                 qs, cs, (qp | cp) & 15)
    shape = _SEARCH_SHAPES.get(shape_key)
    if shape is None:
        if cfg_key is not None:
            cfg = cfg()
        fitted = _fit_vec(cfg, dt, [qp, cp], [qs, cs], d, explicit, k, metric, _arch(dev))
        compiled = compile_search(fitted, dtype=dt, metric=metric, arch=_arch(dev))
        plan = compiled.plan(dev, nq, n, k, splits)
        layout = compiled.candidate_layout(plan, nq, n, k)
        nbytes = sum(4 * math.prod(spec[0]) for spec in layout if spec is not None)
        shape = _remember(_SEARCH_SHAPES, shape_key, (compiled, plan, layout, nbytes))
    compiled, plan, layout, nbytes = shape
    stream = current_stream(dev)
    cand_key, cand_idx = _workspace.reuse(dev, stream, layout, nbytes,
                                          lambda: compiled.candidate_buffers(plan, nq, n, k, queries.device))
    scores = queries.new_empty((nq, k), dtype=torch.float32)  # ~1 us less than torch.empty(..., device=)
    indices = queries.new_empty((nq, k), dtype=torch.int64)
    launch_key = (shape_key, qp, cp, cand_key.data_ptr(), 0 if cand_idx is None else cand_idx.data_ptr(),
                  scores.data_ptr(), indices.data_ptr())
    launches = _SEARCH_LAUNCHES.get(launch_key)
    if launches is None:
        launches = _remember(_SEARCH_LAUNCHES, launch_key, _Launches(
            compiled.prepare(dev, queries, corpus, k, cand_key, cand_idx, scores, indices, plan)))
    launches(stream)
    return scores, indices


def _forget_call_shapes() -> None:
    """Drop the search's cached call shapes and launches: the op's call shapes hold configs resolved from the store
    (``ops.dispatch`` calls this when it forgets its own: a store write, ``clear_caches``)."""
    _SEARCH_SHAPES.clear()
    _SEARCH_LAUNCHES.clear()


_dispatch.on_clear(_forget_call_shapes)


_ARCH: dict[int, str] = {}


def _arch(dev: int) -> str:
    from tunelab.kernel import current_arch

    if dev not in _ARCH:
        _ARCH[dev] = current_arch(dev)
    return _ARCH[dev]


@functools.lru_cache(maxsize=256)
def _explicit_config(config: str, k: int, dtype: str, metric: str, arch: str) -> dict:
    """A caller's config string, validated and fitted to k, once per distinct call shape (copy before changing)."""
    return fit_config(canonical_config(parse_config_string(config)), k, dtype, smem_limit(arch), metric)


def _run_search(queries, corpus, k: int, metric: str, config: str, memory_fraction: float, memory_budget: int,
                chunk_rows: int, streams: int):
    dev = _device_index(queries)
    dt = _dtype_name(queries)
    nq, d = queries.shape
    n = corpus.shape[0]
    explicit = bool(config)

    def resolved() -> dict:
        if explicit:
            return dict(_explicit_config(config, k, dt, metric, _arch(dev)))
        return resolve_config(dev, nq=nq, n=n, d=d, k=k, dtype=dt, metric=metric)[0]

    if corpus.is_cuda and memory_budget <= 0 and chunk_rows <= 0:  # resolved only for a call shape not cached yet
        return _search_gpu(queries, corpus, k, metric, resolved, explicit, dev=dev, dt=dt, cfg_key=("op", config))
    cfg = resolved()
    from tunelab.ops.streaming import search_streamed

    return search_streamed(queries, corpus, k, metric=metric, config=cfg, explicit=explicit,
                           memory_fraction=memory_fraction, memory_budget=memory_budget or None,
                           chunk_rows=chunk_rows or None, streams=streams)


def similarity_search(queries, corpus, k: int, *, metric: str = "ip", config: Mapping[str, Any] | None = None,
                      memory_fraction: float = 0.85, memory_budget: int | None = None, chunk_rows: int | None = None,
                      streams: int = 2):
    """Exact top-k search of ``queries`` against ``corpus``; returns ``(scores, indices)`` sorted best first.

    Args:
        queries: (nq, d) or (d,) on a GPU; float16, bfloat16 or float32; rows contiguous.
        corpus: (N, d) with the same dtype, on the same GPU or in host memory (streamed; pin it with
            ``corpus.pin_memory()`` for full host-to-device bandwidth).
        k: results per query, 1 <= k <= min(N, 1024).
        metric: ``"ip"`` (inner product), ``"cosine"`` or ``"l2"`` (squared distance, ascending).
        config: kernel config (dict of :data:`PARAM_NAMES`); default: stored tuned config, else
            :func:`default_config`.
        memory_fraction: streamed corpora: the share of free GPU memory the chunks may use (default 0.85).
        memory_budget: streamed corpora: bytes the search may use on the GPU instead of ``memory_fraction`` of
            free memory (a GPU corpus given a budget is streamed too, which is how tests force out-of-core runs).
        chunk_rows: streamed corpora: corpus rows per chunk instead of the automatic size.
        streams: streamed corpora: copy streams (= device buffers in flight), >= 1.

    Returns:
        ``(scores, indices)``: float32 and int64, (nq, k) (or (k,) for a 1-D query).

    Raises:
        InputError: wrong devices, dtypes, shapes or strides, dimension mismatch, k out of range, budgets that
            cannot hold one chunk. ConfigError: a bad ``config``.
    """
    import torch

    q2, squeeze = validate_search_inputs(queries, corpus, k, metric)
    if not 0 < float(memory_fraction) <= 1:
        raise InputError(f"memory_fraction={memory_fraction} must be in (0, 1]")
    if int(streams) < 1:
        raise InputError(f"streams={streams} must be >= 1")
    if memory_budget is not None and int(memory_budget) <= 0:
        raise InputError(f"memory_budget={memory_budget} must be a positive number of bytes")
    if chunk_rows is not None and int(chunk_rows) <= 0:
        raise InputError(f"chunk_rows={chunk_rows} must be >= 1")
    cfg = "" if config is None else config_string(canonical_config(config))
    if q2.shape[0] == 0:
        s = torch.empty((0, k), dtype=torch.float32, device=q2.device)
        i = torch.empty((0, k), dtype=torch.int64, device=q2.device)
    else:
        s, i = _eager.call("similarity_search", _run_search, q2, corpus, int(k), metric, cfg, float(memory_fraction),
                           int(memory_budget or 0), int(chunk_rows or 0), int(streams))
    if squeeze:
        s, i = s[0], i[0]
    return s, i


# ------------------------------------------------------------------------------------------------ Gram
def validate_gram_inputs(states):
    """Raise InputError unless ``states`` is a 2-D CUDA tensor of a Gram dtype with dim >= 1 and contiguous rows."""
    import torch

    if not isinstance(states, torch.Tensor):
        raise InputError(f"states must be a torch.Tensor; got {type(states).__name__}")
    if states.dim() != 2:
        raise InputError(f"states has shape {tuple(states.shape)}; pass (n, dim)")
    if not states.is_cuda:
        raise InputError(f"states are on {states.device}; gram runs on a GPU: move them with .cuda()")
    if _dtype_name(states) not in GRAM_DTYPE_CODES:
        raise InputError(f"states have dtype {_dtype_name(states)}; accepted dtypes are {list(GRAM_DTYPE_CODES)}")
    if states.shape[1] == 0:
        raise InputError(f"states have shape {tuple(states.shape)}: each of the n states needs dimension >= 1; pass (n, dim) with dim >= 1")
    if states.shape[1] > 1 and states.stride(1) != 1:
        raise InputError(f"states rows are not contiguous (strides {tuple(states.stride())}); call .contiguous()")


def _gram_into(states, out, symmetric: bool, mirror: bool, config: str) -> None:
    dt = _dtype_name(states)
    code = GRAM_DTYPE_CODES[dt]
    x = states
    dim = x.shape[1]
    if needs_padding(code, dim):
        x = _pad_d(x, dim + 1)
    cfg = canonical_gram_config(parse_config_string(config)) if config else _resolve_gram(x, dt, symmetric)
    xr = _real_view(x)
    allowed = int(_S.max_vec(2 if code == 3 else code, [xr.data_ptr()], [xr.stride(0)], xr.shape[1]))
    if allowed == 0:
        raise InputError("states are not 4-byte aligned; call .contiguous()")
    if cfg["VEC"] > allowed:
        if config:
            raise InputError(f"config VEC={cfg['VEC']} needs {cfg['VEC']}-byte aligned rows; these allow <= {allowed}")
        cfg = dict(cfg, VEC=allowed)
    compiled = compile_gram(cfg, dtype=dt, symmetric=symmetric, mirror=mirror, arch=_arch(_device_index(states)))
    compiled.launch(x, out)


def _gram_new(states, symmetric: bool, mirror: bool, config: str):
    """A new (n, n) output (zeros where a symmetric product leaves the lower triangle) with the Gram matrix."""
    import torch

    n = states.shape[0]
    alloc = torch.zeros if symmetric and not mirror else torch.empty
    out = alloc((n, n), dtype=torch.float32, device=states.device)
    _gram_into(states, out, symmetric, mirror, config)
    return out


def _resolve_gram(x, dt: str, symmetric: bool) -> dict:
    from tunelab.tuning.family import next_pow2

    n, dim = int(x.shape[0]), int(x.shape[1])

    def adapt(found):
        cfg = canonical_gram_config(found)
        _S.gram_validate(cfg, GRAM_DTYPE_CODES[dt], bool(symmetric))
        return cfg

    def problem():
        return {"n": n, "dim": dim, "dtype": _dtypes.short_name(dt), "symmetric": bool(symmetric)}

    cfg, _ = _dispatch.resolve("gram", _device_index(x), problem, ("gram", next_pow2(n), dim, dt, bool(symmetric)),
                               adapt, lambda: default_gram_config(dt, symmetric))
    return cfg


def gram(states, symmetric: bool = True, *, mirror: bool = False, config: Mapping[str, Any] | None = None, out=None):
    """Gram matrix ``K_ij = |<x_i, x_j>|^2`` (fp32) of the rows of ``states`` (n, dim).

    Args:
        states: (n, dim) float16, bfloat16, float32 or complex64 on a GPU, rows contiguous. For complex states
            ``<x_i, x_j> = sum_k conj(x_ik) x_jk``.
        symmetric: compute only the tiles on and above the diagonal and write only ``K_ij`` with ``j >= i``
            (half the arithmetic). Entries below the diagonal are left untouched: zeros in a new output, whatever
            was there in ``out``.
        mirror: with ``symmetric``, also write the lower triangle (the full matrix at half the arithmetic).
        config: kernel config (dict of :data:`GRAM_PARAM_NAMES`); default: stored tuned config, else
            :func:`default_gram_config`.
        out: optional (n, n) float32 CUDA tensor to write into (row stride >= n, last dim contiguous).

    Returns:
        The (n, n) float32 matrix (``out`` when given).
    """
    import torch

    validate_gram_inputs(states)
    if mirror and not symmetric:
        raise InputError("mirror=True applies to symmetric=True only (the full product already writes both halves)")
    cfg = "" if config is None else config_string(canonical_gram_config(config), GRAM_PARAM_NAMES)
    n = states.shape[0]
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.dtype != torch.float32 or out.device != states.device or \
                tuple(out.shape) != (n, n) or (n > 1 and out.stride(1) != 1):
            raise InputError(f"out must be a ({n}, {n}) float32 tensor on {states.device} with contiguous rows")
        if n:
            _eager.call("gram_out", _gram_into, states, out, bool(symmetric), bool(mirror), cfg)
        return out
    if n == 0:
        return torch.empty((0, 0), dtype=torch.float32, device=states.device)
    return _eager.call("gram", _gram_new, states, bool(symmetric), bool(mirror), cfg)


# ------------------------------------------------------------------------------------------------ ablation
#: GEMM tile of the unfused ablation: 128 x 128, 2 x 4 warps of 64 x 32, 128-byte slices, 3 stages.
UNFUSED_GEMM_CONFIG = dict(TILE_M=128, TILE_N=128, TILE_K=64, WARPS_M=2, WARPS_N=4, STAGES=3, VEC=16)


def search_unfused(queries, corpus, k: int, *, gemm_config: Mapping[str, Any] | None = None, workspace=None):
    """Inner-product top-k the unfused way, with our own kernels: the tensor-core GEMM writes the nq x N fp32
    score matrix, then the merge kernel selects each row's k best (8 warps per query, one contiguous eighth of
    the row each). The benchmark's ablation of fusing the top-k into the GEMM; same results as
    :func:`similarity_search` (``metric="ip"``) up to ties. ``workspace``: a dict reused across calls."""
    import torch

    nq, d = queries.shape
    n = corpus.shape[0]
    dt = _dtype_name(queries)
    cfg = dict(gemm_config or UNFUSED_GEMM_CONFIG)
    if dt == "float32":
        cfg["TILE_K"] = 32
    dev = _device_index(queries)
    gemm = compile_gram(cfg, dtype=dt, symmetric=False, mirror=False, epilogue=1, arch=_arch(dev))
    merge = compile_search(default_config(nq, k, dt, d, arch=_arch(dev)), dtype=dt, metric="ip", arch=_arch(dev))
    lists = 8  # row segments of the dense matrix (any count works for either merge variant)
    list_len = -(-n // lists)
    ws = workspace if workspace is not None else {}
    key = (nq, n, k, dt)
    if ws.get("key") != key:
        mat = torch.empty((nq, lists * list_len), dtype=torch.float32, device=queries.device)
        mat[:, n:] = float("nan")  # padding of the last list: never enters the top-k
        ws.update(key=key, mat=mat, scores=torch.empty((nq, k), dtype=torch.float32, device=queries.device),
                  indices=torch.empty((nq, k), dtype=torch.int64, device=queries.device))
    mat, scores, indices = ws["mat"], ws["scores"], ws["indices"]
    stream = current_stream(queries.device)
    gemm.launch(queries, mat, stream, y=corpus)
    merge.launch_merge(dev, stream, mat, None, queries, k, lists, out_score=scores, out_index=indices,
                       dense=(list_len, list_len, mat.stride(0)))
    return scores, indices


# ------------------------------------------------------------------------------------------------ memory
def release_memory() -> None:
    """Free what the search keeps between calls: the scratch buffers of in-memory searches (``ops/workspace.py``),
    their recorded launch graphs, and the pinned host and device buffers of streamed searches (also runs at
    interpreter exit). Memory still in use by queued kernels is freed once they are done."""
    from tunelab.ops import streaming

    held = _workspace.release()
    _SEARCH_LAUNCHES.clear()
    streaming.release_memory()
    if held:
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


atexit.register(lambda: _safe_release())


def _safe_release() -> None:
    try:
        release_memory()
    except Exception:  # noqa: BLE001 - interpreter shutdown: nothing useful to report
        pass


# ------------------------------------------------------------------------------------------------ custom ops
def _register_custom_ops() -> None:
    try:
        import torch
    except ImportError:  # the ops need torch; the rest of this module does not
        return
    schema = ("(Tensor queries, Tensor corpus, int k, str metric, str config, float memory_fraction, "
              "int memory_budget, int chunk_rows, int streams) -> (Tensor, Tensor)")

    # No device_types: the corpus may live on the CPU while the queries are on a GPU; the implementation
    # dispatches on where the corpus is.
    @torch.library.custom_op("tunelab::similarity_search", mutates_args=(), schema=schema)
    def _search_op(queries, corpus, k, metric, config, memory_fraction, memory_budget, chunk_rows, streams):
        return _run_search(queries, corpus, k, metric, config, memory_fraction, memory_budget, chunk_rows, streams)

    @_search_op.register_fake
    def _search_fake(queries, corpus, k, metric, config, memory_fraction, memory_budget, chunk_rows, streams):
        nq = queries.shape[0]
        return (queries.new_empty((nq, k), dtype=torch.float32), queries.new_empty((nq, k), dtype=torch.int64))

    @torch.library.custom_op("tunelab::gram", mutates_args=(), device_types="cuda",
                             schema="(Tensor states, bool symmetric, bool mirror, str config) -> Tensor")
    def _gram_op(states, symmetric, mirror, config):
        return _gram_new(states, symmetric, mirror, config)

    @_gram_op.register_fake
    def _gram_fake(states, symmetric, mirror, config):
        n = states.shape[0]
        return states.new_empty((n, n), dtype=torch.float32)

    @torch.library.custom_op("tunelab::gram_out", mutates_args=("out",), device_types="cuda",
                             schema="(Tensor states, Tensor(a!) out, bool symmetric, bool mirror, str config) -> ()")
    def _gram_out_op(states, out, symmetric, mirror, config):
        _gram_into(states, out, symmetric, mirror, config)


_register_custom_ops()

__all__ = ["similarity_search", "gram", "release_memory", "default_config", "default_gram_config", "fit_config",
           "compile_search", "compile_gram", "resolve_config", "canonical_config", "canonical_gram_config",
           "config_string", "parse_config_string", "source_hash", "clear_caches", "CompiledSearch", "CompiledGram",
           "PARAM_NAMES", "PARAM_CHOICES", "GRAM_PARAM_NAMES", "GRAM_PARAM_CHOICES", "METRICS", "MAX_K"]
