"""The mechanism tasks (``prs.tasks.mechanism``): the deep-horizon chain's whole-trace grader, its
generator's distribution and shortcut check, the recovery task's injected faults, the oracle prefix
sources through the trainer's ``rollouts_class`` hook, and the mechanism metrics.

References: a pure-Python left-to-right evaluator of the prompt string, hand-computed advantage
mass, a fake forward pass with known probabilities, and the guesser on the old mod-10 late task
(where the shortcut exists: the check must be able to fail).
"""
from __future__ import annotations

import dataclasses
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.tasks import ArithConfig, make_problems
from prs.tasks.arith import demonstrations
from prs.tasks.mechanism import (
    advantage_mass_share,
    guesser_rate,
    hard_step_cut,
    hard_step_mask,
    hard_step_rollout_accuracy,
    make_recovery_problems,
    output_length,
    recovery_config,
    recovery_split,
    solution_tokens,
    teacher_forced_hard_accuracy,
    teacher_forced_reach,
)
from prs.tasks.registry import make_task

DEEP = make_task("arith_deep", easy_steps=12)
SHORT = make_task("arith_deep", easy_steps=2)


class _Ro:
    def __init__(self, tokens, lengths):
        self.tokens, self.lengths = jnp.asarray(tokens), jnp.asarray(lengths)


def ref_trace(prompt: str, m: int) -> str:
    """The correct solution string of ``^a+b+…*c=`` (left to right, mod m): values, '#', answer, '$'."""
    body = prompt.lstrip("^").split("=")[0]
    terms, ops = [int(c) for c in body[0::2]], list(body[1::2])
    s, vals = terms[0], []
    for op, a in zip(ops, terms[1:]):
        s = (s * a if op == "*" else s + a) % m
        vals.append(str(s))
    return ",".join(vals) + f"#{s}$"


def _grade(task, problems, texts):
    v = task.cfg.vocab
    rows = [list(problems.prompt[i, : problems.prompt_len[i]]) + v.encode(t) for i, t in enumerate(texts)]
    width = max(map(len, rows)) + 2
    tok = np.full((len(rows), width), v.pad_id, np.int32)
    for i, r in enumerate(rows):
        tok[i, : len(r)] = r
    lengths = np.array([len(r) for r in rows], np.int32)
    return np.asarray(task.rewards(problems, _Ro(tok, lengths), group_size=1)).reshape(-1)


# ----------------------------------------------------------------------------- deep: grader
def test_whole_trace_grader_accepts_exactly_the_correct_trace():
    pr = DEEP.train_problems(seed=0, step=0, count=6)
    v = DEEP.cfg.vocab
    good = [ref_trace(v.decode(pr.prompt[i, : pr.prompt_len[i]]), 7) for i in range(6)]
    assert _grade(DEEP, pr, good).tolist() == [1.0] * 6
    bad = []
    for t in good:
        vals, ans = t[:-1].split("#")
        vals = vals.split(",")
        bad.append(",".join(vals[:3] + [str((int(vals[3]) + 1) % 7)] + vals[4:]) + f"#{ans}$")  # one wrong middle value
    bad[1] = good[1][:-1]                      # no EOS
    bad[2] = good[2][:4] + "!" + good[2]       # a restart, then the correct trace
    bad[3] = good[3].replace("#", ",#", 1)     # malformed
    wrong_last = good[4].split("#")[0].rsplit(",", 1)
    bad[4] = wrong_last[0] + "," + str((int(wrong_last[1]) + 1) % 7) + "#" + good[4].split("#")[1]  # right answer digit, wrong hard value
    bad[5] = good[5][:-2] + str((int(good[5][-2]) + 1) % 7) + "$"  # wrong answer digit only
    assert _grade(DEEP, pr, bad).tolist() == [0.0] * 6


def test_grader_rejects_a_truncated_rollout():
    pr = SHORT.train_problems(seed=1, step=0, count=3)
    v = SHORT.cfg.vocab
    good = [ref_trace(v.decode(pr.prompt[i, : pr.prompt_len[i]]), 7) for i in range(3)]
    rows = [list(pr.prompt[i, : pr.prompt_len[i]]) + v.encode(t) for i, t in enumerate(good)]
    tok = np.full((3, 20), v.pad_id, np.int32)
    for i, r in enumerate(rows):
        tok[i, : len(r)] = r
    full = np.array([len(r) for r in rows])
    assert np.asarray(SHORT.rewards(pr, _Ro(tok, full), group_size=1)).ravel().tolist() == [1, 1, 1]
    assert np.asarray(SHORT.rewards(pr, _Ro(tok, full - 1), group_size=1)).ravel().tolist() == [0, 0, 0]


def test_solution_tokens_match_the_reference_evaluator():
    pr = DEEP.train_problems(seed=3, step=2, count=20)
    sol, length = solution_tokens(pr, DEEP.cfg)
    v = DEEP.cfg.vocab
    for i in range(20):
        want = ref_trace(v.decode(pr.prompt[i, : pr.prompt_len[i]]), 7)
        assert v.decode(sol[i, : length[i]]) == want
        assert int(pr.answer[i]) == int(want[-2])


