"""Tests of the arith task's hard operation (``ArithConfig(hard_op=...)``, issue #16's regime tasks).

References: a pure-Python evaluator of the prompt string (left to right, ``*`` multiplies, no
precedence), a pure-Python checker of the demonstrations' grammar that recomputes every step from
the value written before it, binomial bands for the configured error rates, and digests of the
plain task's problems and demonstrations recorded with the code before ``hard_op`` existed.
"""
import dataclasses
import hashlib

import numpy as np
import pytest

from prs.tasks import ArithConfig, continue_demonstrations, demonstrations, make_problems, problems_from_strings
from prs.tasks import eval_problems, make_task, verify
from prs.tasks.arith import _heldout
from prs.tasks.vocab import HARD_VOCAB, VOCAB

HARD = ArithConfig(min_terms=3, max_terms=9, demo_error_rate=0.1, demo_hard_error_rate=0.6, demo_fix_rate=0.5)


# ----------------------------------------------------------------------------- references
def ref_eval(prompt: str, m: int) -> tuple[list[int], list[str], int]:
    """(terms, operators, answer) of ``^a+b*c=`` evaluated left to right mod m."""
    body = prompt.lstrip("^").rstrip("_")
    assert body.endswith("=")
    body = body[:-1]
    terms, ops = [int(c) for c in body[0::2]], list(body[1::2])
    s = terms[0]
    for op, a in zip(ops, terms[1:]):
        s = (s * a if op == "*" else s + a) % m
    return terms, ops, s


def ref_check(terms: list[int], ops: list[str], solution: str, m: int):
    """Per attempt, per written value: (step k, was it wrong given the value written before it)."""
    scratch, final = solution.rstrip("$").split("#")
    out = []
    for att in scratch.split("!"):
        vals = [int(x) for x in att.split(",")]
        prev, steps = terms[0], []
        for k, v in enumerate(vals, start=1):
            want = (prev * terms[k] if ops[k - 1] == "*" else prev + terms[k]) % m
            steps.append((k, v != want))
            prev = v
        out.append((vals, steps))
    assert len(out[-1][0]) == len(terms) - 1 and int(final) == out[-1][0][-1]
    return out


def _prompts(p, cfg):
    return [cfg.vocab.decode(p.prompt[i, : int(p.prompt_len[i])]) for i in range(len(p.answer))]


# ----------------------------------------------------------------------------- the plain task is unchanged
def _digest(cfg):
    from prs.tasks.arith import continue_demonstrations as cont

    h = hashlib.sha256()
    for split in ("train", "eval"):
        p = make_problems(cfg, seed=3, count=64, split=split)
        for x in p[:5]:
            h.update(np.ascontiguousarray(x).tobytes())
        d = demonstrations(p, cfg, seed=4)
        h.update(d.tokens.tobytes())
        h.update(d.loss_mask.tobytes())
        h.update(cont(p, d.tokens, p.prompt_len + 1, cfg, seed=5).tokens.tobytes())
    return h.hexdigest()[:16]


def test_plain_task_is_bit_identical_to_before_hard_op():
    # digests computed with the code of main@7a2110d (before hard_op existed)
    assert _digest(ArithConfig()) == "ba0e3d2b0ba70532"
    assert _digest(ArithConfig(min_terms=3, max_terms=9, modulus=7, demo_error_rate=0.3)) == "f22a6bc1a740c701"
    # the repr (so the warm-start cache key of prs.rl.runner) of a plain config is the old one
    assert repr(ArithConfig()) == (
        "ArithConfig(min_terms=2, max_terms=7, modulus=10, term_weights=None, demo_error_rate=0.2, "
        "demo_fix_rate=0.5, max_fix_delay=1, max_restarts=1, eval_every=8)")
    assert "hard_op='late'" in repr(dataclasses.replace(HARD, hard_op="late"))
    assert ArithConfig().vocab is VOCAB and len(VOCAB) == 18
    assert (make_problems(ArithConfig(), seed=0, count=32).hard_step == 0).all()


