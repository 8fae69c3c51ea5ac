"""Throughput benchmark (console script `monoloc-benchmark`).

  monoloc-benchmark --task=recopy --model=onestep --out=bench.json
  monoloc-benchmark --config=authors_code --config.hidden_dim=512   # another model / recipe

The model is the one `monoloc-train` would build from the same --config and
--config.FIELD overrides (default: configs/default.py); the flags below set the
task, variant, batch sizes and seed strategy on top of it.

Measures, after warm-up and separately from compilation:
  * training samples/s for one seed (one full epoch at --batch_size);
  * training samples/s per seed with --vmapped_seeds seeds (vmapped in one program, one
    after another in one program, or side by side from host threads: --seed_strategy);
  * greedy-decoding samples/s on --decode_split at --eval_batch_size, as a run decodes
    it (`inference.decode_split`);
  * compile time (every bucket shape of the train step and of decoding);
  * peak resident memory, and on an accelerator the allocator's peak device memory;
  * with --range=also (or only): range evaluation (`range_eval`) of a freshly
    initialised model, --range_seeds seeds, every length of --range_lengths with
    --range_samples examples each: wall time, first calls (compiles), programs;
and derives tokens/s and the fraction of --peak_gflops reached by the useful
FLOPs on the real, unpadded tokens, counted for the model's backbone
(the backbone table's count, `backbones.BACKBONES[...].flops`: GRU cells, attention and
projections for 'gru', see `backbones.gru.flops_per_sample`; attention, MLPs and
projections for 'transformer', see `backbones.transformer.flops_per_sample`). It also
reports the parameter count.
"""

import json
import resource
import sys
import time
from typing import Any, Dict, Optional

from absl import flags
import jax

from monoloc_jax import backbones
from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import input_pipeline as ip
from monoloc_jax import launcher
from monoloc_jax import multiseed
from monoloc_jax import precision
from monoloc_jax import range_eval
from monoloc_jax import tasks
from monoloc_jax import train
from monoloc_jax import validation
from monoloc_jax import variants
from monoloc_jax.backbones import gru
from monoloc_jax.configs import default
from monoloc_jax.vocab import Vocabulary

_TASK = flags.DEFINE_enum('task', 'recopy', list(tasks.TASKS), 'Task.')
_MODEL = flags.DEFINE_enum('model', 'onestep', list(variants.NAMES), 'Attention variant.')
_BATCH = flags.DEFINE_integer('batch_size', 32, 'Training batch size.', lower_bound=1)
_EVAL_BATCH = flags.DEFINE_integer('eval_batch_size', 256, 'Decoding batch size.', lower_bound=1)
_SEEDS = flags.DEFINE_integer('vmapped_seeds', 5, 'Seeds in the vmapped measurement.',
                              lower_bound=1)
_TRAIN_SIZE = flags.DEFINE_integer('train_size', 0, 'Training samples (0 = the whole split).',
                                   lower_bound=0)
_DECODE_SPLIT = flags.DEFINE_string('decode_split', 'test_100', 'Split to greedy-decode.')
_DECODE_SIZE = flags.DEFINE_integer('decode_size', 0, 'Decode samples (0 = the whole split).',
                                    lower_bound=0)
_PEAK = flags.DEFINE_float('peak_gflops', 166.0,
                           'Peak FP32 GFLOP/s of the machine (2 Zen 4 cores: 166).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Data directory for SCAN/CFQ/Lookup files.')
_OUT = flags.DEFINE_string('out', '', 'Write the figures as JSON to this file.')
_BACKWARD = flags.DEFINE_enum('decoder_backward', 'autodiff', list(gru.DECODER_BACKWARDS),
                              'Backward pass of the decoder scan (config.gru.decoder_backward).')
_RANGE = flags.DEFINE_enum('range', 'off', ['off', 'also', 'only'],
                           'Range evaluation figure: off, also (after the others) or only.')
_RANGE_LENGTHS = flags.DEFINE_string('range_lengths', '1:500', 'Lengths of the range figure.')
_RANGE_SAMPLES = flags.DEFINE_integer('range_samples', 200, 'Examples per length.',
                                      lower_bound=1)
_RANGE_SEEDS = flags.DEFINE_integer('range_seeds', 3, 'Seeds decoded at once in the range '
                                    'figure.', lower_bound=1)
_STRATEGY = flags.DEFINE_enum('seed_strategy', 'auto', list(multiseed.STRATEGIES),
                              'How the multi-seed measurement runs its seeds '
                              '(config.seed_strategy).')


