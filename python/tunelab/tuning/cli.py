"""``tunelab tune | show | export | import | store``: the tuner's command-line interface.

``register(subparsers)`` is called by :mod:`tunelab.cli`, which owns the top-level parser.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tunelab.cli import parse_shape
from tunelab.errors import ConfigError

from tunelab.tuning.family import DTYPES

#: Shape tuned by ``tunelab tune FAMILY`` without --shape: the seed workload of ANCHORS.md.
DEFAULT_SHAPES = {"attention": (16, 16, 512, 64)}


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be >= 1")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{v} must be > 0")
    return v


def register(subparsers) -> None:
    """Add the tuner's sub-commands to an argparse sub-parsers object."""
    from tunelab.tuning.samplers import SAMPLERS

    p = subparsers.add_parser(
        "tune", help="tune a kernel family for a shape on this GPU, confirm against baselines, store the result",
        description="Search the family's config space with Optuna (Latin-hypercube seeds, then the sampler), gate "
                    "every candidate, measure in a worker process, confirm the best against every baseline with "
                    "bootstrap CIs and store the winner. Re-running the same command resumes the study.")
    p.add_argument("family", help="kernel family, e.g. attention")
    p.add_argument("--shape", type=parse_shape,
                   help="problem shape; attention: B,H,S,D (default 16,16,512,64, the seed workload)")
    p.add_argument("--dtype", default="fp16", help=f"element type, one of {', '.join(DTYPES)} (default fp16)")
    p.add_argument("--causal", action="store_true", help="causal masking (attention)")
    # -- similarity family (issue 5): --nq --n --d --k --metric build its problem (families/similarity.py) ---
    from tunelab.tuning.families.similarity import add_cli_arguments as _similarity_cli_arguments

    _similarity_cli_arguments(p)
    # ------------------------------------------------------------------------------------------------------
    p.add_argument("--trials", type=_positive_int, default=120,
                   help="evaluations (distinct configs compiled and gated/measured; default 120)")
    p.add_argument("--seed-trials", type=int, default=20, help="Latin-hypercube seed configs (default 20)")
    p.add_argument("--no-seed-default", action="store_true",
                   help="do not measure the family's default config first (by default it is the first seed)")
    p.add_argument("--sampler", default="auto", choices=list(SAMPLERS),
                   help="search strategy (default auto: gp, a Gaussian-process model choosing among all valid "
                        "configs, when they can be enumerated, else tpe)")
    p.add_argument("--seed", type=int, default=0, help="random seed of seeding and sampler (default 0)")
    p.add_argument("--target-speedup", type=_positive_float, default=1.10,
                   help="a win needs the speedup CI's lower bound >= this (default 1.10)")
    p.add_argument("--top-k", type=_positive_int, default=3, help="candidates confirmed (default 3)")
    p.add_argument("--confirm-rounds", type=_positive_int, default=100,
                   help="interleaved confirmation rounds (default 100)")
    p.add_argument("--no-confirm", action="store_true", help="search only; no confirmation, verdict or store")
    p.add_argument("--storage", help="Optuna storage URL (default: SQLite under the cache dir); 'memory' for none")
    p.add_argument("--study-name", help="override the derived study name")
    p.add_argument("--replay", metavar="FILE", help="evaluate from a recorded replay file instead of the GPU")
    p.add_argument("--timeout", type=_positive_float, metavar="SECONDS", help="wall-clock budget of the search")
    p.add_argument("--patience", type=_positive_int, metavar="M",
                   help="stop when the best has not improved for M evaluations")
    p.add_argument("--seed-from", metavar="SOURCE",
                   help="extra seeds: a results/replay JSON (its top configs), study:NAME, or 'occupancy'")
    p.add_argument("--local-every", type=int, default=None, metavar="N",
                   help="after the seeds, one proposal in N is a one-change neighbour of the best configs "
                        "(local search; default 3 with --sampler tpe, 0 = off, the default for other samplers)")
    p.add_argument("--local-width", type=_positive_int, default=5, metavar="W",
                   help="local search refines the neighbours of the W best configs (default 5)")
    p.add_argument("--compile-workers", type=_positive_int, help="compile threads (default: cores, at most 8)")
    p.add_argument("--measure-timeout", type=_positive_float, default=60.0,
                   help="seconds before a hanging measurement is killed (default 60)")
    p.add_argument("--results", metavar="FILE", help="write the results JSON here (default: under the cache dir)")
    p.add_argument("--no-store", action="store_true", help="do not write the winner to the tuned-config store")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--profile", action="store_true",
                   help="then profile the winner, the default config and the strongest baseline with Nsight "
                        "Compute (ncu), print why the winner is faster and write every counter to RESULTS.profile.json "
                        "beside the results JSON (tunelab profile --result does it later)")
    p.add_argument("--profile-timeout", type=_positive_float, default=900.0, metavar="SECONDS",
                   help="with --profile: stop an arm's profile after this long (default 900)")
    p.set_defaults(func=cmd_tune)

    p = subparsers.add_parser("show", help="print a results JSON written by `tunelab tune`")
    p.add_argument("result", help="results JSON file")
    p.add_argument("--plot", metavar="PNG", help="also save the history and confirmation plots to this image")
    p.add_argument("--json", action="store_true", help="print the headline numbers as JSON")
    p.set_defaults(func=cmd_show)

    p = subparsers.add_parser("export", help="write the tuned-config store to a portable JSON file")
    p.add_argument("file")
    p.add_argument("--device", help="only this device name (default: all)")
    p.set_defaults(func=cmd_export)

    p = subparsers.add_parser("import", help="merge a file written by `tunelab export` into the local store")
    p.add_argument("file")
    p.add_argument("--overwrite", action="store_true", help="replace local entries even when they are newer")
    p.set_defaults(func=cmd_import)

    p = subparsers.add_parser("store", help="list the tuned-config store")
    p.add_argument("--device", help="only this device name")
    p.set_defaults(func=cmd_store)


