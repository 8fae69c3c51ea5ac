"""Executed XLA thunks per gradient call and per decoder timestep (jax.profiler trace).

  XLA_FLAGS=--xla_cpu_multi_thread_eigen=false python experiments/speed/profile_ops.py onestep custom
"""
import sys, time, glob, gzip, json, collections, shutil
import jax, jax.numpy as jnp, numpy as np
from monoloc_jax import variants
from monoloc_jax.backbones import gru
name, kind = sys.argv[1], sys.argv[2]
B, N, T, V = 32, 16, 32, 14
rng = np.random.default_rng(0)
src = rng.integers(3, V, (B, N)).astype(np.int32); sl = np.full((B,), N, np.int32)
tgt = rng.integers(3, V, (B, T)).astype(np.int32)
tin = np.concatenate([np.ones((B, 1), np.int32), tgt[:, :-1]], -1)
m = gru.Seq2Seq(vocab_size=V, variant=variants.get(name), decoder_backward=kind)
params = m.init(jax.random.PRNGKey(0), src, sl, tin)
def loss(p):
  out = m.apply(p, src, sl, tin, train=True, rngs={'dropout': jax.random.PRNGKey(1)})
  return jnp.sum(jax.nn.log_softmax(out.logits) * jax.nn.one_hot(tgt, V))
f = jax.jit(jax.grad(loss))
jax.block_until_ready(f(params)); jax.block_until_ready(f(params))
d = f'/tmp/monoloc_prof_{kind}'; shutil.rmtree(d, ignore_errors=True)
with jax.profiler.trace(d, create_perfetto_trace=True):
  for _ in range(5): jax.block_until_ready(f(params))
fn = glob.glob(f'{d}/**/*.trace.json.gz', recursive=True)[0]
ev = json.load(gzip.open(fn))['traceEvents']
c = collections.Counter(); n = collections.Counter()
for e in ev:
  if e.get('ph') == 'X' and 'dur' in e:
    c[e['name']] += e['dur']; n[e['name']] += 1
tot = 0
for k, v in c.most_common(12): print(f'{v/5:10.0f}us {n[k]/5:8.0f}x {k[:90]}')
by = collections.Counter(); cnt = collections.Counter()
for k in c:
  if k.startswith('$') or 'Execute' in k or 'Pjit' in k: continue
  per = round(n[k] / 5)
  by[per] += c[k] / 5; cnt[per] += 1
ones = sorted([(c[k]/5, k) for k in c if round(n[k]/5) == 1 and not k.startswith('$') and 'while' not in k and 'Execute' not in k], reverse=True)[:14]
for v, k in ones: print(f'   1x {v:8.0f}us {k}')
print('thunk events per call:', sum(n[k] for k in c if not k.startswith('$') and 'Execute' not in k and 'Pjit' not in k)/5, ' decoder-step (32x) events per step:', sum(n[k] for k in c if round(n[k]/5)==32)/5/32)
for per in sorted(by): print(f'ops run {per:3d}x per call: {cnt[per]:4d} distinct, {by[per]:8.0f}us')
