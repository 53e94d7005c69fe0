"""Attention family on the CPU: search space, static gates, NVRTC compiles for sm_80/sm_90, the shared-memory
formula against the kernel's own layout, spills of the defaults, op input validation, and the kernel's own
source run on the CPU emulator (tests/attention_emulator) against a float64 reference."""
from __future__ import annotations

import concurrent.futures as cf
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tunelab
from tunelab import _core
from tunelab.errors import CompileError, ConfigError, InputError

torch = pytest.importorskip("torch")

import tunelab.ops.attention as ops  # noqa: E402
from tunelab.tuning.families import attention as fam  # noqa: E402

ARCHS = ("sm_80", "sm_90")
HEAD_DIMS = ops.SUPPORTED_HEAD_DIMS
REPO = Path(__file__).resolve().parents[1]


def _problem(head_dim, dtype="float16", causal=False):
    return fam.AttentionProblem(batch=2, heads=4, seq_q=333, seq_k=333, head_dim=head_dim, dtype=dtype, causal=causal)


# ------------------------------------------------------------------------------------------------ space
def test_space_sizes_are_the_documented_ones():
    """The valid-space table in the family's docstring is computed, not guessed: recompute it."""
    sizes = fam.space_sizes()
    table = re.findall(r"^(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", fam.__doc__, flags=re.M)
    documented = {int(d): (int(v), int(s90), int(s80)) for d, v, s90, s80 in table}
    assert set(documented) == set(HEAD_DIMS)
    for d, row in sizes.items():
        assert documented[d] == (row["valid"], row["sm_90"], row["sm_80"]), f"head dim {d}: {row}"
        assert row["raw"] == 21870


def test_space_params_are_the_kernel_tunables():
    space = fam.space_for(128)
    assert space.names == list(ops.PARAM_NAMES)
    for p in space.params:
        assert list(p.choices) == list(ops.PARAM_CHOICES[p.name])
    assert space.count_valid() > 1000


def test_python_smem_formula_equals_the_launchers():
    for d in (32, 96, 128):
        for c in list(fam.space_for(d).enumerate())[::7]:
            assert fam.smem_bytes_py(c, d) == fam.smem_bytes(c, d), (d, c)


def test_constraints_reject_what_the_launcher_rejects():
    """Every divisibility rule of the kernel is a constraint: nothing valid in the space fails validate()."""
    space = fam.space_for(64)
    n_bad = 0
    for c in space.enumerate(valid_only=False):
        ok, _ = space.check(c)
        try:
            _core.attention.validate(c, 64, 0)
            launcher_ok = True
        except ConfigError:
            launcher_ok = False
        if ok:
            assert launcher_ok, c
        n_bad += not launcher_ok
    assert n_bad > 0


