"""Reusable run analysis: reading runs (``runs``), the percentile bootstrap (``bootstrap``), convergence
statistics (``stats``), gap statistics with paired CIs (``gap``), their coverage by simulation
(``coverage``), tables and figures. One study's analysis lives in ``experiments.studies``.

May import everything below it (``prs.rl``) and ``theory`` (Fig. 2); no other subpackage imports it
(``prs`` loads it on first use). Every module's public names are re-exported here."""
from prs.analysis.runs import (  # noqa: F401
    PAPER_ABLATION_STEPS,
    PAPER_ABLATION_SPEEDUP,
    PAPER_SETTLED_REROLL,
    PAPER_HEADLINE_14B,
    PAPER_EQUAL_STEP_PP,
    METHOD_ORDER,
    STATUSES,
    Run,
    clipped_step_time,
    parse_run_name,
    load_run,
    find_run_dirs,
    load_runs,
    copy_run_records,
    read_jsonl,
    read_records,
    collect_records,
    group_runs,
)
from prs.analysis.bootstrap import (  # noqa: F401
    bootstrap_ci,
    speedup_ci,
    check_boot,
    safe_ratio,
)
from prs.analysis.stats import (  # noqa: F401
    moving_average,
    eval_matrix,
    seed_mean,
    reference_level,
    first_reach,
    last_step,
    percentile_ci,
    expanded_tail,
    censoring_bound,
    bootstrap_mean,
    bootstrap_ratio_of_means,
    bootstrap_diff_of_means,
    bootstrap_band,
    curves_vs_wallclock,
    settled_reroll_rates,
    per_seed_convergence,
    analyze_task,
    analyze,
)
from prs.analysis.tables import (  # noqa: F401
    fmt,
    fmt_ci,
    runs_table,
    convergence_table,
    equal_step_table,
    bucket_table,
    to_jsonable,
)
from prs.analysis.figures import (  # noqa: F401
    plot_learning_curves,
    plot_ablation,
    plot_controller,
    plot_fig2,
    plot_gap_curves,
    plot_gap_speedups,
)
from prs.analysis.gap import (  # noqa: F401
    gap_levels,
    crossing_steps,
    cost_at_steps,
    auc,
    window_mean_at,
    common_horizon,
    restricted_steps,
    restricted_speedup,
    gap_compare,
    gap_task,
)
