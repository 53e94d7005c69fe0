"""The Gram family: ``K_ij = |<x_i, x_j>|^2`` of n states (fp16, bf16, fp32 or complex64), fp32 output.

Problem: ``{"n", "dim", "dtype" (fp16 | bf16 | fp32 | complex64), "symmetric" (bool), "mirror" (bool)}``; on the
command line ``tunelab tune gram --shape n,dim[,1] --dtype fp32`` (a third number 1 = complex64 states).

Tunables (``csrc/kernels/similarity/gram.cuh``):

===========  ===============  ==========================================================================
name         choices          what it does
===========  ===============  ==========================================================================
``TILE_M``   32, 64, 128      rows i per block
``TILE_N``   32, 64, 128      rows j per block (symmetric mode: equal to TILE_M)
``TILE_K``   16 .. 128        real scalars per pipeline slice (64, 128 or 256 bytes per row)
``WARPS_M``  1, 2, 4          warps along i
``WARPS_N``  1, 2, 4          warps along j
``STAGES``   2, 3, 4          cp.async ring depth
``VEC``      8, 16            bytes per cp.async
===========  ===============  ==========================================================================

Numerics gate (the DESIGN rule): on a sample of rows, the max abs error against float64 must be at most twice
PyTorch's own error computing ``|X X^H|^2`` in the input precision, plus a small atol; entries that the mode must
not write (below the diagonal in symmetric, non-mirrored mode) must be untouched.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tunelab.dtypes import canonical, long_name, short_name
from tunelab.errors import ConfigError, GateRejection, InputError
from tunelab.kernel import smem_limit
from tunelab.tuning.family import CompiledCandidate, NumericsReport, Rejection, TunableFamily, next_pow2, \
    problem_from
from tunelab.tuning.space import Config, Constraint, Derived, Param, SearchSpace

MAX_ACCUMULATORS = 128
MAX_SMEM_ANY_ARCH = 232448
#: rows of K checked against float64 per numerics run
CHECK_ROWS = 192



def _ops():
    from tunelab.ops import similarity

    return similarity


# How many times PyTorch's own error (same inputs, same precision) the kernel may make: 2x for every dtype, the
# FlashAttention rule. The fp32/complex64 path multiplies on tensor cores with 3xTF32 (a = big + small,
# big*big + big*small + small*big, ~22 bits per product) and adds each k-step's partial to the fp32
# accumulator with round-to-nearest FADDs (csrc/kernels/similarity/mma_tile.cuh). Before that change the
# tensor core's truncating accumulation made the error 3.5x cuBLAS's FP32-FMA error at dim 96 and 8-9x at dim 256
# (measured on the H200), and this gate allowed 4x; with it the error is 0.4-0.5x cuBLAS's at dim 256
# (benchmarks/results/similarity_only_gram.json), so the common 2x applies.
ERROR_FACTOR = {"fp16": 2.0, "bf16": 2.0, "fp32": 2.0, "complex64": 2.0}


def error_factor(dtype: str) -> float:
    """Allowed multiple of PyTorch's own error for the Gram kernel in ``dtype`` (see ERROR_FACTOR)."""
    return ERROR_FACTOR[short_name(dtype) or str(dtype)]


