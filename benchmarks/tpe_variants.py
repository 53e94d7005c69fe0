"""TPE variants on the recorded attention ground truth (CPU only): evaluations to within 5% and 10% of the optimum.

A diagnostic for issue 4's efficiency goal: are Optuna's TPE knobs (EI candidates, the "good" fraction gamma)
what keeps LHS+TPE from the optimum? Run:  python3 benchmarks/tpe_variants.py [variant ...]
Writes benchmarks/results/tpe_variants.json.
"""
import sys, math, statistics, warnings, importlib
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import optuna
optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.filterwarnings("ignore")
te = importlib.import_module("tuner_efficiency")
from tunelab.tuning import samplers
REPLAY = "benchmarks/data/attention_fp16_b16_h16_s512_d64.replay.json.gz"
orig = optuna.samplers.TPESampler
variant = {}
def patched(**kw):
    kw.update(variant)
    return orig(**kw)
samplers.optuna.samplers.TPESampler = patched
import numpy as np, gzip, json
d = json.load(gzip.open(REPLAY))
opt = min(np.median(e["samples_us"]) for e in d["entries"] if e["status"] == "ok")
te.THRESHOLDS = (0.05, 0.10)
def gamma_fixed(n): return min(int(math.ceil(0.05 * n)), 10)
variants = {
  "base": {},
  "ei128": {"n_ei_candidates": 128},
  "gamma5%": {"gamma": gamma_fixed},
  "ei128+gamma5%": {"n_ei_candidates": 128, "gamma": gamma_fixed},
}
which = sys.argv[1:] or list(variants)
results = {}
for name in which:
    variant.clear(); variant.update(variants[name])
    r5, r10 = [], []
    for seed in range(8):
        out = te.run_one(REPLAY, "lhs+tpe", seed, opt, 150, 1)
        r5.append(out["evals_to"]["5%"] or 999); r10.append(out["evals_to"]["10%"] or 999)
    results[name] = {"to_5pct": r5, "to_10pct": r10, "median_to_5pct": statistics.median(r5),
                     "median_to_10pct": statistics.median(r10)}
    print(f"{name:16s} to5% median {statistics.median(r5):6.1f} {sorted(r5)}  to10% median {statistics.median(r10):5.1f} {sorted(r10)}", flush=True)

from _common import write_result
write_result("tpe_variants", {"replay": REPLAY, "optimum_us": float(opt), "seeds": 8, "cap": 150,
                              "unit": "evaluations; 999 = not reached within the cap", "variants": results})
