"""The RL loop: ``config`` (``RLConfig`` and its parts: optimiser, loss, schedule, evaluation; the
rollout part ``RolloutConfig`` lives in ``episodes``), ``episodes`` (the ``Episodes`` type and
single-turn rollouts with prefix replay), ``trainer`` (collect -> advantages -> masked update),
``loss_menu`` (the trainer's optional loss and advantage options from ``RLConfig.loss``), ``runner``
(checkpoints, logging, resume).

May import ``prs.core``, ``prs.models``, ``prs.parallel`` and ``prs.rewards``; tasks are passed in
as objects, never imported (``runner`` may load a checkpoint through ``prs.models.hf``).
"""
