"""What each pass-rate control buys: gradient SNR at finite N, and informative groups per generated rollout/token.

**(a) SNR of the group-relative policy gradient, exact at finite N.** Model (a score decomposed by outcome):
a rollout succeeds (r = 1) with probability p and its score is ``s = r − p + ξ``, ``E[ξ | r] = 0``,
``Var[ξ | r] = τ`` (``τ = score_noise``, in units of the squared outcome contrast ``|E[s|1] − E[s|0]|²``).
``τ = 0`` is the one-logit Bernoulli policy ``π = sigmoid(θ)`` (``∇ log π(y) = y − p``); ``τ > 0`` adds the
within-outcome score variance every token of a long response carries. The estimator of one group is

    ĝ = (1/N) Σᵢ Aᵢ sᵢ = ar_k − p a_k + (1/N) Σᵢ Aᵢ ξᵢ,     ar_k = (1/N) Σᵢ Aᵢ rᵢ,  a_k = (1/N) Σᵢ Aᵢ,

with ``A = prs.group_advantages(r, estimator)`` for the group's k successes. Over ``k ~ Binomial(N, p)``:
``E[ĝ] = Σₖ P(k)(ar_k − p a_k)`` and ``Var[ĝ] = Var_k[ar_k − p a_k] + τ Σₖ P(k) sq_k / N``
(``sq_k = (1/N)Σᵢ Aᵢ²``), ``SNR = E[ĝ]² / Var[ĝ]`` — enumerated exactly (no sampling). RLOO is unbiased,
``E[ĝ] = p(1 − p)`` (the true gradient ``dp/dθ``), and for RLOO ``ĝ = k(N−k)/(N(N−1)) + noise`` so

    SNR_RLOO = q² / (Var[k(N−k)/(N(N−1))] + τ q/(N−1)),   q = p(1−p)      <= q (N−1)/τ.

SPEED-RL (Zhang et al. 2025, arXiv:2506.09016, Thm 3.1) bounds the RLOO SNR by ``4 N p(1−p)``. In this
model the bound holds for every p whenever ``τ >= (N−1)/(4N)`` (from the last inequality), and both sides
vanish as p → 0 or 1; with ``τ = 0`` (the one-logit policy) it fails near p = 1/2 for N >= 3 (N = 8,
p = 1/2: SNR = 28 > 8): the theorem needs score noise within an outcome, which a one-parameter policy lacks.

**(b) Expected informative groups per generated rollout / token under each control.** A *pool* is a
distribution of task pass rates (atoms ``p_j`` with weights ``w_j``: a Beta on a quantile grid, a fitted
step-0 histogram, or a finite pool); task pass rates are held fixed (one step, or a slowly moving policy).
A group is *informative* when ``0 < k < N`` (probability ``s(p) = 1 − p^N − (1−p)^N``); its *signal* is
the advantage energy ``k(N−k)/N²`` (expectation ``(N−1)/N · p(1−p)``). A rollout of a task of pass rate p
costs ``p·len_success + (1−p)·len_failure`` tokens (1 and 1 = count rollouts). Controls (formulas at each
function): ``uniform``, ``dynamic_sampling`` (DAPO / verl refill with a cap), ``selective`` (GRESO's skip
rule, stationary Markov chain of each task's zero-variance streak), ``screen`` (SPEED: screen with n_init,
accept 0 < k_init < n_init, complete to N), ``ps_reroll`` (Prefix Sampling's same-step re-roll at the
controller's target) and ``predicted`` (oracle: the B tasks of highest p(1−p) of a pool of M).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from scipy import special, stats

from theory import _checks as c

ESTIMATORS = ("grpo", "dr_grpo", "rloo")
CONTROLS = ("uniform", "dynamic_sampling", "selective", "screen", "ps_reroll", "predicted")


# ----------------------------------------------------------------------------------------------- (a) SNR


def _binom_pmf(n: int, p: np.ndarray) -> np.ndarray:
    """[..., n+1] Binomial(n, p) pmf, exact at p = 0 and p = 1 (0^0 = 1)."""
    k = np.arange(n + 1)
    p = np.asarray(p, np.float64)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        logc = special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
        out = np.exp(logc + special.xlogy(k, p) + special.xlog1py(n - k, -p))
    return out


def gradient_snr(p: Any, n: int, *, estimator: str = "rloo", score_noise: float = 0.0, std_ddof: int = 1,
                 eps: float = 1e-6) -> dict[str, np.ndarray]:
    """Exact mean, variance and SNR = E[ĝ]²/Var[ĝ] of the group policy gradient (module docstring, (a)).

    ``p`` any shape in [0, 1]; ``n >= 2``. Advantages come from ``prs.group_advantages`` (via
    ``theory.grpo.advantage_moments``), so the numbers follow the kernel's conventions. At p = 0 or 1
    every group is 0/N or N/N: mean = var = 0 and SNR is reported as 0 (no signal), never NaN.
    Returns ``{"mean", "var", "snr", "bound"}`` with ``bound = 4 N p (1 − p)`` (SPEED Thm 3.1).
    """
    from theory.grpo import advantage_moments  # noqa: PLC0415 (jax-backed, imported lazily)

    c.check_choice("estimator", estimator, ESTIMATORS)
    c.check_probability("p", p)
    (n,) = c.as_group_size("n", n, minimum=2).reshape(1).tolist()
    if not (np.isfinite(score_noise) and score_noise >= 0):
        raise ValueError(f"score_noise must be a finite number >= 0, got {score_noise!r}")
    p = np.asarray(p, np.float64)
    mom = advantage_moments(n, estimator=estimator, std_ddof=std_ddof, eps=eps)
    ar, a, sq = (np.asarray(mom[key][0], np.float64) for key in ("ar", "a", "sq"))  # [K]
    pk = _binom_pmf(n, p)  # [..., K]
    g = ar - p[..., None] * a  # [..., K]
    mean = np.sum(pk * g, axis=-1)
    var = np.maximum(np.sum(pk * g * g, axis=-1) - mean ** 2, 0.0) + score_noise * np.sum(pk * sq, axis=-1) / n
    snr = np.divide(mean ** 2, var, out=np.zeros_like(mean), where=var > 1e-300)
    return {"mean": mean, "var": var, "snr": snr, "bound": 4.0 * n * p * (1.0 - p)}


def snr_bound_noise(n: int) -> float:
    """The score noise ``τ* = (N−1)/(4N)`` above which RLOO's exact SNR obeys SPEED's ``4 N p(1−p)`` for all p."""
    return (n - 1) / (4.0 * n)


# ----------------------------------------------------------------------------------------------- pools


@dataclasses.dataclass(frozen=True)
class Pool:
    """A distribution of task pass rates: atoms ``p`` [J] in [0, 1] with weights ``w`` [J] (sum 1)."""

    p: np.ndarray
    w: np.ndarray
    label: str = "pool"

    def __post_init__(self):
        p = np.asarray(self.p, np.float64).reshape(-1)
        w = np.asarray(self.w, np.float64).reshape(-1)
        if p.size == 0 or p.shape != w.shape:
            raise ValueError(f"pool needs p and w of one equal length >= 1, got {p.shape} and {w.shape}")
        c.check_probability("pool p", p)
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"pool weights must be finite, >= 0 and not all 0, got {w[:4].tolist()}")
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "w", w / w.sum())

    def mean(self, f: np.ndarray) -> float:
        return float(np.sum(self.w * f))


def finite_pool(p: Any, label: str = "finite pool") -> Pool:
    """A fixed pool of tasks, equal weights."""
    p = np.asarray(p, np.float64).reshape(-1)
    return Pool(p, np.ones_like(p), label)


def beta_pool(a: float, b: float, *, size: int = 2048, clip: tuple[float, float] | None = None) -> Pool:
    """Beta(a, b) on a quantile grid: atoms at the ``(j + 1/2)/size`` quantiles, equal weights (optionally clipped
    to ``clip = (lo, hi)``, as ``prs.sim`` clips its initial pass rates)."""
    if not (a > 0 and b > 0 and np.isfinite(a) and np.isfinite(b)):
        raise ValueError(f"beta parameters must be finite and > 0, got a={a!r}, b={b!r}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    p = stats.beta.ppf((np.arange(size) + 0.5) / size, a, b)
    if clip is not None:
        p = np.clip(p, *clip)
    return Pool(p, np.ones(size), f"Beta({a:g}, {b:g})")


def hist_pool(hist: Any) -> tuple[Pool, str]:
    """Pool from a measured step-0 histogram ``hist[k]`` (share of groups with k of N = len(hist) − 1 successes).

    Fits a Beta by the beta-binomial moments ``E[p] = E[k]/N``, ``E[p²] = E[k(k−1)]/(N(N−1))``
    (method of moments); a histogram with no excess variance over the binomial (or N = 1) gets a point
    mass at the mean. Returns (pool, a one-line description of the fit).
    """
    h = np.asarray(hist, np.float64).reshape(-1)
    if h.size < 2 or not np.all(np.isfinite(h)) or np.any(h < 0) or h.sum() <= 0:
        raise ValueError(f"--hist must be >= 2 finite shares >= 0 (k = 0..N), not all 0, got {h.tolist()}")
    h = h / h.sum()
    n = h.size - 1
    k = np.arange(n + 1)
    m = float(np.sum(h * k) / n)
    if n >= 2:
        ep2 = float(np.sum(h * k * (k - 1)) / (n * (n - 1)))
        var = ep2 - m * m
    else:
        var = 0.0
    if 0 < m < 1 and var > 1e-12:
        conc = m * (1 - m) / var - 1.0
        if conc > 0:
            a, b = m * conc, (1 - m) * conc
            pool = beta_pool(a, b)
            return Pool(pool.p, pool.w, f"hist N={n} -> Beta({a:.3g}, {b:.3g})"), (
                f"histogram over k = 0..{n} fitted by beta-binomial moments: Beta({a:.4g}, {b:.4g})")
    return Pool(np.array([m]), np.array([1.0]), f"hist N={n} -> point mass p={m:.3g}"), (
        f"histogram over k = 0..{n} has no excess variance over Binomial: point mass at p = {m:.4g}")


def _check_lengths(len_success: float, len_failure: float) -> None:
    for name, v in (("len_success", len_success), ("len_failure", len_failure)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")


# ----------------------------------------------------------------------------------------------- (b) controls


@dataclasses.dataclass(frozen=True)
class ControlRate:
    """Expected counts per training step of B groups (``groups`` = groups trained)."""

    control: str
    groups: float        # groups trained per step
    informative: float   # trained groups with 0 < k < N
    signal: float        # sum of k(N−k)/N² over the trained groups
    rollouts: float      # rollouts generated (screening, discarded batches and re-rolls included)
    tokens: float        # tokens generated
    extra: dict = dataclasses.field(default_factory=dict)

    def per_1000_rollouts(self) -> float:
        return 1000.0 * self.informative / self.rollouts if self.rollouts > 0 else 0.0

    def per_1000_tokens(self) -> float:
        return 1000.0 * self.informative / self.tokens if self.tokens > 0 else 0.0

    def signal_per_1000_rollouts(self) -> float:
        return 1000.0 * self.signal / self.rollouts if self.rollouts > 0 else 0.0

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(informative_per_1000_rollouts=self.per_1000_rollouts(),
                 informative_per_1000_tokens=self.per_1000_tokens(),
                 signal_per_1000_rollouts=self.signal_per_1000_rollouts())
        return d


def informative_prob(p: Any, n: int) -> np.ndarray:
    """``s(p) = P(0 < k < N) = 1 − p^N − (1−p)^N`` for ``k ~ Binomial(N, p)``."""
    p = np.asarray(p, np.float64)
    return np.clip(1.0 - p ** n - (1.0 - p) ** n, 0.0, 1.0)


def _signal(p: np.ndarray, n: int) -> np.ndarray:
    """``E[k(N−k)/N²] = (N−1)/N · p(1−p)``."""
    return (n - 1) / n * p * (1.0 - p)


def _length(p: np.ndarray, len_success: float, len_failure: float) -> np.ndarray:
    return p * len_success + (1.0 - p) * len_failure


def uniform(pool: Pool, *, n: int, groups: int, len_success: float = 1.0, len_failure: float = 1.0) -> ControlRate:
    """Baseline: B tasks drawn from the pool, N rollouts each; informative = B·E[s(p)]."""
    n, groups = _check_nb(n, groups)
    _check_lengths(len_success, len_failure)
    p = pool.p
    return ControlRate("uniform", groups, groups * pool.mean(informative_prob(p, n)),
                       groups * pool.mean(_signal(p, n)), groups * n,
                       groups * n * pool.mean(_length(p, len_success, len_failure)))


def _check_nb(n: Any, groups: Any) -> tuple[int, int]:
    (n,) = c.as_group_size("n", n, minimum=2).reshape(1).tolist()
    (groups,) = c.as_group_size("groups", groups, minimum=1).reshape(1).tolist()
    return n, groups


def dynamic_sampling(pool: Pool, *, n: int, groups: int, gen_groups: int, max_batches: int,
                     len_success: float = 1.0, len_failure: float = 1.0) -> ControlRate:
    """DAPO dynamic sampling with refill (Yu et al. 2025, arXiv:2503.14476; verl ``recipe/dapo``:
    ``algorithm.filter_groups``, ``data.gen_batch_size`` = G, ``max_num_gen_batches`` = C).

    Generate batches of G groups (distinct tasks drawn from the pool: each informative with probability
    ``s̄ = E[s(p)]``, independently); keep the informative groups; stop once ``>= B`` are kept or after C
    batches; train on the first B kept (verl truncates to ``train_batch_size``). With ``K_j ~ Bin(jG, s̄)``
    the kept count after j batches and T the batches generated:

        E[T] = Σ_{j=0}^{C−1} P(K_j < B),   groups trained = E[min(B, K_C)],   rollouts = N G E[T],

    tokens = E[T]·G·N·E[len] (Wald's identity: T is a stopping time of iid batches). At the cap verl raises
    an error; here the step trains on the ``min(B, K_C)`` groups it has. ``extra``: ``expected_batches``,
    ``cap_prob = P(T = C) = P(K_{C−1} < B)``, ``short_prob = P(K_C < B)`` (the step trains fewer than B). A pool with ``s̄ = 0`` (all 0/N or N/N) spends all C batches and trains 0.
    """
    n, groups = _check_nb(n, groups)
    (gen_groups,) = c.as_group_size("gen_groups", gen_groups).reshape(1).tolist()
    (max_batches,) = c.as_group_size("max_batches", max_batches).reshape(1).tolist()
    _check_lengths(len_success, len_failure)
    p = pool.p
    s_bar = pool.mean(informative_prob(p, n))
    j = np.arange(max_batches)  # [C]
    below = stats.binom.cdf(groups - 1, j * gen_groups, s_bar)  # P(K_j < B), [C]
    e_batches = float(np.sum(below))
    kc = np.arange(max_batches * gen_groups + 1)
    pk = stats.binom.pmf(kc, max_batches * gen_groups, s_bar)
    trained = float(np.sum(pk * np.minimum(kc, groups)))
    sig_per_inf = pool.mean(_signal(p, n)) / s_bar if s_bar > 0 else 0.0
    rollouts = n * gen_groups * e_batches
    return ControlRate("dynamic_sampling", trained, trained, trained * sig_per_inf, rollouts,
                       rollouts * pool.mean(_length(p, len_success, len_failure)),
                       extra=dict(expected_batches=e_batches, cap_prob=float(below[-1]),
                                  short_prob=float(stats.binom.cdf(groups - 1, max_batches * gen_groups, s_bar)),
                                  informative_prob=s_bar))


def greso_stationary(p: Any, n: int, *, p_easy: float = 0.5, p_hard: float = 0.5, floor: float = 0.01
                     ) -> np.ndarray:
    """Long-run probability that GRESO rolls a task of fixed pass rate p out when it comes up (per consideration).

    GRESO (Zheng et al. 2025, arXiv:2506.02177; Infini-AI-Lab/GRESO ``presampling_selector.py``,
    ``easy/hard_probabilistic_skip``): a task whose last c visits were all-correct (easy) is skipped with
    probability ``1 − max(p_easy^c, floor)``; all-wrong (hard) likewise with p_hard; c = 0 is never
    skipped. A skipped task keeps its history. (The code's thresholds, mean reward >= 0.98 / <= 0.11,
    are k = N / k = 0 for N <= 9; here k = N / k = 0 for every N.) p_easy and p_hard are held fixed (the
    paper adapts them by ±0.01 per epoch toward a target zero-variance share; defaults 0.5, floor 0.01).

    The streak is a Markov chain per consideration: from state (type, c) the task is rolled out with
    probability π(c); then with prob. ``a = p^N`` it goes to (easy, c+1 if easy else 1), with ``h = (1−p)^N``
    to (hard, ...), else to 0; skipped, it stays. States with ``π(c) = floor`` behave alike and are lumped
    into one (exact). The stationary distribution μ is solved as a linear system; returns ``Σ μ(s) π(s)``.
    """
    p = np.asarray(p, np.float64)
    if not (0 < floor <= 1):
        raise ValueError(f"floor must lie in (0, 1], got {floor!r}")
    for name, v in (("p_easy", p_easy), ("p_hard", p_hard)):
        if not 0 <= v <= 1:
            raise ValueError(f"{name} must lie in [0, 1], got {v!r}")

    def levels(base):  # keep probabilities max(base^c, floor), c = 1..C (C: first c at the floor)
        if base >= 1.0:
            return np.ones(1)  # never skipped: one state
        out = []
        while not out or out[-1] > floor:
            out.append(max(base ** (len(out) + 1), floor))
        return np.asarray(out)

    ke, kh = levels(p_easy), levels(p_hard)
    ce, ch = ke.size, kh.size
    S = 1 + ce + ch  # state 0, easy streak 1..ce at 1..ce (last lumped), hard 1..ch at ce+1..ce+ch (last lumped)
    keep = np.concatenate([[1.0], ke, kh])  # [S]
    nxt_e = np.array([min(s + 1, ce) if 1 <= s <= ce else 1 for s in range(S)])  # all-correct visit
    nxt_h = np.array([ce + min(s - ce + 1, ch) if s > ce else ce + 1 for s in range(S)])  # all-wrong visit
    out = np.empty(p.shape)
    for idx, pv in np.ndenumerate(p):
        a, h = pv ** n, (1 - pv) ** n
        P = np.diag(1.0 - keep)  # [S, S] skipped: stays
        np.add.at(P, (np.arange(S), nxt_e), keep * a)
        np.add.at(P, (np.arange(S), nxt_h), keep * h)
        P[:, 0] += keep * (1.0 - a - h)
        # stationary: mu (P - I) = 0, sum mu = 1
        A = np.vstack([(P - np.eye(S)).T, np.ones((1, S))])
        b = np.zeros(S + 1)
        b[-1] = 1.0
        mu = np.linalg.lstsq(A, b, rcond=None)[0]
        out[idx] = float(np.clip(mu @ keep, 0.0, 1.0))
    return out


def selective(pool: Pool, *, n: int, groups: int, p_easy: float = 0.5, p_hard: float = 0.5, floor: float = 0.01,
              len_success: float = 1.0, len_failure: float = 1.0) -> ControlRate:
    """GRESO's pre-rollout skip in its stationary regime (``greso_stationary``), the batch refilled from the pool.

    Every task comes up equally often; a task of pass rate p is rolled out with long-run probability
    ``ρ(p)``; the outcome of a visit is independent of the streak, so a step of B rolled-out groups has
    ``B·Σ w ρ s / Σ w ρ`` informative groups. Skipping costs no rollouts (``extra["skip_share"]``).
    """
    n, groups = _check_nb(n, groups)
    _check_lengths(len_success, len_failure)
    p = pool.p
    rho = greso_stationary(p, n, p_easy=p_easy, p_hard=p_hard, floor=floor)
    wr = pool.w * rho
    z = wr.sum()  # > 0: rho >= floor
    q = wr / z  # distribution of the rolled-out tasks
    return ControlRate("selective", groups, groups * float(np.sum(q * informative_prob(p, n))),
                       groups * float(np.sum(q * _signal(p, n))), groups * n,
                       groups * n * float(np.sum(q * _length(p, len_success, len_failure))),
                       extra=dict(skip_share=1.0 - float(z)))


def _screen_terms(p: np.ndarray, n: int, n_init: int) -> tuple[np.ndarray, np.ndarray]:
    """Acceptance ``P(0 < k_init < n_init)`` and ``E[k(N−k)/N² · 1{accepted}]`` per atom, by enumeration of
    ``k = k_init + k_rest``, ``k_init ~ Bin(n_init, p)``, ``k_rest ~ Bin(N − n_init, p)``."""
    pi = _binom_pmf(n_init, p)  # [J, n_init+1]
    pr = _binom_pmf(n - n_init, p)  # [J, N-n_init+1]
    ki = np.arange(n_init + 1)
    acc_mask = (ki > 0) & (ki < n_init)
    accept = np.sum(pi * acc_mask, axis=-1)
    k = ki[:, None] + np.arange(n - n_init + 1)[None, :]  # [n_init+1, rest+1]
    e = k * (n - k) / n ** 2
    sig = np.einsum("ji,jr,ir->j", pi * acc_mask, pr, e)
    return accept, sig


def screen(pool: Pool, *, n: int, groups: int, n_init: int = 4, candidates: int | None = None,
           len_success: float = 1.0, len_failure: float = 1.0) -> ControlRate:
    """SPEED's online screening (Zhang et al. 2025, arXiv:2506.09016): ``n_init`` rollouts per candidate task;
    accept iff ``0 < k_init < n_init``; complete accepted tasks to N (the screening rollouts count).

    An accepted group is always informative. Per candidate: acceptance ``α(p) = 1 − p^n0 − (1−p)^n0``,
    rollouts ``n0 + α(p)(N − n0)``. ``candidates=None``: a stream (SPEED pipelines screening and keeps every
    accepted task), so a step of B trained groups costs ``B·E[n0 + α(N−n0)]/E[α]`` rollouts.
    ``candidates=G``: each step screens G candidates and trains on the first ``min(B, K)`` accepted,
    ``K ~ Bin(G, ᾱ)`` (accepted ones beyond B are not completed); this is ``prs.sim``'s ``select="screen"``.
    A pool that accepts nothing trains 0 groups (stream: 0 per rollout, never a division by 0).
    """
    n, groups = _check_nb(n, groups)
    (n_init,) = c.as_group_size("n_init", n_init, minimum=2).reshape(1).tolist()
    if n_init > n:
        raise ValueError(f"n_init must be <= n (screening rollouts count toward N), got n_init={n_init}, n={n}")
    _check_lengths(len_success, len_failure)
    p = pool.p
    acc, sig = _screen_terms(p, n, n_init)
    ln = _length(p, len_success, len_failure)
    a_bar = pool.mean(acc)
    sig_acc = pool.mean(sig) / a_bar if a_bar > 0 else 0.0  # E[signal | accepted]
    tok_acc = pool.mean(acc * ln) / a_bar if a_bar > 0 else 0.0  # E[len | accepted]
    if candidates is None:
        if a_bar <= 0:
            return ControlRate("screen", 0.0, 0.0, 0.0, groups * n_init, groups * n_init * pool.mean(ln),
                               extra=dict(accept_prob=0.0))
        cand = groups / a_bar
        trained = float(groups)
    else:
        (cand,) = c.as_group_size("candidates", candidates).reshape(1).tolist()
        kk = np.arange(cand + 1)
        trained = float(np.sum(stats.binom.pmf(kk, cand, a_bar) * np.minimum(kk, groups)))
    rollouts = cand * n_init + trained * (n - n_init)
    tokens = cand * n_init * pool.mean(ln) + trained * (n - n_init) * tok_acc
    return ControlRate("screen", trained, trained, trained * sig_acc, rollouts, tokens,
                       extra=dict(accept_prob=a_bar, candidates=float(cand)))


def ps_reroll(pool: Pool, *, n: int, groups: int, target: float = 0.5, reroll_mixed: float | None = None,
              prefix_share: float = 0.0, len_success: float = 1.0, len_failure: float = 1.0,
              reroll: str = "add", fallback: bool | None = None) -> ControlRate:
    """Prefix Sampling's same-step re-roll (``prs.core.prefix``, mode ``ps_ada``): a group in a PS bucket
    (``assign_buckets(k) >= 0``: 1..N/4 and N−N/4..N−1 successes) is re-rolled from a prefix, with the
    controller at its target ``t``.

    The re-rolled group's continuations succeed with probability t each; if independent, it is informative
    with probability ``m = 1 − t^N − (1−t)^N`` (an upper bound: one prefix often decides all N continuations;
    pass the measured share as ``reroll_mixed``) and carries ``(N−1)/N·t(1−t)`` signal. A re-rolled rollout
    generates ``(1 − prefix_share)`` of a rollout's tokens (0 = a full rollout, conservative). With ``r`` the
    share of groups in a bucket:

    * ``reroll="add"`` (``schedule.reroll=append``): both groups are trained, B(1 + r) groups a step,
      informative B(E[s(p)] + r m).
    * ``reroll="replace"`` (``schedule.reroll=replace``, prs's default): B groups a step; with ``fallback``
      (``schedule.reroll_fallback=true``, the default when None; refused with "add") the re-roll replaces its group only when it is mixed
      (probability m), so informative stays B E[s(p)] - every bucketed group is already mixed - and the signal
      swaps the original's ``k(N−k)/N²`` for the re-roll's ``E[k(N−k)/N² | mixed] = (N−1)/N·t(1−t)/m``
      with probability m; without ``fallback`` every bucketed group is replaced: informative
      B(E[s(p)] − r(1 − m)).

    Rollouts B N (1 + r) in every mode: the replaced groups were generated too."""
    if reroll not in ("add", "replace"):
        raise ValueError(f"reroll must be one of 'add', 'replace', got {reroll!r}")
    if reroll == "add" and fallback is not None:  # the trainer's append mode keeps every re-roll
        raise ValueError(f"fallback applies to reroll='replace' only (None with 'add'), got {fallback!r}")
    fallback = True if fallback is None else bool(fallback)
    from prs.core import prefix as px  # noqa: PLC0415

    n, groups = _check_nb(n, groups)
    _check_lengths(len_success, len_failure)
    if not 0 < target < 1:
        raise ValueError(f"target must lie in (0, 1), got {target!r}")
    if not 0 <= prefix_share < 1:
        raise ValueError(f"prefix_share must lie in [0, 1), got {prefix_share!r}")
    mixed = float(informative_prob(target, n)) if reroll_mixed is None else float(reroll_mixed)
    if not 0 <= mixed <= 1:
        raise ValueError(f"reroll_mixed must lie in [0, 1], got {reroll_mixed!r}")
    bucketed = np.asarray(px.assign_buckets(np.arange(n + 1), px.PrefixConfig(mode="ps_ada", n=n))) >= 0  # [K]
    p = pool.p
    skew = pool.mean(np.sum(_binom_pmf(n, p) * bucketed, axis=-1))
    ln = pool.mean(_length(p, len_success, len_failure))
    rollouts = groups * n * (1.0 + skew)
    tokens = groups * n * ln + groups * skew * n * (1.0 - prefix_share) * (
        target * len_success + (1 - target) * len_failure)
    s_t = float(_signal(np.float64(target), n))
    if reroll == "add":
        inf = groups * (pool.mean(informative_prob(p, n)) + skew * mixed)
        sig = groups * (pool.mean(_signal(p, n)) + skew * s_t)
        trained = groups * (1.0 + skew)
    else:
        k = np.arange(n + 1)
        sig_bucketed = pool.mean(np.sum(_binom_pmf(n, p) * bucketed * k * (n - k) / n ** 2, axis=-1))
        swap = mixed if fallback else 1.0                              # P(a bucketed group is replaced)
        inf = groups * (pool.mean(informative_prob(p, n)) - (0.0 if fallback else skew * (1.0 - mixed)))
        sig = groups * (pool.mean(_signal(p, n)) - swap * sig_bucketed + skew * s_t)
        trained = float(groups)
    return ControlRate("ps_reroll", trained, inf, sig, rollouts, tokens,
                       extra=dict(reroll_share=skew, reroll_mixed=mixed, reroll=reroll, fallback=fallback))


def predicted(pool: Pool, *, n: int, groups: int, pool_size: int, len_success: float = 1.0,
              len_failure: float = 1.0) -> ControlRate:
    """Oracle task selection (the upper bound of ``schedule.select=predicted``): of M = ``pool_size`` tasks drawn
    iid from the pool, train on the B with the highest p(1−p) (known exactly).

    ``s(p)`` and ``p(1−p)`` are both increasing in ``p(1−p)``, so the selected tasks are the top B order
    statistics of ``u = p(1−p)``. For atoms with distinct values ``u_1 < ... < u_J``, CDF ``F``:
    ``P(U_(i:M) <= u) = P(Bin(M, F(u)) >= i)``, and the expected sum of any ``f(u)`` over the top B is
    ``Σ_{i=M−B+1}^{M} Σ_j f(u_j)[P(U_(i) <= u_j) − P(U_(i) <= u_{j−1})]`` (exact). Tokens use the
    selected tasks' expected length (atoms with equal u and different p share the mean length).
    """
    n, groups = _check_nb(n, groups)
    (m,) = c.as_group_size("pool_size", pool_size).reshape(1).tolist()
    if groups > m:
        raise ValueError(f"groups (B={groups}) must be <= pool_size (M={m})")
    _check_lengths(len_success, len_failure)
    p = pool.p
    u = np.round(p * (1 - p), 15)
    uniq, inv = np.unique(u, return_inverse=True)  # ascending
    wq = np.bincount(inv, weights=pool.w, minlength=uniq.size)
    cdf = np.clip(np.cumsum(wq), 0.0, 1.0)
    cdf[-1] = 1.0

    def mean_of(f):
        fq = np.bincount(inv, weights=pool.w * f, minlength=uniq.size) / np.maximum(wq, 1e-300)
        i = np.arange(m - groups + 1, m + 1)[:, None]  # [B, 1]
        le = stats.binom.sf(i - 1, m, cdf[None, :])  # P(Bin(M, F) >= i) = P(U_(i) <= u_j), [B, J]
        prob = np.diff(np.concatenate([np.zeros((i.shape[0], 1)), le], axis=1), axis=1)
        return float(np.sum(prob * fq[None, :]))

    inf = mean_of(informative_prob(p, n))
    return ControlRate("predicted", groups, inf, mean_of(_signal(p, n)), groups * n,
                       n * mean_of(_length(p, len_success, len_failure)), extra=dict(pool_size=m))


def compare_controls(pool: Pool, *, n: int = 8, groups: int = 32, gen_groups: int | None = None,
                     max_batches: int = 10, n_init: int = 4, p_easy: float = 0.5, p_hard: float = 0.5,
                     floor: float = 0.01, target: float = 0.5, pool_size: int | None = None,
                     len_success: float = 1.0, len_failure: float = 1.0, reroll: str = "add") -> list[ControlRate]:
    """Every control on one pool (defaults: gen batch G = B, cap C = 10 = the trainer's ``ds_max_gen_batches``, n_init = 4, GRESO 0.5/0.5/0.01,
    PS target 0.5 and ``reroll`` (``ps_reroll``: "add" or "replace" with fallback), oracle pool M = 4B)."""
    ln = dict(len_success=len_success, len_failure=len_failure)
    return [uniform(pool, n=n, groups=groups, **ln),
            dynamic_sampling(pool, n=n, groups=groups, gen_groups=gen_groups or groups, max_batches=max_batches, **ln),
            selective(pool, n=n, groups=groups, p_easy=p_easy, p_hard=p_hard, floor=floor, **ln),
            screen(pool, n=n, groups=groups, n_init=n_init, **ln),
            ps_reroll(pool, n=n, groups=groups, target=target, reroll=reroll, **ln),
            predicted(pool, n=n, groups=groups, pool_size=pool_size or 4 * groups, **ln)]


def format_controls(rates: list[ControlRate], *, title: str) -> str:
    """The table ``python -m theory controls`` prints: informative groups per 1000 rollouts and tokens, ratio to
    the first row (uniform)."""
    base_r, base_t = rates[0].per_1000_rollouts(), rates[0].per_1000_tokens()
    lines = [f"pass-rate controls on {title}",
             f"{'control':<17} {'groups/step':>11} {'rollouts/step':>13} {'inf/1k roll':>11} {'inf/1k tok':>11} "
             f"{'signal/1k roll':>14} {'x uniform':>9}"]
    for r in rates:
        ratio = r.per_1000_tokens() / base_t if base_t > 0 else float("nan")
        lines.append(f"{r.control:<17} {r.groups:>11.2f} {r.rollouts:>13.1f} {r.per_1000_rollouts():>11.2f} "
                     f"{r.per_1000_tokens():>11.4g} {r.signal_per_1000_rollouts():>14.2f} "
                     f"{'n/a' if math.isnan(ratio) else f'{ratio:.2f}':>9}")
    return "\n".join(lines)
