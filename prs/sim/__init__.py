"""The many-seed simulator: GRPO-family training with Prefix Sampling on a synthetic learner.

May import ``prs.core`` only (advantages and the prefix controller); the Hydra sweep over it is
``experiments.simulate``.
"""
from prs.sim.simulator import (  # noqa: F401
    DIFFICULTIES,
    Difficulty,
    Rollouts,
    SimConfig,
    SimParams,
    initial_theta,
    log_likelihood,
    make_train,
    policy_gradient,
    sample_rollouts,
    simulate,
    steps_to_reach,
    success_prob,
)
