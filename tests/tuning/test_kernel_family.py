"""A user's own tunelab.Kernel through KernelFamily: real NVRTC compiles and compiled gates on the CPU."""
from __future__ import annotations

import pickle
from collections import Counter

import pytest

from tunelab.tuning.api import tune
from tunelab.tuning.backend import Outcome
from tunelab.tuning.examples import ScaleFamily
from tunelab.tuning.family_backend import FamilyBackend
from tunelab.tuning.kernel_family import KernelFamily
from tunelab.tuning.space import Param, SearchSpace

SRC = r"""
template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK) k(const float* x, float* y, int n) {
    static_assert(VEC != 3, "VEC=3 is not supported");
    extern __shared__ float dyn[];
    int i = (blockIdx.x * BLOCK + threadIdx.x) * VEC;
    for (int j = 0; j < VEC; ++j)
        if (i + j < n) y[i + j] = x[i + j] + dyn[0] * 0.f;
}
"""


def make_family():
    import tunelab

    kernel = tunelab.Kernel(SRC, "k<{BLOCK}, {VEC}>", launch=lambda c, x, y, n: (1, c["BLOCK"], 0))
    space = SearchSpace("user/k", [Param("BLOCK", [128, 256, 1024]), Param("VEC", [1, 2, 3])])
    # 240 KB of dynamic shared memory is over sm_90's 227 KB per-block limit: the occupancy gate says so
    return KernelFamily(kernel, space, make_inputs=lambda p, s: (), reference=None,
                        threads=lambda c: c["BLOCK"],
                        smem=lambda c: 240 * 1024 if c["BLOCK"] == 1024 and c["VEC"] == 2 else 0,
                        name="userk")


class HostOnly(FamilyBackend):
    """Real compile and compiled gates; a fake measurement (no GPU on the CI machine)."""

    mode = "fake"

    def setup(self):
        return {"name": "host only"}

    def device_info(self):
        return {"name": "host only"}

    def measure(self, config):
        return Outcome("ok", samples=[10.0 + config["BLOCK"] / 1000 + config["VEC"]] * 5)

    def confirm(self, arms, rounds, seed=0):
        import numpy as np

        from tunelab.tuning.backend import ConfirmData

        rng = np.random.default_rng(seed)
        return ConfirmData({a.label: list(self.measure(a.config).samples[0] * np.exp(rng.normal(0, 0.01, rounds)))
                            for a in arms})

    def baseline_names(self):
        return []


def test_compile_and_gates_with_nvrtc():
    fam = make_family()
    b = HostOnly(fam, {"n": 1024}, arch="sm_90")
    p = b.prepare({"BLOCK": 256, "VEC": 1})
    assert p.ok and 0 < p.resources["registers"] < 64 and p.resources["occupancy"]["blocks_per_sm"] >= 1
    p = b.prepare({"BLOCK": 256, "VEC": 3})
    assert p.rejection.code == "compile.error" and "VEC=3 is not supported" in p.rejection.detail
    p = b.prepare({"BLOCK": 1024, "VEC": 2})
    assert p.rejection.code == "compiled.occupancy"


def test_tune_user_kernel_reason_table():
    fam = make_family()
    r = tune(fam, {"n": 1024}, backend=HostOnly(fam, {"n": 1024}, arch="sm_90"), sampler="grid", trials=9,
             seed_trials=0, storage="memory", progress=False, save_results_file=False, confirm_rounds=10,
             n_resamples=200)
    reasons = Counter(t["reason"] for t in r.trials if t["status"] in ("rejected", "failed"))
    assert reasons == {"compile.error": 3, "compiled.occupancy": 1}  # every VEC=3 config; BLOCK=1024,VEC=2
    assert r.gates["passed"] == 5
    assert r.best_config["VEC"] == 1 and r.best_config["BLOCK"] == 128
    # no baselines: the verdict compares against the default config
    assert r.confirmation.verdict.against == "default config"


def test_scale_family_pickles_through_worker_ref():
    fam = ScaleFamily(faults={"trap": [{"BLOCK": 1024, "VEC": 4}]})
    b = FamilyBackend(fam, {"n": 4096}, arch="sm_90")
    clone = pickle.loads(pickle.dumps(b))
    assert isinstance(clone.family, ScaleFamily) and clone.family.faults == fam.faults
    p = clone.prepare({"BLOCK": 1024, "VEC": 4})
    assert p.ok  # the fault only shows when it runs
    with pytest.raises(Exception, match="fault kind"):
        ScaleFamily(faults={"explode": []})


def test_problem_from_dicts_aliases_and_errors():
    from tunelab.errors import ConfigError
    from tunelab.tuning.families.attention import AttentionFamily
    from tunelab.tuning.families.similarity import SearchProblem, as_problem

    p = as_problem({"nq": 5, "n": 100})
    assert p == SearchProblem(nq=5, n=100) and as_problem(p) is p
    assert AttentionFamily.as_problem({"S": 256, "D": 128}).seq_q == 256  # alias S -> seq_q
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['nn'\]; accepted keys are \['nq', 'n'"):
        as_problem({"nn": 3})
    with pytest.raises(ConfigError, match="must be a SearchProblem or a dict"):
        as_problem(42)
