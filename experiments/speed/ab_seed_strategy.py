"""Same-run A/B of the seed strategies (5 seeds vmap / map, and 1 seed), both backwards.

  python experiments/speed/ab_seed_strategy.py WINDOWS   (CPUTIME=1 as in ab_train_step.py)
"""
import sys, time, os
CPU = bool(os.environ.get('CPUTIME'))
clock = time.process_time if CPU else time.perf_counter
import jax, jax.numpy as jnp, numpy as np
from monoloc_jax import variants, train, input_pipeline as ip
from monoloc_jax.backbones import gru
from monoloc_jax.configs import default
config = default.get_config()
B, N, T, V = 32, 16, 32, 14
kinds = [('custom', 'vmap', 5), ('custom', 'map', 5), ('custom', 'map', 1), ('autodiff', 'vmap', 5), ('autodiff', 'map', 5), ('autodiff', 'map', 1)]
progs, states, batches = {}, {}, {}
for kind in kinds:
  back, strat, seeds = kind
  rng = np.random.default_rng(0)
  src = rng.integers(3, V, (seeds, B, N)).astype(np.int32)
  tgt = rng.integers(3, V, (seeds, B, T)).astype(np.int32)
  tin = np.concatenate([np.ones((seeds, B, 1), np.int32), tgt[..., :-1]], -1)
  batch = ip.Batch(src, np.full((seeds, B), N, np.int32), tin, tgt)
  model = gru.Seq2Seq(vocab_size=V, variant=variants.get('onestep'), decoder_backward=back)
  p = train.make_train_programs(model, train.make_optimizer(config), strat)
  st = train.create_train_state(p, list(range(seeds)), batch)
  t0 = time.time(); c = p.train_step.lower(st, batch, train.EpochStats.zeros(seeds)).compile()
  print(kind, f'compile {time.time()-t0:.1f}s', flush=True)
  progs[kind], states[kind], batches[kind] = c, (st, train.EpochStats.zeros(seeds)), batch
def window(kind, n=6):
  st, stats = states[kind]
  t0 = clock()
  for _ in range(n): st, stats = progs[kind](st, batches[kind], stats)
  jax.block_until_ready(stats); states[kind] = (st, stats)
  return (clock() - t0) / n * 1e3
for k in kinds: window(k, 1)
res = {k: [] for k in kinds}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
  for k in kinds: res[k].append(window(k))
for k, v in res.items():
  v = np.array(v); print(f'{k}: ms/step median {np.median(v):.1f} min {v.min():.1f} max {v.max():.1f} -> total {B*k[2]/np.median(v)*1e3:.0f} samples/s')
