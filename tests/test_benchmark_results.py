"""The benchmark scripts on the CPU: their result files (benchmarks/_common.write_result: one naming rule for
every --tag) and their arguments."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("tag, name", [(None, "bench"), ("", "bench"), ("h100", "bench_h100"),
                                       ("_h100", "bench_h100"), ("__h100_x", "bench_h100_x")])
def test_write_result_joins_the_tag_by_one_underscore(tmp_path, monkeypatch, load_benchmark, tag, name):
    """A script's --tag is joined to the result's name by one underscore whether or not it starts with one (the
    scripts used to differ: some added one, others took the tag as given), and the file records that name."""
    common = load_benchmark("_common")
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.delenv("OUT", raising=False)
    path = common.write_result("bench", {"rows": [1]}, tag)
    assert path == tmp_path / f"{name}.json" and [p.name for p in tmp_path.iterdir()] == [f"{name}.json"]
    doc = json.loads(path.read_text())
    assert doc["benchmark"] == name and doc["rows"] == [1] and "environment" in doc


@pytest.mark.parametrize("name", ["similarity_floor", "similarity_op_host"])
def test_untagged_scripts_refuse_an_argument_they_do_not_take(load_benchmark, capsys, name):
    """similarity_floor.py and similarity_op_host.py take --tag for their result's name and stop on any other argument
    before GPU work (they used to take none and ignore what they were given, so a --tag run overwrote the untagged
    result)."""
    script = load_benchmark(name)
    with pytest.raises(SystemExit) as stop:
        script.main(["--tags", "h200"])
    assert stop.value.code == 2 and "unrecognized arguments: --tags h200" in capsys.readouterr().err


def test_similarity_filtered_variant_arms_are_checked(load_benchmark):
    """similarity_filtered.py --variant-arms takes arms of the script's own (in the order given) and names a wrong
    one, and the accepted arms, in its error; --variant reads NAME:MACRO=VALUE and says the form when the name is
    missing."""
    import argparse

    script = load_benchmark("similarity_filtered")
    assert script.parse_arms("dense, warps") == ("dense", "warps")
    with pytest.raises(argparse.ArgumentTypeError, match=r"fused, dense, filtered, warps.*'dens' not among them"):
        script.parse_arms("dens,warps")
    with pytest.raises(argparse.ArgumentTypeError, match="it names none"):
        script.parse_arms(",")
    # --variant NAME:MACRO=VALUE,... (_common.named_pairs with the kernel's define syntax)
    want = ("nowait", {"TUNELAB_SIM_FILTER_WAIT_NS": "0"})
    assert script.parse_variant("nowait:TUNELAB_SIM_FILTER_WAIT_NS=0") == want
    with pytest.raises(argparse.ArgumentTypeError, match=r"--variant 'nowait': expected NAME:MACRO=VALUE.*no NAME:"):
        script.parse_variant("nowait")


def test_similarity_filtered_shapes_are_checked(load_benchmark):
    """similarity_filtered.py --shapes reads NQxNxDTYPE lists in order and names a malformed entry with the form and
    the accepted dtypes."""
    import argparse

    script = load_benchmark("similarity_filtered")
    assert script.parse_shapes("100x50000xfloat16, 32x25000xbfloat16") == [(100, 50000, "float16"),
                                                                           (32, 25000, "bfloat16")]
    for bad in ("100x50000xfp16", "100x50000", "0x50000xfloat16", "ax5xfloat32"):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"{bad!r} is not NQxNxDTYPE.*float16, bfloat16, float32"):
            script.parse_shapes(f"1x10xfloat32,{bad}")
    with pytest.raises(argparse.ArgumentTypeError, match="names no shape"):
        script.parse_shapes(" , ")


def test_key_stores_variants_are_checked(load_benchmark):
    """similarity_key_stores.py --variants runs plain first (the reference) and each named variant once, and names an
    unknown one, and the accepted names, in its error."""
    import argparse

    script = load_benchmark("similarity_key_stores")
    assert script.parse_variants("cs, evict_first,cs") == ["plain", "cs", "evict_first"]
    assert script.parse_variants("cg,plain") == ["plain", "cg"]
    with pytest.raises(argparse.ArgumentTypeError,
                       match=r"--variants 'cs,key16': expected .*plain, evict_last, cs.*'key16' not among them"):
        script.parse_variants("cs,key16")


def test_key_stores_arms_are_checked(load_benchmark):
    """similarity_key_stores.py --arm NAME:KEY=VALUE,... parses integer config entries (spaces around the name, keys
    and values allowed) and refuses a missing name, a pair without '=', a non-integer value and a name that is one of
    the store variants, saying the form; --macro NAME:MACRO=VALUE,... alike for macros."""
    import argparse

    script = load_benchmark("similarity_key_stores")
    assert script.parse_arm("c2:CLUSTER=2, STAGES=5") == ("c2", {"CLUSTER": 2, "STAGES": 5})
    assert script.parse_arm(" c2 :CLUSTER = 2") == ("c2", {"CLUSTER": 2})
    for bad in ("c2", ":CLUSTER=2", "x:CLUSTER", "x:CLUSTER=two", "plain:CLUSTER=2"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"expected NAME:KEY=VALUE\[,KEY=VALUE...\]"):
            script.parse_arm(bad)
    # --macro NAME:MACRO=VALUE,...: the dense default compiled with the macros
    assert script.parse_macro_arm("cs2: TUNELAB_SIM_KEY_STORE=2") == ("cs2", {"TUNELAB_SIM_KEY_STORE": "2"})
    for bad in ("cs2", "plain:TUNELAB_SIM_KEY_STORE=2", "x:NOT A MACRO=1"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"expected NAME:MACRO=VALUE\[,MACRO=VALUE...\]"):
            script.parse_macro_arm(bad)


def test_op_host_ab_overlay_puts_the_before_files_in_place(load_benchmark, tmp_path):
    """similarity_op_host_ab.py --before DIR: DIR's files (laid out as the package) replace the installed ones in a
    copy of the package, the rest is left as installed, and a file that replaces nothing, or an empty DIR, is refused
    by name before any GPU work."""
    import tunelab

    script = load_benchmark("similarity_op_host_ab")
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "dispatch.py").write_text("MARK = 1\n")
    root = script.overlay(tmp_path)
    assert (root / "tunelab" / "ops" / "dispatch.py").read_text() == "MARK = 1\n"
    installed = Path(tunelab.__file__).parent / "ops" / "similarity.py"
    assert (root / "tunelab" / "ops" / "similarity.py").read_text() == installed.read_text()
    (tmp_path / "ops" / "nothing_here.py").write_text("")
    with pytest.raises(SystemExit, match=r"nothing_here.py replaces nothing"):
        script.overlay(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match=r"no files to put in place"):
        script.overlay(tmp_path / "empty")
    import argparse

    assert script.nq_n_list("1x1024, 100x4096") == ((1, 1024), (100, 4096))  # --shapes (_common's parser)
    for bad in ("100", "0x10", "ax5", "1x1024,"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not NQxN"):
            script.nq_n_list(bad)


def test_sass_compare_tells_a_comment_from_a_code_change(load_benchmark, tmp_path):
    """similarity_sass_compare.py compiles a build from the installed kernel tree and from overlays of it: a comment
    added to ptx.cuh leaves every function's SASS identical, a different default store policy (st.global.cs) changes
    the search's; --builds refuses an unknown build by name. Needs NVRTC and a cuobjdump (skipped without one), no
    GPU."""
    import argparse

    import tunelab.paths

    script = load_benchmark("similarity_sass_compare")
    try:
        tool = script.find_cuobjdump()
    except SystemExit:
        pytest.skip("no cuobjdump on this machine")
    build = script.builds()["100x50000xfloat16"]
    ptx = (tunelab.paths.kernels_dir() / "similarity" / "ptx.cuh").read_text()
    assert "#define TUNELAB_SIM_KEY_STORE 0" in ptx
    for name, text in (("comment", ptx + "\n// a comment\n"),
                       ("policy", ptx.replace("#define TUNELAB_SIM_KEY_STORE 0", "#define TUNELAB_SIM_KEY_STORE 2"))):
        (tmp_path / name / "similarity").mkdir(parents=True)
        (tmp_path / name / "similarity" / "ptx.cuh").write_text(text)
    same = script.compare(build, tmp_path / "comment", None, tool, compiles=1)
    assert same["identical"] and not same["differ"] and same["after"]["functions"]
    changed = script.compare(build, tmp_path / "policy", None, tool, compiles=1)
    assert not changed["identical"] and any("similarity_topk" in f for f in changed["differ"])
    parse = script.names_in(tuple(script.builds()), "--builds", "merge6,dense_trace")
    with pytest.raises(argparse.ArgumentTypeError, match="merge9"):
        parse("merge6,merge9")


def test_time_rounds_interleaves_the_core_timer(load_benchmark, monkeypatch):
    """_common.time_rounds runs the core's timer over its calls in interleaved rounds (A B A B), each with its own
    keyword arguments, one untimed warm-up and the samples asked; time_after maps (state, name) to a callable and
    its L2 state's arguments. (time_callable is replaced by a recorder: no GPU.)"""
    import numpy as np

    import tunelab.timing

    common = load_benchmark("_common")
    seen = []

    def record(fn, *, warmup, samples, **kwargs):
        seen.append((fn, warmup, samples, kwargs))
        return np.full(samples, float(len(seen)))

    monkeypatch.setattr(tunelab.timing, "time_callable", record)
    a, b = (lambda: None), (lambda: None)
    out = common.time_rounds({"a": (a, {"flush_l2": True}), "b": (b, {"flush_l2": False})}, rounds=2, samples=3)
    assert [s[0] for s in seen] == [a, b, a, b] and all(s[1:3] == (1, 3) for s in seen)
    assert [s[3]["flush_l2"] for s in seen] == [True, False, True, False]
    assert list(out["a"]) == [1, 1, 1, 3, 3, 3] and list(out["b"]) == [2, 2, 2, 4, 4, 4]
    seen.clear()
    states = {"write": {"flush_l2": True}, "none": {"flush_l2": False}}
    out = common.time_after({"x": a}, [("write", "x"), ("none", "x")], states, rounds=1, samples=2)
    assert set(out) == {("write", "x"), ("none", "x")} and [s[3] for s in seen] == [states["write"], states["none"]]


