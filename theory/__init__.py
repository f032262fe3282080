"""theory: pass-rate metrics, their finite-N expectations, optimality checks, the partial-pass trap."""

from theory.buckets import BucketTable, bucket_table
from theory.figure import figure_data, plot_fig2
from theory.grpo import (
    advantage_moments,
    canonical_rewards,
    expected_policy_gradient,
    expected_squared_advantage,
)
from theory.metrics import (
    advantage_energy,
    binomial_expectation,
    contrast_pairs,
    empirical_entropy,
    expected_contrast_pairs,
    expected_contrast_pairs_closed_form,
    expected_empirical_entropy,
    expected_group_variance,
    expected_group_variance_closed_form,
    expected_survival,
    filter_survival,
    group_reward_variance,
    group_survives,
    reward_entropy,
)
from theory.optimum import MetricOptimum, OptimumClaimError, OptimumReport, check_optimum, metric_names
from theory.partial_pass import (
    PartialPassReport,
    TypeAdvantages,
    break_even_p_honest,
    contrast_probability,
    expected_reward_honest,
    grpo_type_advantages,
    partial_pass_analysis,
    surface_reward,
    type_probabilities,
)
