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

# Names of one study's analysis, which lives in experiments.studies: importing one from here is an
# ImportError that names its module in one line.
MOVED = {"trap": "experiments.studies.trap", "decisive": "experiments.studies.decisive",
         "notebook": "experiments.studies.notebook", "notebook_runs": "experiments.studies.notebook",
         "make_tiny_runs": "experiments.studies.notebook", "tiny_run_dir": "experiments.studies.notebook",
         "find_run_root": "experiments.studies.notebook", "TrapRun": "experiments.studies.trap",
         "load_trap_run": "experiments.studies.trap", "load_trap_runs": "experiments.studies.trap",
         "trap_cells": "experiments.studies.trap", "analyze_trap": "experiments.studies.trap",
         "budget_cuts": "experiments.studies.trap", "theory_predictions": "experiments.studies.trap",
         "trap_section": "experiments.studies.trap", "plot_trap_curves": "experiments.studies.trap",
         "plot_trap_theory": "experiments.studies.trap", "collect_trap_records": "experiments.studies.trap",
         "arm_label": "experiments.studies.decisive", "arm_stats": "experiments.studies.decisive",
         "head_to_head": "experiments.studies.decisive", "verdict": "experiments.studies.decisive",
         "arms_table": "experiments.studies.decisive", "lm_arms": "experiments.studies.decisive",
         "lm_variant": "experiments.studies.decisive", "task_variants": "experiments.studies.decisive"}


def __getattr__(name: str):
    """An ImportError naming the new module for a name in ``MOVED`` (so ``from prs.analysis import trap``
    says where it went); AttributeError otherwise."""
    if name in MOVED:
        raise ImportError(f"prs.analysis.{name} moved to {MOVED[name]} (study code lives in experiments/studies)")
    raise AttributeError(f"module 'prs.analysis' has no attribute {name!r}")
