"""Fault isolation: a candidate that crashes, hangs or traps fails its trial; the worker restarts; the study goes on."""
from __future__ import annotations

import os

import pytest

from tunelab.errors import TunelabError
from tunelab.tuning.api import tune
from tunelab.tuning.backend import Arm
from tunelab.tuning.fake import FakeBackend, ToyFamily
from tunelab.tuning.space import config_key
from tunelab.tuning.worker import InProcessEvaluator, SubprocessEvaluator, make_evaluator

A = {"BLOCK_M": 128, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 3, "SWIZZLE": True, "LAYOUT": "row"}
CRASH = dict(A, NUM_STAGES=2)
HANG = dict(A, NUM_STAGES=1)
TRAP = dict(A, NUM_STAGES=4)
ERROR = dict(A, SWIZZLE=False)


@pytest.fixture(scope="module")
def evaluator():
    backend = FakeBackend(crash=[config_key(CRASH)], hang=[config_key(HANG)], trap=[config_key(TRAP)],
                          error=[config_key(ERROR)])
    ev = SubprocessEvaluator(backend, timeout=2.0, startup_timeout=60.0)
    yield ev
    ev.close()


def test_measures_in_another_process(evaluator):
    info = evaluator.start()
    assert info["pid"] != os.getpid() and evaluator.pid == info["pid"]
    out = evaluator.measure(A)
    assert out.status == "ok" and len(out.samples) == 20 and out.sm_clock_mhz == 1980.0


def test_crash_fails_and_restarts(evaluator):
    before = evaluator.restarts
    out = evaluator.measure(CRASH)
    assert out.status == "failed" and out.code == "runtime.crash" and "139" in out.detail
    assert evaluator.measure(A).status == "ok"  # a fresh worker answers
    assert evaluator.restarts == before + 1


def test_hang_times_out_and_restarts(evaluator):
    out = evaluator.measure(HANG)
    assert out.status == "failed" and out.code == "runtime.timeout" and 1.9 < out.measure_s < 10
    assert evaluator.measure(A).status == "ok"


def test_trap_poisons_only_the_worker(evaluator):
    pid = evaluator.start()["pid"]
    out = evaluator.measure(TRAP)
    assert out.status == "failed" and out.code == "runtime.trap" and "illegal memory access" in out.detail
    assert evaluator.measure(A).status == "ok"
    assert evaluator.pid != pid  # the poisoned worker was replaced


def test_exception_keeps_the_worker(evaluator):
    pid = evaluator.start()["pid"]
    out = evaluator.measure(ERROR)
    assert out.status == "failed" and out.code == "runtime.error" and "simulated launch error" in out.detail
    assert evaluator.pid == pid


def test_confirm_in_worker(evaluator):
    data = evaluator.confirm([Arm("a", "config", config=A), Arm("ref", "baseline", baseline="reference_lib")], 10)
    assert len(data.samples["a"]) == len(data.samples["ref"]) == 10


def test_setup_failure_is_reported():
    class Broken(FakeBackend):
        def setup(self):
            raise RuntimeError("no device here")

    # a class defined in a test function cannot be pickled -> make_evaluator falls back to in-process
    with pytest.warns(RuntimeWarning, match="cannot be sent to a worker"):
        ev = make_evaluator(Broken(), isolate=True)
    assert isinstance(ev, InProcessEvaluator)


def test_in_process_trap_refuses_further_work():
    ev = InProcessEvaluator(FakeBackend(trap=[config_key(TRAP)]))
    assert ev.measure(TRAP).code == "runtime.trap"
    with pytest.raises(TunelabError, match="poisoned"):
        ev.measure(A)


def test_study_survives_faulty_candidates():
    # The faulty configs are seeded first; each fails its trial with its reason, the worker restarts, and
    # the study reaches its budget with the faulty configs never run again.
    backend = FakeBackend(crash=[config_key(CRASH)], hang=[config_key(HANG)], trap=[config_key(TRAP)])
    seeds = [CRASH, HANG, TRAP]
    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"format": "tunelab.replay", "version": 1, "family": "toy",
                   "space": ToyFamily().space(None).to_dict(),
                   "entries": [{"config": c, "status": "ok", "samples_us": [1.0 + i]} for i, c in enumerate(seeds)]},
                  fh)
    r = tune(ToyFamily(), {"M": 1}, backend=backend, isolate=True, measure_timeout=2.0, trials=12, seed_trials=3,
             seed_from=fh.name, storage="memory", progress=False, confirm_rounds=20, n_resamples=500,
             save_results_file=False)
    os.unlink(fh.name)
    by_key = {t["key"]: t for t in r.trials if t["evaluated"]}
    assert by_key[config_key(CRASH)]["reason"] == "runtime.crash"
    assert by_key[config_key(HANG)]["reason"] == "runtime.timeout"
    assert by_key[config_key(TRAP)]["reason"] == "runtime.trap"
    assert all(by_key[config_key(c)]["state"] == "FAIL" for c in seeds)
    assert r.data["evaluations"] == 12 and r.data["study"]["worker_restarts"] == 3
    assert r.data["study"]["isolated"] is True
    other = sum(n for code, n in r.gates["by_reason"].items() if not code.startswith(("runtime.", "static.")))
    assert r.gates["passed"] + other == 9  # the other 9 evaluations: measured or gated, never faulted
    assert r.verdict in ("win", "no win")  # confirmation ran in a healthy worker after the faults
    evaluated = [t["key"] for t in r.trials if t["evaluated"]]
    assert len(evaluated) == len(set(evaluated))
