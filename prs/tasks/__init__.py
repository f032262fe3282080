"""Tasks and their environments: problems, prompts, verifiers, demonstrations, rollouts.

May import ``prs.core``, ``prs.models``, ``prs.rewards`` and ``prs.rl.episodes`` (the ``Episodes``
type), never the trainer or the run loop. Importing this package registers every shipped task
(``arith``, ``arith_deep``, ``arith_recovery``, ``flaky_chain``, ``math_jsonl``, ``mathds``, ``repair``, ``trap``) with ``prs.tasks.registry``.
"""
from prs.tasks import arith, flaky_task, math_jsonl, mathds, mechanism, repair_task, trap_task  # noqa: F401  (each registers itself)
from prs.tasks.arith import (  # noqa: F401
    EVAL_SEED,
    ArithConfig,
    ArithTask,
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
from prs.tasks.registry import available_tasks, make_task, register_task  # noqa: F401
from prs.tasks.vocab import VOCAB, Vocab  # noqa: F401
