"""`config.backbone`: 'gru' (the paper's Seq2Seq, default) or 'transformer', one
table (`backbones.BACKBONES`) behind `backbones.from_config`. Tiny sizes, CPU."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import ml_collections
import numpy as np
import pytest

from monoloc_jax import backbones
from monoloc_jax import config_paths
from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import rundir
from monoloc_jax import train
from monoloc_jax import validation
from monoloc_jax.backbones import gru
from monoloc_jax.backbones import transformer
from monoloc_jax.configs import default
from monoloc_jax.vocab import SPECIAL_TOKENS, Vocabulary

TRANSFORMER_FIELDS = ('backbone', 'transformer')


def tiny_config(**overrides):
  """overrides: fields by path, e.g. **{'transformer.positions': 'rope'}."""
  c = default.get_config()
  config_paths.overridden(c, {
      'task': 'copy', 'variant': 'onestep', 'train_size': 200, 'eval_size': 16,
      'max_epochs': 1, 'test_splits': 'test_15', 'progress': False, 'hidden_dim': 16,
      'gru.embed_dim': 8, 'gru.value_dim': 16, 'backbone': 'transformer',
      'transformer.layers': 1, 'transformer.heads': 2, 'transformer.mlp_dim': 32})
  return config_paths.overridden(c, overrides)


def _cli(*args):
  env = dict(os.environ, MONOLOC_XLA_CACHE=jax.config.jax_compilation_cache_dir or '')
  return subprocess.run([sys.executable, '-m', 'monoloc_jax.main', *args],
                        capture_output=True, text=True, timeout=600, env=env)


def test_from_config_builds_the_named_backbone():
  vocab = Vocabulary(SPECIAL_TOKENS + tuple('0123456789'))
  paper = backbones.from_config(default.get_config(), vocab)
  assert type(paper) is gru.Seq2Seq                    # pylint: disable=unidiomatic-typecheck
  model = backbones.from_config(tiny_config(**{'transformer.positions': 'rope'}), vocab)
  assert isinstance(model, transformer.Transformer)
  assert (model.model_dim, model.num_layers, model.num_heads, model.mlp_dim,
          model.positions, model.qk_dim, model.vocab_size) == (16, 1, 2, 32, 'rope', None,
                                                               len(vocab))
  assert model.dropout_rate == default.get_config().dropout
  assert set(backbones.BACKBONES) == {'gru', 'transformer'}
  with pytest.raises(errors.MonolocError,
                     match="^unknown backbone 'lstm'; valid backbones: gru, transformer$"):
    backbones.from_config(tiny_config(backbone='lstm'), vocab)


def test_the_default_is_gru_and_an_old_config_without_the_fields_resumes():
  assert default.get_config().backbone == 'gru'
  stored = default.get_config().to_dict()
  for field in TRANSFORMER_FIELDS:
    stored.pop(field)
  assert rundir.config_changes(ml_collections.ConfigDict(stored), default.get_config()) == []


def test_an_old_workdir_config_json_without_the_fields_loads_with_defaults(tmp_path):
  defaults = default.get_config()
  given = tiny_config(**{f: defaults[f] for f in TRANSFORMER_FIELDS})   # an old GRU run
  stored = given.to_dict()
  for field in TRANSFORMER_FIELDS:
    stored.pop(field)
  (tmp_path / rundir.CONFIG).write_text(json.dumps(stored))
  config = rundir.load_config(tmp_path)
  assert config.backbone == 'gru' and config.transformer.heads == 4
  rundir.check_config(tmp_path, given)                   # resumes: no conflict


@pytest.mark.parametrize('overrides, message', [
    (dict(backbone='lstm'), "unknown backbone 'lstm'; valid backbones: gru, transformer"),
    ({'transformer.positions': 'absolute'},
     "bad value for config.transformer.positions: 'absolute'; valid: none, sinusoidal, "
     'learned, relative, alibi, rope, randomized_sinusoidal, randomized_rope'),
    ({'transformer.heads': 3},
     'bad value for config.transformer.heads: 3; it must be an integer >= 1 that divides '
     'hidden_dim=16'),
    ({'transformer.layers': 0},
     'bad value for config.transformer.layers: 0; it must be an integer >= 1'),
])
def test_bad_backbone_settings_are_one_line(tmp_path, overrides, message):
  with pytest.raises(errors.MonolocError) as info:
    train.train_and_evaluate(tiny_config(**overrides), str(tmp_path))
  assert str(info.value) == message
  assert not list(tmp_path.iterdir())                    # nothing written


def test_heads_need_not_divide_hidden_dim_for_the_gru():
  validation.validate(tiny_config(**{'backbone': 'gru', 'hidden_dim': 6, 'transformer.heads': 4}))


def test_cli_bad_backbone_is_one_error_line(tmp_path):
  proc = _cli(f'--workdir={tmp_path}', '--config.backbone=lstm')
  assert proc.returncode == 2, proc.stderr
  assert 'Traceback' not in proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error:'), proc.stderr
  assert 'valid backbones: gru, transformer' in lines[0]


@pytest.fixture(scope='module')
def transformer_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('transformer_run')
  results = train.train_and_evaluate(tiny_config(max_epochs=1), str(workdir))
  return workdir, results


def test_a_transformer_run_trains_resumes_and_evaluates(transformer_run):
  workdir, results = transformer_run
  saved = json.loads((workdir / 'results.json').read_text())
  accuracy = saved['test']['test_15']['accuracy']
  assert 0.0 <= accuracy <= 100.0
  assert accuracy == results['test']['test_15']['accuracy']
  assert json.loads((workdir / rundir.CONFIG).read_text())['backbone'] == 'transformer'
  # Resume with one more epoch: the stored transformer config is accepted.
  more = train.train_and_evaluate(tiny_config(max_epochs=2), str(workdir))
  assert more['epochs'] == 2
  # Re-scoring the best checkpoint restores the Transformer from the stored config.
  again = inference.evaluate(str(workdir))
  assert again['test']['test_15']['accuracy'] == more['test']['test_15']['accuracy']
  # A GRU config on the same workdir is refused (the backbone is the run's identity).
  with pytest.raises(errors.MonolocError, match='backbone'):
    train.train_and_evaluate(tiny_config(backbone='gru', max_epochs=2), str(workdir))


def test_decode_with_attention_keeps_the_transformer_aux(transformer_run):
  workdir, _ = transformer_run
  (decoded,) = inference.decode_with_attention(str(workdir), ['1 2 3'])
  rows = decoded.attention.shape[0]          # len(output) + 1, at most the step budget
  assert 1 <= rows <= len(decoded.output) + 1 and decoded.attention.shape[1] == 5
  assert isinstance(decoded.aux['direction'], float)
  assert decoded.aux['layer_direction'].shape == (1,)            # [L]
  assert decoded.aux['layer_attention'].shape[:3] == (rows, 1, 2)  # [T, L, H, S]
  assert decoded.aux['mu'].shape == (rows, 1, 2)                 # [T, L, H]
  assert np.isfinite(decoded.attention).all()


def test_cli_evaluates_and_predicts_a_transformer_run(transformer_run):
  workdir, _ = transformer_run
  proc = _cli(f'--workdir={workdir}', '--mode=evaluate')
  assert proc.returncode == 0 and 'test_15' in proc.stdout, proc.stderr
  proc = _cli(f'--workdir={workdir}', '--mode=predict', '--inputs=1 2 3 4 5')
  assert proc.returncode == 0, proc.stderr
  assert 'output:' in proc.stdout and 'attends:' in proc.stdout