def test_l2_states_are_checked(load_benchmark):
    """--l2 (similarity_key_stores.py) takes states of _common.L2_STATES once each, in the order given, and names an
    unknown one, and the accepted states, in its error; an empty list is refused too. --l2-samples (int_in) takes
    one integer in its range and says the range otherwise."""
    import argparse

    common = load_benchmark("_common")
    assert common.l2_states("read, write,read") == ["read", "write"]
    assert common.l2_states("none") == ["none"]
    with pytest.raises(argparse.ArgumentTypeError,
                       match=r"--l2 'write,dirty': expected .*write, read, none.*'dirty' not among them"):
        common.l2_states("write,dirty")
    with pytest.raises(argparse.ArgumentTypeError, match=r"write, read, none.*it names none"):
        common.l2_states(" , ")
    samples = common.int_in(1, 1000, "samples a round and arm")  # --l2-samples
    assert samples("15") == 15
    with pytest.raises(argparse.ArgumentTypeError, match=r"'0': outside 1..1000 \(samples a round and arm\)"):
        samples("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"'many': pass an integer in 1..1000"):
        samples("many")


def test_second_kernel_nops_compile_for_hopper_and_ampere(load_benchmark):
    """similarity_second_kernel.py's nop compiles for sm_90 (where the programmatic form waits with
    griddepcontrol.wait) and for sm_80 (where the wait compiles to nothing), with and without the wait: a source
    error, or a wait that reaches sm_80's compile, fails NVRTC here rather than on the device."""
    kern = load_benchmark("similarity_second_kernel").nop_kernel()
    for arch in ("sm_90", "sm_80"):
        for wait in (0, 1):
            ck = kern.compile({"WAIT": wait}, arch=arch, use_cache=False)
            assert ck.resources.spill_store_bytes == 0 and ck.result.cubin


def _expand_braces(name: str) -> list[str]:
    """`a{,_x,_y}b` -> ['ab', 'a_xb', 'a_yb'] (shell-style, groups not nested)."""
    m = re.search(r"\{([^{}]*)\}", name)
    if not m:
        return [name]
    return [e for alt in m.group(1).split(",") for e in _expand_braces(name[:m.start()] + alt + name[m.end():])]


@pytest.mark.parametrize("doc", ["README.md", "benchmarks/SIMILARITY.md"])
def test_docs_cite_result_files_that_exist(doc):
    """Every `results/NAME` a document cites (brace groups and * patterns included) names a file in
    benchmarks/results/: a figure is only as good as the file behind it, and a renamed or dropped result would
    otherwise leave a citation pointing nowhere."""
    bench = ROOT / "benchmarks"
    text = (ROOT / doc).read_text()
    cited = {m.rstrip(".,;:)") for m in re.findall(r"results/[A-Za-z0-9_.\-{},*]+", text)}
    cited = {c for c in cited if re.search(r"\.(json|txt|log|csv|gz)$", c) or c.endswith("*")}
    assert len(cited) >= 2, f"{doc}: found only {sorted(cited)}; did the citation form change?"
    missing = [name for c in sorted(cited) for name in _expand_braces(c) if not list(bench.glob(name))]
    assert not missing, f"{doc} cites result files that are not in benchmarks/results: {missing}"


def test_readme_similarity_figures_name_the_run_in_results(load_benchmark):
    """The README's similarity table is results/similarity.json's (as `similarity.py --readme-table` prints it) and
    names the commit it ran at; a rerun that replaces the file without the README's figures shows up here."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"`results/similarity\.json` at ([0-9a-f]{7,40})", text)
    assert m, "the README no longer says which run of similarity.py its table quotes"
    run = json.loads((ROOT / "benchmarks" / "results" / "similarity.json").read_text())
    commit = run["environment"]["git_commit"]
    assert commit.startswith(m.group(1)), f"README quotes the run at {m.group(1)}, results/similarity.json is {commit}"
    table = load_benchmark("similarity").readme_table(run["search"])
    assert "| fp16 | 50K | 100 |" in table  # the goal the README discusses
    assert table in text, ("the README's similarity table differs from results/similarity.json's; paste the output of "
                           "python3 benchmarks/similarity.py --readme-table benchmarks/results/similarity.json")
