"""Similarity family on the GPU: search results against torch.topk on fp32/fp64 references for every metric and
dtype (corpus sizes that no tile divides), the exact tie rule, k from 1 to 256+, config independence, the streamed
(out-of-core) path against the in-memory one, Gram against torch for real and complex states, the custom ops
(opcheck, CUDA graphs), memory release, and the tuner family's own gates. Budget: about 2 minutes on an H200
(the kernels are compiled in parallel up front)."""
from __future__ import annotations

import concurrent.futures as cf
import os

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

DTYPES = ("float16", "bfloat16", "float32")
METRICS = ("ip", "cosine", "l2")
NQ, N, D = 37, 5003, 96  # 5003 rows: no BLOCK_N divides it; 37 queries: no BLOCK_Q does


def _sim():
    import tunelab.ops.similarity as sim

    return sim


@pytest.fixture(scope="module", autouse=True)
def _precompile():
    """Compile every config the tests use in parallel (NVRTC releases the GIL), so the tests themselves are fast."""
    sim = _sim()
    jobs = []
    for dt in DTYPES:
        for m in METRICS:
            jobs.append(("search", sim.default_config(NQ, 10, dt, D), dt, m))
            if dt != "float32" and sim.wgmma_supported(sim._arch(0)):  # the op's resolved default there (dense)
                jobs.append(("search", sim.default_config(NQ, 10, dt, D, n=8192), dt, m))
    for cfg in _EXPLICIT:
        jobs.append(("search", sim.fit_config(cfg, 10, "float16"), "float16", "l2"))
    for m in METRICS:  # the FFMA main loop's configs and their 3xTF32 comparator
        jobs += [("search", cfg, "float32", m) for cfg in _FMA + [dict(_FMA[0], MMA=0)]]
    if torch.cuda.get_device_capability() == (9, 0):  # the wgmma tests' configs, their comparators, clusters' C=1
        # and the FFMA default's 128-row tiles (d = 128, as the short-tile test resolves them)
        jobs.append(("search", sim.default_config(1, 10, "float32", 128, n=65536), "float32", "l2"))
        for dt in ("float16", "bfloat16"):
            for m in METRICS:
                jobs.append(("search", dict(sim.default_config(NQ, 10, dt, D_WG), MMA=0, BLOCK_N=128), dt, m))
                jobs += [("search", sim.fit_config(cfg, 10, dt, sim.smem_limit("sm_90"), m), dt, m) for cfg in _WGMMA]
        jobs += [("search", dict(cfg, CLUSTER=1), "float16", "l2") for cfg in _WG_CLUSTER]
    for dt in ("float16", "float32", "complex64"):
        for sym, mirror in ((False, False), (True, False), (True, True)):
            jobs.append(("gram", sim.default_gram_config(dt), dt, (sym, mirror)))

    def one(job):
        kind, cfg, dt, extra = job
        if kind == "search":
            return sim.compile_search(cfg, dtype=dt, metric=extra)
        return sim.compile_gram(cfg, dtype=dt, symmetric=extra[0], mirror=extra[1])

    with cf.ThreadPoolExecutor(min(16, os.cpu_count() or 4)) as pool:
        list(pool.map(one, jobs))
    yield
    sim.release_memory()


