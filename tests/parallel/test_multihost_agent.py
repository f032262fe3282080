"""The multi-turn repair agent (``prs.tasks.repair_task``: its own rollouts, ``AgentRollouts``,
executing every action between sampler calls) on two localhost processes (``fsdp = 4`` over 2
CPU devices each) gives the single-process episodes: fresh episodes and Prefix Sampling re-rolls
through replay-through-execution (tokens, masks, rewards, turn counts exactly; log-probabilities
to 1e-5), and a short training run writes the same metrics, with process 1 writing nothing. Each
process feeds the sampler its own rows of every turn and executes all rows' actions (the
environment is deterministic), so observations, states and rewards are the same everywhere.

The policy is a random initialisation (no warm start, to keep the test cheap): its episodes fail,
so the run's steps steer and keep no group; the re-rolls are driven directly from demonstration
sources instead (cut half-way through their turns)."""
import json

import jax
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.models.qwen3 import ModelConfig, init_params
from prs.rl import runner
from prs.rl.episodes import Episodes
from prs.rl.trainer import RLConfig, Trainer
from prs.rl.config import EvalConfig
from prs.tasks import repair as R
from prs.tasks.agent_rollouts import action_spans
from prs.tasks.repair_task import RepairTask
from tests.parallel.test_multihost_train import _records, _same
from tests._localhost import run_processes

TASK = RepairTask(R.RepairConfig(n_lines=4, min_bugs=1, max_bugs=2, max_turns=4, report_max=2))  # few turns
MODEL = ModelConfig.preset("tiny", vocab_size=TASK.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           head_dim=8, d_ff=64)
# R = 2 x 4 = 8 rows (training, re-roll) and 4 x 2 (evaluation): two rows per device
RL = RLConfig(tasks_per_step=2, group_size=4, eval=EvalConfig(count=4, samples=2))


def run_cfg() -> runner.RunConfig:
    return runner.RunConfig(steps=1, eval_every=1, ckpt_every=0, sft_steps=0, wandb_mode="disabled", progress=False)


def episodes(mesh, out_dir, run):
    """Fresh episodes and re-rolls of demonstration sources (host arrays by name), and the summary
    of a ``runner.run`` into ``out_dir``; the same calls on one process (``mesh=None``) and on two."""
    tr = Trainer(TASK, MODEL, RL, ps.PrefixConfig(n=4), seed=0, mesh=mesh)
    params = tr.init_state(init_params(MODEL, jax.random.PRNGKey(0))).params  # laid out over the mesh
    probs = TASK.train_problems(seed=0, step=0, count=2)
    fresh = tr.rollouts.rollout(params, probs, jax.random.PRNGKey(1), group_size=4)
    src_probs = TASK.train_problems(seed=0, step=1, count=4)
    tok, mask = TASK.demonstrations(src_probs, seed=1)
    turns = np.array([len(action_spans(m)) for m in mask], np.int32)
    z = np.zeros((tok.shape[0],), np.int32)
    src = Episodes(tokens=tok, positions=np.broadcast_to(np.arange(tok.shape[1]), tok.shape), valid=tok != R.PAD,
                   policy_mask=mask, logprobs=np.zeros(tok.shape, np.float32), rewards=z.astype(np.float32),
                   units=turns, replayed=z, env_steps=turns, sampling_logprobs=np.zeros(tok.shape, np.float32),
                   truncated=z.astype(bool))
    rerolled = tr.rollouts.reroll(params, src_probs, src, np.maximum(turns // 2, 1), jax.random.PRNGKey(2),
                                  group_size=2)
    out = {f"{name}/{field}": np.asarray(v) for name, ep in (("fresh", fresh), ("reroll", rerolled))
           for field, v in ep._asdict().items()}
    summary = runner.run(TASK, MODEL, RL, ps.PrefixConfig(n=4), run, out_dir, mesh=mesh, log=lambda *a: None)
    return out, summary


@pytest.mark.slow
def test_two_process_repair_agent_rollouts_and_run_equal_single_process(tmp_path):
    want, _ = episodes(None, tmp_path / "ref", run_cfg())
    assert want["reroll/replayed"].min() > 0 and want["fresh/env_steps"].sum() > 0

    result = tmp_path / "result.npz"
    run_processes("_multihost_agent_worker.py", lambda i: [tmp_path / f"p{i}", result], cwd=tmp_path, timeout=1800, tail=6000)  # ~1 min CPU each; long waits on a loaded box

    got = np.load(result)
    assert sorted(got.files) == sorted(want)
    for key, w in want.items():
        if w.dtype.kind == "f":
            np.testing.assert_allclose(got[key], w, rtol=1e-5, atol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(got[key], w, err_msg=key)
    assert not (tmp_path / "p1").exists() or not any((tmp_path / "p1").iterdir())  # process 1 wrote nothing
    a, b = _records(tmp_path / "ref" / "metrics.jsonl"), _records(tmp_path / "p0" / "metrics.jsonl")
    assert [m["kind"] for m in a] == [m["kind"] for m in b] == ["eval", "train", "eval"]
    for i, (w, g) in enumerate(zip(a, b)):
        assert sorted(g) == sorted(w)
        for key in w:
            _same(g[key], w[key], f"record {i} key {key}: {g[key]} vs {w[key]}")
    assert json.loads((tmp_path / "p0" / "summary.json").read_text())["steps"] == 1
