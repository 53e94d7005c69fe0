"""The benchmark scripts run end to end on fake data (their GPU parts are exercised by the GPU runs)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ground_truth_then_efficiency(tmp_path, capsys):
    gt = tmp_path / "toy.replay.json.gz"
    assert load("ground_truth").main(["--fake", "--samples", "5", "--baseline-rounds", "20", "--out", str(gt)]) == 0
    out = capsys.readouterr().out
    assert "estimate:" in out.splitlines()[1]  # the estimate is printed before any work
    from tunelab.tuning.replay import load_replay

    rp = load_replay(gt)
    assert rp.raw["complete"] and rp.device["synthetic"]
    assert len(rp.entries) == 1280 and len(rp.measured()) == 600 and "reference_lib" in rp.baselines

    eff = tmp_path / "eff.json"
    assert load("tuner_efficiency").main(["--replay", str(gt), "--seeds", "3", "--strategies", "lhs+tpe,random",
                                          "--cap", "80", "--jobs", "1", "--out", str(eff)]) == 0
    doc = json.loads(eff.read_text())
    assert doc["replay"]["synthetic"] and doc["n_measured"] == 600
    assert doc["random_exact"]["5%"]["expected_evaluations"] > 1
    for name in ("lhs+tpe", "random"):
        assert len(doc["strategies"][name]["runs"]) == 3
        assert {"median", "ci95", "not_reached"} <= set(doc["strategies"][name]["5%"])
