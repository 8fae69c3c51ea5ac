"""The paper's CFQ size (App. E): 2 layers, d_e 128, 256 hidden, 512 value units, dropout 0.4, batch 128.

This file is the one place the CFQ size is written: `monoloc-params --size=cfq`
(`param_count.model_size`) reads `get_config()`, and the reproduction grid's CFQ
units (experiments/grid.py) apply `SIZE`.
"""

from monoloc_jax import config_paths
from monoloc_jax.configs import default

# The CFQ size. As the authors' CFQ configs: query/key width 128, and both decoder
# layers start from the encoder layers' backward final states.
# Fields by path ('gru.num_layers': config.gru.num_layers; `config_paths.overridden`).
SIZE = {'gru.num_layers': 2, 'gru.embed_dim': 128, 'hidden_dim': 256, 'gru.value_dim': 512,
        'dropout': 0.4, 'batch_size': 128, 'qk_dim': 128, 'gru.decoder_init': 'backward_states'}


def get_config():
  c = default.get_config()
  c.task = 'cfq_length'
  c.variant = 'mix_onestep'
  return config_paths.overridden(c, SIZE)
