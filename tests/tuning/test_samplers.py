"""Samplers by name, the index/categorical encoding, and the valid-only grid."""
from __future__ import annotations

import pytest

from tunelab.errors import ConfigError
from tunelab.tuning.api import tune
from tunelab.tuning.samplers import SAMPLERS, Codec
from tunelab.tuning.space import Param, SearchSpace


def test_codec_round_trip(toy_family):
    space = toy_family.space(None)
    codec = Codec(space)
    d = codec.distributions()
    assert set(d) == {"BLOCK_M_idx", "BLOCK_N_idx", "NUM_WARPS_idx", "NUM_STAGES_idx", "SWIZZLE_idx", "LAYOUT_idx"}
    for c in list(space.enumerate())[:50]:
        assert codec.decode(codec.encode(c)) == c
    s3 = SearchSpace("c", [Param("KIND", ["a", "b", "c"])])
    assert list(Codec(s3).distributions()) == ["KIND"]  # unordered, 3+ choices: categorical
    with pytest.raises(ConfigError, match="different search space"):
        codec.decode({"X": 1})


@pytest.mark.parametrize("name", SAMPLERS)
def test_every_sampler_runs(name, toy_replay_path):
    r = tune("toy", replay=toy_replay_path, sampler=name, trials=25, seed_trials=5, storage="memory",
             progress=False, confirm=False, save_results_file=False)
    evaluated = [t["key"] for t in r.trials if t["evaluated"]]
    assert len(evaluated) == len(set(evaluated)) == 25
    assert r.data["best_search"]["value"] > 0


def test_grid_proposes_only_valid_configs(toy_replay_path):
    r = tune("toy", replay=toy_replay_path, sampler="grid", trials=100, seed_trials=0, storage="memory",
             progress=False, confirm=False, save_results_file=False)
    assert not any((t["reason"] or "").startswith("static.") for t in r.trials)
    assert sum(t["status"] == "duplicate" for t in r.trials) == 0


def test_unknown_sampler():
    with pytest.raises(ConfigError, match=r"unknown sampler 'bayes'; accepted samplers are \['auto'"):
        tune("toy", {"M": 1}, sampler="bayes")


def test_bad_budgets():
    with pytest.raises(ConfigError, match="trials=0"):
        tune("toy", {"M": 1}, trials=0)
    with pytest.raises(ConfigError, match="patience"):
        tune("toy", {"M": 1}, patience=0)
    with pytest.raises(ConfigError, match="target_speedup"):
        tune("toy", {"M": 1}, target_speedup=-1)


def test_patience_and_timeout_stop(toy_replay_path):
    r = tune("toy", replay=toy_replay_path, trials=500, patience=5, seed_trials=0, storage="memory",
             progress=False, confirm=False, save_results_file=False)
    assert r.data["stop_reason"].startswith("patience") and r.data["evaluations"] < 500
    r = tune("toy", replay=toy_replay_path, trials=100000, timeout=1.0, storage="memory", progress=False,
             confirm=False, save_results_file=False)
    assert r.data["stop_reason"] in ("timeout", "space exhausted")
    # in-flight candidates cancelled by a hard stop are marked, not left running
    assert all(t["state"] != "RUNNING" for t in r.trials)
