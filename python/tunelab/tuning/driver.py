"""The study driver: ask the sampler, gate, compile ahead, measure in the worker, tell, stop on budget.

One search step, for a candidate the sampler proposes:

1. **Known?** A config the study already measured is answered with the recorded value (Optuna's samplers
   repeat points in discrete spaces); one it rejected or that failed is told PRUNED again with the same
   reason. Nothing is measured twice. A config already in flight waits for that measurement.
2. **Static gates** (space constraints, family's static gates): told PRUNED with the reason code. Free.
3. **Compile ahead**: the config goes to a thread pool (the core's compiler releases the GIL) while the GPU
   measures earlier candidates; ``lookahead`` candidates are in flight (TPE's constant liar keeps them apart).
4. **Compiled gates** (registers, spills, occupancy) -> PRUNED with reason.
5. **Measure** in the worker: numerics gate, memory gate, timing. Measured -> COMPLETE with the median (µs);
   numerics/memory rejection -> PRUNED; trap/crash/timeout/error -> FAIL with reason (and remembered, so the
   config is never run again).

Proposals: the sampler's, except that once the seeds are through one ask in ``local_every`` (default 3) is given
to the local search (:mod:`tunelab.tuning.local_search`): a fresh one-change neighbour of the best measured
configs, enqueued as a fixed trial (source ``local``) so the sampler sees its result like any other.

Budget: ``trials`` counts *evaluations*, i.e. distinct configs that reached compilation; duplicates and
static rejections cost nothing and do not count. It is the study's total, so a resumed study continues up to
it. ``timeout`` bounds the search's wall clock (confirmation comes after), ``patience`` stops when the best
has not improved for that many evaluations. Ctrl-C stops cleanly: the trials in flight are marked cancelled
and the study can be resumed by running the same command again.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
import optuna
from optuna.trial import TrialState

from tunelab import stats
from tunelab.tuning.backend import Backend, Outcome, Prepared
from tunelab.tuning.family import Rejection, TunableFamily
from tunelab.tuning.gates import GateTable, static_rejection
from tunelab.tuning.local_search import LocalSearch
from tunelab.tuning.samplers import Codec
from tunelab.tuning.space import Config, SearchSpace
from tunelab.tuning.study import ATTR, Known, Memory, info, jsonable

_DETAIL_MAX = 2000


def default_compile_workers() -> int:
    """Threads compiling ahead: the machine's cores, at most 8 (NVRTC is CPU-bound; more buys little)."""
    return max(1, min(8, os.cpu_count() or 1))


@dataclass
class SearchOptions:
    """Budgets and knobs of the search phase."""

    trials: int = 120
    timeout: float | None = None
    patience: int | None = None
    compile_workers: int = field(default_factory=default_compile_workers)
    lookahead: int | None = None
    stop_at: float | None = None           # stop once the best median is <= this (benchmarks)
    max_duplicate_streak: int = 25         # then inject an unevaluated valid config
    max_asks_factor: int = 50              # hard cap on asks: factor * trials + 1000
    ordered: bool = True                   # measure in ask order (deterministic) vs first compiled
    local_every: int = 3                   # after seeding, one proposal in this many is a local-search one (0: off)
    local_width: int = 5                   # local search refines the neighbours of this many best configs

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


@dataclass
class Clock:
    """Wall-clock accounting of the search (seconds)."""

    search_s: float = 0.0
    compile_wait_s: float = 0.0
    compile_cpu_s: float = 0.0
    measure_s: float = 0.0
    sampler_s: float = 0.0


@dataclass
class _Pending:
    trial: Any
    config: Config
    key: str
    source: str
    future: cf.Future
    eval_index: int  # 1-based position among evaluations (patience counts from it)
    followers: list = field(default_factory=list)


