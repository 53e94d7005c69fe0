"""A Gaussian-process surrogate over an enumerable space, and the sampler that ranks every unmeasured valid config.

Why: kernel spaces are small enough to enumerate after the static gates (attention d=64: 7,812 configs), so the
next config to measure need not be *sampled* from a density, as TPE does; it can be *chosen*: fit a model of
latency on the configs measured so far, score every unmeasured valid config, measure the best score. That is
Bayesian optimisation with an exact acquisition maximiser (the whole candidate set), and it generalises across
parameters (a fast BLOCK_N=128 config with Q in shared memory raises the prediction for its untried neighbours).

Model (:class:`GaussianProcess`): a GP on the log of the latency (latencies are positive and their differences
multiplicative), inputs :func:`features` (an ordered parameter is one coordinate, its choice's position scaled to
[0, 1]; an unordered one is one-hot, a two-valued one a single 0/1 coordinate; then one coordinate per numeric
value the space derives from the parameters, such as warps along M or shared memory, log2-scaled), a Matern-5/2
kernel with one length scale per coordinate (ARD), a constant mean and a noise term. Hyperparameters maximise the
log marginal likelihood (L-BFGS-B, warm-started from the previous fit, with a fixed restart).

Acquisition: expected improvement over the best measured log latency, maximised exactly over the unmeasured valid
configs. Configs still in flight (compiled ahead, not measured yet) are added as observations at the model's own
prediction ("kriging believer"): the mean does not move, but the uncertainty around them collapses, so the
candidates measured in parallel spread out instead of piling on one spot.

:class:`SurrogateSampler` plugs this into Optuna (sampler ``gp``). Before ``n_startup`` configs are measured it
proposes random valid configs (with the default Latin-hypercube seeds, that phase is already over).
"""
from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np
import optuna
from scipy.linalg import cho_solve, solve_triangular
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from tunelab.tuning.space import Config, SearchSpace
from tunelab.tuning.study import info


#: Largest candidate set the ``gp`` sampler scores on every ask (the default sampler falls back to TPE above it).
MAX_CANDIDATES = 200_000


def features(space: SearchSpace, configs: Sequence[Config], derived: bool = True) -> np.ndarray:
    """Model inputs of ``configs``: one column per ordered or two-valued parameter (choice position in [0, 1]),
    one-hot columns for an unordered parameter with three or more choices, then (``derived=True``) one column
    per numeric derived value the space declares (:func:`derived_features`)."""
    cols: list[np.ndarray] = []
    for p in space.params:
        idx = np.array([p.index(c[p.name]) for c in configs], dtype=float)
        n = len(p)
        if n == 1:
            continue
        if p.ordered or n == 2:
            cols.append(idx / (n - 1))
        else:
            for j in range(n):
                cols.append((idx == j).astype(float))
    if derived:
        cols.extend(derived_features(space, configs, cols))
    if not cols:
        return np.zeros((len(configs), 0))
    return np.stack(cols, axis=1)


def derived_features(space: SearchSpace, configs: Sequence[Config], existing: Sequence[np.ndarray] = ()
                     ) -> list[np.ndarray]:
    """Columns for the space's derived values (``SearchSpace.derived``: warps along M, tiles per warp, shared
    memory, ...), which carry interactions between parameters that a kernel on the raw parameters has to learn
    from data. A derived value becomes a column when it is numeric for every config and takes two or more values;
    a positive one is taken as its log2 (tile sizes and byte counts act multiplicatively); each column is scaled
    to [0, 1] over ``configs``. A column equal to one in ``existing`` or to an earlier one (``THREADS`` is
    ``NUM_WARPS`` rescaled) is left out. Derived values that cannot be computed (a space restored from JSON has
    no functions) give no column."""
    if not space.derived or not configs or any(d.fn is None for d in space.derived):
        return []
    try:
        full = [space.complete(c) for c in configs]
    except Exception:  # noqa: BLE001 - a derived value that fails on some config: use the parameters only
        return []
    out: list[np.ndarray] = []
    seen = [np.round(c, 9) for c in existing]
    for d in space.derived:
        vals = [f[d.name] for f in full]
        if not all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in vals):
            continue
        v = np.asarray(vals, dtype=float)
        if not np.all(np.isfinite(v)):
            continue
        if np.all(v > 0):
            v = np.log2(v)
        lo, hi = float(v.min()), float(v.max())
        if hi - lo <= 1e-12:
            continue
        col = (v - lo) / (hi - lo)
        r = np.round(col, 9)
        if any(np.array_equal(r, c) or np.array_equal(r, 1.0 - c) for c in seen):
            continue
        seen.append(r)
        out.append(col)
    return out


