"""Loss, gradients and greedy output of some variants, pickled, to compare two trees bit for bit.

  git archive 7d9c422 monoloc_jax | tar -x -C /tmp/old
  PYTHONPATH=/tmp/old python experiments/speed/same_numbers.py old.pkl onestep,mix_mono_pr,bi_relative
  PYTHONPATH=.        python experiments/speed/same_numbers.py new.pkl onestep,mix_mono_pr,bi_relative
"""
import sys, pickle, numpy as np, jax, jax.numpy as jnp
from monoloc_jax import variants
from monoloc_jax.backbones import gru
V = 11
rng = np.random.default_rng(0)
src = rng.integers(3, V, (4, 7)).astype(np.int32); sl = np.array([7, 3, 5, 1], np.int32)
src[np.arange(7)[None] >= sl[:, None]] = 0
tin = rng.integers(3, V, (4, 6)).astype(np.int32)
out = {}
for name in sys.argv[2].split(','):
  m = gru.Seq2Seq(vocab_size=V, variant=variants.get(name))
  p = m.init(jax.random.PRNGKey(0), src, sl, tin)
  def loss(p):
    o = m.apply(p, src, sl, tin, train=True, rngs={'dropout': jax.random.PRNGKey(1)})
    return jnp.sum(jnp.sin(o.logits)) + jnp.sum(o.attention ** 2)
  l, g = jax.jit(jax.value_and_grad(loss))(p)
  greedy = jax.jit(lambda p: m.apply(p, src, sl, 9, method=m.greedy))(p)
  out[name] = jax.device_get((l, g, greedy.tokens, greedy.attention))
pickle.dump(out, open(sys.argv[1], 'wb'))
