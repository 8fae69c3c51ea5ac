"""Prints the parameter count of every attention variant (console script `monoloc-params`).

  monoloc-params                 # the paper's small size, vocabulary of 14 (digit tasks)
  monoloc-params --size=cfq --vocab_size=200
  monoloc-params --nosigma_bias  # without the sigma read-out bias (as the authors' code)
"""

import dataclasses

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from monoloc_jax import models
from monoloc_jax import variants

SIZES = {
    'small': dict(embed_dim=64, hidden_dim=128, value_dim=128, num_layers=1),
    # configs/cfq.py: the authors' CFQ configs' query/key width of 128.
    'cfq': dict(embed_dim=128, hidden_dim=256, value_dim=512, num_layers=2, qk_dim=128),
}
_SIZE = flags.DEFINE_enum('size', 'small', list(SIZES), 'Model size (the paper\'s small size, or its CFQ size).')
_VOCAB = flags.DEFINE_integer('vocab_size', 14, 'Vocabulary size incl. the 4 special tokens.',
                              lower_bound=5)
_SIGMA_BIAS = flags.DEFINE_bool('sigma_bias', True, 'Location variants have the sigma read-out '
                                'bias (config.sigma_bias; the authors\' code has none).')


def parameter_counts(vocab_size: int, size: str = 'small', sigma_bias: bool = True):
  """{slug: number of parameters} for every variant, from shapes only (nothing is run).

  sigma_bias: as config.sigma_bias (False: location variants have one parameter fewer).
  """
  src = jnp.ones((1, 3), jnp.int32)
  out = {}
  for name in variants.NAMES:
    variant = variants.get(name)
    if not sigma_bias:
      variant = dataclasses.replace(variant, sigma_bias=False)
    model = models.Seq2Seq(vocab_size, variant=variant, **SIZES[size])
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), src,
                            jnp.array([3], jnp.int32), src)
    out[name] = models.count_params(shapes)
  return out


def main(argv):
  del argv
  counts = parameter_counts(_VOCAB.value, _SIZE.value, _SIGMA_BIAS.value)
  print(f'{"model":<24}{"display name":<24}{"parameters":>12}')
  for name, n in counts.items():
    print(f'{name:<24}{variants.get(name).display_name:<24}{n:>12,}')


def run():
  app.run(main)


if __name__ == '__main__':
  run()