def _matern52(a: np.ndarray, b: np.ndarray, ls: np.ndarray) -> np.ndarray:
    from scipy.spatial.distance import cdist

    s5 = math.sqrt(5.0) * cdist(a / ls, b / ls)
    return (1.0 + s5 + s5 * s5 / 3.0) * np.exp(-s5)


class GaussianProcess:
    """GP regression with a Matern-5/2 ARD kernel, constant mean and Gaussian noise (see the module docstring).

    ``fit(X, y)`` standardises ``y`` and fits the hyperparameters; ``predict(Xs)`` gives the posterior mean and
    standard deviation in the units of ``y``; ``condition(Xp)`` adds pseudo-observations at the current mean.
    """

    #: bounds of the log hyperparameters: length scales, signal variance, noise variance (standardised y)
    LOG_LS = (math.log(0.05), math.log(20.0))
    LOG_SIG = (math.log(0.05), math.log(20.0))
    LOG_NOISE = (math.log(1e-4), math.log(1.0))

    def __init__(self):
        self.theta: np.ndarray | None = None

    def _unpack(self, theta: np.ndarray):
        d = self.X.shape[1]
        return np.exp(theta[:d]), math.exp(theta[d]), math.exp(theta[d + 1])

    def _nll(self, theta: np.ndarray):
        """Negative log marginal likelihood (plus the length-scale prior) and its gradient."""
        ls, sig, noise = self._unpack(theta)
        diff2 = (self.X[:, None, :] - self.X[None, :, :]) ** 2 / ls ** 2  # (n, n, d)
        s5 = np.sqrt(5.0 * diff2.sum(-1))
        e = np.exp(-s5)
        kern = (1.0 + s5 + s5 * s5 / 3.0) * e
        n = len(self.X)
        K = sig * kern + (noise + 1e-8) * np.eye(n)
        try:
            L = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:
            return 1e10, np.zeros_like(theta)
        alpha = cho_solve((L, True), self.z)
        # a weak log-normal prior on the length scales (centred on 1, the span of a coordinate) keeps a few
        # points from driving every length scale to a bound
        prior = 0.5 * ((theta[:-2] / 1.5) ** 2).sum()
        nll = float(0.5 * self.z @ alpha + np.log(np.diag(L)).sum() + prior)
        W = cho_solve((L, True), np.eye(n)) - np.outer(alpha, alpha)  # K^-1 - alpha alpha^T
        g = np.empty_like(theta)
        dk = sig * (5.0 / 3.0) * (1.0 + s5) * e  # dK/dlog l_d = dk * diff2[..., d]
        g[:-2] = 0.5 * np.einsum("ij,ij,ijd->d", W, dk, diff2) + theta[:-2] / 1.5 ** 2
        g[-2] = 0.5 * (W * (sig * kern)).sum()
        g[-1] = 0.5 * noise * np.trace(W)
        return nll, g

    def fit(self, X: np.ndarray, y: np.ndarray, optimize: bool = True) -> "GaussianProcess":
        """Fit to inputs ``X`` (n, d) and targets ``y`` (n,); ``optimize=False`` keeps the hyperparameters of
        the previous fit (the first fit always optimises them)."""
        from scipy.optimize import minimize

        self.X = np.asarray(X, float)
        y = np.asarray(y, float)
        self.mu, self.sd = float(y.mean()), float(y.std()) or 1.0
        self.z = (y - self.mu) / self.sd
        d = self.X.shape[1]
        if not optimize and self.theta is not None and len(self.theta) == d + 2:
            self._factor(self.X, self.z)
            return self
        bounds = [self.LOG_LS] * d + [self.LOG_SIG, self.LOG_NOISE]
        starts = [np.r_[np.zeros(d), 0.0, math.log(1e-2)]]
        if self.theta is not None and len(self.theta) == d + 2:
            starts.insert(0, self.theta)
        best = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for x0 in starts:
                r = minimize(self._nll, x0, jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 100})
                if best is None or r.fun < best.fun:
                    best = r
        self.theta = best.x
        self._factor(self.X, self.z)
        return self

    def _factor(self, X: np.ndarray, z: np.ndarray) -> None:
        ls, sig, noise = self._unpack(self.theta)
        K = sig * _matern52(X, X, ls) + (noise + 1e-8) * np.eye(len(X))
        self._Xc, self._zc, self._L = X, z, np.linalg.cholesky(K)
        self._alpha = cho_solve((self._L, True), z)

    def condition(self, Xp: np.ndarray) -> None:
        """Add pseudo-observations at ``Xp`` equal to the current posterior mean (hyperparameters unchanged)."""
        if len(Xp) == 0:
            return
        m, _ = self._predict_z(Xp)
        self._factor(np.vstack([self._Xc, Xp]), np.r_[self._zc, m])

    def _predict_z(self, Xs: np.ndarray):
        ls, sig, _ = self._unpack(self.theta)
        Ks = sig * _matern52(np.asarray(Xs, float), self._Xc, ls)
        m = Ks @ self._alpha
        v = solve_triangular(self._L, Ks.T, lower=True)
        var = np.maximum(sig - (v * v).sum(0), 1e-12)
        return m, np.sqrt(var)

    def predict(self, Xs: np.ndarray, chunk: int = 4096):
        """Posterior mean and standard deviation at ``Xs`` (units of ``y``), ``chunk`` rows at a time."""
        Xs = np.asarray(Xs, float)
        parts = [self._predict_z(Xs[i:i + chunk]) for i in range(0, len(Xs), chunk)] or [(np.zeros(0), np.zeros(0))]
        m, s = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        return self.mu + self.sd * m, self.sd * s


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    """EI of minimising, below ``best``."""
    from scipy.stats import norm

    std = np.maximum(std, 1e-12)
    u = (best - mean) / std
    return std * (u * norm.cdf(u) + norm.pdf(u))


