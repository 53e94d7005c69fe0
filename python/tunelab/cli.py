"""The ``tunelab`` command line."""
from __future__ import annotations

import argparse
import json
import re
import sys

from tunelab.errors import ConfigError, TunelabError


def parse_size(text: str) -> int:
    """Parse a byte count such as ``65536``, ``64K``, ``64KB``, ``1.5M`` or ``227KiB`` (K = 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(?:i?[bB])?\s*", str(text))
    if not m:
        raise ConfigError(f"size '{text}' is not understood; use bytes (65536) or a K/M/G suffix (64K, 1.5M)")
    scale = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def _cmd_devices(args) -> int:
    import tunelab
    ok, why = tunelab.gpu_available()
    if not ok:
        print(f"no GPU: {why}")
        return 1
    devs = tunelab.devices()
    if args.json:
        print(json.dumps(devs, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table
    table = Table(title="CUDA devices")
    for col in ("#", "name", "arch", "SMs", "smem/block opt-in", "smem/SM", "regs/SM", "L2", "memory free/total",
                "max SM clock"):
        table.add_column(col)
    for d in devs:
        table.add_row(str(d["ordinal"]), d["name"], d["arch"], str(d["sm_count"]),
                      f"{d['smem_per_block_optin'] // 1024} KiB", f"{d['smem_per_sm'] // 1024} KiB",
                      str(d["regs_per_sm"]), f"{d['l2_bytes'] / 2**20:.0f} MiB",
                      f"{d['free_memory'] / 2**30:.1f} / {d['total_memory'] / 2**30:.1f} GiB",
                      f"{d['sm_clock_khz'] / 1000:.0f} MHz")
    Console().print(table)
    return 0


def _cmd_occupancy(args) -> int:
    from tunelab import _core
    smem = parse_size(args.smem)
    occ = _core.occupancy(args.arch, args.threads, args.regs, smem)
    result = {
        "arch": args.arch, "threads": args.threads, "registers": args.regs, "smem_bytes": smem,
        "blocks_per_sm": occ.blocks_per_sm, "active_warps": occ.active_warps, "max_warps": occ.max_warps,
        "occupancy": round(occ.occupancy, 4), "limiter": occ.limiter,
        "limits": {"warps": occ.limit_warps, "registers": occ.limit_registers,
                   "shared_memory": occ.limit_shared_memory, "blocks": occ.limit_blocks},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.arch}: {args.threads} threads, {args.regs} registers/thread, {smem} B shared memory per block")
    print(f"  blocks/SM      {occ.blocks_per_sm}")
    print(f"  active warps   {occ.active_warps} of {occ.max_warps}  (occupancy {occ.occupancy:.1%})")
    print(f"  limited by     {occ.limiter}")
    print(f"  per-resource block limits: warps {occ.limit_warps}, registers {occ.limit_registers}, "
          f"shared memory {occ.limit_shared_memory}, blocks {occ.limit_blocks}")
    return 0


def _cmd_cache(args) -> int:
    from tunelab import cache
    if args.action == "info":
        i = cache.info()
        print(f"kernel cache: {i.path}\n  entries: {i.entries}\n  size:    {i.bytes / 2**20:.2f} MiB")
        print("  (override the location with TUNELAB_CACHE_DIR)")
    else:
        n = cache.clear()
        print(f"removed {n} compiled kernel(s) from the cache")
    return 0


def _cmd_env(args) -> int:
    from tunelab.env import fingerprint
    print(json.dumps(fingerprint(), indent=2, default=str))
    return 0


def parse_shape(text: str) -> list[int]:
    """Parse a shape such as ``16,16,512,64`` or ``100x50000x768x10`` (an argparse type: ArgumentTypeError naming the
    text and an example when it is not positive integers)."""
    try:
        dims = [int(x) for x in str(text).replace("x", ",").split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} is not a comma-separated list of integers; e.g. "
                                         "16,16,512,64 (attention B,H,S,D) or 100,50000,768,10 (similarity nq,n,d,k)"
                                         ) from None
    if not dims or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"shape {text!r} needs positive integers, e.g. 16,16,512,64")
    return dims


def _cmd_profile(args) -> int:
    """``tunelab profile``: profile an op's call (--op), a tuning result's arms (--result) or a command (after --);
    print the table or JSON, write --out."""
    from tunelab.profile import ProfileError, profile, profile_op, write_profile

    common = dict(metrics=[m.strip() for m in (args.metrics or "").split(",") if m.strip()], kernel=args.kernel,
                  launch_skip=args.launch_skip, launch_count=args.launch_count, clock_control=args.clock_control,
                  report=args.report, timeout=args.timeout, echo=not args.json)
    target = args.target[1:] if args.target[:1] == ["--"] else list(args.target)
    op_flags = [flag for flag, v in (("--shape", args.shape), ("--dtype", args.dtype), ("--metric", args.metric),
                                     ("--causal", args.causal), ("--config", args.config)) if v]
    if args.result:
        given = (["--op"] if args.op else []) + op_flags + (["a command"] if target else [])
        if given:
            raise ProfileError(f"--result profiles the tuned problem's arms; {', '.join(given)} cannot be given with "
                               "it (drop them, or profile an op with --op instead of --result)")
        from tunelab.profile import TUNED_ARMS, profile_tuned

        arms = [a.strip() for a in args.arms.split(",") if a.strip()] if args.arms else list(TUNED_ARMS)
        result = profile_tuned(args.result, arms, progress=not args.json, **common)
    elif args.arms:
        raise ProfileError("--arms chooses among a tuning result's arms: give it with --result FILE.json")
    elif args.op:
        if target:
            raise ProfileError(f"give either --op or a command after --, not both (command: {target})")
        if not args.shape:
            raise ProfileError("--op needs --shape: similarity nq,n,d,k (100,50000,768,10), attention B,H,S,D "
                               "(16,16,512,64), gram n,dim (8192,256)")
        for flag, value, op in (("--metric", args.metric, "similarity"), ("--causal", args.causal, "attention")):
            if value and args.op != op:
                raise ProfileError(f"{flag} does not apply to --op {args.op}: it is the {op} op's")
        result = profile_op(args.op, shape=args.shape, dtype=args.dtype or "fp16", causal=args.causal,
                            metric=args.metric or "ip", config=args.config, **common)
    else:
        if op_flags:
            raise ProfileError(f"{', '.join(op_flags)} describe an op's call: give them with --op NAME, or leave them "
                               "out when profiling a command")
        if not target:
            raise ProfileError("nothing to profile: give --op NAME --shape ... or a command after --, e.g. "
                               "`tunelab profile -- python my_script.py`")
        result = profile(target, **common)
    doc = write_profile(args.out, result) if args.out else result.to_json()
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        sys.stdout.write(result.table())
        if args.out:
            print(f"written: {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tunelab`` command (sub-commands registered by each module)."""
    parser = argparse.ArgumentParser(
        prog="tunelab",
        description="Tune CUDA kernels honestly: gated candidates, sound timing, bootstrap confidence intervals.")
    from tunelab import __version__
    parser.add_argument("--version", action="version", version=f"tunelab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("devices", help="list CUDA devices and their properties")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_devices)

    p = sub.add_parser("occupancy", help="static occupancy of a block on an arch (no GPU needed)")
    p.add_argument("--arch", default="sm_90", help="target arch, e.g. sm_80, sm_90 (default sm_90)")
    p.add_argument("--threads", type=int, required=True, help="threads per block")
    p.add_argument("--regs", type=int, required=True, help="registers per thread")
    p.add_argument("--smem", default="0", help="shared memory per block (static + dynamic), e.g. 64K")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_occupancy)

    p = sub.add_parser("cache", help="inspect or clear the compiled-kernel cache")
    p.add_argument("action", choices=["info", "clear"])
    p.set_defaults(func=_cmd_cache)

    p = sub.add_parser("env", help="print the environment fingerprint recorded with measurements")
    p.set_defaults(func=_cmd_env)

    from tunelab import profile_target

    p = sub.add_parser(
        "profile", help="read a kernel's hardware counters with Nsight Compute (ncu) and say what bounds it",
        description="Run one call of a tunelab op (--op), of a tuning result's winner, default config and baseline "
                    "(--result), or any program (after --) under ncu; print one row per "
                    "kernel (time under ncu, SM / DRAM / L2 % of peak, occupancy, what bounds it, top stalls). "
                    "Examples: tunelab profile --op similarity --shape 100,50000,768,10; "
                    "tunelab profile --result tune.json; "
                    "tunelab profile --kernel nvjet -- python my_script.py")
    p.add_argument("--op", choices=list(profile_target.OPS), help="profile one call of this op")
    p.add_argument("--result", metavar="FILE.json",
                   help="a results JSON of `tunelab tune`: profile its winner, default config and strongest baseline "
                        "on the tuned problem, as the tuner timed them")
    p.add_argument("--arms", metavar="A,B",
                   help="with --result: which arms (best, default, baseline, baseline:NAME; default "
                        "best,default,baseline)")
    p.add_argument("--shape", type=parse_shape, help="the op's shape: similarity nq,n,d,k; attention B,H,S,D; gram n,dim")
    p.add_argument("--dtype", help="the op's element type (default fp16)")
    p.add_argument("--causal", action="store_true", help="attention: causal mask")
    p.add_argument("--metric", choices=list(profile_target.METRICS), help="similarity: the metric (default ip)")
    p.add_argument("--config", help="the op's config as NAME=VALUE,... instead of its default or tuned one")
    p.add_argument("--kernel", metavar="REGEX",
                   help="profile only kernels whose function name (no namespaces, template arguments) matches")
    p.add_argument("--metrics", metavar="A,B", help="more ncu metrics to collect (names as `ncu --query-metrics`)")
    p.add_argument("--launch-skip", type=int, default=0, metavar="N", help="skip the first N matching launches")
    p.add_argument("--launch-count", type=int, metavar="N", help="profile at most N launches")
    p.add_argument("--clock-control", default="none", choices=["none", "base"],
                   help="none (default): clocks as the program runs them; base: ncu's lock to base clock")
    p.add_argument("--report", metavar="PATH", help="keep ncu's .ncu-rep report here (for the Nsight Compute GUI); with "
                                                    "--result a prefix: PATH_best.ncu-rep, PATH_default.ncu-rep, ...")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="stop the run after this long")
    p.add_argument("--out", metavar="FILE.json", help="write every counter and the environment fingerprint here")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("target", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...: a program to profile")
    p.set_defaults(func=_cmd_profile)

    try:
        from tunelab.tuning.cli import register
    except ImportError:
        register = None
    if register is not None:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tunelab`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except TunelabError as exc:
        print(f"tunelab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tunelab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
