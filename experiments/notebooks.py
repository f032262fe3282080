"""Executes the notebooks in ``notebooks/`` against the committed results and saves them with
their outputs, so a reader sees every figure and table without running anything:

    python -m experiments.notebooks                  # all notebooks, in place, from results/ablation/runs
    python -m experiments.notebooks fig4_ablation    # one (name without .ipynb)
    python -m experiments.notebooks --check          # exit 1 if a committed notebook no longer matches

The run notebooks show the committed ablation ``results/ablation/runs`` (``experiments.studies.notebook.notebook_runs``; a
``PRS_RUN_ROOT`` in the environment is not passed on here, so no training happens); ``fig2_pass_rate_metrics`` and ``simulator`` compute their own data; ``trap``
reads ``PRS_TRAP_ROOT``, else the committed trap sweep ``results/trap/runs`` (else the test fixture). ``--check``
re-executes into memory and compares each cell's outputs with the committed ones (``outputs_digest``:
markdown and text verbatim, minus lines with timings or temporary paths; figures by presence, since
PNG bytes vary between matplotlib builds). ``tests/experiments/test_notebooks.py`` runs the same check and also
executes the run notebooks on a tiny run set trained on the fly.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import sys
import tempfile

from experiments import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
TIMEOUT_S = 300  # per cell
# Lines whose content depends on the machine or the moment, not on the code and the committed data.
_VOLATILE = re.compile(r"\d+(\.\d+)? ?s\b|/tmp|tmp[\w]{6,}|prs_tiny_runs|\bat 0x[0-9a-f]+|compiled and run in")


def kernel_dir(root: pathlib.Path) -> pathlib.Path:
    """Makes ``root`` a ``JUPYTER_PATH`` directory whose ``python3`` kernel is this interpreter (no
    global kernelspec of another venv can be picked up; nothing needs ``ipykernel install``)."""
    spec = pathlib.Path(root) / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (prs)", "language": "python"}))
    return pathlib.Path(root)


def execute(path: pathlib.Path, *, run_root: str | None = None, timeout: int = TIMEOUT_S):
    """The notebook at ``path`` executed (a fresh ``nbformat`` node; the file is not written).
    ``run_root``: ``PRS_RUN_ROOT`` for the kernel (``"tiny"``: train a tiny run set); None: the
    notebooks' default, the committed records (a ``PRS_RUN_ROOT`` of this process is not passed on).
    The kernelspec lives in a temporary directory removed afterwards."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="prs-jupyter-") as jupyter:
        env = {"JUPYTER_PATH": str(kernel_dir(jupyter)),
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        saved = {k: os.environ.get(k) for k in (*env, "MPLBACKEND", "PRS_RUN_ROOT")}
        os.environ.update(env)
        os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend shows the figures
        os.environ.pop("PRS_RUN_ROOT", None)
        if run_root is not None:
            os.environ["PRS_RUN_ROOT"] = run_root
        try:
            nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                    resources={"metadata": {"path": str(path.parent)}}).execute()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    for cell in nb.cells:  # keep diffs to what changed: no timings, no kernel session ids
        cell.get("metadata", {}).pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb


def outputs_digest(nb) -> list[list]:
    """Per code cell: its outputs reduced to what the code and the committed data determine (the
    cell's printed text joined, however the kernel chunked it; then each display output)."""

    def keep(t) -> str:
        t = "".join(t) if isinstance(t, list) else t
        return "\n".join(line for line in t.splitlines() if line.strip() and not _VOLATILE.search(line))

    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outs = cell.get("outputs", [])
        items = [("stream", keep("".join("".join(o["text"]) if isinstance(o["text"], list) else o["text"]
                                         for o in outs if o.get("output_type") == "stream")))]
        for o in outs:
            if o.get("output_type") == "error":
                items.append(("error", o.get("ename"), o.get("evalue")))
            elif "data" in o:
                data = o["data"]
                items.append(("display", "image" if "image/png" in data else keep(data.get("text/markdown", ""))))
        out.append(items)
    return out


def regenerate(names: list[str] | None = None) -> list[pathlib.Path]:
    import nbformat

    paths = [NOTEBOOK_DIR / f"{n.removesuffix('.ipynb')}.ipynb" for n in names] if names else \
        sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    for p in paths:
        print(f"executing {p.relative_to(ROOT)} ...", flush=True)
        nbformat.write(execute(p), p)
    return paths


def check(names: list[str] | None = None) -> list[str]:
    """Names of the notebooks whose committed outputs differ from a fresh execution."""
    import nbformat

    paths = [NOTEBOOK_DIR / f"{n.removesuffix('.ipynb')}.ipynb" for n in names] if names else \
        sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    return [p.name for p in paths if outputs_digest(nbformat.read(p, as_version=4)) != outputs_digest(execute(p))]


@cli.command("experiments.notebooks")
def main(argv=None) -> int:
    ap = cli.ArgumentParser(prog="python -m experiments.notebooks", description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="notebooks (default: all in notebooks/)")
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = ap.parse_args(argv)
    if args.check:
        stale = check(args.names)
        for name in stale:
            print(f"{name}: committed outputs differ from a fresh execution; run python -m experiments.notebooks {name}")
        return 1 if stale else 0
    for p in regenerate(args.names):
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
