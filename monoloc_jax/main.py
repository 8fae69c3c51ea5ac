"""Command-line launcher (installed as `monoloc-train`; also `python experiments/main.py`).

  monoloc-train --task=reverse_copy --model=onestep --seeds=5 --workdir=/tmp/run
  monoloc-train --config=quick --workdir=/tmp/quick      # a named config (configs/quick.py)
  monoloc-train --config.max_epochs=20 --config.learning_rate=5e-4 ...
  monoloc-train --mode=evaluate --workdir=/tmp/run --config.test_splits=all --config.eval_size=500
  monoloc-train --mode=predict --workdir=/tmp/run --inputs="1 2 3 4 5" --inputs="9 8 7"
  monoloc-train --mode=predict --workdir=/tmp/run --inputs="1 2 3" --seed_index=2
  monoloc-train --distributed=auto ...     # on every host of a TPU pod slice / SLURM job

--mode=predict decodes with the run's best-dev seed unless --seed_index picks one,
and says which. --mode=evaluate may change config.test_splits, eval_size and
eval_batch_size; a split scored on fewer samples than results.json holds for it is
written under "partial_test", beside the full result, and the command says so.

The common choices are plain flags; every other setting is a field of the
ml_collections config (monoloc_jax/configs/default.py), set with --config.<field>.
"""

# pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax import cli
if __name__ == '__main__':     # `python -m monoloc_jax.main`: Ctrl-C works from here on
  cli.stop_on_interrupt()

import importlib.util
import pathlib
import sys

from absl import app
from absl import flags
from absl import logging
import ml_collections
from ml_collections import config_flags

from monoloc_jax import configs
from monoloc_jax import errors
from monoloc_jax import rundir
from monoloc_jax import sharding
from monoloc_jax import tasks
from monoloc_jax import variants
from monoloc_jax import xla_cache

_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, logs and results.')
_MODE = flags.DEFINE_enum('mode', 'train', ['train', 'evaluate', 'predict'],
                          'train (resumes if the workdir has a checkpoint), evaluate, predict.')
_TASK = flags.DEFINE_enum('task', None, list(tasks.TASKS), 'Task slug (overrides config.task).')
_MODEL = flags.DEFINE_enum('model', None, list(variants.NAMES),
                           'Attention variant slug (overrides config.variant).')
_SEEDS = flags.DEFINE_integer('seeds', None, 'Number of seeds trained together (vmapped).',
                              lower_bound=1)
_DATA_DIR = flags.DEFINE_string('data_dir', None, 'Data directory (SCAN, CFQ, Lookup files).')
_DISTRIBUTED = flags.DEFINE_string('distributed', '', 'Multi-host (a TPU pod slice, a multi-node '
                                   'GPU job; every process runs the same command): '
                                   + sharding.DISTRIBUTED_HELP + '.')
_INPUTS = flags.DEFINE_multi_string('inputs', [], 'Whitespace-tokenised inputs for --mode=predict.')
_SEED_INDEX = flags.DEFINE_integer(
    'seed_index', None, 'Which seed of the run decodes in --mode=predict (0 = config.seed); '
    'default: the seed with the best dev accuracy.', lower_bound=0)
HELP_FLAGS = ('-h', '--help', '--helpshort', '--helpfull', '-?')


