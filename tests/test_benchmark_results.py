"""The benchmark scripts' result files (benchmarks/_common.write_result): one naming rule for every --tag."""
import importlib.util
import json
from pathlib import Path

import pytest


def _common():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "_common.py"
    spec = importlib.util.spec_from_file_location("benchmarks_common", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("tag, name", [(None, "bench"), ("", "bench"), ("h100", "bench_h100"),
                                       ("_h100", "bench_h100"), ("__h100_x", "bench_h100_x")])
def test_write_result_joins_the_tag_by_one_underscore(tmp_path, monkeypatch, tag, name):
    """A script's --tag is joined to the result's name by one underscore whether or not it starts with one (the
    scripts used to differ: some added one, others took the tag as given), and the file records that name."""
    common = _common()
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.delenv("OUT", raising=False)
    path = common.write_result("bench", {"rows": [1]}, tag)
    assert path == tmp_path / f"{name}.json" and [p.name for p in tmp_path.iterdir()] == [f"{name}.json"]
    doc = json.loads(path.read_text())
    assert doc["benchmark"] == name and doc["rows"] == [1] and "environment" in doc
