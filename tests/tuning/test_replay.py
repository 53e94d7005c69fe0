"""Replay end to end: seeding, TPE, gates, confirmation and verdict from recorded measurements, no GPU."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tunelab.errors import ConfigError, TunelabError
from tunelab.tuning.api import tune
from tunelab.tuning.backend import Arm
from tunelab.tuning.replay import ReplayBackend, load_replay, save_replay


def test_end_to_end_finds_the_optimum(toy_replay_path, toy_replay, tmp_path):
    best_key, best = toy_replay.optimum()
    r = tune("toy", replay=toy_replay_path, trials=60, seed=0, storage="memory", progress=False,
             results_path=tmp_path / "r.json", n_resamples=2000)
    # within 2% of the recorded optimum after 60 of 752 statically valid configs
    assert r.data["best_search"]["value"] <= best * 1.02
    assert r.data["mode"] == "replay" and r.data["store"] == {"written": False}
    conf = r.confirmation
    labels = [a.label for a in conf.arms]
    assert labels[:3] == ["candidate 1", "candidate 2", "candidate 3"]
    assert "default" in labels and "reference_lib" in labels and "slow_lib" in labels
    assert all(len(a.samples) == 100 for a in conf.arms)
    # the toy optimum is 30 us against a 36 us baseline: a clear win, and the best baseline is the faster one
    assert conf.best_baseline == "reference_lib"
    assert r.verdict == "win" and r.ci.low >= 1.10 and r.speedup == pytest.approx(36 / 30.2, rel=0.03)
    assert r.speedup_vs_default.estimate > 1.2
    lo, hi = r.ci
    assert lo < r.speedup < hi
    assert (tmp_path / "r.json").is_file()


def test_no_win_is_reported_honestly(toy_replay_path, tmp_path):
    data = json.loads(toy_replay_path.read_text())
    rng = np.random.default_rng(0)
    data["baselines"] = {"fast_lib": {"samples_us": (31.0 * np.exp(rng.normal(0, 0.02, 100))).tolist()}}
    p = tmp_path / "hard.json"
    save_replay(p, data)
    r = tune("toy", replay=p, trials=40, storage="memory", progress=False, save_results_file=False,
             n_resamples=2000, target_speedup=1.10)
    assert r.verdict == "no win"
    assert "no win" in r.verdict_text and "speedup over fast_lib" in r.verdict_text
    assert r.ci.low < 1.10


def test_replay_confirm_resamples_recorded_samples(toy_replay):
    b = ReplayBackend(toy_replay)
    key, _ = toy_replay.optimum()
    cfg = toy_replay.space.from_key(key)
    d = b.confirm([Arm("c", "config", config=cfg), Arm("r", "baseline", baseline="reference_lib"),
                   Arm("x", "baseline", baseline="nope")], rounds=50, seed=1)
    recorded = set(toy_replay.entries[key]["samples_us"])
    assert len(d.samples["c"]) == 50 and set(d.samples["c"]) <= recorded
    assert "x" in d.errors


def test_replay_errors(toy_replay_path, tmp_path):
    with pytest.raises(ConfigError, match="records family 'toy'"):
        tune("attention", replay=toy_replay_path, storage="memory", progress=False)
    with pytest.raises(ConfigError, match="does not exist"):
        tune("toy", replay=tmp_path / "missing.json", storage="memory", progress=False)
    with pytest.raises(ConfigError, match="is a folder; give the path of the file in it"):
        load_replay(tmp_path)
    bad = json.loads(toy_replay_path.read_text())
    bad["version"] = 99
    p = tmp_path / "v99.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(TunelabError, match="version 99"):
        load_replay(p)
    with pytest.raises(ConfigError, match="recorded problem"):
        tune("toy", {"M": 1, "N": 1, "dtype": "fp16"}, replay=toy_replay_path, storage="memory", progress=False)


@pytest.mark.parametrize("name", ["copy.json", "copy.json.gz"])
def test_replay_round_trip(toy_replay_path, tmp_path, name):
    a = load_replay(toy_replay_path)
    save_replay(tmp_path / name, a.raw)
    b = load_replay(tmp_path / name)
    assert a.digest() == b.digest() and a.optimum() == b.optimum() and a.raw == b.raw


def test_replay_family_takes_the_installed_derived_values_when_its_space_is_the_recorded_one(toy_replay,
                                                                                               monkeypatch):
    """The file cannot hold derived-value functions; the installed family's identical space supplies them (the gp
    sampler uses them as features), not its constraints (the recorded rejections decide validity). A space that
    changed since the recording is not used."""
    from tunelab.tuning import family as family_mod
    from tunelab.tuning.fake import ToyFamily, toy_space
    from tunelab.tuning.replay import ReplayFamily

    assert ReplayFamily(toy_replay).space(toy_replay.problem).derived[0].fn is None  # "toy" is not installed
    monkeypatch.setitem(family_mod._REGISTRY, "toy", ToyFamily)
    live = ReplayFamily(toy_replay).space(toy_replay.problem)
    assert live.to_dict() == toy_replay.space.to_dict()
    assert live.complete({"BLOCK_M": 64, "BLOCK_N": 32, "NUM_WARPS": 2, "NUM_STAGES": 2, "SWIZZLE": True,
                          "LAYOUT": "row"})["THREADS"] == 64
    assert all(c.predicate is None for c in live.constraints)

    class Changed(ToyFamily):
        def space(self, problem):
            return toy_space("toy/gemm-v2")

    monkeypatch.setitem(family_mod._REGISTRY, "toy", Changed)
    assert ReplayFamily(toy_replay).space(toy_replay.problem).derived[0].fn is None
