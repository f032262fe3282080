"""The mathds task (prs/tasks/mathds.py) against string-level references: the committed rows, a
Python exact-match grader, the module counts of the pool and the evaluation set."""
import collections

import jax
import numpy as np
import pytest

from prs.tasks import make_task
from prs.tasks import mathds as M


@pytest.fixture(scope="module")
def task():
    return make_task("mathds")


def _grade(text: str, answer: str) -> float:
    """Reference grader on strings: the generated text up to the first '$' equals the answer, and a
    '$' was generated."""
    return float("$" in text and text.split("$", 1)[0] == answer)


def test_every_character_of_the_file_is_one_token_and_round_trips():
    rows = M.load_rows()
    chars = set("".join(r["question"] + r["answer"] for r in rows))
    assert chars == set(M.ALPHABET), sorted(chars ^ set(M.ALPHABET))
    assert not {M.PAD, M.BOS, M.EOS, M.END_Q} & chars
    for r in rows[::997]:
        assert M.VOCAB.decode(M.VOCAB.encode(r["question"])) == r["question"]
    with pytest.raises(ValueError, match="not in the vocabulary"):
        M.VOCAB.encode("é")


def test_prompts_and_demonstrations_are_the_rows_strings(task):
    p = task.train_problems(seed=3, step=5, count=32)
    tokens, mask = task.demonstrations(p, seed=0)
    for j in range(32):
        row = task.rows[int(p.row[j])]
        assert task.decode(p.prompt[j, :p.prompt_len[j]]) == f"^{row['question']}#"
        text = task.decode(tokens[j])
        assert text.rstrip("_") == f"^{row['question']}#{row['answer']}$"
        assert task.decode(tokens[j][mask[j]]) == row["answer"] + "$"
        assert task.rows[int(p.row[j])]["split"] == "train"


def test_verify_equals_the_string_grader_on_perturbed_rollouts(task):
    rng = np.random.default_rng(0)
    p = task.train_problems(seed=0, step=0, count=64)
    tokens, _ = task.demonstrations(p, seed=0)
    width = tokens.shape[1]
    lengths = np.full(64, width, np.int32)
    cases, want = [], []
    for j in range(64):  # one perturbation per row, drawn from the failure modes a policy shows
        t = tokens[j].copy()
        start, n = int(p.prompt_len[j]), int(p.answer_len[j])
        kind = j % 6
        if kind == 1:      # a wrong character inside the answer
            t[start + rng.integers(n)] = M.VOCAB.encode("7")[0] if t[start] != M.VOCAB.encode("7")[0] else M.VOCAB.encode("3")[0]
        elif kind == 2:    # an extra character before EOS
            t[start + n + 1] = M.VOCAB.eos_id
            t[start + n] = M.VOCAB.encode("0")[0]
        elif kind == 3:    # no EOS at all
            t[start + n:] = M.VOCAB.encode("1")[0]
        elif kind == 4:    # EOS too early (a prefix of the answer)
            t[start + n - 1] = M.VOCAB.eos_id
        elif kind == 5:    # junk after a correct EOS is ignored
            t[start + n + 1:] = M.VOCAB.encode("9")[0]
        cases.append(t)
        want.append(_grade(task.decode(t[start:]), task.rows[int(p.row[j])]["answer"]))
    cases = np.stack(cases)
    got = np.asarray(jax.jit(M.verify)(p.answer, p.answer_len, cases, p.prompt_len, lengths))
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    assert 0 < got.sum() < 64
    # the EOS must lie inside the valid length: cut every row just before its EOS
    short = p.prompt_len + p.answer_len
    np.testing.assert_array_equal(np.asarray(M.verify(p.answer, p.answer_len, tokens, p.prompt_len, short)), 0.0)
    np.testing.assert_array_equal(np.asarray(M.verify(p.answer, p.answer_len, tokens, p.prompt_len, short + 1)), 1.0)