# ----------------------------------------------------------------------------- deep: generator
def test_generator_distribution_hard_step_last_units_only_answer_uniform():
    cfg = DEEP.cfg
    pr = make_problems(cfg, seed=0, count=7000)
    n = np.asarray(pr.n_terms)
    assert (n == 14).all() and (np.asarray(pr.hard_step) == 13).all()
    mult = np.asarray(pr.terms)[:, 13]
    counts = np.bincount(mult, minlength=7)
    assert counts[0] == 0 and counts[1:].min() > 1000 * 0.88  # uniform over 1..6: 1166 expected each
    ans = np.bincount(np.asarray(pr.answer), minlength=7) / 7000
    assert np.abs(ans - 1 / 7).max() < 0.02  # 4.5 sigma
    v = cfg.vocab
    assert all(v.decode(pr.prompt[i, : pr.prompt_len[i]]).count("*") == 1 for i in range(50))
    assert all(v.decode(pr.prompt[i, : pr.prompt_len[i]]).split("=")[0][-2] == "*" for i in range(50))


def test_plain_arith_repr_unchanged_and_bad_multipliers_fail_clearly():
    assert "hard_multipliers" not in repr(ArithConfig())
    with pytest.raises(ValueError, match="hard_multipliers"):
        ArithConfig(hard_op="late", modulus=7, hard_multipliers=(1, 7))
    with pytest.raises(ValueError, match="easy_steps"):
        make_task("arith_deep")
    with pytest.raises(ValueError, match="unknown parameter"):
        make_task("arith_deep", easy_steps=2, modulus=10)


def _surface(p):
    t = np.asarray(p.terms)
    n = np.asarray(p.n_terms)
    rows = np.arange(t.shape[0])
    return np.stack([n, t[:, 0], t[rows, n - 1], t[rows, n - 2]], axis=1)  # length, first, multiplier, last addend


def test_shortcut_check_guesser_far_below_a_third_of_any_plausible_base_rate():
    fit, test = make_problems(DEEP.cfg, seed=1, count=20000), make_problems(DEEP.cfg, seed=2, count=4000)
    answer_only = guesser_rate(fit, test, _surface, lambda p: np.asarray(p.answer)[:, None])
    assert answer_only < 1 / 7 + 0.03                     # the answer is uniform given the surface
    trace = guesser_rate(fit, test, _surface, lambda p: solution_tokens(p, DEEP.cfg)[0])
    assert trace < 0.005                                   # the graded object: the whole trace


def test_shortcut_check_detects_the_mod10_late_shortcut():
    """The same guesser on the old regime_late task (mod 10, multiplier 0-9) finds its shortcut."""
    late = ArithConfig(min_terms=4, max_terms=5, modulus=10, hard_op="late")
    fit, test = make_problems(late, seed=1, count=20000), make_problems(late, seed=2, count=4000)
    rate = guesser_rate(fit, test, _surface, lambda p: np.asarray(p.answer)[:, None])
    assert rate > 0.2  # x0 -> 0, x5 -> 0/5, even -> even: far above 1/10


# ----------------------------------------------------------------------------- metrics
def test_hard_step_mask_and_advantage_mass_share_against_hand_computation():
    pr = SHORT.train_problems(seed=0, step=0, count=2)
    width = 20
    mask = hard_step_mask(pr, width, group_size=2)                       # [4, 20]
    p = int(pr.prompt_len[0])
    assert mask.sum() == 4 and mask[0, p + 4] and mask[1, p + 4]          # E = 2: s_4 after 4 tokens
    adv = np.array([1.0, -3.0, 0.5, 0.0])
    loss_mask = np.zeros((4, width), bool)
    loss_mask[:, p:p + 6] = True
    loss_mask[2, p + 4] = False                                           # row 2's hard token not trained
    # mass: rows 0..2 have 6, 6, 5 tokens: |A| * tokens = 6 + 18 + 2.5 = 26.5; hard: 1 + 3 + 0 = 4
    assert advantage_mass_share(adv, loss_mask, mask) == pytest.approx(4 / 26.5)
    assert advantage_mass_share(np.zeros(4), loss_mask, mask) == 0.0      # no mass: 0, never NaN
    with pytest.raises(ValueError, match="advantages"):
        advantage_mass_share(adv[:3], loss_mask, mask)
    assert output_length(loss_mask) == pytest.approx(23 / 4)


def test_rollout_hard_accuracy_counts_reach_and_hard_step():
    pr = SHORT.train_problems(seed=4, step=0, count=1)
    v = SHORT.cfg.vocab
    good = ref_trace(v.decode(pr.prompt[0, : pr.prompt_len[0]]), 7)
    vals = good.split("#")[0].split(",")
    wrong_hard = ",".join(vals[:2] + [str((int(vals[2]) + 1) % 7)]) + "#0$"
    wrong_first = ",".join([str((int(vals[0]) + 1) % 7)] + vals[1:]) + "#0$"
    rows = [list(pr.prompt[0, : pr.prompt_len[0]]) + v.encode(t) for t in (good, wrong_hard, wrong_first)]
    tok = np.full((3, 20), v.pad_id, np.int32)
    for i, r in enumerate(rows):
        tok[i, : len(r)] = r
    assert hard_step_rollout_accuracy(pr, tok, SHORT.cfg, group_size=3) == (2, 1, 3)


