"""Command-line launcher (installed as `monoloc-train`; also `python experiments/main.py`).

  monoloc-train --task=reverse_copy --model=onestep --seeds=5 --workdir=/tmp/run
  monoloc-train --config=quick --workdir=/tmp/quick      # a named config (configs/quick.py)
  monoloc-train --config.max_epochs=20 --config.learning_rate=5e-4 ...
  monoloc-train --mode=evaluate --workdir=/tmp/run --config.test_splits=all --config.eval_size=500
  monoloc-train --mode=predict --workdir=/tmp/run --inputs="1 2 3 4 5" --inputs="9 8 7"
  monoloc-train --mode=predict --workdir=/tmp/run --inputs="1 2 3" --seed_index=2
  monoloc-train --mode=range --workdir=/tmp/run --config.range_lengths=1:120 --config.range_samples=50
  monoloc-train --distributed=auto ...     # on every host of a TPU pod slice / SLURM job

--mode=predict decodes with the run's best-dev seed unless --seed_index picks one,
and says which. --mode=evaluate may change config.test_splits, eval_size and
eval_batch_size; a split scored on fewer samples than results.json holds for it is
written under "partial_test", beside the full result, and the command says so.
--mode=range scores every seed at every length of config.range_lengths and writes
range.json, range.csv and range.png into the workdir (range_eval.py).

The common choices are plain flags; every other setting is a field of the
ml_collections config (monoloc_jax/configs/default.py), set with --config.<field>.
"""

# pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax import interrupts
if __name__ == '__main__':     # `python -m monoloc_jax.main`: Ctrl-C works from here on
  interrupts.stop_on_interrupt()

import pathlib

from absl import flags
from absl import logging

from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import launcher
from monoloc_jax import range_eval
from monoloc_jax import rundir
from monoloc_jax import sharding
from monoloc_jax import tasks
from monoloc_jax import train
from monoloc_jax import variants
from monoloc_jax import xla_cache

_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, logs and results.')
_MODE = flags.DEFINE_enum('mode', 'train', ['train', 'evaluate', 'predict', 'range'],
                          'train (resumes if the workdir has a checkpoint), evaluate, predict, '
                          'range (every length of config.range_lengths).')
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
USAGE = ('monoloc-train --workdir=DIR [--task=... --model=... --seeds=N] '
         '[--config=NAME|FILE.py] [--config.FIELD=VALUE ...]')


def main(argv) -> None:
  logging.set_verbosity(logging.WARNING)
  if len(argv) > 1:
    raise errors.MonolocError(f"unexpected arguments {' '.join(argv[1:])!r}; "
                              'settings are flags, e.g. --task=copy')
  workdir = _WORKDIR.value
  if not workdir:
    raise errors.MonolocError('--workdir is required')
  processes = sharding.initialize_distributed(_DISTRIBUTED.value)   # before JAX uses a device
  if processes:
    print(processes, flush=True)
  xla_cache.enable_compilation_cache()
  config_file, given = launcher.config_file(), launcher.given_config()
  if _MODE.value == 'evaluate':
    print(inference.evaluation_report(
        inference.evaluate(workdir, rundir.given_fields(config_file, given))))
  elif _MODE.value == 'range':
    range_eval.range_evaluate(workdir, config_overrides=rundir.given_fields(config_file, given),
                              report=print)
  elif _MODE.value == 'predict':
    if not _INPUTS.value:
      raise errors.MonolocError('--mode=predict needs at least one --inputs="tokens ..."')
    print(inference.prediction_report(_INPUTS.value, inference.decode_with_attention(
        workdir, _INPUTS.value, seed_index=_SEED_INDEX.value)))
  else:
    config = rundir.train_config(workdir, config_file, given, {
        'task': _TASK.value, 'variant': _MODEL.value, 'seeds': _SEEDS.value,
        'data_dir': _DATA_DIR.value})
    results = train.train_and_evaluate(config, workdir)
    print(inference.format_table(results['test'], config))
    print(f"wall time {results['wall_time_s']:.1f}s; results in "
          f"{pathlib.Path(workdir) / rundir.RESULTS}")


def run() -> None:
  """Console-script entry point (`cli.run` installs the Ctrl-C watcher before jax)."""
  launcher.run(main, __name__, config_help='Training configuration file.', usage=USAGE,
               resumable=True)


if __name__ == '__main__':
  run()
