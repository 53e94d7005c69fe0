"""Results JSON: schema round trip, TuneResult accessors, dataframe, plots, validation errors."""
from __future__ import annotations

import json

import matplotlib
import pytest

matplotlib.use("Agg")

from tunelab.errors import TunelabError  # noqa: E402
from tunelab.tuning.api import tune  # noqa: E402
from tunelab.tuning.results import SCHEMA, VERSION, TuneResult, load_results  # noqa: E402


@pytest.fixture(scope="module")
def result(toy_replay_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("res") / "result.json"
    return tune("toy", replay=toy_replay_path, trials=30, storage="memory", progress=False, results_path=path,
                n_resamples=1000), path


def test_round_trip(result):
    r, path = result
    loaded = TuneResult.load(path)
    saved = {k: v for k, v in r.data.items() if k != "path"}  # the path is added after writing
    assert json.loads(json.dumps(saved)) == loaded.data
    assert loaded.best_config == r.best_config and loaded.verdict == r.verdict
    assert loaded.ci == r.ci and loaded.speedup == r.speedup
    assert loaded.confirmation.to_dict() == r.confirmation.to_dict()


def test_schema_content(result):
    _, path = result
    d = json.loads(path.read_text())
    assert d["schema"] == SCHEMA and d["version"] == VERSION
    for key in ("env", "device", "family", "problem", "space", "trials", "gates", "confirmation", "verdict",
                "timing", "study", "options", "stop_reason"):
        assert key in d, key
    assert {"compile_wait_s", "measure_s", "confirm_s", "overhead_s", "total_s"} <= set(d["timing"])
    t = next(t for t in d["trials"] if t["status"] == "ok")
    assert t["samples_summary"]["n"] == len(t["samples_us"]) and t["value"] == pytest.approx(
        t["samples_summary"]["median"])
    assert {"number", "state", "status", "reason", "config", "source"} <= set(t)
    rej = [t for t in d["trials"] if t["status"] == "rejected"]
    assert all(t["reason"] and "." in t["reason"] for t in rej)
    arm = d["confirmation"]["arms"][0]
    assert {"estimate", "low", "high", "method"} <= set(arm["ci"])


def test_dataframe_and_summary(result):
    r, _ = result
    df = r.trials_dataframe()
    assert len(df) == len(r.trials)
    assert {"number", "status", "value_us", "reason", "BLOCK_M", "LAYOUT"} <= set(df.columns)
    assert (df[df.status == "ok"].value_us > 0).all()
    s = r.summary()
    assert "best config" in s and r.verdict in s
    assert "<pre>" in r._repr_html_()


def test_plots(result):
    r, _ = result
    ax = r.plot_history()
    assert ax.get_ylabel().startswith("median latency")
    ax = r.plot_confirmation()
    assert len(ax.get_yticklabels()) == len(r.confirmation.arms)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_validation_errors(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(TunelabError, match="not a tunelab results file"):
        load_results(p)
    p.write_text(json.dumps({"schema": SCHEMA, "version": 42}))
    with pytest.raises(TunelabError, match="version 42"):
        load_results(p)
    p.write_text("{")
    with pytest.raises(TunelabError, match="not valid JSON"):
        load_results(p)
    with pytest.raises(TunelabError, match="does not exist"):
        load_results(tmp_path / "nope.json")
