"""tunelab.profile without a GPU: ncu's CSV as an H200 printed it (tests/data/ncu: `tunelab profile --op similarity
--shape 100,50000,768,10 --report sim`, then `ncu -i sim.ncu-rep --csv --page raw` and `--page details`; ncu
2025.3.1, units as ncu scales them), and the whole run against a stand-in ncu that records its command line, runs
the program and hands back that report."""
from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from tunelab import profile as P
from tunelab.errors import InputError

DATA = Path(__file__).parent / "data" / "ncu"
RAW = DATA / "similarity_100x50000x768x10_raw.csv"
DETAILS = DATA / "similarity_100x50000x768x10_details.csv"
# the same command at 18f6384, read back as tunelab reads it (--print-units base): what the stand-in serves
RAW_BASE = DATA / "similarity_100x50000x768x10_raw_base.csv"
DETAILS_BASE = DATA / "similarity_100x50000x768x10_details_base.csv"
# `bash benchmarks/profile_tuned.sh _h200`: every counter of our search and of torch's top-k (15 kernels)
TUNED_PROFILE = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / \
    "profile_tuned_similarity_100x50000x768x10_h200.json"


def test_the_h200_report_parses_into_the_search_and_its_select():
    kernels = P.parse_raw_csv(RAW.read_text())
    assert [k.short_name for k in kernels] == ["similarity_topk", "similarity_select"]
    search, select = kernels
    assert search.grid == (1, 131, 1) and search.block == (384, 1, 1)
    # values in base units whatever ncu printed: 26.272 us, 76.990976 Mbyte, 118.864 Kbyte/block
    assert search.metrics[P.DURATION] == pytest.approx(26272) and search.units[P.DURATION] == "ns"
    assert search.duration_us == pytest.approx(26.272)
    assert search.value(P.DRAM_READ) == pytest.approx(76_990_976) and search.units[P.DRAM_READ] == "byte"
    assert search.value("launch__shared_mem_per_block_dynamic") == pytest.approx(118_864)
    assert search.value("launch__registers_per_thread") == 168
    # the search streams its 76.8 MB corpus: memory-bound, on L2's fabric (82%) more than DRAM (64%)
    assert search.bound() == "memory: L2 82% of peak"
    assert search.occupancy_limit() == "registers, shared memory (1 block/SM)"
    assert search.stalls()[0][0] == "long_scoreboard" and len(search.stalls(5)) == 5
    # 'selected' (the issuing cycle, ~1 by definition) is in ncu's list but is no stall
    assert any(m.endswith("_stalled_selected_per_issue_active.ratio") for m in search.metrics)
    assert "selected" not in dict(search.stalls(30))
    assert select.bound().startswith("latency (busiest: L2 40%")
    s = search.summary()
    assert s["dram_bytes"] == pytest.approx(76_990_976 + 3_528_448) and s["kernel"] == "similarity_topk"
    json.dumps([k.to_json() for k in kernels])  # JSON-ready


def test_the_bound_reads_l1_over_elapsed_time_like_the_other_units():
    """torch's top-k on the H200 (`benchmarks/profile_tuned.sh _h200`): its one-block fill and scan-init kernels read
    130-209% of L1's peak over the SMs' active cycles, ncu's L1 figure in its speed of light; over elapsed time, as
    DRAM's and L2's are, they are latency-bound, and the kernels that fill every SM keep their figures. The scaled
    form (for reports without ncu's elapsed metric) agrees with ncu's own elapsed figure."""
    doc = json.loads(TUNED_PROFILE.read_text())
    kernels = [P.KernelProfile(0, k["name"], (), (), k["metrics"], k["units"])
               for arm in doc["arms"].values() for k in arm["kernels"]]
    small = [k for k in kernels if k.short_name in ("fill", "DeviceScanByKeyInitKernel")]
    assert len(small) == 3 and all(k.value(P.L1_PCT) > 100 for k in small)
    for k in small:
        assert k.l1_elapsed_pct() < 5 and k.bound().startswith("latency"), k.bound()
    search = next(k for k in kernels if k.short_name == "similarity_topk")
    assert search.bound().startswith("memory: L2")
    assert all(k.summary()["l1_elapsed_pct"] <= 100 for k in kernels)
    assert small[0].summary()["l1_pct"] == small[0].value(P.L1_PCT)  # ncu's own figure, as before
    for k in kernels:  # the fallback: active figure x active fraction, against ncu's elapsed figure
        direct = k.value(P.L1_ELAPSED_PCT)
        scaled = P.KernelProfile(0, "k", (), (), {m: k.metrics[m] for m in (P.L1_PCT, P.SM_ACTIVE_CYCLES,
                                                                            P.SM_ELAPSED_CYCLES)}).l1_elapsed_pct()
        assert scaled == pytest.approx(direct, abs=1.0), (k.short_name, scaled, direct)
    assert P.KernelProfile(0, "k", (), (), {P.L1_PCT: 70.0}).l1_elapsed_pct() is None


