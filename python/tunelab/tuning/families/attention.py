"""The attention forward family (portable ``mma.sync`` path): search space, gates, numerics, baselines.

Tunables (each one changes the generated code; see ``csrc/kernels/attention/fwd.cuh``):

==================  ==============  ==========================================================================
name                choices         what it does
==================  ==============  ==========================================================================
``BLOCK_M``         16 .. 256       query rows per CTA (resident Q tile)
``BLOCK_N``         32, 64, 128     key/value rows per pipeline stage
``NUM_WARPS``       2, 4, 8         warps per CTA
``STAGES``          2, 3, 4         cp.async ring depth: KV tiles in flight while one is consumed
``SWIZZLE``         0, 1, 2         shared-memory layout: 0 plain rows (ldmatrix bank conflicts), 1 XOR
                                    swizzle (conflict-free, no padding), 2 rows padded by 16 bytes
``VEC_LOAD``        4, 8, 16        bytes per cp.async (global -> shared copy width)
``Q_IN_REGS``       0, 1            Q fragments loaded once into registers, or re-read from shared memory
                                    for every KV tile
``UNROLL``          0, 1, 2         unroll of the head-dim k-loop of S = QK^T (when Q is re-read) and of
                                    the copy loops; 0 = full
``KV_SPLIT_WARPS``  1, 2, 4         warps that share query rows and split each KV tile's columns, merging
                                    (m, l, O) through shared memory at the end; 1 = FlashAttention-2's
                                    split along M only
==================  ==============  ==========================================================================

Constraints (so invalid configs are never compiled): ``KV_SPLIT_WARPS`` divides ``NUM_WARPS``; every warp owns
whole 16-row MMA tiles (``BLOCK_M % (16 * NUM_WARPS / KV_SPLIT_WARPS) == 0``) and whole 16-key P.V steps
(``BLOCK_N % (16 * KV_SPLIT_WARPS) == 0``); the accumulators (O, S and, with ``Q_IN_REGS``, Q) fit in 224
registers per thread; an ``UNROLL`` value must differ from full unrolling for this config (some affected loop
runs more than ``UNROLL`` trips); shared memory fits the largest opt-in limit of any supported GPU (227 KiB).
The arch's own limit (sm_80: 163 KiB, sm_86/89: 99 KiB, sm_90: 227 KiB) is a static gate.

Valid space size per head dim (computed by :func:`space_sizes`; the same for fp16 and bf16 and for causal and
non-causal, since neither changes which configs are valid), and how many also pass the sm_90 and sm_80
shared-memory gates:

========  =======  ===========  ===========
head dim  valid    sm_90 smem   sm_80 smem
========  =======  ===========  ===========
32        9180     9180         9099
64        7812     7812         7803
96        6624     6624         5850
128       4923     4923         4293
256       1629     1629         1215
========  =======  ===========  ===========

(raw product of the choices: 21870 per head dim.)

Numerics gate (the FlashAttention rule): the kernel's max abs error against an fp32 reference must be at most
twice the error of PyTorch computing the same attention in the input precision (scores, softmax and P.V in
fp16/bf16), plus a small atol; NaN/Inf never passes; outputs are poisoned before the run and must be fully
written. Every check also runs an edge shape (lengths 203 and 331, no tile multiple) besides the problem's own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from tunelab.dtypes import canonical
from tunelab.errors import ConfigError, GateRejection, InputError
from tunelab.kernel import smem_limit
from tunelab.tuning.family import CompiledCandidate, NumericsReport, Rejection, TunableFamily, problem_from
from tunelab.tuning.space import Config, Constraint, Derived, Param, SearchSpace

#: Largest opt-in shared memory per block of any arch the kernel targets (sm_90/sm_100: 227 KiB).
MAX_SMEM_ANY_ARCH = 232448
#: Accumulator registers per thread (O + S + Q fragments) above which configs spilled in a calibration sample
#: (sm_90: 22 of 27 configs with 224 or more spilled, 13 of 39 at 192-208, 3 of 84 at 128-191).
MAX_ACC_REGISTERS = 208
#: atol of the numerics rule, per dtype (about one unit in the last place of outputs of magnitude ~1).
ATOL = {"float16": 1e-3, "bfloat16": 8e-3}
#: Edge-shape lengths of every numerics check: no tile size divides them.
EDGE_SEQ_Q, EDGE_SEQ_K = 203, 331
#: Bit pattern written into outputs before a run: a NaN payload the kernel cannot produce by arithmetic.
POISON_BITS = 0x7E5A

_PROBLEM_ALIASES = {"seq_len": "seq_q", "seqlen": "seq_q", "S": "seq_q", "seqlen_q": "seq_q", "seqlen_k": "seq_k",
                    "B": "batch", "H": "heads", "D": "head_dim", "headdim": "head_dim", "is_causal": "causal"}

_DESCRIPTIONS = {
    "BLOCK_M": "query rows per CTA",
    "BLOCK_N": "key/value rows per pipeline stage",
    "NUM_WARPS": "warps per CTA",
    "STAGES": "cp.async pipeline depth",
    "SWIZZLE": "smem layout: 0 plain, 1 XOR swizzle, 2 padded",
    "VEC_LOAD": "bytes per cp.async",
    "Q_IN_REGS": "Q fragments kept in registers (1) or re-read from smem (0)",
    "UNROLL": "unroll of the QK^T head-dim loop and copy loops (0 = full)",
    "KV_SPLIT_WARPS": "warps splitting each KV tile's columns (1 = split along M only)",
}


def _normalize_dtype(dtype: Any) -> str:
    return canonical(dtype, ("float16", "bfloat16"), "the attention family")


@dataclass(frozen=True)
class AttentionProblem:
    """What to tune for. ``seq_k`` defaults to ``seq_q``. Causal masks are bottom-right aligned."""

    batch: int = 16
    heads: int = 16
    seq_q: int = 512
    seq_k: int = 0
    head_dim: int = 64
    dtype: str = "float16"
    causal: bool = False

    def __post_init__(self):
        object.__setattr__(self, "dtype", _normalize_dtype(self.dtype))
        if not self.seq_k:
            object.__setattr__(self, "seq_k", self.seq_q)
        for name in ("batch", "heads", "seq_q", "seq_k", "head_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"attention problem {name}={v!r} must be a positive int")
        object.__setattr__(self, "causal", bool(self.causal))

    @property
    def flops(self) -> float:
        """4*B*H*Sq*Sk*D, halved for causal (the convention of the benchmarks)."""
        f = 4.0 * self.batch * self.heads * self.seq_q * self.seq_k * self.head_dim
        return f / 2 if self.causal else f


def _ops():
    from tunelab.ops import attention as ops_attention

    return ops_attention


# ------------------------------------------------------------------------------------------------ the space
def _derived(config: Mapping[str, Any], head_dim: int) -> dict:
    warps_m = config["NUM_WARPS"] // config["KV_SPLIT_WARPS"]
    warp_rows = config["BLOCK_M"] / warps_m
    warp_cols = config["BLOCK_N"] / config["KV_SPLIT_WARPS"]
    mt = warp_rows / 16
    acc = mt * head_dim / 2 + mt * warp_cols / 2 + (mt * head_dim / 4 if config["Q_IN_REGS"] else 0)
    return {"WARPS_M": warps_m, "WARP_ROWS": warp_rows, "WARP_COLS": warp_cols, "M_FRAGMENTS": mt,
            "ACC_REGISTERS": acc}


def smem_bytes(config: Mapping[str, Any], head_dim: int, dtype: str = "float16") -> int:
    """Dynamic shared memory of a config (the launcher's formula, which the kernel static_asserts)."""
    from tunelab import _core

    return int(_core.attention.smem_bytes({k: int(config[k]) for k in _ops().PARAM_NAMES}, head_dim,
                                          _ops().DTYPE_CODES[_normalize_dtype(dtype)]))


def smem_bytes_py(config: Mapping[str, Any], head_dim: int) -> int:
    """The same formula in Python (no _core call; used by the space's constraint during enumeration)."""
    pitch = 2 * head_dim + (16 if config["SWIZZLE"] == 2 else 0)
    stage = 2 * config["BLOCK_N"] * pitch
    q_bytes = config["BLOCK_M"] * pitch
    st = config["STAGES"]
    q_off = (st - 1) * stage if config["Q_IN_REGS"] else st * stage
    pipe = max(st * stage, q_off + q_bytes)
    kvs = config["KV_SPLIT_WARPS"]
    reduce = kvs * config["BLOCK_M"] * ((head_dim + 8) * 4 + 8) if kvs > 1 else 0
    return max(pipe, reduce)


def loop_trips(config: Mapping[str, Any], head_dim: int) -> int:
    """Longest trip count among the loops UNROLL affects (copy loops; QK^T k-loop when Q is re-read)."""
    threads = 32 * config["NUM_WARPS"]
    per_row = 2 * head_dim // config["VEC_LOAD"]
    copy = max(math.ceil(rows * per_row / threads) for rows in (config["BLOCK_M"], config["BLOCK_N"]))
    qk = head_dim // 16 if not config["Q_IN_REGS"] else 1
    return max(copy, qk)


def build_space(head_dim: int, dtype: str = "float16", causal: bool = False) -> SearchSpace:
    """The attention search space for one head dim (dtype and causal only name it)."""
    ops = _ops()
    if head_dim not in ops.SUPPORTED_HEAD_DIMS:
        raise InputError(f"head dim {head_dim} is not supported; supported head dims are "
                         f"{list(ops.SUPPORTED_HEAD_DIMS)}")
    dtype = _normalize_dtype(dtype)
    params = [Param(n, list(ops.PARAM_CHOICES[n]), description=_DESCRIPTIONS[n]) for n in ops.PARAM_NAMES]
    for i, p in enumerate(params):  # layout/flag choices have no order
        if p.name in ("SWIZZLE", "Q_IN_REGS", "UNROLL"):
            params[i] = Param(p.name, list(p.choices), ordered=False, description=p.description)
    D = head_dim
    derived = [
        Derived("THREADS", lambda c: 32 * c["NUM_WARPS"], "threads per block"),
        Derived("WARPS_M", lambda c: c["NUM_WARPS"] // c["KV_SPLIT_WARPS"], "warps along the query rows"),
        Derived("M_FRAGMENTS", lambda c: _derived(c, D)["M_FRAGMENTS"], "16-row MMA tiles per warp"),
        Derived("ACC_REGISTERS", lambda c: _derived(c, D)["ACC_REGISTERS"], "O + S (+ Q) registers per thread"),
        Derived("SMEM_BYTES", lambda c: smem_bytes_py(c, D), "dynamic shared memory per block"),
    ]
    constraints = [
        Constraint("kv_split_divides_warps", lambda c: c["NUM_WARPS"] % c["KV_SPLIT_WARPS"] == 0,
                   "KV_SPLIT_WARPS must divide NUM_WARPS", code="static.divisibility"),
        Constraint("warps_tile_block_m", lambda c: c["BLOCK_M"] % (16 * c["WARPS_M"]) == 0,
                   "BLOCK_M must be a multiple of 16 * NUM_WARPS / KV_SPLIT_WARPS", code="static.divisibility"),
        Constraint("kv_split_tiles_block_n", lambda c: c["BLOCK_N"] % (16 * c["KV_SPLIT_WARPS"]) == 0,
                   "BLOCK_N must be a multiple of 16 * KV_SPLIT_WARPS", code="static.divisibility"),
        Constraint("accumulators_fit_registers", lambda c: c["ACC_REGISTERS"] <= MAX_ACC_REGISTERS,
                   f"O, S and Q accumulators need more than {MAX_ACC_REGISTERS} registers per thread "
                   "(certain spills)", code="static.constraint"),
        Constraint("unroll_changes_code", lambda c: c["UNROLL"] == 0 or loop_trips(c, D) > c["UNROLL"],
                   "UNROLL must be 0 (full) or smaller than the longest loop it affects (else it equals full "
                   "unrolling)", code="static.constraint"),
        Constraint("smem_fits_some_gpu", lambda c: c["SMEM_BYTES"] <= MAX_SMEM_ANY_ARCH,
                   f"shared memory above {MAX_SMEM_ANY_ARCH} bytes fits no supported GPU", code="static.smem"),
    ]
    name = f"attention/d{head_dim}/{'bf16' if dtype == 'bfloat16' else 'fp16'}{'/causal' if causal else ''}"
    return SearchSpace(name, params, constraints, derived)


_SPACES: dict[tuple, SearchSpace] = {}


def space_for(head_dim: int, dtype: str = "float16", causal: bool = False) -> SearchSpace:
    """Cached :func:`build_space`."""
    key = (head_dim, _normalize_dtype(dtype), bool(causal))
    if key not in _SPACES:
        _SPACES[key] = build_space(*key)
    return _SPACES[key]


def space_sizes(archs: tuple[str, ...] = ("sm_90", "sm_80")) -> dict[int, dict[str, int]]:
    """Valid configs per head dim, and how many of them pass each arch's shared-memory gate (computed)."""
    out = {}
    for d in _ops().SUPPORTED_HEAD_DIMS:
        space = space_for(d)
        valid = list(space.enumerate())
        row = {"valid": len(valid), "raw": space.size()}
        for arch in archs:
            limit = smem_limit(arch)
            row[arch] = sum(1 for c in valid if smem_bytes_py(c, d) <= limit)
        out[d] = row
    return out


# ------------------------------------------------------------------------------------------------ inputs
@dataclass
class AttentionInputs:
    """One input set: tensors in (B, H, S, D), the output buffer, and the references computed once."""

    q: Any
    k: Any
    v: Any
    out: Any
    lse: Any
    scale: float
    causal: bool
    causal_offset: int
    ref: Any = None              # fp32 reference output
    ref_lse: Any = None          # fp32 reference LSE
    lowp_max_err: float = 0.0    # PyTorch's own error in the input precision (max abs vs ref)


@dataclass
class AttentionInputSets:
    """The problem's own inputs plus the edge-shape set every check also runs."""

    main: AttentionInputs
    edge: AttentionInputs
    problem: AttentionProblem = field(default=None)

    # baselines and timing use the main set
    @property
    def q(self):
        """The main set's queries (what baselines and timing use)."""
        return self.main.q

    @property
    def k(self):
        """The main set's keys."""
        return self.main.k

    @property
    def v(self):
        """The main set's values."""
        return self.main.v


def reference_attention(q, k, v, *, scale: float, causal: bool, causal_offset: int = 0, precision: str = "fp32",
                        budget_bytes: int = 1 << 28):
    """Attention computed by PyTorch, chunked over (batch*head, query rows) to bound memory.

    ``precision="fp32"``: inputs upcast, everything in fp32; returns (out fp32, lse fp32).
    ``precision="lowp"``: scores, softmax output and P.V in the input dtype (what FlashAttention's tests call
    PyTorch's own implementation in the same precision); returns (out in the input dtype, None).
    Causal masks follow ``causal_offset`` (query i sees key j iff j <= i + causal_offset); a row that sees no
    key gets 0 (and LSE -inf).
    """
    import torch

    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    lowp = precision == "lowp"
    work = q.dtype if lowp else torch.float32
    out = torch.empty((B, H, Sq, D), dtype=work, device=q.device)
    lse = None if lowp else torch.empty((B, H, Sq), dtype=torch.float32, device=q.device)
    qf, kf, vf = (x.reshape(B * H, x.shape[2], D) for x in (q, k, v))
    of = out.view(B * H, Sq, D)
    lf = None if lse is None else lse.view(B * H, Sq)
    rows = max(1, min(Sq, budget_bytes // max(1, Sk * 4 * 3)))
    groups = max(1, min(B * H, budget_bytes // max(1, rows * Sk * 4 * 3)))
    cols = torch.arange(Sk, device=q.device)
    for g0 in range(0, B * H, groups):
        g1 = min(B * H, g0 + groups)
        kg, vg = kf[g0:g1].to(work), vf[g0:g1].to(work)
        for r0 in range(0, Sq, rows):
            r1 = min(Sq, r0 + rows)
            s = torch.matmul(qf[g0:g1, r0:r1].to(work), kg.transpose(1, 2))
            s = s * scale
            if causal:
                i = torch.arange(r0, r1, device=q.device)[:, None]
                s = s.masked_fill(cols[None, :] > i + causal_offset, float("-inf"))
            p = torch.softmax(s, dim=-1)  # lowp: fp32 inside, rounded to the input dtype
            if not lowp:
                lf[g0:g1, r0:r1] = torch.logsumexp(s, dim=-1)
            p = torch.nan_to_num(p, nan=0.0)  # rows without a visible key
            of[g0:g1, r0:r1] = torch.matmul(p, vg)
    return out, lse


def _make_set(batch, heads, seq_q, seq_k, head_dim, dtype, causal, seed, device) -> AttentionInputs:
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    tdtype = getattr(torch, dtype)
    shape_q, shape_k = (batch, heads, seq_q, head_dim), (batch, heads, seq_k, head_dim)
    q = torch.randn(shape_q, generator=gen, device=device, dtype=torch.float32).to(tdtype)
    k = torch.randn(shape_k, generator=gen, device=device, dtype=torch.float32).to(tdtype)
    v = torch.randn(shape_k, generator=gen, device=device, dtype=torch.float32).to(tdtype)
    scale = 1.0 / math.sqrt(head_dim)
    offset = seq_k - seq_q
    ref, ref_lse = reference_attention(q, k, v, scale=scale, causal=causal, causal_offset=offset)
    lowp, _ = reference_attention(q, k, v, scale=scale, causal=causal, causal_offset=offset, precision="lowp")
    lowp_err = float((lowp.float() - ref).abs().max())
    del lowp
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, seq_q), dtype=torch.float32, device=device)
    return AttentionInputs(q, k, v, out, lse, scale, causal, offset, ref, ref_lse, lowp_err)


def _poison(out) -> None:
    import torch

    out.view(torch.int16).fill_(POISON_BITS)


def check_output(inp: AttentionInputs, *, dtype: str, check_lse: bool = True, label: str = "") -> NumericsReport:
    """The numerics rule on ``inp.out`` (and ``inp.lse``) after a run that started from poisoned buffers."""
    import torch

    out = inp.out
    where = f" ({label})" if label else ""
    unwritten = int((out.view(torch.int16) == POISON_BITS).sum())
    if unwritten:
        return NumericsReport(False, f"numerics.unwritten: {unwritten} of {out.numel()} output elements never "
                                     f"written{where}", {"unwritten": float(unwritten)})
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        n = int((~finite).sum())
        return NumericsReport(False, f"numerics.nan: {n} NaN/Inf output elements{where}", {"nonfinite": float(n)})
    err = float((out.float() - inp.ref).abs().max())
    tol = 2.0 * inp.lowp_max_err + ATOL[dtype]
    errors = {"max_abs": err, "torch_lowp_max_abs": inp.lowp_max_err, "tolerance": tol}
    if not err <= tol:
        return NumericsReport(False, f"numerics.error: max abs error {err:.3g} > 2 x PyTorch's own {dtype} error "
                                     f"{inp.lowp_max_err:.3g} + atol {ATOL[dtype]}{where}", errors)
    if check_lse and inp.lse is not None and inp.ref_lse is not None:
        lse, ref = inp.lse, inp.ref_lse
        if bool((lse.view(torch.int32) == -1).any()):  # poisoned with 0xffffffff (NaN)
            return NumericsReport(False, f"numerics.unwritten: LSE not fully written{where}", errors)
        both_inf = torch.isinf(ref) & (lse == ref)
        lerr = (lse - ref).abs().masked_fill(both_inf, 0.0)
        lerr_max = float(lerr.max()) if lerr.numel() else 0.0
        errors["lse_max_abs"] = lerr_max
        if not lerr_max <= 1e-3 + 1e-4 * float(ref.abs().masked_fill(torch.isinf(ref), 0).max()):
            return NumericsReport(False, f"numerics.error: LSE max abs error {lerr_max:.3g}{where}", errors)
    return NumericsReport(True, None, errors)


# ------------------------------------------------------------------------------------------------ the family
class AttentionFamily(TunableFamily):
    """Attention forward (portable mma.sync path) as a tunable family; problems are :class:`AttentionProblem`."""

    name = "attention"

    # -- problems --------------------------------------------------------------------------------------------
    @staticmethod
    def as_problem(problem: Any) -> AttentionProblem:
        """An :class:`AttentionProblem` from a problem object or dict (short aliases such as ``S``, ``D``,
        ``is_causal`` accepted)."""
        return problem_from(AttentionProblem, problem, "attention", _PROBLEM_ALIASES)

    def problem_dict(self, problem: Any) -> dict:
        """The problem's batch, heads, seq_q, seq_k, head_dim, dtype and causal as a dict."""
        p = self.as_problem(problem)
        return {"batch": p.batch, "heads": p.heads, "seq_q": p.seq_q, "seq_k": p.seq_k, "head_dim": p.head_dim,
                "dtype": p.dtype, "causal": p.causal}

    def problem_from_dict(self, data: Mapping[str, Any]) -> AttentionProblem:
        """An :class:`AttentionProblem` from :meth:`problem_dict`'s form."""
        return self.as_problem(data)

    def problem_from_cli(self, shape: list[int], dtype: str, flags: Mapping[str, Any]) -> AttentionProblem:
        """``--shape B H S D`` or ``--shape B H Sq Sk D``; ``--causal``."""
        if len(shape) == 4:
            b, h, s, d = shape
            sk = s
        elif len(shape) == 5:
            b, h, s, sk, d = shape
        else:
            raise ConfigError(f"attention --shape takes B H S D or B H Sq Sk D; got {shape}")
        return AttentionProblem(b, h, s, sk, d, dtype or "float16", bool(flags.get("causal", False)))

    # -- space and configs -----------------------------------------------------------------------------------
    def space(self, problem: Any) -> SearchSpace:
        """Attention's space for this problem's head dim (see :func:`space_for`)."""
        p = self.as_problem(problem)
        return space_for(p.head_dim, p.dtype, p.causal)

    def default_config(self, problem: Any) -> Config:
        """The documented default for the head dim on the current GPU's arch (``ops.attention.default_config``)."""
        from tunelab.kernel import current_arch

        p = self.as_problem(problem)
        return _ops().default_config(p.head_dim, p.dtype, p.causal, arch=current_arch())

    def static_gates(self, config: Config, problem: Any, arch: str | None = None) -> list[Rejection]:
        """Shared memory against the arch's opt-in limit, threads per block, head dim/dtype support."""
        from tunelab import _core
        from tunelab.kernel import current_arch

        p = self.as_problem(problem)
        arch = arch or current_arch()
        out = []
        if p.head_dim not in _ops().SUPPORTED_HEAD_DIMS:
            out.append(Rejection("static.problem", f"head dim {p.head_dim} is not supported"))
            return out
        limits = _core.arch_limits(arch)
        smem = smem_bytes_py(config, p.head_dim)
        if smem > limits["smem_per_block_optin"]:
            out.append(Rejection("static.smem", f"{smem} bytes of shared memory > {limits['smem_per_block_optin']} "
                                                f"bytes opt-in limit per block on {arch}"))
        threads = 32 * config["NUM_WARPS"]
        if threads > limits["max_threads_per_block"]:
            out.append(Rejection("static.threads", f"{threads} threads > {limits['max_threads_per_block']} per block"))
        return out

    def compile(self, config: Config, problem: Any, arch: str) -> CompiledCandidate:
        """Compile the attention kernel for the problem's head dim, dtype and causal mode with NVRTC."""
        p = self.as_problem(problem)
        ca = _ops().compile_config(config, head_dim=p.head_dim, dtype=p.dtype, causal=p.causal, arch=arch)
        return CompiledCandidate(resources=ca.resources, threads=ca.threads, smem_bytes=ca.smem_bytes, arch=arch,
                                 compile_ms=float(ca.result.compile_ms), cache_hit=bool(ca.result.cache_hit),
                                 handle=ca)

    def compiled_gates(self, config: Config, compiled: CompiledCandidate) -> list[Rejection]:
        """Family rule on top of the generic compiled gates: a block must launch (>= 1 block/SM), and fewer than
        4 resident warps per SM are only accepted with a pipeline of 3+ stages to hide the load latency."""
        from tunelab import _core

        occ = compiled.occupancy or _core.occupancy(compiled.arch, compiled.threads,
                                                    compiled.resource("registers"), compiled.smem_bytes)
        compiled.occupancy = occ
        blocks = int(getattr(occ, "blocks_per_sm", 0))
        if blocks < 1:
            return [Rejection("compiled.occupancy", f"0 blocks/SM (limited by {getattr(occ, 'limiter', '?')})")]
        warps = blocks * config["NUM_WARPS"]
        if warps < 4 and config["STAGES"] < 3:
            return [Rejection("compiled.occupancy", f"{warps} resident warps/SM with STAGES={config['STAGES']}: too "
                                                    "few warps to hide load latency without a deeper pipeline")]
        return []

    def source_hash(self) -> str:
        """Hash of the attention/ and common/ kernel sources (``tunelab.ops.attention.source_hash``)."""
        return _ops().source_hash()

    def worker_ref(self) -> Any:
        """Rebuilt in the worker as ``AttentionFamily()`` from this module."""
        return "tunelab.tuning.families.attention:AttentionFamily"

    # -- inputs, numerics, timing ----------------------------------------------------------------------------
    def input_bytes(self, problem: Any) -> int:
        """Device memory make_inputs allocates (inputs, output, references, reference scratch)."""
        p = self.as_problem(problem)
        el = 2
        q = p.batch * p.heads * p.seq_q * p.head_dim
        kv = 2 * p.batch * p.heads * p.seq_k * p.head_dim
        return (q + kv + q) * el + q * 4 + p.batch * p.heads * p.seq_q * 8 + (1 << 28) * 2

    def make_inputs(self, problem: Any, seed: int) -> AttentionInputSets:
        """Random normal q, k, v (never all zeros) for the problem and for the edge shape, with references.

        Raises GateRejection("memory.free") when the working set would not fit in free device memory.
        """
        import torch

        p = self.as_problem(problem)
        device = torch.device("cuda", torch.cuda.current_device())
        need = self.input_bytes(p)
        free = torch.cuda.mem_get_info(device)[0]
        if need > 0.9 * free:
            raise GateRejection("memory.free", f"attention inputs and references need {need / 2**30:.2f} GiB; "
                                               f"{free / 2**30:.2f} GiB are free on {device}")
        main = _make_set(p.batch, p.heads, p.seq_q, p.seq_k, p.head_dim, p.dtype, p.causal, seed, device)
        edge = _make_set(1, 2, EDGE_SEQ_Q, EDGE_SEQ_K if p.seq_k != p.seq_q else EDGE_SEQ_Q, p.head_dim, p.dtype,
                         p.causal, seed + 1, device)
        return AttentionInputSets(main, edge, p)

    def check(self, config: Config, compiled: CompiledCandidate, inputs: AttentionInputSets) -> NumericsReport:
        """One launch from poisoned outputs on the problem-shape set, then on the edge-shape set; both must pass
        :func:`check_output`."""
        import torch

        p = inputs.problem
        ca = compiled.handle
        reports = []
        for label, inp in (("problem shape", inputs.main), ("edge shape", inputs.edge)):
            _poison(inp.out)
            inp.lse.view(torch.int32).fill_(-1)
            ca.launch(inp.q, inp.k, inp.v, inp.out, inp.lse, inp.causal_offset, inp.scale)
            torch.cuda.synchronize()
            rep = check_output(inp, dtype=p.dtype, label=label)
            if not rep.ok:
                return rep
            reports.append(rep)
        errors = dict(reports[0].errors)
        errors.update({f"edge_{k}": v for k, v in reports[1].errors.items()})
        return NumericsReport(True, None, errors)

    def timing_closure(self, config: Config, compiled: CompiledCandidate, inputs: AttentionInputSets):
        """The prepared attention launch on the main set (no LSE output)."""
        m = inputs.main
        return compiled.handle.prepare(m.q, m.k, m.v, m.out, None, m.causal_offset, m.scale)

    def memory_required(self, config: Config, problem: Any) -> int | None:
        """0: no workspace beyond the inputs and output."""
        return 0  # no workspace: the output lives in the inputs

    def baselines(self, problem: Any) -> dict[str, Callable[[Any], Callable[[], Any]]]:
        """SDPA default, cuDNN, flash and efficient. For causal with Sq != Sk they get the bottom-right mask
        explicitly (``causal_lower_right``), since SDPA's ``is_causal`` is top-left aligned."""
        from tunelab import baselines as registry

        p = self.as_problem(problem)
        out = {}
        for name in registry.names("attention"):
            out[name] = _baseline_factory(name, p)
        return out


def _baseline_factory(name: str, p: AttentionProblem):
    def factory(inputs: AttentionInputSets):
        from tunelab import baselines as registry

        b = registry.get("attention", name)
        m = inputs.main
        if b.supported is not None:
            ok, why = b.supported(m.q, m.k, m.v, causal=p.causal, scale=m.scale)
            if not ok:
                raise ConfigError(f"baseline {name} is not available: {why}")
        if p.causal and p.seq_q != p.seq_k:
            fn = _lower_right_sdpa(name, m)
        else:
            fn = b.make(m.q, m.k, m.v, causal=p.causal, scale=m.scale)
        fn()  # a forced backend that cannot serve these inputs raises here, not inside the timer
        return fn

    return factory


def _lower_right_sdpa(name: str, m: AttentionInputs):
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    mask = causal_lower_right(m.q.shape[2], m.k.shape[2])
    backend = {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION",
               "sdpa_efficient": "EFFICIENT_ATTENTION"}.get(name)
    if backend is None:
        return lambda: F.scaled_dot_product_attention(m.q, m.k, m.v, attn_mask=mask, scale=m.scale)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run():
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            return F.scaled_dot_product_attention(m.q, m.k, m.v, attn_mask=mask, scale=m.scale)

    return run


def get_family() -> AttentionFamily:
    """The family object (``tunelab.tuning.family.get_family("attention")``)."""
    return AttentionFamily()
