"""Prints the parameter count of every attention variant (console script `monoloc-params`).

  monoloc-params                 # the paper's small size, vocabulary of 14 (digit tasks)
  monoloc-params --size=cfq --vocab_size=200
  monoloc-params --nosigma_bias  # without the sigma read-out bias (as the authors' code)
"""

import dataclasses
import importlib

from absl import flags
import jax
import jax.numpy as jnp

from monoloc_jax import errors
from monoloc_jax import launcher
from monoloc_jax import models
from monoloc_jax import variants

# The model fields that set the parameter count.
SIZE_FIELDS = ('embed_dim', 'hidden_dim', 'value_dim', 'num_layers', 'qk_dim', 'decoder_init')
# --size -> the named config whose model size it counts: `small` is configs/default.py
# (the paper's size), `cfq` is configs/cfq.py, the one place of the CFQ size.
SIZES = {'small': 'default', 'cfq': 'cfq'}


def model_size(size: str) -> dict:
  """{field: value} of SIZE_FIELDS for `size`, read from its config file."""
  if size not in SIZES:
    raise errors.unknown_name('size', size, SIZES)
  config = importlib.import_module(f'monoloc_jax.configs.{SIZES[size]}').get_config()
  return {field: config[field] for field in SIZE_FIELDS}


_SIZE = flags.DEFINE_enum('size', 'small', list(SIZES), 'Model size: small (the paper\'s, '
                          'configs/default.py) or cfq (configs/cfq.py).')
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
    fields = model_size(size)
    model = models.Seq2Seq(vocab_size, variant=variant, qk_dim=fields['qk_dim'] or None,
                           **{k: fields[k] for k in SIZE_FIELDS if k != 'qk_dim'})
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
  """Console-script entry point."""
  launcher.run(main, __name__)


if __name__ == '__main__':
  run()
