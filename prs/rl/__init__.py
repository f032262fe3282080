"""The RL loop: ``config`` (``RLConfig`` and its parts), ``episodes`` (the ``Episodes`` type, single-turn
rollouts with prefix replay, ``RolloutConfig``), ``trainer`` (collect -> advantages -> masked update),
``loss_menu`` (the optional loss and advantage options of ``RLConfig.loss``), ``runner`` (checkpoints, resume).

May import ``prs.core``, ``prs.models``, ``prs.parallel`` and ``prs.rewards``; tasks are passed in
as objects, never imported (``runner`` may load a checkpoint through ``prs.models.hf``).
"""
