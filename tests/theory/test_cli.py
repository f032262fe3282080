"""``python -m theory``: text, --json and --out (PNG + json), and the Fig. 2 data."""
import json
import pathlib
import runpy
import sys

import numpy as np
import pytest

import theory
from theory import cli


def test_json_and_out(tmp_path, capsys):
    out = tmp_path / "theory"
    assert cli.main(["--n", "8", "--json", "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["bucket_table"]["n"] == 8 and len(doc["bucket_table"]["rows"]) == 9
    assert doc["optimum"]["max_abs_error"] <= 1e-9
    assert doc["partial_pass"]["break_even_p_honest"] == pytest.approx(0.4)
    assert json.loads((out / "theory.json").read_text())["bucket_table"] == doc["bucket_table"]
    png = (out / "fig2_pass_rate_metrics.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_module_entry_point_text_writes_outputs_theory_by_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["theory", "--n", "5"])
    with pytest.raises(SystemExit) as e:
        runpy.run_module("theory", run_name="__main__")
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "bucket table, n = 5" in text and "odd" in text
    assert "all maximised at p = 1/2" in text and "partial-pass trap" in text
    out = pathlib.Path("outputs") / "theory"
    assert f"wrote {out / 'theory.json'}, {out / 'tables.txt'} and {out / 'fig2_pass_rate_metrics.png'}" in text
    assert "bucket table, n = 5" in (tmp_path / out / "tables.txt").read_text()
    assert json.loads((tmp_path / out / "theory.json").read_text())["bucket_table"]["n"] == 5
    assert (tmp_path / out / "fig2_pass_rate_metrics.png").read_bytes()[:4] == b"\x89PNG"


def test_no_out_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--n", "4", "--no-out"]) == 0
    assert "wrote" not in capsys.readouterr().out and not list(tmp_path.iterdir())


def test_bad_n_exits(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--n", "0"])
    assert "--n must be >= 1" in capsys.readouterr().err


def test_figure_data_normalised_and_buckets_match_table():
    data = theory.figure_data(8, num_points=101)
    table = theory.bucket_table(8)
    for name, curve in data["curves"].items():
        assert curve[50] == pytest.approx(1.0) and np.max(curve) == pytest.approx(1.0)
    b = list(data["buckets"].values())
    np.testing.assert_allclose(b[0], table.ratio("entropy_bits"))
    np.testing.assert_allclose(b[1], table.ratio("variance"))
    np.testing.assert_allclose(b[2], table.ratio("pairs"))
    np.testing.assert_allclose(b[3], table.ratio("survival"))
    fig = theory.plot_fig2(8)
    ax = fig.axes[0]
    assert ax.get_xlabel().startswith("pass rate p") and ax.get_ylabel()
    assert len(ax.get_legend().get_texts()) == 4


def test_figure_data_degenerate_n1_is_finite():
    data = theory.figure_data(1, num_points=11)
    for v in (*data["curves"].values(), *data["buckets"].values()):
        assert np.all(np.isfinite(v))


def test_controls_subcommand_table_json_and_errors(capsys):
    from theory import controls as tc

    assert cli.main(["controls", "--beta", "2,2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    want = tc.compare_controls(tc.beta_pool(2.0, 2.0), n=8, groups=32)
    assert [c["control"] for c in doc["controls"]] == list(tc.CONTROLS)
    for got, w in zip(doc["controls"], want):
        assert got["informative_per_1000_rollouts"] == pytest.approx(w.per_1000_rollouts())
    assert cli.main(["controls", "--hist", "0.3,0.1,0.05,0.05,0.05,0.05,0.05,0.1,0.25"]) == 0
    text = capsys.readouterr().out
    assert "beta-binomial moments" in text and "x uniform" in text and "dynamic_sampling" in text
    for bad in (["controls", "--beta", "2"], ["controls", "--hist", "1,0,0", "--n", "8"], ["controls", "--beta", "0,1"]):
        with pytest.raises(SystemExit):
            cli.main(bad)
        assert "error" in capsys.readouterr().err
