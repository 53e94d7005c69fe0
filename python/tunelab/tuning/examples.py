"""A small real kernel family built with :class:`KernelFamily`: ``y = a * x`` with tunable block and vector width.

It shows how a user tunes a kernel of their own, and it is what the GPU tests use to prove fault isolation:
``ScaleFamily(faults={"trap": [cfg], "illegal_address": [cfg], "hang": [cfg]})`` compiles the listed configs
with a deliberate fault (a ``trap`` instruction, a store to an invalid address, an endless loop). The family
is rebuilt in the worker from :meth:`ScaleFamily.worker_ref`, so its launch rule may be a lambda.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from tunelab.tuning.kernel_family import KernelFamily
from tunelab.tuning.space import Config, Param, SearchSpace

SCALE_SOURCE = r"""
template <int BLOCK, int VEC, int FAULT>
__global__ void __launch_bounds__(BLOCK) scale_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                      float a, int n) {
    if (FAULT == 1 && blockIdx.x == 0 && threadIdx.x == 0) { asm volatile("trap;"); }
    if (FAULT == 2) { ((float*)16)[threadIdx.x] = 1.0f; }               // illegal address
    // never returns: the asm is a side effect, so the loop cannot be optimised away as UB
    if (FAULT == 3) { while (true) { asm volatile("nanosleep.u32 1000;"); } }
    int base = (blockIdx.x * BLOCK + threadIdx.x) * VEC;
    #pragma unroll
    for (int j = 0; j < VEC; ++j) {
        int i = base + j;
        if (i < n) y[i] = a * x[i];
    }
}
"""

FAULT_CODES = {"trap": 1, "illegal_address": 2, "hang": 3}


def scale_space() -> SearchSpace:
    """15 configs: BLOCK in 64..1024, VEC in 1, 2, 4."""
    return SearchSpace("example/scale", [Param("BLOCK", [64, 128, 256, 512, 1024]), Param("VEC", [1, 2, 4])])


def _launch(cfg, x, y, a, n):
    per_block = cfg["BLOCK"] * cfg["VEC"]
    return ((n + per_block - 1) // per_block,), (cfg["BLOCK"],), 0


def _make_inputs(problem, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    n = int(problem["n"])
    x = torch.randn(n, device="cuda", generator=g)
    return (x, torch.empty_like(x), 1.5, n)


def _reference(x, y, a, n):
    return a * x


class ScaleFamily(KernelFamily):
    """``y = a * x`` over ``problem = {"n": N}``; ``faults`` maps a fault kind to the configs that have it."""

    def __init__(self, faults: Mapping[str, Sequence[Mapping[str, Any]]] | None = None):
        from tunelab.kernel import Kernel

        self.faults = {k: [dict(c) for c in v] for k, v in (faults or {}).items()}
        for kind in self.faults:
            if kind not in FAULT_CODES:
                from tunelab.errors import ConfigError

                raise ConfigError(f"fault kind {kind!r} is not one of {list(FAULT_CODES)}")
        kernel = Kernel(SCALE_SOURCE, "scale_kernel<{BLOCK}, {VEC}, {FAULT}>", launch=_launch)
        super().__init__(kernel, scale_space(), _make_inputs, _reference, outputs=[1],
                         threads=lambda cfg: cfg["BLOCK"], default_config={"BLOCK": 128, "VEC": 1},
                         atol=1e-6, rtol=1e-6, name="example_scale")
        self._kernel_with_fault = kernel

    def _fault(self, config: Config) -> int:
        for kind, configs in self.faults.items():
            if any(all(config.get(k) == v for k, v in c.items()) for c in configs):
                return FAULT_CODES[kind]
        return 0

    def compile(self, config: Config, problem: Any, arch: str):
        """Compile ``config`` with its fault code (0 for healthy configs)."""
        full = dict(config, FAULT=self._fault(config))
        compiled = super().compile(full, problem, arch)
        return compiled

    def problem_from_cli(self, shape, dtype, flags):
        """``--shape N``."""
        return {"n": int(shape[0])}

    def worker_ref(self):
        """Rebuilt in the worker by class path and fault list (the launch rule is a lambda)."""
        return ("tunelab.tuning.examples:ScaleFamily", {"faults": self.faults})

    def baselines(self, problem: Any) -> dict:
        """``torch.mul(x, a, out=y)``."""
        def torch_mul(inputs):
            import torch

            x, y, a, n = inputs
            return lambda: torch.mul(x, a, out=y)

        return {"torch_mul": torch_mul}
