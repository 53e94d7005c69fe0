"""The Gaussian-process surrogate and the ``gp`` sampler (the default on enumerable spaces)."""
from __future__ import annotations

import numpy as np
import pytest

from tunelab.tuning.api import tune
from tunelab.tuning.samplers import resolve_sampler
from tunelab.tuning.space import Param, SearchSpace
from tunelab.tuning.surrogate import MAX_CANDIDATES, GaussianProcess, expected_improvement, features


def test_features_encode_order_and_one_hot():
    space = SearchSpace("f", [Param("M", [16, 32, 64]), Param("L", ["a", "b", "c"]), Param("F", [False, True]),
                              Param("ONE", [7])])
    X = features(space, [{"M": 16, "L": "a", "F": False, "ONE": 7}, {"M": 64, "L": "c", "F": True, "ONE": 7},
                         {"M": 32, "L": "b", "F": False, "ONE": 7}])
    # M: position in [0, 1]; L: one-hot (3 columns); F: one 0/1 column; a one-choice parameter: no column
    assert X.tolist() == [[0.0, 1, 0, 0, 0], [1.0, 0, 0, 1, 1], [0.5, 0, 1, 0, 0]]


def test_gp_gradient_matches_finite_differences():
    from scipy.optimize import check_grad

    rng = np.random.default_rng(0)
    gp = GaussianProcess()
    gp.X = rng.random((30, 4))
    gp.z = np.sin(3 * gp.X @ rng.random(4))
    theta = rng.normal(size=6) * 0.5
    assert check_grad(lambda t: gp._nll(t)[0], lambda t: gp._nll(t)[1], theta) < 1e-4


def test_gp_interpolates_and_knows_what_it_does_not_know():
    rng = np.random.default_rng(1)
    X = rng.random((40, 2))
    y = np.sin(4 * X[:, 0]) + X[:, 1] ** 2
    gp = GaussianProcess().fit(X, y)
    mean, std = gp.predict(X)
    assert np.abs(mean - y).max() < 0.05
    Xt = rng.random((200, 2))
    mt, _ = gp.predict(Xt)
    assert np.abs(mt - (np.sin(4 * Xt[:, 0]) + Xt[:, 1] ** 2)).mean() < 0.05
    _, far = gp.predict(np.array([[5.0, 5.0]]))
    assert far[0] > 10 * std.max()
    # kriging believer: a pseudo-observation at the mean keeps the mean and collapses the uncertainty there
    p = np.array([[1.5, 1.5]])  # outside the data: uncertain
    m0, s0 = gp.predict(p)
    gp.condition(p)
    m1, s1 = gp.predict(p)
    assert abs(m1[0] - m0[0]) < 1e-6 and s1[0] < 0.5 * s0[0]


def test_expected_improvement_prefers_low_mean_and_high_uncertainty():
    ei = expected_improvement(np.array([0.0, -1.0, 0.0]), np.array([0.1, 0.1, 1.0]), best=0.0)
    assert ei[1] > ei[2] > ei[0] > 0


def test_auto_resolves_to_gp_on_enumerable_spaces_only():
    assert resolve_sampler("auto", 7812) == "gp"
    assert resolve_sampler("auto", None) == "tpe"
    assert resolve_sampler("auto", MAX_CANDIDATES + 1) == "tpe"
    assert resolve_sampler("TPE", 10) == "tpe"


def test_default_is_gp_without_local_search(toy_replay_path):
    r = tune("toy", replay=toy_replay_path, trials=30, seed_trials=5, storage="memory", progress=False,
             confirm=False, save_results_file=False)
    assert r.data["study"]["sampler"] == "gp" and r.data["options"]["local_every"] == 0
    sources = [t["source"] for t in r.trials if t["evaluated"]]
    assert sources[:6] == ["default"] + ["lhs"] * 5 and set(sources[6:]) == {"sampler"}
    # it chooses among valid configs only, each once: no static rejection, no duplicate
    assert not any((t["reason"] or "").startswith("static.") for t in r.trials)
    assert not any(t["status"] == "duplicate" for t in r.trials)