@dataclass(frozen=True)
class GramProblem:
    """n states of dimension dim; symmetric computes one triangle, mirror also writes the other."""

    n: int = 8192
    dim: int = 256
    dtype: str = "complex64"
    symmetric: bool = True
    mirror: bool = False

    def __post_init__(self):
        dt = canonical(self.dtype, ("float16", "bfloat16", "float32", "complex64"), "the gram problem")
        object.__setattr__(self, "dtype", short_name(dt))
        for name in ("n", "dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"gram problem {name}={v!r} must be a positive int")
        object.__setattr__(self, "symmetric", bool(self.symmetric))
        object.__setattr__(self, "mirror", bool(self.mirror) and bool(self.symmetric))

    @property
    def torch_dtype(self) -> str:
        """The dtype's torch name (``"float16"``, ``"bfloat16"``, ``"float32"`` or ``"complex64"``)."""
        return long_name(self.dtype)

    @property
    def scalar_bytes(self) -> int:
        """Bytes per real scalar: 2 for fp16/bf16, 4 for fp32 and complex64 (per real or imaginary part)."""
        return 2 if self.dtype in ("fp16", "bf16") else 4

    @property
    def scalars(self) -> int:
        """Real scalars per row (2 * dim for complex)."""
        return 2 * self.dim if self.dtype == "complex64" else self.dim

    @property
    def flops(self) -> float:
        """Real multiply-adds x 2 actually computed (4 real products per complex one; half in symmetric mode)."""
        f = 2.0 * self.n * self.n * self.scalars * (2 if self.dtype == "complex64" else 1)
        return f / 2 if self.symmetric else f


def as_problem(problem: Any) -> GramProblem:
    """A :class:`GramProblem` from a problem object or dict."""
    return problem_from(GramProblem, problem, "gram")


def accumulators(c: Mapping[str, Any], complex_: bool) -> int:
    """fp32 accumulator registers per thread of a config (twice as many for complex states)."""
    return (c["TILE_M"] // c["WARPS_M"] // 16) * (c["TILE_N"] // c["WARPS_N"] // 8) * 4 * (2 if complex_ else 1)


def smem_bytes_py(c: Mapping[str, Any], scalar_bytes: int) -> int:
    """Dynamic shared memory of a config: STAGES slices of (TILE_M + TILE_N) rows x TILE_K scalars."""
    return c["STAGES"] * (c["TILE_M"] + c["TILE_N"]) * c["TILE_K"] * scalar_bytes


def build_space(problem: Any) -> SearchSpace:
    """The search space for one problem (TILE_K's choices depend on the dtype; symmetric mode needs square tiles)."""
    p = as_problem(problem)
    tk = [32, 64, 128] if p.scalar_bytes == 2 else [16, 32, 64]
    cplx = p.dtype == "complex64"
    sb = p.scalar_bytes
    params = [
        Param("TILE_M", [32, 64, 128], description="rows i per block"),
        Param("TILE_N", [32, 64, 128], description="rows j per block"),
        Param("TILE_K", tk, description="real scalars per pipeline slice"),
        Param("WARPS_M", [1, 2, 4], description="warps along i"),
        Param("WARPS_N", [1, 2, 4], description="warps along j"),
        Param("STAGES", [2, 3, 4], description="cp.async pipeline depth"),
        Param("VEC", [8, 16], description="bytes per cp.async"),
    ]
    derived = [
        Derived("THREADS", lambda c: 32 * c["WARPS_M"] * c["WARPS_N"], "threads per block"),
        Derived("ACCUMULATORS", lambda c: accumulators(c, cplx), "fp32 accumulators per thread"),
        Derived("SMEM_BYTES", lambda c: smem_bytes_py(c, sb), "dynamic shared memory per block"),
    ]
    constraints = [
        Constraint("warps_tile_m", lambda c: c["TILE_M"] % (16 * c["WARPS_M"]) == 0,
                   "TILE_M must be a multiple of 16 * WARPS_M", code="static.divisibility"),
        Constraint("warps_tile_n", lambda c: c["TILE_N"] % (8 * c["WARPS_N"]) == 0,
                   "TILE_N must be a multiple of 8 * WARPS_N", code="static.divisibility"),
        Constraint("warp_count", lambda c: 2 <= c["WARPS_M"] * c["WARPS_N"] <= 16, "2 to 16 warps",
                   code="static.threads"),
        Constraint("accumulators_fit_registers", lambda c: c["ACCUMULATORS"] <= MAX_ACCUMULATORS,
                   f"more than {MAX_ACCUMULATORS} fp32 accumulators per thread (certain spills)"),
        Constraint("smem_fits_some_gpu", lambda c: c["SMEM_BYTES"] <= MAX_SMEM_ANY_ARCH,
                   "shared memory fits no supported GPU", code="static.smem"),
    ]
    if p.symmetric:
        constraints.append(Constraint("square_tiles", lambda c: c["TILE_M"] == c["TILE_N"],
                                      "symmetric mode needs TILE_M == TILE_N", code="static.divisibility"))
    name = f"gram/{p.dtype}/{'sym' if p.symmetric else 'full'}"
    return SearchSpace(name, params, constraints, derived)


@dataclass
class GramInputs:
    """One input set on the GPU: states, the output buffer, sampled rows with their float64 reference."""

    x: Any
    out: Any
    rows: Any          # sampled row indices checked against float64
    ref: Any           # float64 reference rows (len(rows), n)
    torch_err: float   # PyTorch's own max abs error on those rows, in the input precision
    problem: GramProblem


def torch_gram(x):
    """The baseline: ``|X X^H|^2`` with torch (cuBLAS matmul, then abs and square), fp32 result."""
    import torch

    if x.is_complex():
        return lambda: torch.matmul(x, x.mH).abs().square_()
    if x.dtype == torch.float32:
        return lambda: torch.matmul(x, x.T).square_()
    return lambda: torch.matmul(x, x.T).float().square_()


def reference_rows(x, rows):
    """float64 |<x_i, x_j>|^2 for i in rows, all j."""
    xd = x.to(__import__("torch").complex128) if x.is_complex() else x.double()
    g = xd[rows].conj() @ xd.T if x.is_complex() else xd[rows] @ xd.T
    return g.abs().square() if x.is_complex() else g.square()


class GramFamily(TunableFamily):
    """The Gram kernel as a tunable family."""

    name = "gram"

    def problem_dict(self, problem: Any) -> dict:
        """The problem's n, dim, dtype, symmetric and mirror as a dict."""
        p = as_problem(problem)
        return {"n": p.n, "dim": p.dim, "dtype": p.dtype, "symmetric": p.symmetric, "mirror": p.mirror}

    def problem_from_dict(self, data: Mapping[str, Any]) -> GramProblem:
        """A :class:`GramProblem` from :meth:`problem_dict`'s form."""
        return as_problem(data)

    def problem_from_cli(self, shape: list[int], dtype: str, flags: Mapping[str, Any]) -> GramProblem:
        """``--shape n,dim`` (real ``--dtype``) or ``n,dim,1`` (complex64)."""
        if len(shape) not in (2, 3):
            raise ConfigError(f"gram --shape is n,dim or n,dim,1 (complex64); got {shape}")
        cplx = len(shape) == 3 and shape[2] == 1
        return GramProblem(shape[0], shape[1], "complex64" if cplx else (dtype or "fp32"), True, False)

    def store_key(self, problem: Any) -> dict:
        """Bucket: n to the next power of two; dim, dtype and symmetric exact."""
        p = as_problem(problem)
        return {"n": next_pow2(p.n), "dim": p.dim, "dtype": p.dtype, "symmetric": p.symmetric}

    def space(self, problem: Any) -> SearchSpace:
        """Gram's space for this problem's dtype and mode (see :func:`build_space`)."""
        return build_space(problem)

    def default_config(self, problem: Any) -> Config:
        """The documented Gram default for the dtype and mode (``tunelab.ops.similarity.default_gram_config``)."""
        p = as_problem(problem)
        return _ops().default_gram_config(p.torch_dtype, p.symmetric)

    def static_gates(self, config: Config, problem: Any, arch: str | None = None) -> list[Rejection]:
        """Shared memory against the arch's opt-in limit; row bytes must be a multiple of VEC."""
        from tunelab.kernel import current_arch

        p = as_problem(problem)
        arch = arch or current_arch()
        out = []
        smem = smem_bytes_py(config, p.scalar_bytes)
        limit = smem_limit(arch)
        if smem > limit:
            out.append(Rejection("static.smem", f"{smem} bytes of shared memory > {limit} bytes on {arch}"))
        if (p.scalars * p.scalar_bytes) % config["VEC"]:
            out.append(Rejection("static.problem", f"rows of {p.scalars * p.scalar_bytes} bytes are not a multiple "
                                                   f"of VEC={config['VEC']}"))
        return out

    def compile(self, config: Config, problem: Any, arch: str) -> CompiledCandidate:
        """Compile the Gram kernel for the problem's dtype and mode with NVRTC (``compile_gram``)."""
        p = as_problem(problem)
        cg = _ops().compile_gram(config, dtype=p.torch_dtype, symmetric=p.symmetric, mirror=p.mirror, arch=arch)
        return CompiledCandidate(resources=cg.resources, threads=cg.threads, smem_bytes=cg.smem, arch=arch,
                                 compile_ms=float(cg.result.compile_ms), cache_hit=bool(cg.result.cache_hit), handle=cg)

    def source_hash(self) -> str:
        """Hash of the similarity/ and common/ kernel sources (``tunelab.ops.similarity.source_hash``)."""
        return _ops().source_hash()

    def worker_ref(self) -> Any:
        """Rebuilt in the worker as ``GramFamily()`` from this module."""
        return "tunelab.tuning.families.gram:GramFamily"

    def make_inputs(self, problem: Any, seed: int) -> GramInputs:
        """Random normal states, the output, CHECK_ROWS sampled rows (first and last included) with their float64
        reference and PyTorch's own error; GateRejection("memory.free") if they would not fit."""
        import torch

        p = as_problem(problem)
        device = torch.device("cuda", torch.cuda.current_device())
        need = p.n * p.n * 4 * 2 + p.n * p.scalars * 8 + CHECK_ROWS * p.n * 16
        free = torch.cuda.mem_get_info(device)[0]
        if need > 0.9 * free:
            raise GateRejection("memory.free", f"gram inputs need {need / 2**30:.2f} GiB; {free / 2**30:.2f} free")
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        dt = getattr(torch, p.torch_dtype)
        x = torch.randn((p.n, p.dim), generator=gen, device=device, dtype=dt if p.dtype == "complex64" else
                        torch.float32).to(dt)
        out = torch.empty((p.n, p.n), dtype=torch.float32, device=device)
        g = torch.Generator(device="cpu")
        g.manual_seed(seed)
        m = min(CHECK_ROWS, p.n)
        rows = torch.randperm(p.n, generator=g)[:m]
        rows[0], rows[-1] = 0, p.n - 1  # the first and last rows: both tile edges
        rows = rows.to(device)
        ref = reference_rows(x, rows)
        # PyTorch's own error on the same rows, in the input precision (what the baseline computes)
        if x.is_complex():
            tvals = torch.matmul(x[rows], x.mH).abs().square()
        elif x.dtype == torch.float32:
            tvals = torch.matmul(x[rows], x.T).square()
        else:
            tvals = torch.matmul(x[rows], x.T).float().square()
        torch_err = float((tvals.double() - ref).abs().max())
        return GramInputs(x, out, rows, ref, torch_err, p)

    def check(self, config: Config, compiled: CompiledCandidate, inputs: GramInputs) -> NumericsReport:
        """One launch into a NaN-filled output; on the sampled rows, every entry the mode writes must be finite and
        within ERROR_FACTOR x PyTorch's own error + atol of float64, and the rest (below the diagonal) untouched."""
        import torch

        p = inputs.problem
        inputs.out.fill_(float("nan"))
        compiled.handle.launch(inputs.x, inputs.out)
        torch.cuda.synchronize()
        got = inputs.out[inputs.rows].double()
        cols = torch.arange(p.n, device=got.device)[None, :]
        must = torch.ones_like(got, dtype=torch.bool)
        if p.symmetric and not p.mirror:
            must = cols >= inputs.rows[:, None]
            stray = int((~must & ~torch.isnan(got)).sum())
            if stray:
                return NumericsReport(False, f"numerics.error: {stray} entries below the diagonal were written in "
                                             "symmetric mode", {"stray": float(stray)})
        nan = torch.isnan(got) & must
        if bool(nan.any()):
            return NumericsReport(False, f"numerics.unwritten: {int(nan.sum())} entries never written", {})
        if not bool(torch.isfinite(got[must]).all()):
            return NumericsReport(False, "numerics.nan: Inf in the output", {})
        err = float((got - inputs.ref).abs()[must].max())
        atol = 1e-6 * float(inputs.ref.abs().max())
        factor = error_factor(p.dtype)
        tol = factor * inputs.torch_err + atol
        errors = {"max_abs": err, "torch_max_abs": inputs.torch_err, "tolerance": tol}
        if not err <= tol:
            return NumericsReport(False, f"numerics.error: max abs error {err:.3g} > {factor:g} x torch's "
                                         f"{inputs.torch_err:.3g} + atol {atol:.3g}", errors)
        return NumericsReport(True, None, errors)

    def timing_closure(self, config: Config, compiled: CompiledCandidate, inputs: GramInputs):
        """The prepared Gram launch on the inputs' states and output."""
        return compiled.handle.prepare(inputs.x, inputs.out)

    def memory_required(self, config: Config, problem: Any) -> int | None:
        """0: no workspace beyond the inputs and output."""
        return 0

    def baselines(self, problem: Any) -> dict[str, Callable[[Any], Callable[[], Any]]]:
        """``torch_matmul_abs2``: cuBLAS ``X X^H`` (``X X^T`` if real), then abs and square (:func:`torch_gram`)."""
        def factory(inputs: GramInputs):
            fn = torch_gram(inputs.x)
            fn()
            return fn

        return {"torch_matmul_abs2": factory}


def get_family() -> GramFamily:
    """The family object (``tunelab.tuning.family.get_family("gram")``)."""
    return GramFamily()