def _inputs(dt, nq=NQ, n=N, d=D, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    tdt = getattr(torch, dt)
    q = torch.randn((nq, d), generator=g, device="cuda").to(tdt)
    c = torch.randn((n, d), generator=g, device="cuda").to(tdt)
    return q, c


def _torch_fp32_topk(q, c, k, metric):
    """torch.topk on the fp32 scores of the (rounded) inputs: the reference the issue names."""
    qf, cf_ = q.float(), c.float()
    with _no_tf32():
        if metric == "ip":
            s = qf @ cf_.T
        elif metric == "cosine":
            s = torch.nn.functional.normalize(qf, dim=-1) @ torch.nn.functional.normalize(cf_, dim=-1).T
        else:
            s = -((qf * qf).sum(1)[:, None] - 2 * qf @ cf_.T + (cf_ * cf_).sum(1)[None, :])
    v, i = torch.topk(s, k, dim=1)
    return (-v if metric == "l2" else v), i


class _no_tf32:
    def __enter__(self):
        self.old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self.old


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("dt", DTYPES)
def test_search_matches_reference(dt, metric):
    from tunelab.tuning.families.similarity import check_topk

    sim = _sim()
    q, c = _inputs(dt)
    k = 10
    scores, idx = sim.similarity_search(q, c, k, metric=metric)
    torch.cuda.synchronize()
    assert scores.shape == (NQ, k) and idx.shape == (NQ, k) and idx.dtype == torch.int64
    rep = check_topk(scores, idx, q, c, k, metric)  # float64 reference, tie band of fp32 rounding
    assert rep.ok, rep.reason
    ref_v, ref_i = _torch_fp32_topk(q, c, k, metric)
    agree = (idx == ref_i).float().mean().item()
    assert agree > 0.97, f"only {agree:.3f} of indices agree with torch.topk on fp32 scores"
    torch.testing.assert_close(scores, ref_v.float(), rtol=2e-4, atol=2e-4 * float(ref_v.abs().max()))
    if metric == "l2":
        assert bool((scores[:, 1:] >= scores[:, :-1]).all())
    else:
        assert bool((scores[:, 1:] <= scores[:, :-1]).all())


@pytest.mark.parametrize("metric", ("ip", "l2"))
@pytest.mark.parametrize("dt", DTYPES)
def test_exact_tie_rule(dt, metric):
    """Small-integer vectors: every score is exact and ties abound; the result must be exactly the stable-sorted
    reference (larger score first, then smaller index)."""
    sim = _sim()
    g = torch.Generator(device="cuda").manual_seed(3)
    tdt = getattr(torch, dt)
    q = torch.randint(-2, 3, (NQ, D), generator=g, device="cuda").to(tdt)
    c = torch.randint(-2, 3, (N, D), generator=g, device="cuda").to(tdt)
    k = 16
    scores, idx = sim.similarity_search(q, c, k, metric=metric)
    qd, cd = q.double(), c.double()
    s = qd @ cd.T if metric == "ip" else -((qd * qd).sum(1)[:, None] - 2 * qd @ cd.T + (cd * cd).sum(1)[None, :])
    order = torch.sort(s, dim=1, descending=True, stable=True).indices[:, :k]
    assert torch.equal(idx, order)
    want = s.gather(1, order)
    torch.testing.assert_close(scores.double(), -want if metric == "l2" else want, rtol=0, atol=0)


@pytest.mark.parametrize("k", [1, 32, 33, 100, 256])
def test_k_range(k):
    from tunelab.tuning.families.similarity import check_topk

    sim = _sim()
    q, c = _inputs("float16", nq=5, n=3001, seed=k)
    scores, idx = sim.similarity_search(q, c, k)
    assert check_topk(scores, idx, q, c, k, "ip").ok


def test_k_equals_n_and_single_query():
    sim = _sim()
    q, c = _inputs("float32", nq=3, n=77, d=40)
    scores, idx = sim.similarity_search(q, c, 77, metric="l2")
    assert torch.equal(idx.sort(dim=1).values, torch.arange(77, device="cuda").expand(3, 77))
    s1, i1 = sim.similarity_search(q[1], c, 5, metric="l2")
    assert s1.shape == (5,) and torch.equal(i1, idx[1, :5])


_EXPLICIT = [
    dict(BLOCK_N=64, BLOCK_Q=16, BLOCK_K=32, WARPS_N=2, WARPS_Q=2, STAGES=2, VEC=16, MERGE=0, EPI_ROWS=128, MIN_BLOCKS=1, MMA=0),
    dict(BLOCK_N=128, BLOCK_Q=32, BLOCK_K=64, WARPS_N=4, WARPS_Q=2, STAGES=5, VEC=8, MERGE=1, EPI_ROWS=128, MIN_BLOCKS=1, MMA=0),
    dict(BLOCK_N=256, BLOCK_Q=48, BLOCK_K=128, WARPS_N=8, WARPS_Q=1, STAGES=3, VEC=4, MERGE=2, EPI_ROWS=128, MIN_BLOCKS=1, MMA=0),
    dict(BLOCK_N=256, BLOCK_Q=8, BLOCK_K=32, WARPS_N=2, WARPS_Q=1, STAGES=4, VEC=16, MERGE=0, EPI_ROWS=128, MIN_BLOCKS=1, MMA=0),
]


def test_results_do_not_depend_on_config_or_splits():
    """Every key is computed by the same arithmetic whatever the tiling, and the order is total: bit-identical."""
    sim = _sim()
    q, c = _inputs("float16", seed=7)
    base_s, base_i = sim.similarity_search(q, c, 10, metric="l2")
    for cfg in _EXPLICIT:
        s, i = sim.similarity_search(q, c, 10, metric="l2", config=sim.fit_config(cfg, 10, "float16"))
        assert torch.equal(i, base_i), cfg
        assert torch.equal(s, base_s), cfg
    for splits in (1, 3, 1000):
        s, i = sim._search_gpu(q, c, 10, "l2", sim.default_config(NQ, 10, "float16", D), False, splits=splits)
        assert torch.equal(i, base_i) and torch.equal(s, base_s), splits


#: wgmma main loop (MMA 1..3) configs: two warpgroups with two m64 blocks each, one warpgroup with one; D_WG gives
#: 4 slices of 64 elements per tile, the last one short (an MMA group is in flight across every refill barrier).
#: Every config has 64-element slices, WARPS_Q=1 and MIN_BLOCKS=1; each row lists the rest.
_WG_FIELDS = ("MMA", "BLOCK_N", "BLOCK_Q", "WARPS_N", "STAGES", "VEC", "MERGE", "EPI_ROWS")
_WGMMA = [dict(zip(_WG_FIELDS, row), BLOCK_K=64, WARPS_Q=1, MIN_BLOCKS=1) for row in (
    (1, 256, 40, 8, 3, 16, 2, 128),
    (1, 64, 16, 4, 4, 8, 0, 128),
    # MMA=2 (the TMA producer warp): a 2-stage ring (every slice waits for its refill), 256-row tiles over two
    # passes, thread lists with 6 stages
    (2, 64, 16, 4, 2, 8, 0, 128),
    (2, 256, 40, 8, 3, 16, 2, 64),
    (2, 128, 64, 8, 6, 16, 3, 64),
    # MMA=3 (ping-pong warpgroups): a 2-stage ring shared by the two warpgroups' tiles, 128-row tiles in two passes
    # with 2 parts per column and group; 256-row tiles (4 m64 blocks per warpgroup) with 4 parts per column and
    # group, 32-entry lists; 5 stages of the nq = 100 tiling; 192-row tiles (3 m64 blocks, 3 epilogue passes)
    (3, 128, 64, 8, 2, 16, 3, 64),
    (3, 256, 16, 8, 3, 16, 4, 64),
    (3, 128, 40, 8, 5, 16, 3, 128),
    (3, 192, 40, 8, 3, 16, 3, 64),
)]
#: The same with thread-block clusters (CLUSTER: every producer multicasts its part of each query slice): 40 queries
#: are 48 stage rows in a cluster of 2 and 64 in one of 4 (padding rows loaded, never read); 5003 rows in 192-row
#: tiles over clusters of 4 leave the last cluster's blocks walking empty tiles.
_WG_CLUSTER = [dict(zip(_WG_FIELDS + ("CLUSTER",), row), BLOCK_K=64, WARPS_Q=1, MIN_BLOCKS=1) for row in (
    (3, 128, 40, 8, 4, 16, 3, 64, 2),
    (3, 192, 40, 8, 3, 16, 3, 64, 4),
    (2, 128, 64, 8, 3, 16, 3, 64, 2),
    (3, 128, 104, 8, 4, 16, 3, 64, 2),
)]
_WGMMA += _WG_CLUSTER
#: L2 prefetch of the tile 1 or 2 ahead (PREFETCH), with and without a cluster
_WGMMA += [dict(_WGMMA[7], PREFETCH=1), dict(_WG_CLUSTER[2], PREFETCH=2)]
D_WG = 200


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="wgmma main loop: sm_90 only")
@pytest.mark.parametrize("dt", ("float16", "bfloat16"))
def test_wgmma_main_loop_matches_reference_and_mma_sync(dt):
    """MMA 1..3 against the float64 rule for every metric, the exact tie rule on integer data, and the mma.sync main
    loop's results: the same indices, scores within 1e-6 (the same products; the tensor cores may order the fp32
    accumulation differently)."""
    from tunelab.tuning.families.similarity import check_topk

    sim = _sim()
    q, c = _inputs(dt, d=D_WG, seed=11)
    base_cfg = sim.default_config(NQ, 10, dt, D_WG)
    for cfg in _WGMMA:
        for metric in METRICS:
            s, i = sim.similarity_search(q, c, 10, metric=metric, config=cfg)
            rep = check_topk(s, i, q, c, 10, metric)
            assert rep.ok, (cfg, metric, rep.reason)
            s0, i0 = sim.similarity_search(q, c, 10, metric=metric, config=dict(base_cfg, MMA=0, BLOCK_N=128))
            assert torch.equal(i, i0), (cfg, metric, "indices differ from mma.sync")
            torch.testing.assert_close(s, s0, rtol=1e-6, atol=1e-6 * float(s0.abs().max()))
        # one split: every block runs many tiles, so the TMA ring wraps and consecutive epilogues meet (MMA=2 has
        # no barrier in its main loop; the next epilogue must not overwrite norms or flags still in use)
        s1, i1 = sim._search_gpu(q, c, 10, "l2", dict(cfg), True, splits=1)
        s2, i2 = sim.similarity_search(q, c, 10, metric="l2", config=cfg)
        assert torch.equal(i1, i2) and torch.equal(s1, s2), (cfg, "one split differs")
    g = torch.Generator(device="cuda").manual_seed(5)
    tdt = getattr(torch, dt)
    qi = torch.randint(-2, 3, (NQ, D_WG), generator=g, device="cuda").to(tdt)
    ci = torch.randint(-2, 3, (N, D_WG), generator=g, device="cuda").to(tdt)
    qd, cd = qi.double(), ci.double()
    order = torch.sort(qd @ cd.T, dim=1, descending=True, stable=True).indices[:, :16]
    for cfg in _WGMMA:
        s, i = sim.similarity_search(qi, ci, 16, metric="ip", config=cfg)
        assert torch.equal(i, order), cfg


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the dense default (ping-pong main loop): sm_90 only")
def test_dense_search_matches_fused_and_reference():
    """MERGE=5 (every key to the dense matrix, then the select kernel) gives the fused ping-pong search's answer for
    every metric and 16-bit dtype, with N past the select kernel's shared-memory window (51 Ki entries) and not a
    multiple of 4, k from 1 to 32; rows that all tie give rows 0..k-1; a streamed corpus refuses an explicit MERGE=5
    and takes the fused default instead of a dense one."""
    from tunelab.errors import ConfigError, InputError
    from tunelab.tuning.families.similarity import check_topk

    sim = _sim()
    nq, n = 37, 60001
    for dt in ("float16", "bfloat16"):
        q, c = _inputs(dt, nq=nq, n=n, d=D_WG, seed=17)
        dense = sim.default_config(nq, 10, dt, D_WG, n=65536)
        fused = sim.default_config(nq, 10, dt, D_WG)
        assert dense["MERGE"] == sim.MERGE_DENSE and fused["MERGE"] == 3 and fused["MMA"] == 3
        for metric in METRICS:
            for k in (1, 10, 32):
                s, i = sim.similarity_search(q, c, k, metric=metric, config=dense)
                s0, i0 = sim.similarity_search(q, c, k, metric=metric, config=sim.fit_config(dict(fused, MERGE=4), k, dt))
                assert torch.equal(i, i0), (dt, metric, k)
                torch.testing.assert_close(s, s0, rtol=1e-6, atol=1e-6 * float(s0.abs().max()))
            rep = check_topk(s, i, q, c, 32, metric)
            assert rep.ok, (dt, metric, rep.reason)
    with pytest.raises(ConfigError, match="k <= 32"):
        sim.similarity_search(q, c, 33, config=dense)
    row = torch.randint(-2, 3, (1, D_WG), device="cuda").to(torch.float16)
    tied = row.repeat(3000, 1)  # every key of a query ties: more than the select queue's 1024 reach the bound
    qt = torch.randint(-2, 3, (5, D_WG), device="cuda").to(torch.float16)
    _, it = sim.similarity_search(qt, tied, 10, config=sim.default_config(16, 10, "float16", D_WG, n=4096))
    assert torch.equal(it.cpu(), torch.arange(10).repeat(5, 1))
    with pytest.raises(InputError, match="MERGE=5"):
        sim.similarity_search(q, c, 10, config=dense, memory_budget=64 << 20)
    s_default, i_default = sim.similarity_search(q, c, 10)  # resolved: dense here
    s_budget, i_budget = sim.similarity_search(q, c, 10, memory_budget=64 << 20)  # streamed: fused
    assert torch.equal(i_default, i_budget)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the filtered search's ping-pong configs: sm_90 only")
