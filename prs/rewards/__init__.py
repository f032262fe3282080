"""Rewards and verifiers: test-based rewards, SWE-RL similarity, the reward registry
(``scoring``), Pass@k / Best@k / hybrid / capping (``verifiers``), the EQS audit and gold gate
(``audit``), math answer checking (``math_verify``).

May import ``prs.core`` only; host-side or jittable functions over explicit arrays.
"""
from prs.rewards.scoring import (  # noqa: F401
    RewardFn,
    SweRlResult,
    available_rewards,
    binary_test_reward,
    fraction_test_reward,
    get_reward,
    parse_search_replace,
    register_reward,
    render_patch,
    swe_rl_reward,
    swe_rl_rewards,
)
