"""Host time of a ``tunelab.ops.similarity_search`` call, two versions of the package's Python against each other.

The host path of the op is Python (validation, config resolution, caches, allocations, two launches), and the
machines that lend a GPU differ and are noisy: one H200 host took 38.6 us a call at 50K / 100, another 55-85 us in
interleaved runs of the same tree (results/similarity_op_host_h200_*.json). A difference of a few microseconds
between two versions of the Python therefore needs both timed on one host, interleaved, with a statistic that
ignores the host's hiccups. This script runs ROUNDS rounds; each round starts one fresh process per version (the
installed package, and an overlay of it with the files of ``--before DIR`` in place, DIR laid out as the package
itself: ``DIR/ops/similarity.py`` replaces ``tunelab/ops/similarity.py``), in alternating order, and each process
times, per shape, the wall clock of CALLS back-to-back calls REPEATS times (the GPU is synchronized before each) and
keeps the smallest per-call figure. At 1 x 1024 the kernels take a few microseconds, so the figure is the host's;
at 100 x 50K it is the larger of the host's and the kernels' (~41 us on an H200).
With --no-gpu the processes time instead, on the CPU alone, the two steps of the host path that need no GPU: the
inputs' validation (validate_search_inputs, on tensors that report is_cuda) and the cached config resolution
(resolve_config after its first call), best of 7 repeats of 20,000 calls each: host code timed on a CPU, which is
what it runs on (not a GPU timing).
Results: benchmarks/results/similarity_op_host_ab[_TAG].json (every round's figures, the medians over rounds and
their ratio); a table last.

    python3 benchmarks/similarity_op_host_ab.py --before DIR [--rounds 5] [--shapes 1x1024,100x50000] [--no-gpu]
                                                [--tag h200]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import int_in, nq_n_list, write_result  # noqa: E402

SHAPES = ((1, 1024), (100, 50_000))
D, K, CALLS, REPEATS = 768, 10, 300, 5

# One version's measurement, run in a fresh process (so that each version imports its own modules).
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from _common import draw_search_inputs
from tunelab.ops import similarity as sim

out = {"module": sim.__file__}
for nq, n in json.loads(sys.argv[2]):
    q, c = draw_search_inputs(nq, n, %(d)d, torch.float16, seed=3)
    for _ in range(50):
        sim.similarity_search(q, c, %(k)d)
    best = float("inf")
    for _ in range(%(repeats)d):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(%(calls)d):
            sim.similarity_search(q, c, %(k)d)
        best = min(best, (time.perf_counter() - t0) / %(calls)d * 1e6)
        torch.cuda.synchronize()
    out[f"{nq}x{n}"] = best
print(json.dumps(out))
""" % {"d": D, "k": K, "repeats": REPEATS, "calls": CALLS}


# The same on the CPU: the validation and the cached config resolution, no GPU (a tensor subclass reports is_cuda;
# torch-function dispatch of the subclass is switched off so that its attributes cost what a CUDA tensor's do).
CHILD_NO_GPU = r"""
import json, sys, timeit
import torch
from tunelab.ops import similarity as sim

class CudaLike(torch.Tensor):
    @property
    def is_cuda(self):
        return True

    def get_device(self):
        return 0

sim._dispatch.device_name = lambda index: "a GPU"
sim._arch = lambda dev: "sm_90"
out = {"module": sim.__file__}
for nq, n in json.loads(sys.argv[2]):
    q = torch.randn(nq, %(d)d).half().as_subclass(CudaLike)
    c = torch.randn(n, %(d)d).half().as_subclass(CudaLike)
    steps = {"validate": lambda: sim.validate_search_inputs(q, c, %(k)d, "ip"),
             "resolve": lambda: sim.resolve_config(0, nq=nq, n=n, d=%(d)d, k=%(k)d, dtype="float16", metric="ip")}
    steps["resolve"]()
    with torch._C.DisableTorchFunctionSubclass():
        for step, fn in steps.items():
            out[f"{step} {nq}x{n}"] = min(timeit.repeat(fn, number=20000, repeat=7)) / 20000 * 1e6
print(json.dumps(out))
""" % {"d": D, "k": K}


def overlay(before: Path) -> Path:
    """A copy of the installed tunelab package with ``before``'s files in place, in a new temporary directory
    (to put first on PYTHONPATH)."""
    import tunelab

    root = Path(tempfile.mkdtemp(prefix="tunelab_before_"))
    shutil.copytree(Path(tunelab.__file__).parent, root / "tunelab")
    files = [f for f in before.rglob("*") if f.is_file()]
    if not files:
        raise SystemExit(f"--before {before}: no files to put in place (lay them out as the package: ops/x.py)")
    for f in files:
        dest = root / "tunelab" / f.relative_to(before)
        if not dest.exists():
            raise SystemExit(f"--before: {f} replaces nothing: tunelab/{f.relative_to(before)} is not in the package; "
                             f"lay DIR out as the package itself (DIR/ops/similarity.py for tunelab/ops/similarity.py)")
        shutil.copy2(f, dest)
    return root


def measure(pythonpath: Path | None, child: str, shapes=SHAPES) -> dict:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{env.get('PYTHONPATH', '')}"
    here = str(Path(__file__).resolve().parent)
    run = subprocess.run([sys.executable, "-c", child, here, json.dumps(shapes)], capture_output=True, text=True,
                         env=env, timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"the timing process failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True,
                    help="directory of the package files to time against the installed ones (laid out as tunelab/)")
    ap.add_argument("--rounds", type=int_in(1, 50, "rounds of both versions"), default=5,
                    help="rounds of both versions (5)")
    ap.add_argument("--no-gpu", action="store_true",
                    help="time the validation and the cached config resolution on the CPU instead (no GPU needed)")
    ap.add_argument("--shapes", type=nq_n_list, default=SHAPES, metavar="NQxN,...",
                    help="call shapes (default 1x1024,100x50000)")
    ap.add_argument("--tag", help="suffix of the result file's name")
    args = ap.parse_args()
    if not args.before.is_dir():
        ap.error(f"--before {args.before} is not a directory")
    old = overlay(args.before)
    rounds = {"before": [], "after": []}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for arm in order:
            got = measure(old if arm == "before" else None, CHILD_NO_GPU if args.no_gpu else CHILD, args.shapes)
            rounds[arm].append(got)
            print(f"round {r + 1}/{args.rounds} {arm:>6}: " + ", ".join(
                f"{s} {got[s]:.1f} us" for s in got if s != "module"), flush=True)
    shutil.rmtree(old, ignore_errors=True)
    shapes = [s for s in rounds["after"][0] if s != "module"]
    median = {arm: {s: statistics.median(x[s] for x in rounds[arm]) for s in shapes} for arm in rounds}
    ratio = {s: median["before"][s] / median["after"][s] for s in shapes}
    path = write_result("similarity_op_host_ab", {
        "d": D, "k": K, "dtype": "fp16", "calls": CALLS, "repeats": REPEATS, "rounds": args.rounds,
        "what": "validation and cached config resolution on the CPU" if args.no_gpu else "op calls on the GPU",
        "before_files": sorted(str(f.relative_to(args.before)) for f in args.before.rglob("*") if f.is_file()),
        "us_per_call": rounds, "median_us_per_call": median, "before_over_after": ratio}, args.tag)
    print(f"wrote {path}")
    for s in shapes:
        print(f"{s:>18}: before {median['before'][s]:6.2f} us, after {median['after'][s]:6.2f} us a call, "
              f"{ratio[s]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