@pytest.mark.parametrize("merge", [6, 7])
def test_filtered_search_matches_dense_and_reference(merge):
    """MERGE=6 (the keys that reach their block's bar to the split's segment of a candidate row, then the select
    over the segments), and MERGE=7 (the same, filtered by the TMA producer's spare warps) where the dense config has
    the TMA producer (16-bit inputs), give the dense search's answer on the same main loop (bit-identical keys, same
    tie rule) for every metric (fp16) and dtype (bf16 with l2, fp32 with ip: each pair is two more compiles, and the
    suite has to fit a device call), k from 1 to 32, N not a multiple of a tile, and on a new corpus after an old
    one; its segment counts (filter_counts) fit their segments and reach k per query, far fewer than N at 60K rows
    (under 5%, which the global bars make: 7.7% without them), also where the candidate buffers start out holding
    bars above every key; rows that all tie (every key passes every bar) give rows 0..k-1; a streamed corpus refuses
    an explicit MERGE=6 or 7."""
    from tunelab.errors import InputError
    from tunelab.tuning.families.similarity import check_topk

    sim = _sim()
    for dt, nq, n in (("float16", 100, 60001), ("bfloat16", 8, 30001), ("float32", 33, 20001)):
        q, c = _inputs(dt, nq=nq, n=n, d=D_WG, seed=nq + 5)
        dense = sim.default_config(nq, 10, dt, D_WG, n=65536)
        assert dense["MERGE"] == sim.MERGE_DENSE, dense
        if merge == sim.MERGE_FILTER_WARPS and not sim.uses_tma(dense):
            continue  # (MERGE=7: the producer warpgroup's spare warps filter)
        filtered = dict(dense, MERGE=merge)
        for metric in METRICS if dt == "float16" else ("l2",) if dt == "bfloat16" else ("ip",):
            for k in (1, 10, 32):
                s, i = sim.similarity_search(q, c, k, metric=metric, config=filtered)
                s0, i0 = sim.similarity_search(q, c, k, metric=metric, config=dense)
                assert torch.equal(i, i0), (dt, metric, k)
                assert torch.equal(s, s0), (dt, metric, k)
            rep = check_topk(s, i, q, c, 32, metric)
            assert rep.ok, (dt, metric, rep.reason)
        c2 = torch.flip(c, dims=(0,)).contiguous()  # a new corpus: nothing of the last call's may stay in use
        s2, i2 = sim.similarity_search(q, c2, 10, config=filtered)
        assert torch.equal(i2, sim.similarity_search(q, c2, 10, config=dense)[1]), dt
        comp = sim.compile_search(sim.fit_config(filtered, 10, dt, sim.smem_limit("sm_90"), "ip"), dtype=dt)
        plan = comp.plan(0, nq, n, 10)
        ck, ci = comp.candidate_buffers(plan, nq, n, 10, q.device)
        ci.fill_(-7)
        ck.fill_(3e38)  # a stale global bar above every key would drop them all: each block resets its queries' words
        out = torch.empty((nq, 10), dtype=torch.float32, device="cuda"), torch.empty((nq, 10), dtype=torch.int64,
                                                                                      device="cuda")
        search, select = comp.prepare(0, q, c, 10, ck, ci, *out, plan)
        stream = torch.cuda.current_stream().cuda_stream
        search(stream)
        select(stream)
        counts = sim.filter_counts(ci, plan, comp.config)
        assert counts.shape == (nq, plan["splits"])
        assert int(counts.min()) >= 0 and int(counts.max()) <= sim.filter_rows(plan, comp.config), dt
        per_query = counts.sum(1)
        assert int(per_query.min()) >= 10 and int(per_query.max()) < n // 4, (dt, per_query)
        if n > 50_000:  # three tiles a split: later tiles filter by the global bars (7.7% of the rows without them)
            assert float(per_query.float().mean()) < n / 20, (dt, per_query)
        assert torch.equal(out[1], sim.similarity_search(q, c, 10, config=dense)[1]), dt
    row = torch.randint(-2, 3, (1, D_WG), device="cuda").to(torch.float16)
    tied = row.repeat(3000, 1)
    qt = torch.randint(-2, 3, (5, D_WG), device="cuda").to(torch.float16)
    cfg = dict(sim.default_config(16, 10, "float16", D_WG, n=4096), MERGE=merge)
    _, it = sim.similarity_search(qt, tied, 10, config=cfg)
    assert torch.equal(it.cpu(), torch.arange(10).repeat(5, 1))
    with pytest.raises(InputError, match=f"MERGE={merge}"):
        sim.similarity_search(qt, tied, 10, config=cfg, memory_budget=64 << 20)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the filtered search's ping-pong configs: sm_90 only")
