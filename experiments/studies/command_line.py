"""One rule for every ``python -m experiments...`` command line: a user's mistake is one
``error:`` line and exit status 2, a misspelt name gets a "did you mean", bugs keep their traceback.

    ArgumentParser          argparse with one ``error: <prog>: <what>; did you mean ...? (--help ...)``
                            line and exit status 2 for a bad argument
    command(prog)           decorator of a ``main(argv)``: a ``ValueError`` (``experiments.cli.UsageError``
                            included) / ``FileNotFoundError`` / schema or Hydra composition error prints
                            one ``error:`` line and exits 2
    did_you_mean(key, keys) the suggestion: close dotted keys, and the keys whose last part is the
                            one given (``lr`` -> ``optim.lr``)
    one_line(e)             an exception as one line (omegaconf's schema errors name their key)

It lives here, in the studies' room (``tests/test_layout.py``: ``experiments.studies`` rank 6.5,
``experiments`` rank 7), so that the studies' own entry points (``experiments.studies.mechanism``,
``pages``, ...) use it as well as ``experiments.cli``, which re-exports it. No Hydra at import time.
``HYDRA_FULL_ERROR=1`` re-raises everything.
"""
from __future__ import annotations

import argparse
import difflib
import functools
import os
import sys


def did_you_mean(key: str, keys) -> str:
    """``"did you mean 'a'? "`` (or ``'a' or 'b'``) for ``key`` among ``keys`` ("" if nothing is near): the
    keys whose last dotted part is ``key``'s (``lr`` -> ``optim.lr``), else the closest dotted keys, else
    the keys whose last part is close to ``key``'s."""
    keys = sorted(set(keys))
    leaf = key.rsplit(".", 1)[-1]
    near = [k for k in keys if k != key and k.rsplit(".", 1)[-1] == leaf]
    near = near or difflib.get_close_matches(key, keys, n=1)
    if not near:
        leaves = difflib.get_close_matches(leaf, sorted({k.rsplit(".", 1)[-1] for k in keys}), n=1)
        near = [k for k in keys if leaves and k.rsplit(".", 1)[-1] == leaves[0]]
    near = near[:3]
    return f"did you mean {' or '.join(repr(k) for k in near)}? " if near else ""


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose mistakes are one line, ``error: <prog>: <what>`` with a "did you
    mean" for a misspelt option and a pointer to ``--help``, and exit status 2 (argparse's own)."""

    def error(self, message: str):
        hint = ""
        if message.startswith("unrecognized arguments:"):
            opts = [o for a in self._actions for o in a.option_strings]
            for word in message.split(":", 1)[1].split():
                near = difflib.get_close_matches(word.split("=")[0], opts, n=1)
                if near:
                    hint = f"; did you mean {near[0]!r}?"
                    break
        self.exit(2, f"error: {self.prog}: {message}{hint} (`{self.prog} --help` lists the arguments)\n")


def usage_errors() -> tuple[type, ...]:
    """The exception types ``command`` reports as a user's mistake (Hydra's and omegaconf's imported here,
    when an entry point fails, not at import)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return ValueError, FileNotFoundError, NotADirectoryError, OmegaConfBaseException, HydraException


def one_line(e: BaseException) -> str:
    """An exception as one line: omegaconf's schema errors name their key."""
    text = " ".join(str(e).split("\n")[0].split())
    key = getattr(e, "full_key", None)
    if key and key not in text:
        text = f"{key}: {text}"
    return text or type(e).__name__


def command(prog: str):
    """Decorator of an entry point's ``main(argv=None)``: a user's mistake (``usage_errors``: a
    ``ValueError``, missing file, schema or Hydra composition error) prints one ``error: <what>`` line
    and exits 2, as ``experiments.train`` does; bugs keep their traceback (``HYDRA_FULL_ERROR=1``:
    every traceback)."""

    def wrap(main):
        @functools.wraps(main)
        def run(*args, **kw):
            try:
                return main(*args, **kw)
            except usage_errors() as e:
                if os.environ.get("HYDRA_FULL_ERROR") == "1":
                    raise
                msg = one_line(e)
                hint = "" if f"python -m {prog}" in msg else f" (`python -m {prog} --help`)"
                print(f"error: {msg}{hint}", file=sys.stderr, flush=True)
                raise SystemExit(2) from None
        return run

    return wrap