def test_rules_and_table():
    rules = P.parse_rules_csv(DETAILS.read_text())
    assert set(rules) == {0, 1}
    occupancy = [r for r in rules[0] if r["rule"] == "TheoreticalOccupancy"]
    assert occupancy and occupancy[0]["estimated_speedup_pct"] == pytest.approx(81.25) and occupancy[0]["text"]
    result = P.ProfileResult(command=["python", "x.py"], ncu="ncu", ncu_version="Version 2025.3.1.0",
                             kernels=P.parse_raw_csv(RAW.read_text()), missing_metrics=["a__b.sum"], report="r.ncu-rep")
    text = result.table()
    for want in ("similarity_topk", "similarity_select", "26.3", "memory: L2 82% of peak", "a__b.sum", "r.ncu-rep"):
        assert want in text, want
    assert [k.id for k in result.find(r"select")] == [1]


@pytest.mark.parametrize("cell, value", [("28,416", 28416), ("3,192,651,238.33", 3192651238.33), ("63.90", 63.9),
                                         ("(384, 1, 1)", (384, 1, 1)), ("", None), ("PolicySpread", "PolicySpread"),
                                         ("-2", -2)])
def test_cells(cell, value):
    assert P.parse_number(cell) == value


def test_units_and_names():
    assert P.base_unit("us") == ("ns", 1e3) and P.base_unit("msecond") == ("ns", 1e6)
    assert P.base_unit("Gbyte") == ("byte", 1e9) and P.base_unit("Kbyte/block") == ("byte/block", 1e3)
    assert P.base_unit("Ghz") == ("hz", 1e9) and P.base_unit("%/Kbyte") == ("%/Kbyte", 1.0)
    assert P.base_unit("cycle") == ("cycle", 1.0)
    assert P.short_kernel_name("void tunelab::similarity_topk<tunelab::T<0, 1>>(tunelab::SearchParams)") == \
        "similarity_topk"
    assert P.short_kernel_name("void at::native::(anonymous namespace)::f<int>(int)") == "f"
    assert P.short_kernel_name("nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT") == \
        "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT"


def test_base_units_print_the_same_values():
    """ncu's --print-units base form of the same report gives the same values."""
    text = RAW.read_text()
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    rows = P._csv_rows(text)
    header, units = rows[0], rows[1]
    i, j = header.index(P.DURATION), header.index(P.DRAM_READ)
    units[i], units[j] = "nsecond", "byte"
    for r in rows[2:]:
        r[i] = f"{float(r[i]) * 1e3:,.0f}"
        r[j] = f"{float(r[j]) * 1e6:,.0f}"
    out = "\n".join(lines[:start] + [",".join(f'"{c}"' for c in r) for r in rows])
    a, b = P.parse_raw_csv(text), P.parse_raw_csv(out)
    for x, y in zip(a, b):
        assert y.metrics[P.DURATION] == pytest.approx(x.metrics[P.DURATION])
        assert y.metrics[P.DRAM_READ] == pytest.approx(x.metrics[P.DRAM_READ], rel=1e-6)


def test_base_units_as_ncu_prints_them():
    """The report read back with --print-units base (as profile() reads it): base units, and the same kernels and
    magnitudes as the scaled print of another run of the same command."""
    base, scaled = P.parse_raw_csv(RAW_BASE.read_text()), P.parse_raw_csv(RAW.read_text())
    assert [k.short_name for k in base] == [k.short_name for k in scaled]
    for b, s in zip(base, scaled):
        assert b.units[P.DURATION] == "ns" and b.units[P.DRAM_READ] == "byte"
        assert b.units["launch__shared_mem_per_block_dynamic"] == "byte/block"
        assert b.value("launch__shared_mem_per_block_dynamic") == s.value("launch__shared_mem_per_block_dynamic")
        for m in (P.DURATION, P.DRAM_READ, P.L2_PCT):
            assert b.value(m) == pytest.approx(s.value(m), rel=0.1), m
    assert base[0].duration_us == pytest.approx(25.984) and P.parse_rules_csv(DETAILS_BASE.read_text())[0]


