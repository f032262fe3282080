"""Procedurally generated tasks with exactly verifiable answers (re-exports only)."""
from prs.tasks.arith import (  # noqa: F401
    EVAL_SEED,
    ArithConfig,
    Demonstrations,
    Problems,
    answer_start,
    continue_demonstrations,
    demonstrations,
    describe,
    eval_problems,
    make_problems,
    problems_from_strings,
    simulate_pass_counts,
    simulate_prefix_replay,
    verify,
)
from prs.tasks.vocab import VOCAB, Vocab  # noqa: F401
