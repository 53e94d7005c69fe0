"""tunelab.profile on a GPU with Nsight Compute: the op's kernels are found, every default counter is collected,
and the counters agree with what the kernels must do (the search reads its whole corpus from DRAM: ncu flushes the
caches before each kernel)."""
from __future__ import annotations

import json
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
