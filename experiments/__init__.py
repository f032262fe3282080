"""Hydra entry points. The only place where a config becomes objects; `prs/` never imports Hydra."""
