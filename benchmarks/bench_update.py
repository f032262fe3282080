"""One GRPO update, prs (jitted) against the same update in PyTorch eager, side by side.

The update: forward over [R, T] tokens, token log-probs, the clipped surrogate (``prs.policy_loss``,
seq-mean-token-sum, clip 0.2 / 0.28), backward, global-norm clip 1.0, AdamW (lr 3e-4, betas 0.9 /
0.99, eps 1e-8). prs runs ``prs.rl.trainer.update_step`` (what ``Trainer.step`` runs); torch runs HF
``Qwen3ForCausalLM`` (fp32, default SDPA attention) with the same weights, loss written in torch,
``clip_grad_norm_`` and ``torch.optim.AdamW``. Rows are full (no padding), the first 16 tokens are
"prompt" (no loss), advantages ~ N(0, 1), ``old_logp`` = the current log-probs + N(0, 0.3²) noise so
the clip is active. The first-step losses are compared (relative difference printed). prs runs
with the layer scan fully unrolled (``ModelConfig.scan_unroll = n_layers``; ``--unroll 1`` for the
rolled loop, the library default, which compiles faster) and the library's default
``ModelConfig.causal_blocks`` (1; `benchmarks/ab_update.py` measures 2).
Where the time goes (per-op profile vs torch.profiler) and why 1.5x torch is out of reach on this
CPU: ``benchmarks/README.md`` (``profile_update.py``, ``ab_update.py``).

Timing: best of ``--repeats`` after one warm-up call (compile excluded), wall clock and process
CPU time, in the same process; the load average is printed. Roofline fraction = model FLOPs
(3 × forward matmul FLOPs, ``_common.forward_flops_per_token``) / update time / measured f32
matmul FLOP/s (``_common.matmul_flops``).

    python benchmarks/bench_update.py --size 10m            # R=32, T=256
    python benchmarks/bench_update.py --size tiny small 10m --rows 32 --len 256
"""
from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # _common; run with PYTHONPATH=<repo>

import _common as C  # noqa: E402
from prs.core.losses import token_logprobs  # noqa: E402
from prs.models import qwen3 as M  # noqa: E402
from prs.rl.trainer import Batch, RLConfig, update_step  # noqa: E402

PROMPT = 16


def make_batch(cfg, params, rows, length, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab_size, (rows, length)).astype(np.int32)
    positions = np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy()
    valid = np.ones((rows, length), bool)
    loss_mask = np.broadcast_to(np.arange(length) >= PROMPT, (rows, length)).copy()
    logits = jax.jit(M.forward, static_argnames="cfg")(params, jnp.asarray(tokens[:, :-1]), cfg=cfg)
    lp = np.asarray(token_logprobs(logits, jnp.asarray(tokens[:, 1:])))
    old = np.zeros((rows, length), np.float32)
    old[:, 1:] = lp + 0.3 * rng.standard_normal(lp.shape).astype(np.float32)
    old = np.where(loss_mask, old, 0.0).astype(np.float32)
    adv = rng.standard_normal(rows).astype(np.float32)
    return dict(tokens=tokens, positions=positions, valid=valid, loss_mask=loss_mask, old_logp=old, advantages=adv)


def prs_update(cfg, params, b, rl, repeats):
    tx = optax.chain(optax.clip_by_global_norm(rl.optim.grad_clip),
                     optax.adamw(rl.optim.lr, b1=rl.optim.b1, b2=rl.optim.b2, weight_decay=rl.optim.weight_decay))
    upd = jax.jit(functools.partial(update_step, cfg=cfg, rl=rl, tx=tx))
    batch = Batch(**{k: jnp.asarray(v) for k, v in b.items()})
    opt = tx.init(params)
    compiled = upd.lower(params, opt, batch).compile()
    _, _, m = compiled(params, opt, batch)
    loss0 = float(m["loss"])
    wall, cpu = C.best_of(lambda: jax.block_until_ready(compiled(params, opt, batch)), repeats)
    return loss0, wall, cpu


