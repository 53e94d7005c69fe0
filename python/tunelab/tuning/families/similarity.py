"""The top-k similarity-search family: search space, gates, numerics, baseline (``torch.topk(Q @ C.T)``).

Problem: ``{"nq", "n", "d", "k", "dtype" (fp16 | bf16 | fp32), "metric" (ip | cosine | l2)}``; on the command line
``tunelab tune similarity --nq 100 --n 50000 --d 768 --k 10 --dtype fp16 [--metric ip]`` (or ``--shape nq,n,d,k``).

Tunables (each one changes the generated code; see ``csrc/kernels/similarity/topk.cuh``):

===========  ===================  ====================================================================================
name         choices              what it does
===========  ===================  ====================================================================================
``BLOCK_N``  64, 128, 192, 256    corpus rows per tile (the MMA's M side); 256 runs the top-k epilogue in two passes;
                                  192 (three m64 blocks per warpgroup) only with MMA=3 and EPI_ROWS=64
``BLOCK_Q``  8 .. 128 (x8)        queries per block (N side); the space offers powers of two and nq rounded up to 8
``BLOCK_K``  16 .. 128            elements of d per pipeline slice (64, 128 or 256 bytes per row)
``WARPS_N``  1, 2, 4, 8           warps along the corpus rows
``WARPS_Q``  1, 2, 4              warps along the queries
``STAGES``   2 .. 5               cp.async ring depth (slices in flight = STAGES - 1)
``VEC``      4, 8, 16             bytes per cp.async (the static gate keeps those that rows of d allow)
``MERGE``    0 .. 6               running top-k: 0..2 one list per query in shared memory merged by a warp per tile
                                  (0 rank counting, 1 warp bitonic sort, 2 hybrid: rank for <= 32 new candidates,
                                  bitonic above); 3, 4 a sorted list in every thread's registers (16 or 32 entries:
                                  k <= 16 or k <= 32), each thread scanning its query's share of the tile's rows;
                                  5 none: every key goes to a dense nq x N matrix and the select kernel takes each
                                  row's k best (k <= 32; offered where the matrix is at most
                                  :data:`DENSE_SPACE_MAX_BYTES`); 6 none either: only the keys that reach their
                                  block's bar (its tile groups' first-tile bounds) go, with their rows, to the
                                  split's segment of a candidate row per query, then the select kernel (as 5)
``EPI_ROWS``  64, 128             corpus rows per top-k epilogue pass: 64 halves the score tile, so that two blocks
                                  can share an SM (one's epilogue overlapping the other's MMA main loop)
``MIN_BLOCKS`` 1, 2               ``__launch_bounds__`` minimum blocks per SM (2 caps registers for two resident
                                  blocks; ptxas may then spill, which the compiled gate rejects)
``MMA``      0, 1, 2, 3           main loop: 0 ``mma.sync`` warp tiles fed by ldmatrix; 1 ``wgmma`` warpgroup tiles
                                  read straight from shared memory (sm_90 only; fp16/bf16, BLOCK_K x bytes = 128,
                                  WARPS_Q = 1, WARPS_N 4 or 8, BLOCK_N a multiple of 64 per warpgroup, STAGES >= 3);
                                  2 the tiles of 1 fed by a TMA producer warpgroup through an mbarrier ring (STAGES
                                  >= 2, MIN_BLOCKS = 1; 16-byte aligned rows, else the op falls back to 1); 3 the
                                  ring of 2 with ping-pong warpgroups: each of two (WARPS_N = 8) owns every other
                                  tile, all its rows, so one's top-k epilogue runs while the other multiplies
                                  (thread lists, MERGE 3 or 4, or MERGE 5, 6)
===========  ===================  ====================================================================================

Not in the space (explicit configs take them; on the H200 neither was faster at any benchmark shape, so the tuner
spends no trials on them): ``CLUSTER`` (1, 2, 4; MMA 2, 3), thread-block clusters whose blocks take consecutive
splits of one query tile and share its slices by TMA multicast (``benchmarks/results/similarity_probe_cluster.json``);
``PREFETCH`` (0, 1, 2; MMA 2, 3), an L2 prefetch of every slice of the tile 1 or 2 ahead when a block starts a tile
(``similarity_probe_prefetch.json``: 2-23% slower at every nq = 100 shape, no faster at nq = 1024).

Constraints: every warp owns whole m16 x n8 tiles (``BLOCK_N % (16 WARPS_N) == 0``, ``BLOCK_Q % (8 WARPS_Q) == 0``),
2..16 warps, thread lists (``MERGE`` 3, 4) only for k within their capacity and with a thread per query column
(``THREADS >= BLOCK_Q``), ``BLOCK_Q`` not above nq rounded up to 16 (padding columns cost arithmetic and nothing else), at most
:data:`MAX_ACCUMULATORS` fp32 accumulators per thread (more spill; :data:`MAX_ACCUMULATORS_TMA` for MMA=2 with 8
warps, :data:`MAX_ACCUMULATORS_PINGPONG` for MMA=3, :data:`MAX_ACCUMULATORS_PINGPONG_192` with its 192-row
tiles). Static gates: shared memory for the problem's k
(``2 * BLOCK_Q * k * 8`` bytes of running lists on top of the pipeline; thread lists need
``(parts - 1) * BLOCK_Q * k * 8``) against the arch's opt-in limit, and the
copy width against d, and ``MMA`` 1..3 only on sm_90. Compiled gates (generic): registers, spills, occupancy.

Numerics gate: the search runs on random normal inputs (outputs poisoned first) and is compared with a float64
reference: every returned index must be a true top-k member up to ties within the fp32 rounding of a score
(tolerance :func:`score_tolerance`), every reference member clearly above the k-th score must be returned, the
order must follow the tie rule, and the returned scores must match the reference within the tolerance.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tunelab.dtypes import canonical, long_name, short_name
from tunelab.errors import ConfigError, GateRejection, InputError
from tunelab.kernel import smem_limit
from tunelab.ops.similarity import MAX_ACCUMULATORS, MAX_ACCUMULATORS_PINGPONG, MAX_ACCUMULATORS_PINGPONG_192, \
    MAX_ACCUMULATORS_TMA
from tunelab.tuning.family import CompiledCandidate, NumericsReport, Rejection, TunableFamily, next_pow2, \
    problem_from
from tunelab.tuning.space import Config, Constraint, Derived, Param, SearchSpace

#: Largest opt-in shared memory per block of any supported arch (sm_90: 227 KiB).
MAX_SMEM_ANY_ARCH = 232448
#: MERGE=5 is in a problem's space when its dense key matrix (nq x N x 4 bytes) is at most this: past it the matrix
#: leaves L2 many times over and the fused search is measured faster (the default switches at
#: ``tunelab.ops.similarity.DENSE_MAX_N``).
DENSE_SPACE_MAX_BYTES = 256 << 20


_DESCRIPTIONS = {
    "BLOCK_N": "corpus rows per tile",
    "BLOCK_Q": "queries per block",
    "BLOCK_K": "elements of d per pipeline slice",
    "WARPS_N": "warps along the corpus rows",
    "WARPS_Q": "warps along the queries",
    "STAGES": "cp.async pipeline depth",
    "VEC": "bytes per cp.async",
    "MERGE": "running top-k: 0 rank, 1 bitonic, 2 hybrid (shared lists); 3, 4 thread lists (k <= 16, 32); 5 none "
             "(dense key matrix, then the select kernel); 6 none (the keys that reach their block's bar, then the "
             "select); 7 = 6 filtered by the TMA producer's spare warps (MMA 2, 3)",
    "EPI_ROWS": "corpus rows per top-k epilogue pass (score tile height)",
    "MIN_BLOCKS": "__launch_bounds__ minimum blocks/SM (2 caps registers at 65536 / (2 x threads))",
    "MMA": "main loop: 0 mma.sync warp tiles, 1 wgmma warpgroup tiles, 2 = 1 fed by a TMA producer, 3 = 2 with "
           "ping-pong warpgroups (1..3: sm_90, 16-bit inputs); 4 = 0 with fp32 products by FFMA (fp32, few queries)",
}


def _ops():
    from tunelab.ops import similarity

    return similarity


@dataclass(frozen=True)
class SearchProblem:
    """What to tune for: nq queries against n corpus rows of dimension d, top k, dtype, metric."""

    nq: int = 100
    n: int = 50000
    d: int = 768
    k: int = 10
    dtype: str = "fp16"
    metric: str = "ip"

    def __post_init__(self):
        dt = canonical(self.dtype, ("float16", "bfloat16", "float32"), "the similarity problem")
        object.__setattr__(self, "dtype", short_name(dt))
        for name in ("nq", "n", "d", "k"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"similarity problem {name}={v!r} must be a positive int")
        if self.k > self.n:
            raise InputError(f"similarity problem k={self.k} > n={self.n}")
        if self.metric not in ("ip", "cosine", "l2"):
            raise InputError(f"similarity problem metric={self.metric!r} is not one of ip, cosine, l2")

    @property
    def torch_dtype(self) -> str:
        """The dtype's torch name (``"float16"``, ``"bfloat16"`` or ``"float32"``)."""
        return long_name(self.dtype)

    @property
    def element_bytes(self) -> int:
        """Bytes per vector element: 4 for fp32, 2 for fp16/bf16."""
        return 4 if self.dtype == "fp32" else 2

    @property
    def corpus_bytes(self) -> int:
        """Size of the corpus in bytes (n x d elements)."""
        return self.n * self.d * self.element_bytes

    @property
    def flops(self) -> float:
        """2*nq*n*d: the multiply-adds of the score GEMM (the top-k selection is not counted)."""
        return 2.0 * self.nq * self.n * self.d


