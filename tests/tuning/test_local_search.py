"""Local search: one-change neighbourhoods, the proposer's walk over the best configs, the driver's schedule."""
from __future__ import annotations

import pytest

from tunelab.errors import ConfigError
from tunelab.tuning.api import tune
from tunelab.tuning.local_search import LocalSearch, neighbors
from tunelab.tuning.space import Param, SearchSpace

SPACE = SearchSpace("t", [Param("TILE", [16, 32, 64, 128]), Param("LAYOUT", ["a", "b", "c"]),
                          Param("FLAG", [False, True])])


def test_neighbors_adjacent_for_ordered_all_for_unordered():
    n = neighbors(SPACE, {"TILE": 32, "LAYOUT": "b", "FLAG": False})
    assert {(c["TILE"], c["LAYOUT"], c["FLAG"]) for c in n} == {
        (16, "b", False), (64, "b", False),      # ordered: adjacent choices only (not 128)
        (32, "a", False), (32, "c", False),      # unordered: every other choice
        (32, "b", True)}
    edge = neighbors(SPACE, {"TILE": 128, "LAYOUT": "a", "FLAG": True})
    assert [c["TILE"] for c in edge if c["TILE"] != 128] == [64]  # no neighbour past the last choice


def test_propose_skips_taken_and_invalid_and_moves_down_the_ranking():
    invalid = {"TILE=64"}
    ls = LocalSearch(SPACE, lambda c: f"TILE={c['TILE']}" not in invalid, every=2, width=2, seed=0)
    best = {"TILE": 32, "LAYOUT": "b", "FLAG": False}
    second = {"TILE": 128, "LAYOUT": "c", "FLAG": True}
    ranked = [(SPACE.key(best), best), (SPACE.key(second), second)]
    taken = {SPACE.key(best), SPACE.key(second)}
    got = []
    while True:
        c = ls.propose(ranked, lambda k: k in taken)
        if c is None:
            break
        assert c["TILE"] != 64 and SPACE.key(c) not in taken
        taken.add(SPACE.key(c))
        got.append(c)
    # best's valid neighbours (16/b/F, 32/a/F, 32/c/F, 32/b/T) first, then second's (64 invalid: 128/a/T,
    # 128/b/T, 128/c/F)
    assert {(c["TILE"], c["LAYOUT"], c["FLAG"]) for c in got[:4]} == {(16, "b", False), (32, "a", False),
                                                                      (32, "c", False), (32, "b", True)}
    assert all(c["TILE"] == 128 for c in got[4:]) and len(got) == 7  # then None: both neighbourhoods exhausted


def test_schedule_and_argument_errors():
    ls = LocalSearch(SPACE, lambda c: True, every=3)
    assert [ls.wants_slot() for _ in range(6)] == [False, False, True, False, False, True]
    with pytest.raises(ConfigError, match="every=1"):
        LocalSearch(SPACE, lambda c: True, every=1)
    with pytest.raises(ConfigError, match="width=0"):
        LocalSearch(SPACE, lambda c: True, width=0)


def _run(path, **kw):
    # the local search is on by default with TPE (the default sampler, gp, chooses among all valid configs)
    kw.setdefault("sampler", "tpe")
    return tune("toy", replay=path, trials=40, seed_trials=8, storage="memory", progress=False, confirm=False,
                save_results_file=False, seed=3, **kw)


def test_driver_gives_every_third_slot_to_local_search_after_the_seeds(toy_replay_path):
    r = _run(toy_replay_path)
    sources = [t["source"] for t in r.trials if t["evaluated"]]
    assert sources[:9] == ["default"] + ["lhs"] * 8  # seeds first (the default config, then LHS), untouched
    n_local = sources.count("local")
    assert n_local >= 6, sources  # ~ one in three of the 32 proposals after the seeds
    # every local proposal is one change away from a config measured before it
    space = None
    from tunelab.tuning.fake import ToyFamily

    space = ToyFamily().space(None)
    seen = []
    for t in r.trials:
        if not t["evaluated"]:
            continue
        if t["source"] == "local":
            diffs = [min(sum(a != b for a, b in zip(space.to_indices(t["config"]), space.to_indices(s))) for s in
                         seen)]
            assert diffs[0] == 1
        seen.append(t["config"])
    assert r.data["options"]["local_every"] == 3


def test_local_search_off(toy_replay_path):
    r = _run(toy_replay_path, local_every=0)
    assert all(t["source"] != "local" for t in r.trials)
    # other samplers run as their names say unless asked for local search
    r = _run(toy_replay_path, sampler="random")
    assert all(t["source"] != "local" for t in r.trials) and r.data["options"]["local_every"] == 0
    r = _run(toy_replay_path, sampler="random", local_every=2)
    assert any(t["source"] == "local" for t in r.trials)
    with pytest.raises(ConfigError, match="local_every=1"):
        _run(toy_replay_path, local_every=1)
