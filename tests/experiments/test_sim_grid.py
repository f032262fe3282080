"""``experiments.sim_grid``: a fixed learning rate (``--lr``) instead of the scan is recorded and
cannot be mixed with another grid's records; bad values are refused in one line."""
import json

import pytest

from experiments import sim_grid


def test_fixed_lr_is_recorded_and_a_different_one_is_refused(tmp_path):
    assert sim_grid.scan(tmp_path, fixed_lr=8.0) == 8.0
    rec = json.loads((tmp_path / "scan.json").read_text())
    assert rec["lr"] == 8.0 and rec["rows"] == [] and "fixed" in rec["rule"]
    assert sim_grid.scan(tmp_path, fixed_lr=8.0) == 8.0       # resumes
    assert sim_grid.scan(tmp_path) == 8.0                      # no --lr: the recorded one
    with pytest.raises(ValueError, match="--lr 4: .* made at lr 8"):
        sim_grid.scan(tmp_path, fixed_lr=4.0)


def test_non_positive_lr_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--lr must be > 0"):
        sim_grid.scan(tmp_path, fixed_lr=0.0)
    assert not (tmp_path / "scan.json").exists()


def test_summary_states_the_fixed_lr_without_a_scan_table():
    res = {"scan": {"lr": 8.0, "rule": "fixed by --lr, no scan", "seeds": 0, "rows": []}, "regimes": {}}
    assert sim_grid.summary_markdown(res).splitlines()[2] == "Learning rate 8 (fixed by --lr, no scan): "
