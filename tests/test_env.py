"""The environment fingerprint's git commit names tunelab's checkout, never another repository."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tunelab import env

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _repo(path, files):
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git = ["git", "-C", str(path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    return subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def test_commit_of_a_tunelab_checkout_only(tmp_path, monkeypatch):
    monkeypatch.delenv("TUNELAB_GIT_COMMIT", raising=False)
    # an installed copy inside another repository (as site-packages inside a pyenv checkout)
    foreign = tmp_path / "pyenv"
    _repo(foreign, {"README": "not tunelab\n"})
    monkeypatch.setattr(env, "__file__", str(foreign / "lib" / "site-packages" / "tunelab" / "env.py"))
    monkeypatch.chdir(foreign)
    assert env.git_commit() is None

    checkout = tmp_path / "tune lab"  # a space in the path
    head = _repo(checkout, {"python/tunelab/__init__.py": "", "README.md": "tunelab\n"})
    monkeypatch.chdir(checkout)
    assert env.git_commit() == head
    (checkout / "README.md").write_text("changed\n")
    assert env.git_commit() == head + "+dirty"

    monkeypatch.setenv("TUNELAB_GIT_COMMIT", "abc123")
    assert env.git_commit() == "abc123"