def problem_from_args(family_name: str, args) -> object | None:
    """The problem for ``--shape/--dtype/--causal`` (None when no shape was given)."""
    if args.shape is None:
        return None
    from tunelab.tuning.api import make_problem

    return make_problem(family_name, args.shape, args.dtype, causal=bool(args.causal),
                        metric=getattr(args, "metric", None))  # metric: similarity family (issue 5)


def cmd_tune(args) -> int:
    """``tunelab tune``."""
    from rich.console import Console

    from tunelab.tuning.api import tune
    from tunelab.tuning.families.similarity import apply_cli_arguments
    from tunelab.tuning.progress import print_report

    apply_cli_arguments(args)  # similarity (issue 5): --nq/--n/--d/--k -> --shape nq,n,d,k
    if args.replay is None and args.shape is None and args.family in DEFAULT_SHAPES:
        args.shape = list(DEFAULT_SHAPES[args.family])
        print(f"no --shape given: tuning the default {args.family} shape "
              f"{','.join(map(str, args.shape))} (B,H,S,D), {args.dtype}", file=sys.stderr)
    if args.replay is None and args.shape is None:
        raise ConfigError(f"tunelab tune {args.family} needs --shape (attention: B,H,S,D, e.g. --shape 16,16,512,64) "
                          "or --replay FILE")
    if args.seed_trials < 0:
        raise ConfigError(f"--seed-trials {args.seed_trials} must be >= 0")
    if args.profile:
        if args.replay is not None:
            raise ConfigError("--profile reads hardware counters on this GPU; a --replay run measures nothing here "
                              "(profile a config with tunelab.profile.profile_config on a GPU instead)")
        from tunelab.profile import find_ncu

        find_ncu()  # before the study: a missing ncu says so now, not after an hour of tuning
    problem = problem_from_args(args.family, args) if args.shape is not None else None
    result = tune(args.family, problem, trials=args.trials, seed_trials=args.seed_trials, sampler=args.sampler,
                  seed=args.seed, timeout=args.timeout, patience=args.patience,
                  target_speedup=args.target_speedup, top_k=args.top_k, confirm_rounds=args.confirm_rounds,
                  confirm=not args.no_confirm, storage=args.storage, study_name=args.study_name,
                  replay=args.replay, seed_from=args.seed_from, compile_workers=args.compile_workers,
                  local_every=args.local_every, local_width=args.local_width, seed_default=not args.no_seed_default,
                  measure_timeout=args.measure_timeout, progress=not args.quiet,
                  save_to_store=False if args.no_store else None, results_path=args.results)
    console = Console()
    print_report(result.data, console)
    if result.data["stop_reason"].startswith("interrupted"):
        console.print("[yellow]interrupted: every finished trial is saved; run the same command again to resume "
                      "the study[/yellow]")
        return 130
    if args.profile:
        return _profile_after_tuning(result, args, console)
    return 0


