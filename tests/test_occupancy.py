"""Static occupancy against hand-computed expectations (CPU only).

Each case is worked out from the arch's limits: warps = max threads per SM / 32 over warps per block;
registers = 64K per SM in 4 sub-partitions, allocated per warp in units of 256; shared memory = per-SM
capacity over (block's bytes + 1 KiB reserved per block); blocks = the arch's resident-block limit.
"""
from __future__ import annotations

import pytest

from tunelab import _core
from tunelab.cli import main, parse_size
from tunelab.errors import ConfigError

CASES = [
    # arch,   threads, regs, smem,   blocks, limiter,         why
    ("sm_90", 1024, 16, 0, 2, "warps", "64 warps/SM / 32 warps per block"),
    ("sm_90", 256, 128, 0, 2, "registers", "128 regs * 32 = 4096 per warp; 16 warps fit in 64K; 8 per block"),
    ("sm_90", 128, 32, 102400, 2, "shared_memory", "228 KiB / (100 KiB + 1 KiB reserved) = 2"),
    ("sm_90", 32, 32, 0, 32, "blocks", "one-warp blocks: the 32 resident-block limit binds first"),
    ("sm_80", 256, 32, 49152, 3, "shared_memory", "164 KiB / (48 KiB + 1 KiB) = 3"),
    ("sm_80", 128, 255, 0, 2, "registers", "255 -> 256 regs: 8192 per warp, 8 warps fit; 4 per block"),
    ("sm_86", 512, 32, 0, 3, "warps", "48 warps/SM / 16 per block"),
    ("sm_86", 64, 32, 0, 16, "blocks", "sm_86 holds 16 resident blocks"),
]


@pytest.mark.parametrize("arch,threads,regs,smem,blocks,limiter,why", CASES)
def test_occupancy_matches_hand_computation(arch, threads, regs, smem, blocks, limiter, why):
    occ = _core.occupancy(arch, threads, regs, smem)
    assert occ.blocks_per_sm == blocks, why
    assert occ.limiter == limiter, why
    warps_per_block = (threads + 31) // 32
    assert occ.active_warps == blocks * warps_per_block
    assert occ.occupancy == pytest.approx(occ.active_warps / occ.max_warps)


def test_every_limiter_is_covered_on_two_arches():
    seen = {(c[0], c[5]) for c in CASES}
    assert {lim for _, lim in seen} == {"warps", "registers", "shared_memory", "blocks"}
    assert len({a for a, _ in seen}) >= 2


def test_sm90a_uses_sm90_limits():
    a = _core.occupancy("sm_90a", 256, 128, 0)
    b = _core.occupancy("sm_90", 256, 128, 0)
    assert (a.blocks_per_sm, a.limiter) == (b.blocks_per_sm, b.limiter)


@pytest.mark.parametrize("args,match", [
    (("sm_90", 2048, 32, 0), "threads per block"),
    (("sm_90", 128, 300, 0), "registers"),
    (("sm_90", 128, 32, 300 * 1024), "opt-in limit"),
    (("sm_42", 128, 32, 0), "accepted: sm_75"),
])
def test_impossible_inputs_raise_clear_errors(args, match):
    with pytest.raises(ConfigError, match=match):
        _core.occupancy(*args)


def test_parse_size():
    assert parse_size("64K") == 65536
    assert parse_size("64KB") == 65536
    assert parse_size("227KiB") == 227 * 1024
    assert parse_size("1.5M") == 1536 * 1024
    assert parse_size("4096") == 4096
    with pytest.raises(ConfigError, match="not understood"):
        parse_size("lots")


def test_cli_occupancy_prints_the_answer(capsys):
    assert main(["occupancy", "--arch", "sm_90", "--threads", "256", "--regs", "96", "--smem", "64K"]) == 0
    out = capsys.readouterr().out
    assert "blocks/SM      2" in out and "limited by     registers" in out
