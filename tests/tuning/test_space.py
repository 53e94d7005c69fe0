"""SearchSpace: declaration errors, size and enumeration, constraint reasons, stable keys, serialization."""
from __future__ import annotations

import numpy as np
import pytest

from tunelab.errors import ConfigError
from tunelab.tuning.fake import toy_space
from tunelab.tuning.space import Constraint, Derived, Param, SearchSpace


def small_space():
    return SearchSpace("s", [Param("BLOCK_M", [64, 128]), Param("NUM_WARPS", [4, 8]),
                             Param("SWIZZLE", [False, True])],
                       constraints=[Constraint("div", lambda c: c["BLOCK_M"] % (16 * c["NUM_WARPS"]) == 0,
                                               "BLOCK_M must be a multiple of 16*NUM_WARPS",
                                               code="static.divisibility")],
                       derived=[Derived("THREADS", lambda c: 32 * c["NUM_WARPS"])])


def test_size_and_enumeration():
    s = small_space()
    assert s.size() == 8
    valid = list(s.enumerate())
    # BLOCK_M=64 with NUM_WARPS=8 breaks the constraint (64 % 128 != 0): 2 of 8 are invalid.
    assert len(valid) == 6 == s.count_valid()
    assert all(s.check(c)[0] for c in valid)
    assert len(list(s.enumerate(valid_only=False))) == 8


def test_check_names_rule_and_code():
    s = small_space()
    ok, reason = s.check({"BLOCK_M": 64, "NUM_WARPS": 8, "SWIZZLE": True})
    assert not ok and "div" in reason and "16*NUM_WARPS" in reason
    rej = s.rejection({"BLOCK_M": 64, "NUM_WARPS": 8, "SWIZZLE": True})
    assert rej.code == "static.divisibility"
    rej = s.rejection({"BLOCK_M": 96, "NUM_WARPS": 4, "SWIZZLE": True})
    assert rej.code == "static.choice" and "[64, 128]" in rej.detail


def test_validate_errors_name_values():
    s = small_space()
    with pytest.raises(ConfigError, match=r"BLOCK_M=96 is not one of the accepted values \[64, 128\]"):
        s.validate({"BLOCK_M": 96, "NUM_WARPS": 4, "SWIZZLE": True})
    with pytest.raises(ConfigError, match="missing"):
        s.validate({"BLOCK_M": 64})
    with pytest.raises(ConfigError, match="unknown parameter"):
        s.validate({"BLOCK_M": 64, "NUM_WARPS": 4, "SWIZZLE": True, "FOO": 1})


def test_param_declaration_errors():
    with pytest.raises(ConfigError, match="no choices"):
        Param("A", [])
    with pytest.raises(ConfigError, match="twice"):
        Param("A", [1, 1])
    with pytest.raises(ConfigError, match="identifier"):
        Param("not a name", [1])
    with pytest.raises(ConfigError, match="more than once"):
        SearchSpace("x", [Param("A", [1]), Param("A", [2])])
    # True and 1 are different choices (a flag is not a magnitude)
    assert len(Param("A", [True, 1]).choices) == 2


def test_ordered_default():
    assert Param("A", [1, 2]).ordered
    assert not Param("B", ["row", "col"]).ordered
    assert not Param("C", [False, True]).ordered


def test_key_is_stable():
    s = small_space()
    a = s.key({"BLOCK_M": 128, "NUM_WARPS": 4, "SWIZZLE": True})
    b = s.key({"SWIZZLE": True, "NUM_WARPS": np.int64(4), "BLOCK_M": np.int64(128)})
    assert a == b == 'BLOCK_M=128,NUM_WARPS=4,SWIZZLE=true'
    assert s.from_key(a) == {"BLOCK_M": 128, "NUM_WARPS": 4, "SWIZZLE": True}
    assert len(s.config_hash({"BLOCK_M": 128, "NUM_WARPS": 4, "SWIZZLE": True})) == 16


def test_key_with_string_values():
    s = toy_space()
    c = {"BLOCK_M": 64, "BLOCK_N": 32, "NUM_WARPS": 2, "NUM_STAGES": 2, "SWIZZLE": False, "LAYOUT": "col"}
    assert s.from_key(s.key(c)) == c


def test_derived_values():
    s = small_space()
    assert s.complete({"BLOCK_M": 64, "NUM_WARPS": 4, "SWIZZLE": False})["THREADS"] == 128


def test_dict_round_trip():
    s = toy_space()
    d = s.to_dict()
    r = SearchSpace.from_dict(d)
    assert r.names == s.names and [p.choices for p in r.params] == [p.choices for p in s.params]
    assert [c.name for c in r.constraints] == [c.name for c in s.constraints]
    assert r.to_dict() == d
    # restored without predicates: checks choices only, unless the predicates are passed back
    bad = {"BLOCK_M": 16, "BLOCK_N": 16, "NUM_WARPS": 8, "NUM_STAGES": 1, "SWIZZLE": False, "LAYOUT": "row"}
    assert r.check(bad)[0] and not s.check(bad)[0]
    assert not SearchSpace.from_dict(d, constraints=s.constraints).check(bad)[0]


def test_unit_mapping_splits_axes_evenly():
    s = SearchSpace("u", [Param("A", [1, 2, 3, 4]), Param("B", ["x", "y"])])
    assert s.from_unit([0.0, 0.0]) == {"A": 1, "B": "x"}
    assert s.from_unit([0.2499, 0.4999]) == {"A": 1, "B": "x"}
    assert s.from_unit([0.25, 0.5]) == {"A": 2, "B": "y"}
    assert s.from_unit([0.9999, 0.9999]) == {"A": 4, "B": "y"}
    assert s.cell_center({"A": 2, "B": "y"}) == [0.375, 0.75]


def test_enumerate_limit():
    s = SearchSpace("big", [Param(f"P{i}", list(range(10))) for i in range(7)])
    with pytest.raises(ConfigError, match="limit"):
        next(s.enumerate(limit=1000))