FAKE_NCU = '''\
#!{python}
"""Stand-in for ncu: --version; -i REPORT --csv ... --page raw|details prints the recorded CSV; else records its
argv, runs the program after its options and writes REPORT.ncu-rep (unless FAKE_NCU_NO_REPORT)."""
import json, os, shutil, subprocess, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 1) (public-release)")
    sys.exit(0)
if args[0] == "-i":
    if args[args.index("--print-units") + 1] != "base":  # tunelab reads values in base units
        sys.exit("==ERROR== the stand-in wants --print-units base")
    page = args[args.index("--page") + 1]
    sys.stdout.write(open(os.environ["FAKE_NCU_" + page.upper()]).read())
    sys.exit(0)
with open(os.environ["FAKE_NCU_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
valued = {{"--clock-control", "--cache-control", "-o", "--section", "--metrics", "-k", "--launch-skip",
          "--launch-count", "--profile-from-start"}}
i = 0
while i < len(args) and args[i].startswith("-"):
    if args[i] not in valued and args[i] != "-f":
        print(f"==ERROR== unrecognised option '{{args[i]}}'")
        sys.exit(1)
    i += 2 if args[i] in valued else 1
sys.stdout.write(os.environ.get("FAKE_NCU_SAYS", ""))
rc = 0 if os.environ.get("FAKE_NCU_SKIP_PROGRAM") else subprocess.run(args[i:]).returncode
if rc:
    print(f"==ERROR== The application returned an error code ({{rc}}).")
rc = int(os.environ.get("FAKE_NCU_RC", rc))
if rc == 0 and not os.environ.get("FAKE_NCU_NO_REPORT"):
    open(args[args.index("-o") + 1] + ".ncu-rep", "w").write("report")
sys.exit(rc)
'''


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    exe = tmp_path / "ncu"
    exe.write_text(FAKE_NCU.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("TUNELAB_NCU", str(exe))
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    monkeypatch.setenv("FAKE_NCU_RAW", str(RAW_BASE))
    monkeypatch.setenv("FAKE_NCU_DETAILS", str(DETAILS_BASE))
    for var in ("FAKE_NCU_NO_REPORT", "FAKE_NCU_SAYS", "FAKE_NCU_SKIP_PROGRAM", "FAKE_NCU_RC"):
        monkeypatch.delenv(var, raising=False)
    return lambda: [json.loads(line) for line in log.read_text().splitlines()]


def test_profile_runs_the_program_under_ncu_and_reads_its_report(fake_ncu, tmp_path):
    marker = tmp_path / "ran"
    prog = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x')"]
    result = P.profile(prog, kernel="topk", launch_skip=2, launch_count=3, report=tmp_path / "keep" / "sim.ncu-rep")
    argv = fake_ncu()[-1]
    assert marker.exists() and argv[-3:] == prog
    assert argv[argv.index("--clock-control") + 1] == "none" and argv[argv.index("--cache-control") + 1] == "all"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--section"] == list(P.SECTIONS)
    assert argv[argv.index("--metrics") + 1].split(",") == list(P.DEFAULT_METRICS)
    assert argv[argv.index("-k") + 1] == "regex:topk" and argv[argv.index("--launch-skip") + 1] == "2"
    assert argv[argv.index("--launch-count") + 1] == "3" and "--profile-from-start" not in argv
    assert result.report == str(tmp_path / "keep" / "sim.ncu-rep") and Path(result.report).is_file()
    assert [k.short_name for k in result.kernels] == ["similarity_topk", "similarity_select"]
    # the stand-in's report was recorded before these two joined the defaults: listed as missing, no error
    assert result.missing_metrics == [P.L1_ELAPSED_PCT, P.SM_ELAPSED_CYCLES]
    assert result.kernels[0].rules and result.ncu_version.startswith("Version")
    # without a report path the report goes to a temporary folder, removed
    assert P.profile(prog).report is None


def test_profile_errors_name_the_cause(fake_ncu, tmp_path, monkeypatch):
    with pytest.raises(P.ProfileError, match=r"the profiled program exited with status 3 (.|\n)*boom"):
        P.profile([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"])
    monkeypatch.setenv("FAKE_NCU_RC", "1")
    monkeypatch.setenv("FAKE_NCU_SAYS", "==ERROR== unrecognised option '--bogus'\n")
    with pytest.raises(P.ProfileError, match=r"^ncu exited with status 1 (.|\n)*--bogus"):
        P.profile([sys.executable, "-c", "pass"])
    monkeypatch.delenv("FAKE_NCU_RC")
    monkeypatch.setenv("FAKE_NCU_SAYS", "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n")
    with pytest.raises(P.ProfileError, match="NVreg_RestrictProfilingToAdminUsers=0"):
        P.profile([sys.executable, "-c", "pass"])
    monkeypatch.setenv("FAKE_NCU_SAYS", "==WARNING== No kernels were profiled.\nAvailable Kernels:\n1. nvjet_x\n")
    monkeypatch.setenv("FAKE_NCU_NO_REPORT", "1")
    with pytest.raises(P.ProfileError, match=r"profiled no kernel: check the kernel filter \('gemm'(.|\n)*nvjet_x"):
        P.profile([sys.executable, "-c", "pass"], kernel="gemm")
    monkeypatch.delenv("FAKE_NCU_NO_REPORT")
    monkeypatch.delenv("FAKE_NCU_SAYS")
    with pytest.raises(P.ProfileError, match=r"did not collect \['l1tex__t_bytes_typo.sum'\].*--query-metrics"):
        P.profile([sys.executable, "-c", "pass"], metrics=["l1tex__t_bytes_typo.sum"])
    with pytest.raises(P.ProfileError, match="did not finish in 1.0 s"):
        P.profile([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1.0)
    with pytest.raises(P.ProfileError, match="clock_control='fast'; accepted: \\('none', 'base'\\)"):
        P.profile([sys.executable, "-c", "pass"], clock_control="fast")
    with pytest.raises(P.ProfileError, match="launch_count=0"):
        P.profile([sys.executable, "-c", "pass"], launch_count=0)
    with pytest.raises(P.ProfileError, match="no command"):
        P.profile([])


def test_find_ncu(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNELAB_NCU", str(tmp_path / "nope"))
    with pytest.raises(P.ProfileError, match="TUNELAB_NCU=.*nope is not an executable"):
        P.find_ncu()
    monkeypatch.delenv("TUNELAB_NCU")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if Path("/usr/local/cuda/bin/ncu").exists() or list(Path("/opt/nvidia/nsight-compute").glob("*/ncu")):
        pytest.skip("this machine has ncu in a standard place")
    with pytest.raises(P.ProfileError, match=r"not found \(looked at: ncu on PATH, .*cuda/bin/ncu.*TUNELAB_NCU="):
        P.find_ncu()
    exe = tmp_path / "cuda" / "bin" / "ncu"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert P.find_ncu() == str(exe)


def test_the_command_line_profiles_an_op_in_a_child(fake_ncu, tmp_path, monkeypatch, capsys):
    from tunelab.cli import main

    monkeypatch.setenv("FAKE_NCU_SKIP_PROGRAM", "1")  # the child needs a GPU; the stand-in only records it
    out = tmp_path / "p.json"
    assert main(["profile", "--op", "similarity", "--shape", "100,50000,768,10", "--metric", "l2", "--config",
                 "MERGE=5", "--out", str(out)]) == 0
    argv = fake_ncu()[-1]
    child = argv[argv.index("-m") - 1:]
    assert child[1:] == ["-m", "tunelab.profile_target", "similarity", "--shape", "100,50000,768,10", "--dtype", "fp16",
                         "--metric", "l2", "--warmup", "3", "--device", "0", "--config", "MERGE=5"]
    assert argv[argv.index("--profile-from-start") + 1] == "off"
    doc = json.loads(out.read_text())
    assert doc["environment"]["tunelab_version"] and len(doc["kernels"]) == 2
    assert "similarity_topk" in capsys.readouterr().out
    assert main(["profile", "--json", "--", sys.executable, "-c", "pass"]) == 0
    assert json.loads(capsys.readouterr().out)["command"] == [sys.executable, "-c", "pass"]
    for bad, message in ((["profile"], "nothing to profile"), (["profile", "--op", "gram"], "--op needs --shape"),
                         (["profile", "--op", "gram", "--shape", "10,4", "--dtype", "int8"], "int8"),
                         (["profile", "--op", "attention", "--shape", "1,2,3"], "4 positive integers B,H,S,D"),
                         (["profile", "--op", "gram", "--shape", "64,8", "--causal"], "--causal does not apply to --op gram"),
                         (["profile", "--op", "attention", "--shape", "1,1,8,64", "--metric", "l2"],
                          "--metric does not apply to --op attention")):
        assert main(bad) == 2
        assert message in capsys.readouterr().err


def test_target_checks_before_ncu_starts():
    from tunelab.profile_target import check, target_command

    assert check("gram", [64, 8], "c64") == ((64, 8), "complex64")
    with pytest.raises(InputError, match=r"op 'conv' cannot be profiled; the ops are \['similarity'"):
        check("conv", [1], "fp16")
    with pytest.raises(InputError, match="k=20 is larger than n=10"):
        check("similarity", [1, 10, 8, 20], "fp16")
    with pytest.raises(InputError, match="dtype 'fp32' is not supported by the attention op; use fp16, bf16"):
        check("attention", [1, 1, 8, 64], "fp32")
    with pytest.raises(InputError, match=r"metric 'dot'.*\['ip', 'cosine', 'l2'\]"):
        check("similarity", [1, 10, 8, 2], "fp16", metric="dot")
    cmd = target_command("attention", shape=(1, 2, 128, 64), causal=True)
    assert cmd[1:4] == ["-m", "tunelab.profile_target", "attention"] and cmd[-1] == "--causal"
    import subprocess

    bad = subprocess.run([sys.executable, "-m", "tunelab.profile_target", "gram", "--shape", "64,a"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "shape '64,a' is not a comma-separated list of integers" in bad.stderr


def test_readme_profile_figures_are_those_of_the_results():
    """The README's paragraph on `benchmarks/profile_ops.sh` quotes the result files it names, at their commit."""
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    docs = {op: json.loads((root / "benchmarks" / "results" / f"profile_{op}_h200.json").read_text())
            for op in ("similarity_100x50000x768x10", "attention_16x16x512x64", "gram_8192x256")}
    commits = {d["environment"]["git_commit"][:7] for d in docs.values()}
    assert len(commits) == 1 and f"`bash benchmarks/profile_ops.sh _h200` at {commits.pop()}" in readme
    search, select = (k["summary"] for k in docs["similarity_100x50000x768x10"]["kernels"])
    attention = docs["attention_16x16x512x64"]["kernels"][0]["summary"]
    fill, gram = (k["summary"] for k in docs["gram_8192x256"]["kernels"])
    quoted = [f"{search['duration_us']:.1f} µs", f"({search['l2_pct']:.0f}% of peak, DRAM {search['dram_pct']:.0f}%,",
              f"{search['dram_bytes'] / 1e6:.1f} MB", f"{select['duration_us']:.1f} µs",
              f"(L2 {select['l2_pct']:.0f}%)", f"{attention['duration_us']:.1f} µs",
              f"(SM {attention['sm_pct']:.0f}%), {attention['registers']:.0f} registers",
              f"{fill['duration_us']:.1f} µs", f"{gram['duration_us']:.1f} µs at {gram['sm_pct']:.0f}%"]
    flat = " ".join(readme.split())
    for q in quoted:
        assert q in flat, q
    assert search["bound"].startswith("memory: L2") and select["bound"].startswith("latency")
    assert all(r != "selected" for k in (search, select, attention, gram) for r, _ in k["stalls"])


def test_readme_tuned_profile_figures_are_those_of_the_results():
    """The README's paragraph on `benchmarks/profile_tuned.sh` quotes its two result files."""
    root = Path(__file__).resolve().parents[1]
    flat = " ".join((root / "README.md").read_text().split())
    tune = json.loads((root / "benchmarks" / "results" / "tune_similarity_100x50000x768x10_profiled_h200.json")
                      .read_text())
    doc = json.loads(TUNED_PROFILE.read_text())
    assert f"`bash benchmarks/profile_tuned.sh _h200` at {doc['environment']['git_commit'][:7]}" in flat
    assert tune["env"]["git_commit"][:7] == doc["environment"]["git_commit"][:7]
    best, default, theirs = doc["arms"]["best"], doc["arms"]["default"], doc["arms"]["baseline:torch_topk"]
    conf = tune["confirmation"]
    winner = next(a for a in conf["arms"] if a["label"] == conf["best"])
    changed = {k: v for k, v in winner["config"].items() if tune["default_config"].get(k) != v}
    vs_default, vs_torch = conf["speedup_vs_default"], conf["speedup_vs_baseline"]
    search, select = (k["summary"] for k in best["kernels"])
    gemm, *rest = (k["summary"] for k in theirs["kernels"])
    quoted = [f"a {tune['evaluations']}-trial study",
              "the winner (" + ", ".join(f"{k}={v}" for k, v in changed.items()) + ")",
              f"took {best['timer_us']:.1f} µs by the timer against the default's {default['timer_us']:.1f} "
              f"({vs_default['estimate']:.3f}x, CI [{vs_default['low']:.3f}, {vs_default['high']:.3f}]) and torch's "
              f"{theirs['timer_us']:.1f} ({vs_torch['estimate']:.2f}x)",
              f"{best['ncu_total_us']:.1f} µs in {len(best['kernels'])} kernels each",
              f"the search {search['duration_us']:.1f} µs, memory-bound on L2 at {search['l2_pct']:.0f}%",
              f"the select {select['duration_us']:.1f} µs", f"winner's {100 * (vs_default['estimate'] - 1):.1f}%",
              f"torch's baseline is {len(theirs['kernels'])} kernels, {theirs['ncu_total_us']:.1f} µs",
              f"GEMM (`nvjet_*`) {gemm['duration_us']:.1f} µs", f"(L2 {gemm['l2_pct']:.0f}%)",
              f"in {len(rest)} latency-bound kernels, {sum(k['duration_us'] for k in rest):.1f} µs",
              f"`gatherTopK`, {max(k['duration_us'] for k in rest):.1f} µs"]
    for q in quoted:
        assert q in flat, q
    # "level": the two configs' totals under ncu within 1%; "writes the 10 MB score matrix": 100 x 50K fp16
    assert abs(best["ncu_total_us"] - default["ncu_total_us"]) < 0.01 * default["ncu_total_us"]
    assert "writes the 10 MB score matrix" in flat and tune["problem"]["nq"] * tune["problem"]["n"] * 2 == 10_000_000
    assert gemm["kernel"].startswith("nvjet") and max(rest, key=lambda k: k["duration_us"])["kernel"] == "gatherTopK"
    assert all(k["bound"].startswith("latency") for k in rest)


def test_runs_replace_old_reports_stop_on_time_and_take_metric_forms(fake_ncu, tmp_path, monkeypatch):
    """A report left by an earlier run is never read as this run's; a timeout stops the program too; base names,
    ncu's regex: form and stray spaces in metric names are accepted; ``env`` adds to the environment."""
    rep = tmp_path / "r.ncu-rep"
    assert len(P.profile([sys.executable, "-c", "pass"], report=rep).kernels) == 2
    monkeypatch.setenv("FAKE_NCU_NO_REPORT", "1")
    with pytest.raises(P.ProfileError, match="profiled no kernel"):
        P.profile([sys.executable, "-c", "pass"], report=rep)
    monkeypatch.delenv("FAKE_NCU_NO_REPORT")
    monkeypatch.setenv("FAKE_NCU_SAYS", "==WARNING== No kernels were profiled.\n")
    with pytest.raises(P.ProfileError, match="profiled no kernel"):
        P.profile([sys.executable, "-c", "pass"], report=rep)
    monkeypatch.delenv("FAKE_NCU_SAYS")
    late = tmp_path / "late"
    with pytest.raises(P.ProfileError, match="did not finish in 1.0 s and was stopped"):
        P.profile([sys.executable, "-c", f"import time; time.sleep(3); open({str(late)!r}, 'w')"], timeout=1.0)
    import time

    time.sleep(3.5)
    assert not late.exists(), "the program outlived the timeout"
    seen = tmp_path / "env"
    result = P.profile([sys.executable, "-c", f"import os; open({str(seen)!r}, 'w').write(os.environ['FOO'] + "
                        f"str(bool(os.environ.get('PATH'))))"],
                       metrics=["dram__bytes_read", "regex:smsp__.*", " sm__throughput.avg.pct_of_peak_sustained_elapsed "],
                       env={"FOO": "bar"})
    assert seen.read_text() == "barTrue" and result.missing_metrics == [P.L1_ELAPSED_PCT, P.SM_ELAPSED_CYCLES]
    argv = fake_ncu()[-1]
    assert "regex:smsp__.*" in argv[argv.index("--metrics") + 1].split(",")
    with pytest.raises(P.ProfileError, match="profile_from_start cannot be set"):
        P.profile_op("similarity", shape=(1, 10, 8, 2), profile_from_start=True)
    with pytest.raises(P.ProfileError, match=r"launch_skip=-1 must be >= 0"):
        P.profile([sys.executable, "-c", "pass"], launch_skip=-1)


def test_the_command_line_shows_the_program_and_keeps_op_flags_for_ops(fake_ncu, capsys):
    from tunelab.cli import main

    assert main(["profile", "--", sys.executable, "-c", "print('hello from the program')"]) == 0
    io = capsys.readouterr()
    assert "hello from the program" in io.err and "similarity_topk" in io.out
    assert main(["profile", "--dtype", "bf16", "--shape", "1,2", "--", sys.executable, "-c", "pass"]) == 2
    assert "--shape, --dtype describe an op's call" in capsys.readouterr().err


TUNED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "tune_similarity_100x50000x768x10_h100.json"


def _child(argv: list[str]) -> list[str]:
    return argv[argv.index("-m") + 1:]


def test_a_tuning_result_is_profiled_arm_by_arm_as_the_tuner_timed_it(fake_ncu, tmp_path, monkeypatch, capsys):
    """The winner, the default config and the strongest baseline of a real result (an H100's 100 x 50K search),
    each in its own profiled program that rebuilds the tuner's inputs and timing closure, with the confirmation's
    medians beside ncu's times."""
    from tunelab.errors import ConfigError
    from tunelab.tuning.results import TuneResult, load_results

    monkeypatch.setenv("FAKE_NCU_SKIP_PROGRAM", "1")  # the child needs a GPU; the stand-in only records it
    data = load_results(TUNED)
    best = data["confirmation"]["arms"][0]
    assert best["label"] == data["confirmation"]["best"] == "candidate 1"
    tuned = TuneResult(data).profile(progress=False, report=tmp_path / "rep")
    runs = [_child(a) for a in fake_ncu()]
    assert [r[:3] for r in runs] == [["tunelab.profile_target", "family", "similarity"]] * 3
    for r in runs:
        assert json.loads(r[r.index("--problem") + 1]) == data["problem"]
        assert "--profile-from-start" not in r
    assert json.loads(runs[0][runs[0].index("--config") + 1]) == best["config"]
    assert json.loads(runs[1][runs[1].index("--config") + 1]) == data["default_config"]
    assert runs[2][-2:] == ["--baseline", "torch_topk"] and "--config" not in runs[2]
    assert list(tuned.arms) == ["best", "default", "baseline:torch_topk"]
    assert tuned.specs["best"].timer_us == pytest.approx(53.456, abs=1e-3)
    assert tuned.specs["default"].timer_us == pytest.approx(53.824, abs=1e-3)
    assert tuned.specs["baseline:torch_topk"].timer_us == pytest.approx(137.136, abs=1e-3)
    assert tuned.total_us("best") == pytest.approx(sum(k.duration_us for k in tuned.arms["best"].kernels))
    assert (tmp_path / "rep_baseline_torch_topk.ncu-rep").is_file() and (tmp_path / "rep_best.ncu-rep").is_file()
    assert P._report_path(tmp_path / "x.ncu-rep", "baseline:a b/c") == str(tmp_path / "x_baseline_a_b_c")
    text = " ".join(tuned.table().split())
    for want in ("the tuned winner (candidate 1, BLOCK_N=", "53.5 µs by the tuner's timer", "the baseline torch_topk",
                 "137.1 µs by the tuner's timer", "similarity_topk"):
        assert want in text, want
    doc = tuned.to_json()
    assert doc["arms"]["default"]["timer_us"] == pytest.approx(53.824, abs=1e-3)
    assert len(doc["arms"]["best"]["kernels"]) == 2 and json.dumps(doc)

    # a winner that is the default config is profiled once; a named baseline; unknown arms
    same = json.loads(json.dumps(data))
    same["confirmation"]["arms"][0]["config"] = dict(data["default_config"])
    arms, notes = P.tuned_arms(same, ["best", "default", "baseline:torch_topk"])
    assert [a.label for a in arms] == ["best", "baseline:torch_topk"]
    assert notes == ["default: the same config as best, profiled once"]
    with pytest.raises(P.ProfileError, match=r"arm\(s\) \['fastest'\] not known; accepted: best, default, baseline"):
        P.tuned_arms(data, ["fastest"])
    replayed = dict(data, mode="replay")
    with pytest.raises(P.ProfileError, match="made in 'replay' mode"):
        P.profile_tuned(replayed)
    with pytest.raises(P.ProfileError, match=r"has no \['problem'\]"):
        P.profile_tuned({"family": "similarity"})
    with pytest.raises(ConfigError, match=r"unknown kernel family 'example_scale'.*pass it: profile_tuned\(result, family="):
        P.tuned_arms({"family": "example_scale", "problem": {"n": 1000}})
    # every arm is checked before ncu starts: a bad last arm costs no profile of the first ones
    runs_before = len(fake_ncu())
    with pytest.raises(ConfigError, match=r"no baseline 'cublas' for this problem; its baselines are \['torch_topk'\]"):
        P.profile_tuned(data, ["best", "baseline:cublas"], progress=False)
    with pytest.raises(P.ProfileError, match="contains '%'"):
        P.profile_tuned(data, ["best"], progress=False, report=tmp_path / "r%p")
    assert len(fake_ncu()) == runs_before

    # the command line: --result, --arms, --out
    from tunelab.cli import main

    out = tmp_path / "tuned.json"
    assert main(["profile", "--result", str(TUNED), "--arms", "best,baseline", "--out", str(out)]) == 0
    assert len(fake_ncu()) == 5
    doc = json.loads(out.read_text())
    # tuned on an H100, profiled elsewhere: no driver here, so no note; the note itself is tested below
    assert list(doc["arms"]) == ["best", "baseline:torch_topk"] and doc["environment"]["tunelab_version"]
    io = capsys.readouterr()
    assert "the tuned winner" in io.out and "[1/2] profiling best" in io.err
    for bad, message in ((["profile", "--result", str(TUNED), "--op", "gram"], "--op cannot be given with it"),
                         (["profile", "--result", str(TUNED), "--", "python"], "a command cannot be given with it"),
                         (["profile", "--arms", "best", "--op", "gram", "--shape", "8,8"], "--arms chooses among"),
                         (["profile", "--result", str(tmp_path / "none.json")], "none.json")):
        assert main(bad) == 2, bad
        assert message in capsys.readouterr().err, message


def test_the_family_target_checks_its_arguments_without_a_gpu(tmp_path):
    import subprocess

    from tunelab.errors import ConfigError
    from tunelab.profile_target import check_family, family_command

    problem = json.loads(TUNED.read_text())["problem"]
    cmd = family_command("similarity", problem, baseline="torch_topk", warmup=2)
    assert cmd[1:5] == ["-m", "tunelab.profile_target", "family", "similarity"] and cmd[-4:-2] == ["--seed", "0"]
    with pytest.raises(ConfigError, match="exactly one of a config and a baseline to profile; got neither"):
        check_family("similarity", problem)
    with pytest.raises(ConfigError, match="missing parameter"):
        check_family("similarity", problem, config={"BLOCK_N": 128})
    with pytest.raises(ConfigError, match=r"unknown kernel family 'conv'; accepted families are \['attention'"):
        family_command("conv", problem, baseline="x")
    with pytest.raises(InputError, match="warmup=-1"):
        family_command("similarity", problem, baseline="torch_topk", warmup=-1)
    bad = subprocess.run([sys.executable, "-m", "tunelab.profile_target", "family", "similarity", "--problem", "{nq"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--problem: '{nq' is not JSON" in bad.stderr


def test_the_family_target_rebuilds_what_the_parent_checked(monkeypatch):
    """The child's arguments carry the config, problem and family through JSON unchanged, and a family that is not
    tunelab's own travels by its worker_ref (here the example family, rebuilt with its keyword arguments)."""
    from tunelab import profile_target as T
    from tunelab.errors import ConfigError
    from tunelab.tuning.examples import ScaleFamily
    from tunelab.tuning.family import get_family

    data = json.loads(TUNED.read_text())
    seen = {}

    def fake_call(family, problem, *, config=None, baseline=None, device=0, seed=0):
        seen.update(family=family, problem=problem, config=config, baseline=baseline, device=device, seed=seed)
        return lambda: None

    monkeypatch.setattr(T, "make_family_call", fake_call)
    cmd = T.family_command("similarity", data["problem"], config=data["default_config"], warmup=1, device=2, seed=5)
    assert T._family_main(cmd[4:])[0] == 1
    assert seen["config"] == data["default_config"] and seen["problem"] == data["problem"]
    assert T.resolve_family(seen["family"]).name == "similarity" and (seen["device"], seen["seed"]) == (2, 5)
    scale = ScaleFamily(faults={"trap": [{"BLOCK": 128, "UNROLL": 1}]})
    cmd = T.family_command(scale, {"n": 1000}, baseline="torch_mul")
    T._family_main(cmd[4:])
    rebuilt = T.resolve_family(seen["family"])
    assert isinstance(rebuilt, ScaleFamily) and rebuilt.faults == scale.faults and seen["baseline"] == "torch_mul"

    class Local(type(get_family("gram"))):
        name = "local_gram"

        def worker_ref(self):
            return self

    with pytest.raises(ConfigError, match=r"family 'local_gram' cannot be rebuilt in the profiled program.*module:attr"):
        T.family_command(Local(), {"n": 64, "dim": 8, "dtype": "fp32"}, baseline="torch_matmul_abs2")
    fam = get_family("similarity")
    space = fam.space(fam.problem_from_dict(data["problem"]))
    bad = dict(data["default_config"], WARPS_N=1, WARPS_Q=1, BLOCK_Q=8, MMA=0, MERGE=0, BLOCK_N=64)
    assert space.rejection(space.validate(bad)) is not None or fam.static_gates(space.complete(bad), None)
    with pytest.raises(ConfigError, match=r"cannot run on this problem \(static\."):
        T.check_family("similarity", data["problem"], config=bad)


def test_a_result_tuned_on_another_gpu_says_so(monkeypatch):
    from tunelab import _core
    from tunelab.tuning.results import TuneResult

    data = json.loads(TUNED.read_text())  # an H100's
    monkeypatch.setattr(_core, "device_info", lambda i: {"name": "NVIDIA H200", "uuid": "GPU-x"})
    note = P._device_note(TuneResult(data), 0)
    assert note.startswith("the result was tuned on NVIDIA H100") and "this is NVIDIA H200 (GPU-x)" in note
    monkeypatch.setattr(_core, "device_info", lambda i: dict(data["device"]))
    assert P._device_note(TuneResult(data), 0) is None


def test_tune_profile_writes_its_profile_beside_the_results(fake_ncu, tmp_path, monkeypatch, capsys):
    """`tunelab tune --profile` profiles the finished study with a per-arm timeout, prints the table and writes every
    counter to RESULTS.profile.json; a profile that fails leaves the study's results and names the command to profile
    them again (the study itself stands in as the H100's result: tuning needs a GPU)."""
    from tunelab.cli import main
    from tunelab.tuning import api
    from tunelab.tuning.cli import profile_path_for
    from tunelab.tuning.results import TuneResult, load_results

    monkeypatch.setenv("FAKE_NCU_SKIP_PROGRAM", "1")
    monkeypatch.setenv("COLUMNS", "250")
    results = tmp_path / "study.json"

    def fake_tune(family, problem, **kw):
        assert family == "similarity" and kw["results_path"] == str(results)
        data = load_results(TUNED)
        results.write_text(json.dumps(data))
        return TuneResult(dict(data, path=str(results)))

    timeouts = []
    real_profile = P.profile
    monkeypatch.setattr(P, "profile", lambda cmd, **kw: timeouts.append(kw["timeout"]) or real_profile(cmd, **kw))
    monkeypatch.setattr(api, "tune", fake_tune)
    argv = ["tune", "similarity", "--nq", "100", "--n", "50000", "--d", "768", "--k", "10", "--storage", "memory",
            "--results", str(results), "--quiet", "--profile"]
    assert main(argv + ["--profile-timeout", "120"]) == 0
    assert timeouts == [120.0] * 3 and len(fake_ncu()) == 3
    out = profile_path_for(results)
    assert out == tmp_path / "study.profile.json" and profile_path_for("a/b") == Path("a/b.profile.json")
    doc = json.loads(out.read_text())
    assert list(doc["arms"]) == ["best", "default", "baseline:torch_topk"] and doc["results"] == str(results)
    assert doc["environment"]["tunelab_version"] and doc["arms"]["best"]["kernels"]
    printed = " ".join(capsys.readouterr().out.split())
    assert "the tuned winner" in printed and f"profile written: {out}" in printed
    out.unlink()

    monkeypatch.setenv("FAKE_NCU_RC", "1")
    monkeypatch.setenv("FAKE_NCU_SAYS", "==ERROR== the counters are busy\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"the study's results are saved in {results}: profile them again with `tunelab profile --result " \
        f"{results}`" in err
    assert "the counters are busy" in err and results.is_file() and not out.exists()
    assert timeouts[-1] == 900.0  # the default
    with pytest.raises(SystemExit) as bad:
        main(argv + ["--profile-timeout", "0"])
    assert bad.value.code == 2 and "--profile-timeout: 0.0 must be > 0" in capsys.readouterr().err


def test_tune_profile_is_refused_where_it_cannot_run(tmp_path, monkeypatch, capsys):
    """`tunelab tune --profile` says at once that a replay measures nothing here, or that ncu is missing, rather than
    after the study."""
    from tunelab.cli import main

    replay = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "attention_fp16_b16_h16_s512_d64.replay.json.gz"
    assert main(["tune", "attention", "--replay", str(replay), "--profile", "--storage", "memory"]) == 2
    assert "--profile reads hardware counters on this GPU; a --replay run measures nothing here" in \
        capsys.readouterr().err
    monkeypatch.setenv("TUNELAB_NCU", str(tmp_path / "no-ncu"))
    assert main(["tune", "attention", "--shape", "1,1,128,64", "--profile", "--storage", "memory"]) == 2
    assert "no-ncu is not an executable" in capsys.readouterr().err