def as_problem(problem: Any) -> SearchProblem:
    """A :class:`SearchProblem` from a problem object or dict."""
    return problem_from(SearchProblem, problem, "similarity")


# ------------------------------------------------------------------------------------------------ the space
def accumulators(c: Mapping[str, Any]) -> int:
    """fp32 accumulator registers per thread of a config (:func:`tunelab.ops.similarity.accumulators`)."""
    return _ops().accumulators(c)


def launcher_accepts_main_loop(dtype: str, metric: str) -> Callable[[Mapping[str, Any]], bool]:
    """Constraint predicate for the main loops' rules (wgmma, ``MMA`` 1..3: 16-bit inputs, 128-byte row slices,
    WARPS_Q = 1, WARPS_N 4 or 8, ...; FFMA, ``MMA=4``: fp32 inputs, BLOCK_Q = 8 * WARPS_Q; ``MERGE=7``: MMA 2, 3): the
    launcher's own check (``topk_validate``) of every config, whose ConfigError names the broken rule and becomes the
    rejection's reason (the constraints before it name the rules they check themselves)."""
    ops = _ops()
    dtype_code, metric_code = ops.DTYPE_CODES[long_name(dtype)], ops.METRICS[metric]

    def accepts(c: Mapping[str, Any]) -> bool:
        error = ops._S.topk_config_error({n: c[n] for n in ops.PARAM_NAMES if n in c}, dtype_code, metric_code)
        if error:
            raise ConfigError(error)
        return True

    return accepts


