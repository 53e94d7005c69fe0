"""The program :func:`tunelab.profile.profile_op` runs under Nsight Compute: one call of a tunelab op on random
inputs, between ``cudaProfilerStart`` and ``cudaProfilerStop``, after ``warmup`` calls outside that range (they
compile the kernels, fill the caches of the op's host path and record its CUDA graph, so the profiled call is the
call a loop of calls makes).

    python -m tunelab.profile_target similarity --shape 100,50000,768,10 --dtype fp16 [--metric ip] [--config S]
    python -m tunelab.profile_target attention --shape 16,16,512,64 [--causal]
    python -m tunelab.profile_target gram --shape 8192,256 --dtype complex64

or one call of a tuning family's config or baseline, as the tuner timed it (the family's own inputs and timing
closure; :func:`tunelab.profile.profile_config` and :func:`~tunelab.profile.profile_tuned`)::

    python -m tunelab.profile_target family similarity --problem '{"nq": 100, "n": 50000, "d": 768, "k": 10}' \
        --config '{"BLOCK_N": 128, ...}'          # or --baseline torch_topk

Inputs are drawn from a fixed seed (standard normal), as the benchmarks draw them.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Mapping, Sequence

from tunelab import dtypes as _dtypes
from tunelab.errors import InputError

#: op -> (its shape's dimensions, the dtypes it takes (torch names), the shape of ANCHORS.md's seed workload)
OPS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]]] = {
    "similarity": (("nq", "n", "d", "k"), ("float16", "bfloat16", "float32"), (100, 50000, 768, 10)),
    "attention": (("B", "H", "S", "D"), ("float16", "bfloat16"), (16, 16, 512, 64)),
    "gram": (("n", "dim"), ("float16", "bfloat16", "float32", "complex64"), (8192, 256)),
}
METRICS = ("ip", "cosine", "l2")


def check(op: str, shape: Sequence[int], dtype: str, metric: str = "ip") -> tuple[tuple[int, ...], str]:
    """``(shape, torch dtype name)`` when ``op`` takes them; InputError naming the value and what is accepted."""
    if op not in OPS:
        raise InputError(f"op {op!r} cannot be profiled; the ops are {list(OPS)}")
    dims, accepted, example = OPS[op]
    shape = tuple(int(s) for s in shape)
    if len(shape) != len(dims) or any(s < 1 for s in shape):
        raise InputError(f"{op} shape {list(shape)} must be {len(dims)} positive integers "
                         f"{','.join(dims)}, e.g. {','.join(map(str, example))}")
    if op == "similarity" and shape[3] > shape[1]:
        raise InputError(f"similarity shape {list(shape)}: k={shape[3]} is larger than n={shape[1]}")
    if metric not in METRICS:
        raise InputError(f"metric {metric!r} is not accepted; use one of {list(METRICS)}")
    return shape, _dtypes.canonical(dtype, accepted, f"the {op} op")


def target_command(op: str, *, shape: Sequence[int], dtype: str = "fp16", causal: bool = False, metric: str = "ip",
                   config: str | None = None, warmup: int = 3, device: int = 0) -> list[str]:
    """The command line of this module for one op call (checked here, before ncu starts)."""
    shape, _ = check(op, shape, dtype, metric)
    if int(warmup) < 0:
        raise InputError(f"warmup={warmup} must be >= 0")
    cmd = [sys.executable, "-m", "tunelab.profile_target", op, "--shape", ",".join(map(str, shape)), "--dtype",
           str(dtype), "--metric", metric, "--warmup", str(int(warmup)), "--device", str(int(device))]
    if causal:
        cmd.append("--causal")
    if config:
        cmd += ["--config", config]
    return cmd


def make_call(op: str, shape: Sequence[int], dtype: str, *, causal: bool = False, metric: str = "ip",
              config: str | None = None, device: int = 0, seed: int = 0) -> Callable[[], object]:
    """A function that calls ``op`` once on random inputs made here (on ``device``)."""
    import torch

    import tunelab.ops
    from tunelab.ops.config import from_string

    shape, name = check(op, shape, dtype, metric)
    cfg = from_string(config) if config else None
    dev = torch.device("cuda", device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    dt = getattr(torch, name)

    def randn(*size):
        return torch.randn(*size, device=dev, dtype=dt, generator=gen)

    if op == "similarity":
        nq, n, d, k = shape
        q, c = randn(nq, d), randn(n, d)
        return lambda: tunelab.ops.similarity_search(q, c, k, metric=metric, config=cfg)
    if op == "attention":
        b, h, s, d = shape
        q, k_, v = randn(b, h, s, d), randn(b, h, s, d), randn(b, h, s, d)
        return lambda: tunelab.ops.attention(q, k_, v, causal=causal, config=cfg)
    n, dim = shape
    x = randn(n, dim)
    return lambda: tunelab.ops.gram(x, config=cfg)


# ------------------------------------------------------------------------------------------ tuning families
def check_family(family: str, problem: Mapping[str, Any], config: Mapping[str, Any] | None = None,
                 baseline: str | None = None) -> tuple[Any, Any, dict | None]:
    """``(family object, problem, canonical config or None)`` for one call of ``family``'s ``config`` or its
    ``baseline`` (exactly one of them); ConfigError naming the family, the bad value and the accepted ones. Needs no
    GPU: the parent checks here before ncu starts."""
    from tunelab.errors import ConfigError
    from tunelab.tuning.family import get_family

    if (config is None) == (baseline is None):
        raise ConfigError(f"give exactly one of a config and a baseline to profile; got "
                          f"{'both' if config is not None else 'neither'}")
    fam = get_family(family)
    prob = fam.problem_from_dict(dict(problem))
    if baseline is not None:
        names = list((fam.baselines(prob) or {}).keys())
        if baseline not in names:
            raise ConfigError(f"{fam.name} has no baseline {baseline!r} for this problem; its baselines are {names}")
        return fam, prob, None
    return fam, prob, fam.space(prob).validate(config)


def family_command(family: str, problem: Mapping[str, Any], *, config: Mapping[str, Any] | None = None,
                   baseline: str | None = None, warmup: int = 3, device: int = 0, seed: int = 0) -> list[str]:
    """The command line of this module for one call of a family's config or baseline (checked here first)."""
    fam, prob, cfg = check_family(family, problem, config, baseline)
    if int(warmup) < 0:
        raise InputError(f"warmup={warmup} must be >= 0")
    cmd = [sys.executable, "-m", "tunelab.profile_target", "family", fam.name, "--problem",
           json.dumps(fam.problem_dict(prob), sort_keys=True), "--warmup", str(int(warmup)), "--device",
           str(int(device)), "--seed", str(int(seed))]
    return cmd + (["--baseline", baseline] if baseline is not None else ["--config", json.dumps(cfg)])


