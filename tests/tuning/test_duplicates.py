"""A config already in the study is answered from it: never measured or compiled twice; stuck samplers recover."""
from __future__ import annotations

from collections import Counter

import optuna
from optuna.samplers import BaseSampler

from tunelab.tuning.api import tune
from tunelab.tuning.fake import FakeBackend, ToyFamily
from tunelab.tuning.samplers import Codec
from tunelab.tuning.space import config_key

GOOD = {"BLOCK_M": 128, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 3, "SWIZZLE": True, "LAYOUT": "row"}
STATIC_BAD = dict(GOOD, BLOCK_M=16)  # 16 % (16*4) != 0: static.divisibility
SPILLS = dict(GOOD, BLOCK_M=256, BLOCK_N=128, NUM_WARPS=1, NUM_STAGES=1)  # ~1056 regs: compiled.spills


class Stubborn(BaseSampler):
    """Proposes the same config forever (what TPE tends to do late in a discrete space)."""

    def __init__(self, config):
        self.params = Codec(ToyFamily().space(None)).encode(config)
        self.fallback = optuna.samplers.RandomSampler(seed=0)

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, dist):
        return self.params[name]


def run(config, trials, **kw):
    backend = FakeBackend()
    r = tune(ToyFamily(), {"M": 1}, backend=backend, sampler=Stubborn(config), trials=trials, seed_trials=0,
             seed_default=False, storage="memory", progress=False, confirm=False, save_results_file=False, **kw)
    return r, backend


def test_measured_config_is_answered_from_the_study():
    r, backend = run(GOOD, trials=4, local_every=0)  # local search would also unstick it: test injection alone
    # Every measurement is of a distinct config, and the budget counts distinct evaluations.
    assert len(backend.measured) == len(set(backend.measured)) == 4
    assert Counter(backend.prepared)[config_key(GOOD)] == 1
    first = next(t for t in r.trials if t["key"] == config_key(GOOD) and t["status"] == "ok")
    dups = [t for t in r.trials if t["status"] == "duplicate" and t["key"] == config_key(GOOD)]
    assert len(dups) >= 20
    assert all(t["duplicate_of"] == first["number"] and t["value"] == first["value"] for t in dups)
    # after a streak of duplicates the driver injects unseen valid configs: the study still progresses
    assert sum(t["source"] == "injected" for t in r.trials) >= 3
    assert r.data["evaluations"] == 4


def test_statically_rejected_config_is_remembered():
    r, backend = run(STATIC_BAD, trials=2)
    rej = [t for t in r.trials if t["key"] == config_key(STATIC_BAD)]
    assert rej[0]["status"] == "rejected" and rej[0]["reason"] == "static.divisibility"
    assert all(t["status"] == "duplicate" and t["reason"] == "static.divisibility" and t["state"] == "PRUNED"
               for t in rej[1:])
    assert config_key(STATIC_BAD) not in backend.prepared  # static rejections cost nothing
    assert r.gates["by_reason"]["static.divisibility"] == 1  # counted once, not per repeat


def test_compiled_rejection_is_not_recompiled():
    r, backend = run(SPILLS, trials=2)
    assert Counter(backend.prepared)[config_key(SPILLS)] == 1
    assert config_key(SPILLS) not in backend.measured
    first = [t for t in r.trials if t["key"] == config_key(SPILLS)]
    assert first[0]["reason"] == "compiled.spills" and first[0]["state"] == "PRUNED"


def test_tpe_duplicates_never_remeasured(toy_replay_path):
    r = tune("toy", replay=toy_replay_path, trials=80, storage="memory", progress=False, confirm=False,
             save_results_file=False)
    evaluated = [t["key"] for t in r.trials if t["evaluated"]]
    assert len(evaluated) == len(set(evaluated)) == 80
    for t in r.trials:
        if t["status"] == "duplicate":
            orig = r.trials[t["duplicate_of"]]
            assert orig["key"] == t["key"] and orig["status"] in ("ok", "rejected", "failed")
            assert orig["value"] == t["value"] and orig["reason"] == t["reason"]
