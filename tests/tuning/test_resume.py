"""A study killed with SIGKILL mid-run resumes with every completed trial intact."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import optuna
import pytest
from optuna.trial import TrialState

from tunelab.tuning.api import tune
from tunelab.tuning.fake import FakeBackend, ToyFamily
from tunelab.tuning.study import info

SCRIPT = textwrap.dedent("""
    import sys
    from tunelab.tuning.api import tune
    from tunelab.tuning.fake import FakeBackend, ToyFamily
    tune(ToyFamily(), {"M": 1}, backend=FakeBackend(compile_seconds=0.2), storage=sys.argv[1], trials=60,
         seed_trials=10, progress=False, confirm=False, save_results_file=False, compile_workers=2)
""")


def _snapshot(storage):
    names = optuna.get_all_study_names(storage)
    assert len(names) == 1
    study = optuna.load_study(study_name=names[0], storage=storage)
    return names[0], study.get_trials(deepcopy=True)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_sigkill_and_resume(tmp_path, count_complete):
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, storage], env=dict(os.environ))
    try:
        deadline = time.time() + 120
        while count_complete(tmp_path / "studies.db") < 10:
            time.sleep(0.3)
            if proc.poll() is not None:
                pytest.fail(f"the tuning process ended before it was killed (rc={proc.returncode})")
            if time.time() > deadline:
                pytest.fail("no progress within 120 s")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL

    name, before = _snapshot(storage)
    finished = {t.number: t for t in before if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    running = [t.number for t in before if t.state == TrialState.RUNNING]
    assert sum(t.state == TrialState.COMPLETE for t in finished.values()) >= 10
    assert running, "the kill should leave candidates in flight (compile-ahead keeps several running)"

    r = tune(ToyFamily(), {"M": 1}, backend=FakeBackend(), storage=storage, trials=60, seed_trials=10,
             progress=False, confirm=False, save_results_file=False)
    assert r.study_name == name
    assert r.data["study"]["interrupted_trials_marked_failed"] == len(running)
    after = {t.number: t for t in optuna.load_study(study_name=name, storage=storage).get_trials()}
    # every trial finished before the kill is intact
    for n, t in finished.items():
        a = after[n]
        assert (a.state, a.value, a.params, a.user_attrs) == (t.state, t.value, t.params, t.user_attrs)
    # trials left running by the kill are failed, with the reason
    for n in running:
        assert after[n].state == TrialState.FAIL and info(after[n])["status"] == "interrupted"
    # the study went on to its budget, never evaluating a config twice, and was seeded only once
    evaluated = [t["key"] for t in r.trials if t["evaluated"]]
    assert len(evaluated) == len(set(evaluated)) == 60
    assert sum(t["source"] == "lhs" for t in r.trials) <= 10


def test_trial_killed_after_recording_its_outcome_is_not_counted(tmp_path):
    """A kill between writing a trial's outcome and telling Optuna leaves it RUNNING with ``evaluated``; resuming
    fails it as interrupted and drops the flag, so the results agree with the driver's budget count."""
    from tunelab.tuning.study import ATTR, fail_interrupted

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    done = study.ask()
    done.set_user_attr(ATTR, {"key": "A", "status": "ok", "evaluated": True})
    study.tell(done, 1.0)
    cut = study.ask()
    cut.set_user_attr(ATTR, {"key": "B", "status": "ok", "evaluated": True, "record": {"measure_s": 0.1}})
    assert fail_interrupted(study) == 1
    a, b = study.get_trials()
    assert a.state == TrialState.COMPLETE and info(a)["evaluated"] is True
    assert b.state == TrialState.FAIL
    assert b.user_attrs[ATTR] == {"key": "B", "status": "interrupted", "reason": "interrupted",
                                  "record": {"measure_s": 0.1}}