def test_filtered_search_from_two_threads_on_one_stream():
    """Two threads calling the filtered search on torch's one default stream, each on its own corpus: every call
    gets its own corpus's answer (the bars and counts a call leaves in its candidate rows are never read by a later
    call, and each thread keeps its own candidate rows on the stream: ops/workspace.py), and
    a worker thread's first call, with no CUDA context current in it yet, encodes its tensor maps (the core's
    encoding makes the pointer's device's primary context current first: core/driver.cpp ensure_context_for)."""
    sim = _sim()
    q, c = _inputs("float16", nq=40, n=20001, d=D_WG, seed=3)
    corpora = (c, torch.flip(c, dims=(0,)).contiguous())
    cfg = dict(sim.default_config(40, 10, "float16", D_WG, n=32768), MERGE=sim.MERGE_FILTERED)
    want = [sim.similarity_search(q, x, 10, config=dict(cfg, MERGE=sim.MERGE_DENSE))[1] for x in corpora]

    def calls(i):
        return [sim.similarity_search(q, corpora[i], 10, config=cfg)[1] for _ in range(30)]

    with cf.ThreadPoolExecutor(2) as pool:
        got = list(pool.map(calls, (0, 1)))
    torch.cuda.synchronize()
    for i in (0, 1):
        assert all(torch.equal(g, want[i]) for g in got[i]), i


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the dense defaults for few queries and for fp32: sm_90 only")
def test_dense_defaults_for_few_queries_and_fp32_match_fused():
    """The dense defaults for few queries (16-bit, nq <= 8: the mma.sync loop up to 32768 rows, ping-pong above) and
    for fp32 (nq 9..112, the mma.sync loop with 4 x 2 warps) give the answer of the fused search on the same main
    loop (bit-identical keys) for every metric and k from 1 to 32, with N not a multiple of a tile and past the
    select kernel's shared-memory window (51 Ki entries), and pass the reference check; the op resolves to them."""
    from tunelab.tuning.families.similarity import check_topk
    from tunelab.tuning.family import next_pow2

    sim = _sim()
    for dt, nq, n, mma in (("float16", 1, 30001, 0), ("bfloat16", 8, 60001, 3), ("float32", 33, 60001, 0)):
        q, c = _inputs(dt, nq=nq, n=n, d=D_WG, seed=nq)
        dense = sim.default_config(nq, 10, dt, D_WG, n=next_pow2(n))
        assert (dense["MERGE"], dense["MMA"]) == (sim.MERGE_DENSE, mma), (dt, nq, dense)
        # the fused search on the same main loop: ping-pong takes thread lists, mma.sync shared lists
        fused = dict(dense, MERGE=4 if mma == 3 else 2)
        for metric in METRICS:
            for k in (1, 10, 32):
                s, i = sim.similarity_search(q, c, k, metric=metric, config=dense)
                s0, i0 = sim.similarity_search(q, c, k, metric=metric, config=sim.fit_config(fused, k, dt))
                assert torch.equal(i, i0), (dt, nq, metric, k)
                torch.testing.assert_close(s, s0, rtol=1e-6, atol=1e-6 * float(s0.abs().max()))
            rep = check_topk(s, i, q, c, 32, metric)
            assert rep.ok, (dt, nq, metric, rep.reason)
        s_op, i_op = sim.similarity_search(q, c, 10)  # the op's own resolution: the dense default
        s_d, i_d = sim.similarity_search(q, c, 10, config=dense)
        assert torch.equal(i_op, i_d), (dt, nq)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="thread-block clusters: sm_90 only")
