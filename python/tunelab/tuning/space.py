"""Declarative search spaces: named parameters with ordered choices, constraints with reasons, derived values.

A :class:`SearchSpace` is what a kernel family (or a user tuning their own kernel) declares::

    space = SearchSpace("attention/d64/fp16",
        params=[Param("BLOCK_M", [64, 128]), Param("NUM_WARPS", [4, 8]), Param("SWIZZLE", [False, True])],
        constraints=[Constraint("warps_divide_block_m",
                                lambda c: c["BLOCK_M"] % (16 * c["NUM_WARPS"]) == 0,
                                "BLOCK_M must be a multiple of 16*NUM_WARPS", code="static.divisibility")],
        derived=[Derived("THREADS", lambda c: 32 * c["NUM_WARPS"], "threads per block")])

Every space is finite (choices are lists), so it can be sized and enumerated. A config is a plain dict of
parameter name -> value; :meth:`SearchSpace.key` gives it a stable, human-readable identity that is used for
duplicate detection in studies, as the key of replay files and in results.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from tunelab.errors import ConfigError

Config = dict[str, Any]

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _is_number(value: Any) -> bool:
    # bool is an int subclass in Python, but a flag is not a magnitude: True < 2 must not make it "ordered".
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float)) or isinstance(value, numbers.Real)


def _canonical(value: Any) -> Any:
    """Turn numpy scalars (which Optuna and pandas hand back) into plain Python values."""
    if type(value) in (int, str, bool, float):
        return value
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            return value.item()
        except (TypeError, ValueError):
            return value
    return value


@dataclass(frozen=True)
class Param:
    """One tunable: a name and its ordered list of choices (ints, floats, strings or booleans).

    ``ordered`` says whether neighbouring choices are related (tile sizes: 64 < 128 < 256). Ordered params are
    handed to Optuna as an integer index, so TPE and CMA-ES can exploit the order; unordered ones (layouts,
    flags) as categorical choices. The default is ordered when every choice is a number.
    """

    name: str
    choices: tuple
    ordered: bool | None = None
    description: str = ""

    def __init__(self, name: str, choices: Sequence[Any], ordered: bool | None = None, description: str = ""):
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigError(f"parameter name {name!r} is not an identifier; use letters, digits and '_' "
                              "(for example 'BLOCK_M')")
        choices = tuple(_canonical(c) for c in choices)
        if not choices:
            raise ConfigError(f"parameter {name!r} has no choices; give at least one value")
        for c in choices:
            if not isinstance(c, (bool, int, float, str)):
                raise ConfigError(f"parameter {name!r} has choice {c!r} of type {type(c).__name__}; "
                                  "accepted choice types are int, float, str and bool")
        if len(set(map(_choice_identity, choices))) != len(choices):
            raise ConfigError(f"parameter {name!r} lists a choice twice: {list(choices)}")
        if ordered is None:
            ordered = all(_is_number(c) for c in choices)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "choices", choices)
        object.__setattr__(self, "ordered", bool(ordered))
        object.__setattr__(self, "description", description)
        # enumerating and validating large spaces calls index() millions of times: make it a dict lookup
        object.__setattr__(self, "_positions", {_choice_identity(c): i for i, c in enumerate(choices)})

    def index(self, value: Any) -> int:
        """Position of ``value`` among the choices; raises ConfigError naming the accepted values."""
        value = _canonical(value)
        try:
            return self._positions[_choice_identity(value)]
        except (KeyError, TypeError):
            raise ConfigError(f"{self.name}={value!r} is not one of the accepted values "
                              f"{list(self.choices)}") from None

    def __len__(self) -> int:
        return len(self.choices)

    def to_dict(self) -> dict:
        """JSON-ready description."""
        return {"name": self.name, "choices": list(self.choices), "ordered": self.ordered,
                "description": self.description}


def _choice_identity(value: Any) -> tuple:
    # 1 == True and 1 == 1.0 in Python; a space must keep them apart, so compare (type family, value).
    t = type(value)
    if t is bool:
        return ("bool", value)
    if t is int or t is float or _is_number(value):
        return ("num", float(value))
    return (t.__name__, value)


@dataclass(frozen=True)
class Constraint:
    """A rule every valid config satisfies, with the reason shown when a config breaks it.

    ``predicate`` receives the config with derived values filled in and returns True when the config is
    allowed. ``code`` is the rejection reason code reported in gate tables (``static.constraint`` unless the
    family names a more specific one such as ``static.smem`` or ``static.divisibility``). A constraint restored
    from JSON has no predicate (functions do not serialize); it is kept as documentation and not checked.
    """

    name: str
    predicate: Callable[[Mapping[str, Any]], bool] | None
    description: str = ""
    code: str = "static.constraint"

    def to_dict(self) -> dict:
        """JSON-ready description (the predicate itself is not serializable and is left out)."""
        return {"name": self.name, "description": self.description, "code": self.code}


@dataclass(frozen=True)
class Derived:
    """A value computed from the tunables (e.g. ``THREADS = 32 * NUM_WARPS``); not searched, not in the key."""

    name: str
    fn: Callable[[Mapping[str, Any]], Any] | None
    description: str = ""

    def to_dict(self) -> dict:
        """JSON-ready description (the function is left out)."""
        return {"name": self.name, "description": self.description}


@dataclass
class SearchSpace:
    """A finite, declarative search space: params (ordered choices), constraints and derived values."""

    name: str
    params: list[Param]
    constraints: list[Constraint] = field(default_factory=list)
    derived: list[Derived] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.params = list(self.params)
        self.constraints = list(self.constraints)
        self.derived = list(self.derived)
        if not self.params:
            raise ConfigError(f"search space {self.name!r} has no parameters")
        names = [p.name for p in self.params]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"search space {self.name!r} declares parameter(s) {dup} more than once")
        clash = sorted({d.name for d in self.derived} & set(names))
        if clash:
            raise ConfigError(f"derived value(s) {clash} have the name of a parameter in {self.name!r}")
        self._by_name = {p.name: p for p in self.params}

    # -- structure -------------------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """Parameter names in declaration order."""
        return [p.name for p in self.params]

    def param(self, name: str) -> Param:
        """The parameter called ``name``; ConfigError naming the accepted names otherwise."""
        try:
            return self._by_name[name]
        except KeyError:
            raise ConfigError(f"{name!r} is not a parameter of search space {self.name!r}; "
                              f"its parameters are {self.names}") from None

    def size(self) -> int:
        """Number of points in the Cartesian product of the choices (valid or not)."""
        return math.prod(len(p) for p in self.params)

    def count_valid(self) -> int:
        """Number of configs that satisfy every constraint (enumerates the space)."""
        return sum(1 for _ in self.enumerate())

    def enumerate(self, valid_only: bool = True, limit: int = 5_000_000) -> Iterator[Config]:
        """Yield every config (in declaration order of choices), by default only those satisfying constraints.

        ``limit`` guards against enumerating an accidentally huge product; raise it explicitly if needed.
        """
        if self.size() > limit:
            raise ConfigError(f"search space {self.name!r} has {self.size()} points, more than limit={limit}; "
                              "pass a larger limit to enumerate it anyway")
        for values in itertools.product(*(p.choices for p in self.params)):
            config = dict(zip(self.names, values))
            if not valid_only or self.rejection(config) is None:
                yield config

    # -- configs ---------------------------------------------------------------------------------------------
    def validate(self, config: Mapping[str, Any]) -> Config:
        """Return a canonical copy of ``config`` (only params, plain Python values, declaration order).

        Raises ConfigError when a parameter is missing, unknown, or has a value outside its choices.
        Constraints are not checked here (see :meth:`check`).
        """
        config = {k: _canonical(v) for k, v in dict(config).items()}
        derived_names = {d.name for d in self.derived}
        unknown = sorted(set(config) - set(self.names) - derived_names)
        if unknown:
            raise ConfigError(f"config has unknown parameter(s) {unknown}; the parameters of {self.name!r} "
                              f"are {self.names}")
        missing = [n for n in self.names if n not in config]
        if missing:
            raise ConfigError(f"config is missing parameter(s) {missing} of search space {self.name!r}")
        out = {}
        for p in self.params:
            out[p.name] = p.choices[p.index(config[p.name])]
        return out

    def complete(self, config: Mapping[str, Any]) -> Config:
        """The config with its derived values added (derived values may use earlier derived values)."""
        full = dict(config)
        for d in self.derived:
            if d.fn is not None:
                full[d.name] = d.fn(full)
        return full

    def rejection(self, config: Mapping[str, Any]):
        """``None`` when the config is valid, else the first broken rule as a :class:`Rejection`."""
        from tunelab.tuning.family import Rejection  # local: family imports space

        try:
            canonical = self.validate(config)
        except ConfigError as exc:
            return Rejection("static.choice", str(exc))
        try:
            full = self.complete(canonical)
        except Exception as exc:  # a derived value that cannot be computed makes the config invalid
            return Rejection("static.constraint", f"derived value failed: {type(exc).__name__}: {exc}")
        for c in self.constraints:
            if c.predicate is None:
                continue
            try:
                ok = bool(c.predicate(full))
            except Exception as exc:  # a predicate that raises on a config rejects it, with the error as reason
                return Rejection(c.code, f"{c.name}: predicate raised {type(exc).__name__}: {exc}")
            if not ok:
                return Rejection(c.code, f"{c.name}: {c.description}" if c.description else c.name)
        return None

    def check(self, config: Mapping[str, Any]) -> tuple[bool, str | None]:
        """``(True, None)`` for a valid config, else ``(False, reason)`` naming the broken rule."""
        rej = self.rejection(config)
        return (True, None) if rej is None else (False, f"{rej.code}: {rej.detail}")

    def key(self, config: Mapping[str, Any]) -> str:
        """Stable identity of a config: ``NAME=json(value)`` pairs sorted by name, joined by commas.

        Independent of dict order and of param declaration order, readable in logs, and equal for ``128``
        and ``numpy.int64(128)``. Derived values are not part of it.
        """
        return config_key(self.validate(config))

    def config_hash(self, config: Mapping[str, Any]) -> str:
        """First 16 hex digits of the SHA-256 of :meth:`key` (short identity for file names)."""
        return hashlib.sha256(self.key(config).encode()).hexdigest()[:16]

    def from_key(self, key: str) -> Config:
        """Inverse of :meth:`key`."""
        config = {}
        for part in _split_key(key):
            name, _, value = part.partition("=")
            config[name] = json.loads(value)
        return self.validate(config)

    # -- index encoding (what samplers see) -------------------------------------------------------------------
    def to_indices(self, config: Mapping[str, Any]) -> list[int]:
        """Choice index of every parameter, in declaration order."""
        canonical = self.validate(config)
        return [p.index(canonical[p.name]) for p in self.params]

    def from_indices(self, indices: Sequence[int]) -> Config:
        """The config whose choice indices are ``indices`` (declaration order)."""
        if len(indices) != len(self.params):
            raise ConfigError(f"expected {len(self.params)} indices for {self.name!r}, got {len(indices)}")
        return {p.name: p.choices[int(i)] for p, i in zip(self.params, indices)}

    def from_unit(self, point: Sequence[float]) -> Config:
        """Map a point of [0, 1)^d onto choices: each axis is split evenly among its parameter's choices.

        This is how Latin-hypercube points become configs: with n choices, [0, 1/n) is the first choice,
        [1/n, 2/n) the second, and so on, so every choice gets the same share of the cube.
        """
        if len(point) != len(self.params):
            raise ConfigError(f"expected a point with {len(self.params)} coordinates, got {len(point)}")
        idx = [min(len(p) - 1, max(0, int(math.floor(float(u) * len(p))))) for p, u in zip(self.params, point)]
        return self.from_indices(idx)

    def cell_center(self, config: Mapping[str, Any]) -> list[float]:
        """Centre of the config's cell in [0, 1)^d under :meth:`from_unit`'s mapping."""
        return [(i + 0.5) / len(p) for p, i in zip(self.params, self.to_indices(config))]

    # -- serialization ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-ready description: params with choices, constraint and derived names with descriptions."""
        return {
            "name": self.name,
            "params": [p.to_dict() for p in self.params],
            "constraints": [c.to_dict() for c in self.constraints],
            "derived": [d.to_dict() for d in self.derived],
            "size": self.size(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any],
                  constraints: Sequence[Constraint] | None = None,
                  derived: Sequence[Derived] | None = None) -> "SearchSpace":
        """Rebuild a space from :meth:`to_dict`'s output.

        Functions do not serialize: pass ``constraints``/``derived`` to restore the real predicates; without
        them the restored space keeps the constraints' names and descriptions but checks choices only.
        """
        params = [Param(p["name"], p["choices"], ordered=p.get("ordered"), description=p.get("description", ""))
                  for p in data["params"]]
        if constraints is None:
            constraints = [Constraint(c["name"], None, c.get("description", ""), c.get("code", "static.constraint"))
                           for c in data.get("constraints", [])]
        if derived is None:
            derived = [Derived(d["name"], None, d.get("description", "")) for d in data.get("derived", [])]
        return cls(data["name"], params, list(constraints), list(derived))

    def __repr__(self) -> str:
        return (f"SearchSpace({self.name!r}, params={self.names}, size={self.size()}, "
                f"constraints={[c.name for c in self.constraints]})")


def _json_scalar(v: Any) -> str:
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    return json.dumps(_canonical(v))


def config_key(config: Mapping[str, Any]) -> str:
    """Stable identity of any config dict (no validation): ``NAME=json(value)`` sorted by name, comma-joined."""
    return ",".join(f"{k}={_json_scalar(config[k])}" for k in sorted(config))


def _split_key(key: str) -> list[str]:
    # Values are JSON; a string value may itself contain ',' so split only at ',' followed by NAME=.
    return [p for p in re.split(r",(?=[A-Za-z_][A-Za-z0-9_]*=)", key) if p]
