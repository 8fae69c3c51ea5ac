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
       '--eval_batch_size=32', f'--out={out}'],
      capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  figures = json.loads(out.read_text())
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
