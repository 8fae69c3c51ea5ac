"""Same-run A/B of the train step: autodiff vs custom decoder backward; HLO op counts.

  python experiments/speed/ab_train_step.py VARIANT SEEDS WINDOWS
  CPUTIME=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false taskset -c 0 python ... (CPU time)

Prints the compile time, the instructions in each while body of the compiled train step,
and ms per train step for each backward, alternating windows of 20 steps.
"""
import re, sys, time
import os
CPU = bool(os.environ.get('CPUTIME'))
import jax, jax.numpy as jnp, numpy as np
from monoloc_jax import variants, train, input_pipeline as ip
from monoloc_jax.backbones import gru
from monoloc_jax.configs import default

def while_body_ops(text):
  comps = {}
  cur = None
  for line in text.splitlines():
    m = re.match(r'^(?:ENTRY )?%?([\w.\-]+) .*\{$', line)
    if m and not line.startswith(' '):
      cur = m.group(1); comps[cur] = []; continue
    if line.startswith('}'): cur = None; continue
    if cur and '=' in line: comps[cur].append(line)
  bodies = []
  for c, lines in comps.items():
    for l in lines:
      if ' while(' in l:
        b = re.search(r'body=%?([\w.\-]+)', l).group(1); bodies.append(b)
  skip = ('parameter(', 'constant(', 'get-tuple-element(', 'tuple(', 'bitcast(')
  out = {}
  for b in bodies:
    ops = [l for l in comps[b] if not any(s in l.split('=', 1)[1][:60] for s in skip)]
    out[b] = len(ops)
  return out

name = sys.argv[1] if len(sys.argv) > 1 else 'onestep'
seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
config = default.get_config(); config.variant = name
B, N, T, V = 32, 16, 32, 14
rng = np.random.default_rng(0)
src = rng.integers(3, V, (seeds, B, N)).astype(np.int32)
src_len = np.full((seeds, B), N, np.int32)
tgt = rng.integers(3, V, (seeds, B, T)).astype(np.int32)
tin = np.concatenate([np.ones((seeds, B, 1), np.int32), tgt[..., :-1]], -1)
batch = ip.Batch(src, src_len, tin, tgt)
tx = train.make_optimizer(config)
progs, states = {}, {}
class Vocab:  pad_id, sos_id, eos_id = 0, 1, 2
for kind in (os.environ.get('KINDS') or 'autodiff,custom').split(','):
  model = gru.Seq2Seq(vocab_size=V, variant=variants.get(name), decoder_backward=kind)
  p = train.make_train_programs(model, tx)
  st = train.create_train_state(p, list(range(seeds)), batch)
  stats = train.EpochStats.zeros(seeds)
  t0 = time.time()
  lowered = p.train_step.lower(st, batch, stats)
  compiled = lowered.compile()
  ct = time.time() - t0
  text = compiled.as_text()
  bodies = while_body_ops(text)
  print(f'{kind}: compile {ct:.1f}s, total HLO instr {text.count(chr(10))}, while-body ops {bodies}', flush=True)
  progs[kind] = compiled; states[kind] = (st, stats)
def window(kind, n=20):
  st, stats = states[kind]
  t0 = time.perf_counter() if not CPU else time.process_time()
  for _ in range(n):
    st, stats = progs[kind](st, batch, stats)
  jax.block_until_ready(stats)
  states[kind] = (st, stats)
  return ((time.perf_counter() if not CPU else time.process_time()) - t0) / n * 1e3
for kind in progs: window(kind, 3)
res = {k: [] for k in progs}
for r in range(int(sys.argv[3]) if len(sys.argv) > 3 else 7):
  for kind in progs: res[kind].append(window(kind))
for k, v in res.items():
  v = np.array(v); print(f'{k}: ms/step median {np.median(v):.2f} min {v.min():.2f} max {v.max():.2f}  -> {B*seeds/np.median(v)*1e3:.0f} samples/s total')
a, c = np.array(res[list(res)[0]]), np.array(res[list(res)[1]])
print('speedup per window (autodiff/custom):', np.round(a / c, 2))
