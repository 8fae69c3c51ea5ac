"""`monoloc-results`: one table of any set of finished runs.

  monoloc-results runs/*                          # every run under runs/, median accuracy
  monoloc-results runs/a runs/b --metric=seq_acc_be --per_seed
  monoloc-results results/table2 --format=markdown   # the reproduction grid's unit files
  monoloc-results runs/* --format=csv > runs.csv

Each argument is a run directory (its results.json), a JSON file with a "test"
entry (a results.json, or a unit file of experiments/reproduce.py), or a
directory searched recursively for such files. Runs are grouped by task (each
task has its own splits); a row gives the model, its seeds, the epochs trained,
the number of samples each split was scored on (n), the best-dev seed and the
metric per test split (the median over seeds, as the paper reports). Where a
run's splits rest on different sample counts, n is a range and each cell off the
largest count says its own n. A re-score on fewer samples (`--mode=evaluate
--config.eval_size=N`, results.json's "partial_test") is a row of its own, marked
"(partial evaluation)". Run directories without results.json (training not
finished) are listed under the table. A run directory with a range.json
(`monoloc-train --mode=range`) gets two more cells: its horizon and OOD score.
"""

import csv
import dataclasses
import io
import json
import pathlib
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import flags

from monoloc_jax import errors
from monoloc_jax import launcher

METRICS = {'accuracy': 'sequence accuracy (%)', 'seq_acc_be': 'SeqAccBE (%)',
           'edit_distance': 'mean edit distance'}


@dataclasses.dataclass
class Row:
  """One run in the table."""
  source: str                       # the path it was read from
  task: str
  model: str                        # the paper's name
  seeds: List[int]
  epochs: Optional[int]
  best_dev: Optional[Tuple[int, float]]     # (seed, best dev accuracy %)
  test: Dict[str, Dict[str, Any]]
  range: Optional[Dict[str, Any]] = None    # range.json (--mode=range), where the run has one


def _display_name(variant: str) -> str:
  from monoloc_jax import variants  # pylint: disable=g-import-not-at-top
  return variants.VARIANTS[variant].display_name if variant in variants.VARIANTS else variant


def _row(source: str, results: Mapping[str, Any], test_key: str = 'test') -> Row:
  """A Row from a results.json (train/evaluate) or a reproduce.py unit file; test_key
  'partial_test' gives the row of its partial evaluations."""
  seeds = list(results.get('seeds') or ([results['seed']] if 'seed' in results else []))
  per_seed = results.get('dev', {}).get('best_accuracy_per_seed')
  if per_seed is None and 'best_dev_accuracy' in results:
    per_seed = [results['best_dev_accuracy']]
  best_dev = None
  if per_seed and len(per_seed) == len(seeds):
    i = max(range(len(seeds)), key=lambda k: (per_seed[k], -k))
    best_dev = (seeds[i], float(per_seed[i]))
  variant = results.get('variant') or results.get('model') or '?'
  return Row(source, results.get('task') or results.get('config', {}).get('task', '?'),
             _display_name(variant), seeds, results.get('epochs'), best_dev,
             dict(results[test_key]))


def collect(paths: Sequence[str]) -> Tuple[List[Row], List[str]]:
  """(rows, notes): a Row per finished run found under `paths`; a note per path that
  holds no finished run. Raises MonolocError for a path that does not exist."""
  rows, notes = [], []
  for arg in paths:
    path = pathlib.Path(arg)
    if not path.exists():
      raise errors.MonolocError(f'{arg} does not exist')
    if path.is_dir() and (path / 'results.json').exists():
      files = [path / 'results.json']
    elif path.is_dir():
      files = sorted(p for p in path.rglob('*.json') if not p.name.startswith('.'))
    else:
      files = [path]
    found = 0
    for f in files:
      try:
        results = json.loads(f.read_text(encoding='utf-8'))
      except (OSError, ValueError):
        continue                    # a log or image caught by a shell glob, not a result
      if isinstance(results, dict) and isinstance(results.get('test'), dict):
        source = str(f.parent if f.name == 'results.json' else f)
        rows.append(_row(source, results))
        if f.name == 'results.json' and (f.parent / 'range.json').is_file():
          try:
            rows[-1].range = json.loads((f.parent / 'range.json').read_text(encoding='utf-8'))
          except (OSError, ValueError):
            pass                    # a damaged range.json: the row has no range cells
        if isinstance(results.get('partial_test'), dict) and results['partial_test']:
          rows.append(_row(f'{source} (partial evaluation)', results, 'partial_test'))
        found += 1
    if not found:
      why = ('training has not finished (no results.json)' if (path / 'config.json').exists()
             else 'not a result file' if path.is_file() else 'no results.json or result files')
      notes.append(f'{arg}: {why}')
  return rows, notes


def _split_order(task: str, splits: Sequence[str]) -> List[str]:
  """The task's splits by input length where the task knows them, else as given."""
  from monoloc_jax import tasks  # pylint: disable=g-import-not-at-top
  try:
    lengths = tasks.get(task).split_lengths or {}
  except errors.MonolocError:
    lengths = {}
  return sorted(splits, key=lambda s: (lengths.get(s, float('inf')), splits.index(s)))


def sample_counts(test: Mapping[str, Any]) -> List[int]:
  """The distinct sample counts `n` of a run's split entries, sorted."""
  return sorted({r['n'] for r in test.values()
                 if isinstance(r, Mapping) and isinstance(r.get('n'), int)})


def _n_text(counts: Sequence[int]) -> str:
  """'2000', '500–2000' (splits of one run on different counts) or '' (not recorded)."""
  if not counts:
    return ''
  return str(counts[0]) if len(counts) == 1 else f'{counts[0]}–{counts[-1]}'