# ----------------------------------------------------------------------------- problems
@pytest.mark.parametrize("op", ["late", "early", "uniform"])
def test_hard_problems_match_the_python_reference(op):
    cfg = dataclasses.replace(HARD, hard_op=op)
    assert cfg.vocab is HARD_VOCAB and make_task("arith", hard_op=op).vocab_size == 19
    p = make_problems(cfg, seed=1, count=600)
    where = []
    for i, s in enumerate(_prompts(p, cfg)):
        terms, ops, ans = ref_eval(s, cfg.modulus)
        n = int(p.n_terms[i])
        assert terms == p.terms[i, :n].tolist() and ops.count("*") == 1 and int(p.answer[i]) == ans
        h = ops.index("*") + 1
        assert h == int(p.hard_step[i])
        where.append((h, n))
    h, n = np.array(where).T
    if op == "late":
        assert (h == n - 1).all()
    elif op == "early":
        assert (h == 1).all()
    else:  # uniform over 1 … n-1: every position occurs, and P(h = 1 | n) ≈ 1/(n-1) (4-sigma band)
        for nn in range(3, 10):
            sel = n == nn
            assert set(h[sel]) == set(range(1, nn)), nn
            frac, q = (h[sel] == 1).mean(), 1 / (nn - 1)
            assert abs(frac - q) < 4 * np.sqrt(q * (1 - q) / sel.sum()) + 1e-9
    # deterministic in the seed
    np.testing.assert_array_equal(make_problems(cfg, seed=1, count=600).prompt, p.prompt)


def test_heldout_hash_includes_the_hard_step_and_splits_are_disjoint():
    rng = np.random.default_rng(0)
    t = rng.integers(0, 10, size=(4000, 9)).astype(np.int32)
    n = np.full(4000, 9, np.int32)
    a = _heldout(t, n, 10, 8, np.full(4000, 2, np.int32))
    b = _heldout(t, n, 10, 8, np.full(4000, 5, np.int32))
    assert (a != b).mean() > 0.1  # the same digits with the '*' elsewhere are another prompt
    np.testing.assert_array_equal(_heldout(t, n, 10, 8, np.zeros(4000, np.int32)), _heldout(t, n, 10, 8))
    cfg = dataclasses.replace(HARD, hard_op="uniform", min_terms=3, max_terms=4)
    key = lambda p: set(_prompts(p, cfg))  # noqa: E731
    tr, ev = make_problems(cfg, seed=0, count=3000), eval_problems(cfg, count=300)
    assert not key(tr) & key(ev)
    np.testing.assert_array_equal(ev.prompt, eval_problems(cfg, count=300).prompt)


def test_problems_from_strings_round_trip_and_errors():
    for op in ("late", "early", "uniform"):
        cfg = dataclasses.replace(HARD, hard_op=op)
        p = make_problems(cfg, seed=2, count=50)
        q = problems_from_strings(cfg, _prompts(p, cfg))
        for x, y in zip(p, q):
            np.testing.assert_array_equal(x, y)
    u = dataclasses.replace(HARD, hard_op="uniform")
    assert problems_from_strings(u, ["3+5*2+7="]).answer.tolist() == [3]  # ((3+5)*2+7) mod 10
    with pytest.raises(ValueError, match="hard_op='none'"):
        problems_from_strings(ArithConfig(), ["3+5*2+7="])
    with pytest.raises(ValueError, match="exactly one"):
        problems_from_strings(u, ["3+5+2+7="])
    with pytest.raises(ValueError, match="exactly one"):
        problems_from_strings(u, ["3*5*2+7="])
    with pytest.raises(ValueError, match="last operator"):
        problems_from_strings(dataclasses.replace(HARD, hard_op="late"), ["3+5*2+7="])
    with pytest.raises(ValueError, match="first operator"):
        problems_from_strings(dataclasses.replace(HARD, hard_op="early"), ["3+5*2+7="])


def test_config_errors_name_the_field_and_allowed_values():
    with pytest.raises(ValueError, match=r"hard_op must be one of \['none', 'late', 'early', 'uniform'\]"):
        ArithConfig(hard_op="middle")
    with pytest.raises(ValueError, match="demo_hard_error_rate"):
        ArithConfig(hard_op="late", demo_hard_error_rate=1.5)
    with pytest.raises(ValueError, match="unknown parameter"):
        make_task("arith", hard_ops="late")


# ----------------------------------------------------------------------------- demonstrations
def test_error_free_hard_demonstrations_are_correct():
    for op in ("late", "early", "uniform"):
        cfg = dataclasses.replace(HARD, hard_op=op)
        p = make_problems(cfg, seed=3, count=200)
        d = demonstrations(p, cfg, seed=0, error_rate=0.0, hard_error_rate=0.0)
        lens = p.prompt_len + d.loss_mask.sum(1)
        np.testing.assert_array_equal(np.asarray(verify(p.answer, d.tokens, p.prompt_len, lens)), 1.0)
        for i, s in enumerate(_prompts(p, cfg)):
            terms, ops, _ = ref_eval(s, cfg.modulus)
            sol = cfg.vocab.decode(d.tokens[i][d.loss_mask[i]])
            att = ref_check(terms, ops, sol, cfg.modulus)
            assert len(att) == 1 and not any(w for _, w in att[0][1])


