"""Similarity family on the CPU: spaces and gates, launcher formulas and packing, compiled samples for sm_80 and
sm_90, chunk planning under forced small budgets, input errors, the CLI hook, and the real kernels on the CPU
emulator (tests/similarity_emulator)."""
from __future__ import annotations

import itertools
import random
import shutil
import struct
import sys
from pathlib import Path

import pytest

from tunelab import _core
from tunelab.errors import ConfigError, InputError

S = _core.similarity
HERE = Path(__file__).resolve().parent


def _sim():
    import tunelab.ops.similarity as sim

    return sim


#: A valid mma.sync search config; tests state only what they change (a new tunable is one edit here).
_BASE_CFG = dict(BLOCK_N=128, BLOCK_Q=64, BLOCK_K=64, WARPS_N=4, WARPS_Q=2, STAGES=3, VEC=16, MERGE=0, EPI_ROWS=128,
                 MIN_BLOCKS=1, MMA=0)


def _cfg(**over):
    return {**_BASE_CFG, **over}


# ------------------------------------------------------------------------------------------------ spaces & gates
def test_search_space_default_is_valid_and_gated():
    from tunelab.tuning.families.similarity import SimilarityFamily, SearchProblem

    fam = SimilarityFamily()
    for prob in (SearchProblem(100, 50000, 768, 10, "fp16"), SearchProblem(1, 10_000_000, 768, 10, "fp16"),
                 SearchProblem(1024, 10_000_000, 768, 10, "fp16"), SearchProblem(100, 50000, 768, 10, "fp32", "l2"),
                 SearchProblem(37, 9000, 100, 256, "bf16", "cosine"), SearchProblem(1, 50000, 768, 10, "fp16")):
        space = fam.space(prob)
        cfg = fam.default_config(prob)
        ok, why = space.check(cfg)
        assert ok, (prob, cfg, why)
        assert fam.static_gates(space.complete(cfg), prob, arch="sm_90") == [], (prob, cfg)
        assert sum(1 for _ in itertools.islice(space.enumerate(), 101)) > 100


def test_search_space_constraints_name_their_rule():
    from tunelab.tuning.families.similarity import SimilarityFamily, SearchProblem

    fam = SimilarityFamily()
    space = fam.space(SearchProblem(100, 50000, 768, 10, "fp16"))
    base = _cfg()
    assert space.check(base)[0]
    rej = space.rejection(dict(base, WARPS_N=8, BLOCK_N=64))
    assert rej.code == "static.divisibility" and "WARPS_N" in rej.detail
    rej = space.rejection(dict(base, BLOCK_Q=8, WARPS_Q=2))
    assert rej.code == "static.divisibility"
    rej = space.rejection(dict(base, BLOCK_N=256, WARPS_N=1, WARPS_Q=2, BLOCK_Q=64))  # 16 x 4 x 4 = 256 accumulators
    assert rej is not None and "accumulators" in rej.detail
    rej = space.rejection(dict(base, BLOCK_Q=128))  # 128 > nq rounded up to 16
    assert rej.code == "static.choice"


def test_search_static_gates_smem_and_vec():
    from tunelab.tuning.families.similarity import SimilarityFamily, SearchProblem

    fam = SimilarityFamily()
    big_k = SearchProblem(100, 50000, 768, 1024, "fp16")
    cfg = _cfg(MERGE=1)
    rej = fam.static_gates(cfg, big_k, arch="sm_90")
    assert rej and rej[0].code == "static.smem"
    odd_d = SearchProblem(10, 1000, 100, 10, "fp16")  # 200-byte rows: 8-byte copies at most
    rej = fam.static_gates(dict(cfg, BLOCK_Q=16), odd_d, arch="sm_90")
    assert [r.code for r in rej] == ["static.problem"]
    assert fam.static_gates(dict(cfg, BLOCK_Q=16, VEC=8), odd_d, arch="sm_90") == []
    # MMA=2 reads rows by TMA: 200-byte rows are rejected before compiling, and the default avoids MMA=2 there
    tma = dict(cfg, BLOCK_Q=16, VEC=16, MMA=2, BLOCK_K=64, WARPS_N=8, WARPS_Q=1)
    rej = fam.static_gates(tma, odd_d, arch="sm_90")
    assert [r.code for r in rej] == ["static.problem"] and "TMA" in rej[0].detail
    # ... and MMA=2 lists VEC=16 only (TMA does the copies: other widths would compile the same kernel)
    assert fam.space(odd_d).rejection(dict(tma, VEC=8)).detail.startswith("vec_changes_code")
    sim = _sim()
    # TMA-fed defaults: ping-pong (MMA=3) where thread lists hold k, else MMA=2; 192-row tiles up to 72 queries
    assert sim.default_config(100, 10, "float16", 768, arch="sm_90")["MMA"] == 3
    assert sim.default_config(100, 64, "float16", 768, arch="sm_90")["MMA"] == 2
    assert sim.default_config(64, 10, "float16", 768, arch="sm_90")["BLOCK_N"] == 192
    assert sim.default_config(72, 10, "float16", 768, arch="sm_90")["BLOCK_N"] == 192
    assert sim.default_config(80, 10, "float16", 768, arch="sm_90")["BLOCK_N"] == 128
    assert sim.default_config(100, 10, "float16", 768, arch="sm_90")["BLOCK_N"] == 128
    for nq in (9, 64, 96, 100, 112, 1024):
        cfg_pp = sim.default_config(nq, 10, "float16", 768, arch="sm_90")
        assert cfg_pp["MMA"] == 3 and sim.accumulators(cfg_pp) <= sim.max_accumulators(cfg_pp), cfg_pp
    # 192-row ping-pong tiles have their own, lower bound (96 queries: 144 accumulators spill), 128-row ones not
    pp96 = sim.default_config(96, 10, "float16", 768, arch="sm_90")
    assert sim.max_accumulators(dict(pp96, BLOCK_N=192)) < sim.accumulators(dict(pp96, BLOCK_N=192))
    assert sim.max_accumulators(pp96) == sim.MAX_ACCUMULATORS_PINGPONG >= sim.accumulators(pp96)
    for nq, k in ((100, 10), (100, 64), (1024, 10), (64, 10)):  # each fits its smem and registers without TMA
        cfg100 = sim.default_config(nq, k, "float16", 100, arch="sm_90")
        assert cfg100["MMA"] == 1 and cfg100["STAGES"] >= 3, cfg100
        assert S.topk_smem_bytes(cfg100, 0, 2, k) <= sim.smem_limit("sm_90"), cfg100
        assert cfg100["MERGE"] < 3 or sim.accumulators(cfg100) + 32 <= 128, cfg100
    # sm_80's 163 KiB rejects what sm_90's 227 KiB accepts
    p = SearchProblem(100, 50000, 768, 10, "fp16")
    wide = _cfg(BLOCK_N=256, BLOCK_Q=112, MERGE=2)
    assert fam.static_gates(wide, p, arch="sm_90") == []
    assert fam.static_gates(wide, p, arch="sm_80")[0].code == "static.smem"


def test_smem_formula_python_matches_launcher_over_the_space():
    from tunelab.tuning.families.similarity import SearchProblem, build_space, smem_bytes_py

    # random valid configs of each main loop (the space has millions of points: enumerating it takes minutes)
    rng = random.Random(0)
    for dtype, code, eb in (("fp16", 0, 2), ("fp32", 2, 4)):
        for metric, mcode in (("ip", 0), ("l2", 2)):
            space = build_space(SearchProblem(100, 50000, 768, 16, dtype, metric))
            mma_at = space.names.index("MMA")
            for mma in ((0, 1, 2, 3) if dtype == "fp16" else (0, 4)):
                found = 0
                for _ in range(200_000):
                    idx = [rng.randrange(len(p.choices)) for p in space.params]
                    idx[mma_at] = space.params[mma_at].index(mma)
                    cfg = space.from_indices(idx)
                    if not space.check(cfg)[0]:
                        continue
                    assert smem_bytes_py(cfg, eb, 16, metric) == S.topk_smem_bytes(cfg, code, mcode, 16), cfg
                    found += 1
                    if found == 60:
                        break
                assert found == 60, (dtype, metric, mma, found)


def test_gram_space_and_gates():
    from tunelab.tuning.families.gram import GramFamily, GramProblem, smem_bytes_py

    fam = GramFamily()
    for prob in (GramProblem(8192, 256, "complex64"), GramProblem(2000, 256, "fp16", symmetric=False),
                 GramProblem(20000, 256, "fp32", symmetric=True, mirror=True)):
        space = fam.space(prob)
        cfg = fam.default_config(prob)
        assert space.check(cfg)[0], (prob, cfg, space.check(cfg))
        assert fam.static_gates(cfg, prob, arch="sm_90") == []
        code = {"fp16": 0, "bf16": 1, "fp32": 2, "complex64": 3}[prob.dtype]
        for c in list(space.enumerate())[::17]:
            assert smem_bytes_py(c, prob.scalar_bytes) == S.gram_smem_bytes(c, code)
    sym = fam.space(GramProblem(8192, 256, "complex64"))
    rej = sym.rejection(dict(TILE_M=64, TILE_N=32, TILE_K=32, WARPS_M=2, WARPS_N=2, STAGES=3, VEC=16))
    assert rej is not None and "TILE_M == TILE_N" in rej.detail


