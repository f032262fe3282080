"""Runs record the commit and whether the tree was dirty (prs.rl.provenance)."""
import subprocess

import pytest

from prs.rl.provenance import code_state


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


def test_code_state_names_the_commit_and_the_dirty_files(tmp_path):
    if subprocess.run(["git", "--version"], capture_output=True).returncode:
        pytest.skip("no git")
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("runs/\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "c")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    st = code_state(tmp_path)
    assert st["commit"] == head and st["dirty"] is False and st["dirty_files"] == []
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "m.jsonl").write_text("{}\n")  # ignored output does not make the tree dirty
    assert code_state(tmp_path)["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    (tmp_path / "b.py").write_text("new\n")
    st = code_state(tmp_path)
    assert st["dirty"] is True and set(st["dirty_files"]) == {"a.py", "b.py"}
    assert st["jax"] and st["python"]


def test_code_state_outside_a_checkout(tmp_path):
    st = code_state(tmp_path)
    assert st["commit"] is None and st["dirty"] is None
