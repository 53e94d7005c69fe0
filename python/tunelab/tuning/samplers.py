"""Optuna samplers by name, and the encoding of a SearchSpace into Optuna distributions.

Encoding (:class:`Codec`): an ordered parameter (tile sizes) or a two-valued one (flags) becomes an integer
index ``<NAME>_idx`` in ``[0, n-1]``, so TPE's and CMA-ES's models can use the order of the choices; an
unordered parameter with three or more choices stays categorical under its own name. The decoded config is
stored on every trial (user attribute ``config``), so nothing downstream reads indices.

Samplers (``make_sampler``):

* ``auto`` (default of ``tune``): ``gp`` when the valid configs can be enumerated (at most
  :data:`tunelab.tuning.surrogate.MAX_CANDIDATES` of them), else ``tpe`` (see :func:`resolve_sampler`).
* ``gp``: a Gaussian-process model of log latency on the measured configs; each proposal is the unmeasured valid
  config of highest expected improvement, chosen among all of them (:mod:`tunelab.tuning.surrogate`). On the H200
  attention ground truth it reaches 5% of the optimum in about half the evaluations TPE with local search needs.
* ``tpe``: TPE, multivariate and grouped (models interactions between tile sizes and warps), with
  constant liar so that the candidates compiled ahead in parallel are not all the same point.
* ``random``: uniform; duplicates are answered from the study, so it behaves as sampling without replacement.
* ``grid``: every statically valid config once, in a seeded random order (:class:`ValidGridSampler`); unlike
  Optuna's GridSampler it never spends a trial on a config the constraints forbid.
* ``cmaes``: CMA-ES with margin (for discrete dimensions) on the index encoding; needs the ``cmaes`` package.
* ``nsga2``: Optuna's NSGA-II (a genetic algorithm; single objective here).
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial

from tunelab.errors import ConfigError
from tunelab.tuning.space import Config, SearchSpace

SAMPLERS = ("auto", "gp", "tpe", "random", "grid", "cmaes", "nsga2")


def check_sampler_name(name: str) -> str:
    """``name`` lower-cased when it names a sampler of :data:`SAMPLERS` (``nsgaii`` is taken for ``nsga2``);
    ConfigError naming the accepted ones otherwise."""
    lowered = str(name).lower()
    if lowered not in SAMPLERS and lowered != "nsgaii":
        raise ConfigError(f"unknown sampler {name!r}; accepted samplers are {list(SAMPLERS)} "
                          "(or pass an optuna sampler object)")
    return lowered


def _needs_listed_configs(name: str, codec: Codec) -> ConfigError:
    from tunelab.tuning.api import MAX_ENUMERATED

    return ConfigError(f"the {name} sampler chooses among every valid config, which are listed only for spaces up to "
                       f"{MAX_ENUMERATED:,} configs; {codec.space.name!r} has {codec.space.size():,}: use "
                       "sampler='tpe' (or 'auto'), or narrow the space")


class Codec:
    """Maps configs of a SearchSpace to Optuna params and back (see the module docstring)."""

    def __init__(self, space: SearchSpace):
        self.space = space
        self.entries: list[tuple[Any, str, str]] = []
        for p in space.params:
            if p.ordered or len(p) <= 2:
                self.entries.append((p, f"{p.name}_idx", "index"))
            else:
                self.entries.append((p, p.name, "categorical"))

    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna distribution of every encoded parameter."""
        out: dict[str, BaseDistribution] = {}
        for p, name, kind in self.entries:
            if kind == "index":
                out[name] = IntDistribution(0, len(p) - 1)
            else:
                out[name] = CategoricalDistribution(list(p.choices))
        return out

    def encode(self, config: Config) -> dict[str, Any]:
        """Optuna params of a config."""
        config = self.space.validate(config)
        out = {}
        for p, name, kind in self.entries:
            out[name] = p.index(config[p.name]) if kind == "index" else config[p.name]
        return out

    def decode(self, params: dict[str, Any]) -> Config:
        """Config of Optuna params (raises ConfigError for params of another encoding)."""
        out = {}
        for p, name, kind in self.entries:
            if name not in params:
                raise ConfigError(f"trial params {sorted(params)} lack {name!r}: the study was created for a "
                                  "different search space")
            v = params[name]
            out[p.name] = p.choices[int(v)] if kind == "index" else p.choices[p.index(v)]
        return out