def make_family_call(family: str, problem: Mapping[str, Any], *, config: Mapping[str, Any] | None = None,
                     baseline: str | None = None, device: int = 0, seed: int = 0) -> Callable[[], object]:
    """What the tuner timed for this config (the family's inputs and timing closure) or baseline, as a function
    that launches one call on torch's current stream."""
    import torch

    from tunelab.kernel import current_arch

    fam, prob, cfg = check_family(family, problem, config, baseline)
    torch.cuda.set_device(device)
    inputs = fam.make_inputs(prob, seed)
    if baseline is not None:
        return fam.baselines(prob)[baseline](inputs)
    compiled = fam.compile(cfg, prob, current_arch(device))
    return fam.timing_closure(cfg, compiled, inputs)


def _json_arg(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({exc.msg}); e.g. '{{\"nq\": 100, \"n\": 50000}}'"
                                         ) from None


def _family_main(argv: list[str]) -> tuple[int, Callable[[], object]]:
    """``python -m tunelab.profile_target family ...``: (warm-up calls, the call)."""
    p = argparse.ArgumentParser(prog="python -m tunelab.profile_target family",
                                description="one call of a tuning family's config or baseline")
    p.add_argument("name", help="the family, e.g. similarity")
    p.add_argument("--problem", required=True, type=_json_arg, help="the problem as JSON (the family's problem_dict)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--config", type=_json_arg, help="the config as JSON")
    which.add_argument("--baseline", help="a baseline of the family, e.g. torch_topk")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    return args.warmup, make_family_call(args.name, args.problem, config=args.config, baseline=args.baseline,
                                         device=args.device, seed=args.seed)


def main(argv: list[str] | None = None) -> int:
    """Run ``warmup`` calls, then one call between cudaProfilerStart and cudaProfilerStop."""
    import torch

    from tunelab.cli import parse_shape

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["family"]:
        warmup, call = _family_main(argv[1:])
    else:
        p = argparse.ArgumentParser(prog="python -m tunelab.profile_target", description=__doc__.split("\n\n")[0])
        p.add_argument("op", choices=list(OPS))
        p.add_argument("--shape", required=True, type=parse_shape, help="the op's dimensions (see OPS)")
        p.add_argument("--dtype", default="fp16")
        p.add_argument("--metric", default="ip", choices=list(METRICS))
        p.add_argument("--causal", action="store_true")
        p.add_argument("--config")
        p.add_argument("--warmup", type=int, default=3)
        p.add_argument("--device", type=int, default=0)
        args = p.parse_args(argv)
        torch.cuda.set_device(args.device)
        warmup, call = args.warmup, make_call(args.op, args.shape, args.dtype, causal=args.causal,
                                              metric=args.metric, config=args.config, device=args.device)
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
