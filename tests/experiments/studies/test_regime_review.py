"""``experiments.studies.regime_review``: the per-record measures against hand-computed values on
synthetic records, and the committed page section equal to what the generator writes from the
committed runs."""
import json

import numpy as np
import pytest

from experiments.studies import regime_review as rr


def _rec(step, k_hist, tokens, rollouts):
    return {"kind": "train", "step": step, "k_hist": k_hist, "tokens_generated": tokens, "rollouts_sampled": rollouts}


def test_k_shares_and_tokens_per_rollout_by_hand():
    recs = [_rec(0, [2, 1, 1, 0, 0, 0, 0, 0, 0], 100, 32),   # 4 groups: 2 zero, 2 in {1, 2}
            _rec(1, [1, 0, 0, 0, 0, 0, 0, 0, 3], 300, 40)]   # 4 groups: 1 zero, 3 all-pass
    sh = rr.k_shares(recs, slice(0, 2))
    assert sh == pytest.approx({"zero": 3 / 8, "one_two": 2 / 8, "all": 3 / 8})
    assert rr.k_shares(recs, slice(1, 2))["all"] == pytest.approx(0.75)
    assert rr.tokens_per_rollout(recs, slice(0, 2)) == pytest.approx(400 / 72)
    assert rr.tokens_per_step(recs) == pytest.approx(200)


def test_runs_of_keeps_variants_with_a_common_prefix_apart(tmp_path):
    for name in ("regime_late-baseline-s0", "regime_late-ps_ada-s1", "regime_late_long-baseline-s0",
                 "regime_late-baseline-s1"):
        (tmp_path / name).mkdir()
    arms = rr.runs_of("regime_late", tmp_path)
    assert sorted(arms) == ["baseline", "ps_ada"]
    assert [d.name for d in arms["baseline"]] == ["regime_late-baseline-s0", "regime_late-baseline-s1"]


def test_splice_replaces_only_the_marked_section():
    page = f"head\n{rr.BEGIN}\nold\n{rr.END}\ntail\n"
    assert rr.splice(page, f"{rr.BEGIN}\nnew\n{rr.END}") == f"head\n{rr.BEGIN}\nnew\n{rr.END}\ntail\n"
    assert rr.splice("page\n", "S") == "page\n\nS\n"


def test_committed_section_is_the_generators_output_from_the_committed_runs():
    rev = rr.review()
    page = rr.PAGE.read_text()
    assert rr.splice(page, rr.render(rev)) == page, "regenerate: python -m experiments.studies.regime_review --write"
    late = rev["regime_late_long"]
    # the review's reading on the page: the surface guesser reaches the arms' final level on the late chains
    assert late["guesser"] > 0.2 and min(late["final_pass"].values()) < late["guesser"] + 0.1
    assert rev["regime_repair"]["zero_final_seeds"]["baseline_lr2"] == rev["regime_repair"]["seeds"]
    json.dumps(rev)  # serialisable
    assert np.isfinite(late["leave_one_out"]["all"])
