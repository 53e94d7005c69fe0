"""`tunelab tune | show | export | import | store` on replay data."""
from __future__ import annotations

import json

import pytest

from tunelab.cli import main


def test_tune_and_show(toy_replay_path, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["tune", "toy", "--replay", str(toy_replay_path), "--trials", "20", "--seed-trials", "5",
               "--storage", "memory", "--results", str(out), "--quiet", "--confirm-rounds", "20"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "verdict" in text and "gates: rejections by reason" in text and "wall clock" in text
    assert main(["show", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["verdict"] in ("win", "no win") and shown["best_config"]
    png = tmp_path / "plots.png"
    assert main(["show", str(out), "--plot", str(png)]) == 0
    assert png.stat().st_size > 1000


def test_tune_resumes_the_default_sqlite_study(toy_replay_path, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNELAB_CACHE_DIR", str(tmp_path))
    args = ["tune", "toy", "--replay", str(toy_replay_path), "--trials", "10", "--quiet", "--no-confirm"]
    assert main(args) == 0
    assert (tmp_path / "studies" / "studies.db").is_file()
    assert main(args[:4] + ["--trials", "15"] + args[6:]) == 0
    text = capsys.readouterr().out
    assert "evaluations: 15" in text


def test_errors_name_the_value(capsys):
    assert main(["tune", "toy", "--quiet"]) == 2
    assert "needs --shape" in capsys.readouterr().err
    assert main(["tune", "attention", "--shape", "16,16,512,64", "--dtype", "fp8", "--quiet"]) == 2
    assert "--dtype 'fp8' is not accepted; accepted dtypes are ['fp16', 'bf16', 'fp32']" in capsys.readouterr().err
    assert main(["tune", "nosuch", "--shape", "1,2", "--quiet"]) == 2
    assert "unknown kernel family 'nosuch'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", "toy", "--sampler", "bayes"])
    assert "invalid choice: 'bayes'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", "toy", "--shape", "16,a"])
    assert "comma-separated" in capsys.readouterr().err


def test_export_import_store(tmp_path, monkeypatch, capsys):
    from tunelab.tuning import store

    monkeypatch.setenv("TUNELAB_CACHE_DIR", str(tmp_path / "a"))
    store.put({"family": "attention", "device": "NVIDIA H200", "bucket": {"seq_bucket": 512}, "config": {"X": 1},
               "source_hash": "h", "created": "2026-01-01"})
    f = tmp_path / "cfg.json"
    assert main(["export", str(f)]) == 0
    monkeypatch.setenv("TUNELAB_CACHE_DIR", str(tmp_path / "b"))
    assert main(["import", str(f)]) == 0
    assert "1 added" in capsys.readouterr().out
    assert main(["store"]) == 0
    assert "attention" in capsys.readouterr().out
    assert main(["import", str(tmp_path / "missing.json")]) == 2
