"""Tune your own kernel: :class:`KernelFamily` adapts a :class:`tunelab.Kernel` to the tuner.

::

    kernel = tunelab.Kernel(src, "scale<{BLOCK}>",
                            launch=lambda cfg, x, y, a, n: (ceil_div(n, cfg["BLOCK"]), cfg["BLOCK"]))
    space = SearchSpace("scale", [Param("BLOCK", [64, 128, 256, 512, 1024])])

    def make_inputs(problem, seed):            # the kernel's arguments, in order
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(problem["n"], device="cuda", generator=g)
        return (x, torch.empty_like(x), 2.0, problem["n"])

    family = KernelFamily(kernel, space, make_inputs, reference=lambda x, y, a, n: a * x, outputs=[1],
                          threads=lambda cfg: cfg["BLOCK"])
    result = tunelab.tune(family, {"n": 1 << 24}, trials=20)

Numerics gate: the output arguments (``outputs``: their positions) are poisoned with NaN, the kernel runs
once, and each output must be finite where the reference is (``numerics.unwritten`` otherwise), free of
NaN/Inf (``numerics.nan``) and within ``atol + rtol * |reference|`` (``numerics.error``).

Fault isolation needs the family to be picklable (define the kernel's launch rule, ``make_inputs`` and
``reference`` at module level in an importable file); otherwise the tuner measures in-process and warns.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from tunelab.errors import ConfigError
from tunelab.tuning.family import CompiledCandidate, NumericsReport, Rejection, TunableFamily
from tunelab.tuning.space import Config, SearchSpace


class KernelFamily(TunableFamily):
    """A tunable family made of a user's :class:`tunelab.Kernel`, a search space and an input recipe.

    Args:
        kernel: the :class:`tunelab.Kernel`.
        space: the :class:`SearchSpace` of its config.
        make_inputs: ``make_inputs(problem, seed) -> tuple`` of the kernel's arguments (CUDA tensors, scalars).
        reference: ``reference(*args)`` -> expected output tensor (or tuple, one per ``outputs`` entry); None
            skips the numerics gate (not recommended).
        outputs: positions of the output arguments (default: the last tensor argument).
        threads: ``threads(config) -> int`` threads per block, for the occupancy gate (default: a ``THREADS``
            derived value or param, else the gate only checks spills).
        smem: ``smem(config) -> int`` dynamic shared memory per block (default 0).
        default_config: the untuned config (default: the first valid config of the space).
        baselines: ``{name: factory(args) -> zero-argument callable}`` to confirm against.
        static_gates: ``static_gates(config, problem) -> list[Rejection]``.
        atol, rtol: numerics tolerance.
        name: family name in study names and the store (default ``"kernel:<kernel name>"``).
    """

    def __init__(self, kernel, space: SearchSpace, make_inputs: Callable[[Any, int], Sequence[Any]],
                 reference: Callable[..., Any] | None = None, *, outputs: Sequence[int] | None = None,
                 threads: Callable[[Config], int] | None = None, smem: Callable[[Config], int] | None = None,
                 default_config: Mapping[str, Any] | None = None,
                 baselines: Mapping[str, Callable[[Sequence[Any]], Callable[[], Any]]] | None = None,
                 static_gates: Callable[[Config, Any], list[Rejection]] | None = None,
                 atol: float = 1e-3, rtol: float = 1e-3, name: str | None = None):
        self.kernel = kernel
        self._space = space
        self._make_inputs = make_inputs
        self.reference = reference
        self.outputs = None if outputs is None else [int(i) for i in outputs]
        self._threads = threads
        self._smem = smem
        self._default = dict(default_config) if default_config is not None else None
        self._baselines = dict(baselines or {})
        self._static_gates = static_gates
        self.atol, self.rtol = float(atol), float(rtol)
        self.name = name or f"kernel:{getattr(kernel, 'name', 'custom')}".split("<")[0]
        if self._default is not None:
            ok, why = space.check(self._default)
            if not ok:
                raise ConfigError(f"default_config {self._default} is not valid in the space: {why}")

    # -- protocol -----------------------------------------------------------------------------------------------
    def space(self, problem: Any) -> SearchSpace:
        """The space given at construction."""
        return self._space

    def default_config(self, problem: Any) -> Config:
        """The given default, else the first valid config."""
        if self._default is None:
            self._default = next(iter(self._space.enumerate(valid_only=True)))
        return dict(self._default)

    def static_gates(self, config: Config, problem: Any) -> list[Rejection]:
        """The user's static gates, if any."""
        return list(self._static_gates(config, problem)) if self._static_gates else []

    def source_hash(self) -> str:
        """Hash of the kernel source, name and options."""
        return self.kernel.source_hash()

    def baselines(self, problem: Any) -> dict:
        """The baselines given at construction."""
        return dict(self._baselines)

    def _threads_of(self, config: Config) -> int:
        if self._threads is not None:
            return int(self._threads(config))
        full = self._space.complete(config)
        return int(full.get("THREADS", 0) or 0)

    def compile(self, config: Config, problem: Any, arch: str) -> CompiledCandidate:
        """Compile through ``Kernel.compile``; threads and dynamic smem from the user's rules."""
        t0 = time.perf_counter()
        ck = self.kernel.compile(config, arch)
        res = ck.resources
        smem = int(getattr(res, "static_smem_bytes", 0)) + (int(self._smem(config)) if self._smem else 0)
        return CompiledCandidate(resources=res, threads=self._threads_of(config), smem_bytes=smem, arch=arch,
                                 compile_ms=float(getattr(ck, "compile_ms", (time.perf_counter() - t0) * 1e3)),
                                 cache_hit=bool(getattr(ck, "cache_hit", False)), handle=ck)

    def make_inputs(self, problem: Any, seed: int) -> Any:
        """The kernel's arguments from the user's ``make_inputs``."""
        return tuple(self._make_inputs(problem, seed))

    def _output_positions(self, args: Sequence[Any]) -> list[int]:
        if self.outputs is not None:
            return self.outputs
        import torch

        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        if not tensors:
            raise ConfigError("the kernel's arguments contain no tensor; pass outputs=[...] to KernelFamily")
        return [tensors[-1]]

    def check(self, config: Config, compiled: CompiledCandidate, inputs: Any) -> NumericsReport:
        """Poison the outputs with NaN, run once, compare with the reference (see the module docstring)."""
        import torch

        if self.reference is None:
            return NumericsReport(True, None, {"checked": 0.0})
        args = inputs
        outs = self._output_positions(args)
        for i in outs:
            if args[i].is_floating_point():
                args[i].fill_(float("nan"))  # poison: anything the kernel leaves unwritten stays NaN
        compiled.handle(*args)
        torch.cuda.synchronize()
        ref = self.reference(*args)
        refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        if len(refs) != len(outs):
            raise ConfigError(f"reference returned {len(refs)} tensor(s) for {len(outs)} output(s)")
        worst = 0.0
        for i, r in zip(outs, refs):
            got = args[i].float()
            r = r.float()
            finite_ref = torch.isfinite(r)
            bad = ~torch.isfinite(got)
            if bool((bad & finite_ref).any()):
                # Outputs were poisoned with NaN: a NaN left where the reference is finite is most likely an
                # element the kernel never wrote (it may also be a computed NaN); an Inf was computed.
                nan = int((torch.isnan(got) & finite_ref).sum())
                n = int((bad & finite_ref).sum())
                code = "numerics.unwritten" if nan else "numerics.nan"
                return NumericsReport(False, f"{code}: {n} non-finite output element(s) in argument {i} "
                                             f"({nan} NaN)", {"nonfinite": float(n)})
            err = (got - r).abs()
            tol = self.atol + self.rtol * r.abs()
            excess = float((err - tol).max()) if err.numel() else 0.0
            worst = max(worst, float(err.max()) if err.numel() else 0.0)
            if excess > 0:
                return NumericsReport(False, f"numerics.error: max abs error {float(err.max()):.3g} exceeds "
                                             f"atol {self.atol} + rtol {self.rtol}*|ref| in argument {i}",
                                      {"max_abs": float(err.max())})
        return NumericsReport(True, None, {"max_abs": worst})

    def timing_closure(self, config: Config, compiled: CompiledCandidate, inputs: Any):
        """A prepared launch of the compiled kernel with these arguments (what the timer calls)."""
        ck = compiled.handle
        if hasattr(ck, "prepare"):
            return ck.prepare(*inputs)
        return lambda: ck(*inputs)