def test_cached_launches_become_one_graph_at_their_second_use_outside_a_capture(monkeypatch):
    """``_Launches``: made one by one until GRAPH_AFTER uses, then recorded into one LaunchGraph and replayed; the
    use that would record on a stream being captured does not (the next one outside the capture does); once a
    recording fails, none is tried again in the process (one warning) and the launches go on one by one; a poisoned
    context is raised, not swallowed."""
    import types

    from tunelab.errors import PoisonedContextError

    sim = _sim()
    made, capturing, fail, replays = [], set(), [], []

    class FakeGraph:
        def __init__(self, launches):
            if fail:
                raise fail[0]
            made.append(tuple(launches))
            self.launches = launches

        def __call__(self, stream):
            replays.append(stream)
            for launch in self.launches:
                launch(stream)

    monkeypatch.setattr(sim, "_core", types.SimpleNamespace(stream_is_capturing=lambda s: s in capturing,
                                                            LaunchGraph=FakeGraph))
    monkeypatch.setattr(sim, "_GRAPHS_FAILED", [])
    log = []
    launches = (lambda s: log.append(("search", s)), lambda s: log.append(("select", s)))
    entry = sim._Launches(launches)
    capturing.add(9)
    for _ in range(sim.GRAPH_AFTER + 1):
        entry(9)  # inside a capture: never recorded
    assert entry.graph is None and entry.uses == sim.GRAPH_AFTER - 1 and not made
    entry(7)
    assert entry.graph is not None and made == [launches] and replays == []
    entry(7)
    entry(9)  # a recorded graph on a stream being captured: the fake, as the core's, launches one by one
    assert replays == [7, 9] and log[-4:] == [("search", 7), ("select", 7), ("search", 9), ("select", 9)]
    fail.append(RuntimeError("no graphs on this driver"))
    other = sim._Launches(launches)
    with pytest.warns(UserWarning, match="no graphs on this driver"):
        for _ in range(sim.GRAPH_AFTER):
            other(7)
    third = sim._Launches(launches)
    for _ in range(sim.GRAPH_AFTER + 2):
        third(7)  # no other recording tried, no other warning
    assert other.graph is None and third.graph is None and len(log) == 2 * (6 + 3 * sim.GRAPH_AFTER)
    sim._GRAPHS_FAILED.clear()
    fail[0] = PoisonedContextError("an illegal address", "cuGraphInstantiateWithFlags", 700)
    poisoned = sim._Launches(launches)
    with pytest.raises(PoisonedContextError):
        for _ in range(sim.GRAPH_AFTER):
            poisoned(7)