def model_flops(config, spec, vocab: int, src_len, tgt_len) -> float:
  """Forward FLOPs of the samples with lengths src_len [n], tgt_len [n] under
  config.backbone's count (`backbones.BACKBONES`)."""
  if config.backbone not in backbones.BACKBONES:
    raise errors.unknown_name('backbone', config.backbone, backbones.BACKBONES)
  count = backbones.BACKBONES[config.backbone].flops
  return sum(count(int(a), int(b), vocab, config, spec) for a, b in zip(src_len, tgt_len))


def device_peak_mb(device) -> Optional[float]:
  """Peak memory the device's allocator has held (`Device.memory_stats()`'s
  'peak_bytes_in_use'), in MiB; None where the backend keeps no such figure (CPU)."""
  stats = device.memory_stats() if hasattr(device, 'memory_stats') else None
  if not stats or 'peak_bytes_in_use' not in stats:
    return None
  return stats['peak_bytes_in_use'] / 2.0 ** 20


def _timed(fn):
  t0 = time.perf_counter()
  out = fn()
  jax.block_until_ready(out)
  return out, time.perf_counter() - t0


def measure(task: str, model_name: str, batch_size: int, eval_batch_size: int,
            vmapped_seeds: int, train_size: int = 0, decode_split: str = 'test_100',
            decode_size: int = 0, peak_gflops: float = 166.0, data_dir: str = '',
            decoder_backward: str = 'autodiff', seed_strategy: str = 'auto',
            config=None) -> Dict[str, float]:
  """Runs the measurements; returns the figures as a dict.

  config: the model's config (default: configs/default.py); the other arguments
  override its task, variant, batch sizes, data and seed strategy.
  """
  config = default.get_config() if config is None else config.copy_and_resolve_references()
  config.gru.decoder_backward, config.seed_strategy = decoder_backward, seed_strategy
  config.task, config.variant, config.batch_size = task, model_name, batch_size
  config.eval_batch_size, config.train_size, config.eval_size = eval_batch_size, train_size, 0
  config.test_splits, config.data_dir = decode_split, data_dir
  validation.validate(config)
  data = ip.load_data(config)
  split = data.tests[decode_split]
  if decode_size and decode_size < len(split):
    split = ip.EncodedSplit(split.src[:decode_size], split.src_len[:decode_size],
                            split.tgt[:decode_size], split.tgt_len[:decode_size], None, 0)
  model = backbones.from_config(config, data.vocab)
  tx = train.make_optimizer(config)
  programs = train.make_train_programs(model, tx, seed_strategy, precision.of(config))
  eval_programs = inference.make_eval_programs(model, seed_strategy, precision.of(config))
  spec = model.variant
  out: Dict[str, float] = {'task': task, 'variant': model_name, 'batch_size': batch_size,
                           'backend': jax.default_backend(),
                           'device': str(jax.devices()[0]),
                           'decoder_backward': decoder_backward,
                           'seed_strategy': multiseed.resolve(seed_strategy),
                           'embed_dim': config.gru.embed_dim, 'hidden_dim': config.hidden_dim,
                           'value_dim': config.gru.value_dim, 'qk_dim': config.qk_dim,
                           'dtype': config.dtype, 'matmul_precision': precision.of(config),
                           'backbone': config.backbone}
  # The backbone's own fields, as '<backbone>_<field>' ('transformer_layers', 'gru_num_layers').
  out.update({f'{config.backbone}_{k}': v for k, v in config[config.backbone].items()})

  def init_state(n):
    probe = next(ip.train_batches(data.train, batch_size, [0], 0, 0, data.vocab.sos_id))
    return train.create_train_state(programs, list(range(n)), probe)

  def epoch_batches(n):
    return list(ip.train_batches(data.train, batch_size, list(range(n)), 0, 0,
                                 data.vocab.sos_id))

  compile_s = 0.0

  def steps(state, stats, batches):
    """The trainer's epoch loop over `batches` (`multiseed.run_steps`)."""
    return multiseed.run_steps(programs.train_step, state, stats, batches, seed_strategy)

  def warm(state, batches):
    """Runs one batch of each distinct shape (compiles them); returns the state."""
    nonlocal compile_s
    stats = train.EpochStats.zeros(batches[0].src.shape[0])
    seen = set()
    for b in batches:
      shape = (b.src.shape, b.tgt_in.shape)
      if shape not in seen:
        seen.add(shape)
        (state, stats), dt = _timed(lambda: steps(state, stats, [b]))
        compile_s += dt
    return state, len(seen)

  def run_epoch(state, batches):
    stats = train.EpochStats.zeros(batches[0].src.shape[0])
    t0 = time.perf_counter()
    state, stats = steps(state, stats, batches)
    jax.block_until_ready(stats)
    return state, time.perf_counter() - t0

  n_train = len(data.train)
  train_tokens = int(data.train.tgt_len.sum())
  # One seed.
  batches = epoch_batches(1)
  state, n_shapes = warm(init_state(1), batches)
  _, dt = run_epoch(state, batches)
  out['train_samples_per_s'] = n_train / dt
  out['train_tokens_per_s'] = train_tokens / dt
  out['train_epoch_s'] = dt
  out['train_shapes'] = n_shapes
  # Several seeds (vmapped, lax.map or host threads, --seed_strategy).
  batches = epoch_batches(vmapped_seeds)
  state, _ = warm(init_state(vmapped_seeds), batches)
  _, dt = run_epoch(state, batches)
  out['vmapped_seeds'] = vmapped_seeds
  out['train_samples_per_s_per_seed_vmapped'] = n_train / dt
  out['train_samples_per_s_vmapped_total'] = vmapped_seeds * n_train / dt
  # Greedy decoding of the long split (one seed).
  params = init_state(1).params
  out['parameters'] = backbones.count_params(params)          # one seed: leaves are [1, ...]
  eval_b = ip.eval_batches(split, eval_batch_size, data.vocab.sos_id)
  seen = set()
  for _, b, steps in eval_b:
    if (b.src.shape, steps) not in seen:
      seen.add((b.src.shape, steps))
      _, dt = _timed(lambda: eval_programs.greedy(params, b.src, b.src_len, steps))
      compile_s += dt
  t0 = time.perf_counter()      # as a run decodes it (batches side by side under 'threads')
  inference.decode_split(eval_programs, params, split, eval_batch_size, data.vocab)
  dt = time.perf_counter() - t0
  out['decode_split'] = decode_split
  out['decode_samples_per_s'] = len(split) / dt
  out['decode_tokens_per_s'] = float(split.tgt_len.sum()) / dt
  out['decode_s'] = dt
  out['compile_s'] = compile_s   # first calls: compile + one run each
  out['peak_rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
  out['peak_device_mb'] = device_peak_mb(jax.devices()[0])

  vocab = len(data.vocab)
  train_flops = 3.0 * model_flops(config, spec, vocab, data.train.src_len, data.train.tgt_len)
  out['train_gflops_per_s'] = train_flops / out['train_epoch_s'] / 1e9
  out['train_peak_fraction'] = out['train_gflops_per_s'] / peak_gflops
  out['train_gflops_per_s_vmapped'] = (train_flops * vmapped_seeds
                                       / (vmapped_seeds * n_train
                                          / out['train_samples_per_s_vmapped_total']) / 1e9)
  out['train_peak_fraction_vmapped'] = out['train_gflops_per_s_vmapped'] / peak_gflops
  decode_flops = model_flops(config, spec, vocab, split.src_len, split.tgt_len)
  out['decode_gflops_per_s'] = decode_flops / out['decode_s'] / 1e9
  out['decode_peak_fraction'] = out['decode_gflops_per_s'] / peak_gflops
  return out


def measure_range(task: str, model_name: str, eval_batch_size: int, lengths: str = '1:500',
                  samples: int = 200, seeds: int = 3, seed_strategy: str = 'auto',
                  config=None) -> Dict[str, Any]:
  """Times `range_eval.evaluate_lengths` on a freshly initialised model of `seeds`
  seeds (the task's training vocabulary; training sources excluded, as a run's)."""
  config = default.get_config() if config is None else config.copy_and_resolve_references()
  config.task, config.variant, config.seed_strategy = task, model_name, seed_strategy
  config.eval_batch_size = eval_batch_size
  validation.validate(config)
  length_list = range_eval.parse_range(lengths, task)
  train_ex = tasks.load_splits(task, ('train',), seed=config.data_seed,
                               data_dir=config.data_dir or None)['train']
  vocab = Vocabulary.from_examples(train_ex)
  model = backbones.from_config(config, vocab)
  dummy = jax.numpy.ones((1, 1), jax.numpy.int32)
  params = jax.vmap(lambda key: backbones.init_params(
      model, key, dummy, jax.numpy.ones((1,), 'int32')))(jax.random.split(jax.random.PRNGKey(0),
                                                                           seeds))
  programs = inference.make_eval_programs(model, seed_strategy, precision.of(config))
  r = range_eval.evaluate_lengths(programs, params, vocab, config, length_list, samples,
                                  train_ex)
  return {'range_task': task, 'range_lengths': f'{length_list[0]}:{length_list[-1]}',
          'range_samples': samples, 'range_seeds': seeds,
          'range_examples': int(sum(r['samples'])), 'range_wall_s': r['wall_time_s'],
          'range_draw_s': r['draw_s'], 'range_decode_s': r['decode_s'],
          'range_first_call_s': r['first_call_s'], 'range_programs': r['compiled_programs']}


def format_range_report(r: Dict[str, Any]) -> str:
  """The range-evaluation line of the report."""
  return (f"{'range evaluation':<32}{r['range_wall_s']:>22.1f} s"
          f"{r['range_programs']:>15} programs  lengths {r['range_lengths']}, "
          f"{r['range_samples']} samples, {r['range_seeds']} seeds ({r['range_examples']} "
          f"examples); first calls {r['range_first_call_s']:.1f} s, drawing "
          f"{r['range_draw_s']:.1f} s")


def format_report(r: Dict[str, float]) -> str:
  rows = [
      ('training, 1 seed', f"{r['train_samples_per_s']:.0f} samples/s",
       f"{r['train_tokens_per_s']:.0f} tokens/s", f"{100 * r['train_peak_fraction']:.1f}% of peak"),
      (f"training, {r['vmapped_seeds']} seeds ({r['seed_strategy']})",
       f"{r['train_samples_per_s_per_seed_vmapped']:.0f} samples/s/seed",
       f"{r['train_samples_per_s_vmapped_total']:.0f} samples/s total",
       f"{100 * r['train_peak_fraction_vmapped']:.1f}% of peak"),
      (f"greedy decoding, {r['decode_split']}", f"{r['decode_samples_per_s']:.0f} samples/s",
       f"{r['decode_tokens_per_s']:.0f} tokens/s", f"{100 * r['decode_peak_fraction']:.1f}% of peak"),
      ('compile (all shapes)', f"{r['compile_s']:.1f} s", f"{r['train_shapes']} train shapes", ''),
      ('peak resident memory', f"{r['peak_rss_mb']:.0f} MB", '', ''),
  ] + ([('peak device memory', f"{r['peak_device_mb']:.0f} MiB", '', '')]
       if r.get('peak_device_mb') is not None else []) + [
      ('parameters', f"{r['parameters']:,}", '', ''),
  ]
  head = (f"{r['variant']} on {r['task']} ({r['backbone']} backbone), batch "
          f"{r['batch_size']}, {r['device']}, decoder backward {r['decoder_backward']}")
  return head + '\n' + '\n'.join(f'{a:<32}{b:>24}{c:>26}{d:>16}' for a, b, c, d in rows)


def main(argv):
  del argv
  _main()


# Config fields the benchmark takes from its own flags instead (a --config.FIELD for them
# would be silently overridden, so it is refused).
FLAG_FIELDS = {'task': '--task', 'variant': '--model'}


def check_config_overrides(argv) -> None:
  """Raises a one-line MonolocError for a --config.FIELD of `FLAG_FIELDS` in argv."""
  for field, flag in FLAG_FIELDS.items():
    if any(arg.split('=', 1)[0] == f'--config.{field}' for arg in argv):
      raise errors.MonolocError(f'monoloc-benchmark takes the {field} from {flag}; '
                                f'--config.{field} would be ignored')


def _main():
  check_config_overrides(sys.argv[1:])
  r = {}
  if _RANGE.value != 'only':
    r = measure(_TASK.value, _MODEL.value, _BATCH.value, _EVAL_BATCH.value, _SEEDS.value,
                _TRAIN_SIZE.value, _DECODE_SPLIT.value, _DECODE_SIZE.value, _PEAK.value,
                _DATA_DIR.value, _BACKWARD.value, _STRATEGY.value, config=_config())
    print(format_report(r))
  if _RANGE.value != 'off':
    r.update(measure_range(_TASK.value, _MODEL.value, _EVAL_BATCH.value, _RANGE_LENGTHS.value,
                           _RANGE_SAMPLES.value, _RANGE_SEEDS.value, _STRATEGY.value,
                           config=_config()))
    print(format_range_report(r))
  if _OUT.value:
    with open(_OUT.value, 'w') as f:
      json.dump(r, f, indent=2)


def _config():
  return flags.FLAGS['config'].value if 'config' in flags.FLAGS else None


def run():
  """Console-script entry point."""
  launcher.run(main, __name__, config_help='Model configuration: a named config or a config '
               'file, with --config.FIELD overrides (default: default).')


if __name__ == '__main__':
  run()
