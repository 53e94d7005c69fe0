"""Fault isolation: run a backend's measurements in a worker subprocess that may trap, crash or hang.

A kernel that hits an illegal address poisons the CUDA context of its process for good, a bad launch can
kill the process, and a kernel stuck in a loop never returns. None of that may take the study down. So the
device half of a :class:`~tunelab.tuning.backend.Backend` runs in a child process started with
``multiprocessing``'s *spawn* method (a fresh interpreter: CUDA state is never inherited through fork), and
the parent talks to it over a pipe with a deadline on every request:

* child reports a :class:`~tunelab.errors.PoisonedContextError` -> outcome ``runtime.trap``, child exits;
* child dies (segfault, abort, ``os._exit``) -> ``runtime.crash`` with its exit code or signal;
* no answer before the deadline -> the child is killed, outcome ``runtime.timeout``.

In every case the next request starts a fresh worker. The study itself lives in the parent, so nothing
already recorded is lost.

:class:`InProcessEvaluator` runs the same backend in the calling process (replay, tests, and kernels whose
family cannot be pickled, e.g. defined in a notebook); it cannot survive a trap and says so.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import time
import traceback
import warnings
from typing import Any

from tunelab.errors import TunelabError
from tunelab.tuning.backend import Arm, Backend, ConfirmData, Outcome
from tunelab.tuning.space import Config


def _is_poisoned(exc: BaseException) -> bool:
    try:
        from tunelab.errors import PoisonedContextError
    except ImportError:  # pragma: no cover
        return False
    if isinstance(exc, PoisonedContextError):
        return True
    # torch reports sticky errors as RuntimeError text; after one, the process's context is unusable too.
    text = str(exc).lower()
    return any(s in text for s in ("illegal memory access", "illegal address", "unspecified launch failure",
                                   "device-side assert", "misaligned address", "illegal instruction"))


def _run_guarded(fn, *args) -> tuple[str, Any]:
    """Run ``fn``; classify an exception as ("trap", text) or ("error", text)."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - every candidate error becomes a trial outcome
        text = f"{type(exc).__name__}: {exc}"
        return ("trap" if _is_poisoned(exc) else "error"), text + "\n" + traceback.format_exc(limit=6)


