"""experiments.engines_paired: the paired jax-vs-vLLM statistics on synthetic curves with known answers,
and the reader on synthetic metrics files (not the runs)."""
import json
import math

import numpy as np
import pytest

from experiments import engines_paired as ep

JAX = np.array([[0.40, 0.45, 0.50],     # [S=4, E=3]: gains 0.10, 0.20, 0.15, 0.25 (mean 0.175)
                [0.50, 0.60, 0.70],
                [0.45, 0.50, 0.60],
                [0.35, 0.50, 0.60]])


def test_a_constant_offset_is_a_final_difference_and_no_gain_difference():
    st = ep.paired_stats(JAX, JAX + 0.1, n_boot=500)
    assert st["n_pairs"] == 4
    assert st["gain"]["jax"]["value"] == pytest.approx(0.175)
    assert 0.10 - 1e-12 <= st["gain"]["jax"]["lo"] <= st["gain"]["jax"]["hi"] <= 0.25 + 1e-12
    # every seed's difference is the same number: the paired CI collapses onto it (an unpaired one would not)
    for k, want in (("diff_gain", 0.0), ("diff_final", 0.1)):
        d = st[k]
        assert d["paired"] and d["value"] == pytest.approx(want, abs=1e-12)
        assert d["lo"] == pytest.approx(want, abs=1e-12) and d["hi"] == pytest.approx(want, abs=1e-12)
    v = ep.verdict(st)
    assert v == {"engines_agree": True, "learns": {"jax": True, "vllm": True}, "prediction_holds": True}


def test_the_verdict_is_refuted_by_a_gap_or_by_no_learning():
    slower = JAX.copy()
    slower[:, -1] -= 0.08                      # vLLM gains 0.08 less on every seed: the CI excludes 0
    v = ep.verdict(ep.paired_stats(JAX, slower, n_boot=500))
    assert v["engines_agree"] is False and v["prediction_holds"] is False
    flat = np.repeat(JAX[:, :1], 3, axis=1) + np.array([0.0, 0.0, 0.02])[None] * np.array([[1], [-1], [1], [-1]])
    v = ep.verdict(ep.paired_stats(JAX, flat, n_boot=500))   # vLLM gains +-0.02: its gain CI holds 0
    assert v["learns"] == {"jax": True, "vllm": False} and v["prediction_holds"] is False


def test_one_pair_has_values_and_no_interval():
    st = ep.paired_stats(JAX[:1], JAX[:1] + 0.05, n_boot=100)
    assert st["diff_final"]["value"] == pytest.approx(0.05) and math.isnan(st["diff_final"]["lo"])
    assert ep.verdict(st)["prediction_holds"] is None
    with pytest.raises(ValueError, match="must both be"):
        ep.paired_stats(JAX, JAX[:3])


def _write(d, evals, *, vllm):
    d.mkdir()
    lines = []
    for step in range(20):
        r = {"kind": "train", "step": step, "tokens_generated": 1000 if step else 5000,
             "time_sample": 2.0 if step else 100.0}
        if vllm:
            r.update({"rollout/logp_abs_diff": 1e-7 * (1 + step % 2), "rollout/kl_k1": 0.0, "rollout/kl_k3": 0.0,
                      "rollout/sync_s": 0.3})
        lines.append(r)
    lines += [{"kind": "eval", "step": s, "eval/pass_at_1": p} for s, p in evals.items()]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")


def test_summarize_pairs_seeds_and_averages_the_logged_means(tmp_path):
    _write(tmp_path / "jax-s0", {0: 0.5, 10: 0.55, 20: 0.6}, vllm=False)
    _write(tmp_path / "vllm-s0", {0: 0.5, 10: 0.6, 20: 0.7}, vllm=True)
    _write(tmp_path / "jax-s1", {0: 0.4, 10: 0.5, 20: 0.6}, vllm=False)
    _write(tmp_path / "vllm-s1", {0: 0.4, 10: 0.45, 20: 0.5}, vllm=True)
    _write(tmp_path / "jax-s2", {0: 0.4, 10: 0.5, 20: 0.9}, vllm=False)   # no vLLM partner: left out
    s = ep.summarize(tmp_path)
    assert s["seeds"] == [0, 1] and s["eval_steps"] == [0, 10, 20]
    assert s["curves"]["vllm"] == [[0.5, 0.6, 0.7], [0.4, 0.45, 0.5]]
    assert s["stats"]["diff_final"]["value"] == pytest.approx(0.0)       # (0.1 - 0.1) / 2
    assert s["stats"]["gain"]["jax"]["value"] == pytest.approx(0.15)
    assert [r["paired"] for r in s["runs"] if r["engine"] == "jax"] == [True, True, False]
    assert s["means"]["vllm"]["rollout/logp_abs_diff"] == pytest.approx(1.5e-7)
    assert s["means"]["vllm"]["tokens_per_s"] == pytest.approx(500.0)   # step 0 (compile, warm-up) left out
    assert s["means"]["jax"]["rollout/sync_s"] is None
    ep.figure(s, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
    md = ep.markdown(s)
    assert "| vllm-s1 | 0.400 | 0.450 | 0.500 | +0.100 |" in md and "| jax | n/a |" in md