def test_clusters_match_for_any_split_count_and_when_streamed():
    """Cluster configs give the unclustered answer bit for bit whatever the split count (forced counts round up to
    whole clusters; 7 splits of 40 tiles leave the last cluster's second block 2 empty tiles), and through the
    streamed path, whose chunks plan their splits again."""
    from tunelab.ops import streaming

    sim = _sim()
    q, c = _inputs("float16", d=D_WG, seed=13)
    for cfg in _WG_CLUSTER:
        want_s, want_i = sim.similarity_search(q, c, 10, metric="l2", config=dict(cfg, CLUSTER=1))
        for splits in (1, 3, 7, None):
            s, i = sim._search_gpu(q, c, 10, "l2", dict(cfg), True, splits=splits)
            assert torch.equal(i, want_i) and torch.equal(s, want_s), (cfg, splits)
    cfg = _WG_CLUSTER[0]
    want_s, want_i = sim.similarity_search(q, c, 10, metric="ip", config=dict(cfg, CLUSTER=1))
    stats = {}
    s, i = streaming.search_streamed(q, c.cpu(), 10, metric="ip", config=dict(cfg), explicit=True, chunk_rows=1500,
                                     streams=2, stats=stats)
    assert stats["num_chunks"] >= 3 and stats["config"]["CLUSTER"] == 2, stats
    assert torch.equal(i, want_i) and torch.equal(s, want_s)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="TMA main loop: sm_90 only")
def test_tma_main_loop_needs_16_byte_rows():
    """MMA 2 and 3 read rows through TMA: an explicit MMA=3 config on rows that are not 16-byte multiples (d = 100
    fp16: 200 bytes) is an InputError naming the rule and the way out. Without an explicit config the op avoids
    TMA: the default for d = 100 is MMA=1, and a corpus view whose pointer and row stride are only 8-byte aligned
    moves an MMA=3 default to MMA=1; both give the mma.sync main loop's answer."""
    from tunelab.errors import InputError

    sim = _sim()
    q, c = _inputs("float16", d=100, seed=3)
    cfg = dict(sim.fit_config(sim.default_config(NQ, 10, "float16", D_WG), 10, "float16"), VEC=8)
    assert cfg["MMA"] == 3
    with pytest.raises(InputError, match="MMA=3 .*use MMA=1"):
        sim.similarity_search(q, c, 10, config=cfg)
    sync = dict(cfg, MMA=0, BLOCK_N=128, BLOCK_K=64, WARPS_Q=1, WARPS_N=8)
    s, i = sim.similarity_search(q, c, 10)
    s0, i0 = sim.similarity_search(q, c, 10, config=sync)
    assert torch.equal(i, i0)
    q, c = _inputs("float16", d=D_WG + 4, seed=4)
    q, c = q[:, 4:], c[:, 4:]  # d = D_WG (a 400-byte row) but 8-byte aligned pointers, 408-byte row strides
    assert sim.default_config(NQ, 10, "float16", D_WG)["MMA"] == 3
    s, i = sim.similarity_search(q, c, 10)
    s0, i0 = sim.similarity_search(q.contiguous(), c.contiguous(), 10, config=dict(sync, VEC=16))
    assert torch.equal(i, i0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 4.2e34])
def test_nan_rows_never_enter(bad):
    """Rows holding a NaN, an inf, or an fp32 value just past the tf32 split's range (FLT_MAX / 8193 ~ 4.15e34)
    score NaN and never enter the results."""
    sim = _sim()
    q, c = _inputs("float32", nq=4, n=1000, d=64)
    c[::3, 5] = bad
    scores, idx = sim.similarity_search(q, c, 10)
    assert bool((idx % 3 != 0).all()) and bool(torch.isfinite(scores).all())


def test_fp32_values_just_inside_the_split_range_score_like_float64():
    """An element of 4.1e34, just inside the tf32 split's range, scores like the float64 reference (3xTF32: ~2^-22
    relative) and its row ranks first; 4.2e34 scores NaN (test_nan_rows_never_enter)."""
    sim = _sim()
    q, c = _inputs("float32", nq=4, n=1000, d=64)
    q = q.abs() * 1e-3  # positive and small: the big row's score stays finite and tops every query
    c[7, 5] = 4.1e34
    scores, idx = sim.similarity_search(q, c, 10)
    assert bool((idx[:, 0] == 7).all())
    assert torch.allclose(scores[:, 0].double(), q.double() @ c[7].double(), rtol=1e-6, atol=0)


#: MMA=4 (fp32 products by FFMA) configs: the nq <= 8 default's layout (256-row tiles over 8 warps, hybrid merge),
#: two warps along the queries (one n8 tile each: a warp of padding columns when nq <= 8), thread lists with 64-byte
#: slices (2 k-steps each)
_FMA = [dict(BLOCK_N=256, BLOCK_Q=8, BLOCK_K=64, WARPS_N=8, WARPS_Q=1, STAGES=3, VEC=16, MERGE=2, EPI_ROWS=128,
             MIN_BLOCKS=1, MMA=4),
        dict(BLOCK_N=128, BLOCK_Q=16, BLOCK_K=32, WARPS_N=4, WARPS_Q=2, STAGES=3, VEC=16, MERGE=0, EPI_ROWS=128,
             MIN_BLOCKS=1, MMA=4),
        dict(BLOCK_N=128, BLOCK_Q=8, BLOCK_K=16, WARPS_N=4, WARPS_Q=1, STAGES=2, VEC=16, MERGE=3, EPI_ROWS=64,
             MIN_BLOCKS=1, MMA=4)]


