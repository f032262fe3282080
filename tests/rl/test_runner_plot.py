"""``prs.rl.runner.plot_run`` on a planted metrics list: the two training pass-rate lines are drawn in two styles
(and said equal when no group was re-rolled), and a bucket's re-roll line that stops says why in its legend."""
from __future__ import annotations

from prs.rl.runner import _bucket_stop_note, plot_run


def _records(*, rerolled: bool = True) -> list[dict]:
    """10 train steps, buckets 1, 2, 6, 7 of N = 8: bucket 1 steered at steps 0-3 then empty; bucket 2 never
    steered; bucket 6 steered at every step; bucket 7 steered at steps 0-5, then groups but none steered."""
    recs = []
    for t in range(10):
        m = {"kind": "train", "step": t, "pass_rate": 0.3 + 0.01 * t,
             "pass_rate_train": 0.3 + 0.01 * t + (0.1 if rerolled else 0.0), "k_hist": [0] * 9}
        for kb, steered, count in (("1", t <= 3, 2 if t <= 3 else 0), ("2", False, 1), ("6", True, 3),
                                   ("7", t <= 5, 2)):
            m.update({f"bucket/{kb}/rho": 0.5, f"bucket/{kb}/ema": 0.5, f"bucket/{kb}/count": count,
                      f"bucket/{kb}/reroll_pass_rate": 0.5 if steered else None})
        recs.append(m)
    recs.append({"kind": "eval", "step": 10, "eval/pass_at_1": 0.4})
    return recs


def test_plot_run_tells_the_pass_rate_lines_apart_and_says_why_a_bucket_stops(tmp_path):
    recs = _records()
    fig = plot_run(recs, tmp_path / "curves.png", title="planted")
    assert (tmp_path / "curves.png").stat().st_size > 0
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    first = lines["train pass rate (first rollouts)"]
    after = lines["train pass rate (after re-roll)"]
    assert (first.get_linestyle(), first.get_marker()) != (after.get_linestyle(), after.get_marker())
    labels = [t.get_text() for t in fig.axes[2].get_legend().get_texts()]
    assert "EMA re-roll pass rate, 1/8 (stops: no groups in bucket after step 3)" in labels
    assert "EMA re-roll pass rate, 2/8 (no group steered at any step)" in labels
    assert "EMA re-roll pass rate, 6/8" in labels
    assert "EMA re-roll pass rate, 7/8 (stops: no group steered from bucket after step 5)" in labels
    train = [m for m in recs if m["kind"] == "train"]
    holes = [dict(m, **{"bucket/6/reroll_pass_rate": None}) if m["step"] == 4 else m for m in train]
    assert _bucket_stop_note(holes, "6") == " (gaps: steps without a steered group)"


def test_plot_run_says_when_no_group_was_rerolled(tmp_path):
    fig = plot_run(_records(rerolled=False), tmp_path / "curves.png")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(s.startswith("train pass rate (after re-roll): equal to the first rollouts") for s in labels)
