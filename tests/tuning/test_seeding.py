"""Latin-hypercube seeding: stratification per parameter, validity, repair, determinism; --seed-from sources."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from tunelab.errors import ConfigError
from tunelab.tuning.gates import static_rejection
from tunelab.tuning.seeding import lhs_configs, parse_seed_from, top_configs_from_file
from tunelab.tuning.space import Constraint, Param, SearchSpace


def test_each_choice_gets_its_share():
    # No constraints and n a multiple of every choice count: a Latin hypercube hits each stratum once, so
    # each choice of each parameter appears exactly n / len(choices) times.
    s = SearchSpace("u", [Param("A", [1, 2, 3, 4]), Param("B", ["x", "y"]), Param("C", [8, 16, 32, 64])])
    seeds = lhs_configs(s, 8, lambda c: True, seed=3)
    assert len(seeds) == 8
    for p in s.params:
        counts = Counter(c[p.name] for c in seeds)
        assert set(counts) == set(p.choices)
        assert all(v == 8 // len(p.choices) for v in counts.values())


def test_seeds_are_valid_distinct_and_deterministic(toy_family):
    s = toy_family.space(None)
    valid = lambda c: static_rejection(toy_family, s, c, None) is None  # noqa: E731
    pool = [c for c in s.enumerate() if valid(c)]
    a = lhs_configs(s, 20, valid, seed=0, valid_pool=pool)
    b = lhs_configs(s, 20, valid, seed=0, valid_pool=pool)
    c = lhs_configs(s, 20, valid, seed=1, valid_pool=pool)
    assert a == b != c
    assert len(a) == 20 and len({s.key(x) for x in a}) == 20
    assert all(valid(x) for x in a)
    # without a pool invalid points are replaced by further draws: still valid and distinct
    d = lhs_configs(s, 20, valid, seed=0)
    assert len(d) == 20 and all(valid(x) for x in d) and len({s.key(x) for x in d}) == 20


def test_repair_picks_nearest_valid_config():
    # Only A=1 is valid; a point in the A=4 stratum is repaired to the nearest valid cell with the same B.
    s = SearchSpace("r", [Param("A", [1, 2, 3, 4]), Param("B", [10, 20])],
                    constraints=[Constraint("only_a1", lambda c: c["A"] == 1)])
    pool = list(s.enumerate())
    seeds = lhs_configs(s, 2, lambda c: s.check(c)[0], seed=0, valid_pool=pool)
    assert sorted(c["B"] for c in seeds) == [10, 20] and all(c["A"] == 1 for c in seeds)
    # asking for more than exist returns every valid config once
    assert len(lhs_configs(s, 10, lambda c: s.check(c)[0], seed=0, valid_pool=pool)) == 2


def test_exclude_skips_known_configs():
    s = SearchSpace("e", [Param("A", [1, 2])])
    got = lhs_configs(s, 2, lambda c: True, seed=0, valid_pool=list(s.enumerate()), exclude=[s.key({"A": 1})])
    assert got == [{"A": 2}]


def test_seed_from_replay_file(toy_replay_path, toy_replay):
    top = top_configs_from_file(toy_replay_path, 3)
    med = toy_replay.measured()
    keys = sorted(med, key=med.get)[:3]
    assert [toy_replay.space.key(c) for c in top] == keys


def test_seed_from_parsing(tmp_path):
    assert parse_seed_from("occupancy") == ("occupancy", "")
    assert parse_seed_from("study:abc") == ("study", "abc")
    assert parse_seed_from("x.json") == ("file", "x.json")
    with pytest.raises(ConfigError):
        top_configs_from_file(tmp_path / "missing.json", 3)
    p = tmp_path / "other.json"
    p.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ConfigError, match="neither"):
        top_configs_from_file(p, 3)


def _tune_toy(**kw):
    from tunelab.tuning.api import tune
    from tunelab.tuning.fake import FakeBackend, ToyFamily

    kw.setdefault("family", ToyFamily())
    return tune(kw.pop("family"), {"M": 1}, backend=FakeBackend(), trials=8, seed_trials=4, storage="memory",
                progress=False, confirm=False, save_results_file=False, **kw)


def test_default_config_is_the_first_seed():
    from tunelab.tuning.fake import TOY_DEFAULT, ToyFamily

    r = _tune_toy()
    key = ToyFamily().space(None).key(TOY_DEFAULT)
    first = r.trials[0]
    assert (first["source"], first["key"], first["status"]) == ("default", key, "ok")
    assert [t["source"] for t in r.trials[1:5]] == ["lhs"] * 4  # the hypercube still gives seed_trials points
    assert sum(t["key"] == key for t in r.trials if t["evaluated"]) == 1  # the hypercube does not repeat it
    assert r.data["study"]["seeds_enqueued"] == {"default": 1, "seed_from": 0, "lhs": 4}
    assert r.data["options"]["seed_default"] is True
    # --seed-from counts its own seeds only (the default's seed is counted apart)
    r = _tune_toy(seed_from="occupancy", seed_from_k=3)
    assert [t["source"] for t in r.trials[:8]] == ["default"] + ["seed_from"] * 3 + ["lhs"] * 4
    assert r.data["study"]["seeds_enqueued"] == {"default": 1, "seed_from": 3, "lhs": 4}


def test_seed_default_off_and_a_rejected_default_is_skipped_with_its_reason():
    from tunelab.tuning.fake import ToyFamily

    r = _tune_toy(seed_default=False)
    assert "default" not in [t["source"] for t in r.trials]
    assert r.data["study"]["seeds_enqueued"]["default"] == 0

    class BigDefault(ToyFamily):  # a default the static gates reject (shared memory above 100 KB)
        def default_config(self, problem):
            return dict(super().default_config(problem), BLOCK_M=256, BLOCK_N=128, NUM_STAGES=4)

    class AlienDefault(ToyFamily):  # a default outside the space
        def default_config(self, problem):
            return dict(super().default_config(problem), BLOCK_N=256)

    r = _tune_toy(family=BigDefault())
    assert "default" not in [t["source"] for t in r.trials] and r.data["evaluations"] == 8
    assert r.data["study"]["seeds_enqueued"]["default_skipped"] == "rejected by the static gates for this problem"
    r = _tune_toy(family=AlienDefault())
    assert "default" not in [t["source"] for t in r.trials] and r.data["evaluations"] == 8
    assert "BLOCK_N=256 is not one of the accepted values" in r.data["study"]["seeds_enqueued"]["default_skipped"]