@pytest.mark.parametrize("metric", METRICS)
def test_fma_main_loop_matches_reference_and_3xtf32(metric):
    """MMA=4 over 1, 2, 3, 8 and 13 queries (1, 2, 4 and 8 FFMA columns a warp, and warps of padding columns) and a
    corpus that no tile divides: the float64 reference's answer up to the tie band, 3xTF32's indices and its scores
    within fp32 rounding."""
    from tunelab.tuning.families.similarity import check_topk

    sim = _sim()
    for nq in (1, 2, 3, 8, 13):
        q, c = _inputs("float32", nq=nq, seed=nq)
        base_s, base_i = sim.similarity_search(q, c, 10, metric=metric, config=dict(_FMA[0], MMA=0))
        for cfg in _FMA:
            s, i = sim.similarity_search(q, c, 10, metric=metric, config=cfg)
            rep = check_topk(s, i, q, c, 10, metric)
            assert rep.ok, (nq, cfg, rep.reason)
            assert (i == base_i).float().mean().item() > 0.99, (nq, cfg)
            torch.testing.assert_close(s, base_s, rtol=1e-5, atol=1e-5 * float(base_s.abs().max()))


def test_fma_takes_the_whole_fp32_range_and_drops_non_finite_rows():
    """MMA=4 multiplies in fp32, without the tf32 split: an element of 4.2e34 (past 3xTF32's range) scores like float64
    and its row ranks first; rows holding a NaN or an inf, and a row whose score overflows, score NaN and never enter
    the results."""
    sim = _sim()
    q, c = _inputs("float32", nq=4, n=1000, d=64)
    q = q.abs() + 0.1  # positive: the big row's score tops every query, the 3e38 row's overflows
    c[7, 5] = 4.2e34
    c[::3, 9] = float("nan")
    c[::5, 11] = float("inf")
    c[2] = 3e38
    scores, idx = sim.similarity_search(q, c, 10, config=_FMA[0])
    assert bool((idx[:, 0] == 7).all())
    assert torch.allclose(scores[:, 0].double(), q.double() @ c[7].double(), rtol=1e-6, atol=0)
    assert bool((idx % 3 != 0).all() and (idx % 5 != 0).all() and (idx != 2).all())
    assert bool(torch.isfinite(scores).all())
    _, idx0 = sim.similarity_search(q, c, 10, config=dict(_FMA[0], MMA=0))
    assert bool((idx0 != 7).all())  # 3xTF32: the 4.2e34 row scores NaN


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the FFMA default: sm_90 only")
def test_fma_short_tile_default_answers_as_256_row_tiles_and_streamed():
    """fp32 searches of 1 and 2 queries over at most FMA_SHORT_TILES_MAX_N rows take the FFMA loop on 128-row tiles
    by default; a row's arithmetic does not depend on the tile, so their scores and indices equal, bit for bit, those
    of 256-row tiles and of the streamed search (which knows no N and keeps 256 rows)."""
    from tunelab.ops import streaming

    sim = _sim()
    for nq in (1, 2):
        q, c = _inputs("float32", nq=nq, n=40_000, d=128, seed=30 + nq)
        cfg = sim.default_config(nq, 10, "float32", 128, n=65536)
        assert (cfg["MMA"], cfg["BLOCK_N"]) == (4, 128), cfg
        s, i = sim.similarity_search(q, c, 10, metric="l2")
        s256, i256 = sim.similarity_search(q, c, 10, metric="l2", config=dict(cfg, BLOCK_N=256))
        assert torch.equal(i, i256) and torch.equal(s, s256), nq
        stats = {}
        budget = streaming.SLACK_BYTES + (1 << 20) + 2 * (4 << 20)
        s_st, i_st = streaming.search_streamed(q, c.cpu(), 10, metric="l2", memory_budget=budget, streams=2,
                                               stats=stats)
        assert stats["num_chunks"] >= 3
        assert (stats["config"]["MMA"], stats["config"]["BLOCK_N"]) == (4, 256), stats["config"]
        assert torch.equal(i_st, i) and torch.equal(s_st, s), nq


@pytest.mark.parametrize("pinned", [True, False])
@pytest.mark.parametrize("streams", [1, 2, 3])
def test_streamed_equals_in_memory(pinned, streams):
    """A host corpus 4x a forced budget streams through >= 3 chunks and gives bit-identical results."""
    from tunelab.ops import streaming

    sim = _sim()
    q, c = _inputs("float16", nq=20, n=40_000, d=128, seed=11)
    want_s, want_i = sim.similarity_search(q, c, 10, metric="cosine")
    host = c.cpu()
    if pinned:
        host = host.pin_memory()
    budget = streaming.SLACK_BYTES + (1 << 20) + streams * (2 << 20)  # ~1.3 MB of corpus per chunk buffer
    stats = {}
    got_s, got_i = streaming.search_streamed(q, host, 10, metric="cosine", memory_budget=budget, streams=streams,
                                             stats=stats)
    assert stats["num_chunks"] >= 3 and stats["pinned"] == pinned
    assert torch.equal(got_i, want_i) and torch.equal(got_s, want_s)
    # the public op takes the same path for a CPU corpus
    s2, i2 = sim.similarity_search(q, host, 10, metric="cosine", memory_budget=budget, streams=streams)
    assert torch.equal(i2, want_i) and torch.equal(s2, want_s)


def test_streamed_gpu_corpus_under_budget_and_fixed_chunks():
    sim = _sim()
    q, c = _inputs("float32", nq=9, n=30_011, d=64, seed=5)
    want = sim.similarity_search(q, c, 12, metric="ip")
    got = sim.similarity_search(q, c, 12, metric="ip", chunk_rows=7000)  # 5 chunks, views of the GPU corpus
    assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])
    got = sim.similarity_search(q, c.cpu(), 12, metric="ip", chunk_rows=4096, streams=2)
    assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])


