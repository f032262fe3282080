"""Tests of the modular-addition reasoning task (prs.tasks).

References used: a pure-Python reward function and a pure-Python solution checker written here from
the task's stated grammar, the closed-form pass rate of an error-making solver without fixes
(a Markov chain over the accumulated offset mod m), and hand-written rollouts.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.tasks import (
    VOCAB,
    ArithConfig,
    answer_start,
    continue_demonstrations,
    demonstrations,
    describe,
    eval_problems,
    make_problems,
    problems_from_strings,
    simulate_pass_counts,
    simulate_prefix_replay,
    verify,
)

CFG = ArithConfig()


# ----------------------------------------------------------------------------- references
def ref_reward(prompt: str, rollout: str, length: int | None = None) -> float:
    """Pure-Python reward: ``rollout`` is the full row as characters (prompt included)."""
    body = prompt[1:-1] if prompt.startswith("^") else prompt[:-1]
    answer = sum(int(c) for c in body.split("+")) % 10
    row = rollout if length is None else rollout[:length]
    gen = row[len(prompt):]
    if "$" not in gen:
        return 0.0
    gen = gen[: gen.index("$")]
    if gen.count("#") != 1:
        return 0.0
    scratch, final = gen.split("#")
    if any(c not in "0123456789,!" for c in scratch):
        return 0.0
    return float(final == str(answer))


def check_solution(terms: list[int], solution: str, modulus: int):
    """Pure-Python checker of a demonstration. Returns (n_steps_written, n_wrong_steps,
    attempts) where a step is wrong when it differs from (previously written value + term) mod m,
    and attempts is a list of (values, true_running_sums) per '!'-separated attempt."""
    assert solution.endswith("$")
    scratch, final = solution[:-1].split("#")
    attempts = scratch.split("!")
    parsed = []
    wrong = 0
    for att in attempts:
        vals = [int(x) for x in att.split(",")]
        truth = []
        prev_written, acc = terms[0], terms[0]
        for k, v in enumerate(vals, start=1):
            wrong += v != (prev_written + terms[k]) % modulus
            prev_written = v
            acc = (acc + terms[k]) % modulus
            truth.append(acc)
        parsed.append((vals, truth))
    assert len(parsed[-1][0]) == len(terms) - 1, (terms, solution)
    assert int(final) == parsed[-1][0][-1], "the answer is the last running sum written"
    return sum(len(v) for v, _ in parsed), wrong, parsed


def rows(prompts, gens, width=None):
    texts = [p + g for p, g in zip(prompts, gens)]
    width = width or max(map(len, texts))
    toks = np.full((len(texts), width), VOCAB.pad_id, np.int32)
    for i, t in enumerate(texts):
        toks[i, : len(t)] = VOCAB.encode(t)
    return toks, np.array([len(t) for t in texts], np.int32)


# ----------------------------------------------------------------------------- vocab
def test_vocab_roundtrip_and_errors():
    s = "^3+5+2+7=8,1,8!8,0,7#7$__"
    assert VOCAB.decode(VOCAB.encode(s)) == s
    assert len(VOCAB) == len(set(VOCAB.tokens)) == 18
    assert (VOCAB.pad_id, VOCAB.bos_id, VOCAB.eos_id) == (0, 1, 2)
    assert [VOCAB.encode(str(d))[0] - VOCAB.digit0_id for d in range(10)] == list(range(10))
    with pytest.raises(ValueError, match="'x'"):
        VOCAB.encode("3+x")
    with pytest.raises(ValueError, match="ids"):
        VOCAB.decode([0, 99])


# ----------------------------------------------------------------------------- verifier
HAND = [  # (generated text, expected reward) for the prompt ^3+5+2+7= (answer 7)
    ("8,0,7#7$", 1.0),  # correct
    ("8,0,6#6$", 0.0),  # wrong answer
    ("8,0,7#6$", 0.0),  # right scratch, wrong answer
    ("8,0,7$", 0.0),  # missing '#'
    ("8,0,7#$", 0.0),  # missing digit
    ("8,0,7#77$", 0.0),  # extra digit before EOS
    ("8,0,7#7#7$", 0.0),  # two '#'
    ("+=+=#7$", 0.0),  # garbage scratch
    ("8^0,7#7$", 0.0),  # special token in scratch
    ("8,1,8!8,0,7#7$", 1.0),  # answer after a correction
    ("8,1!8,0,7#7$", 1.0),
    ("8,1,8#8!7$", 0.0),  # '!' after '#' does not undo the answer
    ("#7$", 1.0),  # no scratch work: not graded
    ("8,0,7#7", 0.0),  # truncated: no EOS
    ("8,0,7#7$#3$++", 1.0),  # everything after the first EOS is ignored
    ("8,0,7#7$__^^", 1.0),
    ("$8,0,7#7$", 0.0),  # immediate EOS
    ("", 0.0),
]


def test_verify_hand_written_cases_and_reference():
    prompt = "^3+5+2+7="
    cfg = dataclasses.replace(CFG, max_terms=4)
    probs = problems_from_strings(cfg, [prompt[1:]] * len(HAND))
    assert probs.answer.tolist() == [7] * len(HAND)
    toks, lens = rows([prompt] * len(HAND), [g for g, _ in HAND])
    got = np.asarray(verify(probs.answer, toks, probs.prompt_len, lens))
    assert got.dtype == np.float32
    want = np.array([w for _, w in HAND], np.float32)
    ref = np.array([ref_reward(prompt, prompt + g) for g, _ in HAND], np.float32)
    np.testing.assert_array_equal(ref, want)  # the reference agrees with the hand labels
    np.testing.assert_array_equal(got, want)
    # lengths=L (unknown): padding after EOS is ignored, rows without EOS still fail.
    got_full = np.asarray(verify(probs.answer, toks, probs.prompt_len, np.full_like(lens, toks.shape[1])))
    np.testing.assert_array_equal(got_full, want)


def test_verify_lengths_truncate():
    prompt = "^3+5+2+7="
    toks, lens = rows([prompt] * 3, ["8,0,7#7$"] * 3)
    probs = problems_from_strings(dataclasses.replace(CFG, max_terms=4), ["3+5+2+7="] * 3)
    cut = np.array([lens[0], lens[0] - 1, len(prompt)], np.int32)  # full, EOS cut off, nothing
    got = np.asarray(verify(probs.answer, toks, probs.prompt_len, cut))
    np.testing.assert_array_equal(got, [1.0, 0.0, 0.0])
    assert got.tolist() == [ref_reward(prompt, prompt + "8,0,7#7$", int(c)) for c in cut]


def test_verify_matches_reference_on_random_rollouts():
    rng = np.random.default_rng(0)
    cfg = CFG
    probs = make_problems(cfg, seed=3, count=300)
    alphabet = "0123456789,!#$+_"
    prompts, gens = [], []
    for i in range(300):
        p = VOCAB.decode(probs.prompt[i, : probs.prompt_len[i]])
        ans = str(int(probs.answer[i]))
        kind = i % 3
        if kind == 0:  # near-miss: a correct-looking tail with random mutations
            g = list("1,2,3#" + ans + "$")
            for _ in range(rng.integers(0, 3)):
                g[rng.integers(len(g))] = alphabet[rng.integers(len(alphabet))]
            g = "".join(g)
        elif kind == 1:
            g = "".join(alphabet[j] for j in rng.integers(0, len(alphabet), rng.integers(0, 12)))
        else:
            g = "".join(alphabet[j] for j in rng.integers(0, 12, rng.integers(0, 6))) + "#" + ans + "$"
        prompts.append(p)
        gens.append(g)
    toks, lens = rows(prompts, gens, width=40)
    got = np.asarray(jax.jit(verify)(probs.answer, toks, probs.prompt_len, lens))
    ref = np.array([ref_reward(p, p + g) for p, g in zip(prompts, gens)], np.float32)
    np.testing.assert_array_equal(got, ref)
    assert 0.2 < ref.mean() < 0.8  # both outcomes exercised


def test_verify_jits_once_per_shape():
    f = jax.jit(lambda *args: verify(*args))  # a fresh cache, not shared with other tests
    probs = make_problems(CFG, seed=1, count=16)
    demo = demonstrations(probs, CFG, seed=1)
    lens = probs.prompt_len + demo.loss_mask.sum(1)
    f(probs.answer, demo.tokens, probs.prompt_len, lens).block_until_ready()
    n0 = f._cache_size()
    demo2 = demonstrations(probs, CFG, seed=2)
    f(probs.answer, demo2.tokens, probs.prompt_len, probs.prompt_len + demo2.loss_mask.sum(1))
    assert f._cache_size() == n0 == 1


def test_verify_rejects_bad_shapes():
    toks = np.zeros((4, 10), np.int32)
    with pytest.raises(ValueError, match="tokens"):
        verify(np.zeros(4, np.int32), toks[0], np.zeros(4, np.int32), np.zeros(4, np.int32))
    with pytest.raises(ValueError, match="prompt_len"):
        verify(np.zeros(4, np.int32), toks, np.zeros(3, np.int32), np.zeros(4, np.int32))
    with pytest.raises(ValueError, match="answer"):
        verify(np.zeros((4, 1), np.int32), toks, np.zeros(4, np.int32), np.zeros(4, np.int32))


def test_answer_start():
    prompt = "^3+5+2+7="
    gens = ["8,0,7#7$", "8,0,7", "8$#", ""]
    toks, lens = rows([prompt] * 4, gens, width=20)
    got = np.asarray(answer_start(toks, np.full(4, len(prompt), np.int32), lens))
    want = [len(prompt) + min([g.find(c) for c in "#$" if c in g] or [len(g)]) for g in gens]
    assert got.tolist() == want


# ----------------------------------------------------------------------------- problems
def test_problems_are_well_formed_and_deterministic():
    probs = make_problems(CFG, seed=7, count=200)
    again = make_problems(CFG, seed=7, count=200)
    other = make_problems(CFG, seed=8, count=200)
    for a, b in zip(probs, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(probs.terms, other.terms)
    assert probs.prompt.shape == (200, CFG.prompt_width) and probs.prompt.dtype == np.int32
    assert set(probs.n_terms.tolist()) == set(range(CFG.min_terms, CFG.max_terms + 1))
    for i in range(200):
        n = int(probs.n_terms[i])
        text = VOCAB.decode(probs.prompt[i])
        terms = [int(c) for c in text[1 : 2 * n : 2]]
        assert text == "^" + "+".join(map(str, terms)) + "=" + "_" * (CFG.prompt_width - 2 * n - 1)
        assert terms == probs.terms[i, :n].tolist() and (probs.terms[i, n:] == -1).all()
        assert probs.prompt_len[i] == 2 * n + 1
        assert probs.answer[i] == sum(terms) % CFG.modulus


def test_splits_are_disjoint_and_eval_is_fixed():
    cfg = dataclasses.replace(CFG, max_terms=3)  # small space: overlap would show
    train = make_problems(cfg, seed=0, count=3000)
    ev = eval_problems(cfg, count=200)
    key = lambda p: {tuple(t[t >= 0]) for t in p.terms}  # noqa: E731
    assert not key(train) & key(ev)
    np.testing.assert_array_equal(ev.terms, eval_problems(cfg, count=200).terms)
    allp = make_problems(cfg, seed=0, count=3000, split="all")
    assert key(allp) & key(ev)  # the unsplit stream does contain held-out prompts


def test_config_and_argument_errors():
    with pytest.raises(ValueError, match="min_terms"):
        ArithConfig(min_terms=1)
    with pytest.raises(ValueError, match="modulus"):
        ArithConfig(modulus=11)
    with pytest.raises(ValueError, match="term_weights"):
        ArithConfig(min_terms=2, max_terms=4, term_weights=(1.0, 1.0))
    with pytest.raises(ValueError, match="demo_error_rate"):
        ArithConfig(demo_error_rate=1.5)
    with pytest.raises(ValueError, match="split"):
        make_problems(CFG, seed=0, count=4, split="test")
    with pytest.raises(ValueError, match="prompts"):
        problems_from_strings(CFG, ["3+5"])
    with pytest.raises(ValueError, match="problems.prompt"):
        demonstrations(make_problems(ArithConfig(max_terms=4), seed=0, count=2), CFG, seed=0)
    assert "mod 10" in describe(CFG)


# ----------------------------------------------------------------------------- demonstrations
def _texts(probs, demo, i):
    p = int(probs.prompt_len[i])
    row = VOCAB.decode(demo.tokens[i])
    sol = VOCAB.decode(demo.tokens[i][demo.loss_mask[i]])
    return row, sol, p


def test_error_free_demonstrations_are_correct():
    probs = make_problems(CFG, seed=0, count=300)
    demo = demonstrations(probs, CFG, seed=0, error_rate=0.0)
    lens = probs.prompt_len + demo.loss_mask.sum(1)
    assert demo.tokens.shape == demo.loss_mask.shape == (300, CFG.max_len)
    for i in range(300):
        row, sol, p = _texts(probs, demo, i)
        n = int(probs.n_terms[i])
        steps, wrong, parsed = check_solution(probs.terms[i, :n].tolist(), sol, CFG.modulus)
        assert (steps, wrong, len(parsed)) == (n - 1, 0, 1)
        assert row[:p] == VOCAB.decode(probs.prompt[i, :p])
        assert not demo.loss_mask[i, :p].any() and row[p + len(sol):].strip("_") == ""
    np.testing.assert_array_equal(np.asarray(verify(probs.answer, demo.tokens, probs.prompt_len, lens)), 1.0)
    np.testing.assert_array_equal(np.asarray(verify(probs, demo.tokens, probs.prompt_len, lens)), 1.0)


def test_noisy_demonstrations_are_correct_up_to_injected_errors():
    cfg = dataclasses.replace(CFG, demo_error_rate=0.2, demo_fix_rate=1.0, max_restarts=3, max_fix_delay=1)
    probs = make_problems(cfg, seed=1, count=600)
    demo = demonstrations(probs, cfg, seed=1)
    lens = probs.prompt_len + demo.loss_mask.sum(1)
    reward = np.asarray(verify(probs.answer, demo.tokens, probs.prompt_len, lens))
    total_steps = total_wrong = restarts = 0
    for i in range(600):
        _, sol, _ = _texts(probs, demo, i)
        n = int(probs.n_terms[i])
        steps, wrong, parsed = check_solution(probs.terms[i, :n].tolist(), sol, cfg.modulus)
        total_steps += steps
        total_wrong += wrong
        restarts += len(parsed) - 1
        assert len(parsed) - 1 <= cfg.max_restarts
        for vals, truth in parsed[:-1]:  # every restart follows a real error, flagged in time
            bad = [k for k, (v, t) in enumerate(zip(vals, truth)) if v != t]
            assert bad and len(vals) - 1 - bad[0] <= cfg.max_fix_delay
        vals, truth = parsed[-1]
        if len(parsed) - 1 < cfg.max_restarts:  # fixes left, so every error was fixed
            assert vals == truth
        assert reward[i] == float(vals[-1] == truth[-1])
    # the injected per-step error rate is the configured one (binomial 4-sigma band)
    rate = total_wrong / total_steps
    assert abs(rate - 0.2) < 4 * np.sqrt(0.2 * 0.8 / total_steps)
    assert restarts > 50 and 0 < reward.mean() < 1


def test_demonstrations_deterministic_by_seed():
    probs = make_problems(CFG, seed=0, count=100)
    a, b, c = (demonstrations(probs, CFG, seed=s) for s in (5, 5, 6))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert not np.array_equal(a.tokens, c.tokens)


# ----------------------------------------------------------------------------- difficulty
def closed_form_pass_rate(n: int, e: float, m: int) -> float:
    """No fixes: each of the n-1 steps adds offset 0 w.p. 1-e, else U{1..m-1}; success iff the
    total offset is 0 mod m. P0_k = P0_{k-1}(1-e) + (1-P0_{k-1}) e/(m-1)."""
    p0 = 1.0
    for _ in range(n - 1):
        p0 = p0 * (1 - e) + (1 - p0) * e / (m - 1)
    return p0


def test_difficulty_knob_and_closed_form_pass_rate():
    cfg = dataclasses.replace(CFG, min_terms=2, max_terms=8)
    e = 0.2
    k, n_terms = simulate_pass_counts(cfg, step_error_rate=e, fix_rate=0.0, n_problems=1400, n_rollouts=8)
    rates = []
    for n in range(2, 9):
        sel = n_terms == n
        emp = k[sel].sum() / (8 * sel.sum())
        want = closed_form_pass_rate(n, e, cfg.modulus)
        assert abs(emp - want) < 4 * np.sqrt(want * (1 - want) / (8 * sel.sum())), (n, emp, want)
        rates.append(emp)
    assert all(a > b for a, b in zip(rates, rates[1:]))  # more terms -> lower pass rate
    # more terms -> longer solutions and prompts
    probs = make_problems(cfg, seed=0, count=400)
    demo = demonstrations(probs, cfg, seed=0, error_rate=0.0)
    sol_len = demo.loss_mask.sum(1)
    means = [sol_len[probs.n_terms == n].mean() for n in range(2, 9)]
    assert means == [2 * (n - 1) + 2 for n in range(2, 9)]


def test_noisy_policy_fills_every_bucket():
    """The default demonstration noise, as a policy, puts groups of 8 in every mixed bucket."""
    k, _ = simulate_pass_counts(
        CFG, step_error_rate=CFG.demo_error_rate, fix_rate=CFG.demo_fix_rate, n_problems=1000, seed=0
    )
    hist = np.bincount(k, minlength=9)
    assert (hist[1:8] >= 0.005 * 1000).all(), hist
    assert hist[1:8].sum() > 0.7 * 1000, hist


# ----------------------------------------------------------------------------- prefixes
def _prefixed(cfg, prompts, prefixes):
    probs = problems_from_strings(cfg, prompts)
    toks, lens = rows(["^" + p for p in prompts], prefixes, width=cfg.max_len)
    return probs, toks, lens


def test_continuations_keep_the_prefix_and_mask_it():
    cfg = dataclasses.replace(CFG, max_terms=4, max_restarts=2)
    prefixes = ["", "8", "8,", "8,1", "8,1,", "8,1,8", "8,1,8!", "8,1,8!8,0", "8,0,7"] * 20
    probs, toks, lens = _prefixed(cfg, ["3+5+2+7="] * len(prefixes), prefixes)
    cont = continue_demonstrations(probs, toks, lens, cfg, seed=0, error_rate=0.1, fix_rate=0.5)
    for i, pre in enumerate(prefixes):
        row = VOCAB.decode(cont.tokens[i]).rstrip("_")
        assert row.startswith("^3+5+2+7=" + pre) and row.endswith("$")
        assert not cont.loss_mask[i, : lens[i]].any() and cont.loss_mask[i].sum() == len(row) - lens[i]
        check_solution([3, 5, 2, 7], row[len("^3+5+2+7="):], 10)  # prefix + continuation parse
    with pytest.raises(ValueError, match="not a solution prefix"):
        continue_demonstrations(*_prefixed(cfg, ["3+5+2+7="], ["8,0,7,"]), cfg, seed=0)
    with pytest.raises(ValueError, match="prefix_len"):
        probs, toks, lens = _prefixed(cfg, ["3+5+2+7="], ["8"])
        continue_demonstrations(probs, toks, lens - 5, cfg, seed=0)


def test_failure_prefix_is_recoverable_and_success_prefix_easier():
    cfg = dataclasses.replace(CFG, max_terms=6, max_restarts=1, max_fix_delay=1)
    count = 1500
    prompt = "3+5+2+7+4+1="  # running sums 8,0,7,1,2
    # failure prefix (a wrong second step, propagated) and an error-free solver: success iff the
    # error is noticed, i.e. with probability fix_rate; with no restart left it never recovers.
    for pre, want in [("8,1,8", 0.4), ("8,1", 0.4), ("9!8,1,8", 0.0)]:
        probs, toks, lens = _prefixed(cfg, [prompt] * count, [pre] * count)
        cont = continue_demonstrations(probs, toks, lens, cfg, seed=1, error_rate=0.0, fix_rate=0.4)
        r = np.asarray(verify(probs.answer, cont.tokens, probs.prompt_len, lens + cont.loss_mask.sum(1)))
        assert abs(r.mean() - want) <= 4 * np.sqrt(want * (1 - want) / count) + 1e-9, (pre, r.mean())
    # success prefix with j correct steps: the rest is n-1-j noisy steps (closed form, no fixes)
    e = 0.25
    for j, pre in enumerate(["", "8,", "8,0,", "8,0,7,"]):
        probs, toks, lens = _prefixed(cfg, [prompt] * count, [pre] * count)
        cont = continue_demonstrations(probs, toks, lens, cfg, seed=2, error_rate=e, fix_rate=0.0)
        r = np.asarray(verify(probs.answer, cont.tokens, probs.prompt_len, lens + cont.loss_mask.sum(1)))
        want = closed_form_pass_rate(6 - j, e, 10)
        assert abs(r.mean() - want) < 4 * np.sqrt(want * (1 - want) / count), (pre, r.mean(), want)


def test_prefix_replay_moves_buckets_toward_half():
    out = simulate_prefix_replay(CFG, step_error_rate=0.2, fix_rate=0.5, n_problems=400, cut=0.5, seed=0)
    assert set(out) >= {1, 2, 6, 7}
    for k, (groups, p) in out.items():
        assert groups > 0
        if k < 4:
            assert p > k / 8, (k, p)  # success prefix: easier
        else:
            assert 0 < p < k / 8, (k, p)  # failure prefix: harder, still recoverable
