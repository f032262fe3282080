"""theory: pass-rate metrics, their finite-N expectations, optimality checks, the partial-pass trap."""
