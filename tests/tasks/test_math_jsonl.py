"""The real-model path on a CPU: the ``math_jsonl`` task (prompts, deterministic problem stream,
host-side rewards), the shipped data, and the Hydra ``+experiment=math_qwen3_tiny`` run end to end
on a tiny random Qwen3 checkpoint (the tokenizer itself: ``tests/models/test_tokenizer.py``)."""
import json
import types

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from prs.models import hf  # noqa: E402
from prs.rewards import math_verify as mv  # noqa: E402
from prs.tasks import math_jsonl  # noqa: E402
from prs.tasks.math_jsonl import tokenizer_texts  # noqa: E402


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_qwen3")
    hf.make_tiny_checkpoint(path, seed=0, texts=tokenizer_texts())
    return path


@pytest.fixture(scope="module")
def task(ckpt):
    return math_jsonl.make_math_jsonl(tokenizer=str(ckpt), max_new_tokens=24, backend="fallback")


def test_prompts_are_the_chat_rendering(task):
    probs = task.eval_problems(count=5)
    prompt, plen = task.prompts(probs)
    assert prompt.shape == (5, task.width) and task.width % 16 == 0 and task.dropped == 0
    for b in range(5):
        row = task.eval_rows[int(probs.index[b])]
        assert task.decode(prompt[b, :plen[b]]) == task.prompt_text(row["problem"])
        assert task.prompt_text(row["problem"]).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert (prompt[b, plen[b]:] == task.pad_id).all()