def torch_update(cfg, params, b, rl, repeats):
    import torch

    model = C.hf_model(cfg, params).train()
    opt = torch.optim.AdamW(model.parameters(), lr=rl.optim.lr, betas=(rl.optim.b1, rl.optim.b2), eps=1e-8,
                            weight_decay=rl.optim.weight_decay)
    t = {k: torch.from_numpy(np.asarray(v)) for k, v in b.items()}
    tokens = t["tokens"].long()

    def loss_fn():
        logits = model(tokens[:, :-1], position_ids=t["positions"][:, :-1].long()).logits.float()
        logp = torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:, None])[..., 0]  # [R, T-1]
        m = t["loss_mask"][:, 1:]
        mf = m.float()
        lp = torch.where(m, logp, torch.zeros_like(logp))
        old = torch.where(m, t["old_logp"][:, 1:], torch.zeros_like(logp))
        a = torch.where(m, t["advantages"][:, None].expand_as(lp), torch.zeros_like(lp))
        ratio = torch.exp(torch.clamp(lp - old, -20.0, 20.0))
        pg = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - rl.loss.clip_low, 1 + rl.loss.clip_high))
        pg = torch.where(m, pg, torch.zeros_like(pg))
        n_seq = torch.clamp((mf.sum(1) > 0).float().sum(), min=1.0)
        return pg.sum() / n_seq  # seq-mean-token-sum

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), rl.optim.grad_clip)
        opt.step()
        return loss

    with torch.no_grad():
        loss0 = float(loss_fn())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    step()  # warm-up
    wall, cpu = C.best_of(step, repeats)
    model.load_state_dict(state)
    return loss0, wall, cpu, torch.__version__, torch.get_num_threads()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", nargs="+", default=["10m"], choices=C.SIZES)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--len", type=int, default=256, help="T, tokens per row")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--unroll", default="full", help="ModelConfig.scan_unroll for prs: an int, or 'full' (= n_layers)")
    a = ap.parse_args()
    rl = RLConfig()
    peak = C.matmul_flops()
    print(f"jax {jax.__version__} {jax.default_backend()}; measured f32 matmul {peak / 1e9:.0f} GFLOP/s; {C.load()}")
    rows = []
    for size in a.size:
        cfg = M.ModelConfig.preset(size)
        params = M.init_params(cfg, jax.random.key(0))
        cfg = M.ModelConfig.preset(size, scan_unroll=cfg.n_layers if a.unroll == "full" else int(a.unroll))
        b = make_batch(cfg, params, a.rows, a.len)
        flops = 3 * C.forward_flops_per_token(cfg, a.len - 1) * a.rows * (a.len - 1)
        l_p, w_p, c_p = prs_update(cfg, params, b, rl, a.repeats)
        row = dict(size=size, R=a.rows, T=a.len, unroll=cfg.scan_unroll, prs_s=f"{w_p:.3f}", prs_cpu_s=f"{c_p:.3f}",
                   prs_roofline=f"{flops / w_p / peak:.1%}")
        if not a.no_torch:
            l_t, w_t, c_t, tv, nt = torch_update(cfg, params, b, rl, a.repeats)
            row |= dict(torch_s=f"{w_t:.3f}", torch_cpu_s=f"{c_t:.3f}", torch_roofline=f"{flops / w_t / peak:.1%}",
                        speedup=f"{w_t / w_p:.2f}x", speedup_cpu=f"{c_t / c_p:.2f}x",
                        loss_rel_diff=f"{abs(l_p - l_t) / max(abs(l_t), 1e-12):.1e}")
            row["torch"] = f"{tv} ({nt} thr)"
        rows.append(row)
        print(f"{size}: done ({C.load()})", flush=True)
    cols = ["size", "R", "T", "unroll", "prs_s", "torch_s", "speedup", "prs_cpu_s", "torch_cpu_s", "speedup_cpu",
            "prs_roofline", "torch_roofline", "loss_rel_diff", "torch"]
    print(f"\nOne GRPO update (fwd + log-probs + clipped loss + bwd + AdamW), best of {a.repeats}; {C.load()}")
    print(C.table(rows, [c for c in cols if any(c in r for r in rows)]))


if __name__ == "__main__":
    main()
