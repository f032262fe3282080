"""What a run tells its user (issue #45): the progress bar names the step of the held-out pass@1 it
shows and closes with the final evaluation; ``summary.json`` records the warm start (its cache, the
loss of each cycle, the attempts, the held-out demonstration loss), and loading the cache
reports the same record. Tiny shapes (``tests/_arith_tiny.py``), a few steps."""
from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np

from prs.core import prefix as ps
from prs.rl.runner import WARM_START_FACTS, RunConfig, run
from prs.rl.trainer import sft_loss, supervised_warm_start
from tests._arith_tiny import MODEL, RL, TASK

PC = ps.PrefixConfig(mode="ps_ada", n=8)
# a target no 4-step cycle reaches: 2 attempts x 2 cycles, the attempt with the lower last cycle kept
WARM = dict(sft_steps=4, sft_batch=8, sft_lr=3e-3, sft_seed=0, sft_until_loss=0.0, sft_max_cycles=2, sft_attempts=2)
COMMON = dict(steps=1, seed=4, eval_every=1, ckpt_every=0, wandb_mode="disabled", **WARM)


def test_bar_names_the_eval_step_and_summary_records_the_warm_start(tmp_path, capsys):
    logs = []
    s = run(TASK, MODEL, RL, PC, RunConfig(progress=True, base_dir=str(tmp_path / "base"), **COMMON),
            tmp_path / "a", log=logs.append)
    err = capsys.readouterr().err.splitlines()
    bar = [x for x in err if x.startswith("[") and " 1/1 " in x]
    assert bar and " eval@0 " in bar[-1], err  # the last step's line shows the evaluation at step 0 ...
    assert err[-1] == f"final eval@1 {s['eval_final']:.3f}", err  # ... and the final one follows, named
    assert s["eval_steps"] == [0, 1]
    assert any(f"final held-out pass@1 {s['eval_final']:.3f} at step 1" in x for x in logs), logs

    w = json.loads((tmp_path / "a" / "summary.json").read_text())["warm_start"]
    assert w["source"] == "built" and w["attempts"] == 2 and w["reached_target"] is False
    assert [len(c) for c in w["cycle_losses"]] == [2, 2] and w["steps_total"] == 16
    last = [c[-1] for c in w["cycle_losses"]]
    assert w["kept_attempt"] == 1 + int(np.argmin(last))
    # the first cycle alone (one cycle of one attempt, the plain path) has the same loss
    one = {}
    supervised_warm_start(TASK, MODEL, steps=4, batch=8, lr=3e-3, seed=0, log=None, report=one)
    assert one["cycle_losses"] == [[w["cycle_losses"][0][0]]] and one["reached_target"] is None
    cache = tmp_path / "base" / w["cache"].rsplit("/", 1)[-1]
    assert w["cache"] == str(cache.resolve()) and json.loads((cache / WARM_START_FACTS).read_text())["heldout_loss"] == w["heldout_loss"]
    assert any(f"held-out demonstration loss {w['heldout_loss']:.4f}" in x for x in logs), logs

    # reference: the held-out loss as tests/_warm_start_worker.py measures it, one batch of 512, on the
    # cached parameters; loading them fills the same record, now from the cache
    from prs.rl.runner import base_params

    w2 = {}
    params = base_params(TASK, MODEL, RunConfig(**COMMON), tmp_path / "base", log=lambda *a: None, facts=w2)
    assert w2["source"] == "cache" and {k: w2[k] for k in w if k != "source"} == {k: w[k] for k in w if k != "source"}
    probs = TASK.train_problems(seed=99, step=10**7, count=512) if not hasattr(TASK, "warm_start_problems") \
        else TASK.warm_start_problems(seed=10_000_000, step=10**7, count=512)
    tokens, mask = TASK.demonstrations(probs, seed=424_242)
    ref = float(sft_loss(params, jnp.asarray(tokens), jnp.asarray(mask), cfg=MODEL))
    assert abs(w["heldout_loss"] - ref) < 1e-4, (w["heldout_loss"], ref)
