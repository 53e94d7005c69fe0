"""The tuner on a real GPU: a 30-trial attention study on a small shape, and faulty kernels that fail their trials
while the study completes. Run with ``pytest -m gpu tests/test_tuner_gpu.py``."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    # a private store and study database; the compiled-kernel cache of the session is kept (shared, warm)
    import os

    kernels = os.environ.get("TUNELAB_CACHE_DIR")
    monkeypatch.setenv("TUNELAB_CACHE_DIR", str(tmp_path))
    if kernels:
        import shutil
        from pathlib import Path

        if (Path(kernels) / "kernels").is_dir():
            shutil.copytree(Path(kernels) / "kernels", tmp_path / "kernels", dirs_exist_ok=True)
    return tmp_path


def test_attention_study_small_shape(cache):
    pytest.importorskip("torch")
    import tunelab
    from tunelab.tuning import store
    from tunelab.tuning.api import make_problem

    problem = make_problem("attention", [4, 8, 512, 64], "fp16")
    r = tunelab.tune("attention", problem, trials=30, seed_trials=10, confirm_rounds=40, measure_timeout=30,
                     progress=False, results_path=cache / "result.json")
    d = r.data
    assert d["mode"] == "gpu" and d["study"]["isolated"]
    assert d["evaluations"] == 30
    assert d["gates"]["passed"] >= 10
    ok = [t for t in r.trials if t["status"] == "ok"]
    assert all(t["samples_summary"]["n"] >= 10 and t["value"] > 0 for t in ok)
    assert any(t.get("sm_clock_mhz") for t in ok) or d["env"].get("clocks") is None  # NVML optional
    conf = r.confirmation
    baselines = [a.label for a in conf.arms if a.kind == "baseline"]
    assert "sdpa_default" in baselines
    assert r.verdict in ("win", "no win") and r.ci.low <= r.speedup <= r.ci.high
    assert r.speedup_vs_default is not None or any("default" in n for n in conf.notes)
    assert set(d["timing"]) >= {"compile_wait_s", "measure_s", "confirm_s", "overhead_s"}
    # the confirmed winner is in the store and dispatch finds it for any shape of the bucket
    assert d["store"]["written"]
    device = d["device"]["name"]
    got = store.lookup("attention", device, make_problem("attention", [1, 2, 300, 64], "fp16"))
    assert got == r.best_config


def test_faulty_kernels_fail_their_trials_and_the_study_completes(cache):
    pytest.importorskip("torch")
    import tunelab
    from tunelab.tuning.examples import ScaleFamily

    faults = {"trap": [{"BLOCK": 256, "VEC": 2}], "illegal_address": [{"BLOCK": 512, "VEC": 1}],
              "hang": [{"BLOCK": 1024, "VEC": 4}]}
    fam = ScaleFamily(faults=faults)
    # the grid visits all 15 configs, so every faulty one is run once
    r = tunelab.tune(fam, {"n": 1 << 22}, sampler="grid", trials=15, seed_trials=0, measure_timeout=10,
                     confirm_rounds=20, progress=False, save_to_store=False, save_results_file=False)
    by_config = {(t["config"]["BLOCK"], t["config"]["VEC"]): t for t in r.trials if t["evaluated"]}
    assert len(by_config) == 15
    assert by_config[(256, 2)]["reason"] == "runtime.trap"
    assert by_config[(512, 1)]["reason"] == "runtime.trap"  # an illegal address poisons the context too
    assert by_config[(1024, 4)]["reason"] == "runtime.timeout"
    assert all(by_config[k]["state"] == "FAIL" for k in [(256, 2), (512, 1), (1024, 4)])
    assert sum(t["status"] == "ok" for t in by_config.values()) == 12
    assert r.data["study"]["worker_restarts"] == 3
    assert r.verdict in ("win", "no win")  # confirmation ran in a fresh, healthy worker
    assert "torch_mul" in [a.label for a in r.confirmation.arms]
