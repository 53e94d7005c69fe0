"""Fixtures of the tuner's CPU tests: the toy family, a synthetic replay file with a known optimum."""
from __future__ import annotations

import pytest

from tunelab.tuning.fake import ToyFamily, toy_latency, toy_outcome_code
from tunelab.tuning.replay import save_replay, synthesize_replay

TOY_PROBLEM = {"M": 4096, "N": 4096, "dtype": "fp16"}


@pytest.fixture(scope="session")
def toy_family():
    return ToyFamily()


@pytest.fixture(scope="session")
def toy_replay_path(tmp_path_factory):
    """Replay of the whole toy space: 600 measured configs, static/compiled/numerics rejections, a baseline."""
    data = synthesize_replay(ToyFamily(), TOY_PROBLEM, toy_latency, outcome_code=toy_outcome_code,
                             baselines={"reference_lib": 36.0, "slow_lib": 80.0}, seed=1)
    path = tmp_path_factory.mktemp("replay") / "toy_replay.json"
    save_replay(path, data)
    return path


@pytest.fixture(scope="session")
def toy_replay(toy_replay_path):
    from tunelab.tuning.replay import load_replay

    return load_replay(toy_replay_path)


def _count_complete(db) -> int:
    """COMPLETE trials in a study database, read with sqlite3: opening the file with Optuna while the tuner creates
    the schema would race it."""
    import sqlite3

    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            return con.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.fixture
def count_complete():
    """The function counting COMPLETE trials in a SQLite study file (for tests that watch a running tuner)."""
    return _count_complete
