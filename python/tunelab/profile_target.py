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
    _check_warmup(warmup)
    cmd = [sys.executable, "-m", "tunelab.profile_target", op, "--shape", ",".join(map(str, shape)), "--dtype",
           str(dtype), "--metric", metric, "--warmup", str(int(warmup)), "--device", str(int(device))]
    if causal:
        cmd.append("--causal")
    if config:
        cmd += ["--config", config]
    return cmd


def _check_warmup(warmup: int) -> None:
    if int(warmup) < 0:
        raise InputError(f"warmup={warmup} must be >= 0 (unprofiled calls before the profiled one)")


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
def family_ref(family: Any) -> str | list:
    """How the profiled program rebuilds ``family`` (a family object): its name when it is one of tunelab's own
    families, else its ``worker_ref()`` when that is ``"module:attr"`` or ``("module:attr", kwargs)`` (as the tuner's
    worker process rebuilds it); ConfigError saying what to do otherwise."""
    import importlib.util

    from tunelab.errors import ConfigError

    own = f"tunelab.tuning.families.{family.name}"
    if importlib.util.find_spec(own) is not None and type(family).__module__ == own:
        return family.name
    ref = family.worker_ref()
    if isinstance(ref, str) and ":" in ref:
        return ref
    if isinstance(ref, tuple) and len(ref) == 2 and isinstance(ref[0], str) and ":" in ref[0]:
        return [ref[0], dict(ref[1])]
    raise ConfigError(f"family {family.name!r} cannot be rebuilt in the profiled program: its worker_ref() gives "
                      f"{type(ref).__name__}, not 'module:attr'; define worker_ref() to return \"module:attr\" (or "
                      "(\"module:attr\", kwargs)) naming an importable family class or object, as the tuner's worker "
                      "process needs too")


def resolve_family(ref: Any) -> Any:
    """The family object of :func:`family_ref`'s answer (or of a family name, or a family object)."""
    from tunelab.tuning.family import get_family
    from tunelab.tuning.family_backend import resolve_worker_ref

    if isinstance(ref, list):
        return resolve_worker_ref((ref[0], ref[1]))
    if isinstance(ref, str) and ":" in ref:
        return resolve_worker_ref(ref)
    return get_family(ref)


def check_family(family: Any, problem: Mapping[str, Any], config: Mapping[str, Any] | None = None,
                 baseline: str | None = None) -> tuple[Any, Any, dict | None]:
    """``(family object, problem, canonical config or None)`` for one call of ``family``'s ``config`` or its
    ``baseline`` (exactly one of them). ``family``: a name, a family object or a :func:`family_ref` answer.
    ConfigError naming the bad value, the accepted ones and the fix: an unknown family or baseline, a config outside
    the space or breaking its constraints or the family's static gates. Needs no GPU: the parent checks here before
    ncu starts."""
    from tunelab.errors import ConfigError
    from tunelab.tuning.gates import static_rejection

    if (config is None) == (baseline is None):
        raise ConfigError(f"give exactly one of a config and a baseline to profile; got "
                          f"{'both' if config is not None else 'neither'}")
    fam = resolve_family(family)
    prob = fam.problem_from_dict(dict(problem))
    if baseline is not None:
        names = list((fam.baselines(prob) or {}).keys())
        if baseline not in names:
            raise ConfigError(f"{fam.name} has no baseline {baseline!r} for this problem; its baselines are {names}")
        return fam, prob, None
    space = fam.space(prob)
    cfg = space.validate(config)
    rej = static_rejection(fam, space, cfg, prob)
    if rej is not None:
        raise ConfigError(f"{fam.name} config {cfg} cannot run on this problem ({rej.code}: {rej.detail}); profile a "
                          "config the tuner accepted (its results file lists them)")
    return fam, prob, cfg


def family_command(family: Any, problem: Mapping[str, Any], *, config: Mapping[str, Any] | None = None,
                   baseline: str | None = None, warmup: int = 3, device: int = 0, seed: int = 0) -> list[str]:
    """The command line of this module for one call of a family's config or baseline (checked here first)."""
    fam, prob, cfg = check_family(family, problem, config, baseline)
    _check_warmup(warmup)
    ref = family_ref(fam)
    cmd = [sys.executable, "-m", "tunelab.profile_target", "family", ref if isinstance(ref, str) else json.dumps(ref),
           "--problem", json.dumps(fam.problem_dict(prob), sort_keys=True), "--warmup", str(int(warmup)),
           "--device", str(int(device)), "--seed", str(int(seed))]
    return cmd + (["--baseline", baseline] if baseline is not None else ["--config", json.dumps(cfg)])


def make_family_call(family: Any, problem: Mapping[str, Any], *, config: Mapping[str, Any] | None = None,
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


def _json_object(flag: str, example: str) -> Callable[[str], dict]:
    def parse(text: str) -> dict:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({exc.msg}); {flag} takes an object, e.g. "
                                             f"{example}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object; {flag} takes one, e.g. {example}")
        return value
    return parse


def _family_main(argv: list[str]) -> tuple[int, Callable[[], object]]:
    """``python -m tunelab.profile_target family ...``: (warm-up calls, the call)."""
    p = argparse.ArgumentParser(prog="python -m tunelab.profile_target family",
                                description="one call of a tuning family's config or baseline, as the tuner timed it")
    p.add_argument("family", help="the family: a name (similarity), module:attr, or JSON [\"module:attr\", {kwargs}]")
    p.add_argument("--problem", required=True, type=_json_object("--problem", '\'{"nq": 100, "n": 50000, ...}\''),
                   help="the problem as JSON (the family's problem_dict)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--config", type=_json_object("--config", '\'{"BLOCK_N": 128, ...}\''),
                       help="the config as JSON")
    which.add_argument("--baseline", help="a baseline of the family, e.g. torch_topk")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    ref = json.loads(args.family) if args.family.startswith("[") else args.family
    return args.warmup, make_family_call(ref, args.problem, config=args.config, baseline=args.baseline,
                                         device=args.device, seed=args.seed)


def main(argv: list[str] | None = None) -> int:
    """Run ``warmup`` calls, then one call between cudaProfilerStart and cudaProfilerStop."""
    import torch

    from tunelab.cli import parse_shape

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["family"]:
        warmup, call = _family_main(argv[1:])
    else:
        p = argparse.ArgumentParser(prog="python -m tunelab.profile_target", description=__doc__.split("\n\n")[0],
                                    epilog="`python -m tunelab.profile_target family -h`: one call of a tuning "
                                           "family's config or baseline instead of an op")
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
