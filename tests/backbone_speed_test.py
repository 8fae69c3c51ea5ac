"""experiments/speed/backbone_speed.py: the Transformer it times has the GRU's parameter
count (within the tolerance); the timing itself is not a test."""

import importlib.util
import pathlib

from monoloc_jax import input_pipeline as ip
from monoloc_jax.configs import default

SCRIPT = (pathlib.Path(__file__).resolve().parent.parent / 'experiments' / 'speed'
          / 'backbone_speed.py')


def _load():
  spec = importlib.util.spec_from_file_location('experiments_backbone_speed', SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_transformer_size_matches_the_gru_parameter_count():
  speed = _load()
  config = default.get_config()
  config.update(task='recopy', train_size=64, eval_size=16, hidden_dim=32,
                gru=dict(embed_dim=16, value_dim=32))
  vocab = ip.load_data(config).vocab
  gru_count = speed.parameter_count(config, vocab)
  transformer = default.get_config()
  transformer.update(config.to_dict())
  transformer.update(backbone='transformer')
  size, count = speed.match_transformer_size(transformer, vocab, gru_count, 0.10)
  assert abs(count - gru_count) <= 0.10 * gru_count, (size, count, gru_count)
  assert count == speed.parameter_count(speed.with_size(transformer, size), vocab)
  # The MLP width is the closest one: one step of 32 either way is no closer.
  for other in (size.mlp_dim - 32, size.mlp_dim + 32):
    if other in speed.MLP_WIDTHS:
      other_count = speed.parameter_count(
          speed.with_size(transformer, speed.Size(size.layers, size.heads, other)), vocab)
      assert abs(other_count - gru_count) >= abs(count - gru_count)
  # The count is affine in the MLP width: 2 D + 1 parameters per unit and layer,
  # in the encoder's and the decoder's layers.
  wider = speed.parameter_count(
      speed.with_size(transformer, speed.Size(size.layers, size.heads, size.mlp_dim + 32)),
      vocab)
  assert wider - count == 32 * (2 * 32 + 1) * 2 * size.layers