def test_teacher_forced_accuracy_reads_the_probability_after_the_correct_prefix():
    pr = SHORT.train_problems(seed=5, step=0, count=64)
    sol, _ = solution_tokens(pr, SHORT.cfg)
    target = sol[np.arange(64), hard_step_cut(pr)]
    last = np.asarray(pr.prompt_len) + hard_step_cut(pr) - 1
    seen = {}

    def fake_forward(params, tokens, *, cfg, valid):
        seen["tokens"] = np.asarray(tokens)
        logits = np.zeros(tokens.shape + (SHORT.vocab_size,), np.float32)
        logits[np.arange(64), last, target] = np.log(3.0 * (SHORT.vocab_size - 1) / 7.0)  # p = 3 / (3 + 7/...)
        return jnp.asarray(logits)

    out = teacher_forced_hard_accuracy(None, pr, SHORT.cfg, model_cfg=None, samples=64, forward=fake_forward,
                                       key=jax.random.PRNGKey(1))
    p = 3.0 * (SHORT.vocab_size - 1) / 7.0
    want = p / (p + SHORT.vocab_size - 1)                                 # softmax of the one raised logit
    assert out["expected"] == pytest.approx(want, rel=1e-5)
    assert abs(out["sampled"] - want) < 4 * np.sqrt(want * (1 - want) / (64 * 64))
    v = SHORT.cfg.vocab
    i = 0  # the input holds the prompt then the correct values before the hard step, nothing after
    got = v.decode(seen["tokens"][i, : last[i] + 1])
    assert got == v.decode(pr.prompt[i, : pr.prompt_len[i]]) + ",".join(
        ref_trace(v.decode(pr.prompt[i, : pr.prompt_len[i]]), 7).split(",")[:2]) + ","


def test_teacher_forced_reach_against_a_numpy_reference_on_random_logits():
    """P(reach) at temperature 1 = the product of the correct tokens' probabilities before the hard step
    (targets from the string solver ``ref_trace``, softmax in numpy); greedy = every one the argmax."""
    pr = DEEP.train_problems(seed=3, step=0, count=16)
    v, m = DEEP.cfg.vocab, 7
    rng = np.random.default_rng(0)
    seen = {}

    def fake_forward(params, tokens, *, cfg, valid):
        seen["tokens"] = np.asarray(tokens)
        logits = rng.normal(size=tokens.shape + (DEEP.vocab_size,)).astype(np.float32)
        # make the right token likely (and the argmax) at most positions, so the products are not ~0
        for i in range(tokens.shape[0]):
            for t in range(tokens.shape[1] - 1):
                logits[i, t, tokens[i, t + 1]] += -4.0 if i % 2 == 0 and (i + t) % 5 == 0 else 4.0
        seen["logits"] = logits
        return jnp.asarray(logits)

    out = teacher_forced_reach(None, pr, DEEP.cfg, model_cfg=None, forward=fake_forward)
    reach, greedy, easy_q, easy_top = [], [], [], []
    for i in range(16):
        prompt = v.decode(pr.prompt[i, : pr.prompt_len[i]])
        trace = ref_trace(prompt, m)
        before = ",".join(trace.split(",")[:12]) + ","   # the 12 easy values, each with its separator
        ids = v.encode(before)
        p0 = int(pr.prompt_len[i])
        assert seen["tokens"][i, p0: p0 + len(ids)].tolist() == ids
        lg = seen["logits"][i].astype(np.float64)
        lsm = lg - np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1, keepdims=True)) - lg.max(-1, keepdims=True)
        q = np.array([np.exp(lsm[p0 + j - 1, ids[j]]) for j in range(len(ids))])
        top = np.array([lsm[p0 + j - 1].argmax() == ids[j] for j in range(len(ids))])
        reach.append(q.prod())
        greedy.append(top.all())
        easy_q += q[0::2].tolist()
        easy_top += top[0::2].tolist()
    assert out["reach_sampled"] == pytest.approx(np.mean(reach), rel=1e-4)
    assert out["reach_greedy"] == pytest.approx(np.mean(greedy))
    assert out["easy_sampled"] == pytest.approx(np.mean(easy_q), rel=1e-4)
    assert out["easy_greedy"] == pytest.approx(np.mean(easy_top))
    assert 0 < out["reach_greedy"] < 1 and out["problems"] == 16


def test_bad_addition_table_is_a_fixed_set_of_wrong_additions():
    from prs.tasks.mechanism import bad_addition_table

    t = bad_addition_table(7, 5)
    assert len(t) == 5 and t == bad_addition_table(7, 5)
    assert all(0 <= s < 7 and 0 <= a < 7 and w != (s + a) % 7 for (s, a), w in t.items())
    assert len(bad_addition_table(7, 49)) == 49


def test_demonstrations_with_a_wrong_addition_table_follow_it_exactly():
    """bad_rate 1, no noise: each demonstration is the string solver's trace except that an addition in
    the table writes the table's value (and the chain continues from it); off: bit-identical to before."""
    from prs.tasks.mechanism import bad_addition_table

    kw = dict(easy_steps=12, demo_error_rate=0.0, demo_hard_error_rate=0.0)
    plain = make_task("arith_deep", **kw)
    bad = make_task("arith_deep", demo_bad_pairs=12, demo_bad_rate=1.0, **kw)
    table = bad_addition_table(7, 12)
    pr = plain.train_problems(seed=4, step=0, count=40)
    v = plain.cfg.vocab
    tok, mask = bad.demonstrations(pr, seed=2)
    hits = 0
    for i in range(40):
        terms = [int(a) for a in pr.terms[i, : pr.n_terms[i]]]
        s, vals = terms[0], []
        for k, a in enumerate(terms[1:], start=1):
            if k == int(pr.hard_step[i]):
                s = (s * a) % 7
            elif (s, a) in table:
                s, hits = table[(s, a)], hits + 1
            else:
                s = (s + a) % 7
            vals.append(str(s))
        want = ",".join(vals) + f"#{s}$"
        assert v.decode(tok[i][mask[i]]) == want
    assert hits > 10                                                            # the table was exercised
    off = make_task("arith_deep", demo_bad_pairs=0, **kw)
    a, b = off.demonstrations(pr, seed=2), plain.demonstrations(pr, seed=2)
    assert np.array_equal(a[0], b[0]) and repr(off.warm_start_key) == repr(plain.warm_start_key)
    assert repr(bad.warm_start_key) != repr(plain.warm_start_key)
    # off, the noisy solver draws the same random stream as before the option existed: digest of the
    # demonstrations computed with the code before it (commit 8e00e5b), noise on
    noisy = make_task("arith_deep", easy_steps=12, demo_error_rate=0.1, demo_hard_error_rate=0.4)
    tok, mask = noisy.demonstrations(noisy.train_problems(seed=4, step=0, count=40), seed=2)
    digest = hashlib.sha256(np.ascontiguousarray(tok).tobytes() + np.ascontiguousarray(mask).tobytes()).hexdigest()
    assert digest[:16] == "0c22a0d62c73c675"
    with pytest.raises(ValueError, match="demo_bad_pairs must be an int in \\[0, 49\\]"):
        make_task("arith_deep", demo_bad_pairs=50, **kw)


