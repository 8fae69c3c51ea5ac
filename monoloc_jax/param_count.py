"""Prints the parameter count of every attention variant (console script `monoloc-params`).

  monoloc-params                 # the paper's small size, vocabulary of 14 (digit tasks)
  monoloc-params --size=cfq --vocab_size=200
  monoloc-params --nosigma_bias  # without the sigma read-out bias (as the authors' code)
  monoloc-params --backbone=transformer   # the Transformer at config.transformer's size
"""

import dataclasses
import importlib
from typing import Dict, Optional

from absl import flags
import jax
import jax.numpy as jnp
import ml_collections

from monoloc_jax import backbones
from monoloc_jax import errors
from monoloc_jax import launcher
from monoloc_jax import variants

# --size -> the named config whose model size it counts: `small` is configs/default.py
# (the paper's size), `cfq` is configs/cfq.py, the one place of the CFQ size.
SIZES = {'small': 'default', 'cfq': 'cfq'}


def model_config(size: str, backbone: Optional[str] = None) -> ml_collections.ConfigDict:
  """The config of `size` (read from its config file), with config.backbone = `backbone`
  where given (the backbone's size is then its group's, `config.<backbone>`)."""
  if size not in SIZES:
    raise errors.unknown_name('size', size, SIZES)
  config = importlib.import_module(f'monoloc_jax.configs.{SIZES[size]}').get_config()
  if backbone is not None:
    config.backbone = backbone
  return config


_SIZE = flags.DEFINE_enum('size', 'small', list(SIZES), 'Model size: small (the paper\'s, '
                          'configs/default.py) or cfq (configs/cfq.py).')
_BACKBONE = flags.DEFINE_enum('backbone', None, list(backbones.BACKBONES),
                              "Backbone to count (default: the size's config.backbone).")
_VOCAB = flags.DEFINE_integer('vocab_size', 14, 'Vocabulary size incl. the 4 special tokens.',
                              lower_bound=5)
_SIGMA_BIAS = flags.DEFINE_bool('sigma_bias', True, 'Location variants have the sigma read-out '
                                'bias (config.sigma_bias; the authors\' code has none).')


@dataclasses.dataclass(frozen=True)
class _Vocab:
  """What `backbones.from_config` reads of a vocabulary: its size and special ids."""
  size: int
  pad_id: int = 0
  sos_id: int = 1
  eos_id: int = 2

  def __len__(self) -> int:
    return self.size


def parameter_counts(vocab_size: int, size: str = 'small', sigma_bias: bool = True,
                     backbone: Optional[str] = None) -> Dict[str, int]:
  """{slug: number of parameters} for every variant, from shapes only (nothing is run),
  of the model `backbones.from_config` builds from `model_config(size, backbone)`.

  sigma_bias: as config.sigma_bias (False: location variants have one parameter fewer).
  """
  src = jnp.ones((1, 3), jnp.int32)
  config = model_config(size, backbone)
  config.sigma_bias = sigma_bias
  out = {}
  for name in variants.NAMES:
    config.variant = name
    model = backbones.from_config(config, _Vocab(vocab_size))
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), src,
                            jnp.array([3], jnp.int32), src)
    out[name] = backbones.count_params(shapes)
  return out


def main(argv):
  del argv
  counts = parameter_counts(_VOCAB.value, _SIZE.value, _SIGMA_BIAS.value, _BACKBONE.value)
  print(f'{"model":<24}{"display name":<24}{"parameters":>12}')
  for name, n in counts.items():
    print(f'{name:<24}{variants.get(name).display_name:<24}{n:>12,}')


def run():
  """Console-script entry point."""
  launcher.run(main, __name__)


if __name__ == '__main__':
  run()