def test_odd_dimension_16bit_is_padded():
    from tunelab.tuning.families.similarity import check_topk

    sim = _sim()
    q, c = _inputs("bfloat16", nq=6, n=999, d=77)
    s, i = sim.similarity_search(q, c, 7, metric="l2")
    assert check_topk(s, i, q, c, 7, "l2").ok
    s2, i2 = sim.similarity_search(q, c.cpu(), 7, metric="l2", chunk_rows=300)
    assert torch.equal(i2, i) and torch.equal(s2, s)


def test_release_memory_frees_the_pool():
    from tunelab.ops import streaming

    sim = _sim()
    q, c = _inputs("float16", nq=4, n=10_000, d=64)
    sim.similarity_search(q, c.cpu(), 5, chunk_rows=3000)
    torch.cuda.synchronize()
    assert streaming.POOL.held_bytes()["device"] > 0
    sim.release_memory()
    assert streaming.POOL.held_bytes() == {"pinned": 0, "device": 0}


def test_errors_on_gpu_inputs():
    from tunelab.errors import InputError

    sim = _sim()
    q, c = _inputs("float16", nq=4, n=100, d=64)
    with pytest.raises(InputError, match="k=101 is larger than the corpus"):
        sim.similarity_search(q, c, 101)
    with pytest.raises(InputError, match="same dtype"):
        sim.similarity_search(q, c.float(), 3)
    with pytest.raises(InputError, match="dimension mismatch"):
        sim.similarity_search(q, c[:, :32].contiguous(), 3)
    with pytest.raises(InputError, match="not contiguous"):
        sim.similarity_search(q, torch.randn(64, 100, device="cuda", dtype=torch.float16).T, 3)
    with pytest.raises(InputError, match="cannot hold"):
        sim.similarity_search(q, c.cpu(), 3, memory_budget=1 << 20)


def test_custom_ops_opcheck_and_cuda_graph():
    sim = _sim()
    q, c = _inputs("float16", nq=8, n=2000, d=64)
    torch.library.opcheck(torch.ops.tunelab.similarity_search.default, (q, c, 5, "ip", "", 0.85, 0, 0, 2),
                          test_utils=("test_schema", "test_faketensor"))
    want = sim.similarity_search(q, c, 5)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = sim.similarity_search(q, c, 5)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])
    x = torch.randn(100, 32, device="cuda", dtype=torch.complex64)
    torch.library.opcheck(torch.ops.tunelab.gram.default, (x, True, True, ""),
                          test_utils=("test_schema", "test_faketensor"))


def test_eager_calls_skip_the_dispatcher_and_reuse_launches():
    """A plain eager call runs the implementation directly and, repeated, reuses its prepared launches; a corpus at
    other addresses gets its own (the launches' argument blobs are keyed on every pointer)."""
    sim = _sim()
    q, c = _inputs("float16", nq=8, n=2000, d=64)
    c2 = torch.roll(c, 777, 0).contiguous()
    want = torch.ops.tunelab.similarity_search(q, c, 5, "ip", "", 0.85, 0, 0, 2)  # through the dispatcher
    sim.clear_caches()
    for _ in range(20):
        got = sim.similarity_search(q, c, 5)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    # the outputs of the call before are alive during each call, so torch's allocator cycles through a few pointer
    # sets (6 on an H200 at 0b90bfc): each is prepared once, and one used again is replayed as a graph
    launches = list(sim._SEARCH_LAUNCHES.values())
    assert len(sim._SEARCH_SHAPES) == 1 and 1 <= len(launches) <= 8, len(launches)
    assert any(e.graph is not None for e in launches)
    other = sim.similarity_search(q, c2, 5)
    assert torch.equal(other[0], want[0]) and torch.equal(other[1], (want[1] + 777) % 2000)
    sim.clear_caches()
    again = sim.similarity_search(q, c2, 5)
    assert torch.equal(again[1], other[1])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        sim.similarity_search(q, c, 5)
        sim.gram(torch.randn(64, 32, device="cuda"))
    names = {e.name for e in prof.events()}
    assert {"tunelab::similarity_search", "tunelab::gram"} <= names, sorted(names)[:20]


@pytest.mark.parametrize("dense", [False, True])
def test_repeated_calls_reuse_scratch_and_replay_one_graph(dense):
    """Repeated calls on one stream get their candidate buffers back (ops/workspace.py) and, from the second use of
    a pointer set, replay the search and its merge or select as one CUDA graph: the same answers as the first call,
    and a corpus changed in place (same pointers, same graph) is read anew. A caller's CUDA graph capture keeps its
    own buffers, and release_memory drops what the search kept."""
    from tunelab.ops import workspace
    from tunelab.tuning.families.similarity import check_topk

    sim = _sim()
    sim.release_memory()
    sim.clear_caches()
    q, c = _inputs("float16", nq=40, n=20001, d=D_WG, seed=5)
    config = None
    if dense:
        if torch.cuda.get_device_capability() != (9, 0):
            pytest.skip("the dense search: sm_90 only")
        config = dict(sim.default_config(40, 10, "float16", D_WG, n=32768), MERGE=sim.MERGE_DENSE)
    want = sim.similarity_search(q, c, 10, config=config)
    assert check_topk(*want, q, c, 10, "ip").ok
    held = workspace.held_bytes()
    assert held > 0
    got = None
    for _ in range(12):
        got = None  # the outputs freed before each call: the allocator soon hands every call the same pointers
        got = sim.similarity_search(q, c, 10, config=config)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert workspace.held_bytes() == held  # the same buffers, not new ones
    entries = list(sim._SEARCH_LAUNCHES.values())
    assert any(e.graph is not None for e in entries), [e.uses for e in entries]
    replays = []

    class Counted:  # the recorded graphs, counting their replays
        def __init__(self, graph):
            self.graph = graph

        def __call__(self, stream):
            replays.append(stream)
            self.graph(stream)

    for e in entries:
        if e.graph is not None:
            e.graph = Counted(e.graph)
    rolled = torch.roll(c, 333, 0)
    c.copy_(rolled)  # same pointers: the recorded graph, reading the new rows
    got = None
    got = sim.similarity_search(q, c, 10, config=config)
    assert len(replays) == 1  # served by a graph
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], (want[1] + 333) % c.shape[0])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = sim.similarity_search(q, c, 10, config=config)
    c.copy_(torch.roll(rolled, -333, 0))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], want[0]) and torch.equal(captured[1], want[1])
    sim.release_memory()
    assert workspace.held_bytes() == 0 and not sim._SEARCH_LAUNCHES


