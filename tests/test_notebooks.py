"""Executes the notebooks in ``notebooks/`` headless (nbclient) and fails on any cell error.

Add a notebook by appending its file name to ``NOTEBOOKS`` (each should run in well under 60 s).
The kernel is the interpreter running pytest: a ``python3`` kernelspec pointing at
``sys.executable`` is written to a temporary ``JUPYTER_PATH`` directory, which jupyter_client
searches before user/system kernelspecs, so a stale global ``python3`` kernel (another Python,
another venv) cannot be picked up, and nothing needs ``ipykernel install`` in a fresh CI venv.
"""
import json
import pathlib
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = [
    "fig2_pass_rate_metrics.ipynb",
    "simulator.ipynb",
    "fig1_learning_curves.ipynb", "fig4_ablation.ipynb", "controller.ipynb",  # prs.analysis (issue #7)
]
# Optional per-notebook output checks: MIME types that must appear among the outputs.
EXPECTED_OUTPUTS = {
    "fig2_pass_rate_metrics.ipynb": {"image/png", "text/plain"},
}
TIMEOUT_S = 300  # per cell; a cold CI machine compiles the tiny training runs inside the cells


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test venv)", "language": "python",
    }))
    return root


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, kernel_env, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_env))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # let ipykernel use its inline backend
    path = NOTEBOOK_DIR / name
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    client.execute()
    from jupyter_client.kernelspec import KernelSpecManager

    assert KernelSpecManager().get_kernel_spec("python3").argv[0] == sys.executable
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    mimes = {m for o in outputs for m in o.get("data", {})} | {"text/plain" for o in outputs if "text" in o}
    missing = EXPECTED_OUTPUTS.get(name, set()) - mimes
    assert not missing, f"{name}: no output of type {sorted(missing)}"