class Evaluator:
    """Where measurements run. ``measure`` never raises for a candidate's fault; it returns an Outcome."""

    isolated: bool = False

    def start(self) -> dict:
        """Start (if needed) and return device facts from the backend's ``setup``."""
        raise NotImplementedError

    def measure(self, config: Config) -> Outcome:
        """Measure one config (see :meth:`Backend.measure`)."""
        raise NotImplementedError

    def confirm(self, arms: list[Arm], rounds: int, seed: int = 0) -> ConfirmData:
        """Interleaved confirmation (see :meth:`Backend.confirm`)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the worker."""

    @property
    def restarts(self) -> int:
        """How many times the worker was restarted after a fault."""
        return 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class InProcessEvaluator(Evaluator):
    """Runs the backend in this process. A trap poisons this process's CUDA context, so after one the
    evaluator refuses further work (raising TunelabError) instead of producing garbage."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self._info: dict | None = None
        self._poisoned: str | None = None

    def start(self) -> dict:
        """Start the worker if needed; return the device facts of its setup."""
        if self._info is None:
            self._info = self.backend.setup() or {}
        return self._info

    def _check_alive(self):
        if self._poisoned:
            raise TunelabError("the CUDA context of this process was poisoned by an earlier candidate "
                               f"({self._poisoned}); restart the process, or tune with isolate=True")

    def measure(self, config: Config) -> Outcome:
        """Measure one config; faults come back as failed outcomes, never as exceptions."""
        self._check_alive()
        self.start()
        t0 = time.perf_counter()
        kind, value = _run_guarded(self.backend.measure, config)
        if kind == "ok":
            return value
        if kind == "trap":
            self._poisoned = value.splitlines()[0]
            return Outcome.failed("runtime.trap", value, measure_s=time.perf_counter() - t0)
        return Outcome.failed("runtime.error", value, measure_s=time.perf_counter() - t0)

    def confirm(self, arms: list[Arm], rounds: int, seed: int = 0) -> ConfirmData:
        """Interleaved confirmation; raises TunelabError if the worker fails during it."""
        self._check_alive()
        self.start()
        return self.backend.confirm(arms, rounds, seed)


# -- the child side -----------------------------------------------------------------------------------------------
def _worker_main(conn, backend_blob: bytes) -> None:
    """Entry point of the worker subprocess: unpickle the backend, set it up, serve requests until EOF."""
    # The parent handles Ctrl-C and stops the study cleanly; a worker dying of the same SIGINT mid-measurement
    # would be recorded as a crash, so the worker ignores it and is shut down by the parent instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        backend = pickle.loads(backend_blob)
        info = backend.setup() or {}
        info = dict(info, pid=os.getpid())
        conn.send(("ready", info))
    except Exception as exc:  # noqa: BLE001
        conn.send(("setup_error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"))
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        op = msg[0]
        if op == "close":
            return
        if op == "measure":
            kind, value = _run_guarded(backend.measure, msg[1])
        elif op == "confirm":
            kind, value = _run_guarded(backend.confirm, msg[1], msg[2], msg[3])
        else:
            kind, value = "error", f"unknown request {op!r}"
        conn.send((kind, value))
        if kind == "trap":
            # The context is poisoned: every later CUDA call here would fail. Exit; the parent restarts us.
            conn.close()
            os._exit(3)


class WorkerFailure(Exception):
    """Internal: the worker did not answer a request (crash or timeout)."""

    def __init__(self, code: str, detail: str):
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class SubprocessEvaluator(Evaluator):
    """Runs the backend's device half in a spawned worker process, restarted after every fault.

    ``timeout`` bounds one measurement (seconds), ``startup_timeout`` the worker's start-up (CUDA init,
    input creation), ``confirm_timeout`` a whole confirmation. ``max_consecutive_restarts`` stops a study
    whose worker cannot stay up at all (e.g. a broken driver) instead of looping forever.
    """

    isolated = True

    def __init__(self, backend: Backend, timeout: float = 60.0, startup_timeout: float = 180.0,
                 confirm_timeout: float = 900.0, max_consecutive_restarts: int = 8):
        self.backend_blob = pickle.dumps(backend)
        self.timeout = float(timeout)
        self.startup_timeout = float(startup_timeout)
        self.confirm_timeout = float(confirm_timeout)
        self.max_consecutive_restarts = max_consecutive_restarts
        self._ctx = mp.get_context("spawn")
        self._proc = None
        self._conn = None
        self._info: dict | None = None
        self._restarts = 0
        self._consecutive = 0
        self._started_once = False

    @property
    def restarts(self) -> int:
        """How many times the worker was restarted after a fault."""
        return self._restarts

    @property
    def pid(self) -> int | None:
        """Process id of the current worker (None when not running)."""
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> dict:
        """Start the worker if needed; return the device facts of its setup."""
        if self._proc is not None and self._proc.is_alive():
            return self._info or {}
        if self._consecutive >= self.max_consecutive_restarts:
            raise TunelabError(f"the measurement worker failed {self._consecutive} times in a row; giving up. "
                               "Check the driver (tunelab devices) and the last failure reason in the study.")
        if self._started_once:
            self._restarts += 1
        self._started_once = True
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_worker_main, args=(child, self.backend_blob), daemon=True,
                                 name="tunelab-worker")
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        try:
            kind, value = self._receive(self.startup_timeout)
        except WorkerFailure as exc:
            self._kill()
            self._consecutive += 1
            raise TunelabError(f"the measurement worker did not start ({exc.code}: {exc.detail})") from None
        if kind != "ready":
            self._kill()
            raise TunelabError(f"the measurement worker could not set up the device:\n{value}")
        self._info = value
        return value

    def _receive(self, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerFailure("runtime.timeout", f"no answer within {timeout:.1f} s; worker killed")
            try:
                ready = self._conn.poll(min(left, 0.25))
            except (EOFError, OSError):
                ready = True
            if ready:
                try:
                    return self._conn.recv()
                except (EOFError, OSError):
                    self._proc.join(timeout=5)
                    raise WorkerFailure("runtime.crash", self._exit_text()) from None
            if not self._proc.is_alive():
                # Drain a message sent just before exiting (a trap report) before declaring a crash.
                if self._conn.poll(0):
                    continue
                raise WorkerFailure("runtime.crash", self._exit_text())

    def _exit_text(self) -> str:
        code = self._proc.exitcode
        if code is None:
            return "worker stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"worker killed by {name}"
        return f"worker exited with code {code}"

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=10)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        """Stop the worker."""
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(("close",))
                self._proc.join(timeout=5)
            except (OSError, BrokenPipeError):
                pass
        self._kill()

    # -- requests -------------------------------------------------------------------------------------------------
    def _request(self, msg: tuple, timeout: float):
        self.start()
        t0 = time.perf_counter()
        try:
            self._conn.send(msg)
            kind, value = self._receive(timeout)
        except WorkerFailure as exc:
            self._kill()
            self._consecutive += 1
            return "failed", (exc.code, exc.detail), time.perf_counter() - t0
        except (BrokenPipeError, OSError) as exc:
            self._kill()
            self._consecutive += 1
            return "failed", ("runtime.crash", f"pipe to the worker broke: {exc}"), time.perf_counter() - t0
        if kind == "trap":
            self._proc.join(timeout=10)
            self._kill()
            self._consecutive += 1
            return "failed", ("runtime.trap", value), time.perf_counter() - t0
        self._consecutive = 0
        return kind, value, time.perf_counter() - t0

    def measure(self, config: Config) -> Outcome:
        """Measure one config; faults come back as failed outcomes, never as exceptions."""
        kind, value, dt = self._request(("measure", dict(config)), self.timeout)
        if kind == "ok":
            return value
        if kind == "failed":
            return Outcome.failed(value[0], value[1], measure_s=dt)
        return Outcome.failed("runtime.error", value, measure_s=dt)

    def confirm(self, arms: list[Arm], rounds: int, seed: int = 0) -> ConfirmData:
        """Interleaved confirmation; raises TunelabError if the worker fails during it."""
        kind, value, _ = self._request(("confirm", list(arms), int(rounds), int(seed)), self.confirm_timeout)
        if kind == "ok":
            return value
        if kind == "failed":
            raise TunelabError(f"confirmation failed: {value[0]}: {value[1]}")
        raise TunelabError(f"confirmation failed: {value}")


def make_evaluator(backend: Backend, isolate: bool | None = None, **kw) -> Evaluator:
    """A subprocess evaluator when ``isolate`` (default: for GPU backends), else in-process.

    A backend that cannot be pickled (a family defined in a notebook cell, lambdas) cannot be sent to a worker;
    it then runs in-process with a warning, because a trap would end the session's CUDA context.
    """
    if isolate is None:
        isolate = backend.mode == "gpu"
    if not isolate:
        return InProcessEvaluator(backend)
    try:
        pickle.dumps(backend)
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"the kernel family cannot be sent to a worker process ({type(exc).__name__}: {exc}); "
                      "measuring in this process without fault isolation. Define the family and its callables "
                      "at module level in an importable file to get isolation.", RuntimeWarning, stacklevel=2)
        return InProcessEvaluator(backend)
    return SubprocessEvaluator(backend, **kw)
