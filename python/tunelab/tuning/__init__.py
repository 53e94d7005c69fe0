"""The tuner: search spaces, gates, Optuna studies, fault-isolated measurement, confirmation, store, replay.

Main entry point: :func:`tune` (re-exported as ``tunelab.tune``). Building blocks are in the submodules:
``space`` (SearchSpace, Param, Constraint), ``family`` (the TunableFamily protocol), ``kernel_family``
(tune a user's ``tunelab.Kernel``), ``driver`` (the search loop), ``worker`` (fault isolation), ``confirm``
(interleaved confirmation), ``results`` (TuneResult and the JSON schema), ``store`` (tuned-config store and
dispatch lookup), ``replay`` (recorded measurements).

Heavy imports (Optuna) happen on first use, so ``import tunelab`` stays fast.
"""
from __future__ import annotations

from typing import Any

from tunelab.tuning.family import (CompiledCandidate, NumericsReport, Rejection, TunableFamily, get_family,
                                   register_family)
from tunelab.tuning.space import Constraint, Derived, Param, SearchSpace


def tune(*args: Any, **kwargs: Any):
    """Tune a kernel family for a problem; see :func:`tunelab.tuning.api.tune` for every option."""
    from tunelab.tuning.api import tune as _tune

    return _tune(*args, **kwargs)


tune.__doc__ = """Tune a kernel family for a problem and return a TuneResult.

``tune("attention", problem, trials=120, seed_trials=20, sampler="auto", target_speedup=1.10, replay=None, ...)``;
see :func:`tunelab.tuning.api.tune` for every option."""


def __getattr__(name: str):
    # Lazy access to the heavier classes without importing Optuna at `import tunelab`.
    if name == "TuneResult":
        from tunelab.tuning.results import TuneResult

        return TuneResult
    if name == "KernelFamily":
        from tunelab.tuning.kernel_family import KernelFamily

        return KernelFamily
    if name == "GateConfig":
        from tunelab.tuning.gates import GateConfig

        return GateConfig
    if name == "make_problem":
        from tunelab.tuning.api import make_problem

        return make_problem
    if name in ("lookup", "lookup_entry"):
        from tunelab.tuning import store

        return getattr(store, name)
    raise AttributeError(f"module 'tunelab.tuning' has no attribute {name!r}")


__all__ = ["tune", "TuneResult", "SearchSpace", "Param", "Constraint", "Derived", "TunableFamily", "KernelFamily",
           "Rejection", "CompiledCandidate", "NumericsReport", "GateConfig", "get_family", "register_family",
           "lookup", "lookup_entry", "make_problem"]