def profile_path_for(results_path: str | os.PathLike) -> Path:
    """Where ``tunelab tune --profile`` writes the profile of a results JSON: ``X.json`` -> ``X.profile.json``."""
    path = Path(results_path)
    return path.with_name((path.name[:-5] if path.name.endswith(".json") else path.name) + ".profile.json")


def _profile_after_tuning(result, args, console) -> int:
    """``tunelab tune --profile``: profile the finished study's arms, print the table, write the profile JSON beside
    the results. A failed profile leaves the study's results as they are and says how to profile them again."""
    from tunelab.errors import TunelabError
    from tunelab.profile import ProfileError, profile_tuned, write_profile

    saved = result.data["path"]  # the command line always saves its results
    try:
        tuned = profile_tuned(result, progress=not args.quiet, timeout=args.profile_timeout)
    except TunelabError as exc:
        raise ProfileError(f"{exc}\nthe profile failed; the study's results are saved in {saved}: profile them again "
                           f"with `tunelab profile --result {saved}`") from exc
    sys.stdout.write(tuned.table(width=console.width))
    out = profile_path_for(saved)
    write_profile(out, tuned, results=str(saved))
    console.print(f"profile written: {out}")
    return 0


def cmd_show(args) -> int:
    """``tunelab show RESULT``."""
    from tunelab.tuning.progress import print_report
    from tunelab.tuning.results import TuneResult

    result = TuneResult.load(args.result)
    if args.json:
        ci = result.ci
        print(json.dumps({"verdict": result.verdict, "speedup": result.speedup,
                          "ci": None if ci is None else [ci.low, ci.high], "best_config": result.best_config,
                          "best_latency_us": result.best_latency_us, "text": result.verdict_text}, indent=2))
    else:
        print_report(result.data)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 8))
        result.plot_history(ax=a1)
        result.plot_confirmation(ax=a2)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plots written to {args.plot}")
    return 0


def cmd_export(args) -> int:
    """``tunelab export FILE``."""
    from tunelab.tuning.store import export_store

    n = export_store(args.file, args.device)
    print(f"exported {n} tuned config(s) to {args.file}")
    return 0


def cmd_import(args) -> int:
    """``tunelab import FILE``."""
    from tunelab.tuning.store import import_store

    c = import_store(args.file, overwrite=args.overwrite)
    print(f"imported from {args.file}: {c['added']} added, {c['replaced']} replaced, {c['kept']} kept (local newer)")
    return 0


def cmd_store(args) -> int:
    """``tunelab store``: list entries."""
    from rich.console import Console
    from rich.table import Table

    from tunelab.tuning.store import entries, store_dir

    rows = entries(args.device)
    t = Table(title=f"tuned configs in {store_dir()}")
    for col in ("family", "device", "bucket", "config", "latency us", "verdict", "source"):
        t.add_column(col)
    for e in rows:
        t.add_row(e["family"], e["device"], ", ".join(f"{k}={v}" for k, v in e["bucket"].items()),
                  ", ".join(f"{k}={v}" for k, v in e["config"].items()), f"{e.get('latency_us', 0):.2f}",
                  str(e.get("verdict")), (e.get("source_hash") or "")[:12])
    Console().print(t)
    return 0
