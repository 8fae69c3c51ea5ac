"""Reproduces (part of) the paper's Table 2 and prints it beside the published numbers.

  python experiments/reproduce_table2.py --grid=mini --workdir=/tmp/table2
  python experiments/reproduce_table2.py --grid=full --seeds=5 --workdir=/tmp/table2_full \
      --config.max_epochs=100

Each (task, model) run trains in its own sub-workdir (and resumes there if it
was interrupted); the markdown table goes to <workdir>/table2.md. Any field of
the training config can be set with --config.<field>=...
"""

import json
import pathlib
import re
import sys
import time

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from monoloc_jax import errors
from monoloc_jax import tasks
from monoloc_jax import train

_HERE = pathlib.Path(__file__).resolve().parent
config_flags.DEFINE_config_file(
    'config', str(_HERE.parent / 'monoloc_jax' / 'configs' / 'default.py'),
    'Training configuration.', lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Root directory of the runs.', required=True)
_GRID = flags.DEFINE_enum('grid', 'mini', ['mini', 'full'], 'Which runs.')
_SEEDS = flags.DEFINE_integer('seeds', 1, 'Seeds per run.', lower_bound=1)
_PAPER = flags.DEFINE_string('paper_results', str(_HERE.parent.parent / 'shared' / 'reference'
                                                  / 'paper_results.md'),
                             'The published tables (for the side-by-side columns).')

# Issue 4's mini reproduction: 4 tasks x 4 models, plus locattn and content on Reverse Copy.
MINI = ([(t, m) for t in ('copy', 'reverse_copy', 'recopy', 'inv_recopy')
         for m in ('relative', 'bi_relative', 'onestep', 'mono')]
        + [('reverse_copy', 'locattn'), ('reverse_copy', 'content')])
FULL = [(t, m) for t in ('copy', 'reverse_copy', 'lookup', 'reverse_lookup', 'recopy',
                         'reverse_recopy', 'inv_recopy', 'inv_reverse_recopy')
        for m in ('content', 'relative', 'locattn', 'bi_relative', 'onestep', 'mono')]

# Column names of reference/paper_results.md per task.
PAPER_COLUMNS = {'copy': 'Copy', 'reverse_copy': 'RevCopy', 'lookup': 'Lookup',
                 'reverse_lookup': 'RevLookup', 'recopy': 'ReCopy',
                 'reverse_recopy': 'RevReCopy', 'inv_recopy': 'InvReCopy',
                 'inv_reverse_recopy': 'InvRevReCopy'}
PAPER_LENGTHS = {'test_15': '15', 'test_30': '30', 'test_100': '100',
                 'test_long1': '7', 'test_long3': '9', 'test_long5': '11'}


def read_paper_table(path: pathlib.Path):
  """{(model, column header): value} from the markdown tables of paper_results.md."""
  out = {}
  if not path.exists():
    return out
  header = None
  for line in path.read_text().splitlines():
    if not line.startswith('|'):
      header = None
      continue
    cells = [c.strip() for c in line.strip('|').split('|')]
    if cells[0] == 'model':
      header = cells
    elif header and not re.fullmatch(r'-+', cells[0]):
      for name, value in zip(header[1:], cells[1:]):
        out[(cells[0], name)] = value
  return out


def verdict(acc: float) -> str:
  return 'solved' if acc >= 90 else ('failed' if acc <= 50 else 'partial')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  root = pathlib.Path(_WORKDIR.value)
  root.mkdir(parents=True, exist_ok=True)
  paper = read_paper_table(pathlib.Path(_PAPER.value))
  grid = MINI if _GRID.value == 'mini' else FULL
  rows = []
  for task, model in grid:
    config = flags.FLAGS.config
    with config.unlocked():
      config.task, config.variant, config.seeds = task, model, _SEEDS.value
      config.progress = False
    workdir = root / f'{task}__{model}'
    t0 = time.time()
    done = workdir / 'results.json'
    try:
      results = (json.loads(done.read_text()) if done.exists()
                 else train.train_and_evaluate(config, str(workdir)))
    except errors.MonolocError as e:
      print(f'error in {task}/{model}: {e}', file=sys.stderr)
      sys.exit(2)
    print(f'{task:<14} {model:<12} epochs {results["epochs"]:3d}  '
          + '  '.join(f"{s} {r['accuracy']:.1f}" for s, r in results['test'].items())
          + f'  ({time.time() - t0:.0f}s)', flush=True)
    for split in tasks.paper_length_splits(task):
      acc = results['test'][split]['accuracy']
      ref = paper.get((model, f'{PAPER_COLUMNS[task]} {PAPER_LENGTHS[split]}'), '')
      rows.append((task, model, split, acc, ref, results['epochs'],
                   results['dev']['best_accuracy_per_seed']))

  lines = ['| task | model | split | ours (median) | paper | ours | paper | agree | epochs | best dev % |',
           '|---|---|---|---|---|---|---|---|---|---|']
  agree = total = 0
  for task, model, split, acc, ref, epochs, dev in rows:
    ok = ''
    if ref and split in ('test_30', 'test_100', 'test_long3', 'test_long5'):
      pv, ov = verdict(float(ref)), verdict(acc)
      ok = 'yes' if pv == ov else 'NO'
      total += 1
      agree += pv == ov
    lines.append(f'| {task} | {model} | {split} | {acc:.1f} | {ref} | {verdict(acc)} | '
                 f"{verdict(float(ref)) if ref else ''} | {ok} | {epochs} | "
                 f"{', '.join(f'{d:.1f}' for d in dev)} |")
  lines.append('')
  lines.append(f'Solved/failed agreement at the two longest lengths: {agree} of {total} cells.')
  table = '\n'.join(lines)
  (root / 'table2.md').write_text(table + '\n')
  print(table)


if __name__ == '__main__':
  app.run(main)