def _cell(result: Optional[Mapping[str, Any]], metric: str, per_seed: bool,
          row_counts: Sequence[int] = ()) -> str:
  if not result or metric not in result:
    return ''
  fmt = '{:.2f}' if metric == 'edit_distance' else '{:.1f}'
  text = fmt.format(result[metric])
  values = [s[metric] for s in result.get('per_seed', []) if metric in s]
  if per_seed and len(values) > 1:
    text += ' [' + ' '.join(fmt.format(v) for v in values) + ']'
  if len(row_counts) > 1 and result.get('n') != row_counts[-1]:
    text += f" (n={result.get('n', '?')})"        # off the row's largest sample count
  return text


def tables(rows: Sequence[Row], metric: str = 'accuracy', per_seed: bool = False
           ) -> List[Tuple[str, List[str], List[List[str]]]]:
  """[(title, header, body rows)], one table per task, tasks in order of appearance."""
  if metric not in METRICS:
    raise errors.unknown_name('metric', metric, METRICS)
  out = []
  for task in dict.fromkeys(r.task for r in rows):
    group = [r for r in rows if r.task == task]
    splits = _split_order(task, list(dict.fromkeys(s for r in group for s in r.test)))
    header = ['run', 'model', 'seeds', 'epochs', 'n', 'best-dev seed (dev %)', *splits]
    ranged = any(isinstance(r.range, dict) for r in group)
    if ranged:
      header += ['range horizon', 'range OOD token %']
    body = []
    for r in group:
      best = f'{r.best_dev[0]} ({r.best_dev[1]:.1f})' if r.best_dev else ''
      seeds = ','.join(map(str, r.seeds)) if len(r.seeds) <= 3 else f'{len(r.seeds)} seeds'
      counts = sample_counts(r.test)
      body.append([r.source, r.model, seeds, '' if r.epochs is None else str(r.epochs),
                   _n_text(counts), best,
                   *(_cell(r.test.get(s), metric, per_seed, counts) for s in splits),
                   *(_range_cells(r.range) if ranged else ())])
    out.append((f'{task}: {METRICS[metric]}, median over seeds'
                + (' [per seed]' if per_seed else '') + '; n = samples per split',
                header, body))
  return out


def _range_cells(result: Optional[Mapping[str, Any]]) -> List[str]:
  """[horizon, OOD per-token accuracy] of a range.json ('' where absent; 'none' when
  no length reached the horizon's accuracy)."""
  if not isinstance(result, Mapping):
    return ['', '']
  hz, ood = result.get('horizon'), result.get('ood_score')
  lengths = result.get('lengths') or ['?']
  return ['none' if hz is None else f'{hz} (of {lengths[0]}–{lengths[-1]})',
          '' if ood is None else f'{ood:.1f}']


def _text(title: str, header: List[str], body: List[List[str]]) -> str:
  widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
  align = lambda row: '  '.join(c.ljust(w) if i < 2 else c.rjust(w)
                                for i, (c, w) in enumerate(zip(row, widths))).rstrip()
  return '\n'.join([title, align(header), *map(align, body)])


def _markdown(title: str, header: List[str], body: List[List[str]]) -> str:
  line = lambda row: '| ' + ' | '.join(c.replace('|', '\\|') for c in row) + ' |'
  return '\n'.join([f'**{title}**', '', line(header),
                    '|' + '|'.join(['---'] * 2 + ['---:'] * (len(header) - 2)) + '|',
                    *map(line, body)])


def _csv(title: str, header: List[str], body: List[List[str]]) -> str:
  buf = io.StringIO()
  writer = csv.writer(buf, lineterminator='\n')
  writer.writerow(['table', *header])
  for row in body:
    writer.writerow([title, *row])
  return buf.getvalue().rstrip('\n')


FORMATS: Dict[str, Callable[[str, List[str], List[List[str]]], str]] = {
    'text': _text, 'markdown': _markdown, 'csv': _csv}


def render(rows: Sequence[Row], fmt: str = 'text', metric: str = 'accuracy',
           per_seed: bool = False) -> str:
  """The tables of `rows` as text, markdown or CSV."""
  if fmt not in FORMATS:
    raise errors.unknown_name('format', fmt, FORMATS)
  parts = [FORMATS[fmt](*t) for t in tables(rows, metric, per_seed)]
  if fmt == 'csv' and len(parts) > 1:       # one header row for the whole file
    parts = parts[:1] + [p.split('\n', 1)[1] for p in parts[1:] if '\n' in p]
    return '\n'.join(parts)
  return '\n\n'.join(parts)


_FORMAT = flags.DEFINE_enum('format', 'text', list(FORMATS), 'Output format.')
_METRIC = flags.DEFINE_enum('metric', 'accuracy', list(METRICS), 'Which test metric to show.')
_PER_SEED = flags.DEFINE_bool('per_seed', False, 'Also show each seed\'s value in brackets.')


def main(argv: Sequence[str]) -> None:
  if len(argv) < 2:
    print('error: give run directories or result files, e.g. monoloc-results runs/*',
          file=sys.stderr)
    sys.exit(2)
  try:
    rows, notes = collect(argv[1:])
    if not rows:
      raise errors.MonolocError('no finished runs found: ' + '; '.join(notes))
    print(render(rows, _FORMAT.value, _METRIC.value, _PER_SEED.value))
  except errors.MonolocError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  if notes:
    print('\nnot tabulated:\n' + '\n'.join(f'  {n}' for n in notes),
          file=sys.stderr if _FORMAT.value == 'csv' else sys.stdout)


def run() -> None:
  """Console-script entry point."""
  launcher.run(main, __name__)


if __name__ == '__main__':
  run()
