"""Attention forward on the GPU: correctness under the FlashAttention rule over dtype x head dim x causal x sequence
lengths x both layouts x Sq != Sk, a random sample of configs through the family's gates, torch.compile, CUDA
graphs, and compute-sanitizer runs. Needs an sm_80+ GPU; skipped with the reason otherwise."""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import tunelab  # noqa: E402
import tunelab.ops.attention as ops  # noqa: E402
from tunelab.errors import ConfigError, InputError  # noqa: E402
from tunelab.tuning.families import attention as fam  # noqa: E402
from tunelab.tuning.gates import GateConfig, compiled_rejection  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
SEQS = [1, 17, 128, 255, 512, 1000, 2048]
PAIRS = [(1, 2048), (17, 255), (255, 17), (512, 1000), (1000, 512), (2048, 128)]  # Sq != Sk
REPO = Path(__file__).resolve().parents[1]


def _tensors(B, H, Sq, Sk, D, dtype, layout, seed=0):
    """q, k, v as (B, H, S, D) views; with layout 'bshd' the storage is (B, S, H, D) and nothing is copied."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def make(S):
        shape = (B, S, H, D) if layout == "bshd" else (B, H, S, D)
        t = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(DTYPES[dtype])
        return t.transpose(1, 2) if layout == "bshd" else t

    return make(Sq), make(Sk), make(Sk)


def _set(q, k, v, causal, causal_offset, scale=None):
    D = q.shape[-1]
    scale = 1.0 / D ** 0.5 if scale is None else scale
    ref, ref_lse = fam.reference_attention(q, k, v, scale=scale, causal=causal, causal_offset=causal_offset)
    lowp, _ = fam.reference_attention(q, k, v, scale=scale, causal=causal, causal_offset=causal_offset,
                                      precision="lowp")
    out = torch.empty_like(q)  # same memory order as q
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    return fam.AttentionInputs(q, k, v, out, lse, scale, causal, causal_offset, ref, ref_lse,
                               float((lowp.float() - ref).abs().max()))


def _run_and_check(ca, inp, dtype, label=""):
    fam._poison(inp.out)
    inp.lse.view(torch.int32).fill_(-1)
    ca.launch(inp.q, inp.k, inp.v, inp.out, inp.lse, inp.causal_offset, inp.scale)
    torch.cuda.synchronize()
    return fam.check_output(inp, dtype=dtype, label=label)


def _arch():
    return tunelab.current_arch()


# ------------------------------------------------------------------------------------------------ correctness
SHAPES = [(s, s) for s in SEQS] + PAIRS


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_correctness_grid(dtype, head_dim, causal, layout):
    """Default config, outputs and LSE poisoned first, every (Sq, Sk) of SEQS and PAIRS, bottom-right causal."""
    ca = ops.compile_config(ops.default_config(head_dim, dtype, causal, arch=_arch()), head_dim=head_dim,
                            dtype=dtype, causal=causal, arch=_arch())
    failures = []
    for i, (sq, sk) in enumerate(SHAPES):
        q, k, v = _tensors(2, 3, sq, sk, head_dim, dtype, layout, seed=i)
        inp = _set(q, k, v, causal, sk - sq)
        rep = _run_and_check(ca, inp, dtype, f"Sq={sq} Sk={sk}")
        if not rep.ok:
            failures.append(rep.reason)
    assert not failures, failures


@pytest.mark.parametrize("head_dim", [32, 96, 256])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_correctness_other_head_dims(dtype, head_dim):
    failures = []
    for causal in (False, True):
        ca = ops.compile_config(ops.default_config(head_dim, dtype, causal, arch=_arch()), head_dim=head_dim,
                                dtype=dtype, causal=causal, arch=_arch())
        for i, (sq, sk) in enumerate([(17, 17), (255, 255), (1000, 1000), (100, 333), (333, 100)]):
            q, k, v = _tensors(1, 3, sq, sk, head_dim, dtype, "bshd" if i % 2 else "bhsd", seed=i)
            rep = _run_and_check(ca, _set(q, k, v, causal, sk - sq), dtype, f"causal={causal} Sq={sq} Sk={sk}")
            if not rep.ok:
                failures.append(rep.reason)
    assert not failures, failures


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_op_matches_reference_and_layouts(layout):
    """The public op: both layouts in place, output in q's layout and memory order, LSE, scale."""
    B, H, Sq, Sk, D = 2, 4, 300, 517, 64
    q, k, v = _tensors(B, H, Sq, Sk, D, "float16", layout, seed=3)
    args = (q, k, v) if layout == "bhsd" else (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    out, lse = ops.attention(*args, causal=True, scale=0.1, return_lse=True, layout=layout)
    if layout == "bshd":
        assert out.shape == (B, Sq, H, D) and out.is_contiguous()
        out = out.transpose(1, 2)
    inp = _set(q, k, v, True, Sk - Sq, scale=0.1)
    inp.out.copy_(out)
    inp.lse.copy_(lse)
    rep = fam.check_output(inp, dtype="float16")
    assert rep.ok, rep.reason


def test_top_left_alignment_matches_sdpa_is_causal():
    q, k, v = _tensors(1, 2, 200, 77, 64, "bfloat16", "bhsd")
    ours = ops.attention(q, k, v, causal="top_left").float()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    assert (ours - ref).abs().max().item() < 3e-2


def test_rows_without_visible_keys_are_zero_with_minus_inf_lse():
    q, k, v = _tensors(1, 1, 50, 20, 64, "float16", "bhsd")
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    assert torch.all(out[:, :, :30] == 0) and torch.all(torch.isneginf(lse[:, :, :30]))
    assert torch.isfinite(out).all() and torch.isfinite(lse[:, :, 30:]).all()


def test_explicit_config_and_misaligned_inputs():
    base = torch.randn(1, 2, 64, 64 * 2 + 4, device="cuda", dtype=torch.float16)
    q = base[..., 4:68]  # pointer 8 bytes past a 16-byte boundary: VEC_LOAD 16 impossible
    cfg = dict(ops.default_config(64), VEC_LOAD=16)
    with pytest.raises(InputError, match="VEC_LOAD=16 needs"):
        ops.attention(q, q, q, config=cfg)
    out = ops.attention(q, q, q)  # the default config drops to VEC_LOAD=8 by itself
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), q.float(), q.float())
    assert (out.float() - ref).abs().max().item() < 5e-3
    with pytest.raises(ConfigError):
        ops.attention(q, q, q, config=dict(cfg, NUM_WARPS=3))


