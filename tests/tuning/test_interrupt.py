"""Ctrl-C stops `tunelab tune` cleanly: a final report, exit code 130, and a study that resumes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT delivery is POSIX here")
def test_ctrl_c_leaves_a_resumable_study(toy_replay_path, tmp_path, count_complete):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    args = ["tune", "toy", "--replay", str(toy_replay_path), "--trials", "60", "--storage", storage, "--no-confirm",
            "--quiet", "--results", str(tmp_path / "r.json")]
    # A process started from a non-interactive shell's background job inherits SIGINT *ignored* (as CI runners
    # and this test's own parent may be); restore what a terminal's foreground process has.
    boot = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from tunelab.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", boot, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    deadline = time.time() + 120
    while time.time() < deadline and count_complete(tmp_path / "s.db") < 10:
        time.sleep(0.3)
        assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in out and "run the same command again" in out
    assert "gates: rejections by reason" in out  # the final table is printed
    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0], storage=storage)
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    from tunelab.tuning.study import info

    done = sum(info(t).get("evaluated", False) for t in study.trials)
    assert 0 < done < 60
    # resuming finishes the budget without repeating a config
    from tunelab.cli import main

    assert main(args) == 0
    study = optuna.load_study(study_name=study.study_name, storage=storage)
    keys = [info(t)["key"] for t in study.trials if info(t).get("evaluated")]
    assert len(keys) == len(set(keys))