def _config_file_defaults() -> ml_collections.ConfigDict:
  """The --config file's own config, without any --config.<field> override."""
  path = config_flags.get_config_filename(flags.FLAGS['config'])
  spec = importlib.util.spec_from_file_location('monoloc_config_file', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def given_config_fields() -> dict:
  """{field: value} of the --config.<field> values on this command line (those that
  differ from the --config file's own)."""
  given = ml_collections.ConfigDict(flags.FLAGS.config.to_dict())
  return {field: new for field, _, new in rundir.config_changes(_config_file_defaults(), given)}


def train_config(workdir: str) -> ml_collections.ConfigDict:
  """The config to train with.

  A new workdir: the --config file, its --config.<field> overrides and the plain
  flags. A workdir that holds a run: its stored config.json, with only the
  fields given on this command line changed (so `--workdir=W --config.max_epochs=6`
  resumes W's own run); `train.train_and_evaluate` then refuses changes beyond
  `rundir.RESUMABLE_FIELDS`.
  """
  given = ml_collections.ConfigDict(flags.FLAGS.config.to_dict())
  if (pathlib.Path(workdir) / rundir.CONFIG).exists():
    file_defaults = _config_file_defaults()
    config = rundir.load_config(pathlib.Path(workdir))
    for field, stored, new in rundir.config_changes(file_defaults, given):
      del stored
      config[field] = new
  else:
    config = given
  for field, flag in (('task', _TASK), ('variant', _MODEL), ('seeds', _SEEDS),
                      ('data_dir', _DATA_DIR)):
    if flag.value is not None:
      config[field] = flag.value
  return config


def _run(argv) -> None:
  if len(argv) > 1:
    raise errors.MonolocError(f"unexpected arguments {' '.join(argv[1:])!r}; "
                              'settings are flags, e.g. --task=copy')
  if not _WORKDIR.value:
    raise errors.MonolocError('--workdir is required')
  processes = sharding.initialize_distributed(_DISTRIBUTED.value)   # before JAX uses a device
  if processes:
    print(processes, flush=True)
  xla_cache.enable_compilation_cache()
  from monoloc_jax import inference  # pylint: disable=g-import-not-at-top
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  if _MODE.value == 'evaluate':
    results = inference.evaluate(_WORKDIR.value, given_config_fields())
    last = results['last_evaluation']
    scored = {k: results['partial_test' if k in last.get('partial', []) else 'test'][k]
              for k in last['splits']}
    print(inference.format_table(scored, ml_collections.ConfigDict(results['config'])))
    for note in inference.evaluation_notes(results):
      print(note)
    return
  if _MODE.value == 'predict':
    if not _INPUTS.value:
      raise errors.MonolocError('--mode=predict needs at least one --inputs="tokens ..."')
    decoded = inference.decode_with_attention(_WORKDIR.value, _INPUTS.value,
                                              seed_index=_SEED_INDEX.value)
    print(f'decoding with {decoded[0].seed.describe()}')
    for text, d in zip(_INPUTS.value, decoded):
      output, positions = d.output, inference.attended_positions(d)
      print(f'input : {text}')
      print(f"output: {' '.join(output)}")
      src = list(d.source)        # the input's tokens (and an <eos> the run's data had)
      names = ['START'] + src + ['END']
      print('attends: ' + ' '.join(f'{tok}@{p}({names[p + 1] if -1 <= p <= len(src) else "?"})'
                                   for tok, p in zip(list(output) + ['<eos>'], positions)))
    return
  config = train_config(_WORKDIR.value)
  results = train.train_and_evaluate(config, _WORKDIR.value)
  print(inference.format_table(results['test'], config))
  print(f"wall time {results['wall_time_s']:.1f}s; results in "
        f"{pathlib.Path(_WORKDIR.value) / 'results.json'}")


def main(argv) -> None:
  logging.set_verbosity(logging.WARNING)
  try:
    _run(argv)
  except errors.MonolocError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  except OSError as e:      # anything the library did not name itself: still one line
    print(f'error: {rundir.os_error_message(e)}', file=sys.stderr)
    sys.exit(2)
  except KeyboardInterrupt:
    cli.exit_interrupted()


def _parse_flags(argv):
  """absl's flag parsing, with every error as one line (and exit code 2)."""
  try:
    parsed = flags.FLAGS(argv)
    flags.FLAGS.config.to_dict()          # loads the --config file (lazily, in ml_collections)
    return parsed
  except flags.Error as e:
    message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
  except OSError as e:
    path = config_flags.get_config_filename(flags.FLAGS['config'])
    message = f'cannot load the --config file {path!r} ({type(e).__name__})'
  except Exception as e:  # pylint: disable=broad-except
    # Anything else raised while reading a user's config file.
    message = f'bad --config: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}'
  print(f'error: {message}', file=sys.stderr)
  sys.exit(2)


def help_text() -> str:
  """`monoloc-train --help`: the usage, every flag, the named configs and every
  --config.<field> with its default."""
  lines = ['usage: monoloc-train --workdir=DIR [--task=... --model=... --seeds=N] '
           '[--config=NAME|FILE.py] [--config.FIELD=VALUE ...]', '', __doc__.strip(), '',
           'flags:']
  module_flags = sorted(flags.FLAGS.get_flags_for_module(sys.modules[__name__]),
                        key=lambda f: f.name)
  for flag in module_flags:
    if flag.name == 'config':
      continue
    default = '' if flag.default in (None, []) else f' (default: {flag.default})'
    lines.append(f'  --{flag.name}: {flag.help}{default}')
  lines += ['  --config: a named config or a config file (default: default)', '',
            'named configs (--config=NAME):']
  for name, path in configs.named_configs().items():
    lines.append(f'  {name:<10} {configs.summary(path)}')
  lines += ['', 'config fields (--config.FIELD=VALUE; defaults of configs/default.py):']
  for field, default, comment in configs.field_help():
    lines.append(f'  --config.{field}={default!r}' + (f'  # {comment}' if comment else ''))
  lines += ['', 'environment: MONOLOC_CACHE_DIR (generated task data, default '
            '~/.cache/monoloc_jax), MONOLOC_XLA_CACHE (compiled programs, default '
            "~/.cache/monoloc_jax/xla; '' turns it off)."]
  return '\n'.join(lines)


def run() -> None:
  """Console-script entry point."""
  cli.stop_on_interrupt()
  if any(arg in HELP_FLAGS for arg in sys.argv[1:]):
    print(help_text())
    sys.exit(0)
  sys.argv = configs.resolve_argv_or_exit(sys.argv)
  configs.define_config_flag(sys.argv, 'Training configuration file.')
  app.run(main, flags_parser=_parse_flags)


if __name__ == '__main__':
  run()
