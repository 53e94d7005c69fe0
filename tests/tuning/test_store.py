"""Tuned-config store: buckets, lookup, staleness, export/import; replayed results are never stored."""
from __future__ import annotations

import warnings

import pytest

from tunelab.tuning import store
from tunelab.tuning.api import tune
from tunelab.tuning.family import TunableFamily


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNELAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def attn(S, D=64, causal=False, dtype="fp16", B=16, H=16):
    return {"batch": B, "heads": H, "seq_len": S, "head_dim": D, "dtype": dtype, "causal": causal}


def entry(problem, config, source_hash="abc", created="2026-01-01T00:00:00+00:00", device="NVIDIA H200"):
    return {"family": "attention", "device": device, "bucket": store.bucket_of("attention", problem),
            "problem": problem, "config": config, "source_hash": source_hash, "created": created,
            "verdict": "win", "latency_us": 40.0}


def test_attention_bucket_is_next_pow2_of_seq_len():
    b = store.bucket_of("attention", attn(300))
    assert b == {"seq_bucket": 512, "head_dim": 64, "dtype": "fp16", "causal": False}
    assert store.bucket_of("attention", attn(512, B=1, H=2)) == b  # batch/heads not in the key
    assert store.bucket_of("attention", attn(513))["seq_bucket"] == 1024
    assert store.bucket_of("attention", {"B": 2, "H": 2, "S": 100, "D": 128, "dtype": "bf16", "causal": True}) == \
        {"seq_bucket": 128, "head_dim": 128, "dtype": "bf16", "causal": True}