def test_gp_finds_the_toy_optimum_faster_than_random(toy_replay, toy_replay_path):
    """On the toy replay (600 measured configs), the model-based sampler reaches the optimum within 5% in fewer
    evaluations than random search, over the same seeds."""
    _, optimum = toy_replay.optimum()

    def evals_to_5pct(sampler, seed):
        hit = []

        def on_trial(info):
            if not hit and info["best"] is not None and info["best"] <= optimum * 1.05:
                hit.append(info["evaluated"])

        tune("toy", replay=toy_replay_path, sampler=sampler, trials=150, seed_trials=10, seed=seed,
             storage="memory", progress=False, confirm=False, save_results_file=False, on_trial=on_trial,
             stop_at=optimum * 1.05, lookahead=1, compile_workers=1)
        return hit[0] if hit else 151

    gp = [evals_to_5pct("gp", s) for s in range(4)]
    rnd = [evals_to_5pct("random", s) for s in range(4)]
    assert np.median(gp) < np.median(rnd), (gp, rnd)


def _ridge_space():
    """Two tile sizes whose ratio decides the latency (a derived value), and a layout flag."""
    from tunelab.tuning.space import Derived

    return SearchSpace("ridge", [Param("A", [1, 2, 4, 8, 16, 32, 64]), Param("B", [1, 2, 4, 8, 16, 32, 64]),
                                 Param("W", [2, 4]), Param("L", ["x", "y", "z"])],
                       derived=[Derived("THREADS", lambda c: 32 * c["W"]), Derived("RATIO", lambda c: c["A"] / c["B"]),
                                Derived("TAG", lambda c: f"t{c['W']}"), Derived("ONE", lambda c: 1)])


def _ridge_latency(c) -> float:
    import math

    return 10.0 * math.exp(0.4 * (math.log2(c["A"] / c["B"]) - 2) ** 2 + 0.02 * abs(math.log2(c["A"]) - 5)
                           + (0.0 if c["L"] == "y" else 0.3) + 0.05 * (c["W"] == 2))


def test_derived_values_become_log2_scaled_columns():
    space = _ridge_space()
    configs = list(space.enumerate())
    X = features(space, configs)
    base = features(space, configs, derived=False)
    # A, B, W, L one-hot (3) = 6 parameter columns; THREADS duplicates W, TAG is not a number, ONE is constant:
    # RATIO is the only derived column, log2(A/B) in [-6, 6] scaled to [0, 1]
    assert base.shape == (len(configs), 6) and X.shape == (len(configs), 7)
    assert np.array_equal(X[:, :6], base)
    ratio = np.array([np.log2(c["A"] / c["B"]) for c in configs])
    assert np.allclose(X[:, 6], (ratio + 6) / 12)
    # a space restored from JSON has no functions: parameters only
    restored = SearchSpace.from_dict(space.to_dict())
    assert features(restored, configs).shape == (len(configs), 6)


def test_gp_with_derived_features_finds_a_ridge_optimum_sooner():
    """On a landscape set by a derived value (the ratio of two tiles), the gp sampler with derived features reaches
    the optimum in fewer evaluations than without them, and both need under a third of random search's expectation."""
    import optuna

    from tunelab.tuning.samplers import Codec
    from tunelab.tuning.surrogate import SurrogateSampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = _ridge_space()
    configs = list(space.enumerate())
    best = min(_ridge_latency(c) for c in configs)
    codec = Codec(space)

    def evals_to_optimum(derived, seed):
        sampler = SurrogateSampler(codec, configs, seed=seed, n_startup=5, derived=derived)
        study = optuna.create_study(sampler=sampler)
        for n in range(1, len(configs) + 1):  # every config at most: the count is never capped
            trial = study.ask(codec.distributions())
            value = _ridge_latency(codec.decode(trial.params))
            study.tell(trial, value)
            if value <= best * 1.0001:
                return n
        return len(configs)

    with_derived = [evals_to_optimum(True, s) for s in range(5)]
    without = [evals_to_optimum(False, s) for s in range(5)]
    assert np.median(with_derived) < np.median(without), (with_derived, without)
    n_opt = sum(_ridge_latency(c) <= best * 1.0001 for c in configs)
    # random search's exact expectation is (N + 1) / (K + 1) = 147.5 here; the model must do far better
    assert np.median(without) < (len(configs) + 1) / (n_opt + 1) / 3, without