def test_trainer_evaluation_logs_the_teacher_forced_hard_accuracy_of_its_parameters():
    """``Trainer.evaluate`` carries ``DeepTask.policy_metrics``: E[q] over the 512 held-out problems,
    against a reference forward pass on the unpadded inputs (the short chain: every input has the same
    length, so no padding or ``valid`` mask is involved) and a numpy softmax."""
    from prs.core import prefix as ps
    from prs.models.qwen3 import ModelConfig, forward, init_params
    from prs.rl.config import EvalConfig
    from prs.rl.trainer import RLConfig, Trainer
    from prs.tasks.mechanism import TF_PROBLEMS

    task = make_task("arith_deep", easy_steps=2)
    model = ModelConfig.preset("tiny", vocab_size=task.vocab_size, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                               head_dim=8, d_ff=32)
    tr = Trainer(task, model, RLConfig(tasks_per_step=2, group_size=2, eval=EvalConfig(count=4, samples=1)),
                 ps.PrefixConfig(mode="baseline", n=2), seed=0)
    params = init_params(model, jax.random.PRNGKey(3))
    out = tr.evaluate(params, 0)
    pr = task.eval_problems(count=TF_PROBLEMS)
    sol, _ = solution_tokens(pr, task.cfg)
    plen, cut = np.asarray(pr.prompt_len), hard_step_cut(pr)
    assert len(set(plen + cut)) == 1                                    # one length: no padding below
    rows = np.stack([np.r_[np.asarray(pr.prompt)[i, : plen[i]], sol[i, : cut[i]]] for i in range(TF_PROBLEMS)])
    logits = np.asarray(forward(params, jnp.asarray(rows, jnp.int32), cfg=model), np.float64)[:, -1]  # [B, V]
    lp = logits - logits.max(1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(1, keepdims=True))
    want = np.exp(lp[np.arange(TF_PROBLEMS), sol[np.arange(TF_PROBLEMS), cut]]).mean()
    assert out["eval/mech/tf_hard_acc"] == pytest.approx(want, rel=1e-4)
    assert 0.0 <= out["eval/mech/tf_hard_acc_sampled"] <= 1.0
    assert out["eval/mech/tf_hard_acc"] == tr.evaluate(params, 10)["eval/mech/tf_hard_acc"]  # a fixed key and set


