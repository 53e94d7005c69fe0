#!/usr/bin/env python3
"""Build a wheelhouse for installing tunelab on a GPU node that has no internet access.

Run on a machine with internet access (any OS/arch: wheels are chosen for the *target* Python and platform):

    python scripts/build_wheelhouse.py --python-version 3.12 --dest wheelhouse
    python scripts/build_wheelhouse.py --python-version 3.12 --dest wheelhouse --have target-freeze.txt

It resolves tunelab's run-time dependencies and its build requirements (scikit-build-core, pybind11) for the
target with ``pip install --dry-run --report``, leaves out what the target already has (``--exclude`` names
and/or ``--have FILE``: the output of ``pip freeze`` or ``pip list --format=freeze`` on the target, or one
name per line), and downloads the rest with ``pip download --no-deps --only-binary=:all:``. torch is left out
by default: clusters provide their own CUDA build of it.

Then, on the GPU node (the README's air-gapped install):

    python -m pip install --no-index --find-links wheelhouse scikit-build-core pybind11
    python -m pip install --no-index --find-links wheelhouse --no-build-isolation .
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                     "manylinux2014_x86_64", "manylinux1_x86_64"]
BUILD_REQUIREMENTS = ["scikit-build-core>=0.10", "pybind11>=2.12"]


def canonical(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_have(path: Path) -> set[str]:
    """Distribution names listed in a freeze file or a plain list (comments and blank lines ignored)."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        names.add(canonical(re.split(r"[=<>!~ @\[;]", line, maxsplit=1)[0]))
    return names


def target_args(args) -> list[str]:
    out = ["--only-binary=:all:", "--python-version", args.python_version, "--implementation", "cp"]
    for p in args.platform or DEFAULT_PLATFORMS:
        out += ["--platform", p]
    return out


def resolve(requirements: list[str], args) -> list[tuple[str, str]]:
    """(name, version) of every distribution pip would install for ``requirements`` on the target."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), "--target", str(Path(tmp) / "t"), *target_args(args), *requirements]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"pip could not resolve {requirements} for Python {args.python_version}:\n{proc.stderr}")
        data = json.loads(report.read_text())
    return [(item["metadata"]["name"], item["metadata"]["version"]) for item in data["install"]]


def runtime_requirements(exclude: set[str]) -> list[str]:
    """tunelab's own dependencies from pyproject.toml (plus the test extra with --with-test)."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib  # type: ignore
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    return [r for r in reqs if canonical(re.split(r"[=<>!~ \[;]", r, maxsplit=1)[0]) not in exclude]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                    help="target Python version, e.g. 3.12 (default: this interpreter's)")
    ap.add_argument("--platform", action="append", help="target platform tag (repeatable); default: "
                    "manylinux x86_64 tags from 2_28 down to manylinux1")
    ap.add_argument("--dest", type=Path, default=REPO / "wheelhouse", help="output folder (default: ./wheelhouse)")
    ap.add_argument("--exclude", default="torch", help="comma-separated distributions to leave out "
                    "(default: torch; the target's own CUDA build of torch is used)")
    ap.add_argument("--have", type=Path, help="file listing what the target already has (pip freeze output)")
    ap.add_argument("--with-test", action="store_true", help="also include the test extra (pytest, nbclient, ...)")
    args = ap.parse_args()

    exclude = {canonical(n) for n in args.exclude.split(",") if n.strip()}
    have = read_have(args.have) if args.have else set()
    skip = exclude | have
    reqs = runtime_requirements(exclude) + BUILD_REQUIREMENTS
    if args.with_test:
        reqs += ["pytest>=7", "nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6", "pandas>=2"]
    resolved = resolve(reqs, args)
    wanted = [(n, v) for n, v in resolved if canonical(n) not in skip]
    left_out = sorted({n for n, _ in resolved if canonical(n) in skip})
    args.dest.mkdir(parents=True, exist_ok=True)
    print(f"target: CPython {args.python_version}; {len(wanted)} wheels to fetch, {len(left_out)} already on the "
          f"target or excluded")
    if wanted:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(args.dest),
               *target_args(args), *[f"{n}=={v}" for n, v in wanted]]
        proc = subprocess.run(cmd)
        if proc.returncode != 0:
            return proc.returncode
    total = sum(p.stat().st_size for p in args.dest.glob("*.whl"))
    for n, v in wanted:
        print(f"  {n}=={v}")
    if left_out:
        print("left out (the target must already have them): " + ", ".join(left_out))
    print(f"{args.dest}: {len(list(args.dest.glob('*.whl')))} wheels, {total / 2**20:.1f} MiB")
    print("on the GPU node:\n"
          f"  python -m pip install --no-index --find-links {args.dest.name} scikit-build-core pybind11\n"
          f"  python -m pip install --no-index --find-links {args.dest.name} --no-build-isolation .")
    return 0


if __name__ == "__main__":
    sys.exit(main())
