"""The trap collapse diagnosis (``experiments.studies.trap_collapse``): its per-step quantities and windows
on hand-made records, and its headline numbers on the committed trap runs against a plain recomputation."""
import gzip
import json
import math
import pathlib

import numpy as np
import pytest

from experiments.studies import trap_collapse as tc

REPO = pathlib.Path(__file__).resolve().parents[3]


def _train(step, steered, kept, share, rho1, rho2, fresh, trained, gen, rep):
    return {"kind": "train", "step": step, "groups_steered": steered, "groups_kept": kept,
            "steered_mixed_share": share, "bucket/1/rho": rho1, "bucket/2/rho": rho2, "pass_rate_unsteered": fresh,
            "pass_rate": trained, "tokens_generated": gen, "tokens_replayed": rep, "k_hist": [8 - kept, kept, 0, 0, 0, 0, 0, 0, 0]}


def test_step_series_and_windows_by_hand():
    train = [_train(0, 0, 3, None, 0.5, None, 0.1, 0.1, 600, 0),   # nothing steered: share NaN -> 0
             _train(1, 4, 5, 0.75, 0.6, 0.8, 0.05, 0.3, 500, 500),
             _train(2, 8, 8, 1.0, None, None, None, 0.5, 300, 100)]
    s = tc.step_series(train, tasks_per_step=8)
    assert s["steered"].tolist() == [0.0, 0.5, 1.0]
    assert s["trained_fresh"].tolist() == [3.0, 5 - 4 * 0.75, 0.0]
    assert s["rho"][:2].tolist() == [0.5, pytest.approx(0.7)] and math.isnan(s["rho"][2])
    assert s["tokens_replayed_share"].tolist() == [0.0, 0.5, 0.25]
    w = tc.windows(np.stack([s["trained_fresh"], s["pass_fresh"]]), width=2)   # [2, 2]
    assert w[0].tolist() == [(3.0 + 2.0) / 2, 0.0]
    assert w[1, 0] == pytest.approx(0.075) and math.isnan(w[1, 1])              # the NaN step is skipped


def test_eval_series_other_is_the_rest():
    ev = tc.eval_series([{"step": 0, "eval/true_resolution_rate": 0.1, "eval/hack_rate": 0.5,
                          "eval/root_attempt_rate": 0.45}])
    assert ev["other"][0] == pytest.approx(0.05)


def test_committed_collapse_numbers_match_a_plain_recomputation():
    root = REPO / "results" / "trap" / "runs"
    if not root.is_dir():
        pytest.skip("no committed trap runs")
    res = tc.analyze(tc.load(root), arms=("binary_ps-pa0.1", "binary-pa0.1"), n_boot=200)
    for arm in ("binary_ps-pa0.1", "binary-pa0.1"):
        late, final = [], []
        for s in range(8):
            lines = [json.loads(x) for x in gzip.decompress((root / f"trap_{arm}-s{s}" / "metrics.jsonl.gz").read_bytes())
                     .decode().splitlines() if x.strip()]
            tr = [m for m in lines if m["kind"] == "train"][40:60]
            late.append(np.mean([m["groups_kept"] - m["groups_steered"] * (m.get("steered_mixed_share") or 0.0)
                                 for m in tr]))
            final.append([m for m in lines if m["kind"] == "eval"][-1]["eval/true_resolution_rate"])
        assert res[arm]["per_seed"]["late_trained_fresh"] == pytest.approx(late)
        assert res[arm]["per_seed"]["final_true"] == pytest.approx(final)
    # the diagnosis' claims: PS trains almost no fresh group late and collapses in every seed; binary does not
    ps, base = res["binary_ps-pa0.1"]["per_seed"], res["binary-pa0.1"]["per_seed"]
    assert max(ps["late_trained_fresh"]) < 0.5 < min(base["late_trained_fresh"])
    assert max(ps["final_true"]) < 0.03 < min(base["final_true"])


@pytest.mark.parametrize("sub, page", [("runs", "collapse.md"), ("collapse_check", "collapse_check.md")])
def test_committed_collapse_pages_are_what_the_script_writes(sub, page, tmp_path):
    root = REPO / "results" / "trap" / sub
    if not root.is_dir():
        pytest.skip("no committed trap records")
    out = tmp_path / page
    tc.main([str(root), "--out", str(out)])
    want = (REPO / "results" / "trap" / page).read_text().split("\n", 1)[1]  # past the command line
    assert out.read_text().split("\n", 1)[1] == want


def test_check_runs_capped_prefix_does_not_collapse():
    """The page's check: with ``method.rho_max=0.2`` every paired seed ends above its uncapped twin in true
    resolution and below it in "other" episodes."""
    root = REPO / "results" / "trap" / "collapse_check"
    if not root.is_dir():
        pytest.skip("no committed check records")
    res = tc.analyze(tc.load(root), arms=("cap", "ctrl"), n_boot=200)
    cap, ctrl = res["cap"]["per_seed"], res["ctrl"]["per_seed"]
    assert all(a > b for a, b in zip(cap["final_true"], ctrl["final_true"]))
    assert all(a < b for a, b in zip(cap["final_other"], ctrl["final_other"]))
