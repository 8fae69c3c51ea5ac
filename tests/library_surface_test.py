"""The package's public surface ("Library users II", items 5 and the notes found by
reading): `import monoloc_jax` names its version and main entry points without
importing JAX; the CFQ size is written once (configs/cfq.py); the best-dev seed of
an unfinished run survives a damaged metrics.jsonl line.
"""

import json
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_version_agrees_with_pyproject_and_the_package_has_a_docstring():
  import monoloc_jax  # pylint: disable=g-import-not-at-top
  version = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / 'pyproject.toml').read_text(),
                      re.M).group(1)
  assert monoloc_jax.__version__ == version
  assert monoloc_jax.__doc__ and 'Monotonic Location Attention' in monoloc_jax.__doc__


def test_import_is_cheap_and_every_export_resolves():
  """`import monoloc_jax` imports neither JAX nor Flax (the entry points load on first
  use), and every name in __all__ resolves to the object it re-exports."""
  code = ('import sys, monoloc_jax; '
          'print(sorted(m for m in ("jax", "flax", "numpy", "matplotlib") if m in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                       timeout=120, check=True).stdout.strip()
  assert out == '[]'
  import monoloc_jax  # pylint: disable=g-import-not-at-top
  from monoloc_jax import attention, inference, train  # pylint: disable=g-import-not-at-top
  from monoloc_jax.backbones import gru  # pylint: disable=g-import-not-at-top
  for name in monoloc_jax.__all__:
    assert getattr(monoloc_jax, name) is not None, name
  assert monoloc_jax.Variant is attention.Variant
  assert monoloc_jax.attention_step is attention.attention_step
  assert monoloc_jax.Seq2Seq is gru.Seq2Seq
  assert monoloc_jax.train_and_evaluate is train.train_and_evaluate
  assert monoloc_jax.restore_seed is inference.restore_seed
  assert set(monoloc_jax.__all__) <= set(dir(monoloc_jax))
  from_attention = [n for n, m in monoloc_jax._EXPORTS.items() if m == 'monoloc_jax.attention']  # pylint: disable=protected-access
  assert from_attention and set(from_attention) <= set(attention.__all__)   # its public names
  with pytest.raises(AttributeError, match="has no attribute 'nope'"):
    monoloc_jax.nope  # pylint: disable=pointless-statement


def test_param_count_reads_the_cfq_size_from_configs_cfq(monkeypatch):
  """configs/cfq.py is the one place of the CFQ size: monoloc-params --size=cfq follows it."""
  from monoloc_jax import param_count  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import cfq  # pylint: disable=g-import-not-at-top
  before = param_count.parameter_counts(14, 'cfq')['onestep']
  real = cfq.get_config

  def wider():
    c = real()
    c.hidden_dim = 2 * c.hidden_dim
    return c
  monkeypatch.setattr(cfq, 'get_config', wider)
  assert param_count.parameter_counts(14, 'cfq')['onestep'] > before
  monkeypatch.setattr(cfq, 'get_config', real)
  config = cfq.get_config()
  assert param_count.model_config('cfq').to_dict() == config.to_dict()


def test_param_count_counts_the_transformer():
  """monoloc-params --backbone=transformer: any backbone, through backbones.from_config."""
  from monoloc_jax import param_count  # pylint: disable=g-import-not-at-top
  gru_counts = param_count.parameter_counts(14, 'small')
  counts = param_count.parameter_counts(14, 'small', backbone='transformer')
  assert set(counts) == set(gru_counts)
  assert counts['onestep'] == 893464 != gru_counts['onestep']    # 2 + 2 layers, MLP 512
  proc = subprocess.run([sys.executable, '-m', 'monoloc_jax.param_count',
                         '--backbone=transformer'], capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  assert '893,464' in proc.stdout


def test_best_dev_seed_survives_a_damaged_history_line(tmp_path):
  """A kill while metrics.jsonl was written by an older version can leave a half line;
  the best-dev seed of the unfinished run is read from the lines that parse
  (`rundir.read_history`, the one reader), not a JSONDecodeError."""
  from monoloc_jax import inference  # pylint: disable=g-import-not-at-top
  rows = [{'epoch': 1, 'dev_accuracy': [10.0, 60.0], 'stopped': [False, False]},
          {'epoch': 2, 'dev_accuracy': [70.0, 65.0], 'stopped': [False, False]}]
  (tmp_path / 'metrics.jsonl').write_bytes(
      ''.join(json.dumps(r) + '\n' for r in rows).encode() + b'{"epoch": 3, "dev_acc\xff')
  assert inference.best_dev_per_seed(str(tmp_path)) == [70.0, 65.0]
  (tmp_path / 'metrics.jsonl').write_bytes(b'\x00\x00garbage\n')
  assert inference.best_dev_per_seed(str(tmp_path)) is None


def test_monoloc_params_bad_size_is_one_line_naming_the_choices():
  proc = subprocess.run([sys.executable, '-m', 'monoloc_jax.param_count', '--size=xx'],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      'error: flag --size=xx: value should be one of <small|cfq>']