def block_q_choices(nq: int) -> list[int]:
    """Powers of two from 8, plus nq rounded up to 8 and to 16 (one query tile with the least padding; 16 lets two
    warps split it), up to 128."""
    top8 = min(128, max(8, -(-nq // 8) * 8))
    top16 = min(128, max(16, -(-nq // 16) * 16))
    out = {b for b in (8, 16, 32, 64, 128) if b <= top16}
    out.update((top8, top16))
    return sorted(out)


def filter_rows_bound(config: Mapping[str, Any], n: int) -> int:
    """Entries of a ``MERGE=6`` search's candidate row over ``n`` rows, at most, whatever the grid plan (which
    depends on the device: ``ops.similarity.filter_ld`` gives a plan's exact figure): the splits' segments cover
    the tiles and at most a split's tiles less one past them (never more than the tiles again), with clusters
    CLUSTER - 1 empty splits' tiles more; then a count per split or the global words, whichever is more, rounded up
    to 4."""
    bn, cl = int(config["BLOCK_N"]), int(config.get("CLUSTER", 1))
    tiles = -(-int(n) // bn)
    return (1 + cl) * tiles * bn + max(tiles + cl, int(_ops()._S.FILTER_WORDS)) + 3


def merge_choices(problem: Any) -> list[int]:
    """MERGE values for a problem: shared lists always, thread lists where k fits their capacity, dense (5) and
    filtered (6; 7 for 16-bit inputs) where k <= the select kernel's limit and the dense key matrix is at most
    :data:`DENSE_SPACE_MAX_BYTES` (the filtered search's candidate rows, keys and indices, take a little over twice
    its bytes, mostly untouched)."""
    p = as_problem(problem)
    ops = _ops()
    out = [m for m in (0, 1, 2, 3, 4) if m < 3 or p.k <= ops._S.thread_list_capacity(m)]
    if p.k <= ops.SELECT_MAX_K and ops.dense_bytes(p.nq, p.n) <= DENSE_SPACE_MAX_BYTES:
        out += [ops.MERGE_DENSE, ops.MERGE_FILTERED]
        if p.dtype != "fp32":  # (the TMA producer's loops take 16-bit inputs)
            out.append(ops.MERGE_FILTER_WARPS)
    return out


def build_space(problem: Any) -> SearchSpace:
    """The search space for one problem (BLOCK_Q's choices and BLOCK_K's range depend on nq and dtype)."""
    p = as_problem(problem)
    k = p.k
    bk = [16, 32, 64] if p.dtype == "fp32" else [32, 64, 128]
    params = [
        Param("BLOCK_N", [64, 128, 192, 256], description=_DESCRIPTIONS["BLOCK_N"]),
        Param("BLOCK_Q", block_q_choices(p.nq), description=_DESCRIPTIONS["BLOCK_Q"]),
        Param("BLOCK_K", bk, description=_DESCRIPTIONS["BLOCK_K"]),
        Param("WARPS_N", [1, 2, 4, 8], description=_DESCRIPTIONS["WARPS_N"]),
        Param("WARPS_Q", [1, 2, 4], description=_DESCRIPTIONS["WARPS_Q"]),
        Param("STAGES", [2, 3, 4, 5], description=_DESCRIPTIONS["STAGES"]),
        Param("VEC", [4, 8, 16], description=_DESCRIPTIONS["VEC"]),
        Param("MERGE", merge_choices(p), ordered=False, description=_DESCRIPTIONS["MERGE"]),
        Param("EPI_ROWS", [64, 128], description=_DESCRIPTIONS["EPI_ROWS"]),
        Param("MIN_BLOCKS", [1, 2], description=_DESCRIPTIONS["MIN_BLOCKS"]),
        # fp32 runs on mma.sync (3xTF32) or FFMA; 16-bit inputs on mma.sync or the wgmma loops
        Param("MMA", [0, 4] if p.dtype == "fp32" else [0, 1, 2, 3], ordered=False, description=_DESCRIPTIONS["MMA"]),
    ]
    eb = p.element_bytes
    metric = p.metric
    derived = [
        Derived("THREADS", lambda c: 32 * c["WARPS_N"] * c["WARPS_Q"], "MMA and top-k threads per block"),
        Derived("ACCUMULATORS", accumulators, "fp32 accumulators per thread"),
        Derived("SMEM_BYTES", lambda c: smem_bytes_py(c, eb, k, metric), "dynamic shared memory per block for k"),
    ]
    constraints = [
        Constraint("warps_tile_block_n", lambda c: c["MMA"] == 3 or c["BLOCK_N"] % (16 * c["WARPS_N"]) == 0,
                   "BLOCK_N must be a multiple of 16 * WARPS_N", code="static.divisibility"),
        Constraint("block_n_192", lambda c: c["BLOCK_N"] != 192 or (c["MMA"] == 3 and c["EPI_ROWS"] == 64),
                   "BLOCK_N=192 (three m64 row blocks per warpgroup) is for MMA=3 with EPI_ROWS=64",
                   code="static.divisibility"),
        Constraint("warps_tile_block_q", lambda c: c["BLOCK_Q"] % (8 * c["WARPS_Q"]) == 0,
                   "BLOCK_Q must be a multiple of 8 * WARPS_Q", code="static.divisibility"),
        # 16 warps x MIN_BLOCKS 2 (MMA=2: 1) stay within 2048 threads per SM: no separate MIN_BLOCKS rule
        Constraint("warp_count", lambda c: 2 <= c["WARPS_N"] * c["WARPS_Q"] <= 16,
                   "a block has 2 to 16 warps", code="static.threads"),
        Constraint("epi_rows_changes_code", lambda c: c["EPI_ROWS"] == 128 or c["BLOCK_N"] > 64,
                   "EPI_ROWS=64 equals 128 when BLOCK_N is 64 (one pass either way)"),
        Constraint("vec_changes_code", lambda c: not _ops().uses_tma(c) or c["VEC"] == 16,
                   "MMA 2 and 3 copy by TMA, so VEC changes nothing there: only VEC=16 is listed (it also carries the "
                   "16-byte row rule TMA needs)"),
        Constraint("accumulators_fit_registers", lambda c: c["ACCUMULATORS"] <= _ops().max_accumulators(c),
                   f"more than {MAX_ACCUMULATORS} fp32 accumulators per thread ({MAX_ACCUMULATORS_TMA} with MMA=2 "
                   f"and 8 warps, {MAX_ACCUMULATORS_PINGPONG} with MMA=3, {MAX_ACCUMULATORS_PINGPONG_192} with its "
                   f"192-row tiles; certain spills): lower BLOCK_N or BLOCK_Q"),
        Constraint("thread_lists_threads", lambda c: c["MERGE"] not in (3, 4) or c["THREADS"] >= c["BLOCK_Q"],
                   "thread lists (MERGE 3, 4) need a thread per query column (THREADS >= BLOCK_Q)",
                   code="static.threads"),
        Constraint("main_loop_rules", launcher_accepts_main_loop(p.dtype, metric),
                   "MMA 1..3 need 16-bit inputs, BLOCK_K x bytes = 128, WARPS_Q = 1, WARPS_N 4 or 8 (MMA=1: "
                   "STAGES >= 3; MMA 2, 3: MIN_BLOCKS = 1; MMA=3: WARPS_N = 8, MERGE 3 .. 7; MERGE=7: MMA 2, 3); "
                   "MMA=4 fp32 inputs and BLOCK_Q = 8 * WARPS_Q",
                   code="static.divisibility"),
        Constraint("smem_fits_some_gpu", lambda c: c["SMEM_BYTES"] <= MAX_SMEM_ANY_ARCH,
                   f"shared memory above {MAX_SMEM_ANY_ARCH} bytes fits no supported GPU", code="static.smem"),
    ]
    name = f"similarity/{p.dtype}/{p.metric}/nq{min(next_pow2(p.nq), 256)}/k{next_pow2(p.k)}"
    return SearchSpace(name, params, constraints, derived)


def smem_bytes_py(c: Mapping[str, Any], element_bytes: int, k: int, metric: str = "ip") -> int:
    """The launcher's shared-memory formula in Python (the tests check the two agree)."""
    row = c["BLOCK_K"] * element_bytes
    epi = min(c["BLOCK_N"], c.get("EPI_ROWS", 128))
    warps = c["WARPS_N"] * c["WARPS_Q"]
    mma = c.get("MMA", 0)
    groups = 2 if mma == 3 else 1  # ping-pong: a score tile, row norms and list parts per warpgroup
    norms = groups * c["BLOCK_N"] * 4 if metric != "ip" else 0
    bq = c["BLOCK_Q"]
    cluster = c.get("CLUSTER", 1)  # a cluster's stages hold BLOCK_Q rounded up to 8 rows per block
    q_rows = bq if cluster == 1 else -(-bq // (8 * cluster)) * (8 * cluster)
    score = groups * bq * (epi + 4) * 4
    if c["MERGE"] == 5:  # dense: the ring and the row norms only
        score, scratch, meta, lists = 0, 0, 0, 0
    elif c["MERGE"] == 7:  # filter warps: one score tile (pitch BLOCK_N + 4), 4 words a query column, 3 mbarriers,
        # the first tile's held keys and rows (32 a column, pitch 33)
        score, scratch, meta, lists = bq * (c["BLOCK_N"] + 4) * 4 + bq * 16 + 32 + bq * 33 * 8, 0, 0, 0
    elif c["MERGE"] == 6:  # filtered: and per group and query column its holders' maxima, bound and count (+2 pad)
        holders = 8 * (warps // groups) // c["WARPS_Q"]
        score, scratch, meta, lists = groups * bq * (holders + 4) * 4, 0, 0, 0
    elif c["MERGE"] >= 3:  # thread lists: no warp scratch; each part's k-th key; parts 1.. hand over their lists
        parts = groups * thread_list_parts(32 * warps // groups, bq)
        scratch, meta, lists = 0, parts * bq * 4, (parts - 1) * bq * k * 8
    else:  # per-warp scratch; {len, sel, thr_key, thr_idx} per query and the pre-check's hit flags; two list
        # buffers per query
        scratch, meta, lists = warps * epi * 8, bq * 16 + c["WARPS_N"] * bq * 4, 2 * bq * k * 8
    # MMA 2, 3: full[] and empty[] of the TMA ring; MMA=3: and order[2]
    mbarriers = 16 * c["STAGES"] + (16 if mma == 3 else 0) if mma in (2, 3) else 0
    static = c["STAGES"] * (c["BLOCK_N"] + q_rows) * row + score + scratch + norms + meta + mbarriers
    return static + lists


def thread_list_parts(threads: int, block_q: int) -> int:
    """Threads per query column with thread lists (params.cuh's thread_list_parts): threads / BLOCK_Q rounded
    down to a power of two, at most 4."""
    r = threads // block_q
    return 4 if r >= 4 else 2 if r >= 2 else 1


# ------------------------------------------------------------------------------------------------ numerics
def score_tolerance(queries, corpus, metric: str):
    """Per-query tolerance (float64 tensor, (nq,)) for comparing fp32-accumulated scores with float64 ones.

    An fp32 dot product of d terms is off by about sqrt(d) * 2^-24 * |q| |c| (random rounding); 16x that is the
    tie band: scores closer than it may legitimately come out in either order. L2 keys add |c|^2 (and |q|^2),
    cosine divides by the norms.
    """
    import torch

    d = queries.shape[1]
    qn = queries.double().norm(dim=1)
    cmax = 0.0
    for r0 in range(0, corpus.shape[0], 1 << 20):  # chunked: never a full-precision copy of a big corpus
        cmax = max(cmax, float(corpus[r0:r0 + (1 << 20)].float().norm(dim=1).max()))
    u = 2.0 ** -24
    band = 16.0 * math.sqrt(d) * u + 8 * u
    if metric == "ip":
        scale = qn * cmax
    elif metric == "cosine":
        scale = torch.ones_like(qn)
    else:
        scale = qn * qn + cmax * cmax + 2 * qn * cmax
    return band * scale + 1e-30


def reference_scores(queries, corpus, metric: str, rows=None):
    """float64 scores (ip, cosine) or squared distances (l2) of every query against corpus rows (or ``rows``)."""
    import torch

    q = queries.double()
    c = corpus.double() if rows is None else corpus[rows].double()
    if metric == "ip":
        return q @ c.T if rows is None else (q[:, None, :] * c).sum(-1)
    if metric == "cosine":
        qn = torch.nn.functional.normalize(q, dim=-1, eps=1e-12)
        cn = torch.nn.functional.normalize(c, dim=-1, eps=1e-12)
        return qn @ cn.T if rows is None else (qn[:, None, :] * cn).sum(-1)
    if rows is None:
        return (q * q).sum(1)[:, None] - 2 * (q @ c.T) + (c * c).sum(1)[None, :]
    return ((q[:, None, :] - c) ** 2).sum(-1)


def check_topk(scores, indices, queries, corpus, k: int, metric: str, *, chunk: int = 1 << 16) -> NumericsReport:
    """The numerics rule of the family (see the module doc) on one search result, against float64.

    ``indices`` must have been poisoned (e.g. filled with -2) before the run; unwritten or invalid entries fail.
    """
    import torch

    nq, n = queries.shape[0], corpus.shape[0]
    idx = indices.long()
    if bool((idx == -2).any()):
        return NumericsReport(False, "numerics.unwritten: result indices left unwritten", {})
    if bool(((idx < 0) | (idx >= n)).any()):
        bad = int(((idx < 0) | (idx >= n)).sum())
        return NumericsReport(False, f"numerics.error: {bad} indices outside 0..{n - 1}", {"bad_indices": float(bad)})
    if not bool(torch.isfinite(scores).all()):
        return NumericsReport(False, "numerics.nan: NaN/Inf scores for valid indices", {})
    if k > 1 and bool((idx.sort(dim=1).values.diff(dim=1) == 0).any()):
        return NumericsReport(False, "numerics.error: duplicate indices in a query's results", {})
    sign = -1.0 if metric == "l2" else 1.0  # work with "larger is better"
    tol = score_tolerance(queries, corpus, metric)[:, None]
    # float64 top-k in corpus chunks (keep k per chunk)
    best_v = torch.full((nq, 0), -math.inf, dtype=torch.float64, device=queries.device)
    best_i = torch.zeros((nq, 0), dtype=torch.long, device=queries.device)
    for r0 in range(0, n, chunk):
        s = sign * reference_scores(queries, corpus[r0:r0 + chunk], metric)
        kk = min(k, s.shape[1])
        v, i = torch.topk(s, kk, dim=1)
        best_v = torch.cat([best_v, v], 1)
        best_i = torch.cat([best_i, i + r0], 1)
        v, j = torch.topk(best_v, min(k, best_v.shape[1]), dim=1)
        best_v, best_i = v, best_i.gather(1, j)
    kth = best_v[:, -1:]
    ref_ours = sign * reference_scores(queries, corpus, metric, rows=idx)
    got = sign * scores.double()
    score_err = (got - ref_ours).abs()
    errors = {"max_score_err": float(score_err.max()), "max_tolerance": float(tol.max())}
    if bool((score_err > tol).any()):
        return NumericsReport(False, f"numerics.error: returned scores differ from float64 by up to "
                                     f"{errors['max_score_err']:.3g} (tolerance {errors['max_tolerance']:.3g})", errors)
    below = ref_ours < kth - 2 * tol
    if bool(below.any()):
        return NumericsReport(False, f"numerics.error: {int(below.sum())} returned indices are not among the top {k} "
                                     "(beyond the tie band)", errors)
    must = best_v > kth + 2 * tol
    present = (best_i[:, :, None] == idx[:, None, :]).any(-1)
    missing = must & ~present
    if bool(missing.any()):
        return NumericsReport(False, f"numerics.error: {int(missing.sum())} true top-{k} indices missing", errors)
    if k > 1:
        a, b = got[:, :-1], got[:, 1:]
        ia, ib = idx[:, :-1], idx[:, 1:]
        # the kernel's own scores must follow the tie rule: larger first, then smaller index
        ok = (a > b) | ((a == b) & (ia < ib))
        if not bool(ok.all()):
            return NumericsReport(False, f"numerics.error: {int((~ok).sum())} result pairs out of order", errors)
    errors["exact_index_mismatches"] = float((idx != best_i).sum())
    return NumericsReport(True, None, errors)


@dataclass
class SearchInputs:
    """One input set on the GPU: queries, corpus, the output buffers and the candidate workspace."""

    queries: Any
    corpus: Any
    scores: Any
    indices: Any
    problem: SearchProblem
    workspace: dict


# ------------------------------------------------------------------------------------------------ the family
class SimilarityFamily(TunableFamily):
    """Top-k similarity search (fused GEMM + top-k) as a tunable family."""

    name = "similarity"

    def problem_dict(self, problem: Any) -> dict:
        """The problem's nq, n, d, k, dtype and metric as a dict."""
        p = as_problem(problem)
        return {"nq": p.nq, "n": p.n, "d": p.d, "k": p.k, "dtype": p.dtype, "metric": p.metric}

    def problem_from_dict(self, data: Mapping[str, Any]) -> SearchProblem:
        """A :class:`SearchProblem` from :meth:`problem_dict`'s form."""
        return as_problem(data)

    def problem_from_cli(self, shape: list[int], dtype: str, flags: Mapping[str, Any]) -> SearchProblem:
        """``--shape nq,n,d,k`` (``--nq/--n/--d/--k`` build the same); ``--metric`` via flags."""
        if len(shape) != 4:
            raise ConfigError(f"similarity --shape is nq,n,d,k (4 numbers, e.g. 100,50000,768,10); got {shape}")
        nq, n, d, k = shape
        return SearchProblem(nq, n, d, k, dtype or "fp16", str(flags.get("metric") or "ip"))

    def store_key(self, problem: Any) -> dict:
        """Bucket: nq, n and k to the next power of two; d, dtype and metric exact."""
        p = as_problem(problem)
        return {"nq": next_pow2(p.nq), "n": next_pow2(p.n), "d": p.d, "k": next_pow2(p.k), "dtype": p.dtype,
                "metric": p.metric}

    def space(self, problem: Any) -> SearchSpace:
        """Similarity's space for this problem (see :func:`build_space`)."""
        return build_space(problem)

    def default_config(self, problem: Any) -> Config:
        """The documented search default for the problem on the current GPU's arch, limited to the space's
        parameters: what the op runs untuned (its store bucket's N, as ``ops.similarity.resolve_config`` passes)."""
        p = as_problem(problem)
        cfg = _ops().default_config(p.nq, p.k, p.torch_dtype, p.d, n=next_pow2(p.n))  # the current GPU's arch
        return {name: cfg[name] for name in self.space(p).names}

    def static_gates(self, config: Config, problem: Any, arch: str | None = None) -> list[Rejection]:
        """Shared memory for the problem's k against the arch's limit; copy width against d."""
        from tunelab.kernel import current_arch

        p = as_problem(problem)
        arch = arch or current_arch()
        out = []
        smem = smem_bytes_py(config, p.element_bytes, p.k, p.metric)
        limit = smem_limit(arch)
        if smem > limit:
            out.append(Rejection("static.smem", f"{smem} bytes of shared memory for k={p.k} > {limit} bytes opt-in "
                                                f"limit per block on {arch}"))
        if (p.d * p.element_bytes) % config["VEC"]:  # the measured inputs are contiguous: rows are d long
            tma = f" (MMA={config['MMA']} reads rows by TMA, 16 bytes at a time)" if _ops().uses_tma(config) else ""
            out.append(Rejection("static.problem", f"d={p.d} x {p.element_bytes} bytes is not a multiple of "
                                                   f"VEC={config['VEC']}{tma}"))
        if _ops().uses_wgmma(config) and not _ops().wgmma_supported(arch):
            out.append(Rejection("static.arch", f"MMA={config['MMA']} (wgmma) runs on sm_90 only; the target is "
                                                f"{arch}"))
        return out

    def compile(self, config: Config, problem: Any, arch: str) -> CompiledCandidate:
        """Compile the search kernel and the merge kernels for the problem's dtype and metric (``compile_search``)."""
        p = as_problem(problem)
        cs = _ops().compile_search(config, dtype=p.torch_dtype, metric=p.metric, arch=arch)
        return CompiledCandidate(resources=cs.resources, threads=cs.threads, smem_bytes=cs.smem_bytes(p.k), arch=arch,
                                 compile_ms=float(cs.result.compile_ms), cache_hit=bool(cs.result.cache_hit),
                                 handle=cs)

    def source_hash(self) -> str:
        """Hash of the similarity/ and common/ kernel sources (``tunelab.ops.similarity.source_hash``)."""
        return _ops().source_hash()

    def worker_ref(self) -> Any:
        """Rebuilt in the worker as ``SimilarityFamily()`` from this module."""
        return "tunelab.tuning.families.similarity:SimilarityFamily"

    def input_bytes(self, problem: Any) -> int:
        """Device memory make_inputs may need: queries, corpus, outputs, candidate lists for up to 1024 splits and
        256 MiB of scratch."""
        p = as_problem(problem)
        return (p.nq + p.n) * p.d * p.element_bytes + p.nq * p.k * 12 + 1024 * p.nq * p.k * 8 + (1 << 28)

    def make_inputs(self, problem: Any, seed: int) -> SearchInputs:
        """Random normal queries and corpus (never zeros), output buffers; GateRejection("memory.free") if they
        would not fit."""
        import torch

        p = as_problem(problem)
        device = torch.device("cuda", torch.cuda.current_device())
        need = self.input_bytes(p)
        free = torch.cuda.mem_get_info(device)[0]
        if need > 0.9 * free:
            raise GateRejection("memory.free", f"similarity inputs need {need / 2**30:.2f} GiB; "
                                               f"{free / 2**30:.2f} GiB are free on {device}")
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        dt = getattr(torch, p.torch_dtype)
        q = torch.randn((p.nq, p.d), generator=gen, device=device, dtype=torch.float32).to(dt)
        c = torch.empty((p.n, p.d), dtype=dt, device=device)
        step = 1 << 20
        for r0 in range(0, p.n, step):  # bounded fp32 scratch for huge corpora
            c[r0:r0 + step] = torch.randn((min(step, p.n - r0), p.d), generator=gen, device=device).to(dt)
        scores = torch.empty((p.nq, p.k), dtype=torch.float32, device=device)
        indices = torch.empty((p.nq, p.k), dtype=torch.int64, device=device)
        return SearchInputs(q, c, scores, indices, p, {})

    def _prepared(self, compiled: CompiledCandidate, inputs: SearchInputs):
        cs = compiled.handle
        p = inputs.problem
        key = (id(cs), p.k)
        hit = inputs.workspace.get(key)
        if hit is None:
            dev = inputs.queries.device.index or 0
            plan = cs.plan(dev, p.nq, p.n, p.k)
            ck, ci = cs.candidate_buffers(plan, p.nq, p.n, p.k, inputs.queries.device)
            p1, p2 = cs.prepare(dev, inputs.queries, inputs.corpus, p.k, ck, ci, inputs.scores, inputs.indices, plan)
            hit = (p1, p2, ck, ci, plan)
            inputs.workspace = {key: hit}  # one config's workspace at a time
        return hit

    def check(self, config: Config, compiled: CompiledCandidate, inputs: SearchInputs) -> NumericsReport:
        """One search and merge from poisoned outputs, judged by :func:`check_topk` against float64."""
        import torch

        p = inputs.problem
        p1, p2, *_ = self._prepared(compiled, inputs)
        inputs.indices.fill_(-2)
        inputs.scores.fill_(float("nan"))
        stream = int(torch.cuda.current_stream().cuda_stream)
        p1(stream)
        p2(stream)
        torch.cuda.synchronize()
        return check_topk(inputs.scores, inputs.indices, inputs.queries, inputs.corpus, p.k, p.metric)

    def timing_closure(self, config: Config, compiled: CompiledCandidate, inputs: SearchInputs):
        """A zero-argument callable launching the prepared search and merge on torch's current stream."""
        import torch

        p1, p2, *_ = self._prepared(compiled, inputs)

        def run():
            stream = int(torch.cuda.current_stream().cuda_stream)
            p1(stream)
            p2(stream)

        return run

    def memory_required(self, config: Config, problem: Any) -> int | None:
        """Candidate-list workspace: nq x k entries of 8 bytes for up to ~1024 splits, or (MERGE=5) the dense key
        matrix, or (MERGE=6) the candidate rows, keys and indices (:func:`filter_rows_bound`)."""
        p = as_problem(problem)
        if config.get("MERGE") == _ops().MERGE_DENSE:
            return _ops().dense_bytes(p.nq, p.n)
        if config.get("MERGE") in _ops().MERGES_FILTERED:
            return 2 * p.nq * 4 * filter_rows_bound(config, p.n)
        return 1024 * p.nq * p.k * 8  # candidate lists: at most ~1024 splits

    def baselines(self, problem: Any) -> dict[str, Callable[[Any], Callable[[], Any]]]:
        """``torch_topk``: cuBLAS GEMM of the metric's scores, then ``torch.topk``. Cosine gets the corpus
        normalized once outside the timed call and l2 its squared norms (a fair, precomputed baseline)."""
        p = as_problem(problem)
        return {"torch_topk": _torch_topk_factory(p.metric, p.k)}


def torch_topk(queries, corpus, k: int, metric: str = "ip"):
    """The torch baseline as a zero-argument callable over fixed tensors (precomputation done here, untimed)."""
    import torch

    if metric == "ip":
        return lambda: torch.topk(queries @ corpus.T, k, dim=-1)
    if metric == "cosine":
        cn = torch.nn.functional.normalize(corpus.float(), dim=-1).to(corpus.dtype)
        return lambda: torch.topk(torch.nn.functional.normalize(queries, dim=-1) @ cn.T, k, dim=-1)
    c2 = (corpus.float() ** 2).sum(1)
    return lambda: torch.topk((queries @ corpus.T).float().mul_(2).sub_(c2), k, dim=-1)  # -|q-c|^2 + |q|^2


def _torch_topk_factory(metric: str, k: int):
    def factory(inputs: SearchInputs):
        fn = torch_topk(inputs.queries, inputs.corpus, k, metric)
        fn()
        return fn

    return factory


# ------------------------------------------------------------------------------------------------ CLI hook
def add_cli_arguments(parser) -> None:
    """``--nq --n --d --k --metric`` on ``tunelab tune`` (similarity): they build ``--shape nq,n,d,k``."""
    g = parser.add_argument_group("similarity search problem "
                                  "(tunelab tune similarity --nq 100 --n 50000 --d 768 --k 10)")
    g.add_argument("--nq", type=int, metavar="NQ", help="similarity: number of queries")
    g.add_argument("--n", type=int, metavar="N", help="similarity: corpus rows")
    g.add_argument("--d", type=int, metavar="D", help="similarity: vector dimension")
    g.add_argument("--k", type=int, metavar="K", help="similarity: results per query")
    g.add_argument("--metric", choices=("ip", "cosine", "l2"), default=None, help="similarity: metric (default ip)")


def apply_cli_arguments(args) -> None:
    """Fill ``args.shape`` from ``--nq --n --d --k`` (all four, and not together with --shape)."""
    given = {name: getattr(args, name, None) for name in ("nq", "n", "d", "k")}
    if all(v is None for v in given.values()):
        return
    missing = [f"--{name}" for name, v in given.items() if v is None]
    if missing:
        raise ConfigError(f"similarity problems need --nq, --n, --d and --k together; missing {missing}")
    if getattr(args, "shape", None) is not None:
        raise ConfigError("give either --shape nq,n,d,k or --nq/--n/--d/--k, not both")
    bad = [f"--{name} {v}" for name, v in given.items() if v < 1]
    if bad:
        raise ConfigError(f"{', '.join(bad)}: values must be >= 1")
    args.shape = [given["nq"], given["n"], given["d"], given["k"]]


def get_family() -> SimilarityFamily:
    """The family object (``tunelab.tuning.family.get_family("similarity")``)."""
    return SimilarityFamily()
