"""Gates: compiled-gate thresholds, gate order, and rejection counts by reason over a whole space."""
from __future__ import annotations

from collections import Counter

from tunelab.tuning.api import tune
from tunelab.tuning.family import CompiledCandidate, Rejection, TunableFamily
from tunelab.tuning.gates import GateConfig, GateTable, compiled_rejection, static_rejection
from tunelab.tuning.space import Constraint, Param, SearchSpace


def cand(regs=32, threads=128, spill_st=0, spill_ld=0, occ=None):
    return CompiledCandidate({"registers": regs, "spill_store_bytes": spill_st, "spill_load_bytes": spill_ld},
                             threads=threads, smem_bytes=0, occupancy=occ)


def test_compiled_gates():
    g = GateConfig()
    assert compiled_rejection(cand(occ={"blocks_per_sm": 4, "occupancy": 0.5}), g) is None
    assert compiled_rejection(cand(spill_st=8, occ={"blocks_per_sm": 1}), g).code == "compiled.spills"
    assert compiled_rejection(cand(spill_st=8, occ={"blocks_per_sm": 1}), GateConfig(max_spill_bytes=64)) is None
    r = compiled_rejection(cand(regs=128, threads=1024), g)
    assert r.code == "compiled.registers" and "65536" in r.detail
    r = compiled_rejection(cand(occ={"blocks_per_sm": 0, "occupancy": 0.0, "limiter": "shared_memory"}), g)
    assert r.code == "compiled.occupancy" and "shared_memory" in r.detail
    r = compiled_rejection(cand(occ={"blocks_per_sm": 1, "occupancy": 0.125, "limiter": "registers"}),
                           GateConfig(min_occupancy=0.25))
    assert r.code == "compiled.occupancy"


def test_compiled_gates_use_core_occupancy():
    # No occupancy given: the gate asks the core's static occupancy model (no GPU needed).
    c = CompiledCandidate({"registers": 32}, threads=256, smem_bytes=300 * 1024, arch="sm_90")
    r = compiled_rejection(c, GateConfig())
    assert r is not None and r.code == "compiled.occupancy"  # 300 KB of smem cannot fit an SM
    c = CompiledCandidate({"registers": 32}, threads=256, smem_bytes=16 * 1024, arch="sm_90")
    assert compiled_rejection(c, GateConfig()) is None and c.occupancy.blocks_per_sm >= 1


class _Fam(TunableFamily):
    name = "f"

    def static_gates(self, config, problem):
        return [Rejection("static.smem", "too big")] if config["A"] == 3 else []


def test_static_gate_order():
    s = SearchSpace("s", [Param("A", [1, 2, 3])],
                    constraints=[Constraint("no2", lambda c: c["A"] != 2, code="static.threads")])
    f = _Fam()
    assert static_rejection(f, s, {"A": 1}, None) is None
    assert static_rejection(f, s, {"A": 2}, None).code == "static.threads"  # space constraints first
    assert static_rejection(f, s, {"A": 3}, None).code == "static.smem"
    assert static_rejection(f, s, {"A": 4}, None).code == "static.choice"


def test_gate_table_order():
    t = GateTable.from_codes(["numerics.error", None, "static.smem", "compiled.spills", "static.smem",
                              "runtime.trap", None])
    assert t.passed == 2 and t.rejected == 5
    assert [c for c, _ in t.rows()] == ["static.smem", "compiled.spills", "numerics.error", "runtime.trap"]


def test_rejection_counts_over_whole_space(toy_replay_path, toy_replay):
    # The grid sampler visits every statically valid config once: the gate table must count exactly the
    # compiled/numerics rejections the recording holds, and every measured config.
    expected = Counter(e["code"] or "ok" for e in toy_replay.entries.values()
                       if not str(e.get("code") or "").startswith("static."))
    n = sum(expected.values())
    r = tune("toy", replay=toy_replay_path, trials=n + 50, sampler="grid", storage="memory", progress=False,
             confirm=False, save_results_file=False)
    g = r.gates
    assert g["passed"] == expected["ok"] == 600
    assert g["by_reason"]["compiled.spills"] == expected["compiled.spills"]
    assert g["by_reason"]["numerics.error"] == expected["numerics.error"]
    assert not any(code.startswith("static.") for code in g["by_reason"])
    assert r.data["stop_reason"] == "space exhausted"
    # each config evaluated exactly once
    keys = [t["key"] for t in r.trials if t["evaluated"]]
    assert len(keys) == len(set(keys)) == n
    # the table agrees with the trial records
    from_trials = Counter(t["reason"] for t in r.trials if t["status"] in ("rejected", "failed"))
    assert dict(from_trials) == g["by_reason"]


def test_family_compiled_gates_apply_after_the_generic_ones():
    """FamilyBackend.prepare applies the family's own compiled rule (attention: few warps need 3+ stages)."""
    from types import SimpleNamespace

    from tunelab.tuning.family_backend import FamilyBackend

    class _Compiles(TunableFamily):
        name = "g"

        def compile(self, config, problem, arch):
            occ = SimpleNamespace(blocks_per_sm=1, active_warps=2, max_warps=64, occupancy=2 / 64, limiter="shared_memory")
            return CompiledCandidate({"registers": 64}, threads=64, smem_bytes=200 * 1024, occupancy=occ, arch=arch)

        def compiled_gates(self, config, compiled):
            warps = compiled.occupancy.blocks_per_sm * 2
            return [Rejection("compiled.occupancy", f"{warps} warps")] if config["STAGES"] < 3 else []

    backend = FamilyBackend(_Compiles(), {}, arch="sm_90")
    assert backend.prepare({"STAGES": 2}).rejection.code == "compiled.occupancy"
    assert backend.prepare({"STAGES": 3}).rejection is None


def test_attention_family_rule_on_resident_warps():
    from types import SimpleNamespace

    from tunelab.tuning.families.attention import AttentionFamily

    fam = AttentionFamily()
    one_block = SimpleNamespace(blocks_per_sm=1, limiter="shared_memory")
    c = CompiledCandidate({"registers": 128}, threads=64, smem_bytes=200 * 1024, occupancy=one_block, arch="sm_90")
    assert fam.compiled_gates({"NUM_WARPS": 2, "STAGES": 2}, c)[0].code == "compiled.occupancy"
    assert fam.compiled_gates({"NUM_WARPS": 2, "STAGES": 3}, c) == []
    assert fam.compiled_gates({"NUM_WARPS": 4, "STAGES": 2}, c) == []