def test_recording_and_dropping_graphs_leaves_another_threads_capture_valid():
    """While another thread captures a CUDA graph in torch's default (global) mode, this thread's searches record
    their launches into a graph (a pointer set's second use) and drop recorded graphs: the driver calls for both are
    'unsafe' in a global-mode capture and, made in the default mode, invalidated it (an H200 check with the driver's
    own calls at 3461415); they run in relaxed mode since. The capture replays its own work right, and the searches
    answer right."""
    import threading

    sim = _sim()
    sim.release_memory()
    q, c = _inputs("float16", nq=40, n=20001, d=D_WG, seed=9)
    want = sim.similarity_search(q, c, 10)
    got = None
    for _ in range(3):  # the outputs' blocks in torch's cache before the capture: no cudaMalloc during it
        got = None
        got = sim.similarity_search(q, c, 10)
    sim._SEARCH_LAUNCHES.clear()
    got = None
    got = sim.similarity_search(q, c, 10)  # prepared now (a first use): the next use records its graph
    x = torch.randn(4096, device="cuda")
    started, finish, out, errors = threading.Event(), threading.Event(), [], []

    def capture():
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = x * 2
                started.set()
                finish.wait(60)
                y = y + 1
            out.append((graph, y))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
            started.set()

    t = threading.Thread(target=capture)
    t.start()
    assert started.wait(60)
    for _ in range(sim.GRAPH_AFTER + 1):  # nothing that synchronizes (a check of the answers) until the capture ends
        got = None  # each call's outputs freed first: the same pointer set again
        got = sim.similarity_search(q, c, 10)
    recorded = sum(e.graph is not None for e in sim._SEARCH_LAUNCHES.values())
    sim._SEARCH_LAUNCHES.clear()  # destroys the recorded graphs during the capture
    finish.set()
    t.join(60)
    assert not errors, errors
    graph, y = out[0]
    graph.replay()
    torch.cuda.synchronize()
    assert recorded >= 1 and torch.equal(y, x * 2 + 1)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# ------------------------------------------------------------------------------------------------ Gram
def _gram_ref(x):
    xd = x.to(torch.complex128) if x.is_complex() else x.double()
    g = xd @ xd.mH if x.is_complex() else xd @ xd.T
    return g.abs() ** 2


def _torch_lowp_gram_err(x, ref):
    if x.is_complex():
        t = (x @ x.mH).abs().square()
    elif x.dtype == torch.float32:
        with _no_tf32():
            t = (x @ x.T).square()
    else:
        t = (x @ x.T).float().square()
    return float((t.double() - ref).abs().max())


@pytest.mark.parametrize("dt", ["float16", "float32", "complex64"])
def test_gram_matches_torch(dt):
    sim = _sim()
    n, dim = 333, 96
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn((n, dim), generator=g, device="cuda", dtype=torch.complex64 if dt == "complex64" else
                    torch.float32).to(getattr(torch, dt))
    ref = _gram_ref(x)
    from tunelab.tuning.families.gram import error_factor
    tol = error_factor(dt) * _torch_lowp_gram_err(x, ref) + 1e-6 * float(ref.max())
    full = sim.gram(x, symmetric=False)
    assert float((full.double() - ref).abs().max()) <= tol
    tri = sim.gram(x)  # symmetric: upper triangle, zeros below
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device="cuda"))
    assert float((tri.double() - ref).abs()[upper].max()) <= tol
    assert bool((tri[~upper] == 0).all())
    mirrored = sim.gram(x, mirror=True)
    assert float((mirrored.double() - ref).abs().max()) <= tol
    assert torch.equal(mirrored, mirrored.T)
    out = torch.full((n, n), -1.0, device="cuda")
    sim.gram(x, out=out)  # the lower triangle of `out` is left untouched
    assert bool((out[~upper] == -1).all()) and torch.equal(out[upper], tri[upper])


def test_gram_quadratic_shape_edges():
    sim = _sim()
    for n in (1, 63, 65, 200):
        x = torch.randn(n, 40, device="cuda", dtype=torch.complex64)
        k = sim.gram(x, mirror=True)
        ref = _gram_ref(x)
        assert float((k.double() - ref).abs().max()) <= 1e-4 * float(ref.max())


# ------------------------------------------------------------------------------------------------ tuner family
def test_similarity_family_gates_on_gpu():
    """make_inputs -> compile -> check -> timing closure -> torch baseline, as the tuner's worker runs them."""
    from tunelab.timing import time_callable
    from tunelab.tuning.families.similarity import SearchProblem, SimilarityFamily

    fam = SimilarityFamily()
    prob = SearchProblem(100, 20_000, 256, 10, "fp16", "ip")
    inputs = fam.make_inputs(prob, 0)
    cfg = fam.default_config(prob)
    cand = fam.compile(cfg, prob, _sim()._arch(0))
    rep = fam.check(cfg, cand, inputs)
    assert rep.ok, rep.reason
    us = time_callable(fam.timing_closure(cfg, cand, inputs), warmup=3, samples=5)
    assert us.min() > 0
    base = fam.baselines(prob)["torch_topk"](inputs)
    assert time_callable(base, warmup=2, samples=3).min() > 0


def test_gram_family_gates_on_gpu():
    from tunelab.tuning.families.gram import GramFamily, GramProblem

    fam = GramFamily()
    prob = GramProblem(500, 64, "complex64", symmetric=True)
    inputs = fam.make_inputs(prob, 0)
    cfg = fam.default_config(prob)
    cand = fam.compile(cfg, prob, _sim()._arch(0))
    rep = fam.check(cfg, cand, inputs)
    assert rep.ok, rep.reason
