"""The paper's CFQ size (App. E): 2 layers, d_e 128, 256 hidden, 512 value units, dropout 0.4, batch 128."""

from monoloc_jax.configs import default


def get_config():
  c = default.get_config()
  c.task = 'cfq_length'
  c.variant = 'mix_onestep'
  c.num_layers = 2
  c.embed_dim = 128
  c.hidden_dim = 256
  c.value_dim = 512
  c.dropout = 0.4
  c.batch_size = 128
  # As the authors' CFQ configs: query/key width 128, and both decoder layers
  # start from the encoder layers' backward final states.
  c.qk_dim = 128
  c.decoder_init = 'backward_states'
  return c
