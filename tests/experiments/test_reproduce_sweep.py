"""experiments.reproduce_sweep: the K-seed comparison against a committed sweep's seeds (synthetic runs)."""
import json
import pathlib

import numpy as np
import pytest

from experiments import reproduce_sweep as rs


def _write_run(d: pathlib.Path, steps, ys) -> pathlib.Path:
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"config": {}}))
    (d / "metrics.jsonl").write_text("".join(json.dumps({"kind": "eval", "step": int(s), "eval/pass_at_1": float(y)}) + "\n"
                                             for s, y in zip(steps, ys)))
    return d


def _sweep(root: pathlib.Path, *, speed: float, seeds=8, shift: float = 0.0, prefix="regime_x"):
    steps = np.arange(0, 41, 5)
    rng = np.random.default_rng(int(speed * 10) + int(shift * 100))
    for arm, sp in (("baseline", 1.0), ("ps_ada", speed)):
        for s in range(seeds):
            y = 0.2 + 0.6 * (1 - np.exp(-sp * steps / (12 + s))) + shift + rng.normal(0, 0.01, steps.size)
            _write_run(root / f"{prefix}-{arm}-s{s}", steps, y)


def test_rerun_of_the_same_distribution_lands_in_the_prediction_interval_and_a_shifted_one_does_not(tmp_path):
    _sweep(tmp_path / "committed", speed=2.0)
    committed = rs.committed_runs(tmp_path / "committed", "regime_x")
    assert sorted(committed) == ["baseline", "ps_ada"] and len(committed["baseline"]) == 8
    same = {arm: {s: committed[arm][s] for s in (0, 1)} for arm in committed}   # the committed seeds themselves
    res = rs.compare(committed, same)
    for arm in ("baseline", "ps_ada"):
        for stat in ("final", "auc"):
            d = res["arms"][arm][stat]
            assert d["pi_k"][0] <= d["ci"][0] <= d["ci"][1] <= d["pi_k"][1]   # K=2 < S=8: a wider interval
            assert d["in_pi_k"], (arm, stat, d)
    sp = res["arms"]["ps_ada"]["speedup_0.8"]
    assert sp["mean"] > 1.5 and sp["in_pi_k"]
    # an independent reference for one statistic: the committed final mean is the plain mean of the last points
    finals = [rs.curve(rs.read_records(committed["ps_ada"][s]))[1][-1] for s in range(8)]
    assert res["arms"]["ps_ada"]["final"]["mean"] == pytest.approx(np.mean(finals))

    _sweep(tmp_path / "shifted", speed=2.0, shift=0.15)                       # every curve 0.15 higher
    shifted = rs.committed_runs(tmp_path / "shifted", "regime_x")
    res2 = rs.compare(committed, {arm: {s: shifted[arm][s] for s in (0, 1)} for arm in shifted})
    assert not res2["arms"]["ps_ada"]["final"]["in_pi_k"] and not res2["arms"]["baseline"]["auc"]["in_pi_k"]
    md = rs.markdown(res2, variant="regime_x", k=2)
    assert "**no**" in md and "| ps_ada | speedup_0.8 |" in md


def test_bad_arguments_name_the_option(tmp_path):
    _sweep(tmp_path, speed=2.0, seeds=3)
    with pytest.raises(ValueError, match="--arms"):
        rs.main(tmp_path, seeds=2, arms="nope")
    with pytest.raises(ValueError, match="--seeds"):
        rs.main(tmp_path, seeds=5)
    with pytest.raises(ValueError, match="--variant"):
        rs.main(tmp_path, seeds=2, variant="other")
