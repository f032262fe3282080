"""The notebooks in ``notebooks/`` are committed executed (against the committed ablation,
``results/runs``), so a reader sees the figures without running anything. Here each one is
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
             "trap.ipynb"]  # the partial-pass trap (issue #18): reads results/trap/runs, else tests/data/trap_records
RUN_NOTEBOOKS = NOTEBOOKS[2:5]  # read run directories (PRS_RUN_ROOT), can train a tiny run set
FIGURES = set(NOTEBOOKS)  # every notebook shows at least one figure


def _errors(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]


def test_every_notebook_is_listed():
    assert sorted(p.name for p in nbs.NOTEBOOK_DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


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


def test_notebook_kernel_is_this_interpreter(monkeypatch):
    import sys

    from jupyter_client.kernelspec import KernelSpecManager

    monkeypatch.setenv("JUPYTER_PATH", str(nbs.kernel_dir()))
    assert KernelSpecManager().get_kernel_spec("python3").argv[0] == sys.executable
