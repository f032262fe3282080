"""The tiny arith set-up the trainer tests share, and its warm start, built once per test process
(test_trainer, test_training_defects, test_schedule used to build the same 60-step warm start each)."""
import functools

from prs.models.qwen3 import ModelConfig
from prs.rl.trainer import RLConfig, supervised_warm_start
from prs.rl.config import EvalConfig
from prs.tasks.registry import make_task

TASK = make_task("arith", min_terms=2, max_terms=4)
MODEL = ModelConfig.preset("tiny", vocab_size=TASK.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           head_dim=8, d_ff=64)
RL = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=16, samples=1))


@functools.lru_cache(maxsize=None)
def warm_params():
    """A short warm start: enough for mixed groups (pass rates strictly between 0 and 1). Never donated:
    ``Trainer.init_state`` copies the parameters it is given."""
    return supervised_warm_start(TASK, MODEL, steps=60, batch=32, lr=3e-3, seed=0, log=None)