class SearchDriver:
    """Runs the search phase of one study (see the module docstring)."""

    def __init__(self, study: optuna.Study, family: TunableFamily, problem: Any, space: SearchSpace,
                 backend: Backend, evaluator, options: SearchOptions,
                 on_trial: Callable[[dict], None] | None = None, valid_pool: list[Config] | None = None,
                 seed: int = 0):
        self.study = study
        self.family = family
        self.problem = problem
        self.space = space
        self.codec = Codec(space)
        self.backend = backend
        self.evaluator = evaluator
        self.opts = options
        self.on_trial = on_trial
        self._valid_pool = valid_pool
        self.rng = np.random.default_rng(seed + 7919)
        self.memory = Memory.from_study(study)
        self.gates = GateTable()
        self.clock = Clock()
        self.evaluated = 0
        self.duplicates = 0
        self.history: list[tuple[int, float]] = []  # (evaluation index, value) of measured trials, in order
        self.local: LocalSearch | None = None
        if options.local_every:
            self.local = LocalSearch(space, lambda c: static_rejection(family, space, c, problem) is None,
                                     every=options.local_every, width=options.local_width, seed=seed)
        self._seeding = True
        self._rebuild_counts()

    # -- state from the study ------------------------------------------------------------------------------------
    def _rebuild_counts(self) -> None:
        for t in self.study.get_trials(deepcopy=False):
            ua = info(t)
            if ua.get("status") in ("ok", "rejected", "failed"):
                self.gates.add(None if ua["status"] == "ok" else ua.get("reason"))
                if ua.get("evaluated"):
                    self.evaluated += 1
                    if ua["status"] == "ok" and t.value is not None:
                        self.history.append((self.evaluated, float(t.value)))
            elif ua.get("status") == "duplicate":
                self.duplicates += 1

    @property
    def best(self) -> Known | None:
        """Best measured config so far."""
        return self.memory.best()

    def since_improvement(self) -> int:
        """Evaluations since the best value was first reached."""
        if not self.history:
            return self.evaluated
        best_at = min(self.history, key=lambda h: (h[1], h[0]))[0]
        return self.evaluated - best_at

    def valid_pool(self) -> list[Config] | None:
        """Every statically valid config, as ``tune()`` enumerated it; None for spaces too big to enumerate
        (``api.MAX_ENUMERATED``)."""
        return self._valid_pool

    # -- telling ---------------------------------------------------------------------------------------------------
    def _set_attrs(self, trial, config: Config, key: str, status: str, reason: str | None, record: dict,
                   evaluated: bool, duplicate_of: int | None = None) -> None:
        attrs: dict[str, Any] = {"config": config, "key": key, "status": status, "reason": reason}
        if evaluated:
            attrs["evaluated"] = True
        if duplicate_of is not None:
            attrs["duplicate_of"] = duplicate_of
        if record:
            attrs["record"] = record
        trial.set_user_attr(ATTR, jsonable(attrs))

    def _tell(self, trial, state: TrialState, value: float | None = None) -> None:
        t0 = time.perf_counter()
        if state == TrialState.COMPLETE:
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=state)
        self.clock.sampler_s += time.perf_counter() - t0

    def _tell_known(self, trial, config: Config, key: str, known: Known) -> None:
        """Answer a repeated config from the study's memory (no measurement)."""
        self.duplicates += 1
        if known.status == "ok":
            self._set_attrs(trial, config, key, "duplicate", None, {}, False, known.trial)
            self._tell(trial, TrialState.COMPLETE, known.value)
        else:
            self._set_attrs(trial, config, key, "duplicate", known.code, {"detail": known.detail[:200]}, False,
                            known.trial)
            self._tell(trial, TrialState.PRUNED)

    def _finish(self, item: _Pending, status: str, rejection: Rejection | None, outcome: Outcome | None,
                prepared: Prepared | None) -> None:
        """Record the outcome of an evaluated candidate on its trial (and on followers that repeated it)."""
        record: dict[str, Any] = {"source": item.source}
        if prepared is not None:
            record["resources"] = prepared.resources
            record["compile_s"] = round(prepared.compile_s, 4)
        value = None
        code = rejection.code if rejection else None
        detail = rejection.detail if rejection else ""
        if outcome is not None:
            record["measure_s"] = round(outcome.measure_s, 4)
            record["sm_clock_mhz"] = outcome.sm_clock_mhz
            if outcome.errors:
                record["errors"] = outcome.errors
            if outcome.extra:
                record["extra"] = outcome.extra
            if outcome.status == "ok":
                value = outcome.value
                record["samples_summary"] = stats.summarize(outcome.samples)
                record["samples_us"] = [round(float(x), 4) for x in outcome.samples[:1000]]
            else:
                code, detail = outcome.code, outcome.detail
        if detail:
            record["detail"] = detail[:_DETAIL_MAX]
        self._set_attrs(item.trial, item.config, item.key, status, code, record, True)
        if status == "ok":
            self._tell(item.trial, TrialState.COMPLETE, value)
            known = Known("ok", item.trial.number, value=value)
            self.history.append((item.eval_index, value))
        elif status == "rejected":
            self._tell(item.trial, TrialState.PRUNED)
            known = Known("rejected", item.trial.number, code=code, detail=detail)
        else:
            self._tell(item.trial, TrialState.FAIL)
            known = Known("failed", item.trial.number, code=code, detail=detail)
        self.memory.by_key[item.key] = known
        self.gates.add(None if status == "ok" else code)
        for follower in item.followers:
            self._tell_known(follower, item.config, item.key, known)
        self._notify(item.trial.number, status, code, value)

    def _cancel(self, item: _Pending, why: str) -> None:
        item.future.cancel()
        for trial in [item.trial, *item.followers]:
            try:
                trial.set_user_attr(ATTR, jsonable({"config": item.config, "key": item.key, "status": "cancelled",
                                                    "reason": why}))
                self._tell(trial, TrialState.FAIL)
            except Exception:  # noqa: BLE001 - already finished, or storage gone; resume marks it interrupted
                pass
        self.evaluated -= 1  # the candidate was counted when submitted; it was never evaluated

    def _fail_running(self, why: str) -> None:
        """Fail trials still RUNNING after a stop (e.g. Ctrl-C while the sampler was creating one)."""
        from tunelab.tuning.study import fail_interrupted

        try:
            fail_interrupted(self.study, status=why)
        except Exception:  # noqa: BLE001 - best effort; a resume marks them anyway
            pass

    def _notify(self, number: int, status: str, code: str | None, value: float | None) -> None:
        if self.on_trial is None:
            return
        best = self.best
        self.on_trial({"number": number, "status": status, "reason": code, "value": value,
                       "evaluated": self.evaluated, "trials": self.opts.trials,
                       "best": best.value if best else None, "rejected": self.gates.rejected,
                       "duplicates": self.duplicates})

    # -- candidates ------------------------------------------------------------------------------------------------
    def _seeding_over(self) -> bool:
        """True once no enqueued seed waits in the study (checked until it first holds)."""
        if self._seeding:
            self._seeding = bool(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        return not self._seeding

    def _ranked(self):
        """(key, config) of the measured configs, fastest first."""
        ok = sorted(((k.value, k.trial, key) for key, k in self.memory.by_key.items() if k.status == "ok"))
        for _, _, key in ok:
            yield key, self.space.from_key(key)

    def _enqueue_local(self, inflight: dict) -> None:
        """Give this slot to the local search when its turn has come and it has a fresh neighbour."""
        if self.local is None or not self._seeding_over() or not self.local.wants_slot():
            return
        config = self.local.propose(self._ranked(), lambda k: k in self.memory or k in inflight)
        if config is not None:
            self.study.enqueue_trial(self.codec.encode(config), user_attrs={"source": "local"})

    def _inject(self, inflight: dict) -> bool:
        """Enqueue a random valid config the study has not seen; False when none is left."""
        pool = self.valid_pool()
        if pool is not None:
            fresh = [c for c in pool if (k := self.space.key(c)) not in self.memory and k not in inflight]
            if not fresh:
                return False
            config = fresh[int(self.rng.integers(len(fresh)))]
        else:
            for _ in range(1000):
                idx = [int(self.rng.integers(len(p))) for p in self.space.params]
                config = self.space.from_indices(idx)
                k = self.space.key(config)
                if k not in self.memory and k not in inflight and \
                        static_rejection(self.family, self.space, config, self.problem) is None:
                    break
            else:
                return False
        self.study.enqueue_trial(self.codec.encode(config), user_attrs={"source": "injected"})
        return True

    def run(self) -> str:
        """Search until a budget stops it; returns the stop reason."""
        opts = self.opts
        lookahead = opts.lookahead or (opts.compile_workers + 1)
        dists = self.codec.distributions()
        pool = cf.ThreadPoolExecutor(max_workers=opts.compile_workers, thread_name_prefix="tunelab-compile")
        pending: collections.deque[_Pending] = collections.deque()
        inflight: dict[str, _Pending] = {}
        asks = 0
        max_asks = opts.max_asks_factor * opts.trials + 1000
        dup_streak = 0
        asking = True
        reason = None
        t_start = time.perf_counter()

        def timed_prepare(config):
            t0 = time.perf_counter()
            try:
                prep = self.backend.prepare(config)
            except Exception as exc:  # noqa: BLE001 - a compiler crash on one config must not end the study
                code = "compile.error" if type(exc).__name__ == "CompileError" else "runtime.error"
                first = str(exc).strip().splitlines()
                prep = Prepared(Rejection(code, "\n".join(first[:30])))
            dt = time.perf_counter() - t0
            if not prep.compile_s:
                prep.compile_s = dt
            return prep

        # Ctrl-C: the first one asks for a clean stop between steps (never in the middle of a storage write,
        # which could leave the SQLite file locked), the second one interrupts at once.
        interrupts = [0]

        def on_sigint(signum, frame):
            interrupts[0] += 1
            if interrupts[0] >= 2:
                raise KeyboardInterrupt
            print("\ntunelab: stopping after the current measurement (Ctrl-C again to stop at once)",
                  file=sys.stderr, flush=True)

        previous_handler = None
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            previous_handler = signal.signal(signal.SIGINT, on_sigint)

        def hard_stop(why: str) -> None:
            nonlocal asking
            asking = False
            while pending:
                item = pending.popleft()
                inflight.pop(item.key, None)
                self._cancel(item, why)

        try:
            while True:
                if interrupts[0]:
                    raise KeyboardInterrupt
                while asking and len(pending) < lookahead:
                    if interrupts[0]:
                        raise KeyboardInterrupt
                    if self.evaluated >= opts.trials:
                        asking, reason = False, reason or "trials"
                        break
                    if self._valid_pool is not None and self.evaluated >= len(self._valid_pool):
                        asking, reason = False, "space exhausted"  # every valid config is in the study
                        break
                    if opts.timeout is not None and time.perf_counter() - t_start >= opts.timeout:
                        reason = "timeout"
                        hard_stop("timeout")
                        break
                    if asks >= max_asks:
                        asking, reason = False, "sampler stuck (ask cap reached)"
                        break
                    t0 = time.perf_counter()
                    self._enqueue_local(inflight)
                    trial = self.study.ask(dists)
                    self.clock.sampler_s += time.perf_counter() - t0
                    asks += 1
                    config = self.codec.decode(trial.params)
                    key = self.space.key(config)
                    source = trial.user_attrs.get("source", "sampler")
                    known = self.memory.get(key)
                    if known is not None or key in inflight:
                        if known is not None:
                            self._tell_known(trial, config, key, known)
                            self._notify(trial.number, "duplicate", known.code, known.value)
                        else:
                            inflight[key].followers.append(trial)
                            self.duplicates += 1
                        dup_streak += 1
                        if dup_streak >= opts.max_duplicate_streak:
                            dup_streak = 0
                            if not self._inject(inflight):
                                asking, reason = False, "space exhausted"
                        continue
                    rej = static_rejection(self.family, self.space, config, self.problem)
                    if rej is not None:
                        self._set_attrs(trial, config, key, "rejected", rej.code,
                                        {"detail": rej.detail[:_DETAIL_MAX], "source": source}, False)
                        self._tell(trial, TrialState.PRUNED)
                        self.memory.by_key[key] = Known("rejected", trial.number, code=rej.code, detail=rej.detail)
                        self.gates.add(rej.code)
                        self._notify(trial.number, "rejected", rej.code, None)
                        dup_streak += 1  # free answers: a sampler stuck on invalid configs also gets unstuck
                        if dup_streak >= opts.max_duplicate_streak:
                            dup_streak = 0
                            if not self._inject(inflight):
                                asking, reason = False, "space exhausted"
                        continue
                    dup_streak = 0
                    self.evaluated += 1
                    item = _Pending(trial, config, key, source, pool.submit(timed_prepare, config), self.evaluated)
                    pending.append(item)
                    inflight[key] = item
                if not pending:
                    break
                # Next candidate: in ask order (reproducible), or whichever compiled first (throughput).
                if opts.ordered:
                    item = pending[0]
                else:
                    done = [p for p in pending if p.future.done()]
                    if not done:
                        t0 = time.perf_counter()
                        cf.wait([p.future for p in pending], return_when=cf.FIRST_COMPLETED)
                        self.clock.compile_wait_s += time.perf_counter() - t0
                        done = [p for p in pending if p.future.done()]
                    item = done[0]
                t0 = time.perf_counter()
                prepared = item.future.result()
                self.clock.compile_wait_s += time.perf_counter() - t0
                self.clock.compile_cpu_s += prepared.compile_s
                if not prepared.ok:
                    outcome, status = None, "rejected"
                else:
                    t0 = time.perf_counter()
                    outcome = self.evaluator.measure(item.config)
                    self.clock.measure_s += time.perf_counter() - t0
                    status = outcome.status if outcome.status in ("ok", "rejected", "failed") else "failed"
                # Leave the item pending until it is told: a Ctrl-C before this point cancels it cleanly.
                pending.remove(item)
                inflight.pop(item.key, None)
                self._finish(item, status, prepared.rejection if outcome is None else None, outcome, prepared)
                best = self.best
                if opts.stop_at is not None and best is not None and best.value <= opts.stop_at:
                    reason = "target reached"
                    hard_stop("target reached")
                elif opts.patience is not None and self.since_improvement() >= opts.patience:
                    reason = f"patience ({opts.patience} evaluations without improvement)"
                    hard_stop("patience")
                elif opts.timeout is not None and time.perf_counter() - t_start >= opts.timeout:
                    reason = "timeout"
                    hard_stop("timeout")
        except KeyboardInterrupt:
            reason = "interrupted"
            hard_stop("interrupted")
            self._fail_running("interrupted")
        except BaseException:
            # e.g. the worker cannot start at all: leave no trial RUNNING behind, then report the error
            hard_stop("aborted")
            self._fail_running("aborted")
            raise
        finally:
            if previous_handler is not None:
                signal.signal(signal.SIGINT, previous_handler)
            pool.shutdown(wait=False, cancel_futures=True)
            self.clock.search_s += time.perf_counter() - t_start
        return reason or "trials"
