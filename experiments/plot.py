"""Draws a finished run's figures next to its results.json.

  python experiments/plot.py --workdir=runs/revcopy_onestep
  python experiments/plot.py --workdir=runs/onestep --workdir=runs/relative --format=svg
  python experiments/plot.py --workdir=runs/onestep --example="3 1 4 1 5 9 2 6"

Writes into the first --workdir:
  attention.<fmt>           the attention heatmap (with μ, σ, step, content mix
                            and α_dir where the variant has them) of one greedy
                            decode by the first workdir's model;
  accuracy_vs_length.<fmt>  test accuracy against input length for every
                            --workdir, with the training lengths shaded
                            (skipped, with a note, for SCAN and CFQ, which have
                            no length splits);
  training_curves.<fmt>     loss and dev accuracy per epoch and seed;
  range_curves.<fmt>        where every --workdir has a range.json (monoloc-train
                            --mode=range): each run's median accuracy at every
                            length of its range, in one figure (--range_xscale:
                            linear, or log to widen the lengths near training).

The heatmap's input is --example, or by default the first example of test_100
for the digit tasks and of the run's first test split for the others. It is
decoded by the run's best-dev seed (or --seed_index), which the figure's title
names (and the script reports on stderr). Runs of different tasks are refused:
one length axis holds one task.
"""

import pathlib
import sys

from absl import app
from absl import flags
from absl import logging

from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import input_pipeline
from monoloc_jax import tasks
from monoloc_jax import viz

_WORKDIR = flags.DEFINE_multi_string(
    'workdir', None, 'A finished run. Repeat the flag to put several runs on the accuracy '
    'curve; the figures go into the first one.', required=True)
_EXAMPLE = flags.DEFINE_string(
    'example', None, 'Whitespace-separated input for the heatmap (default: the first example '
    "of the longest split the paper reports for the task, e.g. test_100).")
_FORMAT = flags.DEFINE_enum('format', 'png', ['png', 'svg'], 'Image format.')
_RANGE_XSCALE = flags.DEFINE_enum(
    'range_xscale', 'linear', list(viz.RANGE_XSCALES),
    "range_curves' length axis: linear (the Chomsky papers' axis) or log.")
_SEED_INDEX = flags.DEFINE_integer(
    'seed_index', None, 'Which seed of the first run decodes the heatmap (0 = its config.seed); '
    'default: the seed with the best dev accuracy.', lower_bound=0)


def default_example(task: str, results: dict, config: dict):
  """(source tokens, target tokens) of the default heatmap input."""
  del results
  split = tasks.paper_length_splits(task)[-1]      # the longest length the paper reports
  examples = tasks.load(task, split, seed=config.get('data_seed', 0),
                        data_dir=config.get('data_dir') or None)
  if not examples:
    raise errors.MonolocError(f'split {split!r} of task {task!r} is empty')
  source, target = examples[0][0], examples[0][1]
  return tuple(source), tuple(target)


def make_plots(workdirs, example=None, fmt='png', seed_index=None, report=print,
               range_xscale='linear'):
  """Writes the figures into workdirs[0]; returns their paths.

  seed_index: which seed of workdirs[0] decodes the heatmap; None = the best-dev
  seed. `report` gets one line naming it. range_xscale: range_curves' length axis
  (`viz.RANGE_XSCALES`).
  """
  first = pathlib.Path(workdirs[0])
  results = viz.load_results(first)
  tasks_of = {viz.load_results(wd).get('task') for wd in workdirs}  # a clear error before any work
  if len(tasks_of) > 1:
    raise errors.MonolocError(f"the runs are of different tasks ({', '.join(sorted(tasks_of))}); "
                              'one length axis holds one task: plot each task separately')
  config = results.get('config', {})
  task, variant = results.get('task'), results.get('variant', results.get('model'))
  written = []

  if example:
    decoded, = inference.decode_with_attention(str(first), [example], seed_index=seed_index)
  else:
    source, target = default_example(task, results, config)
    steps = input_pipeline.bucket_length(len(target) + 11)
    decoded, = inference.decode_with_attention(str(first), [' '.join(source)],
                                               seed_index=seed_index, max_steps=steps)
  report(f'heatmap: {decoded.seed.describe()}, input length {len(decoded.source)}')
  fig = viz.plot_attention(decoded, variant=variant)
  written.append(viz.save(fig, first / f'attention.{fmt}'))

  try:
    viz.training_range(task)
  except errors.MonolocError as e:
    print(f'note: no accuracy_vs_length.{fmt}: {e}')
  else:
    runs = {}
    for wd in workdirs:
      res = viz.load_results(wd)
      label = viz.display_name(res.get("variant", res.get("model")))
      if label in runs:
        label = f'{label} ({pathlib.Path(wd).name})'
      runs[label] = res
    written.append(viz.save(viz.plot_accuracy_vs_length(runs), first / f'accuracy_vs_length.{fmt}'))

  written.append(viz.save(viz.plot_training_curves(first), first / f'training_curves.{fmt}'))
  if all((pathlib.Path(wd) / 'range.json').is_file() for wd in workdirs):
    ranged = {}
    for wd in workdirs:
      label = viz.display_name(viz.load_results(wd).get('variant'))
      ranged[label if label not in ranged else f'{label} ({pathlib.Path(wd).name})'] = wd
    written.append(viz.save(viz.plot_range(ranged, xscale=range_xscale),
                            first / f'range_curves.{fmt}'))
  return written


def main(argv):
  if len(argv) > 1:
    print(f'error: unexpected arguments: {" ".join(argv[1:])}', file=sys.stderr)
    sys.exit(2)
  logging.set_verbosity(logging.WARNING)
  try:
    paths = make_plots(_WORKDIR.value, _EXAMPLE.value, _FORMAT.value, _SEED_INDEX.value,
                       report=lambda line: print(line, file=sys.stderr),
                       range_xscale=_RANGE_XSCALE.value)
  except errors.MonolocError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  for path in paths:
    print(path)


if __name__ == '__main__':
  app.run(main)