def test_train_stream_deterministic_and_epochs(task):
    n = len(task.rows)
    a = task.train_problems(seed=3, step=5, count=7)
    b = task.train_problems(seed=3, step=5, count=7)
    np.testing.assert_array_equal(a.index, b.index)
    assert not np.array_equal(a.index, task.train_problems(seed=4, step=5, count=7).index)
    # one full epoch of steps visits every problem exactly once (n = 24 = 4 steps x 6)
    seen = np.concatenate([task.train_problems(seed=1, step=s, count=6).index for s in range(n // 6)])
    np.testing.assert_array_equal(np.sort(seen), np.arange(n))
    sub = task.take(a, np.array([2, 0]))
    np.testing.assert_array_equal(sub.prompt, a.prompt[[2, 0]])


def _rollout(task, probs, responses, *, group_size):
    """A stand-in ``Rollout`` (tokens, lengths) of the task prompts followed by ``responses``."""
    prompt, plen = task.prompts(probs)
    ids = [task.tokenizer.encode(r) for r in responses]
    width = prompt.shape[1] + max(len(x) for x in ids) + 1
    tokens = np.full((len(responses), width), task.pad_id, np.int32)
    lengths = np.zeros(len(responses), np.int32)
    for r, x in enumerate(ids):
        p = plen[r // group_size]
        tokens[r, :p] = prompt[r // group_size, :p]
        tokens[r, p:p + len(x)] = x
        lengths[r] = p + len(x)
    return types.SimpleNamespace(tokens=tokens, lengths=lengths)


def test_rewards_grade_responses_after_the_prompt(task):
    probs = task.train_problems(seed=0, step=0, count=3)
    gold = [task.rows[int(i)]["answer"] for i in probs.index]
    responses = []
    for g in gold:
        responses += [f"so \\boxed{{{g}}}<|im_end|>", "\\boxed{-999}<|im_end|>",
                      f"\\boxed{{-999}}<|im_end|> junk after eos \\boxed{{{g}}}"]
    r = np.asarray(task.rewards(probs, _rollout(task, probs, responses, group_size=3), group_size=3))
    want = np.array([[mv.verify_answer(s.split("<|im_end|>")[0], g, backend="fallback") for s in
                      responses[3 * b:3 * b + 3]] for b, g in enumerate(gold)], np.float32)
    np.testing.assert_array_equal(r, want)
    np.testing.assert_array_equal(r, np.tile([1.0, 0.0, 0.0], (3, 1)))
    assert task.rewards_jittable is False
    with pytest.raises(ValueError, match="B\\*N"):
        task.rewards(probs, _rollout(task, probs, responses, group_size=3), group_size=2)


def test_demonstrations_mask_the_solution(task):
    probs = task.train_problems(seed=0, step=1, count=2)
    tokens, mask = task.demonstrations(probs, seed=0)
    for b in range(2):
        sol = task.tokenizer.decode(tokens[b][mask[b]])
        row = task.rows[int(probs.index[b])]
        assert sol.startswith(task.tokenizer.decode(task.tokenizer.encode(row["solution"]))[:20])
        assert not mask[b, :probs.prompt_len[b]].any()


def test_shipped_solutions_verify():
    rows = math_jsonl.load_rows(str(math_jsonl.SHIPPED))
    assert len(rows) >= 16
    backends = ["fallback"] + (["math-verify"] if mv.has_math_verify() else [])
    for r in rows:
        for be in backends:
            assert mv.verify_answer(r["solution"], r["answer"], backend=be), (r, be)
        assert not mv.verify_answer(r["solution"], "(" + r["answer"] + ")+1", backend="fallback")


def test_dataset_errors(tmp_path, ckpt):
    with pytest.raises(ValueError, match="not a file"):
        math_jsonl.load_rows("no-such-org/no-such-dataset")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "1+1?"}) + "\n")
    with pytest.raises(ValueError, match="lacks 'problem'"):
        math_jsonl.load_rows(str(bad))
    with pytest.raises(ValueError, match="longer than max_prompt_len"):
        math_jsonl.make_math_jsonl(tokenizer=str(ckpt), max_prompt_len=8)


def test_hydra_math_experiment_end_to_end(ckpt, tmp_path):
    """``+experiment=math_qwen3_tiny``: loads the checkpoint (not a warm start), builds the task from
    its tokenizer, and runs two RL steps with evaluation through the real trainer."""
    from hydra import compose, initialize_config_dir
    import pathlib

    from experiments.config import validate
    from experiments.train import build
    from prs.rl.runner import base_params, run

    conf = pathlib.Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        dcfg = compose(config_name="config", overrides=[
            "+experiment=math_qwen3_tiny", f"model.checkpoint={ckpt}", "task.params.max_new_tokens=8",
            "task.params.backend=fallback", f"sft.base_dir={tmp_path}/base"])
    cfg = validate(dcfg)
    task, model_cfg, rl, prefix, run_cfg = build(cfg)
    assert task.name == "math_jsonl" and model_cfg.vocab_size == 384 and run_cfg.init_checkpoint == str(ckpt)
    _, want = hf.load_checkpoint(ckpt)
    got = base_params(task, model_cfg, run_cfg, tmp_path / "base")
    import jax
    jax.tree.map(np.testing.assert_array_equal, got, want)
    summary = run(task, model_cfg, rl, prefix, run_cfg, tmp_path / "out", log=lambda *a: None)
    assert summary["steps"] == 2 and summary["eval_steps"] == [0, 2]
    lines = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert all(np.isfinite(m["loss"]) for m in lines if m["kind"] == "train" and "loss" in m)


@pytest.mark.parametrize("size", ["0_6b", "4b", "8b"])
def test_accelerator_experiments_compose(size, tmp_path):
    """The accelerator presets compose and validate, mirror the paper's math setting (N = 8,
    clip-high GRPO++ baseline, non-thinking, no warm start), and a missing checkpoint is a clear error."""
    from hydra import compose, initialize_config_dir
    import pathlib

    from experiments.config import validate
    from experiments.train import build

    conf = pathlib.Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        dcfg = compose(config_name="config", overrides=[f"+experiment=math_qwen3_{size}",
                                                        f"model.checkpoint={tmp_path}/absent",
                                                        f"sft.base_dir={tmp_path}/base"])
    cfg = validate(dcfg)
    assert cfg.method.mode == "baseline" and cfg.algo.group_size == 8 and cfg.loss.estimator == "rloo"
    assert (cfg.loss.clip_low, cfg.loss.clip_high, cfg.loss.kl_coef) == (0.2, 0.28, 0.0)
    assert cfg.task.params["enable_thinking"] is False and cfg.sft.steps == 0
    assert cfg.task.params["tokenizer"] == f"{tmp_path}/absent" and cfg.model.preset == f"qwen3_{size}"
    with pytest.raises(ValueError, match="tokenizer.json does not exist"):
        build(cfg)


def test_rewards_with_a_process_pool_equal_serial(task):
    """``reward_workers=2``: the task's [B, N] rewards equal the serial scoring's (issue #29 item 3g)."""
    import dataclasses

    probs = task.train_problems(seed=0, step=1, count=4)
    gold = [task.rows[int(i)]["answer"] for i in probs.index]
    responses = []
    for g in gold:
        responses += [f"so \\boxed{{{g}}}<|im_end|>", "\\boxed{-999}<|im_end|>", f"{g}<|im_end|>"]
    ro = _rollout(task, probs, responses, group_size=3)
    serial = np.asarray(task.rewards(probs, ro, group_size=3))
    pooled = np.asarray(dataclasses.replace(task, reward_workers=2).rewards(probs, ro, group_size=3))
    np.testing.assert_array_equal(pooled, serial)
    assert serial[:, 0].all() and not serial[:, 1].any()