def test_memory_gate_names_sizes(monkeypatch):
    q, k, v = _tensors(1, 1, 16, 16, 64, "float16", "bhsd")

    def oom(*a, **kw):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(torch, "empty_like", oom)
    with pytest.raises(InputError, match=r"MiB for its output.*MiB are free"):
        ops._run(q, k, v, False, 0, 0.125, "", False)


# ------------------------------------------------------------------------------------------------ configs
def test_random_config_sample_passes_or_is_gated():
    """60 configs drawn from the valid spaces (all head dims, both dtypes, causal both ways): each passes the
    numerics gate (problem shape and edge shape) or is rejected by a static/compiled gate with a reason."""
    rng = random.Random(2024)
    f = fam.AttentionFamily()
    arch = _arch()
    inputs, outcomes = {}, {"passed": 0}
    failures = []
    for i in range(60):
        d = ops.SUPPORTED_HEAD_DIMS[i % len(ops.SUPPORTED_HEAD_DIMS)]
        dtype = ("float16", "bfloat16")[(i // 5) % 2]
        causal = bool((i // 10) % 2)
        problem = fam.AttentionProblem(2, 3, 257, 257 if i % 3 else 190, d, dtype, causal)
        space = f.space(problem)
        config = rng.choice(list(space.enumerate()))
        rej = f.static_gates(space.complete(config), problem, arch=arch)
        if rej:
            outcomes[rej[0].code] = outcomes.get(rej[0].code, 0) + 1
            assert rej[0].detail
            continue
        compiled = f.compile(config, problem, arch)
        rej = compiled_rejection(compiled, GateConfig())
        if rej is not None:
            outcomes[rej.code] = outcomes.get(rej.code, 0) + 1
            assert rej.detail
            continue
        key = f.problem_key(problem)
        if key not in inputs:
            inputs[key] = f.make_inputs(problem, seed=i)
        rep = f.check(config, compiled, inputs[key])
        if rep.ok:
            outcomes["passed"] += 1
        else:
            failures.append((config, problem, rep.reason))
    print(outcomes)
    assert not failures, failures
    assert outcomes["passed"] >= 30


def test_family_baselines_run():
    f = fam.AttentionFamily()
    problem = fam.AttentionProblem(2, 4, 512, 512, 64, "float16", True)
    inputs = f.make_inputs(problem, 0)
    names = []
    for name, factory in f.baselines(problem).items():
        try:
            fn = factory(inputs)
        except Exception:  # noqa: BLE001 - a backend this GPU or torch lacks
            continue
        fn()
        names.append(name)
    torch.cuda.synchronize()
    assert "sdpa_default" in names


# ------------------------------------------------------------------------------------------------ integration
class _Block(torch.nn.Module):
    def __init__(self, causal):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        return ops.attention(q, k, v, causal=self.causal) * 2.0 + 1.0


def test_torch_compile_gives_the_same_output():
    q, k, v = _tensors(2, 4, 333, 333, 64, "float16", "bhsd")
    eager = _Block(True)(q, k, v)
    compiled = torch.compile(_Block(True))  # inductor; x * 2 + 1 is exact in fp16, fused or not
    got = compiled(q, k, v)
    torch.cuda.synchronize()
    torch.testing.assert_close(got, eager, atol=0, rtol=0)


def test_torch_compile_traces_without_graph_breaks():
    q, k, v = _tensors(1, 2, 64, 64, 128, "bfloat16", "bhsd")
    explanation = torch._dynamo.explain(_Block(True))(q, k, v)
    assert explanation.graph_break_count == 0, explanation.break_reasons


def test_cuda_graph_capture_and_replay():
    q, k, v = _tensors(2, 4, 256, 256, 64, "float16", "bhsd")
    expected = ops.attention(q, k, v, causal=True)  # compiles and loads before capturing
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.attention(q, k, v, causal=True)
    q.copy_(torch.randn_like(q))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, ops.attention(q, k, v, causal=True))
    assert not torch.equal(out, expected)


# ------------------------------------------------------------------------------------------------ sanitizer
SANITIZE_SCRIPT = r"""
import sys, torch, tunelab.ops.attention as ops
d = int(sys.argv[1])
for causal in (False, True):
    for cfg in (ops.default_config(d, arch=None), dict(ops.default_config(d), KV_SPLIT_WARPS=2, BLOCK_M=64,
                                                       Q_IN_REGS=0, STAGES=3)):
        for sq, sk in ((77, 77), (100, 190), (190, 33)):
            q = torch.randn(1, 2, sq, d, device="cuda", dtype=torch.float16)
            k = torch.randn(1, 2, sk, d, device="cuda", dtype=torch.float16)
            ops.attention(q, k, k, causal=causal, config=cfg, return_lse=True)
torch.cuda.synchronize()
print("done")
"""


def _sanitizer() -> str | None:
    for cand in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer"):
        if cand and os.path.exists(cand):
            return cand
    return None


@pytest.mark.slow  # minutes under the sanitizer: run with --runslow (or TUNELAB_SLOW=1)
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_compute_sanitizer_clean(tool, head_dim, tmp_path):
    """Default and a KV-split / 3-stage config, causal both ways, partial tiles, Sq != Sk both ways."""
    exe = _sanitizer()
    if exe is None:
        pytest.skip("compute-sanitizer is not installed (CUDA toolkit bin/)")
    cfg = dict(ops.default_config(head_dim), KV_SPLIT_WARPS=2, BLOCK_M=64, Q_IN_REGS=0, STAGES=3)
    assert fam.space_for(head_dim).check(cfg)[0]
    script = tmp_path / "sanitize.py"
    script.write_text(SANITIZE_SCRIPT)
    # the installed package is used (the source tree has no compiled _core)
    r = subprocess.run([exe, "--tool", tool, "--error-exitcode", "9", sys.executable, str(script), str(head_dim)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and "done" in r.stdout, (r.stdout[-3000:], r.stderr[-3000:])
    assert "ERROR SUMMARY: 0 errors" in r.stdout + r.stderr or "RACECHECK SUMMARY: 0 hazards" in r.stdout + r.stderr
