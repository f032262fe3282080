"""The studies' own command lines (``python -m experiments.studies.X``) answer a mistake as every
``experiments.X`` does (issue #45 item 15): one ``error:`` line, a "did you mean", exit status 2. The
helpers live in ``experiments.studies.command_line`` (the studies may not import ``experiments.cli``,
tests/test_layout.py) and ``experiments.cli`` re-exports the same objects."""
from __future__ import annotations

import importlib

import pytest

from experiments import cli
from experiments.studies import command_line
from tests.experiments.test_cli_entry_points import _one_error_line  # one error line, exit 2, no traceback

STUDIES = ["mechanism", "pages", "regime_review", "trap_collapse"]


@pytest.mark.parametrize("name", STUDIES)
def test_a_bad_option_is_one_line(name, capsys):
    mod = importlib.import_module(f"experiments.studies.{name}")
    line = _one_error_line(capsys, mod.main, ["--no-such-option"])
    assert line.startswith(f"error: python -m experiments.studies.{name}: ") and "--help" in line, line


def test_a_misspelt_option_gets_a_suggestion(capsys):
    from experiments.studies import pages

    line = _one_error_line(capsys, pages.main, ["--chek"])
    assert "unrecognized arguments: --chek; did you mean '--check'?" in line, line


def test_a_value_error_in_main_is_one_line(capsys):
    @command_line.command("experiments.studies.x")
    def main(argv=None):
        raise ValueError(f"--n: {argv[0]!r} is not a count\nmore detail")

    line = _one_error_line(capsys, main, ["x"])
    assert line == "error: --n: 'x' is not a count (`python -m experiments.studies.x --help`)", line


def test_cli_re_exports_the_same_helpers():
    for name in ("ArgumentParser", "command", "did_you_mean", "one_line", "usage_errors"):
        assert getattr(cli, name) is getattr(command_line, name)