class SurrogateSampler(BaseSampler):
    """Optuna sampler ``gp``: the unmeasured valid config of highest expected improvement (module docstring).

    Args:
        codec: the study's encoding (:class:`tunelab.tuning.samplers.Codec`).
        configs: every statically valid config (the candidate set).
        seed: seeds the random start-up proposals.
        n_startup: measured configs needed before the model is used.
        derived: also use the space's numeric derived values as model inputs (:func:`derived_features`).
    """

    def __init__(self, codec, configs: Sequence[Config], seed: int | None = None, n_startup: int = 8,
                 derived: bool = True):
        self._codec = codec
        self._space = codec.space
        self._configs = list(configs)
        self._index = {self._space.key(c): i for i, c in enumerate(self._configs)}
        self._X = features(self._space, self._configs, derived=derived)
        self._rng = np.random.default_rng(seed)
        self._gp = GaussianProcess()
        self._n_startup = int(n_startup)
        self._n_optimized = 0  # observations at the last hyperparameter optimisation
        self._fallback = optuna.samplers.RandomSampler(seed=seed)

    def infer_relative_search_space(self, study, trial):
        """The whole encoded space (configs are chosen jointly)."""
        return self._codec.distributions()

    def _key(self, t: FrozenTrial) -> str | None:
        try:
            return self._space.key(self._codec.decode(t.params))
        except Exception:  # noqa: BLE001 - a trial of another encoding: not ours to model
            return None

    def sample_relative(self, study, trial: FrozenTrial, search_space):
        """The next config to measure (see the class docstring)."""
        if not search_space or set(search_space) <= set(trial.system_attrs.get("fixed_params") or {}):
            return {}  # nothing to choose (an enqueued seed or local-search config)
        observed: dict[int, float] = {}
        taken: set[int] = set()
        pending: list[int] = []
        for t in study._get_trials(deepcopy=False, use_cache=True):
            if t.number == trial.number or not t.params:
                continue
            if t.state == TrialState.FAIL and info(t).get("status") in ("cancelled", "interrupted"):
                continue  # stopped before its measurement: the config may be proposed again (study.py)
            i = self._index.get(self._key(t))
            if i is None:
                continue
            taken.add(i)
            if t.state == TrialState.COMPLETE and t.value is not None and t.value > 0:
                observed[i] = float(t.value)
            elif t.state in (TrialState.RUNNING, TrialState.WAITING):
                pending.append(i)
        free = np.array([i for i in range(len(self._configs)) if i not in taken], dtype=int)
        if len(free) == 0:
            return {}
        if len(observed) < self._n_startup:
            choice = int(free[self._rng.integers(len(free))])
        else:
            idx = np.array(sorted(observed))
            y = np.log([observed[i] for i in idx])
            # re-optimise the hyperparameters while data is scarce, then every 10% more observations
            optimize = len(idx) < 30 or len(idx) >= self._n_optimized * 1.1
            if optimize:
                self._n_optimized = len(idx)
            self._gp.fit(self._X[idx], y, optimize=optimize)
            self._gp.condition(self._X[[i for i in pending if i not in observed]])
            mean, std = self._gp.predict(self._X[free])
            ei = expected_improvement(mean, std, float(y.min()))
            choice = int(free[int(np.argmax(ei))])
        params = self._codec.encode(self._configs[choice])
        return {k: v for k, v in params.items() if k in search_space}

    def sample_independent(self, study, trial, param_name, param_distribution):
        """Random fallback (a parameter outside the joint space; not expected)."""
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)
