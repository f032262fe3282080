"""One study's analysis each: the partial-pass trap (``trap``), the decisive comparison of Prefix Sampling
against its controls (``decisive``), the trap collapse diagnosis (``trap_collapse``), notebook helpers
(``notebook``). Reusable statistics stay in ``prs.analysis``.

May import ``prs`` and ``theory``; the command lines in ``experiments`` import it, never the reverse.
"""