def test_pool_warm_rows_and_evaluation_are_disjoint_and_balanced(task):
    pool = task.pool_ids
    assert pool.size == task.rl_pool == len(set(pool.tolist()))
    counts = collections.Counter(task.rows[i]["module"] for i in pool)
    assert set(counts.values()) == {task.rl_pool // 12} and len(counts) == 12
    levels = collections.Counter(task.rows[i]["level"] for i in pool)
    assert max(levels.values()) - min(levels.values()) <= 12  # the levels in turn within each module
    assert not set(pool.tolist()) & set(task.warm_ids.tolist())
    n_train = sum(r["split"] == "train" for r in task.rows)
    assert pool.size + task.warm_ids.size == n_train
    e = task.eval_problems(count=600)
    split = collections.Counter(e.split.tolist())
    assert split == {1: 600, 2: task.eval_extrapolate}
    first = collections.Counter(task.rows[i]["module"] for i in e.row[:600])
    kept = collections.Counter(r["module"] for r in task.rows if r["split"] == "interpolate")
    top = max(first.values())  # round-robin over the 12 modules: a module short of rows gives all it has
    assert len(first) == 12 and all(c == kept[m] or c >= top - 1 for m, c in first.items()), (first, kept)
    questions = {task.rows[i]["question"] for i in e.row}
    assert not questions & {task.rows[i]["question"] for i in pool}
    assert all(len(task.rows[i]["question"]) <= task.max_question_len for i in e.row)


def test_held_apart_pool_keeps_the_smaller_pools_warm_start(task):
    """rl_pool 2400 with held_apart 480: its first 40 rows per module are the 480-pool's, the warm-start rows
    and the warm-start cache key are the 480-pool's, the other 1,920 pool rows are warm-start rows (checked
    by set arithmetic on the row ids, not through ``warm_ids``' own formula)."""
    big = make_task("mathds", rl_pool=2400, held_apart=480)
    small, pool = set(task.pool_ids.tolist()), big.pool_ids.tolist()
    assert len(pool) == len(set(pool)) == 2400 and small <= set(pool)
    per_module = collections.defaultdict(list)
    for i in pool:
        per_module[big.rows[i]["module"]].append(i)
    assert all(set(ids[:40]) <= small and len(ids) == 200 for ids in per_module.values())
    train = {i for i, r in enumerate(task.rows) if r["split"] == "train"}
    np.testing.assert_array_equal(np.sort(big.warm_ids), sorted(train - small))
    assert set(pool) - small <= set(big.warm_ids.tolist())
    assert big.warm_start_key == task.warm_start_key != make_task("mathds", rl_pool=2400).warm_start_key
    assert make_task("mathds", rl_pool=480, held_apart=480).warm_start_key == task.warm_start_key


def test_train_problems_are_deterministic_distinct_and_from_the_pool(task):
    a = task.train_problems(seed=1, step=7, count=16)
    b = task.train_problems(seed=1, step=7, count=16)
    c = task.train_problems(seed=1, step=8, count=16)
    np.testing.assert_array_equal(a.row, b.row)
    assert not np.array_equal(a.row, c.row)
    assert len(set(a.row.tolist())) == 16 and set(a.row.tolist()) <= set(task.pool_ids.tolist())
    whole = task.train_problems(seed=0, step=999_999, count=task.rl_pool)  # a selector's pool draw
    assert sorted(whole.row.tolist()) == sorted(task.pool_ids.tolist())
    with pytest.raises(ValueError, match="rl_pool"):
        task.train_problems(seed=0, step=999_999, count=task.rl_pool + 1)


def test_episode_metrics_are_the_split_and_module_means(task):
    e = task.eval_problems(count=24)
    rng = np.random.default_rng(1)
    rewards = rng.integers(0, 2, size=(e.split.size, 2)).astype(np.float32)  # [B, 2 samples]
    ep = collections.namedtuple("Ep", "rewards")(rewards.reshape(-1))
    m = task.episode_metrics(e, ep)
    per = rewards.mean(axis=1)
    assert m["interpolate/pass_at_1"] == pytest.approx(per[e.split == 1].mean())
    assert m["extrapolate/pass_at_1"] == pytest.approx(per[e.split == 2].mean())
    for i in range(e.split.size):  # every module key is its rows' mean
        name = f"{M.SPLITS[e.split[i]]}/{task.rows[int(e.row[i])]['module']}"
        rows = [j for j in range(e.split.size)
                if f"{M.SPLITS[e.split[j]]}/{task.rows[int(e.row[j])]['module']}" == name]
        assert m[name] == pytest.approx(per[rows].mean())
    assert task.episode_metrics(task.train_problems(seed=0, step=0, count=4), ep) == {}


@pytest.mark.parametrize("params, key", [
    (dict(rl_pool=100), "rl_pool"), (dict(max_question_len=4), "max_question_len"),
    (dict(eval_extrapolate=10_000), "eval_extrapolate"), (dict(modules=["nope"]), "unknown modules"),
    (dict(pool=3), "unknown parameter"), (dict(held_apart=960), "held_apart"),
    (dict(rl_pool=960, held_apart=100), "held_apart"), (dict(held_apart=0), "held_apart"),
])
def test_bad_parameters_are_one_line_errors(params, key):
    with pytest.raises(ValueError, match=key) as e:
        make_task("mathds", **params)
    assert "\n" not in str(e.value)


def test_eval_count_beyond_the_kept_rows_is_refused(task):
    with pytest.raises(ValueError, match="eval.count"):
        task.eval_problems(count=5000)