def test_lookup_and_staleness(cache):
    store.put(entry(attn(512), {"BLOCK_M": 128}))
    assert store.lookup("attention", "NVIDIA H200", attn(400), source_hash="abc") == {"BLOCK_M": 128}
    assert store.lookup("attention", "NVIDIA H200", attn(1024), source_hash="abc") is None  # other bucket
    assert store.lookup("attention", "NVIDIA H200", attn(512, D=128), source_hash="abc") is None
    assert store.lookup("attention", "NVIDIA A100", attn(512), source_hash="abc") is None  # other device
    assert store.lookup_entry("attention", "NVIDIA H200", attn(512, causal=True), source_hash="abc").status == \
        "missing"
    with pytest.warns(store.StaleConfigWarning, match="stale"):
        assert store.lookup("attention", "NVIDIA H200", attn(512), source_hash="changed") is None
    res = store.lookup_entry("attention", "NVIDIA H200", attn(512), source_hash="changed")
    assert res.status == "stale" and res.config is None and "re-tune" in res.reason
    # a re-tune replaces the entry
    store.put(entry(attn(512), {"BLOCK_M": 64}, source_hash="changed"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.lookup("attention", "NVIDIA H200", attn(512), source_hash="changed") == {"BLOCK_M": 64}


class Fam(TunableFamily):
    name = "attention"

    def source_hash(self):
        return "famhash"


def test_lookup_with_family_object_uses_its_hash(cache):
    store.put(entry(attn(256), {"BLOCK_M": 32}, source_hash="famhash"))
    assert store.lookup(Fam(), "NVIDIA H200", attn(256)) == {"BLOCK_M": 32}


def test_export_import(cache, tmp_path, monkeypatch):
    store.put(entry(attn(512), {"BLOCK_M": 128}, created="2026-01-02T00:00:00+00:00"))
    store.put(entry(attn(2048), {"BLOCK_M": 64}, device="NVIDIA A100"))
    out = tmp_path / "export.json"
    assert store.export_store(out) == 2
    assert store.export_store(tmp_path / "one.json", device="NVIDIA A100") == 1
    # another machine: empty store, import everything
    monkeypatch.setenv("TUNELAB_CACHE_DIR", str(tmp_path / "other"))
    assert store.import_store(out) == {"added": 2, "replaced": 0, "kept": 0}
    assert store.lookup("attention", "NVIDIA H200", attn(512), source_hash="abc") == {"BLOCK_M": 128}
    # a newer local entry is kept unless --overwrite
    store.put(entry(attn(512), {"BLOCK_M": 256}, created="2026-06-01T00:00:00+00:00"))
    assert store.import_store(out) == {"added": 0, "replaced": 0, "kept": 2}
    assert store.lookup("attention", "NVIDIA H200", attn(512), source_hash="abc") == {"BLOCK_M": 256}
    assert store.import_store(out, overwrite=True)["replaced"] == 2
    assert store.lookup("attention", "NVIDIA H200", attn(512), source_hash="abc") == {"BLOCK_M": 128}


def test_replay_results_are_not_stored(cache, toy_replay_path):
    with pytest.warns(UserWarning, match="never written"):
        r = tune("toy", replay=toy_replay_path, trials=10, storage="memory", progress=False, save_to_store=True,
                 save_results_file=False, confirm_rounds=10, n_resamples=200)
    assert r.data["store"] == {"written": False}
    assert store.entries() == []


def test_put_result_from_confirmed_run(cache, toy_replay_path, toy_family):
    r = tune("toy", replay=toy_replay_path, trials=10, storage="memory", progress=False, save_results_file=False,
             confirm_rounds=10, n_resamples=200)
    r.data["device"] = {"name": "NVIDIA H200"}  # pretend it ran on the GPU to exercise the writer
    path = store.put_result(r, toy_family)
    assert path.name == "nvidia-h200.json"
    got = store.lookup(toy_family, "NVIDIA H200", {"M": 4000, "N": 4096, "dtype": "fp16"})
    assert got == r.best_config  # M=4000 shares the 4096 bucket under the default rule
    e = store.entries("NVIDIA H200")[0]
    assert e["verdict"] == r.verdict and e["speedup"]["against"] == "reference_lib"


def test_a_problem_callable_is_made_only_on_a_miss(cache, monkeypatch):
    """resolve() takes a callable for the store's problem (every op calls it per call): it is called when the config
    is looked up in the store, not on the cached calls after."""
    from tunelab.ops import dispatch
    from tunelab.tuning.family import get_family

    monkeypatch.setattr(dispatch, "device_name", lambda index: "NVIDIA H200")
    made = []

    def resolve():
        return dispatch.resolve("attention", 0, lambda: made.append(1) or attn(512), ("test-op", 512), adapt=dict,
                                default=lambda: {"BLOCK_M": 16})

    store.put(entry(attn(512), {"BLOCK_M": 128}, source_hash=get_family("attention").source_hash()))
    dispatch.clear_caches()
    try:
        assert resolve() == ({"BLOCK_M": 128}, "store") and len(made) == 1  # the stored entry, for that problem
        assert resolve() == ({"BLOCK_M": 128}, "store") and len(made) == 1  # cached: the problem is not made again
    finally:
        dispatch.clear_caches()


def test_ops_see_a_store_write_made_in_the_same_process(cache, monkeypatch):
    """An op resolved before ``tune()`` (or ``tunelab import``) stored a config uses the stored one afterwards,
    with no ``clear_caches()`` call; between writes the resolved config stays cached."""
    from tunelab.ops import dispatch
    from tunelab.tuning.family import get_family

    monkeypatch.setattr(dispatch, "device_name", lambda index: "NVIDIA H200")
    calls = []

    def resolve():
        return dispatch.resolve("attention", 0, lambda: attn(512), ("test-op", 512), adapt=dict,
                                default=lambda: calls.append(1) or {"BLOCK_M": 16})

    dispatch.clear_caches()
    try:
        assert resolve() == ({"BLOCK_M": 16}, "default")
        assert resolve() == ({"BLOCK_M": 16}, "default") and len(calls) == 1  # cached
        store.put(entry(attn(512), {"BLOCK_M": 128}, source_hash=get_family("attention").source_hash()))
        assert resolve() == ({"BLOCK_M": 128}, "store")
    finally:
        dispatch.clear_caches()


def test_a_store_write_drops_what_ops_cached_from_resolved_configs(cache, monkeypatch):
    """What an op caches per resolved config goes with the configs (``dispatch.on_clear``): the search's call shapes,
    which hold the config the op resolved for a call shape, after a store write as after ``clear_caches()``."""
    from tunelab.ops import dispatch
    from tunelab.ops import similarity as sim
    from tunelab.tuning.family import get_family

    monkeypatch.setattr(dispatch, "device_name", lambda index: "NVIDIA H200")
    dispatch.resolve("attention", 0, lambda: attn(512), ("test-op", 512), adapt=dict, default=dict)  # watches the store
    try:
        sim._SEARCH_SHAPES[("a call shape",)] = ("compiled", "plan", "layout", 0)
        sim._SEARCH_LAUNCHES[("a pointer set",)] = "launches"
        store.put(entry(attn(512), {"BLOCK_M": 128}, source_hash=get_family("attention").source_hash()))
        assert not sim._SEARCH_SHAPES and not sim._SEARCH_LAUNCHES
        sim._SEARCH_SHAPES[("a call shape",)] = ("compiled", "plan", "layout", 0)
        dispatch.clear_caches()
        assert not sim._SEARCH_SHAPES
    finally:
        dispatch.clear_caches()
