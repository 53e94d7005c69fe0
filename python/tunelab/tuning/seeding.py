"""Initial points of a study: a Latin hypercube over the space, and ``--seed-from`` sources.

Latin hypercube: scipy's ``qmc.LatinHypercube`` draws n points in [0, 1)^d so that every axis is covered by
n equal strata; :meth:`SearchSpace.from_unit` splits each axis evenly among the parameter's choices. A point
that lands on an invalid config (constraints, static gates) or repeats an earlier one is *repaired*: replaced
by the nearest valid config not yet chosen (Euclidean distance from the point to the centres of the configs'
cells), which keeps the design's spread; ties go to the first config in enumeration order. All of it is
deterministic for a given seed.

``--seed-from`` (:func:`seed_from`) adds, before the hypercube, the best configs of an earlier results file,
replay file or study (``study:NAME``), or the valid configs with the highest occupancy (``occupancy``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tunelab.errors import ConfigError
from tunelab.jsonfile import read_json
from tunelab.tuning.space import Config, SearchSpace

#: where a study's seeds come from, in the order they are enqueued (a trial's ``source``; ``seeds_enqueued`` counts
#: each): the family's default config, ``--seed-from``, the Latin hypercube
SEED_SOURCES = ("default", "seed_from", "lhs")


def _lhs(d: int, seed: int | None):
    from scipy.stats import qmc

    try:
        return qmc.LatinHypercube(d=d, rng=np.random.default_rng(seed))
    except TypeError:  # scipy < 1.15 spells it seed=
        return qmc.LatinHypercube(d=d, seed=np.random.default_rng(seed))


def lhs_configs(space: SearchSpace, n: int, is_valid: Callable[[Config], bool], seed: int | None = 0,
                valid_pool: Sequence[Config] | None = None, exclude: Sequence[str] = ()) -> list[Config]:
    """``n`` distinct valid configs from a Latin hypercube (fewer if the space has fewer valid configs).

    ``valid_pool`` (all valid configs, when the space is enumerable) enables nearest-valid repair; without it
    invalid points are replaced by further hypercube draws. ``exclude``: keys that must not be chosen
    (configs already in the study).
    """
    if n <= 0:
        return []
    chosen: list[Config] = []
    taken = set(exclude)
    sampler = _lhs(len(space.params), seed)
    points = sampler.random(n)
    pool_keys = pool_centers = None
    if valid_pool is not None:
        pool = list(valid_pool)
        pool_keys = [space.key(c) for c in pool]
        pool_centers = np.array([space.cell_center(c) for c in pool]) if pool else np.zeros((0, len(space.params)))
    for point in points:
        config = space.from_unit(point)
        key = space.key(config)
        if key not in taken and is_valid(config):
            chosen.append(config)
            taken.add(key)
            continue
        if pool_keys is not None:
            if len(pool_keys) == 0:
                break
            dist = np.linalg.norm(pool_centers - point[None, :], axis=1)
            for i in np.argsort(dist, kind="stable"):
                if pool_keys[i] not in taken:
                    chosen.append(pool[i])
                    taken.add(pool_keys[i])
                    break
            else:
                break  # every valid config is already chosen
        else:
            for extra in sampler.random(64):
                config = space.from_unit(extra)
                key = space.key(config)
                if key not in taken and is_valid(config):
                    chosen.append(config)
                    taken.add(key)
                    break
    return chosen


def top_configs_from_file(path: str | Path, k: int) -> list[Config]:
    """The ``k`` fastest measured configs of a results JSON or a replay file."""
    p = Path(path)
    data = read_json(p, "--seed-from file", missing_hint="pass a results JSON, a replay file, 'study:NAME' or "
                     "'occupancy'")
    rows: list[tuple[float, Config]] = []
    if data.get("format") == "tunelab.replay":
        for e in data["entries"]:
            if e["status"] == "ok" and e.get("samples_us"):
                rows.append((float(np.median(e["samples_us"])), e["config"]))
    elif data.get("schema") == "tunelab.results":
        for t in data.get("trials", []):
            if t.get("status") == "ok" and t.get("value") is not None:
                rows.append((float(t["value"]), t["config"]))
    else:
        raise ConfigError(f"--seed-from {str(p)!r} is neither a tunelab results file nor a replay file")
    rows.sort(key=lambda r: r[0])
    return [dict(c) for _, c in rows[:k]]


def top_configs_from_study(study, k: int) -> list[Config]:
    """The ``k`` fastest measured configs of an Optuna study made by the tuner."""
    from optuna.trial import TrialState

    from tunelab.tuning.study import info

    rows = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        ua = info(t)
        if ua.get("status") == "ok" and "config" in ua:
            rows.append((t.value, ua["config"]))
    rows.sort(key=lambda r: r[0])
    out, seen = [], set()
    for _, c in rows:
        key = json.dumps(c, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(dict(c))
        if len(out) >= k:
            break
    return out


def occupancy_ranked(configs: Sequence[Config], prepare: Callable[[Config], Any], k: int,
                     max_candidates: int = 256, seed: int = 0) -> list[Config]:
    """Valid configs ranked by the occupancy model (highest first, fewer registers breaking ties).

    ``prepare`` is the backend's host half (compile + compiled gates); configs it rejects are dropped. At most
    ``max_candidates`` configs are compiled (a seeded random subset when there are more).
    """
    configs = list(configs)
    if len(configs) > max_candidates:
        idx = np.random.default_rng(seed).choice(len(configs), size=max_candidates, replace=False)
        configs = [configs[i] for i in sorted(idx)]
    scored = []
    for c in configs:
        prep = prepare(c)
        if not prep.ok:
            continue
        occ = (prep.resources or {}).get("occupancy") or {}
        regs = int((prep.resources or {}).get("registers", 0))
        scored.append((-float(occ.get("occupancy", 0.0)), regs, len(scored), c))
    scored.sort(key=lambda s: s[:3])
    return [dict(s[3]) for s in scored[:k]]


def parse_seed_from(spec: str) -> tuple[str, str]:
    """Split a ``--seed-from`` value into (kind, argument): ("file", path), ("study", name), ("occupancy", "")."""
    if spec == "occupancy":
        return "occupancy", ""
    if spec.startswith("study:"):
        name = spec[len("study:"):]
        if not name:
            raise ConfigError("--seed-from study: needs a study name, e.g. study:attention|...")
        return "study", name
    return "file", spec
