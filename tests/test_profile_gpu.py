"""tunelab.profile on a GPU with Nsight Compute: the op's kernels are found, every default counter is collected,
and the counters agree with what the kernels must do (the search reads its whole corpus from DRAM: ncu flushes the
caches before each kernel)."""
from __future__ import annotations

import json
import re
import sys

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ncu():
    from tunelab.profile import ProfileError, find_ncu

    try:
        return find_ncu()
    except ProfileError as exc:
        pytest.skip(str(exc))


def test_profile_op_reads_the_search_kernels_counters(ncu, tmp_path):
    from tunelab.profile import DEFAULT_METRICS, profile_op

    nq, n, d, k = 64, 40000, 512, 10
    result = profile_op("similarity", shape=(nq, n, d, k), dtype="fp16", report=tmp_path / "sim", timeout=300)
    names = [kern.short_name for kern in result.kernels]
    assert names and names[0] == "similarity_topk", names  # the warm-up calls are outside the profiled range
    assert len(names) <= 2, names  # one call: the search and its merge or select
    assert result.missing_metrics == [], result.missing_metrics
    assert (tmp_path / "sim.ncu-rep").is_file() and result.report == str(tmp_path / "sim.ncu-rep")
    search = result.kernels[0]
    assert all(m in search.metrics for m in DEFAULT_METRICS)
    corpus_bytes = n * d * 2
    assert search.value("dram__bytes_read.sum") >= 0.95 * corpus_bytes, (search.value("dram__bytes_read.sum"),
                                                                         corpus_bytes)
    assert 0 < search.duration_us < 1000
    assert search.value("launch__registers_per_thread") > 0 and search.grid and search.block
    assert search.bound() and not search.bound().startswith("unknown")
    assert search.stalls(), "WarpStateStats' stall reasons"
    assert "similarity_topk" in result.table()


def test_profile_a_program_and_the_command_line(ncu, tmp_path):
    from tunelab.cli import main
    from tunelab.profile import ProfileError, profile

    script = tmp_path / "mm.py"
    script.write_text("import torch\na = torch.randn(2048, 2048, device='cuda', dtype=torch.float16)\n"
                      "for _ in range(3):\n    b = a @ a\ntorch.cuda.synchronize()\n")
    result = profile([sys.executable, str(script)], launch_skip=1, launch_count=1, kernel="nvjet|gemm|Kernel",
                     timeout=300)
    assert len(result.kernels) == 1 and result.kernels[0].value("gpu__time_duration.sum") > 0
    with pytest.raises(ProfileError, match="not_a_metric__at_all.sum"):
        profile([sys.executable, str(script)], metrics=["not_a_metric__at_all.sum"], launch_count=1, timeout=300)
    with pytest.raises(ProfileError, match="status 3"):
        profile([sys.executable, "-c", "raise SystemExit(3)"], timeout=300)
    out = tmp_path / "gram.json"
    assert main(["profile", "--op", "gram", "--shape", "2048,128", "--dtype", "complex64", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    kernels = [k["summary"]["kernel"] for k in doc["kernels"]]
    # torch's zero fill of the output (the triangle the kernel does not write), then the Gram kernel
    assert doc["environment"]["gpu"]["name"] and kernels[-1] == "similarity_gram", kernels


def test_profile_tuned_profiles_the_arms_as_the_tuner_ran_them(ncu):
    """A result's config and baseline, each rebuilt in its own program from the family's inputs: the search's
    kernels for the config, cuBLAS's GEMM and torch's top-k for the baseline, both reading the whole corpus."""
    from tunelab.profile import profile_tuned
    from tunelab.tuning.family import get_family

    fam = get_family("similarity")
    problem = {"nq": 32, "n": 20000, "d": 256, "k": 10, "dtype": "fp16", "metric": "ip"}
    default = fam.default_config(fam.problem_from_dict(problem))
    data = {"family": "similarity", "problem": problem, "mode": "gpu", "default_config": default,
            "best_search": {"config": default}}
    tuned = profile_tuned(data, timeout=300, progress=False)
    assert list(tuned.arms) == ["best", "baseline:torch_topk"], list(tuned.arms)
    assert tuned.notes == ["default: the same config as best, profiled once"]
    ours = [k.short_name for k in tuned.arms["best"].kernels]
    theirs = [k.name for k in tuned.arms["baseline:torch_topk"].kernels]
    assert ours[0] == "similarity_topk" and len(ours) <= 2, ours
    assert any(re.search(r"nvjet|gemm|cutlass", n) for n in theirs), theirs
    assert any(re.search(r"(?i)topk|sort|radix|select", n) for n in theirs), theirs
    corpus = problem["n"] * problem["d"] * 2
    for arm in tuned.arms.values():
        assert sum(k.value("dram__bytes_read.sum") for k in arm.kernels) >= 0.95 * corpus
    assert tuned.total_us("best") > 0 and "similarity_topk" in tuned.table()


def test_tune_then_profile_from_the_command_line(ncu, tmp_path, capsys, monkeypatch):
    from tunelab.cli import main

    monkeypatch.setenv("COLUMNS", "250")  # rich folds long cells (kernel names) at pytest's 80 columns
    results = tmp_path / "gram.json"
    assert main(["tune", "gram", "--shape", "1024,64", "--dtype", "fp32", "--trials", "4", "--seed-trials", "2",
                 "--confirm-rounds", "10", "--storage", "memory", "--no-store", "--quiet", "--results", str(results),
                 "--profile"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "best: the tuned winner" in printed and "similarity_gram" in printed
    assert "µs by the tuner's timer (confirmation median)" in printed and "tuned on" not in printed
    saved = json.loads((tmp_path / "gram.profile.json").read_text())  # every counter, beside the results
    arms = list(saved["arms"])  # "default" too, unless the winner is the default config (then profiled once)
    assert arms[0] == "best" and arms[-1] == "baseline:torch_matmul_abs2" and len(arms) in (2, 3)
    assert saved["results"] == str(results) and saved["environment"]["tunelab_version"]
    out = tmp_path / "p.json"
    assert main(["profile", "--result", str(results), "--arms", "best,baseline", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert list(doc["arms"]) == ["best", "baseline:torch_matmul_abs2"], list(doc["arms"])
    assert doc["arms"]["best"]["timer_us"] > 0 and doc["arms"]["baseline:torch_matmul_abs2"]["timer_us"] > 0
    assert any(k["summary"]["kernel"] == "similarity_gram" for k in doc["arms"]["best"]["kernels"])
