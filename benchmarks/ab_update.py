"""A/B of ModelConfig overrides / XLA compile options for one GRPO update (``bench_update``), interleaved
in one process: every variant is compiled, then the variants are timed in turn, ``reps`` rounds.

    PYTHONPATH=$PWD python benchmarks/ab_update.py 10m 8 256 4 "('b1',{'causal_blocks':1},{})" \
        "('b2',{'causal_blocks':2},{})" "('onednn',{},{'xla_cpu_use_onednn':True})"

Each variant is a Python literal (name, ModelConfig overrides, compiler options); the layer scan is
fully unrolled unless overridden. An ``attention_impl`` named ``blockwise_r{rows}_q{q_blocks}_k{k_blocks}``
is registered on the fly (``prs.models.blockwise`` with those tile sizes). The variant ``torch`` (a bare word) times the torch eager update of
``bench_update`` in the same rounds. Prints the first-step loss (numerics check), best wall and CPU s.

Note (jaxlib 0.10.2): the matmuls go to YNNPACK fusions whatever ``xla_cpu_use_onednn`` /
``xla_cpu_use_xnnpack`` say; to route them elsewhere also empty the YNN fusion list,
``'xla_cpu_experimental_ynn_fusion_type':'LIBRARY_FUSION_TYPE_INVALID'`` (``ab_dots.py``, README)."""
import ast, functools, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax, jax.numpy as jnp, numpy as np, optax
import bench_update as B, _common as C
from prs.models import qwen3 as M, blockwise as BW
from prs.rl.trainer import Batch, RLConfig, update_step
size, R, T, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
variants = [v if v == "torch" else ast.literal_eval(v) for v in sys.argv[5:]]  # (name, cfg_over, compiler_options)
for v in variants:  # attention_impl "blockwise_r{rows}_q{q_blocks}_k{k_blocks}": register those tile sizes
    impl = v[1].get("attention_impl", "") if v != "torch" else ""
    if BW.parse_variant(impl) and impl not in M._ATTENTION_IMPLS:
        M.register_blockwise(impl, **BW.parse_variant(impl))
cfg0 = M.ModelConfig.preset(size); params = M.init_params(cfg0, jax.random.key(0))
rl = RLConfig()
b = B.make_batch(cfg0, params, R, T)
tx = optax.chain(optax.clip_by_global_norm(rl.optim.grad_clip), optax.adamw(rl.optim.lr, b1=rl.optim.b1, b2=rl.optim.b2, weight_decay=rl.optim.weight_decay))
batch = Batch(**{k: jnp.asarray(v) for k, v in b.items()})
opt = tx.init(params)


def torch_step(cfg, params, b, rl):
    """The torch eager update of ``bench_update.torch_update`` as a callable (warmed up)."""
    import torch
    model = C.hf_model(cfg, params).train()
    opt = torch.optim.AdamW(model.parameters(), lr=rl.optim.lr, betas=(rl.optim.b1, rl.optim.b2), eps=1e-8, weight_decay=rl.optim.weight_decay)
    t = {k: torch.from_numpy(np.asarray(v)) for k, v in b.items()}
    tokens = t["tokens"].long()

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1], position_ids=t["positions"][:, :-1].long()).logits.float()
        logp = torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:, None])[..., 0]
        m = t["loss_mask"][:, 1:]
        lp = torch.where(m, logp, torch.zeros_like(logp))
        old = torch.where(m, t["old_logp"][:, 1:], torch.zeros_like(logp))
        a = torch.where(m, t["advantages"][:, None].expand_as(lp), torch.zeros_like(lp))
        ratio = torch.exp(torch.clamp(lp - old, -20.0, 20.0))
        pg = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - rl.loss.clip_low, 1 + rl.loss.clip_high))
        loss = torch.where(m, pg, torch.zeros_like(pg)).sum() / tokens.shape[0]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), rl.optim.grad_clip)
        opt.step()
        return loss

    print(f"torch: loss {float(step()):.8f} (first step)", flush=True)
    return step


fns = []
for var in variants:
    if var == "torch":
        fns.append(("torch", torch_step(cfg0, params, b, rl)))
        continue
    name, over, copts = var
    cfg = M.ModelConfig.preset(size, **{"scan_unroll": cfg0.n_layers, **over})
    t0 = time.perf_counter()
    c = jax.jit(functools.partial(update_step, cfg=cfg, rl=rl, tx=tx)).lower(params, opt, batch).compile(copts or None)
    out = jax.block_until_ready(c(params, opt, batch))
    print(f"{name}: compiled {time.perf_counter()-t0:.1f}s loss {float(out[2]['loss']):.8f} gn {float(out[2]['grad_norm']):.6f}", flush=True)
    fns.append((name, functools.partial(c, params, opt, batch)))
res = {n: [] for n, _ in fns}
for r in range(reps):
    for n, c in fns:
        w0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(c())
        res[n].append((time.perf_counter()-w0, time.process_time()-c0))
print(f"{size} R={R} T={T} best of {reps}; {C.load()}")
for n, v in res.items():
    w = min(x[0] for x in v); cpu = min(x[1] for x in v)
    print(f"  {n:28s} wall {w:7.3f}  cpu {cpu:7.3f}   all cpu {' '.join(f'{x[1]:.2f}' for x in v)}")