def test_config_errors_name_value_and_accepted_values():
    good = ops.default_config(64)
    with pytest.raises(ConfigError, match=r"BLOCK_M=48.*accepted values are \[16, 32, 64, 128, 256\]"):
        ops.canonical_config(dict(good, BLOCK_M=48))
    with pytest.raises(ConfigError, match="unknown parameter.*BLOCK_K"):
        ops.canonical_config(dict(good, BLOCK_K=64))
    with pytest.raises(ConfigError, match="missing.*STAGES"):
        ops.canonical_config({k: v for k, v in good.items() if k != "STAGES"})
    with pytest.raises(ConfigError, match="KV_SPLIT_WARPS=4 must divide NUM_WARPS=2"):
        _core.attention.validate(dict(good, NUM_WARPS=2, KV_SPLIT_WARPS=4, BLOCK_M=32), 64, 0)
    with pytest.raises(ConfigError, match="BLOCK_M=32 must be a multiple of 16 \\* NUM_WARPS"):
        _core.attention.validate(dict(good, BLOCK_M=32, NUM_WARPS=4), 64, 0)
    with pytest.raises(ConfigError, match="head_dim=80 is not supported"):
        _core.attention.validate(good, 80, 0)
    # grid and threads check the config like every other launcher entry (BLOCK_M=0 used to divide by zero)
    with pytest.raises(ConfigError, match="BLOCK_M=0"):
        _core.attention.grid(dict(good, BLOCK_M=0), 1, 1, 100)
    with pytest.raises(ConfigError, match="NUM_WARPS=3"):
        _core.attention.threads(dict(good, NUM_WARPS=3))
    assert tuple(_core.attention.grid(good, 2, 3, 100)) == (-(-100 // good["BLOCK_M"]), 3, 2)


def test_static_gates_reject_with_reasons():
    f = fam.AttentionFamily()
    big = dict(ops.default_config(256), BLOCK_M=128, BLOCK_N=64, STAGES=2, SWIZZLE=2)  # 198 KiB
    smem = fam.smem_bytes(big, 256)
    assert 166912 < smem <= fam.MAX_SMEM_ANY_ARCH
    rej = f.static_gates(big, _problem(256), arch="sm_80")
    assert rej and rej[0].code == "static.smem" and str(smem) in rej[0].detail and "sm_80" in rej[0].detail
    assert f.static_gates(big, _problem(256), arch="sm_90") == []


# ------------------------------------------------------------------------------------------------ compiling
def _compile_or_gate(config, head_dim, dtype, causal):
    """Static gates for both archs, else compile for each arch; returns a list of (arch, outcome)."""
    f = fam.AttentionFamily()
    space = fam.space_for(head_dim, dtype, causal)
    rej = space.rejection(config)
    if rej is not None:
        return [("any", f"rejected {rej.code}: {rej.detail}")]
    out = []
    for arch in ARCHS:
        gates = f.static_gates(space.complete(config), _problem(head_dim, dtype, causal), arch=arch)
        if gates:
            out.append((arch, f"rejected {gates[0].code}: {gates[0].detail}"))
            continue
        ca = ops.compile_config(config, head_dim=head_dim, dtype=dtype, causal=causal, arch=arch)
        r = ca.resources
        assert r.static_smem_bytes == 0, "all shared memory is dynamic; ptxas must report 0 static bytes"
        assert ca.smem_bytes == fam.smem_bytes(config, head_dim, dtype)
        out.append((arch, r))
    return out


def test_random_sample_is_gated_or_compiles_for_sm80_and_sm90():
    """48 configs drawn from the raw product (valid or not) over head dims, dtypes and causal: each is rejected
    by a static gate with a reason, or compiles for sm_80 and sm_90 (with TUNELAB_EXPECTED_SMEM asserting the
    launcher's smem formula inside the kernel)."""
    rng = random.Random(1234)
    jobs = []
    for i in range(48):
        d = HEAD_DIMS[i % len(HEAD_DIMS)]
        dtype = ("float16", "bfloat16")[(i // 5) % 2]
        causal = bool((i // 10) % 2)
        space = fam.space_for(d, dtype, causal)
        # half the draws from the valid configs so the compile path is exercised, half from the raw product
        if i % 2:
            config = {p.name: rng.choice(p.choices) for p in space.params}
        else:
            config = rng.choice(list(space.enumerate()))
        jobs.append((config, d, dtype, causal))
    with cf.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as ex:
        results = list(ex.map(lambda j: _compile_or_gate(*j), jobs))
    compiled = gated = 0
    for (config, d, dtype, causal), outcome in zip(jobs, results):
        for arch, r in outcome:
            if isinstance(r, str):
                assert r.startswith("rejected static.") and len(r) > 25, (config, r)
                gated += 1
            else:
                assert r.registers > 0
                compiled += 1
    assert compiled >= 30 and gated >= 5, (compiled, gated)


def test_expected_smem_static_assert_is_live():
    """Compiling with a wrong TUNELAB_EXPECTED_SMEM must fail: the check really compares formula and kernel."""
    cfg = ops.canonical_config(ops.default_config(64))
    expr = _core.attention.name_expression(cfg, 0, 64, False)
    right = _core.attention.smem_bytes(cfg, 64, 0)
    inc = [str(tunelab.kernels_dir())]
    r = _core.compile(ops._SOURCE, [expr], "sm_90", [], {"TUNELAB_EXPECTED_SMEM": str(right)}, {}, inc, 0, False)
    assert r.resources[expr].static_smem_bytes == 0
    with pytest.raises(CompileError, match="smem formula disagrees"):
        _core.compile(ops._SOURCE, [expr], "sm_90", [], {"TUNELAB_EXPECTED_SMEM": str(right + 16)}, {}, inc, 0,
                      False)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_default_configs_compile_without_spills(head_dim):
    for arch in ARCHS:
        for dtype in ("float16", "bfloat16"):
            for causal in (False, True):
                cfg = ops.default_config(head_dim, dtype, causal, arch=arch)
                assert fam.space_for(head_dim, dtype, causal).check(cfg)[0]
                r = ops.compile_config(cfg, head_dim=head_dim, dtype=dtype, causal=causal, arch=arch).resources
                assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0 and r.stack_bytes == 0, \
                    (arch, dtype, causal, cfg, r)
                assert r.static_smem_bytes == 0


@pytest.mark.parametrize("head_dim", [64, 128])
def test_every_tunable_changes_the_generated_code(head_dim):
    """For each tunable, two valid configs that differ only in it (the pair closest to the default): their
    machine code must differ, so no tunable is a flag the kernel ignores."""
    base = ops.default_config(head_dim)
    space = fam.space_for(head_dim)
    valid = list(space.enumerate())
    for p in space.params:
        groups: dict = {}
        for c in valid:
            groups.setdefault(tuple(v for k, v in c.items() if k != p.name), []).append(c)
        pairs = [g for g in groups.values() if len(g) >= 2]
        assert pairs, f"no two valid configs differ only in {p.name}"
        best = min(pairs, key=lambda g: sum(g[0][k] != base[k] for k in base if k != p.name))
        a, b = best[0], best[1]
        code_a = _text_section(ops.compile_config(a, head_dim=head_dim, arch="sm_90").result.cubin)
        code_b = _text_section(ops.compile_config(b, head_dim=head_dim, arch="sm_90").result.cubin)
        assert code_a != code_b, f"{p.name}: {a[p.name]} and {b[p.name]} compile to the same code ({a})"


def _text_section(cubin: bytes) -> bytes:
    """The kernel's machine code (the .text section of the cubin's ELF; names and metadata excluded)."""
    import struct

    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_off = sections[shstrndx][4]
    out = b""
    for s in sections:
        name = cubin[names_off + s[0]:cubin.index(b"\0", names_off + s[0])]
        if name.startswith(b".text."):
            out += cubin[s[4]:s[4] + s[5]]
    assert out
    return out


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_whole_space_sweep(head_dim):
    """Every valid config of the head dim's space (fp16, non-causal) passes the sm_90 static gates and compiles,
    or is rejected by a static gate; records spill counts (rejected later by the compiled gates)."""
    space = fam.space_for(head_dim)
    f = fam.AttentionFamily()
    problem = _problem(head_dim)

    def one(c):
        gates = f.static_gates(space.complete(c), problem, arch="sm_90")
        if gates:
            return "gated"
        r = ops.compile_config(c, head_dim=head_dim, arch="sm_90").resources
        assert r.static_smem_bytes == 0
        return "spills" if r.spill_store_bytes or r.spill_load_bytes else "clean"

    with cf.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        outcomes = list(ex.map(one, space.enumerate()))
    counts = {k: outcomes.count(k) for k in ("clean", "spills", "gated")}
    print(f"head dim {head_dim}: {counts}")
    assert counts["clean"] > 0


# ------------------------------------------------------------------------------------------------ the op
def _fake_cuda(shape, dtype=torch.float16, device="cuda"):
    return torch.empty(shape, dtype=dtype, device=device)


def test_op_rejects_cpu_tensors():
    x = torch.randn(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(InputError, match=r"q is on cpu.*CUDA"):
        ops.attention(x, x, x)


def test_op_input_validation_on_fake_cuda_tensors():
    """Shape, dtype, stride and argument checks need no GPU: fake CUDA tensors go through the same wrapper."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = _fake_cuda((2, 4, 10, 64))
        k = _fake_cuda((2, 4, 12, 64))
        with pytest.raises(InputError, match="rank 3"):
            ops.attention(q[0], k[0], k[0])
        with pytest.raises(InputError, match="dtype float32.*float16"):
            ops.attention(q.float(), k, k)
        with pytest.raises(InputError, match="different dtypes"):
            ops.attention(q, k.to(torch.bfloat16), k)
        with pytest.raises(InputError, match="head dim 80 is not supported.*\\[32, 64, 96, 128, 256\\]"):
            ops.attention(_fake_cuda((2, 4, 10, 80)), _fake_cuda((2, 4, 12, 80)), _fake_cuda((2, 4, 12, 80)))
        with pytest.raises(InputError, match="k and v must have the same shape"):
            ops.attention(q, k, _fake_cuda((2, 4, 13, 64)))
        with pytest.raises(InputError, match="disagree on batch, heads or head dim"):
            ops.attention(q, _fake_cuda((3, 4, 12, 64)), _fake_cuda((3, 4, 12, 64)))
        strided = _fake_cuda((2, 4, 12, 128))[..., ::2]
        with pytest.raises(InputError, match="stride 2 in its last"):
            ops.attention(q, strided, k)
        with pytest.raises(InputError, match="layout='sbhd'"):
            ops.attention(q, k, k, layout="sbhd")
        with pytest.raises(InputError, match="causal='left'"):
            ops.attention(q, k, k, causal="left")
        with pytest.raises(InputError, match="scale=-1.0"):
            ops.attention(q, k, k, scale=-1.0)
        with pytest.raises(ConfigError, match="BLOCK_N=96"):
            ops.attention(q, k, k, config=dict(ops.default_config(64), BLOCK_N=96))
        with pytest.raises(InputError, match="sequence length 0"):
            ops.attention(q, _fake_cuda((2, 4, 0, 64)), _fake_cuda((2, 4, 0, 64)))


def test_op_output_metadata_follows_q():
    """The fake implementation (what torch.compile sees) gives q's shape, dtype and memory order."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = _fake_cuda((2, 100, 8, 64), torch.bfloat16)  # (B, S, H, D) storage
        out = ops.attention(x, x, x, layout="bshd", causal=True)
        assert out.shape == x.shape and out.stride() == x.stride() and out.dtype == torch.bfloat16
        q = x.transpose(1, 2)  # (B, H, S, D) view of BSHD storage
        out, lse = ops.attention(q, q, q, return_lse=True)
        assert out.shape == q.shape and out.stride() == q.stride()
        assert lse.shape == (2, 8, 100) and lse.dtype == torch.float32


def test_launch_packing_checks_alignment_and_scale():
    cfg = ops.canonical_config(ops.default_config(64))
    strides = [8 * 64, 64, 64]
    args = dict(config=cfg, head_dim=64, dtype=0, q=256, k=256, v=256, o=256, lse=0, q_strides=strides,
                k_strides=strides, v_strides=strides, o_strides=strides, batch=1, heads=1, seqlen_q=8, seqlen_k=8,
                causal_offset=0, scale=0.125)
    assert len(_core.attention.pack(**args)) == _core.attention.PARAMS_BYTES == 160
    with pytest.raises(InputError, match="VEC_LOAD=16 needs.*allow VEC_LOAD <= 8"):
        _core.attention.pack(**dict(args, q=256 + 8))
    with pytest.raises(InputError, match="scale"):
        _core.attention.pack(**dict(args, scale=float("nan")))
    with pytest.raises(InputError, match="heads=70000"):
        _core.attention.pack(**dict(args, heads=70000))
    assert _core.attention.max_vec_load([256, 260], [64]) == 4


# ------------------------------------------------------------------------------------------------ emulator
EMU_DIR = REPO / "tests" / "attention_emulator"  # driver + the attention-specific shim (math)
EMU_RUNTIME = REPO / "tests" / "emulator"  # runtime and shims shared with the similarity emulator (mma, cp.async)


def _emulator(traits: str, tmp_path_factory) -> Path:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler for the CPU emulator")
    if not sys.platform.startswith("linux"):
        pytest.skip("the CPU emulator's fibers use glibc ucontext (Linux only)")
    out = tmp_path_factory.mktemp("emu") / ("emu_" + traits.replace(",", "_"))
    cmd = [cxx, "-std=c++17", "-O1", "-w", "-I", str(EMU_DIR / "shim"), "-I", str(EMU_RUNTIME / "shim"),
           "-I", str(EMU_RUNTIME), "-I", str(EMU_DIR), "-I", str(REPO / "csrc" / "kernels"),
           f"-DTUNELAB_EMU_TRAITS={traits}", str(EMU_DIR / "emu_attention.cpp"), str(EMU_RUNTIME / "emu_runtime.cpp"),
           "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def _traits(cfg, dtype, head_dim, causal) -> str:
    c = ops.canonical_config(cfg)
    return ",".join(str(x) for x in [dtype, head_dim] + [c[n] for n in ops.PARAM_NAMES] + [int(causal)])


# (config overrides, dtype code, head dim, causal, shapes (B, H, Sq, Sk, layout, align)): together they take
# every value of every tunable at least once, both dtypes, all head dims, causal both ways, Sq != Sk both ways.
EMU_CASES = [
    (dict(), 0, 64, 1, [(1, 2, 100, 130, 0, 0), (1, 1, 130, 61, 1, 0), (1, 1, 40, 70, 0, 1)]),
    (dict(BLOCK_N=32, STAGES=3, SWIZZLE=0, VEC_LOAD=8, UNROLL=1), 1, 128, 1, [(2, 1, 77, 200, 1, 0)]),
    (dict(BLOCK_M=64, NUM_WARPS=4, KV_SPLIT_WARPS=2, SWIZZLE=2, VEC_LOAD=4, UNROLL=2, Q_IN_REGS=0), 0, 64, 0,
     [(1, 2, 70, 33, 0, 0)]),
    (dict(BLOCK_M=64, BLOCK_N=64, STAGES=4, KV_SPLIT_WARPS=4), 0, 32, 1, [(1, 1, 150, 260, 0, 0)]),
    (dict(BLOCK_M=64, BLOCK_N=32, NUM_WARPS=2, Q_IN_REGS=0), 1, 96, 1, [(1, 1, 65, 97, 1, 0)]),
    (dict(BLOCK_M=16, NUM_WARPS=4, KV_SPLIT_WARPS=4, BLOCK_N=64, STAGES=2), 0, 256, 0, [(1, 1, 17, 150, 0, 0)]),
    (dict(BLOCK_M=256, NUM_WARPS=8, BLOCK_N=32, Q_IN_REGS=0), 0, 32, 1, [(1, 1, 300, 290, 0, 0)]),
]


@pytest.mark.parametrize("case", range(len(EMU_CASES)))
def test_kernel_source_on_cpu_emulator(case, tmp_path_factory):
    """The real fwd.cuh, run thread by thread on the CPU (shim for mma/ldmatrix/cp.async): output and LSE match
    float64 within fp16/bf16 tolerance, every element written, no shared-memory race, no early read of a
    cp.async destination (copies land late, destinations poisoned) and none of a late write (copies land at
    issue), no out-of-bounds global read."""
    overrides, dtype, d, causal, shapes = EMU_CASES[case]
    cfg = dict(ops.default_config(d), **overrides)
    assert fam.space_for(d).check(cfg)[0], cfg
    exe = _emulator(_traits(cfg, dtype, d, causal), tmp_path_factory)
    for (b, h, sq, sk, layout, align) in shapes:
        for late in (1, 0):
            r = subprocess.run([str(exe), str(b), str(h), str(sq), str(sk), str(layout), str(align), "1",
                                str(7 + case), str(late)], capture_output=True, text=True, timeout=600)
            assert r.returncode == 0 and "RESULT ok=1" in r.stdout, (cfg, (b, h, sq, sk), r.stdout, r.stderr[-2000:])
