"""prs: pass-rate theory and training for binary-reward RL in JAX.

This file only re-exports the public API; each line names the module that defines it.
"""
from prs.advantages import group_advantages, group_pass_rates, mixed_groups  # noqa: F401
from prs import prefix  # noqa: F401
from prs.prefix import PrefixConfig, PrefixState  # noqa: F401
from prs.losses import agg_denominator, policy_loss, token_entropy, token_logprobs  # noqa: F401
from prs.model import ModelConfig, decode_step, forward, init_cache, init_params, load_hf_state_dict, prefill  # noqa: F401
from prs.sampler import Rollout, SamplerConfig, append_and_resume, bucket_length, pad_to_bucket, sample  # noqa: F401
from prs import audit, rewards, verifiers  # noqa: F401
from prs.rewards import available_rewards, binary_test_reward, fraction_test_reward, get_reward, register_reward, swe_rl_reward  # noqa: F401
from prs.verifiers import best_at_k, cap_successes_per_task, hybrid_score, orm_score, pass_at_k  # noqa: F401
from prs.audit import eqs, eqs_verdict, gold_sanity_gate  # noqa: F401
from prs import hf, math_verify  # noqa: F401
from prs.hf import load_checkpoint, save_checkpoint  # noqa: F401
from prs.math_verify import math_reward, verify_answer  # noqa: F401
from prs import analysis  # noqa: F401
