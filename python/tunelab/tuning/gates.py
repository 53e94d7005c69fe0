"""The gates a candidate passes before it costs GPU time, and the table of rejections by reason.

Order: static (config and problem only) -> compile -> compiled (ptxas resources, occupancy) -> numerics ->
memory -> runtime. The first two run on the host (static in the driver, compile and compiled gates in the
compile thread pool); numerics and memory run in the GPU worker right before timing.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from tunelab.tuning.family import GATE_ORDER, CompiledCandidate, Rejection, TunableFamily, occupancy_dict
from tunelab.tuning.space import Config, SearchSpace

#: Registers per SM on every arch from sm_80 to sm_120; a block needing more cannot launch.
REGISTERS_PER_SM = 65536


@dataclass
class GateConfig:
    """Thresholds of the compiled gates.

    ``max_spill_bytes``: spill stores + loads allowed (0: any spill rejects; spills to local memory cost
    far more than they save for these kernels). ``min_occupancy``: occupancy (0..1) below which a config is
    rejected; 0 keeps every launchable config, because the fastest attention kernels often run at one block
    per SM. ``max_registers``: per-thread cap (255 is the hardware limit).
    """

    max_spill_bytes: int = 0
    min_occupancy: float = 0.0
    max_registers: int = 255

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


def static_rejection(family: TunableFamily, space: SearchSpace, config: Config, problem: Any) -> Rejection | None:
    """First static rejection of ``config``: the space's constraints, then the family's static gates."""
    rej = space.rejection(config)
    if rej is not None:
        return rej
    try:
        gates = family.static_gates(space.complete(space.validate(config)), problem) or []
    except Exception as exc:  # a family bug must not kill the study; the config is rejected with the error
        return Rejection("static.constraint", f"static_gates raised {type(exc).__name__}: {exc}")
    return gates[0] if gates else None


def occupancy_of(compiled: CompiledCandidate) -> Any:
    """The candidate's occupancy: its own field, else ``_core.occupancy`` from threads/registers/smem."""
    if compiled.occupancy is not None:
        return compiled.occupancy
    if not compiled.arch:
        return None
    from tunelab import _core  # needs only the host part of the core, no GPU

    compiled.occupancy = _core.occupancy(compiled.arch, int(compiled.threads),
                                         compiled.resource("registers"), int(compiled.smem_bytes))
    return compiled.occupancy


def compiled_rejection(compiled: CompiledCandidate, gates: GateConfig) -> Rejection | None:
    """Registers, spills and occupancy checks on a compiled candidate (first failing one)."""
    regs = compiled.resource("registers")
    threads = int(compiled.threads)
    if regs > gates.max_registers:
        return Rejection("compiled.registers", f"{regs} registers/thread > limit {gates.max_registers}")
    if threads > 0 and regs * threads > REGISTERS_PER_SM:
        return Rejection("compiled.registers",
                         f"{regs} registers x {threads} threads = {regs * threads} > {REGISTERS_PER_SM} per SM")
    spills = compiled.resource("spill_store_bytes") + compiled.resource("spill_load_bytes")
    if spills > gates.max_spill_bytes:
        return Rejection("compiled.spills", f"{spills} bytes of spill stores+loads > allowed {gates.max_spill_bytes}")
    try:
        occ = occupancy_of(compiled) if threads > 0 or compiled.occupancy is not None else None
    except Exception as exc:  # noqa: BLE001 - the core refuses impossible blocks (e.g. smem over the opt-in limit)
        return Rejection("compiled.occupancy", f"cannot launch: {exc}")
    if occ is not None:
        o = occupancy_dict(occ)
        blocks = int(o.get("blocks_per_sm", 1))
        if blocks < 1:
            return Rejection("compiled.occupancy",
                             f"0 blocks/SM (limited by {o.get('limiter', '?')}): the block cannot launch")
        if float(o.get("occupancy", 1.0)) < gates.min_occupancy:
            return Rejection("compiled.occupancy", f"occupancy {float(o['occupancy']):.3f} < minimum "
                                                   f"{gates.min_occupancy:.3f} (limited by {o.get('limiter', '?')})")
    return None


@dataclass
class GateTable:
    """Counts of rejections (and failures) by reason code, plus how many candidates passed everything."""

    counts: Counter = field(default_factory=Counter)
    passed: int = 0

    def add(self, code: str | None) -> None:
        """Count one outcome: a reason code, or None for a candidate that was measured."""
        if code is None:
            self.passed += 1
        else:
            self.counts[code] += 1

    @property
    def rejected(self) -> int:
        """Total rejections and failures."""
        return sum(self.counts.values())

    def rows(self) -> list[tuple[str, int]]:
        """(code, count) sorted by gate order, then by count descending."""
        def order(item):
            code, n = item
            stage = code.split(".", 1)[0]
            return (GATE_ORDER.index(stage) if stage in GATE_ORDER else len(GATE_ORDER), -n, code)

        return sorted(self.counts.items(), key=order)

    def to_dict(self) -> dict:
        """JSON-ready form: passed count and per-code counts in gate order."""
        return {"passed": self.passed, "rejected": self.rejected, "by_reason": dict(self.rows()),
                "order": list(GATE_ORDER)}

    @classmethod
    def from_codes(cls, codes: Iterable[str | None]) -> "GateTable":
        """Build from a sequence of outcomes (None = measured)."""
        t = cls()
        for c in codes:
            t.add(c)
        return t
