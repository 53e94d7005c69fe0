"""Shared pytest setup: the `gpu` and `slow` markers, and an isolated kernel cache per test session."""
from __future__ import annotations

import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def _gpu_reason() -> str | None:
    try:
        import tunelab
    except Exception as exc:  # pragma: no cover - import failure is its own test failure
        return f"tunelab does not import: {exc}"
    ok, why = tunelab.gpu_available()
    if not ok:
        return f"no usable GPU: {why}"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return None


def pytest_collection_modifyitems(config, items):
    run_slow = config.getoption("--runslow") or os.environ.get("TUNELAB_SLOW") == "1"
    gpu_reason = None
    gpu_checked = False
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow sweep: run with --runslow or TUNELAB_SLOW=1"))
        if "gpu" in item.keywords:
            if not gpu_checked:
                gpu_reason, gpu_checked = _gpu_reason(), True
            if gpu_reason:
                item.add_marker(pytest.mark.skip(reason=gpu_reason))


@pytest.fixture(scope="session")
def load_benchmark():
    """load_benchmark(NAME): benchmarks/NAME.py as a module, loaded with benchmarks/ on sys.path (the scripts import
    their siblings, e.g. _common), for the tests of what a script computes on the CPU."""
    import importlib.util
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str):
        sys.path.insert(0, str(bench))
        try:
            spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", bench / f"{name}.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        finally:
            sys.path.remove(str(bench))
        return mod

    return load


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Each test session gets its own cache dir, so tests neither read nor pollute the user's cache."""
    if "TUNELAB_TEST_KEEP_CACHE" in os.environ:
        yield
        return
    root = tmp_path_factory.mktemp("tunelab-cache")
    old = os.environ.get("TUNELAB_CACHE_DIR")
    os.environ["TUNELAB_CACHE_DIR"] = str(root)
    yield
    if old is None:
        os.environ.pop("TUNELAB_CACHE_DIR", None)
    else:
        os.environ["TUNELAB_CACHE_DIR"] = old
