"""How far a bfloat16 model's logits are from float32's, for all 21 variants.

  python experiments/bf16_logits.py

Each variant at the default size, random init (PRNGKey(0)), one batch of 32 random
sources of lengths 5-30 (vocabulary 14) and targets of 31 steps; the bfloat16 model
(`Seq2Seq(dtype=bfloat16)`, float32 parameters) is applied to the float32 model's
parameters. Prints max |logits_bf16 - logits_f32| / max |logits_f32| per variant.
BUILD_NOTES §1 ("Dtypes") records the figures.
"""

import jax
import jax.numpy as jnp
import numpy as np

from monoloc_jax.backbones import gru
from monoloc_jax import variants


def main():
  rng = np.random.default_rng(0)
  batch, n, vocab = 32, 30, 14
  lens = rng.integers(5, n + 1, batch).astype(np.int32)
  src = rng.integers(4, vocab, (batch, n)).astype(np.int32)
  src[np.arange(n)[None] >= lens[:, None]] = 0
  tgt = rng.integers(4, vocab, (batch, n + 1)).astype(np.int32)
  for name in variants.NAMES:
    f32 = gru.Seq2Seq(vocab_size=vocab, variant=variants.get(name), dropout_rate=0.0)
    bf16 = f32.clone(dtype=jnp.bfloat16)

    def run(key, f32=f32, bf16=bf16):
      params = f32.init(key, src, lens, tgt)
      return f32.apply(params, src, lens, tgt).logits, bf16.apply(params, src, lens, tgt).logits
    a, b = (np.asarray(x, np.float64) for x in jax.jit(run)(jax.random.PRNGKey(0)))
    print(f'{name:24s} {100 * np.max(np.abs(a - b)) / np.max(np.abs(a)):.2f}%', flush=True)


if __name__ == '__main__':
  main()
