"""prs: pass-rate theory and training for binary-reward RL in JAX.

The rooms, bottom to top (imports point only downward; ``tests/test_layout.py`` checks it):
``core`` (kernels) < ``parallel`` (meshes) < ``models`` (decoder, sampler, checkpoints) and
``rewards`` < ``rl`` (episodes, trainer, run loop) < ``tasks`` < ``sim``, ``analysis``.
This file only re-exports the public API; each line names the module that defines it.
"""
from prs.core.advantages import group_advantages, group_pass_rates, mixed_groups  # noqa: F401
from prs.core import prefix  # noqa: F401
from prs.core.prefix import PrefixConfig, PrefixState  # noqa: F401
from prs.core.losses import agg_denominator, policy_loss, token_entropy, token_logprobs  # noqa: F401
from prs.core.advantages import whiten_advantages  # noqa: F401
from prs.core.token_weights import high_entropy_mask, rollout_correction  # noqa: F401
from prs.core.shaping import drop_truncated, overlong_penalty  # noqa: F401
from prs.parallel import distributed, sharding  # noqa: F401
from prs.models import qwen3 as model  # noqa: F401
from prs.models.qwen3 import ModelConfig, decode_step, forward, init_cache, init_params, prefill  # noqa: F401
from prs.models.lm_head import lm_head_logprobs  # noqa: F401
from prs.models import sampler  # noqa: F401
from prs.models.sampler import Rollout, SamplerConfig, append_and_resume, bucket_length, pad_to_bucket, sample  # noqa: F401
from prs.models.continuous import sample_continuous  # noqa: F401
from prs.models import hf  # noqa: F401
from prs.models.hf import load_checkpoint, load_hf_state_dict, save_checkpoint  # noqa: F401
from prs import rewards  # noqa: F401
from prs.rewards import audit, math_verify, verifiers  # noqa: F401
from prs.rewards import available_rewards, binary_test_reward, fraction_test_reward, get_reward, register_reward, swe_rl_reward  # noqa: F401
from prs.rewards.verifiers import best_at_k, cap_successes_per_task, hybrid_score, orm_score, pass_at_k  # noqa: F401
from prs.rewards.audit import eqs, eqs_verdict, gold_sanity_gate  # noqa: F401
from prs.rewards.math_verify import math_reward, verify_answer  # noqa: F401


def __getattr__(name: str):
    """``prs.analysis`` is loaded on first use (``import prs`` stays light: the kernels, not the run readers)."""
    if name == "analysis":
        import importlib

        return importlib.import_module("prs.analysis")
    raise AttributeError(f"module 'prs' has no attribute {name!r}")
