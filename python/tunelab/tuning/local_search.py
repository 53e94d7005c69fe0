"""Local refinement around the best measured configs: the search phase's second proposer, next to the sampler.

Why: kernel spaces have narrow optima that TPE's density model finds the basin of but not the bottom. On the H200
ground truth of the seed workload (``benchmarks/data``), only 2 of 7812 valid configs lie within 5% of the
optimum, and TPE settles in a neighbouring mode (BLOCK_N=64 with Q in registers, +6%) from which the optimum is
two parameter changes away, and the one-change path goes through a config the register gate rejects. The
optimum is, however, one change away from several configs TPE does measure on the way (BLOCK_N=64 with Q in
shared memory; VEC_LOAD=8; UNROLL=1; ...). So the refiner proposes the one-change neighbours of the *top few*
measured configs, not just of the best.

Neighbours of a config (:func:`neighbors`): each parameter changed alone, an ordered parameter to an adjacent
choice (BLOCK_N 64 -> 32 or 128), an unordered one to every other choice (SWIZZLE 1 -> 0 or 2). The ones that
break a static rule are skipped for free by the caller's filter; known and in-flight configs are skipped too.

Schedule (:class:`LocalSearch`): once the seed configs are through, every ``every``-th proposal is the
refiner's, the others the sampler's (the default ``every=3``: one in three). The refiner walks the top ``width`` measured
configs best first and returns the first fresh valid neighbour; neighbours of one config are tried in an order
shuffled by the study's seed (no parameter is favoured). When the top ``width`` have no fresh neighbour left the
refiner has converged (they are all local optima at distance one) and every slot goes back to the sampler.
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from tunelab.errors import ConfigError
from tunelab.tuning.space import Config, SearchSpace


def neighbors(space: SearchSpace, config: Config) -> list[Config]:
    """The configs one parameter change away from ``config`` (adjacent choice for ordered parameters, any other
    choice for unordered ones), in declaration order of parameters and choices. Constraints are not checked."""
    base = space.validate(config)
    out: list[Config] = []
    for p in space.params:
        i = p.index(base[p.name])
        if p.ordered:
            targets = [j for j in (i - 1, i + 1) if 0 <= j < len(p)]
        else:
            targets = [j for j in range(len(p)) if j != i]
        for j in targets:
            c = dict(base)
            c[p.name] = p.choices[j]
            out.append(c)
    return out


class LocalSearch:
    """Proposes fresh one-change neighbours of the best measured configs (see the module docstring).

    Args:
        space: the search space.
        is_valid: static check of a config (True when every static rule holds).
        every: one proposal in ``every`` is the refiner's once seeding is over (>= 2; 2 alternates).
        width: how many of the best measured configs are refined.
        seed: shuffles the order in which one config's neighbours are tried.
    """

    def __init__(self, space: SearchSpace, is_valid: Callable[[Config], bool], *, every: int = 3, width: int = 5,
                 seed: int = 0):
        if int(every) < 2:
            raise ConfigError(f"local search every={every} must be >= 2 (one proposal in `every` is the refiner's; "
                              "the others stay the sampler's)")
        if int(width) < 1:
            raise ConfigError(f"local search width={width} must be >= 1")
        self.space = space
        self.is_valid = is_valid
        self.every = int(every)
        self.width = int(width)
        self.seed = int(seed)
        self.slots = 0  # proposals counted since seeding ended
        self._order: dict[str, list[Config]] = {}

    def _ordered_neighbors(self, key: str, config: Config) -> list[Config]:
        hit = self._order.get(key)
        if hit is None:
            cand = [c for c in neighbors(self.space, config) if self.is_valid(c)]
            rng = np.random.default_rng([self.seed, len(self._order)])
            hit = [cand[i] for i in rng.permutation(len(cand))]
            self._order[key] = hit
        return hit

    def wants_slot(self) -> bool:
        """Whether the next proposal is the refiner's (counts the slot)."""
        self.slots += 1
        return self.slots % self.every == 0

    def propose(self, ranked: Iterable[tuple[str, Config]], taken: Callable[[str], bool]) -> Config | None:
        """The first fresh valid neighbour of the best ``width`` configs of ``ranked`` ((key, config), best
        first); ``taken(key)`` says a config is already measured, rejected or in flight. None when there is none
        (the refiner has converged for now; a new best later reopens it)."""
        for n, (key, config) in enumerate(ranked):
            if n >= self.width:
                break
            for c in self._ordered_neighbors(key, config):
                if not taken(self.space.key(c)):
                    return c
        return None
