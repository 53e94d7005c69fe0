"""``tunelab.tune``: one call from a family and a problem to a confirmed, stored, explained result."""
from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import optuna

from tunelab.errors import ConfigError, TunelabError
from tunelab.tuning import confirm as _confirm
from tunelab.tuning.backend import Backend
from tunelab.tuning.driver import SearchDriver, SearchOptions, default_compile_workers
from tunelab.tuning.family import DTYPES, TunableFamily, get_family, stable_hash
from tunelab.tuning.gates import GateConfig, static_rejection
from tunelab.env import fingerprint
from tunelab.tuning.results import SCHEMA, VERSION, TuneResult, save_results, utcnow
from tunelab.tuning.samplers import Codec, check_sampler_name, make_sampler, resolve_sampler
from tunelab.tuning.seeding import (SEED_SOURCES, lhs_configs, occupancy_ranked, parse_seed_from,
                                    top_configs_from_file, top_configs_from_study)
from tunelab.tuning.study import (device_slug, fail_interrupted, info, make_study_name, open_storage, redact,
                                  trial_record)

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: Spaces up to this many configs are enumerated once per study (the valid pool the grid and gp samplers,
#: occupancy seeding, nearest-valid LHS repair and exhaustion checks use); above it the tuner samples.
MAX_ENUMERATED = 2_000_000


def _in_notebook() -> bool:
    return "ipykernel" in sys.modules


def _resolve(family, problem, replay, backend, gates, isolate_arch):
    """(family object, problem, backend, replay data or None)."""
    from tunelab.tuning import replay as _replay

    if replay is not None:
        data = replay if isinstance(replay, _replay.ReplayData) else _replay.load_replay(replay)
        fam_name = family if isinstance(family, str) else getattr(family, "name", None)
        if fam_name is not None and fam_name != data.family:
            raise ConfigError(f"the replay file records family {data.family!r}, not {fam_name!r}; "
                              f"tune {data.family!r} with this file or record {fam_name!r}")
        fam = _replay.ReplayFamily(data)
        if problem is not None:
            wanted = fam.problem_dict(problem) if not isinstance(family, TunableFamily) else \
                family.problem_dict(problem)
            if wanted and {k: wanted.get(k) for k in data.problem} != data.problem:
                raise ConfigError(f"the replay file recorded problem {data.problem}, not {wanted}; replay tunes "
                                  "only the recorded problem (omit the shape, or record this one)")
        return fam, data.problem, (backend or _replay.ReplayBackend(data)), data
    fam = get_family(family)
    if problem is None:
        raise ConfigError(f"tune({fam.name!r}) needs a problem (for attention: shape, dtype, causal), or replay=")
    if backend is None:
        import tunelab
        from tunelab.errors import NoDeviceError
        from tunelab.tuning.family_backend import FamilyBackend

        ok, why = tunelab.gpu_available()
        if not ok:
            raise NoDeviceError(f"tuning {fam.name!r} measures on a GPU, and there is none here: {why} "
                                "To tune from recorded measurements, pass replay=FILE (--replay FILE).")
        backend = FamilyBackend(fam, problem, gates=gates, arch=isolate_arch)
    return fam, problem, backend, None


def _progress(enabled: bool | None):
    if enabled is None:
        enabled = sys.stderr.isatty() or _in_notebook()
    if not enabled:
        from contextlib import nullcontext

        return nullcontext(None)
    from tunelab.tuning.progress import SearchProgress

    return SearchProgress()


def tune(family: str | TunableFamily = "attention", problem: Any = None, *, trials: int = 120,
         seed_trials: int = 20, sampler: str | optuna.samplers.BaseSampler = "auto", seed: int = 0,
         timeout: float | None = None, patience: int | None = None, target_speedup: float = 1.10, top_k: int = 3,
         confirm_rounds: int = 100,
         confirm: bool = True, storage: str | None = None, study_name: str | None = None,
         replay: str | os.PathLike | Any = None, seed_from: str | None = None, seed_from_k: int = 10,
         backend: Backend | None = None, isolate: bool | None = None, compile_workers: int | None = None,
         lookahead: int | None = None, gates: GateConfig | None = None, measure_timeout: float = 60.0,
         arch: str | None = None, progress: bool | None = None, save_to_store: bool | None = None,
         results_path: str | os.PathLike | None = None, save_results_file: bool = True,
         stop_at: float | None = None, on_trial: Callable[[dict], None] | None = None,
         n_resamples: int = 9999, local_every: int | None = None, local_width: int = 5,
         seed_default: bool = True) -> TuneResult:
    """Find the fastest correct config of ``family`` for ``problem`` on this GPU and prove it.

    Search (``trials`` evaluations; first the family's default config (``seed_default``: it is the config tuning
    is compared against, and a sensible start), then ``seed_trials`` Latin-hypercube seeds; ``sampler`` one of
    ``auto | gp | tpe | random | grid | cmaes | nsga2`` or an Optuna sampler object (``auto``: ``gp``, a
    Gaussian-process model choosing among all valid configs, when they can be enumerated, else ``tpe``; see
    :mod:`tunelab.tuning.samplers`), optional ``timeout`` seconds and ``patience`` evaluations; once the seeds are
    through, one proposal in ``local_every`` is a one-change neighbour of the ``local_width`` best configs, see
    :mod:`tunelab.tuning.local_search`; the default is 3 with TPE and 0 (off) with the other samplers, which then
    run as their names say), then
    confirmation (``top_k`` best + default config + every baseline, ``confirm_rounds`` interleaved rounds,
    bootstrap CIs) and a verdict against ``target_speedup``. The study lives in ``storage`` (default: SQLite
    under the cache dir) and resumes when the same call is made again. ``replay=FILE`` replaces the GPU by
    recorded measurements. A confirmed best config of a real (not replayed) run is written to the tuned-config
    store unless ``save_to_store=False``.

    Returns a :class:`~tunelab.tuning.results.TuneResult`.
    """
    t_total = time.perf_counter()
    if isinstance(sampler, str):
        sampler = check_sampler_name(sampler)
    if local_every is not None and (not isinstance(local_every, int) or local_every == 1 or local_every < 0):
        raise ConfigError(f"local_every={local_every!r} is not accepted; give 0 (no local search) or an integer "
                          ">= 2 (one proposal in that many is a local-search one; default 3 with TPE)")
    for name, value, lo in (("trials", trials, 1), ("seed_trials", seed_trials, 0), ("top_k", top_k, 1),
                            ("confirm_rounds", confirm_rounds, 3)):
        if not isinstance(value, int) or value < lo:
            raise ConfigError(f"{name}={value!r} is not accepted; give an integer >= {lo}")

    if not isinstance(local_width, int) or local_width < 1:
        raise ConfigError(f"local_width={local_width!r} is not accepted; give an integer >= 1 (default 5)")
    if patience is not None and patience < 1:
        raise ConfigError(f"patience={patience!r} is not accepted; give an integer >= 1 or None")
    if timeout is not None and timeout <= 0:
        raise ConfigError(f"timeout={timeout!r} is not accepted; give seconds > 0 or None")
    if not (target_speedup > 0):
        raise ConfigError(f"target_speedup={target_speedup!r} is not accepted; give a number > 0 (e.g. 1.10)")
    gates = gates or GateConfig()
    fam, problem, backend, replay_data = _resolve(family, problem, replay, backend, gates, arch)
    space = fam.space(problem)
    default_config = fam.default_config(problem)
    device = dict(backend.device_info() or {})
    device_name = device.get("name", "unknown device")
    mode = backend.mode
    problem_key = fam.problem_key(problem)
    source_hash = fam.source_hash() or ""
    extra = f"replay={replay_data.digest()}" if replay_data is not None else ""
    name = study_name or make_study_name(fam.name, problem_key, device_name, source_hash, space, mode, extra)
    storage_obj = open_storage(storage)

    codec = Codec(space)

    def is_valid(c):
        return static_rejection(fam, space, c, problem) is None

    valid_pool = None
    if space.size() <= MAX_ENUMERATED:
        valid_pool = [c for c in space.enumerate(valid_only=False) if is_valid(c)]  # is_valid checks the space too
        if not valid_pool:
            raise TunelabError(f"no config of {space.name!r} passes the static gates for {problem_key}; "
                               "nothing to tune")
    if isinstance(sampler, str):
        sampler = resolve_sampler(sampler, None if valid_pool is None else len(valid_pool))
    if local_every is None:
        local_every = 3 if sampler == "tpe" else 0
    if isinstance(sampler, str):
        sampler_obj = make_sampler(sampler, codec, seed=seed, valid_configs=valid_pool, n_trials=trials)
    else:  # a user's own optuna sampler
        sampler_obj, sampler = sampler, type(sampler).__name__
    study = optuna.create_study(storage=storage_obj, study_name=name, direction="minimize", sampler=sampler_obj,
                                load_if_exists=True)
    interrupted = fail_interrupted(study)
    resumed = len(study.get_trials(deepcopy=False))
    if "tunelab" not in study.user_attrs:
        study.set_user_attr("tunelab", {"family": fam.name, "problem": fam.problem_dict(problem),
                                        "problem_key": problem_key, "device": device_name, "mode": mode,
                                        "source_hash": source_hash, "space": space.to_dict(), "created": utcnow()})

    # Seeding happens once per study; a resumed study keeps its (possibly still waiting) seeds.
    seeds_info: dict[str, Any] = dict.fromkeys(SEED_SOURCES, 0)
    if not study.user_attrs.get("seeded"):
        existing = {info(t).get("key") for t in study.get_trials(deepcopy=False)}
        chosen: list[tuple[dict, str]] = []

        def admit(config: dict, source: str) -> str | None:
            """Queue ``config`` as a seed from ``source``; or say why not (not a config of the space, e.g. one of
            an older space; statically rejected; already in the study)."""
            try:
                config = space.validate(config)
            except ConfigError as e:
                return f"not a config of {space.name!r}: {e}"
            if not is_valid(config):
                return "rejected by the static gates for this problem"
            key = space.key(config)
            if key in existing:
                return "already in the study"
            chosen.append((config, source))
            existing.add(key)
            seeds_info[source] += 1
            return None

        if seed_default and (why := admit(default_config, "default")) is not None:
            seeds_info["default_skipped"] = why
        if seed_from:
            kind, arg = parse_seed_from(seed_from)
            if kind == "file":
                configs = top_configs_from_file(arg, seed_from_k)
            elif kind == "study":
                configs = top_configs_from_study(optuna.load_study(study_name=arg, storage=storage_obj), seed_from_k)
            else:
                if valid_pool is None:
                    raise ConfigError(f"--seed-from occupancy ranks every valid config, but {space.name!r} has "
                                      f"{space.size():,} configs (more than {MAX_ENUMERATED:,} are not listed): "
                                      "seed from a file or study instead, or narrow the space")
                configs = occupancy_ranked(valid_pool, backend.prepare, seed_from_k, seed=seed)
            for c in configs:
                admit(c, "seed_from")  # configs of an older space or already seeded are skipped, not fatal
        lhs = lhs_configs(space, seed_trials, is_valid, seed=seed, valid_pool=valid_pool, exclude=list(existing))
        chosen += [(c, "lhs") for c in lhs]
        seeds_info["lhs"] = len(lhs)
        for c, source in chosen:
            study.enqueue_trial(codec.encode(c), user_attrs={"source": source})
        study.set_user_attr("seeded", True)

    from tunelab.tuning.worker import make_evaluator

    evaluator = make_evaluator(backend, isolate, timeout=measure_timeout)
    options = SearchOptions(trials=trials, timeout=timeout, patience=patience,
                            compile_workers=compile_workers or default_compile_workers(), lookahead=lookahead,
                            stop_at=stop_at, ordered=(mode != "gpu"), local_every=local_every,
                            local_width=local_width)
    confirmation = None
    t_confirm = 0.0
    worker_info: dict = {}
    restarts = 0
    try:
        with _progress(progress) as bar:
            callbacks = [cb for cb in (on_trial, getattr(bar, "update", None)) if cb is not None]

            def notify(info):
                for cb in callbacks:
                    cb(info)

            driver = SearchDriver(study, fam, problem, space, backend, evaluator, options, on_trial=notify,
                                  valid_pool=valid_pool, seed=seed)
            if bar is not None:
                bar.start(driver)
            stop_reason = driver.run()
        if confirm and stop_reason != "interrupted" and driver.best is not None:
            try:
                worker_info = evaluator.start() or {}
                baseline_names = backend_baselines(backend, fam, problem)
                t0 = time.perf_counter()
                confirmation = _confirm.run_confirmation(
                    evaluator, driver.memory, space, default_config, baseline_names, top_k=top_k,
                    rounds=confirm_rounds, target=target_speedup, seed=seed, n_resamples=n_resamples)
                t_confirm = time.perf_counter() - t0
            except KeyboardInterrupt:
                stop_reason = "interrupted (during confirmation)"
        restarts = evaluator.restarts
    finally:
        evaluator.close()

    trials_out = [trial_record(t) for t in study.get_trials(deepcopy=False)]
    best = driver.best
    total = time.perf_counter() - t_total
    clock = driver.clock
    timing = {
        "total_s": round(total, 3), "search_s": round(clock.search_s, 3),
        "compile_wait_s": round(clock.compile_wait_s, 3), "compile_cpu_s": round(clock.compile_cpu_s, 3),
        "measure_s": round(clock.measure_s, 3), "confirm_s": round(t_confirm, 3),
        "sampler_s": round(clock.sampler_s, 3),
        "overhead_s": round(max(0.0, total - clock.compile_wait_s - clock.measure_s - t_confirm), 3),
    }
    data = {
        "schema": SCHEMA, "version": VERSION, "created": utcnow(), "mode": mode, "backend": backend.describe(),
        "env": fingerprint(), "device": dict(device, **{k: v for k, v in worker_info.items() if k != "pid"}),
        "family": fam.name, "problem": fam.problem_dict(problem), "problem_key": problem_key,
        "source_hash": source_hash,
        "study": {"name": name, "storage": redact(storage if storage else "default sqlite"),
                  "sampler": sampler, "seed": seed, "trials_before_this_run": resumed,
                  "interrupted_trials_marked_failed": interrupted, "seeds_enqueued": seeds_info,
                  "worker_restarts": restarts, "isolated": bool(getattr(evaluator, "isolated", False))},
        "options": {"trials": trials, "seed_trials": seed_trials, "timeout": timeout, "patience": patience,
                    "target_speedup": target_speedup, "top_k": top_k, "confirm_rounds": confirm_rounds,
                    "compile_workers": options.compile_workers, "lookahead": options.lookahead,
                    "measure_timeout": measure_timeout, "gates": gates.to_dict(), "seed_from": seed_from,
                    "local_every": local_every, "local_width": local_width, "seed_default": seed_default},
        "space": space.to_dict(), "default_config": default_config,
        "stop_reason": stop_reason, "evaluations": driver.evaluated, "duplicates": driver.duplicates,
        "trials": trials_out, "gates": driver.gates.to_dict(),
        "best_search": None if best is None else {"config": space.from_key(_key_of(driver, best)),
                                                  "value": best.value, "trial": best.trial},
        "confirmation": confirmation.to_dict() if confirmation else None,
        "verdict": confirmation.verdict.to_dict() if confirmation and confirmation.verdict else None,
        "timing": timing, "store": {"written": False},
    }
    result = TuneResult(data)
    if save_to_store is None:
        save_to_store = mode == "gpu"
    if save_to_store and confirmation is not None and confirmation.best is not None:
        if mode != "gpu":
            warnings.warn("replayed or fake results are never written to the tuned-config store", stacklevel=2)
        else:
            from tunelab.tuning import store

            path = store.put_result(result, fam)
            data["store"] = {"written": True, "path": str(path)}
    if save_results_file:
        path = Path(results_path) if results_path else _default_results_path(name)
        save_results(path, data)
        data["path"] = str(path)
    return result


def _key_of(driver: SearchDriver, known) -> str:
    for key, k in driver.memory.by_key.items():
        if k is known:
            return key
    raise KeyError("internal: the study's best trial has no config in the search memory")


def make_problem(family: str | TunableFamily, shape, dtype: str = "fp16", **flags: Any) -> Any:
    """A problem from a shape, a dtype and flags, as ``tunelab tune --shape --dtype --causal`` builds it.

    Uses the family's ``problem_from_cli`` (attention: ``shape`` is ``(B, H, S, D)``).
    """
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype!r} is not accepted; accepted dtypes are {list(DTYPES)}")
    fam = get_family(family)
    shape = [int(x) for x in shape]
    return fam.problem_from_cli(shape, dtype, dict(flags))


def backend_baselines(backend: Backend, fam: TunableFamily, problem: Any) -> list[str]:
    """Names of the baselines to confirm against: the backend's own list if it has one, else the family's."""
    names = getattr(backend, "baseline_names", None)
    if callable(names):
        got = names()
        if got is not None:
            return list(got)
    return list((fam.baselines(problem) or {}).keys())


def _default_results_path(study_name: str) -> Path:
    from tunelab.paths import cache_dir

    stamp = time.strftime("%Y%m%d-%H%M%S")
    slug = device_slug(study_name)[:80]
    return cache_dir() / "results" / f"{slug}-{stable_hash(study_name)[:6]}-{stamp}.json"
