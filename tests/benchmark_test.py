"""The benchmark command runs (tiny setting) and reports every figure; it is not a timed test."""

import json
import subprocess
import sys

from monoloc_jax import benchmark
from monoloc_jax import variants

REQUIRED = ('train_samples_per_s', 'train_samples_per_s_per_seed_vmapped',
            'decode_samples_per_s', 'compile_s', 'peak_rss_mb')


def test_benchmark_cli_writes_every_figure(tmp_path):
  out = tmp_path / 'bench.json'
  proc = subprocess.run(
      [sys.executable, '-m', 'monoloc_jax.benchmark', '--task=copy', '--model=onestep',
       '--train_size=64', '--vmapped_seeds=2', '--decode_split=test_15', '--decode_size=32',
       '--eval_batch_size=32', f'--out={out}', '--config.hidden_dim=32', '--config.embed_dim=16',
       '--config.value_dim=32'],
      capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  figures = json.loads(out.read_text())
  # The model is the one --config and its overrides describe.
  assert (figures['hidden_dim'], figures['embed_dim'], figures['value_dim']) == (32, 16, 32)
  for key in REQUIRED:
    assert figures[key] > 0, key
  assert 0 < figures['train_peak_fraction'] < 1
  assert 'samples/s' in proc.stdout and 'peak resident memory' in proc.stdout


def test_flop_count_grows_with_lengths_and_attention_branches():
  onestep, content = variants.get('onestep'), variants.get('content')
  base = benchmark.flops_per_sample(10, 20, 14, spec=onestep)
  assert benchmark.flops_per_sample(10, 40, 14, spec=onestep) > base
  assert benchmark.flops_per_sample(20, 20, 14, spec=onestep) > base
  # Decoder GRU alone: 2 * ((64 + 128) * 384 + 128 * 384) FLOPs per step.
  gru = 2 * ((64 + 128) * 384 + 128 * 384)
  assert benchmark.flops_per_sample(10, 21, 14, spec=content) - \
      benchmark.flops_per_sample(10, 20, 14, spec=content) > gru


def test_benchmark_bad_config_is_one_line(tmp_path):
  for args, message in ((['--config.hidden_dim=3'],
                         'error: bad value for config.hidden_dim: 3; it must be an even '
                         'integer >= 2'),
                        (['--config.hiden=3'], "error: unknown config field 'hiden'; valid "
                         'fields: '),
                        (['--config=nope'], "error: cannot load the --config file 'nope'")):
    proc = subprocess.run([sys.executable, '-m', 'monoloc_jax.benchmark', *args],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, (args, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), (args, lines)
