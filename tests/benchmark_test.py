"""The benchmark command runs (tiny setting) and reports every figure; it is not a timed test."""

import json
import re
import subprocess
import sys

import numpy as np

from monoloc_jax import benchmark
from monoloc_jax import config_paths
from monoloc_jax import variants
from monoloc_jax.backbones import gru
from monoloc_jax.backbones import transformer
from monoloc_jax.configs import default

REQUIRED = ('train_samples_per_s', 'train_samples_per_s_per_seed_vmapped',
            'decode_samples_per_s', 'compile_s', 'peak_rss_mb')


def test_benchmark_cli_writes_every_figure(tmp_path):
  out = tmp_path / 'bench.json'
  proc = subprocess.run(
      [sys.executable, '-m', 'monoloc_jax.benchmark', '--task=copy', '--model=onestep',
       '--train_size=64', '--vmapped_seeds=2', '--decode_split=test_15', '--decode_size=32',
       '--eval_batch_size=32', f'--out={out}', '--config.hidden_dim=32', '--config.gru.embed_dim=16',
       '--config.gru.value_dim=32'],
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
  base = gru.flops_per_sample(10, 20, 14, spec=onestep)
  assert gru.flops_per_sample(10, 40, 14, spec=onestep) > base
  assert gru.flops_per_sample(20, 20, 14, spec=onestep) > base
  # Decoder GRU alone: 2 * ((64 + 128) * 384 + 128 * 384) FLOPs per step.
  decoder_gru = 2 * ((64 + 128) * 384 + 128 * 384)
  assert gru.flops_per_sample(10, 21, 14, spec=content) - \
      gru.flops_per_sample(10, 20, 14, spec=content) > decoder_gru


def test_benchmark_bad_config_is_one_line(tmp_path):
  for args, message in ((['--config.hidden_dim=3'],
                         'error: bad value for config.hidden_dim: 3; it must be an even '
                         'integer >= 2'),
                        (['--config.hiden=3'], "error: unknown config field 'hiden'; valid "
                         'fields: '),
                        (['--config=nope'], "error: cannot load the --config file 'nope'"),
                        (['--config.task=copy'], 'error: monoloc-benchmark takes the task from '
                         '--task; --config.task would be ignored'),
                        (['--config.variant', 'mono'], 'error: monoloc-benchmark takes the '
                         'variant from --model; --config.variant would be ignored')):
    proc = subprocess.run([sys.executable, '-m', 'monoloc_jax.benchmark', *args],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, (args, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), (args, lines)


def test_transformer_flop_count_by_its_formula():
  """D = 8, H = 2 (K = Q = 4), L = 1, F = 16, V = 10; 3 source tokens (S = 5), T = 4,
  Content cross-attention: the docstring's terms, worked by hand.
    encoder layer: 8*5*64 + 4*25*8 + 4*5*8*16                 = 2560 + 800 + 2560 = 5920
    decoder layer: 8*4*64 + 4*16*8 + 4*4*8*16                 = 2048 + 512 + 2048 = 4608
                   values 2*5*64 + out 2*4*64 + sum 2*4*5*8   =  640 + 512 +  320 = 1472
                   keys 2*5*8*2*4 + T H (2 D Q + 2 S Q) = 640 + 4*2*(64 + 40)    = 1472
    output layer:  2*4*8*10                                                      =  640
  """
  content = variants.get('content')
  assert transformer.flops_per_sample(3, 4, 10, d=8, heads=2, layers=1, mlp_dim=16,
                                      spec=content) == 5920 + 4608 + 1472 + 1472 + 640
  # A location rule adds T H (2 D Q + 8 Q + 10 S) = 4*2*(64 + 32 + 50) per layer.
  location_only = variants.get('locattn')
  assert location_only.scores is None and location_only.location is not None
  assert transformer.flops_per_sample(3, 4, 10, d=8, heads=2, layers=1, mlp_dim=16,
                                      spec=location_only) == \
      5920 + 4608 + 1472 + 4 * 2 * (64 + 32 + 50) + 640
  # Two layers: twice the layers, one output layer.
  two = transformer.flops_per_sample(3, 4, 10, d=8, heads=2, layers=2, mlp_dim=16,
                                     spec=content)
  assert two == 2 * (5920 + 4608 + 1472 + 1472) + 640


def test_flop_counts_come_from_the_backbone_table():
  from monoloc_jax import backbones  # pylint: disable=g-import-not-at-top
  assert not hasattr(benchmark, 'FLOP_COUNTS')
  config = default.get_config()
  spec = variants.get('onestep')
  for name, backbone in backbones.BACKBONES.items():
    config.backbone = name
    assert benchmark.model_flops(config, spec, 14, [3], [4]) == backbone.flops(3, 4, 14, config,
                                                                                 spec)


def test_benchmark_cli_counts_the_transformer(tmp_path):
  """--config.backbone=transformer: the Transformer is measured, its FLOPs are the
  Transformer's count, and the parameter count is the model's."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from monoloc_jax import input_pipeline as ip  # pylint: disable=g-import-not-at-top
  from monoloc_jax import backbones  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  sizes = {'hidden_dim': 16, 'transformer.layers': 1, 'transformer.heads': 2,
           'transformer.mlp_dim': 32}
  out = tmp_path / 'bench.json'
  proc = subprocess.run(
      [sys.executable, '-m', 'monoloc_jax.benchmark', '--task=copy', '--model=onestep',
       '--train_size=64', '--vmapped_seeds=2', '--decode_split=test_15', '--decode_size=32',
       '--eval_batch_size=32', f'--out={out}', '--config.backbone=transformer',
       *[f'--config.{k}={v}' for k, v in sizes.items()]],
      capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  figures = json.loads(out.read_text())
  assert figures['backbone'] == 'transformer'
  assert (figures['transformer_layers'], figures['transformer_heads'],
          figures['transformer_mlp_dim']) == (1, 2, 32)
  config = default.get_config()
  config.update(task='copy', backbone='transformer', train_size=64)
  config_paths.overridden(config, sizes)
  vocab = ip.load_data(config).vocab
  model = backbones.from_config(config, vocab)
  src = jnp.ones((1, 3), jnp.int32)
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), src, jnp.array([3], jnp.int32), src)
  assert figures['parameters'] == backbones.count_params(shapes['params'])
  assert f"{figures['parameters']:,}" in proc.stdout and 'transformer backbone' in proc.stdout
  # The FLOP rate is the Transformer's count over the measured epoch time.
  data = ip.load_data(config)
  flops = 3.0 * benchmark.model_flops(config, variants.get('onestep'), len(vocab),
                                      data.train.src_len, data.train.tgt_len)
  np.testing.assert_allclose(figures['train_gflops_per_s'],
                             flops / figures['train_epoch_s'] / 1e9, rtol=1e-9)
  assert 0 < figures['train_peak_fraction'] < 1


class _Device:
  def __init__(self, stats):
    self._stats = stats

  def memory_stats(self):
    return self._stats


def test_peak_device_memory_is_the_allocators_peak_or_none():
  assert benchmark.device_peak_mb(_Device({'peak_bytes_in_use': 3 * 2 ** 20,
                                           'bytes_in_use': 2 ** 20})) == 3.0
  assert benchmark.device_peak_mb(_Device(None)) is None       # CPU: no allocator figures
  assert benchmark.device_peak_mb(_Device({'bytes_in_use': 1})) is None
  assert benchmark.device_peak_mb(object()) is None


def test_report_shows_device_memory_only_where_measured():
  figures = dict(train_samples_per_s=1.0, train_tokens_per_s=1.0, train_peak_fraction=0.1,
                 vmapped_seeds=5, seed_strategy='vmap', train_samples_per_s_per_seed_vmapped=1.0,
                 train_samples_per_s_vmapped_total=5.0, train_peak_fraction_vmapped=0.1,
                 decode_split='test_100', decode_samples_per_s=1.0, decode_tokens_per_s=1.0,
                 decode_peak_fraction=0.1, compile_s=1.0, train_shapes=2, peak_rss_mb=100.0,
                 parameters=10, variant='onestep', task='copy', backbone='gru', batch_size=32,
                 device='cuda:0', decoder_backward='autodiff', peak_device_mb=None)
  assert 'peak device memory' not in benchmark.format_report(figures)
  figures['peak_device_mb'] = 812.4
  assert re.search(r'\npeak device memory +812 MiB *\n', benchmark.format_report(figures))