def test_trainer_logs_the_advantage_mass_on_the_hard_step():
    """``mech/adv_mass_hard`` of a training step against a loop over the batch's rows: the hard step's
    token of row r sits at prompt_len + 2 (h - 1) of problem r // N."""
    from prs.core import prefix as ps
    from prs.models.qwen3 import ModelConfig, init_params
    from prs.rl.trainer import RLConfig, Trainer

    task = make_task("arith_deep", easy_steps=2)
    model = ModelConfig.preset("tiny", vocab_size=task.vocab_size, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                               head_dim=8, d_ff=32)
    tr = Trainer(task, model, RLConfig(tasks_per_step=4, group_size=4), ps.PrefixConfig(mode="baseline", n=4), seed=0)
    c = tr.collect(tr.init_state(init_params(model, jax.random.PRNGKey(0))))
    pr = task.train_problems(seed=0, step=0, count=4)
    a, m = np.abs(np.asarray(c.batch.advantages)), np.asarray(c.batch.loss_mask)
    hard = total = 0.0
    for r in range(16):
        pos = int(pr.prompt_len[r // 4]) + 2 * (int(pr.hard_step[r // 4]) - 1)
        total += a[r] * m[r].sum()
        hard += a[r] * m[r, pos]
    assert c.metrics["mech/adv_mass_hard"] == pytest.approx(hard / total if total else 0.0, rel=1e-6)


# ----------------------------------------------------------------------------- recovery
def test_recovery_drafts_inject_one_fault_at_the_configured_rate():
    cfg = recovery_config(n_terms=6)
    pr = make_recovery_problems(cfg, draft_steps=3, fault_rate=0.3, seed=0, count=4000)
    assert abs(pr.fault.mean() - 0.3) < 0.03
    v = cfg.vocab
    for i in range(200):
        terms = pr.terms[i, :6]
        vals = [int(x) for x in v.decode(pr.draft[i]).split(",")[:-1]]
        prev, wrong = int(terms[0]), []
        for j, x in enumerate(vals, start=1):
            wrong.append(x != (prev + terms[j]) % 10)
            prev = x                                             # later values follow the corrupted one
        assert sum(wrong) == int(pr.fault[i]) and (not pr.fault[i] or wrong[pr.fault_step[i] - 1])


def test_recovery_task_grades_the_answer_after_the_draft_and_splits_rates():
    task = make_task("arith_recovery", n_terms=6, draft_steps=3, fault_rate=0.5)
    pr = task.train_problems(seed=0, step=0, count=8)
    prompt, plen = task.prompts(pr)
    v = task.cfg.vocab
    texts = [v.decode(prompt[i, : plen[i]]) for i in range(8)]
    assert all(t.endswith(",") and t.count(",") == 3 for t in texts)
    tok, mask = task.demonstrations(pr, seed=0)
    r = np.asarray(task.rewards(pr, _Ro(tok, plen + mask.sum(1)), group_size=1)).ravel()
    assert set(r.tolist()) <= {0.0, 1.0}
    split = recovery_split(np.array([1, 0, 1, 1, 0, 0, 1, 1.0]), np.array([True, False, True, False]), group_size=2)
    assert split == {"recovery_rate": 0.25, "clean_pass_rate": 1.0, "fault_share": 0.5}  # groups 0, 2 faulty
    src, cut = task.oracle_source(pr, seed=0)
    for i in range(8):  # the injected-fault prefix: the draft continued, its last value wrong
        pre = v.decode(src[i, : plen[i] + cut[i]])
        vals = [int(x) for x in pre.split("=")[1].split(",")[:-1]]
        terms = pr.terms[i]
        assert vals[-1] != (vals[-2] + terms[len(vals)]) % 10
        for j in range(3, len(vals) - 1):
            assert vals[j] == (vals[j - 1] + terms[j + 1]) % 10


# ----------------------------------------------------------------------------- oracle through the trainer
@pytest.mark.slow
def test_oracle_rollouts_replace_low_k_groups_with_correct_prefix_rerolls():
    from prs.core import prefix as ps
    from prs.models.qwen3 import ModelConfig, init_params
    from prs.rl.trainer import RLConfig, Trainer
    from prs.rl.config import EvalConfig

    task = make_task("arith_deep", easy_steps=2, oracle_max_k=0)
    model = ModelConfig.preset("tiny", vocab_size=task.vocab_size, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                               head_dim=8, d_ff=32)
    rl = RLConfig(tasks_per_step=2, group_size=4, eval=EvalConfig(count=4, samples=1))
    tr = Trainer(task, model, rl, ps.PrefixConfig(mode="baseline", n=4), seed=0)
    state = tr.init_state(init_params(model, jax.random.PRNGKey(0)))
    c = tr.collect(state)
    batch, m = c.batch, c.metrics
    assert m["mech/oracle_groups"] == 2                        # a random policy: every group k = 0
    pr = task.train_problems(seed=0, step=0, count=2)
    sol, _ = solution_tokens(pr, task.cfg)
    tok = np.asarray(batch.tokens)
    for r in range(8):
        i, p = r // 4, int(pr.prompt_len[r // 4])
        assert (tok[r, p:p + 4] == sol[i, :4]).all()           # the correct values before the hard step
    pm = np.asarray(tr.rollouts.rollout(tr.sampling_params(state.params), pr, jax.random.PRNGKey(3),
                                        group_size=4).policy_mask)
    assert not pm[:, : int(pr.prompt_len.max()) + 4].any()     # the replayed prefix is never trained on


def test_arms_share_one_warm_start_key():
    from prs.rl.runner import _hash

    base = make_task("arith_deep", easy_steps=12)
    for arm in (dict(oracle_max_k=2), dict(fixed_cut=True)):
        assert _hash(make_task("arith_deep", easy_steps=12, **arm).warm_start_key) == _hash(base.warm_start_key)
    assert _hash(make_task("arith_deep", easy_steps=2).warm_start_key) != _hash(base.warm_start_key)
    rec = make_task("arith_recovery")
    assert _hash(make_task("arith_recovery", oracle_min_k=6, eval_fault_rate=1.0).warm_start_key) == _hash(rec.warm_start_key)
    assert _hash(make_task("arith_recovery", fault_rate=0.2).warm_start_key) != _hash(rec.warm_start_key)


def test_fixed_cut_puts_every_reroll_just_before_the_hard_step():
    pr = DEEP.train_problems(seed=0, step=0, count=3)
    fixed = make_task("arith_deep", easy_steps=12, fixed_cut=True)
    cut = np.array([5, 9, 27])
    assert DEEP.fixed_cuts(pr, None, cut).tolist() == [5, 9, 27]          # off: the controller's cuts
    long = _deep_source(pr, [_correct_text(pr, i) for i in range(3)])      # full traces: 28 tokens each
    assert fixed.fixed_cuts(pr, long, cut).tolist() == [24, 24, 24]       # 12 values and their commas
    src, c = fixed.oracle_source(pr, seed=0)
    v = fixed.cfg.vocab
    text = v.decode(src[0, : pr.prompt_len[0] + c[0]])
    assert text.split("=")[1].count(",") == 12 and text.endswith(",")


def test_warm_start_ramp_grows_the_longest_chain_and_is_off_by_default():
    ramp = make_task("arith_deep", easy_steps=12, warm_start_ramp=50)
    # off: exactly ArithTask's draw (uniform over [warm_start_min_terms, max_terms]), same key as before
    off = DEEP.warm_start_problems(seed=3, step=7, count=64)
    ref = make_problems(dataclasses.replace(DEEP.cfg, min_terms=3, term_weights=None), seed=3 * 1_000_003 + 7,
                        count=64)
    for a, b in zip(off, ref):
        np.testing.assert_array_equal(a, b)
    assert "ramp" not in repr(DEEP.warm_start_key)
    # on: n in [3, 4 + step // 50], capped at 14; the arrays keep train_problems' shapes
    for step, hi in ((0, 4), (49, 4), (50, 5), (449, 12), (500, 14), (10_000, 14)):
        pr = ramp.warm_start_problems(seed=3, step=step, count=256)
        n = np.asarray(pr.n_terms)
        assert n.min() == 3 and n.max() == hi, (step, n.min(), n.max())
        assert np.asarray(pr.terms).shape == (256, 14)
        assert ((np.asarray(pr.hard_step) == n - 1)).all()          # the multiply stays last
    from prs.rl.runner import _hash

    assert _hash(ramp.warm_start_key) != _hash(DEEP.warm_start_key)
    assert _hash(make_task("arith_deep", easy_steps=12, warm_start_ramp=50, oracle_max_k=2).warm_start_key) == \
        _hash(ramp.warm_start_key)
    with pytest.raises(ValueError, match="warm_start_ramp must be an int >= 0"):
        make_task("arith_deep", easy_steps=12, warm_start_ramp=-1)


# ----------------------------------------------------------------------------- recovery warm start
def _ref_sums(terms, start, stop, s, m=10):
    """Running sums s_{start+1} … s_{stop} of ``terms`` from the value ``s`` (pure Python)."""
    out = []
    for j in range(start, stop):
        s = (s + int(terms[j])) % m
        out.append(s)
    return out


def test_recovery_warm_start_ramp_starts_on_short_chains_with_short_drafts():
    task = make_task("arith_recovery", n_terms=6, draft_steps=3, fault_rate=0.5, demo_error_rate=0.0,
                     warm_start_min_terms=3, warm_start_ramp=50)
    v = task.cfg.vocab
    early = task.warm_start_problems(seed=7, step=0, count=256)
    assert set(early.n_terms.tolist()) == {3, 4}                          # longest 3 + 1 before step 50
    np.testing.assert_array_equal(early.draft_len, early.n_terms - 2)     # one step left to the policy
    late = task.warm_start_problems(seed=7, step=120, count=512)
    assert set(late.n_terms.tolist()) == {3, 4, 5, 6}
    np.testing.assert_array_equal(late.draft_len, np.minimum(late.n_terms - 2, 3))
    assert abs(late.fault.mean() - 0.5) < 0.07
    assert ((late.fault_step >= 1) & (late.fault_step <= late.draft_len))[late.fault].all()
    assert (late.fault_step[~late.fault] == 0).all()
    prompt, plen = task.prompts(late)
    tok, mask = task.demonstrations(late, seed=0)
    for i in range(64):  # the prompt holds D_i draft values; the demonstration continues from the last one
        n, d = int(late.n_terms[i]), int(late.draft_len[i])
        terms = late.terms[i, :n]
        text = v.decode(prompt[i, : plen[i]])
        draft = [int(x) for x in text.split("=")[1].split(",")[:-1]]
        assert len(draft) == d and text.count(",") == d
        wrong = [x != y for x, y in zip(draft, [_ref_sums(terms, j, j + 1, ([terms[0]] + draft)[j - 1])[0]
                                                for j in range(1, d + 1)])]
        assert sum(wrong) == int(late.fault[i])
        cont = v.decode(tok[i][mask[i]])
        if not cont.startswith(tuple("0123456789")) or "!" in cont:
            continue
        vals = _ref_sums(terms, d + 1, n, draft[-1])                      # errors propagate, none made
        want = ",".join(map(str, vals)) + f"#{vals[-1]}$"
        assert cont == want or (late.fault[i] and "!" in cont)
    # the task's own problems are unchanged by the ramp: every draft D long
    pr = task.train_problems(seed=7, step=0, count=64)
    assert (pr.draft_len == 3).all() and (pr.n_terms == 6).all()


def test_recovery_warm_start_ramp_key_and_errors():
    from prs.rl.runner import _hash

    rec = make_task("arith_recovery")
    assert _hash(rec.warm_start_key) == "e0b635aa5d13e064"                 # the key before the ramp existed
    ramp = make_task("arith_recovery", warm_start_min_terms=3, warm_start_ramp=50)
    assert _hash(ramp.warm_start_key) != _hash(make_task("arith_recovery", warm_start_min_terms=3).warm_start_key)
    assert _hash(make_task("arith_recovery", warm_start_min_terms=3, warm_start_ramp=50, oracle_min_k=6).warm_start_key) \
        == _hash(ramp.warm_start_key)
    with pytest.raises(ValueError, match="warm_start_ramp needs warm_start_min_terms"):
        make_task("arith_recovery", warm_start_ramp=50)
    with pytest.raises(ValueError, match="warm_start_ramp needs warm_start_min_terms"):
        make_task("arith_recovery", warm_start_min_terms=2, warm_start_ramp=50)
    with pytest.raises(ValueError, match="warm_start_ramp must be an int"):
        make_task("arith_recovery", warm_start_min_terms=3, warm_start_ramp=-1)
    with pytest.raises(ValueError, match="draft_steps must lie"):
        make_recovery_problems(recovery_config(n_terms=4), draft_steps=3, fault_rate=0.5, seed=0, count=4)


def test_recovery_step_accuracy_counts_the_policys_values_not_the_draft():
    from prs.tasks.arith import step_accuracy

    task = make_task("arith_recovery", n_terms=6, draft_steps=3, fault_rate=1.0, demo_error_rate=0.0, demo_fix_rate=0.0)
    pr = task.train_problems(seed=0, step=0, count=32)
    tok, _ = task.demonstrations(pr, seed=0)          # every draft faulty; the continuation is right from it
    _, plen = task.prompts(pr)
    # the policy wrote s_5 and s_6 (2 values) per row, each right given the value before it
    assert step_accuracy(pr, tok, 1, task.cfg, start=plen) == {"add": (64, 64), "hard": (0, 0)}
    # read from the chain prompt's end the draft counts as written: 5 values a row, one of them wrong
    assert step_accuracy(pr, tok, 1, task.cfg) == {"add": (128, 160), "hard": (0, 0)}


def test_recovery_metrics_split_restarts_by_the_drafts_fault():
    from prs.rl.episodes import Episodes

    task = make_task("arith_recovery", n_terms=6, draft_steps=3, fault_rate=0.5, demo_error_rate=0.0)
    pr = task.train_problems(seed=3, step=0, count=8)
    assert 0 < pr.fault.sum() < 8
    prompt, plen = task.prompts(pr)
    v = task.cfg.vocab
    rows, rew = [], []
    for i in range(8):  # 2 rollouts a problem: a restart in the first one after a fault, the second never
        for restart in (bool(pr.fault[i]), False):
            n = int(pr.n_terms[i])
            vals = _ref_sums(pr.terms[i], 1, n, int(pr.terms[i, 0]))
            gen = ("0!" if restart else "") + ",".join(map(str, vals)) + f"#{vals[-1]}$"
            rows.append(list(prompt[i, : plen[i]]) + v.encode(gen))
            rew.append(1.0 if restart else 0.0)
    width = max(map(len, rows))
    tok = np.full((16, width), v.pad_id, np.int32)
    for r, row in enumerate(rows):
        tok[r, : len(row)] = row
    z = np.zeros((16, width))
    ep = Episodes(tok, z, z > 0, tok != v.pad_id, z, np.asarray(rew, np.float32), np.zeros(16, np.int32),
                  np.zeros(16, np.int32), np.zeros(16, np.int32), z, np.zeros(16, bool))
    m = task.episode_metrics(pr, ep)
    f = pr.fault.mean()
    assert m["mech/restart_rate_faulty"] == 0.5 and m["mech/restart_rate_clean"] == 0.0
    assert m["mech/restart_rate"] == pytest.approx(f / 2)
    assert m["mech/recovery_rate"] == 0.5 and m["mech/clean_pass_rate"] == 0.0


# ----------------------------------------------------------------------------- episode metrics: fresh rows only
def _deep_rows(pr, texts, cut):
    """Episodes of arith_deep rows ``prompt_i + text`` (row r on problem r // 2); ``cut[r] > 0``: the
    first ``cut[r]`` tokens after the prompt are a replayed prefix (policy mask 0, ``replayed = cut``),
    as ``OracleRollouts`` merges an oracle re-roll into a training call."""
    from prs.rl.episodes import Episodes

    v = SHORT.cfg.vocab
    ids = [list(pr.prompt[r // 2, : pr.prompt_len[r // 2]]) + v.encode(t) for r, t in enumerate(texts)]
    width = max(map(len, ids)) + 2
    tok = np.full((len(ids), width), v.pad_id, np.int32)
    pm = np.zeros((len(ids), width), bool)
    for r, row in enumerate(ids):
        p = int(pr.prompt_len[r // 2])
        tok[r, : len(row)] = row
        pm[r, p + cut[r]: len(row)] = True
    z = np.zeros((len(ids), width))
    zi = np.zeros(len(ids), np.int32)
    return Episodes(tok, z, tok != v.pad_id, pm, z, zi.astype(np.float32), pm.sum(1).astype(np.int32),
                    np.asarray(cut, np.int32), zi, z, np.zeros(len(ids), bool))


def test_deep_episode_metrics_leave_the_oracles_replayed_rows_out():
    """Issue 45, item 1: the oracle's re-rolls are merged into the training call's rollouts, so
    ``episode_metrics`` saw them; P(reach), the hard step's accuracy and the output length must be the
    fresh rows' only (``prs.rl.episodes.fresh_rows``), counted here by hand."""
    pr = SHORT.train_problems(seed=4, step=0, count=2)
    v = SHORT.cfg.vocab
    good = [ref_trace(v.decode(pr.prompt[i, : pr.prompt_len[i]]), 7) for i in range(2)]
    vals = good[0].split("#")[0].split(",")
    wrong = str((int(vals[0]) + 1) % 7)
    texts = [good[0],                                          # fresh: reaches, hard step right (len(good[0]))
             ",".join([wrong] + vals[1:]) + good[0][good[0].index("#"):],  # fresh: an easy value wrong
             good[1], good[1]]                                 # oracle re-rolls: correct replayed prefix
    cut = [0, 0, 4, 4]                                         # E = 2: 4 tokens before the hard step
    m = SHORT.episode_metrics(pr, _deep_rows(pr, texts, cut))
    assert m["mech/p_reach"] == 0.5                            # 1 of the 2 fresh rows (old: 3 of 4)
    assert m["mech/hard_acc_on_reach"] == 1.0
    assert m["mech/output_len"] == (len(v.encode(texts[0])) + len(v.encode(texts[1]))) / 2
    none = SHORT.episode_metrics(pr, _deep_rows(pr, texts, [4, 4, 4, 4]))
    assert none == {"mech/p_reach": None, "mech/hard_acc_on_reach": None, "mech/output_len": None}


def test_recovery_episode_metrics_leave_the_oracles_replayed_rows_out():
    """The same rule for ``arith_recovery``: rows with a replayed (injected-fault) prefix do not count."""
    from prs.rl.episodes import Episodes

    task = make_task("arith_recovery")
    pr = task.train_problems(seed=3, step=0, count=8)
    prompt, plen = task.prompts(pr)
    v = task.cfg.vocab
    tok = np.full((16, prompt.shape[1] + 4), v.pad_id, np.int32)
    for r in range(16):
        tok[r, : plen[r // 2]] = prompt[r // 2, : plen[r // 2]]
        tok[r, plen[r // 2]: plen[r // 2] + 2] = v.encode("0!" if r % 2 else "1$")
    rew = (np.arange(16) % 2).astype(np.float32)              # odd rows pass and restart
    replayed = np.where(np.arange(16) % 2, 3, 0).astype(np.int32)  # ... and are re-rolls
    z = np.zeros(tok.shape)
    ep = Episodes(tok, z, tok != v.pad_id, tok != v.pad_id, z, rew, np.zeros(16, np.int32), replayed,
                  np.zeros(16, np.int32), z, np.zeros(16, bool))
    m = task.episode_metrics(pr, ep)
    assert m["mech/restart_rate"] == 0.0                       # only the even (fresh, no restart) rows count
    assert m["mech/recovery_rate"] in (0.0, None) and m["mech/clean_pass_rate"] in (0.0, None)
    assert m["mech/fault_share"] == pytest.approx(pr.fault.mean())
    assert task.episode_metrics(pr, ep._replace(replayed=np.ones(16, np.int32)))["mech/restart_rate"] is None


def _correct_text(pr, i, task=DEEP):
    return ref_trace(task.cfg.vocab.decode(pr.prompt[i, : pr.prompt_len[i]]), 7)


def _deep_source(pr, texts, task=DEEP):
    """Source ``Episodes`` [G] as a same-step re-roll gets them (``take_rows`` of the step's rollouts):
    ``prompt_g + texts[g]`` generated (policy mask on it), ``units`` its generated tokens."""
    from prs.rl.episodes import Episodes

    v = task.cfg.vocab
    ids = [list(pr.prompt[g, : pr.prompt_len[g]]) + v.encode(t) for g, t in enumerate(texts)]
    width = int(pr.prompt.shape[1]) + 2 * task.max_new_tokens
    tok = np.full((len(ids), width), v.pad_id, np.int32)
    pm = np.zeros(tok.shape, bool)
    for g, row in enumerate(ids):
        tok[g, : len(row)] = row
        pm[g, int(pr.prompt_len[g]): len(row)] = True
    z, zi = np.zeros(tok.shape, np.float32), np.zeros(len(ids), np.int32)
    return Episodes(tok, z.astype(np.int32), tok != v.pad_id, pm, z, zi.astype(np.float32), pm.sum(1).astype(np.int32),
                    zi, zi, z, np.zeros(len(ids), bool))


def test_fixed_cut_never_replays_past_a_short_source():
    """Issue 45, item 2: ``fixed_cut`` cut every source at 2(h - 1) = 24 tokens whatever its length, so a
    3-token failed source ``1,$`` was replayed with its EOS and 21 pads (24 replayed tokens). The cut is
    clamped to the source's proper prefixes, ``min(24, units - 1)``, as the flaky task clamps; checked
    through ``OracleRollouts.reroll`` on a tiny model: the replayed tokens are the source's own."""
    from prs.models.qwen3 import ModelConfig, init_params
    from prs.rl.episodes import RolloutConfig
    from prs.tasks.mechanism import OracleRollouts

    fixed = make_task("arith_deep", easy_steps=12, fixed_cut=True)
    pr = fixed.train_problems(seed=0, step=0, count=2)
    src = _deep_source(pr, ["1,$", _correct_text(pr, 1)])                 # a short failure, a full trace
    assert np.asarray(src.units).tolist() == [3, 28]
    assert fixed.fixed_cuts(pr, src, np.array([2, 5])).tolist() == [2, 24]
    assert fixed.fixed_cuts(pr, src, np.array([0, 5])).tolist() == [0, 24]  # an unsteered row stays fresh
    model = ModelConfig.preset("tiny", vocab_size=fixed.vocab_size, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                               head_dim=8, d_ff=32)
    ro = OracleRollouts.from_settings(fixed, RolloutConfig(), model_cfg=model)
    ep = ro.reroll(init_params(model, jax.random.PRNGKey(0)), pr, src, np.array([2, 5]), jax.random.PRNGKey(1),
                   group_size=2)
    assert np.asarray(ep.replayed).tolist() == [2, 2, 24, 24]
    tok, p = np.asarray(ep.tokens), int(pr.prompt_len[0])
    assert fixed.cfg.vocab.decode(tok[0, p: p + 2]) == "1,"                # the source's own tokens, no EOS or pad
    assert not np.asarray(ep.policy_mask)[:2, : p + 2].any()


def test_fixed_cut_leaves_a_next_visit_calls_fresh_rows_fresh():
    """A next-visit step samples every row through ``reroll`` (an unsteered row has cut 0 and its prompt
    as source): ``fixed_cut`` cut those rows too (24 replayed tokens of padding each); they stay fresh, so
    a step that steers nothing (a random policy: no success to prefix from) replays nothing."""
    from prs.core import prefix as ps
    from prs.models.qwen3 import ModelConfig, init_params
    from prs.rl.config import EvalConfig, ScheduleConfig
    from prs.rl.trainer import RLConfig, Trainer

    task = make_task("arith_deep", easy_steps=2, fixed_cut=True)
    model = ModelConfig.preset("tiny", vocab_size=task.vocab_size, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                               head_dim=8, d_ff=32)
    rl = RLConfig(tasks_per_step=2, group_size=4, eval=EvalConfig(count=4, samples=1),
                  schedule=ScheduleConfig(kind="next_visit", pool_size=4))
    tr = Trainer(task, model, rl, ps.PrefixConfig(mode="ps_ada", n=4), seed=0)
    c = tr.collect(tr.init_state(init_params(model, jax.random.PRNGKey(0))))
    assert c.metrics["groups_steered"] == 0
    assert c.metrics["tokens_replayed"] == 0
