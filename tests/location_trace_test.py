"""experiments/location_trace.py on a GRU run and on a Transformer run (one row per
recurrence: the Transformer has one per layer and head)."""

import importlib.util
import pathlib
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np

from monoloc_jax import input_pipeline as ip
from monoloc_jax import train
from monoloc_jax.configs import default

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / 'experiments' / 'location_trace.py'
_spec = importlib.util.spec_from_file_location('location_trace', SCRIPT)
location_trace = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(location_trace)
ROW = re.compile(r'^\s*0 (\S+)\s+(\d+\.\d)\s+(\d\.\d\d)  step: (.*)   \|mu-ideal\|: (.*)$')


def _run(tmp_path, **overrides):
  c = default.get_config()
  c.update(task='copy', variant='onestep', train_size=200, eval_size=16, max_epochs=1,
           test_splits='test_15', progress=False)
  c.update(overrides)
  train.train_and_evaluate(c, str(tmp_path))
  out = subprocess.run([sys.executable, str(SCRIPT), f'--workdir={tmp_path}', '--size=16'],
                       capture_output=True, text=True, timeout=600, check=True).stdout
  rows = [ROW.match(line) for line in out.splitlines()]
  return [m.groups() for m in rows if m]


def test_gru_run_has_one_row_per_split(tmp_path):
  rows = _run(tmp_path)
  assert [r[0] for r in rows] == ['dev', 'test_15']
  for _, acc, alpha, step, err in rows:
    assert 0.0 <= float(alpha) <= 1.0
    # Copy is an aligned task: the first bin's step and |mu - ideal| are numbers.
    assert re.match(r'\s*\d+\.\d\d', step) and re.match(r'\s*\d+\.\d\d', err)


def test_transformer_run_has_one_row_per_layer_and_head(tmp_path):
  rows = _run(tmp_path, backbone='transformer', transformer=dict(layers=2, heads=2, mlp_dim=32),
              warmup_steps=1)
  assert [r[0] for r in rows] == [f'{split}/L{l}H{h}' for split in ('dev', 'test_15')
                                  for l in range(2) for h in range(2)]


def test_trace_reads_the_named_recurrence():
  """trace() on a fake decoder whose (layer, head) recurrences step by different
  constants: each recurrence's row reports its own step and its own |mu - ideal|."""
  b, t, layers, heads = 4, 6, 2, 3
  src_len = np.full((b,), t, np.int32)
  split = ip.EncodedSplit(np.full((b, t), 5, np.int32), src_len, np.full((b, t + 1), 5, np.int32),
                          src_len + 1, None, 0)
  rate = np.arange(layers * heads, dtype=np.float64).reshape(layers, heads) / 2   # 0 .. 2.5

  def greedy(params, src, lengths, n_steps):
    del params
    rows, s = src.shape[0], np.asarray(lengths)[:, None, None, None] + 2
    pos = (np.arange(n_steps)[None, :, None, None] + 1) * rate[None, None]     # [B, T, L, H]
    return SimpleNamespace(tokens=np.full((rows, n_steps), 5), aux={
        'direction': np.ones((rows,)), 'mu': pos / (s - 1),
        'step': np.broadcast_to(rate, (rows, n_steps, layers, heads))})

  for layer in range(layers):
    for head in range(heads):
      _, alpha, step, err = location_trace.trace(greedy, None, split, b, 1, (layer, head))
      r = rate[layer, head]
      assert alpha == 1.0
      np.testing.assert_allclose(step[0], r)                       # bin 0-10: t = 0..5
      np.testing.assert_allclose(err[0], abs(r - 1) * np.mean(np.arange(t) + 1))
  assert location_trace.recurrences(default.get_config()) == [None]


def test_a_grid_unit_directory_is_a_one_line_error_naming_its_seeds(tmp_path):
  """A grid unit keeps one run directory per seed; given the unit's directory the script
  exits with status 2 and one line that names the run directories inside, no traceback."""
  for seed in (0, 1):
    (tmp_path / f'seed{seed}').mkdir()
    (tmp_path / f'seed{seed}' / 'config.json').write_text('{}')
  proc = subprocess.run([sys.executable, str(SCRIPT), f'--workdir={tmp_path}'],
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      f'error: {tmp_path} has no config.json: not a monoloc_jax run directory; it holds the '
      'run directories seed0, seed1 (a grid unit keeps one per seed): pass one of them']


def test_a_variant_without_a_location_rule_is_a_one_line_error(tmp_path):
  c = default.get_config()
  c.update(task='copy', variant='content', train_size=64, eval_size=8, max_epochs=1,
           test_splits='test_15', progress=False)
  train.train_and_evaluate(c, str(tmp_path))
  proc = subprocess.run([sys.executable, str(SCRIPT), f'--workdir={tmp_path}'],
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 2 and 'Traceback' not in proc.stderr
  # Restoring the checkpoint logs to stderr first (absl INFO lines); the error is the last line.
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: needs a location variant with direction mixing (a_dir, mu, step); got 'content'")