@pytest.mark.parametrize("op", ["late", "uniform"])
def test_demonstrations_err_on_the_hard_step_at_its_own_rate(op):
    cfg = dataclasses.replace(HARD, hard_op=op, demo_fix_rate=1.0, max_restarts=3)
    p = make_problems(cfg, seed=4, count=700)
    d = demonstrations(p, cfg, seed=4)
    lens = p.prompt_len + d.loss_mask.sum(1)
    reward = np.asarray(verify(p.answer, d.tokens, p.prompt_len, lens))
    hard = [0, 0]  # [wrong, written]
    easy = [0, 0]
    for i, s in enumerate(_prompts(p, cfg)):
        terms, ops, ans = ref_eval(s, cfg.modulus)
        h = ops.index("*") + 1
        att = ref_check(terms, ops, cfg.vocab.decode(d.tokens[i][d.loss_mask[i]]), cfg.modulus)
        for vals, steps in att:
            for k, wrong in steps:
                acc = hard if k == h else easy
                acc[0] += wrong
                acc[1] += 1
        for vals, steps in att[:-1]:  # every restart follows a real error, flagged within the delay
            bad = [k for k, w in steps if w]
            assert bad and len(vals) - bad[0] <= cfg.max_fix_delay
        assert reward[i] == float(att[-1][0][-1] == ans)
    for (w, c), rate in ((hard, 0.6), (easy, 0.1)):
        assert abs(w / c - rate) < 4 * np.sqrt(rate * (1 - rate) / c), (w, c, rate)
    assert 0 < reward.mean() < 1


def test_continuations_honour_the_hard_step():
    """An error-free solver continuing a correct prefix cut before the hard step multiplies at that
    step (it solves every problem, which it would not if it added there)."""
    cfg = dataclasses.replace(HARD, hard_op="late", min_terms=5, max_terms=5)
    p = make_problems(cfg, seed=5, count=100)
    good = demonstrations(p, cfg, seed=0, error_rate=0.0, hard_error_rate=0.0)
    cut = p.prompt_len + 2 * 2  # two values and their separators written, before step 4 (the '*')
    c = continue_demonstrations(p, good.tokens, cut, cfg, seed=1, error_rate=0.0, hard_error_rate=0.0)
    lens = cut + c.loss_mask.sum(1)
    np.testing.assert_array_equal(np.asarray(verify(p.answer, c.tokens, p.prompt_len, lens)), 1.0)
    np.testing.assert_array_equal(c.tokens[:, : int(cut[0])], good.tokens[:, : int(cut[0])])


def test_warm_start_problems_widen_only_the_supervised_data():
    task = make_task("arith", min_terms=8, max_terms=10, hard_op="late", warm_start_min_terms=2)
    ws = task.warm_start_problems(seed=0, step=0, count=900)
    assert set(ws.n_terms.tolist()) == set(range(2, 11)) and (ws.hard_step == ws.n_terms - 1).all()
    assert ws.prompt.shape[1:] == task.train_problems(seed=0, step=0, count=4).prompt.shape[1:]
    tr = task.train_problems(seed=0, step=0, count=300)
    assert tr.n_terms.min() == 8 and task.eval_problems(count=64).n_terms.min() == 8
    plain = make_task("arith", min_terms=8, max_terms=10, hard_op="late")
    for x, y in zip(plain.warm_start_problems(seed=3, step=2, count=16), plain.train_problems(seed=3, step=2, count=16)):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="warm_start_min_terms"):
        ArithConfig(max_terms=5, warm_start_min_terms=6)


def test_step_accuracy_counts_each_steps_own_correctness():
    from prs.tasks.arith import step_accuracy

    cfg = dataclasses.replace(HARD, hard_op="uniform", min_terms=4, max_terms=4)
    p = problems_from_strings(cfg, ["3+5*2+7="])  # h = 2: 8, 8*2 = 6, 6+7 = 3
    gens = ["8,6,3#3$", "8,7,4#4$", "9!8,6,3#3$", "#3$"]  # all right; hard wrong (then 7+7=4 right); k=1 wrong; none
    width = cfg.max_len
    toks = np.full((4, width), cfg.vocab.pad_id, np.int32)
    for i, g in enumerate(gens):
        row = cfg.vocab.encode("^3+5*2+7=" + g)
        toks[i, : len(row)] = row
    assert step_accuracy(p, toks, 4, cfg) == {"add": (4, 5), "hard": (1, 2)}