def resolve_sampler(name: str, n_valid: int | None) -> str:
    """The sampler ``auto`` stands for: ``gp`` when the ``n_valid`` valid configs (None: not enumerable) are few
    enough to score on every ask, else ``tpe``; other names are returned lower-cased."""
    from tunelab.tuning.surrogate import MAX_CANDIDATES

    name = name.lower()
    if name != "auto":
        return name
    return "gp" if n_valid is not None and n_valid <= MAX_CANDIDATES else "tpe"


class ValidGridSampler(BaseSampler):
    """Visits each given config once, in an order shuffled by ``seed``; skips configs the study already has.

    When every config has been visited it falls back to random sampling (the driver notices the space is
    exhausted and stops first).
    """

    def __init__(self, codec: Codec, configs: Sequence[Config], seed: int | None = None):
        self._codec = codec
        order = np.random.default_rng(seed).permutation(len(configs))
        self._queue = [codec.encode(configs[i]) for i in order]
        self._fallback = optuna.samplers.RandomSampler(seed=seed)

    def infer_relative_search_space(self, study, trial):
        """The whole encoded space (every param is sampled jointly)."""
        return self._codec.distributions()

    def sample_relative(self, study, trial: FrozenTrial, search_space):
        """The next config of the shuffled list that the study does not have yet."""
        if not search_space:
            return {}
        seen = set()
        for t in study._get_trials(deepcopy=False, use_cache=True):
            if t.number != trial.number and t.params:
                seen.add(tuple(sorted(t.params.items())))
        for params in self._queue:
            if tuple(sorted(params.items())) not in seen:
                return {k: v for k, v in params.items() if k in search_space}
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        """Random fallback (only after every config was visited)."""
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)


def make_sampler(name: str, codec: Codec, seed: int | None = None, valid_configs: Sequence[Config] | None = None,
                 n_trials: int | None = None) -> BaseSampler:
    """The sampler called ``name`` (one of :data:`SAMPLERS`, ``auto`` resolved by :func:`resolve_sampler`), seeded."""
    name = resolve_sampler(check_sampler_name(name), None if valid_configs is None else len(valid_configs))
    if name == "tpe":
        with warnings.catch_warnings():
            # multivariate/group are marked experimental in Optuna; they are what makes TPE model interactions.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(multivariate=True, group=True, constant_liar=True, seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        if valid_configs is None:
            raise _needs_listed_configs(name, codec)
        return ValidGridSampler(codec, list(valid_configs), seed=seed)
    if name == "cmaes":
        try:
            import cmaes  # noqa: F401 - Optuna imports it lazily; fail early with a clear message
        except ImportError:
            raise ConfigError("sampler 'cmaes' needs the cmaes package: pip install cmaes") from None
        # Margin keeps CMA-ES from collapsing onto one value of a discrete dimension.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.CmaEsSampler(seed=seed, with_margin=True, warn_independent_sampling=False,
                                                n_startup_trials=1)
    if name == "gp":
        if valid_configs is None:
            raise _needs_listed_configs(name, codec)
        from tunelab.tuning.surrogate import SurrogateSampler

        return SurrogateSampler(codec, valid_configs, seed=seed)
    if name in ("nsga2", "nsgaii"):
        pop = 50 if n_trials is None else int(min(50, max(8, n_trials // 5)))
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=pop)
    raise AssertionError(f"sampler {name!r} passed check_sampler_name but has no constructor")