def test_resolved_config_fits_each_k_of_a_bucket(tmp_path, monkeypatch):
    """The op's config cache keys on the exact k and nq the config was fitted to: k=600 and k=1024 share a store
    bucket, but a config fitted to 600 does not fit 1024 (it used to be reused, failing at launch)."""
    from tunelab.ops import dispatch

    sim = _sim()
    monkeypatch.setenv("TUNELAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(dispatch, "device_name", lambda index: "NVIDIA H200")
    monkeypatch.setattr(sim, "_arch", lambda dev: "sm_90")
    sim.clear_caches()
    try:
        for k in (600, 1024):
            cfg, source = sim.resolve_config(0, nq=8, n=100_000, d=768, k=k, dtype="float16", metric="l2")
            assert source == "default"
            assert S.topk_smem_bytes(cfg, 0, 2, k) <= sim.smem_limit("sm_90"), (k, cfg)
        a, _ = sim.resolve_config(0, nq=33, n=1000, d=768, k=10, dtype="float16", metric="ip")
        b, _ = sim.resolve_config(0, nq=64, n=1000, d=768, k=10, dtype="float16", metric="ip")
        assert a["BLOCK_Q"] == 40 and b["BLOCK_Q"] == 64  # one query tile each (nq rounded up to 8 on sm_90)
    finally:
        sim.clear_caches()


def test_launcher_validation_errors_name_values():
    cfg = _cfg()
    with pytest.raises(ConfigError, match="BLOCK_N=96"):
        S.topk_validate(dict(cfg, BLOCK_N=96), 0, 0)
    S.topk_validate(cfg, 2, 0)  # fp32: 256-byte slices are fine ...
    with pytest.raises(ConfigError, match="BLOCK_K=128 x 4 bytes"):
        S.topk_validate(dict(cfg, BLOCK_K=128), 2, 0)  # ... 512 are not
    with pytest.raises(ConfigError, match="unknown parameter 'TILE'"):
        S.topk_validate(dict(cfg, TILE=1), 0, 0)
    with pytest.raises(ConfigError, match="missing parameter 'MERGE'"):
        S.topk_validate({k: v for k, v in cfg.items() if k != "MERGE"}, 0, 0)
    with pytest.raises(ConfigError, match="metric code 7"):
        S.topk_validate(cfg, 0, 7)
    g = dict(TILE_M=64, TILE_N=32, TILE_K=32, WARPS_M=2, WARPS_N=2, STAGES=3, VEC=16)
    with pytest.raises(ConfigError, match="TILE_M == TILE_N"):
        S.gram_validate(g, 3, True)
    S.gram_validate(g, 3, False)


def test_wgmma_rules_in_launcher_space_and_gates():
    """MMA=1 (wgmma) configs: the launcher names the broken rule, the space rejects the same configs with a reason,
    the static gate keeps them off GPUs without wgmma, and configs saved before MMA existed mean MMA=0."""
    from tunelab.tuning.families.similarity import SearchProblem, SimilarityFamily

    wg = dict(BLOCK_N=256, BLOCK_Q=112, BLOCK_K=64, WARPS_N=8, WARPS_Q=1, STAGES=3, VEC=16, MERGE=2, EPI_ROWS=128,
              MIN_BLOCKS=1, MMA=1)
    S.topk_validate(wg, 0, 0)
    S.topk_validate(wg, 1, 2)
    for bad, match in ((dict(wg), "fp32"), (dict(wg, BLOCK_K=32), "128-byte row slices"),
                       (dict(wg, WARPS_N=4, WARPS_Q=2), "WARPS_Q=1"), (dict(wg, WARPS_N=2, WARPS_Q=1), "WARPS_N 4 or 8"),
                       (dict(wg, STAGES=2), "STAGES >= 3")):
        with pytest.raises(ConfigError, match=match):
            S.topk_validate(bad, 2 if match == "fp32" else 0, 0)
    fam = SimilarityFamily()
    prob = SearchProblem(100, 50000, 768, 10, "fp16")
    space = fam.space(prob)
    assert space.check(wg)[0]
    rej = space.rejection(dict(wg, STAGES=2))
    assert rej is not None and rej.code == "static.divisibility" and "MMA=1" in rej.detail
    rej = space.rejection(dict(wg, BLOCK_K=32))
    assert rej is not None and "128-byte row slices" in rej.detail
    n_wg = sum(1 for c in space.enumerate() if c["MMA"] == 1)
    assert 0 < n_wg < space.count_valid() // 2
    fp32 = fam.space(SearchProblem(100, 50000, 768, 10, "fp32"))
    assert {c["MMA"] for c in fp32.enumerate()} == {0, 4}
    assert fam.static_gates(wg, prob, arch="sm_90") == []
    small = dict(wg, BLOCK_N=128, BLOCK_Q=64)  # fits sm_80's shared memory
    assert [r.code for r in fam.static_gates(small, prob, arch="sm_80")] == ["static.arch"]
    sim = _sim()
    with pytest.raises(ConfigError, match="needs an sm_90"):
        sim.compile_search(wg, dtype="float16", arch="sm_80")
    assert sim.compile_arch(wg, "sm_90") == "sm_90a" and sim.compile_arch(dict(wg, MMA=0), "sm_80") == "sm_80"
    # MMA=2 (TMA producer): any STAGES from 2, MIN_BLOCKS = 1 (setmaxnreg), one launch warpgroup more
    tma = dict(wg, MMA=2, STAGES=2)
    assert space.check(tma)[0] and sim.compile_arch(tma, "sm_90") == "sm_90a"
    assert S.topk_threads(tma) == S.topk_threads(wg) + 128
    assert S.topk_static_smem_bytes(tma, 0, 0) == S.topk_static_smem_bytes(dict(tma, MMA=0), 0, 0) + 32
    rej = space.rejection(dict(tma, MIN_BLOCKS=2))
    assert rej is not None and "MIN_BLOCKS=1" in rej.detail
    assert [r.code for r in fam.static_gates(dict(small, MMA=2), prob, arch="sm_80")] == ["static.arch"]
    legacy = {k: v for k, v in wg.items() if k not in ("MMA", "CLUSTER", "PREFETCH")}
    assert sim.canonical_config(legacy)["MMA"] == 0
    # MMA=3 (ping-pong warpgroups): two MMA warpgroups with thread lists; each owns whole tiles, so its accumulators
    # cover all BLOCK_N rows, and it has its own score tile (ip: no norms) and list parts
    pp = dict(wg, MMA=3, BLOCK_N=128, MERGE=3, STAGES=4, EPI_ROWS=64)
    assert space.check(pp)[0] and sim.compile_arch(pp, "sm_90") == "sm_90a"
    assert S.topk_threads(pp) == S.topk_threads(wg) + 128
    assert sim.accumulators(pp) == 2 * sim.accumulators(dict(pp, MMA=2)) == 2 * 14 * 4
    coop = dict(pp, MMA=2)
    # a second score tile (112 x (64 + 4) floats), the two order mbarriers, and a second group's part bars (1 part
    # per column and group against 2 for the cooperative block's 256 threads: the same count)
    assert S.topk_static_smem_bytes(pp, 0, 0) == S.topk_static_smem_bytes(coop, 0, 0) + 112 * 68 * 4 + 16
    assert S.topk_smem_bytes(pp, 0, 0, 10) - S.topk_static_smem_bytes(pp, 0, 0) == 112 * 10 * 8
    for bad, match in ((dict(pp, WARPS_N=4), "MMA=3 .*WARPS_N=8"), (dict(pp, MERGE=2), "MMA=3 .*MERGE 3 or 4"),
                       (dict(pp, MIN_BLOCKS=2), "MIN_BLOCKS=1")):
        with pytest.raises(ConfigError, match=match):
            S.topk_validate(bad, 0, 0)
        rej = space.rejection(bad)
        assert rej is not None and "MMA=3" in rej.detail, (bad, rej)
    # 256-row tiles of 112 queries: 224 accumulators per thread, rejected before compiling
    rej = space.rejection(dict(pp, BLOCK_N=256))
    assert rej is not None and "accumulators" in rej.detail
    # fit_config keeps the wgmma rules while shrinking (k = 256 needs 458 KiB of lists at 112 queries)
    fitted = sim.fit_config(wg, 256, "float16", sim.smem_limit("sm_90"))
    assert fitted["MMA"] == 1 and fitted["STAGES"] >= 3 and fitted["WARPS_Q"] == 1, fitted
    S.topk_validate(fitted, 0, 2)
    assert S.topk_smem_bytes(fitted, 0, 2, 256) <= sim.smem_limit("sm_90")


def test_fma_main_loop_rules_space_and_compile():
    """MMA=4 (fp32 products by FFMA): fp32 only, one n8 query tile per warp, the launcher names both rules and the
    space rejects the same configs; it offers MMA 0 and 4 for fp32 and never 4 for 16-bit inputs; its partial sums
    count as accumulators; it compiles for sm_80 and sm_90 without spills, is no wgmma config (no sm_90a), and lays
    out shared memory as MMA=0."""
    from tunelab.tuning.families.similarity import SearchProblem, SimilarityFamily

    sim = _sim()
    fma = dict(BLOCK_N=256, BLOCK_Q=8, BLOCK_K=64, WARPS_N=8, WARPS_Q=1, STAGES=3, VEC=16, MERGE=2, EPI_ROWS=128,
               MIN_BLOCKS=1, MMA=4)
    S.topk_validate(fma, 2, 0)
    S.topk_validate(dict(fma, BLOCK_Q=16, WARPS_Q=2, WARPS_N=4), 2, 1)
    for bad, dt, match in ((fma, 0, "MMA=4 .*fp32 inputs; fp16"), (fma, 1, "fp32 inputs; bf16"),
                           (dict(fma, BLOCK_Q=16), 2, "BLOCK_Q = 8 \\* WARPS_Q; got BLOCK_Q=16, WARPS_Q=1 "
                                                      "\\(use BLOCK_Q=8")):
        with pytest.raises(ConfigError, match=match):
            S.topk_validate(bad, dt, 0)
    assert sim.uses_fma(fma) and not sim.uses_wgmma(fma) and not sim.uses_tma(fma)
    assert sim.compile_arch(fma, "sm_90") == "sm_90" and sim.compile_arch(fma, "sm_80") == "sm_80"
    for mma in (0, 1, 2, 3):
        assert sim.uses_wgmma(dict(fma, MMA=mma)) == (mma > 0) and not sim.uses_fma(dict(fma, MMA=mma))
    # a warp's 2 m16 blocks: 2 x 4 accumulators and 2 x 16 partial sums (rows g, g + 8 x 8 query columns)
    assert sim.accumulators(fma) == 40 and sim.accumulators(dict(fma, MMA=0)) == 8
    assert S.topk_smem_bytes(fma, 2, 2, 10) == S.topk_smem_bytes(dict(fma, MMA=0), 2, 2, 10)
    assert S.topk_threads(fma) == S.topk_threads(dict(fma, MMA=0))
    fam = SimilarityFamily()
    fp32 = fam.space(SearchProblem(4, 1_000_000, 768, 10, "fp32"))
    assert fp32.check(fma)[0]
    rej = fp32.rejection(dict(fma, BLOCK_Q=16))
    assert rej is not None and rej.code == "static.divisibility" and "MMA=4" in rej.detail
    # one warp with 16 m16 blocks: 320 accumulator registers, rejected before compiling
    rej = fp32.rejection(dict(fma, WARPS_N=1, WARPS_Q=2, BLOCK_Q=16))
    assert rej is not None and "accumulators" in rej.detail
    # no wgmma: the arch gate passes it on sm_80 (128-row tiles: the 256-row ones take more shared memory than sm_80's)
    assert fam.static_gates(dict(fma, BLOCK_N=128), SearchProblem(4, 1_000_000, 768, 10, "fp32"), arch="sm_80") == []
    fp16 = fam.space(SearchProblem(4, 1_000_000, 768, 10, "fp16"))
    assert 4 not in fp16.params[fp16.names.index("MMA")].choices
    # the default rule: fp32 with at most FMA_MAX_NQ queries on sm_90, whatever N (streamed searches pass none)
    for nq in range(1, 10):
        for n in (1000, 50_000, 10_000_000, None):
            want = 4 if nq <= sim.FMA_MAX_NQ else 0
            assert sim.default_config(nq, 10, "float32", 768, arch="sm_90", n=n)["MMA"] == want, (nq, n)
            assert sim.default_config(nq, 10, "float32", 768, arch="sm_80", n=n)["MMA"] == 0, (nq, n)
            assert sim.default_config(nq, 10, "float16", 768, arch="sm_90", n=n)["MMA"] != 4, (nq, n)
    for arch in ("sm_90", "sm_80"):
        for cfg, metric in ((fma, "ip"), (dict(fma, BLOCK_N=128, BLOCK_Q=16, WARPS_N=4, WARPS_Q=2, MERGE=5), "l2"),
                            (dict(fma, BLOCK_N=128, BLOCK_K=32, WARPS_N=4, STAGES=2, MERGE=3, EPI_ROWS=64), "cosine")):
            r = sim.compile_search(cfg, dtype="float32", metric=metric, arch=arch).resources
            assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0 and r.stack_bytes == 0, (arch, cfg, r)


def test_filter_warps_rules_layout_and_fallback():
    """MERGE=7 (the filtered search's keys filtered by the TMA producer's spare warps): only with the TMA producer
    (MMA 2, 3), named in the launcher's error and the space's rejection; one score tile for the block with the filter
    warps' words, mbarriers and held keys in the launcher's and Python's shared-memory formulas alike; in the space
    for 16-bit inputs only; moved to the cp.async loop (rows TMA cannot read) it becomes MERGE=6; the 50K / 100
    config compiles for sm_90 without spills, for every metric."""
    from tunelab.tuning.families.similarity import SearchProblem, merge_choices, smem_bytes_py

    sim = _sim()
    dense = sim.default_config(100, 10, "float16", 768, arch="sm_90", n=65536)
    fw = dict(dense, MERGE=sim.MERGE_FILTER_WARPS)
    assert dense["MMA"] == 3
    S.topk_validate(fw, 0, 0)  # (raises on a config it refuses)
    for bad in (dict(fw, MMA=0, STAGES=3), dict(fw, MMA=1)):
        with pytest.raises(ConfigError, match="MERGE=7 .*MMA 2 or 3"):
            S.topk_validate(bad, 0, 0)
    ring = dense["STAGES"] * (dense["BLOCK_N"] + dense["BLOCK_Q"]) * 128
    tile = dense["BLOCK_Q"] * (dense["BLOCK_N"] + 4) * 4 + dense["BLOCK_Q"] * 16 + 32 + dense["BLOCK_Q"] * 33 * 8
    ring_bars = 16 * dense["STAGES"] + 16  # full[] and empty[] of the ring, ping-pong's order[2]
    assert S.topk_static_smem_bytes(fw, 0, 0) == ring + tile + ring_bars
    for metric, code in (("ip", 0), ("l2", 2)):
        assert smem_bytes_py(fw, 2, 10, metric) == S.topk_smem_bytes(fw, 0, code, 10)
    assert sim.MERGE_FILTER_WARPS in merge_choices(SearchProblem(100, 50000, 768, 10, "fp16"))
    assert sim.MERGE_FILTER_WARPS not in merge_choices(SearchProblem(100, 50000, 768, 10, "fp32"))
    moved = sim.without_tma(fw, 10, "float16", "ip", sim.smem_limit("sm_90"))
    assert moved["MMA"] == 1 and moved["MERGE"] == sim.MERGE_FILTERED, moved
    S.topk_validate(moved, 0, 0)
    for metric in ("ip", "cosine", "l2"):
        res = sim.compile_search(fw, dtype="float16", metric=metric, arch="sm_90", use_cache=False).resources
        assert res.spill_store_bytes == 0 and res.stack_bytes == 0, (metric, res)


def test_cluster_and_prefetch_rules_layout_and_plan():
    """CLUSTER (thread-block clusters sharing query slices by TMA multicast) and PREFETCH (L2 prefetch of later
    tiles): only with the TMA producer (MMA 2, 3), named in the launcher's error; neither is in the tuner's space
    (measured no faster); a cluster's stage holds BLOCK_Q rounded up to 8 rows per block; splits come in whole
    clusters, also under a cap; configs written before either existed mean CLUSTER=1, PREFETCH=0; the kernels
    compile for sm_90 without spills."""
    from tunelab.tuning.families.similarity import SearchProblem, SimilarityFamily, smem_bytes_py

    sim = _sim()
    pp = dict(BLOCK_N=128, BLOCK_Q=104, BLOCK_K=64, WARPS_N=8, WARPS_Q=1, STAGES=4, VEC=16, MERGE=3, EPI_ROWS=64,
              MIN_BLOCKS=1, MMA=3, CLUSTER=2, PREFETCH=0)
    S.topk_validate(pp, 0, 2)
    space = SimilarityFamily().space(SearchProblem(100, 50000, 768, 10, "fp16"))
    assert "CLUSTER" not in space.names and "PREFETCH" not in space.names
    for bad in (dict(pp, MMA=1, MERGE=2, STAGES=3), dict(pp, MMA=0, MERGE=2, BLOCK_N=256)):
        with pytest.raises(ConfigError, match="CLUSTER=2 .*MMA 2 or 3"):
            S.topk_validate(bad, 0, 0)
    with pytest.raises(ConfigError, match="CLUSTER=3 is not accepted"):
        S.topk_validate(dict(pp, CLUSTER=3), 0, 0)
    pf = dict(pp, CLUSTER=1, PREFETCH=1)
    assert S.topk_static_smem_bytes(pf, 0, 0) == S.topk_static_smem_bytes(dict(pf, PREFETCH=0), 0, 0)
    with pytest.raises(ConfigError, match="PREFETCH=1 .*MMA 2 or 3"):
        S.topk_validate(dict(pf, MMA=1, MERGE=2, STAGES=3), 0, 0)
    assert S.topk_name_expression(pf, 0, 0).endswith(", 3, 1, 1>>")
    assert [S.topk_query_rows(bq, c) for bq, c in ((104, 1), (104, 2), (40, 4), (128, 2), (8, 2))] == [104, 112, 64,
                                                                                                       128, 16]
    one = dict(pp, CLUSTER=1)
    for c, rows in ((2, 112), (4, 128)):
        cfg = dict(pp, CLUSTER=c)
        extra = 4 * (rows - 104) * 128  # STAGES x padding rows x 128-byte slices
        assert S.topk_static_smem_bytes(cfg, 0, 1) == S.topk_static_smem_bytes(one, 0, 1) + extra
        assert smem_bytes_py(cfg, 2, 10, "cosine") == S.topk_smem_bytes(cfg, 0, 1, 10)
        assert S.topk_name_expression(cfg, 0, 1).endswith(f", 3, {c}, 0>>")
    legacy = {k: v for k, v in one.items() if k not in ("CLUSTER", "PREFETCH")}
    assert S.topk_static_smem_bytes(legacy, 0, 0) == S.topk_static_smem_bytes(one, 0, 0)
    assert sim.canonical_config(legacy)["CLUSTER"] == 1 and sim.canonical_config(legacy)["PREFETCH"] == 0
    # leaving the TMA producer drops the cluster and the prefetch
    moved = sim.without_tma(dict(pp, PREFETCH=2), 10, "float16", "l2", sim.smem_limit("sm_90"))
    assert moved["CLUSTER"] == 1 and moved["PREFETCH"] == 0, moved
    # splits in whole clusters: 27 tiles of 192 rows over clusters of 4 leave whole empty splits at the end
    c4 = dict(pp, CLUSTER=4, BLOCK_N=192, BLOCK_Q=40)
    for cfg, n, target, cap in ((pp, 10_000_000, 132, 0), (pp, 10_000_000, 132, 7), (c4, 5003, 132, 0),
                                (pp, 1000, 132, 0), (c4, 100, 132, 0)):
        p = S.topk_plan(cfg, 100, n, target, cap)
        cl = cfg["CLUSTER"]
        assert p["splits"] % cl == 0 and p["splits"] * p["tiles_per_split"] >= p["num_tiles"], (cfg, n, p)
        assert p["splits"] - cl < -(-p["num_tiles"] // p["tiles_per_split"]), (cfg, n, p)  # at most one short cluster
        if cap:
            assert p["splits"] <= cap, p
    assert S.topk_plan(c4, 100, 5003, 132, 0)["splits"] == 16
    for cfg, metric in ((pp, "l2"), (dict(pp, MMA=2, CLUSTER=4, BLOCK_Q=64, STAGES=3, PREFETCH=2), "cosine"),
                        (pf, "ip")):
        r = sim.compile_search(cfg, dtype="float16", metric=metric, arch="sm_90").resources
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, (cfg, r)


def test_wgmma_configs_compile_unserialized_without_spills():
    """ptxas reports wgmma serialization (C75xx 'Potential Performance Loss') in the compile log: the main loop must
    not trigger it, for both dtypes, every metric and one or two warpgroups; nor spill."""
    sim = _sim()
    for cfg, dt, metric in (
            (dict(BLOCK_N=256, BLOCK_Q=112, BLOCK_K=64, WARPS_N=8, WARPS_Q=1, STAGES=3, VEC=16, MERGE=2, EPI_ROWS=128,
                  MIN_BLOCKS=1, MMA=1), "float16", "ip"),
            (dict(BLOCK_N=128, BLOCK_Q=128, BLOCK_K=64, WARPS_N=8, WARPS_Q=1, STAGES=4, VEC=16, MERGE=2, EPI_ROWS=128,
                  MIN_BLOCKS=1, MMA=1), "bfloat16", "cosine"),
            (dict(BLOCK_N=128, BLOCK_Q=64, BLOCK_K=64, WARPS_N=4, WARPS_Q=1, STAGES=3, VEC=16, MERGE=0, EPI_ROWS=64,
                  MIN_BLOCKS=1, MMA=1), "float16", "l2"),
            # MMA=2: 256-row tiles with thread lists need the producer's registers (112 accumulators + the lists)
            (dict(BLOCK_N=256, BLOCK_Q=112, BLOCK_K=64, WARPS_N=8, WARPS_Q=1, STAGES=4, VEC=16, MERGE=3, EPI_ROWS=64,
                  MIN_BLOCKS=1, MMA=2), "float16", "ip"),
            (dict(BLOCK_N=256, BLOCK_Q=128, BLOCK_K=64, WARPS_N=8, WARPS_Q=1, STAGES=3, VEC=16, MERGE=3, EPI_ROWS=128,
                  MIN_BLOCKS=1, MMA=2), "bfloat16", "l2"),
            (dict(BLOCK_N=128, BLOCK_Q=64, BLOCK_K=64, WARPS_N=4, WARPS_Q=1, STAGES=2, VEC=16, MERGE=2, EPI_ROWS=64,
                  MIN_BLOCKS=1, MMA=2), "float16", "cosine")):
        cs = sim.compile_search(cfg, dtype=dt, metric=metric, arch="sm_90", use_cache=False)
        r = cs.resources
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, (cfg, r)
        assert "Performance Loss" not in cs.result.log, cs.result.log[-2000:]


def test_wgmma_header_is_generated():
    """csrc/kernels/common/wgmma_ops.cuh is what scripts/gen_wgmma.py writes."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, str(root / "scripts" / "gen_wgmma.py"), "--check"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


def test_kernel_layout_matches_launcher_formula():
    """TUNELAB_EXPECTED_SMEM makes the kernel static_assert its layout against the launcher's number."""
    from tunelab.paths import kernels_dir

    cfg = _cfg(BLOCK_Q=32)
    expr = S.topk_name_expression(cfg, 0, 1)
    wrong = int(S.topk_static_smem_bytes(cfg, 0, 1)) + 16
    from tunelab.errors import CompileError

    with pytest.raises(CompileError, match="smem formula"):
        _core.compile('#include "similarity/topk.cuh"\n', [expr], "sm_90", [], {"TUNELAB_EXPECTED_SMEM": str(wrong)},
                      {}, [str(kernels_dir())], 0, False)


def test_plan_splits_are_balanced_and_capped():
    cfg = _cfg(BLOCK_N=256, BLOCK_Q=112, MERGE=2)
    p = S.topk_plan(cfg, 100, 50000, 132, 0)
    assert p["q_tiles"] == 1 and p["num_tiles"] == 196
    assert p["splits"] * p["tiles_per_split"] >= 196 > (p["splits"] - 1) * p["tiles_per_split"]
    assert p["splits"] <= 132
    # many query tiles: whole waves, never a nearly empty last one (8 x 17 = 136 blocks on 132 SMs took 2x)
    for nq, bq in ((1000, 112), (1024, 128), (300, 112)):
        p = S.topk_plan(dict(cfg, BLOCK_Q=bq), nq, 10_000_000, 132, 0)
        blocks = p["q_tiles"] * p["splits"]
        waves = -(-blocks // 132)
        assert blocks / (waves * 132) >= 0.9, (nq, p)
        one_wave = 132 // p["q_tiles"]
        assert waves * p["tiles_per_split"] <= -(-p["num_tiles"] // one_wave), (nq, p)
    assert S.topk_plan(dict(cfg, BLOCK_Q=128), 1024, 10_000_000, 132, 0)["splits"] == 33  # 264 blocks: 2 waves
    assert S.topk_plan(cfg, 100, 1000, 132, 0)["splits"] == 4  # never more splits than tiles
    assert S.topk_plan(cfg, 100, 10_000_000, 132, 7)["splits"] == 7  # workspace cap
    with pytest.raises(InputError, match="2\\^31"):
        S.topk_plan(cfg, 1, 2 ** 31, 132, 0)


def test_merge_kind_rule():
    """The search's sorted lists take the sorted-list merge up to k = 32; a dense score matrix never does."""
    assert S.merge_kind(10, 131 * 10, True) == 4
    assert S.merge_kind(32, 4 * 32, True) == 4
    assert S.merge_kind(33, 131 * 33, True) == 2  # past the sorted merge's 32: shared lists
    assert S.merge_kind(10, 50_000, False) == 0 and S.merge_kind(20, 50_000, False) == 1
    assert S.merge_kind(10, 1310, False) == 2 and S.merge_kind(300, 1310, False) == 3
    assert S.merge_threads(4) == 32
    # from params.cuh, through the binding
    assert _sim().MERGE_KINDS == (0, 1, 2, 3, 4, 5, 6) and _sim().MERGE_SORTED == 4 and _sim().MERGE_SELECT == 5
    assert _sim().MERGE_FILTER_SELECT == 6 and S.merge_threads(6) == 32
    assert S.merge_smem_bytes(6, 32) == 12 * 1024 * 8 + 32 * 8 * 4 + 16  # kept entries, a round's counts, |q|^2
    assert S.merge_name_expression(1, 0, 6) == "tunelab::sim::similarity_select_filtered<1, 0>"
    assert S.merge_smem_bytes(4, 10) == S.merge_smem_bytes(4, 32) == 64 * 8 + 256 * 4 + 16
    assert S.merge_name_expression(0, 2, 4) == "tunelab::sim::similarity_merge_sorted<0, 2>"
    with pytest.raises(ConfigError, match="takes k <= 32; k=33"):
        S.merge_smem_bytes(4, 33)
    with pytest.raises(ConfigError, match="5 \\(select: a dense key matrix, k <= 32\\) or 6 \\(select: a filtered"):
        S.merge_threads(7)
    # the select kernel: 1024 threads, its window of row entries, queue and the warps' largest and k-th maxima
    assert S.merge_threads(5) == 1024
    assert S.merge_smem_bytes(5, 10) == 51 * 1024 * 4 + 1024 * 8 + 2 * 32 * 4 + 16 <= 227 * 1024
    assert S.merge_name_expression(1, 2, 5) == "tunelab::sim::similarity_select<1, 2>"
    with pytest.raises(ConfigError, match="merge kind 5 takes k <= 32; k=33"):
        S.merge_smem_bytes(5, 33)
    with pytest.raises(ConfigError, match="merge kind 6 takes k <= 32; k=33"):
        S.merge_smem_bytes(6, 33)
    assert all(S.merge_kind(k, c, srt) not in (5, 6) for k in (1, 10, 32, 300) for c in (10, 10 ** 6)
               for srt in (True, False))
    sim = _sim()
    cs = sim.compile_search(sim.default_config(100, 10, "float16", 768), dtype="float16", arch="sm_90")

    class _T:  # stands in for a tensor: merge_args reads shapes and pointers only
        def __init__(self, *shape):
            self.shape = shape

        def data_ptr(self):
            return 0x1000

        def stride(self, dim):
            return self.shape[-1]

    q = _T(100, 768)
    assert cs.merge_args(_T(131, 100, 10), _T(131, 100, 10), q, 10, 131)[4] == 4
    assert cs.merge_args(_T(100, 8000), None, q, 10, 8, dense=(1000, 1000, 8000))[4] == 2
    with pytest.raises(ConfigError, match="needs sorted lists"):
        cs.merge_args(_T(100, 8000), None, q, 10, 8, dense=(1000, 1000, 8000), kind=4)
    # the select kernel reads one dense row per query, and only that
    assert cs.merge_args(_T(100, 8000), None, q, 10, 1, dense=(8000, 0, 8000), kind=5)[4] == 5
    with pytest.raises(InputError, match="query_stride=7996 is shorter than list_len=8000"):  # rows would overlap
        cs.merge_args(_T(100, 8000), None, q, 10, 1, dense=(8000, 0, 7996), kind=5)
    with pytest.raises(ConfigError, match="one dense row per query"):
        cs.merge_args(_T(100, 8000), None, q, 10, 8, dense=(1000, 1000, 8000), kind=5)
    with pytest.raises(ConfigError, match="one dense row per query"):
        cs.merge_args(_T(131, 100, 10), _T(131, 100, 10), q, 10, 131, kind=5)


def test_dense_search_rule_space_and_limits():
    """MERGE=5 (the dense key matrix, then the select kernel): the default takes it on sm_90 where the matrix of the
    store bucket's N is small next to L2, the tuner's space offers it below its own cap, and the launcher takes it
    with ping-pong and refuses k above the select kernel's 32."""
    from tunelab.tuning.families.similarity import DENSE_SPACE_MAX_BYTES, build_space

    sim = _sim()
    dense = lambda nq, n, k=10, dt="float16", arch="sm_90": sim.default_config(  # noqa: E731
        nq, k, dt, 768, arch=arch, n=n)["MERGE"] == sim.MERGE_DENSE
    assert dense(100, 65536) and dense(100, 65536, k=32) and dense(9, 65536)
    assert sim.DENSE_MAX_N == 65536
    assert not dense(100, 131072)  # the 100K bucket's matrix: 52 MB
    assert not dense(100, 65536, k=33) and not dense(200, 16384) and not dense(8, 131072)
    assert not dense(100, 65536, dt="float32", arch="sm_80") and not dense(100, 65536, arch="sm_80")
    assert not dense(100, 131072, dt="float32") and not dense(100, 65536, k=33, dt="float32")
    assert sim.default_config(100, 10, "float16", 768, arch="sm_90")["MERGE"] == 3  # no n (streamed): fused
    assert sim.dense_ld(50001) == 50004 and sim.dense_bytes(100, 50001) == 100 * 50004 * 4
    merges = lambda nq, n, k=10: build_space(dict(nq=nq, n=n, d=768, k=k, dtype="fp16")).param("MERGE").choices  # noqa
    assert {5, 6} <= set(merges(100, 50000)) and {5, 6} <= set(merges(100, 500_000))
    assert not {5, 6} & set(merges(100, 1_000_000)) and not {5, 6} & set(merges(100, 50000, k=33))
    assert sim.dense_bytes(100, 500_000) <= DENSE_SPACE_MAX_BYTES < sim.dense_bytes(100, 1_000_000)
    cfg = sim.default_config(100, 10, "float16", 768, arch="sm_90", n=65536)
    S.topk_validate(cfg, 0, 0)  # ping-pong with MERGE=5
    with pytest.raises(ConfigError, match="MERGE=5 .* k <= 32; k=33"):
        S.topk_smem_bytes(cfg, 0, 0, 33)
    # no score tile, scratch or list bookkeeping: the ring (and the row norms for cosine, l2) only
    assert S.topk_smem_bytes(cfg, 0, 0, 10) == 4 * (128 + 104) * 128 + 4 * 16 + 16
    assert S.topk_smem_bytes(cfg, 0, 2, 10) == S.topk_smem_bytes(cfg, 0, 0, 10) + 2 * 128 * 4
    # MERGE=6 (filtered): and per ping-pong group and query column its 32 holders' maxima, bound and count (+2 pad)
    fcfg = dict(cfg, MERGE=6)
    assert S.topk_smem_bytes(fcfg, 0, 0, 10) == S.topk_smem_bytes(cfg, 0, 0, 10) + 2 * 104 * (32 + 4) * 4
    with pytest.raises(ConfigError, match="MERGE=6 .* k <= 32; k=33"):
        S.topk_smem_bytes(fcfg, 0, 0, 33)


def test_merge_launch_is_programmatic_from_sm_90():
    """The merge (or select) launch that follows a search is a programmatic dependent launch where the GPU has PDL
    (sm_90): its kernels wait for the search in the kernel (griddepcontrol.wait), so an arch without it must not ask
    for it."""
    sim = _sim()
    dense = sim.default_config(100, 10, "float16", 768, arch="sm_90", n=65536)
    assert sim.compile_search(dense, dtype="float16", arch="sm_90").programmatic_merge
    older = dict(sim.default_config(1, 10, "float16", 768, arch="sm_80"), MERGE=5)
    assert not sim.compile_search(older, dtype="float16", arch="sm_80").programmatic_merge


def test_dense_configs_compile_without_spills():
    """The dense default (128-row ping-pong tiles) and its 192-row variant compile clean for every metric on sm_90, an
    mma.sync dense config on sm_80, and the select kernel stays within 64 registers (1024 threads)."""
    sim = _sim()
    base = sim.default_config(100, 10, "float16", 768, arch="sm_90", n=65536)
    cases = [(base, "float16", "sm_90"), (dict(base, BLOCK_N=192), "bfloat16", "sm_90"),
             (dict(sim.default_config(1, 10, "float16", 768, arch="sm_80"), MERGE=5), "float16", "sm_80")]
    for cfg, dt, arch in cases:
        for metric in ("ip", "cosine", "l2"):
            cs = sim.compile_search(cfg, dtype=dt, metric=metric, arch=arch)
            assert cs.resources.spills == 0 and cs.resources.stack_bytes == 0, (cfg, metric, arch)
            sel = cs.merge_resources(sim.MERGE_SELECT)
            assert sel.spills == 0 and sel.registers <= 64, (metric, arch, sel.to_dict())
            fsel = cs.merge_resources(sim.MERGE_FILTER_SELECT)
            assert fsel.spills == 0 and fsel.stack_bytes == 0, (metric, arch, fsel.to_dict())


def test_trace_slots_do_not_overlap():
    """The diagnosis build's timeline slots (params.cuh, read by similarity_probe.py through the binding): the turn
    slots of both tile groups, the events, the scan and why slots and the filtered first tile's steps of both groups
    each get their own u64."""
    t = S.TRACE_SLOTS
    turns = range(t["turn0"], t["turn0"] + 2 * t["turns"] * 4)
    single = [t[n] for n in ("entry", "producer_start", "producer_done", "mma_start", "smid", "end_barrier", "done")]
    per_group = [t["scan"], t["scan"] + 1, t["why"], t["why"] + 1]
    first_steps = range(t["first0"], t["first0"] + 2 * t["first_steps"])
    used = [*turns, *single, *per_group, *first_steps]
    assert len(set(used)) == len(used) and max(used) < t["slots"]


def test_filtered_rows_bound_and_select_only():
    """MERGE=6's candidate rows: the tuner's device-free bound (filter_rows_bound) holds every grid plan's row
    stride (filter_ld) over random tile sizes, clusters, sizes and wave targets; filter_ld is the segments, then a
    count per split or the 36 global words (params.cuh kFilterWords), whichever is more, rounded up to 4; the rows go
    to the filtered select only, and it reads nothing else (merge_args refuses either mix)."""
    torch = pytest.importorskip("torch")
    from tunelab.ops import similarity as sim
    from tunelab.tuning.families.similarity import filter_rows_bound

    assert S.FILTER_WORDS == 36
    rng = random.Random(7)
    base = sim.default_config(100, 10, "float16", 768, arch="sm_90", n=65536)
    for _ in range(3000):
        cfg = dict(base, BLOCK_N=rng.choice([64, 128, 256]), CLUSTER=rng.choice([1, 2, 4]), MERGE=6)
        n, nq = rng.randint(1, 600_000), rng.randint(1, 1024)
        plan = dict(S.topk_plan(cfg, nq, n, rng.randint(1, 600), rng.choice([0, cfg["CLUSTER"], 1024])))
        ld = sim.filter_ld(plan, cfg)
        rows = plan["tiles_per_split"] * cfg["BLOCK_N"]
        assert sim.filter_rows(plan, cfg) == rows
        assert ld == -(-(plan["splits"] * rows + max(plan["splits"], 36)) // 4) * 4
        assert plan["splits"] * rows >= n and ld <= filter_rows_bound(cfg, n), (cfg, n, plan)
    comp = sim.compile_search(dict(base, MERGE=6), dtype="float16", arch="sm_90")
    plan = dict(S.topk_plan(comp.config, 4, 1000, 8, 0))
    ck, ci = comp.candidate_buffers(plan, 4, 1000, 10, "cpu")
    assert ck.shape == ci.shape == (4, sim.filter_ld(plan, comp.config)) and ci.dtype == torch.int32
    q = torch.zeros((4, 768), dtype=torch.float16)
    dense = (sim.filter_rows(plan, comp.config), 0, ck.stride(0))
    for bad in (0, sim.MERGE_SELECT):
        with pytest.raises(ConfigError, match=f"filtered_rows .* got kind={bad}"):
            comp.merge_args(ck, ci, q, 10, plan["splits"], dense=dense, kind=bad, filtered_rows=True)
    with pytest.raises(ConfigError, match="got kind=6, filtered_rows=False"):
        comp.merge_args(ck, ci, q, 10, plan["splits"], dense=dense, kind=sim.MERGE_FILTER_SELECT)
    *_, kind = comp.merge_args(ck, ci, q, 10, plan["splits"], dense=dense, filtered_rows=True)
    assert kind == sim.MERGE_FILTER_SELECT


def test_pack_layout_roundtrip():
    cfg = _cfg(BLOCK_Q=32)
    blob = S.topk_pack(cfg, 0, 0x1000, 0x2000, 0x3000, 0x4000, 776, 768, 5, 100, 5000, 768, 10, 40, 3, 1)
    # MMA=2's two tensor maps (128 bytes each, zeros for other configs), the fields, padding to 64-byte alignment
    assert len(blob) == S.SEARCH_PARAMS_BYTES == 384
    layout = "<QQQQqqqiiiiiiii"
    assert blob[:256] == bytes(256) and blob[344:] == bytes(40)
    f = struct.unpack(layout, blob[256:344])
    assert f[:7] == (0x1000, 0x2000, 0x3000, 0x4000, 776, 768, 5)
    assert f[7:15] == (100, 5000, 768, 10, 40, 3, 1, 0)  # dense_ld 0: not MERGE=5, 6
    # MERGE=5: cand_key is the [nq][dense_ld] key matrix, cand_idx may be null
    dcfg = _cfg(BLOCK_Q=32, MERGE=5)
    db = S.topk_pack(dcfg, 0, 0x1000, 0x2000, 0x3000, 0, 776, 768, 0, 100, 5000, 768, 10, 40, 3, 0, 5004)
    assert struct.unpack(layout, db[256:344])[7:15] == (100, 5000, 768, 10, 40, 3, 0, 5004)
    for bad_ld, bad_key, base, match in ((5002, 0x3000, 0, "multiple of 4"), (4996, 0x3000, 0, "at least 5000"),
                                         (5004, 0x3008, 0, "16-byte aligned"), (5004, 0x3000, 7, "index_base=7")):
        with pytest.raises(InputError, match=match):
            S.topk_pack(dcfg, 0, 0x1000, 0x2000, bad_key, 0, 776, 768, base, 100, 5000, 768, 10, 40, 3, 0, bad_ld)
    # MERGE=6: the candidate rows (keys and indices): 14 splits of 3 tiles, a segment of 3 x BLOCK_N entries each,
    # then the 14 counts (cand_idx) and the 36 global words (cand_key): room for the words
    fcfg = _cfg(BLOCK_Q=32, MERGE=6)
    fld = S.filter_ld(14, 3 * fcfg["BLOCK_N"])
    assert fld == -(-(14 * 3 * fcfg["BLOCK_N"] + 36) // 4) * 4 and S.filter_ld(40, 384) == 40 * 384 + 40
    fb = S.topk_pack(fcfg, 0, 0x1000, 0x2000, 0x3000, 0x5000, 776, 768, 0, 100, 5000, 768, 10, 40, 3, 0, fld)
    assert struct.unpack(layout, fb[256:344])[3] == 0x5000
    for ci, ld, match in ((0, fld, "cand_idx"), (0x5000, 5004, f"at least {fld}.*14 segments")):
        with pytest.raises(InputError, match=match):
            S.topk_pack(fcfg, 0, 0x1000, 0x2000, 0x3000, ci, 776, 768, 0, 100, 5000, 768, 10, 40, 3, 0, ld)
    with pytest.raises(ConfigError, match="MERGE=6 .* k <= 32; k=33"):
        S.topk_pack(fcfg, 0, 0x1000, 0x2000, 0x3000, 0x5000, 776, 768, 0, 100, 5000, 768, 33, 40, 3, 0, fld)
    with pytest.raises(InputError, match="VEC=16"):  # 100-element fp16 rows are 8-byte multiples only
        S.topk_pack(cfg, 0, 0x1000, 0x2000, 0x3000, 0x4000, 100, 100, 0, 10, 500, 100, 10, 4, 1, 0)
    with pytest.raises(InputError, match="2\\^31"):
        S.topk_pack(cfg, 0, 0x1000, 0x2000, 0x3000, 0x4000, 768, 768, 2 ** 31 - 10, 10, 500, 768, 10, 4, 1, 0)
    m = S.merge_pack(0x10, 0x20, 0x30, 768, 0, 0, 0x40, 0x50, 100, 768, 10, 33)
    assert len(m) == S.MERGE_PARAMS_BYTES == 104
    mlayout = "<QQQQQQQqqqiiiiii"
    fields = struct.unpack(mlayout, m)
    # candidate lists [list][nq][k]: list_len k, list stride nq * k, query stride k, explicit indices
    assert fields == (0x10, 0x20, 0x30, 0, 0, 0x40, 0x50, 768, 1000, 10, 100, 768, 10, 33, 10, 0)
    dense = struct.unpack(mlayout, S.merge_pack(0x10, 0, 0x30, 768, 0, 0, 0x40, 0x50, 100, 768, 10, 8, 125, 125,
                                                1000, True))
    assert dense[8:] == (125, 1000, 100, 768, 10, 8, 125, 1)
    # the select after a MERGE=6 search: 14 segments of 384 explicit-index entries per query, then their counts
    flen = S.filter_ld(14, 384)
    filt = struct.unpack(mlayout, S.merge_pack(0x10, 0x20, 0x30, 768, 0, 0, 0x40, 0x50, 100, 768, 10, 14, 384, 0,
                                               flen, False, True))
    assert filt[8:] == (0, flen, 100, 768, 10, 14, 384, 0)
    for implicit, stride, match in ((True, flen, "explicit indices"), (False, 14 * 384, f"at least {flen}")):
        with pytest.raises(InputError, match=match):
            S.merge_pack(0x10, 0x20, 0x30, 768, 0, 0, 0x40, 0x50, 100, 768, 10, 14, 384, 0, stride, implicit, True)
    with pytest.raises(InputError, match="pairs"):
        S.merge_pack(0x10, 0x20, 0x30, 768, 0x40, 0, 0, 0, 100, 768, 10, 33)
    with pytest.raises(InputError, match="cand_idx is a null device pointer"):
        S.merge_pack(0x10, 0, 0x30, 768, 0, 0, 0x40, 0x50, 100, 768, 10, 33)
    g = dict(TILE_M=64, TILE_N=64, TILE_K=32, WARPS_M=2, WARPS_N=2, STAGES=3, VEC=16)
    gb = S.gram_pack(g, 3, True, 0x100, 0x100, 0x200, 512, 512, 1000, 1000, 1000, 512)
    assert len(gb) == S.GRAM_PARAMS_BYTES
    assert struct.unpack("<QQQqqqiiii", gb) == (0x100, 0x100, 0x200, 512, 512, 1000, 1000, 1000, 512, 16)
    with pytest.raises(InputError, match="one set of states"):
        S.gram_pack(g, 3, True, 0x100, 0x400, 0x200, 512, 512, 1000, 1000, 1000, 512)
    assert S.gram_grid(g, 1000, 1000, True) == (16 * 17 // 2, 1, 1)
    assert S.gram_grid(g, 100, 1000, False) == (16, 2, 1)
    with pytest.raises(ConfigError, match="epilogue"):
        S.gram_name_expression(g, 3, False, False, 1)  # the plain product is for real inputs


def test_max_vec():
    assert S.max_vec(0, [0, 256], [768, 768], 768) == 16
    assert S.max_vec(0, [0, 256], [100, 100], 100) == 8
    assert S.max_vec(0, [0, 256], [102, 102], 102) == 4
    assert S.max_vec(0, [0, 256], [101, 101], 101) == 0
    assert S.max_vec(2, [0, 4], [3, 3], 3) == 4


def test_dense_search_for_fp32_over_small_corpora():
    """On sm_90, fp32 searches of 9..112 queries with k <= 32 over a store bucket of at most DENSE_MAX_N rows take
    the dense search on the mma.sync loop, the tuner's best at 100 x 50K (benchmarks/similarity_fp32_small.py); it
    compiles without spills for every metric."""
    sim = _sim()
    for nq, bq in ((9, 16), (16, 16), (33, 48), (100, 112), (112, 112)):
        c = sim.default_config(nq, 10, "float32", 768, arch="sm_90", n=65536)
        assert (c["MERGE"], c["MMA"], c["BLOCK_N"], c["BLOCK_Q"], c["BLOCK_K"], c["STAGES"]) == (
            sim.MERGE_DENSE, 0, 128, bq, 64, 2), (nq, c)
    assert sim.default_config(113, 10, "float32", 768, arch="sm_90", n=65536)["MERGE"] != sim.MERGE_DENSE
    assert sim.default_config(100, 10, "float32", 768, arch="sm_90")["MERGE"] != sim.MERGE_DENSE  # streamed
    for nq, metric in ((100, "cosine"), (100, "l2"), (16, "ip")):
        c = sim.default_config(nq, 32, "float32", 768, arch="sm_90", n=16384)
        r = sim.compile_search(c, dtype="float32", metric=metric, arch="sm_90").resources
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, (nq, metric, c, r)


def test_short_tiles_for_few_queries_over_small_corpora():
    """16-bit searches of at most 8 queries over at most SHORT_TILES_MAX_N rows tile 128 corpus rows (at N = 50K,
    256-row tiles make 98 splits of two and leave 34 of 132 SMs idle), and so do fp32 searches on the FFMA loop over
    at most FMA_SHORT_TILES_MAX_N rows; other fp32 searches, larger corpora and streamed searches (no n) keep 256
    rows, and the short tiles compile without spills."""
    sim = _sim()
    bn = lambda nq, n, dt="float16": sim.default_config(nq, 10, dt, 768, arch="sm_90", n=n)["BLOCK_N"]  # noqa: E731
    assert sim.SHORT_TILES_MAX_N == 262144
    assert bn(8, 262144) == bn(1, 131072, "bfloat16") == 128
    # below DENSE_MAX_N the short tiles remain where the dense search does not apply (k above the select's 32)
    assert sim.default_config(1, 33, "float16", 768, arch="sm_90", n=65536)["BLOCK_N"] == 128
    assert bn(1, 524288) == bn(3, 65536, "float32") == bn(1, None) == 256
    # fp32 on the FFMA loop (sm_90, at most FMA_MAX_NQ queries) up to FMA_SHORT_TILES_MAX_N rows: 128-row tiles
    assert sim.FMA_SHORT_TILES_MAX_N == 131072
    assert bn(1, 16384, "float32") == bn(2, 131072, "float32") == 128
    assert bn(1, 262144, "float32") == bn(2, None, "float32") == 256
    c = sim.default_config(1, 10, "float32", 768, arch="sm_90", n=65536)
    assert (c["MMA"], c["BLOCK_N"], c["WARPS_N"]) == (4, 128, 8), c
    for metric in ("ip", "l2", "cosine"):
        r = sim.compile_search(c, dtype="float32", metric=metric, arch="sm_90").resources
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, (metric, c, r)
    cfg = sim.default_config(1, 10, "bfloat16", 768, arch="sm_90", n=131072)
    assert (cfg["WARPS_N"], cfg["MMA"], cfg["MERGE"]) == (8, 0, 2)
    r = sim.compile_search(cfg, dtype="bfloat16", metric="l2", arch="sm_90").resources
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, (cfg, r)


def test_dense_search_for_few_queries_over_small_corpora():
    """On sm_90, 16-bit searches of at most 8 queries over a store bucket of at most DENSE_MAX_N rows with k <= 32
    take the dense search: on the mma.sync loop up to FEW_QUERIES_MMA_DENSE_MAX_N rows, on the ping-pong
    warpgroups above (benchmarks/similarity_small_nq.py); fp32, sm_80, k > 32, larger corpora and streamed searches
    keep the fused search. Both configs compile without spills."""
    sim = _sim()
    cfg = lambda nq, n, k=10, dt="float16", arch="sm_90": sim.default_config(  # noqa: E731
        nq, k, dt, 768, arch=arch, n=n)
    assert sim.FEW_QUERIES_MMA_DENSE_MAX_N == 32768
    for nq in (1, 8):
        for n, k in ((16, 10), (1024, 32), (32768, 10)):
            c = cfg(nq, n, k=k)
            assert (c["MERGE"], c["MMA"], c["BLOCK_N"], c["BLOCK_Q"]) == (sim.MERGE_DENSE, 0, 128, 8), (nq, n, c)
        c = cfg(nq, 65536, k=32, dt="bfloat16")
        assert (c["MERGE"], c["MMA"], c["BLOCK_N"], c["STAGES"]) == (sim.MERGE_DENSE, 3, 128, 5), (nq, c)
        # rows TMA cannot read (2 * d not a multiple of 16): the measured mma.sync dense config, not an MMA=1 one
        c100 = sim.default_config(nq, 10, "float16", 100, arch="sm_90", n=65536)
        assert (c100["MERGE"], c100["MMA"], c100["BLOCK_N"], c100["STAGES"]) == (sim.MERGE_DENSE, 0, 128, 3), c100
        for fused in (cfg(nq, 131072), cfg(nq, 65536, k=33), cfg(nq, None)):
            assert fused["MERGE"] != sim.MERGE_DENSE, (nq, fused)
        # fp32 and sm_80 keep the fused few-query config exactly (fp32 on sm_90 with its products by FFMA up to
        # FMA_MAX_NQ queries, and then with 128-row tiles)
        fma = nq <= sim.FMA_MAX_NQ  # on 128-row tiles up to FMA_SHORT_TILES_MAX_N rows
        for c, bn, mma in ((cfg(nq, 65536, dt="float32"), 128 if fma else 256, 4 if fma else 0),
                           (cfg(nq, 65536, arch="sm_80"), 128, 0)):
            assert (c["MERGE"], c["MMA"], c["BLOCK_N"], c["BLOCK_Q"], c["STAGES"]) == (2, mma, bn, 8, 3), (nq, c)
    for n, dt, metric in ((32768, "float16", "cosine"), (65536, "bfloat16", "l2")):
        c = cfg(8, n, dt=dt)
        r = sim.compile_search(c, dtype=dt, metric=metric, arch="sm_90").resources
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, (c, r)


def test_default_configs_fit_every_k_and_arch():
    sim = _sim()
    # two lists of k (key, index) pairs for at least 8 queries: k = 1024 needs 128 KiB, more than sm_86 has
    with pytest.raises(InputError, match="use a smaller k"):
        sim.default_config(1, 1024, "float16", arch="sm_86")
    for arch, ks in (("sm_90", (1, 10, 100, 256, 1024)), ("sm_80", (1, 10, 100, 256, 1024)),
                     ("sm_86", (1, 10, 100, 256))):
        limit = sim.smem_limit(arch)
        for nq in (1, 7, 100, 128, 1024):
            for k in ks:
                for dt, code in (("float16", 0), ("float32", 2)):
                    cfg = sim.default_config(nq, k, dt, arch=arch)
                    for m in (0, 1, 2):
                        assert S.topk_smem_bytes(cfg, code, m, k) <= limit, (arch, nq, k, dt, cfg)


# ------------------------------------------------------------------------------------------------ compiling
#: (nq, dtype, metric) defaults compiled per arch: every dtype, metric and nq regime at least once
_COMPILE_SAMPLE = [(1, "float16", "ip"), (1, "float32", "l2"), (1, "bfloat16", "cosine"), (72, "float16", "cosine"),
                   (80, "float16", "cosine"), (100, "float16", "ip"),
                   (100, "float16", "cosine"), (100, "bfloat16", "l2"), (100, "float32", "ip"),
                   (100, "float32", "cosine"), (1024, "float16", "l2"), (1024, "float32", "ip"),
                   (1024, "bfloat16", "cosine")]


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_defaults_compile_without_spills(arch):
    import concurrent.futures as cf
    import os

    sim = _sim()

    def one(item):
        nq, dt, metric = item
        cfg = sim.default_config(nq, 10, dt, arch=arch)
        return item, cfg, sim.compile_search(cfg, dtype=dt, metric=metric, arch=arch)

    with cf.ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2))) as pool:  # NVRTC releases the GIL
        results = list(pool.map(one, _COMPILE_SAMPLE))
    for item, cfg, cs in results:
        r = cs.resources
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, (arch, item, cfg, r)
        for kind in sim.MERGE_KINDS:
            m = cs.merge_resources(kind)
            assert m.spill_store_bytes == 0 and m.stack_bytes == 0, (arch, item, kind, m)
        occ = _core.occupancy(arch, cs.threads, r.registers, cs.smem_bytes(10))
        assert occ.blocks_per_sm >= 1, (arch, cfg, occ)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_gram_defaults_compile(arch):
    sim = _sim()
    cg = sim.compile_gram(sim.UNFUSED_GEMM_CONFIG, dtype="float16", symmetric=False, epilogue=1, arch=arch)
    assert cg.resources.spill_store_bytes == 0  # the GEMM of the unfused-search ablation
    for dt in ("float16", "float32", "complex64"):
        for sym, mirror in ((False, False), (True, False), (True, True)):
            cg = sim.compile_gram(sim.default_gram_config(dt), dtype=dt, symmetric=sym, mirror=mirror, arch=arch)
            r = cg.resources
            assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, (arch, dt, sym, r)
            assert _core.occupancy(arch, cg.threads, r.registers, cg.smem).blocks_per_sm >= 1


def test_random_space_sample_compiles_for_both_archs():
    """A few configs drawn from the space (all parameters varied) compile for sm_80 and sm_90."""
    import random

    from tunelab.tuning.families.similarity import SearchProblem, SimilarityFamily

    fam = SimilarityFamily()
    rng = random.Random(5)
    for prob in (SearchProblem(100, 50000, 768, 10, "fp16", "ip"), SearchProblem(1000, 10 ** 6, 128, 32, "fp32", "l2")):
        space = fam.space(prob)
        configs = [c for c in space.enumerate() if not fam.static_gates(c, prob, arch="sm_80")]
        for cfg in rng.sample(configs, 2):
            for arch in ("sm_90", "sm_80"):
                cand = fam.compile(cfg, prob, arch)
                assert cand.resources.registers > 0 and cand.smem_bytes > 0


def test_widest_thread_list_warp_compiles():
    """Thread lists with one mma.sync warp along 256 corpus rows (MT = 16 accumulator row blocks): the pre-check's
    chunk then has 64 pass flags, more than a 32-bit word, and must still compile (sm_80 and sm_90, each metric)."""
    sim = _sim()
    cfg = _cfg(BLOCK_N=256, BLOCK_Q=32, BLOCK_K=32, WARPS_N=1, WARPS_Q=4, STAGES=2, MERGE=3)
    for arch in ("sm_90", "sm_80"):
        for metric in ("ip", "cosine", "l2"):
            cs = sim.compile_search(cfg, dtype="float16", metric=metric, arch=arch)
            assert cs.resources.registers > 0 and cs.resources.spill_store_bytes == 0


# ------------------------------------------------------------------------------------------------ chunk planning
def test_chunk_plan_under_forced_budget():
    from tunelab.ops.streaming import SLACK_BYTES, plan_chunks

    row = 768 * 2
    plan = plan_chunks(1_000_000, row, free_bytes=80 << 30, memory_budget=64 << 20, streams=2, fixed_bytes=1 << 20)
    assert plan.source == "budget"
    assert plan.device_bytes + plan.fixed_bytes + SLACK_BYTES <= 64 << 20
    assert plan.chunk_rows == ((64 << 20) - (1 << 20) - SLACK_BYTES) // (2 * row)
    assert plan.num_chunks == -(-1_000_000 // plan.chunk_rows) and plan.num_chunks > 1
    # a corpus 1.5x the budget streams in several chunks whatever the stream count
    n = int(1.5 * (256 << 20) / row)
    for streams in (1, 2, 3):
        p = plan_chunks(n, row, free_bytes=1 << 40, memory_budget=256 << 20, streams=streams)
        assert p.num_chunks >= 2 and p.device_bytes <= 256 << 20
    # the fraction of free memory when no budget is given
    p = plan_chunks(10 ** 9, row, free_bytes=10 << 30, memory_fraction=0.5, streams=2)
    assert p.source == "fraction" and p.budget_bytes == 5 << 30
    # fixed chunk size
    p = plan_chunks(1000, row, free_bytes=1 << 30, chunk_rows=300, streams=2)
    assert (p.chunk_rows, p.num_chunks, p.source) == (300, 4, "fixed")
    assert plan_chunks(1000, row, free_bytes=1 << 30, chunk_rows=5000).chunk_rows == 1000
    # too small
    with pytest.raises(InputError, match="cannot hold"):
        plan_chunks(1000, row, free_bytes=1 << 30, memory_budget=SLACK_BYTES + 100)
    with pytest.raises(InputError, match="exceeds the memory budget"):
        plan_chunks(10 ** 6, row, free_bytes=1 << 40, memory_budget=64 << 20, chunk_rows=10 ** 5)
    with pytest.raises(InputError, match="memory_fraction"):
        plan_chunks(10, row, free_bytes=1 << 30, memory_fraction=1.5)
    # staging buffers for pageable hosts stay bounded
    assert p.staging_rows * row <= 256 << 20


def test_buffer_pool_without_gpu_release_is_safe():
    from tunelab.ops import streaming

    streaming.release_memory()
    assert streaming.POOL.held_bytes() == {"pinned": 0, "device": 0}


# ------------------------------------------------------------------------------------------------ input errors
def test_input_errors():
    import torch

    sim = _sim()
    q = torch.randn(4, 8)
    c = torch.randn(10, 8)
    with pytest.raises(InputError, match="queries are on cpu"):
        sim.similarity_search(q, c, 3)
    # the rest is validated before any GPU work: a tensor subclass that reports is_cuda stands in for the GPU
    v = sim.validate_search_inputs
    with pytest.raises(InputError, match="metric='dot'"):
        v(q, c, 3, "dot")
    with pytest.raises(InputError, match="k=11 is larger than the corpus"):
        v(_cuda_like(q), c, 11, "ip")
    with pytest.raises(InputError, match="k=0 must be >= 1"):
        v(_cuda_like(q), c, 0, "ip")
    with pytest.raises(InputError, match="dimension mismatch"):
        v(_cuda_like(q), torch.randn(10, 9), 3, "ip")
    with pytest.raises(InputError, match="dtype int64"):
        v(_cuda_like(q.long()), c.long(), 3, "ip")
    with pytest.raises(InputError, match="same dtype"):
        v(_cuda_like(q), c.half(), 3, "ip")
    with pytest.raises(InputError, match="not contiguous"):
        v(_cuda_like(q), torch.randn(8, 10).T, 3, "ip")
    with pytest.raises(InputError, match="rows overlap"):
        v(_cuda_like(q), torch.randn(1, 8).expand(10, 8), 3, "ip")
    with pytest.raises(InputError, match="shape"):
        v(_cuda_like(q), torch.randn(2, 5, 8), 3, "ip")
    with pytest.raises(InputError, match="k=True must be an int"):
        v(_cuda_like(q), c, True, "ip")


def _cuda_like(t):
    """A CPU tensor that reports is_cuda=True, so pure-Python validation runs without a GPU."""
    import torch

    class T(torch.Tensor):
        @property
        def is_cuda(self):  # noqa: D401 - test double
            return True

    return t.as_subclass(T)


def test_gram_input_errors():
    import torch

    sim = _sim()
    with pytest.raises(InputError, match="gram runs on a GPU"):
        sim.gram(torch.randn(4, 8))
    with pytest.raises(InputError, match="shape"):
        sim.validate_gram_inputs(torch.randn(4))
    with pytest.raises(InputError, match="complex128"):
        sim.validate_gram_inputs(_cuda_like(torch.randn(4, 3, dtype=torch.complex128)))


# ------------------------------------------------------------------------------------------------ tuner hooks
def test_family_lookup_cli_and_store_key():
    from tunelab.cli import build_parser
    from tunelab.tuning.cli import problem_from_args
    from tunelab.tuning.families.similarity import apply_cli_arguments
    from tunelab.tuning.family import get_family

    fam = get_family("similarity")
    assert fam.name == "similarity" and get_family("gram").name == "gram"
    args = build_parser().parse_args("tune similarity --nq 100 --n 50000 --d 768 --k 10 --dtype fp16".split())
    apply_cli_arguments(args)
    prob = problem_from_args("similarity", args)
    assert fam.problem_dict(prob) == {"nq": 100, "n": 50000, "d": 768, "k": 10, "dtype": "fp16", "metric": "ip"}
    assert fam.store_key(prob) == {"nq": 128, "n": 65536, "d": 768, "k": 16, "dtype": "fp16", "metric": "ip"}
    args = build_parser().parse_args("tune similarity --nq 100 --n 50000 --d 768 --dtype fp32 --metric l2".split())
    with pytest.raises(ConfigError, match="missing \\['--k'\\]"):
        apply_cli_arguments(args)
    args = build_parser().parse_args("tune similarity --shape 5,600,64,3 --metric cosine".split())
    assert problem_from_args("similarity", args).metric == "cosine"
    assert fam.worker_ref() == "tunelab.tuning.families.similarity:SimilarityFamily"
    assert fam.source_hash() == _sim().source_hash() and len(fam.source_hash()) == 16


def test_torch_baseline_and_reference_on_cpu():
    """The family's float64 reference and tie-aware check behave as documented (CPU tensors)."""
    import torch

    from tunelab.tuning.families.similarity import check_topk, reference_scores

    g = torch.Generator().manual_seed(0)
    q = torch.randn(6, 32, generator=g)
    c = torch.randn(500, 32, generator=g)
    for metric in ("ip", "cosine", "l2"):
        s = reference_scores(q, c, metric)
        v, i = torch.topk(-s if metric == "l2" else s, 7, dim=1)
        v = -v if metric == "l2" else v
        assert check_topk(v.float(), i, q, c, 7, metric).ok
        bad = i.clone()
        bad[0, 3] = int(torch.topk(-s[0] if metric == "l2" else s[0], 400).indices[-1])
        rep = check_topk(v.float(), bad, q, c, 7, metric)
        assert not rep.ok and rep.code == "numerics.error"
    rep = check_topk(v.float(), torch.full_like(i, -2), q, c, 7, "ip")
    assert rep.code == "numerics.unwritten"


# ------------------------------------------------------------------------------------------------ emulator
@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++: the CPU emulator needs a C++ compiler")
def test_kernels_on_cpu_emulator_quick(tmp_path):
    """The real kernel sources on the CPU emulator: search + merge (incl. streamed chunks, ties, NaN rows,
    adversarial order) and Gram, against float64, with race and cp.async checks (quick subset)."""
    sys.path.insert(0, str(HERE / "similarity_emulator"))
    try:
        import run_emulator
    finally:
        sys.path.pop(0)
    failures = run_emulator.run_matrix(quick=True, build_dir=str(tmp_path), log=lambda *_: None)
    assert not failures, "\n\n".join(failures)


def _run_emulator_module():
    sys.path.insert(0, str(HERE / "similarity_emulator"))
    try:
        import run_emulator
    finally:
        sys.path.pop(0)
    return run_emulator


def _patched_topk(tmp_path, run_emulator, old: str, new: str, what: str):
    """A copy of the kernel tree under tmp_path whose similarity/topk.cuh has its one ``old`` replaced by ``new``
    (``what`` names it for the message when the source no longer holds it exactly once)."""
    kernels = tmp_path / "kernels"
    shutil.copytree(run_emulator.KERNELS, kernels)
    topk = kernels / "similarity" / "topk.cuh"
    text = topk.read_text()
    assert text.count(old) == 1, f"{what} moved in topk.cuh: update this test"
    topk.write_text(text.replace(old, new))
    return kernels


#: TOPK_CONFIGS indices of the configs with a TMA producer (MMA 2, 3) in run_emulator.py
TMA_EMULATOR_CONFIGS = [28, 29, 30, 31]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++: the CPU emulator needs a C++ compiler")
def test_tma_pipeline_on_cpu_emulator_with_drifting_warps(tmp_path):
    """The TMA producer's configs (ping-pong dense, filtered and thread lists, MMA=2's shared lists: mbarriers, named
    barriers, swizzled TMA boxes) give the reference's answers on the emulator when its warps drift apart
    (--sched-seed), over the quick scenarios."""
    run_emulator = _run_emulator_module()
    assert all(run_emulator.TOPK_CONFIGS[i].mma in (2, 3) for i in TMA_EMULATOR_CONFIGS)
    for seed in (1, 2):
        failures = run_emulator.run_matrix(quick=True, build_dir=str(tmp_path), log=lambda *_: None,
                                           only=TMA_EMULATOR_CONFIGS, sched_seed=seed)
        assert not failures, "\n\n".join(failures)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++: the CPU emulator needs a C++ compiler")
def test_cpu_emulator_catches_a_missing_pingpong_order(tmp_path):
    """The emulator's mbarriers are strict enough to matter: with the ping-pong order wait removed from topk.cuh (a
    group would start its tile's main loop before the other group left the previous one, and wait on a stage's
    phase it does not own), the 50K / 100 default's config no longer completes a corpus of many tiles, while the
    unmodified kernel does."""
    run_emulator = _run_emulator_module()
    kernels = _patched_topk(tmp_path, run_emulator,
                            "if (grp == 1 || turn > 0) mbar::wait(order_bar(grp), (grp == 1 ? turn : turn - 1) & 1);",
                            "if (false) mbar::wait(order_bar(grp), 0);", "the ping-pong order wait")
    cfg = run_emulator.TOPK_CONFIGS[28]
    args = [4, 3000, 328, 8, 1, 1, 1, 16, 1]  # 24 tiles in one split: the ring wraps many times
    good = run_emulator._build("EMU_TOPK", cfg, tmp_path, "g++")
    ok, text_good = run_emulator._run(good, args)
    assert ok and "races=unchecked" in text_good, text_good
    bad = run_emulator._build("EMU_TOPK", cfg, tmp_path, "g++", kernels=kernels)
    ok, text_bad = run_emulator._run(bad, args)
    assert not ok and "deadlock" in text_bad, text_bad


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++: the CPU emulator needs a C++ compiler")
def test_cpu_emulator_reaches_the_filter_warps_second_columns(tmp_path):
    """The emulator's 100-query scenario (run_emulator.WIDE_SCENARIOS) reaches MERGE=7's filter threads with two
    query columns (BLOCK_Q = 104 over run_emulator.FILTER_THREADS = 96, the 50K / 100 layout), which no other
    scenario does: with the second columns' later tiles filtered by a bar above every key, the 50K / 100
    filter-warp config loses answers there, while the unmodified kernel gives the reference's."""
    run_emulator = _run_emulator_module()
    kernels = _patched_topk(tmp_path, run_emulator,
                            "fw_append(c, tile, fw_live(c), next, fw_live(c) ? lds(fw_bar(c)) : 0.f);",
                            "fw_append(c, tile, fw_live(c), next, fw_live(c) ? (c >= FT ? f32_inf() : lds(fw_bar(c))) "
                            ": 0.f);", "the filter warps' later-tile append")
    cfg = run_emulator.TOPK_CONFIGS[32]
    ft = run_emulator.FILTER_THREADS
    assert cfg.merge == 7 and cfg.block_q > ft, \
        "config 32 is no longer a filter-warp config wider than its threads: update"
    (wide,) = run_emulator.WIDE_SCENARIOS
    args = run_emulator.topk_run_args(cfg, wide)
    assert args is not None and args[0] > ft
    good = run_emulator._build("EMU_TOPK", cfg, tmp_path, "g++")
    ok, text_good = run_emulator._run(good, args)
    assert ok, text_good
    bad = run_emulator._build("EMU_TOPK", cfg, tmp_path, "g++", kernels=kernels)
    ok, text_bad = run_emulator._run(bad, args)
    assert not ok and "bad_set=0 " not in text_bad, text_bad


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++: the CPU emulator needs a C++ compiler")
def test_kernels_on_cpu_emulator_full(tmp_path):
    sys.path.insert(0, str(HERE / "similarity_emulator"))
    try:
        import run_emulator
    finally:
        sys.path.pop(0)
    failures = run_emulator.run_matrix(quick=False, build_dir=str(tmp_path), log=lambda *_: None)
    assert not failures, "\n\n".join(failures)


def test_select_trace_decodes_the_stamps_the_selects_write(load_benchmark):
    """benchmarks/similarity_select_trace.py reads each select's stamp count from the kernel headers it compiles
    (kSelectTraceStamps, kFilterSelectTraceStamps, by tunelab.paths.header_constant, whose own test checks that a
    missing constant is an error) and decodes entry, the wait's return and one stamp per step it
    names, and for the filtered select a last word of counters: a kernel that stamps one more step than the script
    names (or one fewer) fails here, on the CPU, instead of mislabelling a GPU run's phases."""
    mod = load_benchmark("similarity_select_trace")
    merge, steps, stamps = mod.VARIANTS["dense"]
    assert (merge, stamps) == (5, len(steps) + 2)
    for name, want_merge in (("filtered", 6), ("warps", 7)):
        merge, steps, stamps = mod.VARIANTS[name]
        assert (merge, stamps) == (want_merge, len(steps) + 3), name
