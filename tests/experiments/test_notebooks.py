"""The notebooks in ``notebooks/`` are committed executed (against the committed ablation,
``results/ablation/runs``), so a reader sees the figures without running anything. Here each one is
executed headless (nbclient) and must (a) raise no error, (b) reproduce its committed outputs
(``experiments.notebooks.outputs_digest``: text and tables verbatim, figures by presence), and the
notebooks that read runs also (c) execute on a tiny run set trained on the fly (``PRS_RUN_ROOT=tiny``).
``python -m experiments.notebooks`` regenerates the committed outputs.

The kernel is the interpreter running pytest (``experiments.notebooks.kernel_dir``): a ``python3``
kernelspec pointing at ``sys.executable`` in a temporary ``JUPYTER_PATH``, so a stale global
``python3`` kernel cannot be picked up and nothing needs ``ipykernel install`` in a fresh CI venv.
"""
import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from experiments import notebooks as nbs  # noqa: E402

NOTEBOOKS = ["fig2_pass_rate_metrics.ipynb", "simulator.ipynb",
             "fig1_learning_curves.ipynb", "fig4_ablation.ipynb", "controller.ipynb",  # prs.analysis (issue #7)
             "trap.ipynb",  # the partial-pass trap (issue #18): reads results/trap/runs, else tests/data/trap_records
             "mathds.ipynb"]  # the mathds benchmark study (issue #48): reads results/mathds/runs
RUN_NOTEBOOKS = NOTEBOOKS[2:5]  # read run directories (PRS_RUN_ROOT), can train a tiny run set
FIGURES = set(NOTEBOOKS)  # every notebook shows at least one figure


def _errors(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]


def test_every_notebook_is_listed():
    assert sorted(p.name for p in nbs.NOTEBOOK_DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_shows_its_outputs_and_matches_a_fresh_execution(name):
    path = nbs.NOTEBOOK_DIR / name
    committed = nbformat.read(path, as_version=4)
    code = [c for c in committed.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), f"{name} is committed unexecuted"
    assert not _errors(committed)
    digest = nbs.outputs_digest(committed)
    if name in FIGURES:
        assert any(("display", "image") in cell for cell in digest), f"{name}: no figure in the committed outputs"
    fresh = nbs.execute(path)
    assert not _errors(fresh), _errors(fresh)
    assert nbs.outputs_digest(fresh) == digest, (
        f"{name}: committed outputs differ from what the code produces now; run python -m experiments.notebooks {name}")


@pytest.mark.slow
@pytest.mark.parametrize("name", RUN_NOTEBOOKS)
def test_run_notebook_executes_on_tiny_runs(name):
    nb = nbs.execute(nbs.NOTEBOOK_DIR / name, run_root="tiny")
    assert not _errors(nb)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "tiny runs in" in text  # it really trained the tiny set instead of reading saved runs
    assert any(("display", "image") in cell for cell in nbs.outputs_digest(nb)), nbs.outputs_digest(nb)


def test_notebook_kernel_is_this_interpreter(monkeypatch, tmp_path):
    import sys

    from jupyter_client.kernelspec import KernelSpecManager

    monkeypatch.setenv("JUPYTER_PATH", str(nbs.kernel_dir(tmp_path)))
    assert KernelSpecManager().get_kernel_spec("python3").argv[0] == sys.executable


@pytest.mark.parametrize("name", RUN_NOTEBOOKS)
def test_run_notebooks_show_the_committed_runs_unless_asked(name, tmp_path, monkeypatch, capsys):
    """A user's own sweep under runs/sweep used to replace the committed records in every run
    notebook; now the first output line names the runs, the committed ones unless PRS_RUN_ROOT asks."""
    for d in ("runs/sweep/arith-baseline-s0", "results/ablation/runs/arith-baseline-s0"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "summary.json").write_text("{}")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    cell = "".join(nbformat.read(nbs.NOTEBOOK_DIR / name, as_version=4).cells[1].source)

    def first_line(env):
        if env is None:
            monkeypatch.delenv("PRS_RUN_ROOT", raising=False)
        else:
            monkeypatch.setenv("PRS_RUN_ROOT", env)
        ns = {}
        exec(cell, ns)
        return ns["root"], capsys.readouterr().out.splitlines()[0]

    root, line = first_line(None)
    assert root.resolve() == (tmp_path / "results" / "ablation" / "runs").resolve()
    assert line.startswith("runs: ../results/ablation/runs (the committed records; PRS_RUN_ROOT=")
    root, line = first_line("../runs/sweep")
    assert root.resolve() == (tmp_path / "runs" / "sweep").resolve() and line == "runs: ../runs/sweep (yours: PRS_RUN_ROOT)"
    root, line = first_line("tiny")
    assert root is None and line.startswith("runs: tiny runs in ")
    with pytest.raises(ValueError, match=r"PRS_RUN_ROOT='../empty' holds no run directory"):
        first_line("../empty")


def test_execute_removes_its_kernel_directory_and_passes_no_stray_run_root(tmp_path, monkeypatch):
    """``execute`` used to leave a ``prs-jupyter-*`` directory in /tmp per notebook."""
    import nbclient
    import tempfile

    seen = {}

    class FakeClient:
        def __init__(self, nb, **kw):
            self.nb = nb

        def execute(self):
            import os
            import pathlib

            seen["jupyter"] = pathlib.Path(os.environ["JUPYTER_PATH"])
            seen["spec"] = (seen["jupyter"] / "kernels" / "python3" / "kernel.json").exists()
            seen["run_root"] = os.environ.get("PRS_RUN_ROOT")
            return self.nb

    monkeypatch.setattr(nbclient, "NotebookClient", FakeClient)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("PRS_RUN_ROOT", "../runs/sweep")
    nbs.execute(nbs.NOTEBOOK_DIR / "fig1_learning_curves.ipynb")
    assert seen["spec"] and seen["jupyter"].parent == tmp_path and seen["run_root"] is None
    assert not list(tmp_path.glob("prs-jupyter-*"))
    nbs.execute(nbs.NOTEBOOK_DIR / "fig1_learning_curves.ipynb", run_root="tiny")
    assert seen["run_root"] == "tiny" and not list(tmp_path.glob("prs-jupyter-*"))
    import os

    assert os.environ["PRS_RUN_ROOT"] == "../runs/sweep"  # the caller's environment is restored
