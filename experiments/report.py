"""Generates REPRODUCTION.md from the unit results in results/ (and nothing else).

  python experiments/report.py                     # writes REPRODUCTION.md
  python experiments/report.py --check             # exit 1 if REPRODUCTION.md is stale

The output depends only on the files under --results_dir, the published numbers
in experiments/data/paper_results.md and the optional hand-written
results/NOTES.md, so it regenerates byte-identically.
"""

import collections
import json
import math
import pathlib
import re
import statistics
import sys
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from absl import app
from absl import flags

import grid as grids_lib  # experiments/grid.py

from monoloc_jax import config_paths  # pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax import errors  # pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax import tasks  # pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax.tasks import chomsky  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = pathlib.Path(__file__).resolve().parent.parent
PAPER = pathlib.Path(__file__).resolve().parent / 'data' / 'paper_results.md'
# Every file of the paper's numbers `read_paper` reads (one today: Tables 2 and 3; a file
# of another table in the same layout, e.g. Tables 4 and 6, is added here and needs no
# other change: `other_table` prints a paper column for any task it has numbers of).
PAPER_FILES = (PAPER,)

SOLVED, FAILED = grids_lib.SOLVED, grids_lib.FAILED
# Paper column headers per task, and the paper's length of each split.
PAPER_COLUMNS = {'copy': 'Copy', 'reverse_copy': 'RevCopy', 'lookup': 'Lookup',
                 'reverse_lookup': 'RevLookup', 'recopy': 'ReCopy',
                 'reverse_recopy': 'RevReCopy', 'inv_recopy': 'InvReCopy',
                 'inv_reverse_recopy': 'InvRevReCopy', 'dedupe': 'DeDupe',
                 'posretrieve': 'PosRetrieve', 'scan_length': 'SCAN length',
                 'cfq_length': 'CFQ length'}
TASK_NAMES = {'copy': 'Copy', 'reverse_copy': 'Reverse Copy', 'lookup': 'Lookup',
              'reverse_lookup': 'Reverse Lookup', 'recopy': 'ReCopy',
              'reverse_recopy': 'Reverse ReCopy', 'inv_recopy': 'Inv ReCopy',
              'inv_reverse_recopy': 'Inv Reverse ReCopy', 'dedupe': 'DeDupe',
              'posretrieve': 'PosRetrieve', 'scan_length': 'SCAN (length split)',
              'cfq_length': 'CFQ (length split)'}
LENGTH_OF = {'test_15': '15', 'test_30': '30', 'test_100': '100', 'test_long1': '7',
             'test_long3': '9', 'test_long5': '11', 'test': ''}


# Tables 2, 4 and 6: the grid of the library's procedure and of the authors'.
PROCEDURE_GRIDS = (('table2', 'table2_authors', grids_lib.TABLE2_TASKS, grids_lib.TABLE2_VARIANTS),
                   ('table4', 'table4_authors', grids_lib.TABLE2_TASKS, grids_lib.TABLE4_VARIANTS),
                   ('table6', 'table6_authors', ('dedupe', 'posretrieve'),
                    grids_lib.TABLE2_VARIANTS))
# The label tag of a unit trained under the authors' procedure (`recipes.AUTHORS_CODE`).
AUTHORS_TAG = '.authors'


class Protocol(NamedTuple):
  """The training procedure whose units the report's Tables 2, 4 and 6 show.

  grids: table name -> the grid its units come from; tag: the label suffix of those
  units (the grid's variant label plus `tag`); title: the procedure's name in prose.
  """
  grids: Mapping[str, str]
  tag: str
  title: str


PROTOCOLS: Mapping[str, Protocol] = {
    'library': Protocol({base: base for base, *_ in PROCEDURE_GRIDS}, '', "the library's"),
    'authors': Protocol({base: grid for base, grid, *_ in PROCEDURE_GRIDS}, AUTHORS_TAG,
                        "the authors'"),
}
# The reproduction protocol of Tables 2, 4 and 6, chosen by evidence (results/NOTES.md,
# "The protocol and how it was chosen"). A table shows the chosen procedure's units once
# every one of them (seeds 0-2) is in, and the INTERIM procedure's until then; the other
# procedure's runs stay in "Two training procedures".
PROTOCOL = 'authors'
INTERIM = 'library'
MAIN_TABLES = tuple(base for base, *_ in PROCEDURE_GRIDS)


def _have(results) -> set:
  return {(g, t, l, r['seed']) for (g, t, l), rs in results.items() for r in rs}


def grid_progress(results, grid_name: str) -> Tuple[int, int]:
  """(units with results, units expected) of grid `grid_name` (`grid.expected_units`)."""
  have = _have(results)
  expected = [u for u in grids_lib.expected_units(cfq=False) if u.grid == grid_name]
  return sum((u.grid, u.task, u.label, u.seed) in have for u in expected), len(expected)


def shown_protocols(results, chosen: Protocol = PROTOCOLS[PROTOCOL],
                    interim: Protocol = PROTOCOLS[INTERIM]) -> Dict[str, Protocol]:
  """Per main table, the procedure whose units it shows: `chosen` once all of that
  table's units under it are in, else `interim`."""
  shown = {}
  for table in MAIN_TABLES:
    done, expected = grid_progress(results, chosen.grids[table])
    shown[table] = chosen if done == expected else interim
  return shown


def protocol_section(results, chosen_name: str, shown: Mapping[str, Protocol]) -> List[str]:
  """Which procedure is the protocol, and which one each main table shows now."""
  chosen = PROTOCOLS[chosen_name]
  lines = ['## The protocol', '',
           f"Tables 2, 4 and 6 are reproduced under **{chosen.title}** training procedure "
           '(README, "Two training procedures"), chosen by the evidence in results/NOTES.md '
           '("The protocol and how it was chosen", below). A table shows its units once all of '
           'them (seeds 0, 1 and 2 of every run) are in; until then it shows the other '
           'procedure\'s '
           'units, and "Two training procedures" sets every unit that has run under both side '
           'by side.', '',
           '| table | grid under the protocol | units in | the table shows now |',
           '|---|---|---|---|']
  for table in MAIN_TABLES:
    done, expected = grid_progress(results, chosen.grids[table])
    lines.append(f"| {table[5:]} | `{chosen.grids[table]}` | {done} of {expected} | "
                 f"{shown[table].title} procedure (`{shown[table].grids[table]}`) |")
  return lines + ['']


def splits_of(task: str) -> Tuple[str, ...]:
  """The splits the paper reports for `task` (the task's own `paper_splits`)."""
  return tasks.get(task).paper_splits


mark = grids_lib.mark


def read_paper(*paths: pathlib.Path) -> Dict[Tuple[str, str], str]:
  """{(model slug, column header): cell text} of every markdown table in `paths`
  (default `PAPER_FILES`). A blank cell is one not transcribed and is left out; a cell
  that two files give differently is an error."""
  out: Dict[Tuple[str, str], str] = {}
  for path in paths or PAPER_FILES:
    header = None
    for line in path.read_text(encoding='utf-8').splitlines():
      if not line.startswith('|'):
        header = None
        continue
      cells = [c.strip() for c in line.strip().strip('|').split('|')]
      if cells[0] == 'model':
        header = cells
      elif header and not re.fullmatch(r'-+', cells[0]):
        for name, value in zip(header[1:], cells[1:]):
          if value and out.setdefault((cells[0], name), value) != value:
            raise errors.MonolocError(
                f'{path}: paper cell ({cells[0]}, {name}) is {value}, another file has '
                f'{out[(cells[0], name)]}')
  return out


def paper_column(task: str, split: str) -> str:
  """The paper files' column header of `task` at `split` ('Copy 30', 'DeDupe IID')."""
  return f"{PAPER_COLUMNS[task]} {'IID' if split == 'test_iid' else LENGTH_OF[split]}"


def _paper_cell(ref: Optional[str]) -> str:
  """A paper number with its mark's letter (`mark`: S, P or F); '–' where it has none."""
  return f'{ref} {mark(float(ref))[0].upper()}' if ref else '–'


def _agrees(median: float, ref: str) -> bool:
  """Whether our median has the same mark (`grid.mark`) as the paper's number."""
  return mark(median) == mark(float(ref))


# The protocol's seeds: 0-2 on every run, 3-4 on the runs whose first three split
# (grid.split_run). Later seeds of a run (Inv Reverse ReCopy / MonoAttn's 5-9, issue
# "Fidelity III") answer a question about that one row's solve rate: the tables keep the
# protocol's seeds, so that no row's mark rests on more seeds than its neighbours', and the
# tallies that ask the question read every seed (`Facts.every_seed`).
PROTOCOL_SEEDS = 5


def load_results(results_dir: pathlib.Path, max_seed: Optional[int] = PROTOCOL_SEEDS
                 ) -> Dict[Tuple[str, str, str], List[Dict[str, Any]]]:
  """{(grid, task, label): [unit record, ...] sorted by seed}, the seeds below `max_seed`
  (None: every seed)."""
  out: Dict[Tuple[str, str, str], List[Dict[str, Any]]] = {}
  for path in sorted(results_dir.glob('*/*/*/seed*.json')):
    record = json.loads(path.read_text(encoding='utf-8'))
    if max_seed is not None and record['seed'] >= max_seed:
      continue
    out.setdefault((record['grid'], record['task'], record['label']), []).append(record)
  for records in out.values():
    records.sort(key=lambda r: r['seed'])
  return out


def _dagger(rerun: Optional[Mapping[str, Any]]) -> str:
  """'†' where a rerun's note (`added_test_splits[split]`, a range record's `retrained`)
  says it did not reproduce the unit's committed figures; '' otherwise."""
  return '†' if (rerun or {}).get('reproduced') is False else ''


def _fmt(x: float) -> str:
  return f'{x:.1f}'


def _median(values: Sequence[float]) -> float:
  return float(statistics.median(values))


_BATCHING = {'True': 'grouped by target-length bucket (this library\'s default)',
             'False': 'random (the authors\' code\'s)',
             'None': 'not recorded'}


def _lr_rule(values) -> str:
  """How the runs' lr followed dev accuracy (records without the field ran the library's)."""
  rules = {'None': 'library'}
  out = []
  for rule in sorted({rules.get(v, v) for v in values('plateau_rule')}):
    if rule == 'library':
      out.append(f"lr halved after {', '.join(values('lr_patience'))} epochs without "
                 'improvement')
    else:
      out.append("lr by torch's ReduceLROnPlateau (mode max, patience "
                 f"{', '.join(values('lr_patience'))}, threshold "
                 f"{', '.join(values('plateau_threshold'))}, not after epoch 1)")
  return ' or '.join(out)


def _protocol(records: Sequence[Mapping[str, Any]]) -> str:
  """One paragraph describing what ran, from the records themselves."""
  if not records:
    return '_No unit of this table has run yet._'
  def values(key, src='protocol'):
    return sorted({str(r[src].get(key)) if src else str(r.get(key)) for r in records})
  seeds = sorted({r['seed'] for r in records})
  dev = ', '.join('the full' if v == '0' else f'the first {v} samples of the'
                  for v in values('eval_size'))
  sizes = sorted({v['n'] for r in records for v in r['test'].values()})
  datas = sorted({r['data'] for r in records})
  commits = sorted({r['code']['commit'][:7] + ('+dirty' if r['code']['dirty'] else '')
                    for r in records})
  backends = collections.Counter(r.get('versions', {}).get('backend', 'unrecorded')
                                 for r in records)
  ran_on = ', '.join(f'{b} {n} unit{"s" * (n != 1)}' for b, n in sorted(backends.items()))
  return (f"Protocol actually run: at most {', '.join(values('max_epochs'))} epochs, early "
          f"stopping after {', '.join(values('early_stop_patience'))} epochs without dev "
          f"improvement, a seed also stops after {', '.join(values('perfect_dev_patience'))} "
          f"consecutive epochs at 100% dev accuracy (0 = rule off), {_lr_rule(values)}; batches: "
          f"{', '.join(_BATCHING[v] for v in values('bucket_batches'))}; dev metric: "
          f"{', '.join(values('dev_metric'))} sequence accuracy on {dev} dev split; "
          f"test splits of {', '.join(map(str, sizes))} samples; seeds that ran: "
          f"{', '.join(map(str, seeds))}; data: {'; '.join(datas)}; code: "
          f"{', '.join(commits)}; backend: {ran_on}. The paper: at most 100 epochs, patience "
          f"50, 5 seeds.")


def _beside(results, authors_runs: Sequence[Mapping[str, Any]], protocol: Protocol,
            task: str, variant: str, split: str) -> str:
  """For a disagreement line: the same Table 2 run at `split` under the procedure other
  than `protocol`, and in the authors' code where it ran here (results/authors_code/)."""
  def cell(accs):
    return f"{_fmt(_median(accs))} [{', '.join(_fmt(a) for a in accs)}]"
  other = next(p for p in PROTOCOLS.values() if p != protocol)
  records = results.get((other.grids['table2'], task, variant + other.tag), [])
  parts = [f"{other.title} procedure " + (cell([r['test'][split]['accuracy'] for r in records])
                                          if records else 'not run')]
  for item in authors_runs:
    if item['task'] == task and item['label'] == variant:
      for run in item['runs']:
        parts.append(f"the authors' code ({run['budget'].split(' (')[0]}) "
                     + cell([s['test'][split] for s in run['seeds']]))
  return '; '.join(parts)


class Cell(NamedTuple):
  """One compared cell of Table 2: a run's median at one of its two longest lengths."""
  task: str
  variant: str
  split: str
  median: float
  paper: str
  agree: bool   # the same mark (`grid.mark`) as the paper's number


def compared_cells(results, paper, protocol: Protocol) -> List[Cell]:
  """Table 2's compared cells under `protocol`: each run's median over its units at the
  two longest lengths (30 and 100; Lookup: 9 and 11), where the paper has a number."""
  cells = []
  for task in grids_lib.TABLE2_TASKS:
    for variant in grids_lib.TABLE2_VARIANTS:
      records = results.get((protocol.grids['table2'], task, variant + protocol.tag), [])
      for split in splits_of(task)[1:]:
        ref = paper.get((variant, paper_column(task, split)))
        if records and ref:
          med = _median([r['test'][split]['accuracy'] for r in records])
          cells.append(Cell(task, variant, split, med, ref, _agrees(med, ref)))
  return cells


def table2(results, paper, protocol: Protocol, authors_runs: Sequence[Mapping[str, Any]] = ()
           ) -> Tuple[List[str], List[str], int, int]:
  """The Table 2 section, the disagreement lines (each with the same run under the other
  procedure and in the authors' code beside it), and (agreeing, compared) cell counts,
  from the units of `protocol`."""
  lines, disagreements = [], []
  agree = compared = 0
  grid_name = protocol.grids['table2']
  records_all = [r for (g, _, _), rs in results.items() if g == grid_name for r in rs]
  cells_of = {(c.task, c.variant, c.split): c for c in compared_cells(results, paper, protocol)}
  lines += [f'## Table 2: sequence accuracy (%) by length, {protocol.title} procedure vs the '
            'paper', '',
            _protocol(records_all), '',
            f"Ours: the median over seeds of {protocol.title} procedure's units (grid "
            f'`{grid_name}`), per-seed values in brackets. Marks: S = solved '
            f'(≥ {SOLVED:.0f}), F = failed (≤ {FAILED:.0f}), P = partial. "agree" compares '
            'the marks at the two longest lengths (30 and 100; Lookup: 9 and 11).', '']
  for task in grids_lib.TABLE2_TASKS:
    splits = splits_of(task)
    lines.append(f'### {TASK_NAMES[task]}')
    lines.append('')
    head = ' | '.join(f'len {LENGTH_OF[s]}: ours | paper' for s in splits)
    lines.append(f'| variant | seeds | {head} | agree {LENGTH_OF[splits[1]]} | '
                 f'agree {LENGTH_OF[splits[2]]} | epochs |')
    lines.append('|' + '---|' * (2 + 2 * len(splits) + 3))
    for variant in grids_lib.TABLE2_VARIANTS:
      records = results.get((grid_name, task, variant + protocol.tag), [])
      cells, agrees = [], []
      for k, split in enumerate(splits):
        ref = paper.get((variant, paper_column(task, split)))
        ref_txt = _paper_cell(ref)
        if records:
          accs = [r['test'][split]['accuracy'] for r in records]
          med = _median(accs)
          ours = f"{_fmt(med)} {mark(med)[0].upper()} [{', '.join(_fmt(a) for a in accs)}]"
        else:
          ours = 'not run'
        cells.append(f'{ours} | {ref_txt}')
        if k >= 1:
          cell = cells_of.get((task, variant, split))
          if cell:
            compared += 1
            agree += cell.agree
            agrees.append('yes' if cell.agree else '**no**')
            if not cell.agree:
              seeds = ', '.join(str(r['seed']) for r in records)
              disagreements.append(
                  f'- {TASK_NAMES[task]} / {variant}, length {LENGTH_OF[split]}: ours '
                  f'{_fmt(med)} ({mark(med)}), paper {ref} ({mark(float(ref))}); beside it: '
                  f'{_beside(results, authors_runs, protocol, task, variant, split)}; per-unit '
                  f'results in `results/{grid_name}/{task}/{variant}{protocol.tag}/'
                  f'seed{{{seeds}}}.json`.')
          else:
            agrees.append('–')
      epochs = ', '.join(str(r['epochs']) for r in records) if records else '–'
      lines.append(f"| {variant} | {len(records)} | {' | '.join(cells)} | "
                   f"{' | '.join(agrees)} | {epochs} |")
    lines.append('')
  lines.insert(4, f'**Agreement: {agree} of {compared} compared cells** at the two longest '
               f'lengths (of 96 when all 48 runs have results; the target is ≥ 90).')
  lines.insert(5, '')
  return lines, disagreements, agree, compared


def _mean_std(values: Sequence[float]) -> Tuple[float, float]:
  mean = sum(values) / len(values)
  std = statistics.stdev(values) if len(values) > 1 else 0.0
  return mean, std


def _paper_mean_std(ref: str) -> Optional[Tuple[float, float]]:
  """The paper's (mean, std) from its cell 'm ± s', or None."""
  m = re.fullmatch(r'([\d.]+)\s*±\s*([\d.]+)', ref)
  return (float(m.group(1)), float(m.group(2))) if m else None


def _within(mean: float, ref: str) -> str:
  """'yes' if `mean` lies within one of the paper's standard deviations ('m ± s')."""
  published = _paper_mean_std(ref)
  if not published:
    return '–'
  return 'yes' if abs(mean - published[0]) <= published[1] else '**no**'


# Seeds behind the paper's Table 3 means (SPEC §4): SCAN 5, CFQ 3.
PAPER_SEEDS = {'scan_length': 5, 'cfq_length': 3}


def _welch_p(mean: float, std: float, seeds: int, ref: str, paper_seeds: int) -> str:
  """Two-sided p of Welch's t-test: our seeds' mean ± std against the paper's 'm ± s'.

  t = (x̄ - m) / sqrt(s_x²/n_x + s²/n), with Welch–Satterthwaite degrees of freedom;
  '–' with fewer than 2 seeds of ours or no published std.
  """
  published = _paper_mean_std(ref)
  if not published:
    return '–'
  return _welch_p_two(mean, std, seeds, *published, paper_seeds)


def _welch_p_two(mean_a: float, std_a: float, n_a: int,
                 mean_b: float, std_b: float, n_b: int) -> str:
  """Two-sided p of Welch's t-test between two samples given as mean, std, size.

  '–' when either sample has fewer than 2 values.
  """
  if n_a < 2 or n_b < 2:
    return '–'
  from scipy import stats  # pylint: disable=g-import-not-at-top  (a dependency of jax)
  p = stats.ttest_ind_from_stats(mean_a, std_a, n_a, mean_b, std_b, n_b,
                                 equal_var=False).pvalue
  return f'{p:.2f}'


def _test_accs(results, grid_name: str, task: str, label: str) -> List[float]:
  """Per-seed accuracy (%) on the single 'test' split of a Table 3 style run."""
  return [r['test']['test']['accuracy'] for r in results.get((grid_name, task, label), [])]


def _mean_std_row(results, grid_name: str, task: str, label: str, paper,
                  first: str) -> str:
  """One Table 3 row: mean ± std over seeds, per-seed values, the paper, within, Welch p."""
  accs = _test_accs(results, grid_name, task, label)
  ref = paper.get((label.split('.')[0], PAPER_COLUMNS[task]), '–')
  if not accs:
    return f'| {first} | 0 | not run |  | {ref} | – | – |'
  mean, std = _mean_std(accs)
  return (f"| {first} | {len(accs)} | {mean:.2f} ± {std:.2f} | "
          f"{', '.join(_fmt(a) for a in accs)} | {ref} | {_within(mean, ref)} | "
          f"{_welch_p(mean, std, len(accs), ref, PAPER_SEEDS[task])} |")


def table3(results, paper) -> List[str]:
  records_all = [r for (g, _, _), rs in results.items() if g == 'table3' for r in rs]
  lines = ['## Table 3: SCAN and CFQ length splits, mean ± std (%)', '', _protocol(records_all),
           '', 'Std is the sample standard deviation over seeds. "within" says whether our '
           "mean lies within one of the paper's standard deviations of its mean. \"p\" is the "
           "two-sided p-value of Welch's t-test between our seeds and the paper's mean ± std "
           "(5 seeds for SCAN, 3 for CFQ): a small p says the difference is larger than the "
           "seeds' spread explains. Rows marked "
           '`.reference_code` run the Mix variant as the authors\' code built it (no content '
           "branch; BUILD_NOTES.md §2 item 17), beside the paper's number for that name.", '']
  for task in ('scan_length', 'cfq_length'):
    labels = [l for t, l in grids_lib.grid_runs(cfq=True)['table3'] if t == task]
    if task == 'cfq_length' and not any(results.get(('table3', task, l)) for l in labels):
      lines += [f'### {TASK_NAMES[task]}', '', '_Not run: the CFQ release is not available '
                'on this machine (`--cfq_data_dir`)._', '']
      continue
    lines += [f'### {TASK_NAMES[task]}', '',
              '| variant | seeds | ours: mean ± std | per seed | paper | within | p |',
              '|---|---|---|---|---|---|---|']
    lines += [_mean_std_row(results, 'table3', task, label, paper, label) for label in labels]
    lines.append('')
  return lines


def table3_explain(results, paper) -> List[str]:
  """The SCAN rows of `grid.TABLE3_EXPLAIN_RUNS` beside their Table 3 runs."""
  records_all = [r for task, label in grids_lib.TABLE3_EXPLAIN_RUNS
                 for r in results.get(('table3_explain', task, label), [])]
  lines = ['## Table 3 disagreements: reruns under the paper\'s epoch budget', '',
           _protocol(records_all), '',
           'Each Table 3 run whose mean fell outside the paper\'s standard deviation after '
           'seeds 0 and 1, beside the same run with the paper\'s epoch budget and, in the '
           'last row, with every training choice of the authors\' code at once. '
           + _SETUP_LABELS.split(' Cells:')[0], '']
  by_task: Dict[str, List[str]] = {}
  for task, label in grids_lib.TABLE3_EXPLAIN_RUNS:
    by_task.setdefault(task, []).append(label)
  for task, labels in by_task.items():
    bases = list(dict.fromkeys(
        label.split('.')[0] + ('.reference_code' if '.reference_code' in label else '')
        for label in labels))
    lines += [f'### {TASK_NAMES[task]}', '',
              '| grid | setup | seeds | ours: mean ± std | per seed | paper | within | p |',
              '|---|---|---|---|---|---|---|---|']
    lines += [_mean_std_row(results, 'table3', task, b, paper, f'table3 | {b}') for b in bases]
    lines += [_mean_std_row(results, 'table3_explain', task, l, paper, f'table3_explain | {l}')
              for l in labels]
    lines.append('')
  return lines


def load_authors_code(results_dir: pathlib.Path) -> List[Dict[str, Any]]:
  """The authors' PyTorch code, run on this machine: results/authors_code/<task>/<label>.json."""
  return [json.loads(p.read_text(encoding='utf-8'))
          for p in sorted(results_dir.glob('authors_code/*/*.json'))]


def authors_code(runs: Sequence[Mapping[str, Any]], results, paper) -> List[str]:
  """Each run of the authors' code beside the paper and beside a run of ours of the same model.

  A file holds one model on one task (`task`, our `label`, the authors' `model` name,
  `source`: repository, commit, torch version; `command`; `changes` to their code) and
  its `runs`, one per budget, each with per-seed test accuracies and optionally `ours`:
  the [grid, label] of our run to compare with (default: table3 and the file's label).
  """
  if not runs:
    return []
  lines = ["### The authors' code, run on this machine", '',
           "The authors' PyTorch code (never part of this repo), trained and tested here on "
           "the same data. \"p (paper)\" is Welch's t-test against the paper's mean ± std; "
           "\"p (ours)\" against the run of ours named in the same row.", '']
  for item in runs:
    if item['task'] not in PAPER_SEEDS:          # a task tested at several lengths
      lines += _authors_code_by_length(item, results, paper)
      continue
    task, label, source = item['task'], item['label'], item['source']
    ref = paper.get((label.split('.')[0], PAPER_COLUMNS[task]), '–')
    lines += [f"{TASK_NAMES[task]}, `{item['model']}` ({source['repo']} at "
              f"{source['commit'][:7]}, torch {source['torch']}, {source['device']}). "
              f"Command: `{item['command']}`. Changes to their code: {item['changes']}", '',
              "| budget | seeds | authors' code: mean ± std | per seed (best-dev epoch) "
              '| paper | within | p (paper) | ours: grid / setup | ours: mean ± std | p (ours) |',
              '|---|---|---|---|---|---|---|---|---|---|']
    for run in item['runs']:
      accs = [s['test_accuracy'] for s in run['seeds']]
      mean, std = _mean_std(accs)
      per_seed = ', '.join(f"{_fmt(s['test_accuracy'])} ({s['best_dev_epoch']})"
                           for s in run['seeds'])
      ours_grid, ours_label = run.get('ours', ('table3', label))
      ours = _test_accs(results, ours_grid, task, ours_label)
      ours_cell, p_ours = 'not run', '–'
      if ours:
        ours_mean, ours_std = _mean_std(ours)
        ours_cell = f'{ours_mean:.2f} ± {ours_std:.2f}'
        p_ours = _welch_p_two(mean, std, len(accs), ours_mean, ours_std, len(ours))
      lines.append(
          f"| {run['budget']} | {len(accs)} | {mean:.2f} ± {std:.2f} | {per_seed} | {ref} | "
          f"{_within(mean, ref)} | {_welch_p(mean, std, len(accs), ref, PAPER_SEEDS[task])} | "
          f"{ours_grid} / {ours_label} | {ours_cell} | {p_ours} |")
    lines += ['', *[f"- {note}" for note in item.get('notes', [])], '']
  return lines


def _table_of(task: str, label: str) -> str:
  """The library-procedure grid that holds (task, label): table2, table4 or table6."""
  if task in ('dedupe', 'posretrieve'):
    return 'table6'
  return 'table4' if label in grids_lib.TABLE4_VARIANTS else 'table2'


def _authors_code_by_length(item: Mapping[str, Any], results, paper) -> List[str]:
  """A run of the authors' code on a length task: per split, median [per seed], beside
  the paper's number (a row only where the paper files have one for the run) and the
  same run of ours under the library's procedure and under the authors'."""
  task, label, source = item['task'], item['label'], item['source']
  splits = splits_of(task)
  base = _table_of(task, label)
  lines = [f"{TASK_NAMES[task]} / {label}: `{item['model']}` ({source['repo']} at "
           f"{source['commit'][:7]}, torch {source['torch']}, {source['device']}). "
           f"Command: `{item['command']}`. Changes to their code: {item['changes']}", '',
           '| run | setup | seeds | ' + ' | '.join(f'len {LENGTH_OF[s]}' for s in splits)
           + ' | best-dev epoch per seed | epochs |', '|' + '---|' * (5 + len(splits))]
  refs = [paper.get((label.split('.')[0], paper_column(task, s))) for s in splits]
  if any(refs):
    lines.append(f"| paper | Table {base[5:]} | – | "
                 f"{' | '.join(ref or '–' for ref in refs)} | – | – |")
  for run in item['runs']:
    seeds = run['seeds']
    cells = []
    for split in splits:
      accs = [s['test'][split] for s in seeds]
      cells.append(f"{_fmt(_median(accs))} [{', '.join(_fmt(a) for a in accs)}]")
    lines.append(f"| authors' code | {run['budget']} | {len(seeds)} | {' | '.join(cells)} | "
                 f"{', '.join(str(s['best_dev_epoch']) for s in seeds)} | "
                 f"{', '.join(str(s['epochs_run']) for s in seeds)} |")
  for grid_name, setup in ((base, label), (f'{base}_authors', label + AUTHORS_TAG)):
    records = results.get((grid_name, task, setup), [])
    if not records:
      lines.append(f"| ours: {grid_name} | {setup} | 0 | "
                   f"{' | '.join(['not run'] * len(splits))} | – | – |")
      continue
    cells = []
    for split in splits:
      accs = [r['test'][split]['accuracy'] for r in records]
      cells.append(f"{_fmt(_median(accs))} [{', '.join(_fmt(a) for a in accs)}]")
    lines.append(f"| ours: {grid_name} | {setup} | {len(records)} | {' | '.join(cells)} | "
                 f"{', '.join(str(r['best_dev_epoch']) for r in records)} | "
                 f"{', '.join(str(r['epochs']) for r in records)} |")
  return lines + ['', *[f'- {note}' for note in item.get('notes', [])], '']


def other_table(results, name: str, title: str, task_list, variant_list,
                tag: str = '', iid: bool = False,
                paper: Optional[Mapping[Tuple[str, str], str]] = None) -> List[str]:
  """A table of grid `name`'s units labelled variant + `tag` (iid: with an IID column,
  `_iid_cell`, as the paper's Table 6 has). A task where `paper` (`read_paper`) has a
  number for one of `variant_list` gets a paper column beside each of ours, both marked
  as in Table 2 (S / P / F, `grid.mark`), and an "agree" column per two longest lengths;
  a task where it has none is printed without them."""
  paper = paper or {}
  records_all = [r for (g, _, _), rs in results.items() if g == name for r in rs]
  lines = [f'## {title}', '', _protocol(records_all), '',
           'Median sequence accuracy (%) over seeds / mean edit distance (tokens), per length.',
           '']
  if iid:
    lines += [_IID_NOTE, '']
  for task in task_list:
    splits = splits_of(task)
    shown = (('test_iid',) if iid else ()) + splits
    with_paper = any((v, paper_column(task, s)) in paper for v in variant_list for s in shown)
    heads = (['IID [per seed]'] if iid else []) + [f'len {LENGTH_OF[s]}' for s in splits]
    if with_paper:
      heads = [h for head in heads for h in (head, 'paper')] + [
          f'agree {LENGTH_OF[s]}' for s in splits[1:]]
    lines += [f'### {TASK_NAMES[task]}', '', f"| variant | seeds | {' | '.join(heads)} |",
              '|' + '---|' * (2 + len(heads))]
    for variant in variant_list:
      records = results.get((name, task, variant + tag), [])
      refs = {s: paper.get((variant, paper_column(task, s))) for s in shown}
      medians = {}
      if records:
        cells = [_iid_cell(records)] if iid else []
        for split in splits:
          acc = medians[split] = _median([r['test'][split]['accuracy'] for r in records])
          edit = sum(r['test'][split]['edit_distance'] for r in records) / len(records)
          letter = f' {mark(acc)[0].upper()}' if with_paper else ''
          cells.append(f'{_fmt(acc)}{letter} / {edit:.2f}')
      else:
        cells = ['not run'] * (iid + len(splits))
      if with_paper:
        cells = [c for ours, s in zip(cells, shown) for c in (ours, _paper_cell(refs[s]))]
        cells += [('yes' if _agrees(medians[s], refs[s]) else '**no**')
                  if s in medians and refs[s] else '–' for s in splits[1:]]
      lines.append(f"| {variant} | {len(records)} | {' | '.join(cells)} |")
    lines.append('')
  return lines


_SETUP_LABELS = ("Labels: `tf_dev` = the authors' code's teacher-forced dev metric; "
                 "`random_batches` = its random batches instead of length buckets; `gate0` = "
                 'MonoAttn with a trainable gate (initial logit 0, g = 0.5) instead of the '
                 "authors' code's frozen one (logit -20); `paper_epochs` = the paper's epoch "
                 'budget (at most 100 epochs, patience 50, no stop at 100% dev); '
                 '`reference_code` (a results-path label) = the Mix form of the authors\' code; '
                 '`rmono` = RMonoAttn. '
                 'Cells: median sequence accuracy (%) [per seed] / mean edit distance.')


def _setup_table(results, task: str, rows: Sequence[Tuple[str, str]]) -> List[str]:
  """One row per (grid, label) training setup of `task`: every paper length, per seed."""
  splits = splits_of(task)
  lines = ['| grid | setup | seeds | ' + ' | '.join(f'len {LENGTH_OF[s]}' for s in splits)
           + ' | best dev (%) per seed | epochs |', '|' + '---|' * (5 + len(splits))]
  for grid_name, label in rows:
    records = results.get((grid_name, task, label), [])
    if not records:
      lines.append(f"| {grid_name} | {label} | 0 | {' | '.join(['not run'] * len(splits))} "
                   '| – | – |')
      continue
    cells = []
    for split in splits:
      accs = [r['test'][split]['accuracy'] for r in records]
      edit = sum(r['test'][split]['edit_distance'] for r in records) / len(records)
      cells.append(f"{_fmt(_median(accs))} [{', '.join(_fmt(a) for a in accs)}] / {edit:.2f}")
    dev = ', '.join(_fmt(r['best_dev_accuracy']) for r in records)
    epochs = ', '.join(str(r['epochs']) for r in records)
    lines.append(f"| {grid_name} | {label} | {len(records)} | {' | '.join(cells)} | {dev} | "
                 f'{epochs} |')
  return lines


def recopy_mono(results) -> List[str]:
  """The ReCopy / MonoAttn investigation beside Table 2's ReCopy rows of MonoAttn and OneStepAttn."""
  rows = [('table2', 'mono'), ('table2', 'onestep')] + [
      ('recopy_mono', label) for label in grids_lib.RECOPY_MONO_LABELS]
  records_all = [r for g, l in rows for r in results.get((g, 'recopy', l), [])]
  lines = ['## ReCopy / MonoAttn: the investigation', '', _protocol(records_all), '',
           'Each row is one training setup of ReCopy, seeds as listed. ' + _SETUP_LABELS
           + ' The paper: MonoAttn 100 / 100 / 100, OneStepAttn 100 / 100 / 100.', '']
  return lines + _setup_table(results, 'recopy', rows) + ['']


def table2_explain(results, paper) -> List[str]:
  """Each Table 2 run of `grid.TABLE2_EXPLAIN_RUNS` beside its reruns under the
  authors' code's training choices, task by task."""
  by_task: Dict[str, List[str]] = {}
  for task, label in grids_lib.TABLE2_EXPLAIN_RUNS:
    by_task.setdefault(task, []).append(label)
  records_all = [r for task, labels in by_task.items() for label in labels
                 for r in results.get(('table2_explain', task, label), [])]
  lines = ['## Table 2 disagreements: reruns under the authors\' code\'s training choices', '',
           _protocol(records_all), '',
           'Each Table 2 run whose cells still disagreed with the paper after seeds 0 and 1, '
           'beside the same run with one of the authors\' code\'s training choices or the '
           'paper\'s epoch budget. ' + _SETUP_LABELS, '']
  for task, labels in by_task.items():
    variants_ = list(dict.fromkeys(label.split('.')[0] for label in labels))
    paper_row = '; '.join(
        f"{v} " + ' / '.join(paper.get((v, paper_column(task, s)), '–')
                             for s in splits_of(task))
        for v in variants_)
    lengths = ' / '.join(str(LENGTH_OF[s]) for s in splits_of(task))
    lines += [f'### {TASK_NAMES[task]}', '', f'The paper, lengths {lengths}: {paper_row}.', '']
    rows = [('table2', v) for v in variants_] + [('table2_explain', l) for l in labels]
    lines += _setup_table(results, task, rows) + ['']
  return lines




def procedures(results, paper) -> List[str]:
  """Every Tables 2, 4 and 6 run that has units under the authors' training procedure
  (`recipes.AUTHORS_CODE`, label tag `.authors`), beside the same run under the library's."""
  lines = ["## Two training procedures: the library's and the authors' (Tables 2, 4, 6)", '']
  records_all = [r for _, g, _, _ in PROCEDURE_GRIDS for (g2, _, _), rs in results.items()
                 if g2 == g for r in rs]
  lines += [_protocol(records_all), '',
            "Each run under the library's procedure (grids `table2`, `table4`, `table6`; "
            "protocol in those sections) beside the same run under the authors' (`.authors`: "
            'random batches, at most 100 epochs, stop after 51 epochs without improvement, '
            "improvement = a strict gain or an exact tie, torch's ReduceLROnPlateau, "
            "teacher-forced dev accuracy, DeDupe sources ending in `<eos>`, the authors' "
            'initialisation, no σ bias, their Eq. 9 normaliser; `monoloc_jax/recipes.py`). '
            'Cells: median sequence accuracy (%) [per seed] / mean edit distance.', '']
  shown = 0
  for base, grid_name, task_list, variant_list in PROCEDURE_GRIDS:
    for task in task_list:
      rows = [(base, v) for v in variant_list
              if results.get((grid_name, task, v + AUTHORS_TAG))]
      if not rows:
        continue
      shown += len(rows)
      lines += [f'### {base}: {TASK_NAMES[task]}', '']
      if any((v, paper_column(task, s)) in paper for _, v in rows for s in splits_of(task)):
        paper_row = '; '.join(
            f"{v} " + ' / '.join(paper.get((v, paper_column(task, s)), '–')
                                 for s in splits_of(task)) for v, in [(r[1],) for r in rows])
        lines += [f"The paper, lengths {' / '.join(LENGTH_OF[s] for s in splits_of(task))}: "
                  f'{paper_row}.', '']
      pairs = [row for b, v in rows for row in ((b, v), (grid_name, v + AUTHORS_TAG))]
      lines += _setup_table(results, task, pairs) + ['']
  if not shown:
    lines += ["_No unit has run under the authors' procedure yet._", '']
  return lines


def _median_cell(accs: Sequence[float]) -> str:
  """'median [per seed]' of accuracies (%)."""
  return f"{_fmt(_median(accs))} [{', '.join(_fmt(a) for a in accs)}]"


# The Transformer settings a unit record states ('protocol'), in the order they are told.
TRANSFORMER_SETTINGS = (('transformer.layers', 'encoder and decoder layers'),
                        ('transformer.heads', 'heads'), ('hidden_dim', 'width'),
                        ('transformer.mlp_dim', 'MLP width'),
                        ('transformer.positions', 'self-attention positions'),
                        ('warmup_steps', 'lr warmup updates'), ('dropout', 'dropout'))


def _transformer_settings(records: Sequence[Mapping[str, Any]]) -> str:
  """The Transformer's size and training additions, from the records themselves."""
  def values(key):
    return ', '.join(sorted({str(config_paths.stored_field(r['protocol'], key, 'not recorded'))
                             for r in records}))
  return 'Transformer: ' + '; '.join(f'{what} {values(key)}'
                                     for key, what in TRANSFORMER_SETTINGS) + '.'


_IID_NOTE = ("IID: test_iid (the training lengths). A unit trained before test_iid was "
             "scored, whose checkpoint is gone, was trained again from scratch to score it "
             "(`reproduce.py --add_test_splits=test_iid --retrain_gone`); † marks a seed "
             "whose rerun did not reproduce its committed figures within one example, so its "
             "IID figure is the rerun's. '–': not scored yet.")


def _iid_cell(records: Sequence[Mapping[str, Any]]) -> str:
  """Median test_iid accuracy over the units scored on it [per seed, '–' = not scored,
  † = added by a retrain that did not reproduce the unit's committed figures]."""
  accs = [r['test'].get('test_iid', {}).get('accuracy') for r in records]
  scored = [a for a in accs if a is not None]
  if not scored:
    return '–'
  def seed_cell(r, a):
    if a is None:
      return '–'
    return _fmt(a) + _dagger(r.get('added_test_splits', {}).get('test_iid'))
  return (f"{_fmt(_median(scored))} "
          f"[{', '.join(seed_cell(r, a) for r, a in zip(records, accs))}]")


def transformer_grid(results) -> List[str]:
  """Beyond the paper: grid `transformer` (Table 2's tasks and four variants on the
  Transformer backbone), each run beside the same variant on the paper's GRU (grid
  `table2`). Nothing while the grid has no results, so the paper's report is unchanged."""
  runs = grids_lib.grid_runs()['transformer']
  records_all = [r for task, label in runs for r in results.get(('transformer', task, label), [])]
  if not records_all:
    return []
  lines = ['## Beyond the paper: a Transformer backbone on Table 2\'s tasks', '',
           '**Not in the paper, and not part of the reproduction**: the paper trains GRUs only. '
           "Grid `transformer` runs Table 2's eight tasks with four of its cross-attention "
           'variants as the cross-attention of a pre-LN Transformer encoder-decoder '
           '(`--config.backbone=transformer`, `monoloc_jax/transformer.py`), under the '
           "protocol below: the library's training procedure, as grid `table2` runs it, with the "
           "Transformer's settings. (The paper reproduction's protocol is the authors' "
           "procedure, up to 100 epochs, stopping after 51 without improvement; the "
           "Transformer grid keeps the "
           "library procedure's 30-epoch budget so that it stays affordable on a CPU, and so "
           "that its GRU column, grid `table2`, ran under the same procedure.)", '',
           _protocol(records_all), '', _transformer_settings(records_all), '',
           'Cells: median sequence accuracy (%) over seeds [per seed]. "iid": the test '
           'split of the training lengths, which tells a model that did not fit the task '
           '(low iid) from one that fit it and failed to extrapolate ("–": a unit not '
           'scored on it). "GRU" is the same '
           "variant's median in grid `table2` (the paper's BiGRU -> GRU, this protocol), "
           'at the same lengths.', '']
  for task in grids_lib.TABLE2_TASKS:
    splits = splits_of(task)
    lengths = ' / '.join(LENGTH_OF[s] for s in splits)
    lines += [f'### {TASK_NAMES[task]}', '',
              '| variant | seeds | iid | ' + ' | '.join(f'len {LENGTH_OF[s]}' for s in splits)
              + f' | GRU: seeds | GRU: len {lengths} | epochs |',
              '|' + '---|' * (6 + len(splits))]
    for label in [l for t, l in runs if t == task]:
      records = results.get(('transformer', task, label), [])
      cells = ([_iid_cell(records)]
               + [_median_cell([r['test'][s]['accuracy'] for r in records]) for s in splits]
               if records else ['not run'] * (1 + len(splits)))
      gru = results.get(('table2', task, label.split('.')[0]), [])
      gru_cell = (' / '.join(_fmt(_median([r['test'][s]['accuracy'] for r in gru]))
                             for s in splits) if gru else 'not run')
      epochs = ', '.join(str(r['epochs']) for r in records) if records else '–'
      lines.append(f"| {label.split('.')[0]} | {len(records)} | {' | '.join(cells)} | "
                   f'{len(gru)} | {gru_cell} | {epochs} |')
    lines.append('')
  return lines


def transformer_dropout05(results) -> List[str]:
  """Grid `transformer_dropout05` (the Transformer grid's first form, at the GRU protocol's
  dropout 0.5) beside the same runs in grid `transformer` (dropout 0.1), run by run;
  nothing while it has no results."""
  runs = grids_lib.grid_runs()['transformer_dropout05']
  if not any(results.get(('transformer_dropout05', t, l)) for t, l in runs):
    return []
  lines = ['### The Transformer at dropout 0.5 (grid `transformer_dropout05`)', '',
           "The grid's first form trained at the GRU protocol's dropout, 0.5. Its repeat-task "
           'runs learned networks that work only with dropout on: they score far better on '
           'test_iid with dropout left on than with it off, which is how every evaluation runs '
           '(results/NOTES.md, "The Transformer grid"). The grid above trains at 0.1, a '
           "Transformer's usual rate; nothing else differs. Cells: median sequence accuracy (%) "
           'over seeds, at the test lengths named.', '',
           '| task | variant | dropout | seeds | iid | lengths | accuracy | epochs |',
           '|' + '---|' * 8]
  for task, label in runs:
    base = label.rsplit('.', 1)[0]              # the grid run at dropout 0.1
    lengths = ' / '.join(LENGTH_OF[s] for s in splits_of(task))
    for grid_name, setup, dropout in (('transformer_dropout05', label, '0.5'),
                                      ('transformer', base, '0.1')):
      records = results.get((grid_name, task, setup), [])
      if records:
        cells = [_iid_cell(records), lengths, ' / '.join(
            _fmt(_median([r['test'][s]['accuracy'] for r in records])) for s in splits_of(task))]
      else:
        cells = ['not run', lengths, 'not run']
      epochs = ', '.join(str(r['epochs']) for r in records) if records else '–'
      lines.append(f"| {TASK_NAMES[task]} | {label.split('.')[0]} | {dropout} | {len(records)} | "
                   f"{' | '.join(cells)} | {epochs} |")
  return lines + ['']


# The runs range-evaluated for the horizon section (`reproduce.py --range_evaluate`):
# (grid, its tasks, its labels, title).
HORIZON_GRIDS = (
    ('table2_authors', grids_lib.TABLE2_TASKS,
     tuple(v + AUTHORS_TAG for v in grids_lib.TABLE2_VARIANTS),
     "Table 2's runs under the protocol (the authors' procedure)"),
    ('transformer', grids_lib.TABLE2_TASKS, None, 'the Transformer grid'),
)


def load_ranges(results_dir: pathlib.Path) -> Dict[Tuple[str, str, str], Dict[str, Any]]:
  """{(grid, task, label): record} of results/range/<grid>/<task>/<label>.json."""
  out = {}
  for path in sorted((results_dir / 'range').glob('*/*/*.json')):
    record = json.loads(path.read_text(encoding='utf-8'))
    out[(record['grid'], record['task'], record['label'])] = record
  return out


# What the fixed lengths hid (`hidden_by_fixed_lengths`): its kinds, in the order shown.
HIDDEN_KINDS = (
    ('past_training', 'Past the training lengths, short of the first fixed length (the '
     'fixed tables show only the failure there)'),
    ('between', 'Between two fixed lengths, the longer one failed'),
    ('dip', 'Below 90% short of a fixed length that is solved'),
    ('beyond', 'Solved at every fixed length, short of the range\'s end'),
)


def hidden_by_fixed_lengths(record: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
  """What a run's fixed test lengths hid about its horizon H, as (kind, phrase), else
  None. The fixed figures are those of the model range-evaluated (a retrained seed's own,
  else the committed ones); the training lengths' longest counts as passed.
    past_training / between: lo < H < hi for consecutive anchors lo, hi (lo the longest
      training length or a solved fixed length) with hi not solved ('holds to 25, 0.0 at 30');
    dip: a fixed length in the range beyond H is solved (the curve falls below 90%
      before it);
    beyond: every fixed length in the range solved and H past them.
  A horizon at the range's last length hides nothing (it holds over the whole range)."""
  h, last = record.get('horizon'), record['lengths'][-1]
  if not h or h >= last:                 # none, or it holds over the whole range
    return None
  figures = ((record.get('retrained') or {}).get('retrained_test')
             or record['committed_test'])
  fixed = sorted((float(LENGTH_OF[s]), s) for s in figures if LENGTH_OF.get(s))
  if not fixed:
    return None
  acc = {n: figures[s]['accuracy'] for n, s in fixed}
  curve = dict(zip(record['lengths'], record['accuracy']))
  after = f"{_fmt(curve[h + 1])} at {h + 1:g}" if h + 1 in curve else ''
  anchors = [float(max(record['train_lengths']))] + [n for n, _ in fixed]
  for i, (lo, hi) in enumerate(zip(anchors, anchors[1:])):
    if lo < h < hi and mark(acc[hi]) != 'solved' and (i == 0 or mark(acc[lo]) == 'solved'):
      return ('past_training' if i == 0 else 'between',
              f'holds to {h:g}, {_fmt(acc[hi])} at {hi:g}')
  in_range = [n for n, _ in fixed if n <= last]
  solved_past = [n for n in in_range if n > h and mark(acc[n]) == 'solved']
  if solved_past:
    return 'dip', f'holds to {h:g} ({after}), {_fmt(acc[solved_past[-1]])} at {solved_past[-1]:g}'
  if in_range and all(mark(acc[n]) == 'solved' for n in in_range) and in_range[-1] < h:
    return 'beyond', (f'holds to {h:g} of {last:g} ({after}); '
                      + ', '.join(f'{_fmt(acc[n])} at {n:g}' for n in in_range))
  return None


def rerun_changes(record: Mapping[str, Any]) -> List[str]:
  """The fixed test lengths that a retrained seed solves (≥ SOLVED, the horizon's 90%) where
  its committed figures do not, or the other way round, as 'committed → rerun at length',
  shortest length first; [] for a seed that was not retrained or agrees at every length.
  The horizon is the rerun's, so at these lengths it does not describe the committed model."""
  rerun = (record.get('retrained') or {}).get('retrained_test') or {}
  committed = record['committed_test']
  changed = sorted((float(LENGTH_OF[s]), s) for s in rerun
                   if LENGTH_OF.get(s) and s in committed
                   and (rerun[s]['accuracy'] >= SOLVED) != (committed[s]['accuracy'] >= SOLVED))
  return [f"{_fmt(committed[s]['accuracy'])} → {_fmt(rerun[s]['accuracy'])} at {n:g}"
          for n, s in changed]


def _rerun_lines(have: Mapping[Tuple[str, str], Mapping[str, Any]]) -> List[str]:
  """The paragraph on the retrained seeds: how many reproduced their committed figures,
  and the runs whose rerun changed a fixed length's mark."""
  retrained = {k: r for k, r in sorted(have.items()) if r.get('retrained')}
  if not retrained:
    return []
  daggers = sum(bool(_dagger(r['retrained'])) for r in retrained.values())
  changes = {k: rerun_changes(r) for k, r in retrained.items()}
  changed = [f'{TASK_NAMES[t]} / {l} (seed {retrained[(t, l)]["seed"]}): ' + ', '.join(c)
             for (t, l), c in changes.items() if c]
  own = ('' if len(retrained) == len(have) else
         ' (the others were scored from their own checkpoints)')
  lines = [f'Retrained: {len(retrained)} of {len(have)}{own}; {len(retrained) - daggers} '
           f'reproduced their committed figures within one example, {daggers} did not (†).']
  if changed:
    lines[0] += (' Where a rerun solves a fixed length that the committed seed did not, or '
                 'the other way round, its horizon describes the rerun, not the committed '
                 'model (committed → rerun): ' + '; '.join(changed) + '.')
  return lines + ['']


def _hidden_lines(have: Mapping[Tuple[str, str], Mapping[str, Any]]) -> List[str]:
  """The paragraph on what the fixed lengths hid: one bullet per kind that occurs."""
  found = {(t, l): hidden_by_fixed_lengths(r) for (t, l), r in sorted(have.items())}
  bullets = []
  for kind, title in HIDDEN_KINDS:
    runs = [f'{TASK_NAMES[t]} / {l} (seed {have[(t, l)]["seed"]}) {what[1]}'
            for (t, l), what in found.items() if what and what[0] == kind]
    if runs:
      bullets.append(f'- {title}: ' + '; '.join(runs) + '.')
  if not bullets:
    return ['The fixed lengths hid nothing: every horizon lies at a fixed test length, '
            'before the first one, or at the range\'s end.', '']
  return ['What the fixed lengths hid (fixed figures: the range-evaluated model\'s own):',
          ''] + bullets + ['']


def horizons(results_dir: pathlib.Path, results, figures: bool = True) -> List[str]:
  """The horizon section: per grid, a variant x task table of each run's best seed's
  horizon and OOD score over the range, one figure per task (every variant's curve),
  and the runs whose horizon the fixed-length tables hid."""
  from monoloc_jax import viz  # pylint: disable=g-import-not-at-top
  ranges = load_ranges(results_dir)
  drawn = set()
  lines = ['## Horizons: every length, not three', '',
           "Each run's best seed (highest committed accuracy at its longest test length, "
           'then the next) range-evaluated by `python experiments/reproduce.py '
           '--range_evaluate` (200 samples per length drawn from the task\'s generator, '
           'none a training input where the task makes others: Lookup\'s 64 inputs of '
           'length 3 are all training inputs; the digit tasks at lengths 1–200, Lookup over '
           'its default range in source tokens). Cell: horizon (the longest length up to '
           'which accuracy stays ≥ 90% at every length from the shortest training length, '
           'Lookup\'s length 3 not required; none: below 90% at the first required length) '
           '/ OOD score (mean per-token accuracy over the '
           'lengths above training). A seed whose workdir was gone was trained '
           'again first; † marks one whose rerun did not reproduce its committed figures '
           '(why a rerun can differ: BUILD_NOTES §3). '
           "The figures: per task, every variant's curve on a log length axis.", '']
  for grid_name, task_list, labels, title in HORIZON_GRIDS:
    runs = sorted({(t, l) for (g, t, l) in results if g == grid_name})
    if labels is not None:
      runs = [(t, l) for t, l in runs if l in labels]
    have = {(t, l): ranges[(grid_name, t, l)] for t, l in runs if (grid_name, t, l) in ranges}
    if not runs:
      continue
    lines += [f'### {title}', '', f'{len(have)} of {len(runs)} runs range-evaluated.', '']
    if not have:
      continue
    shown_tasks = [t for t in task_list if any(k[0] == t for k in have)]
    row_labels = sorted({l for _, l in have}, key=lambda l: (
        [l2 for _, l2 in runs].index(l), l))
    lines += ['| variant | ' + ' | '.join(TASK_NAMES[t] for t in shown_tasks) + ' |',
              '|' + '---|' * (1 + len(shown_tasks))]
    for label in row_labels:
      cells = []
      for t in shown_tasks:
        r = have.get((t, label))
        if r is None:
          cells.append('–')
          continue
        dagger = _dagger(r.get('retrained'))
        h, ood = r['horizon'], r['ood_score']
        cells.append(f"{'none' if h is None else format(h, 'g')} / "
                     f"{'–' if ood is None else _fmt(ood)}{dagger}")
      lines.append(f'| {label} | ' + ' | '.join(cells) + ' |')
    lines.append('')
    lines += _rerun_lines(have)
    lines += _hidden_lines(have)
    for t in shown_tasks:
      curves = {label + _dagger(r.get('retrained')): r
                for (t2, label), r in sorted(have.items()) if t2 == t}
      name = f'{grid_name}.{t}.png'
      if figures:
        fig = viz.plot_range(curves, title=f'{TASK_NAMES[t]}: {title}', xscale='log')
        viz.save(fig, results_dir / 'range' / 'figures' / name)
        drawn.add(name)
      lines += [f'![{TASK_NAMES[t]}](results/range/figures/{name})', '']
  if figures:            # a figure of a run set no longer shown is removed
    for old in (results_dir / 'range' / 'figures').glob('*.png'):
      if old.name not in drawn:
        old.unlink()
  return lines


# Column names of the Chomsky grid's models (experiments/grid.py CHOMSKY_LABELS).
def _chomsky_model(label: str) -> str:
  variant, *tags = label.split('.')
  names = {'onestep': 'OneStep', 'mono': 'Mono', 'content': 'content'}
  if 'transformer' not in tags:
    return f'GRU {names[variant]}'
  scheme = next((t[len('pos_'):] for t in tags if t.startswith('pos_')), 'sinusoidal')
  return f'TF {names[variant]}' + ('' if variant != 'content' else f' / {scheme}')


def chomsky_grid(results) -> List[str]:
  """Beyond the paper II: grid `chomsky`, the suite's score (mean per-token accuracy over
  test lengths 41-500, each unit's range evaluation) per task x model, the median over
  seeds [seeds], with the units still missing listed. Nothing while the grid has no
  results."""
  runs = grids_lib.grid_runs()['chomsky']
  have = {(u.task, u.label, u.seed): r for u in grids_lib.units(['chomsky'], [0, 1, 2])
          for r in results.get(('chomsky', u.task, u.label), []) if r['seed'] == u.seed}
  if not have:
    return []
  records_all = list(have.values())
  labels = list(grids_lib.CHOMSKY_LABELS)
  lines = ['## Beyond the paper II: the Chomsky-hierarchy suite', '',
           "**Not in the paper.** The fifteen tasks of Delétang et al. (ICLR 2023) "
           '(`monoloc_jax/tasks/chomsky.py`), trained on lengths 1–40 and scored as the suite '
           'scores: the mean per-token accuracy over every test length 41–500 (each unit is '
           'range-evaluated after training, 16 inputs per length). Models: the GRU with '
           'OneStepAttn, MonoAttn and content attention; the Transformer (the Transformer '
           "grid's size) with content cross-attention under each self-attention position "
           'scheme, and with OneStepAttn and MonoAttn cross-attention (sinusoidal positions). '
           'The budget (`recipes.CHOMSKY_GRID`): 10 epochs of 10,000 training inputs, about a '
           "thousandth of the suite's 1,000,000 steps of batch 128, so a low score here says "
           'less than one there. The suite reports the best of 10 initialisations (and of '
           'its learning rates); cells here are medians of 3 seeds. Its published figures are '
           'not shown: no stored copy of either paper (Delétang et al.; Ruoss et al., ACL 2023) '
           'reaches their tables, and their models differ (encoder-only Transformers and '
           'RNNs without attention that read the output off the input tape, against this '
           "library's encoder-decoders that decode step by step).", '',
           _protocol(records_all), '',
           'Cells: median score (%) over seeds [seeds run]; "–": not run yet.', '',
           '| task | level | ' + ' | '.join(_chomsky_model(l) for l in labels) + ' |',
           '|' + '---|' * (2 + len(labels))]
  for task in grids_lib.CHOMSKY_TASKS:
    cells = []
    for label in labels:
      scores = [have[(task, label, k)]['range']['ood_score'] for k in (0, 1, 2)
                if (task, label, k) in have]
      cells.append(f'{_fmt(_median(scores))} [{len(scores)}]' if scores else '–')
    level = chomsky.TASKS[task].level
    lines.append(f'| {task} | {level} | ' + ' | '.join(cells) + ' |')
  lines.append('')
  done = {('chomsky', task, label, seed) for (task, label, seed) in have}
  lines += _missing_lines(grids_lib.units(['chomsky'], [0, 1, 2]), done, 'units of seeds 0-2')
  lines.append('')
  return lines


def _missing_lines(units: Sequence[grids_lib.Unit], have: set, what: str) -> List[str]:
  """'H of N <what> have results; M missing.' and one line per grid of the missing ones."""
  by_grid: Dict[str, List[str]] = {}
  for u in units:
    if (u.grid, u.task, u.label, u.seed) not in have:
      by_grid.setdefault(u.grid, []).append(f'{u.task}/{u.label}/seed{u.seed}')
  total = sum(len(v) for v in by_grid.values())
  lines = [f'{len(units) - total} of {len(units)} {what} have results; {total} missing.', '']
  for g in grids_lib.GRID_NAMES:
    if g in by_grid:
      lines.append(f'- **{g}** ({len(by_grid[g])} missing): ' + ', '.join(by_grid[g]))
  return lines


def missing(results, protocol: Protocol = PROTOCOLS[PROTOCOL]) -> List[str]:
  """The units of a complete reproduction (`grid.expected_units`) that have no results.
  Required: every expected unit but those of the other procedure's Tables 2, 4 and 6
  grids; those runs are comparisons beside the protocol, optional, and counted apart."""
  have = _have(results)
  optional_grids = {g for p in PROTOCOLS.values() if p != protocol for g in p.grids.values()}
  expected = grids_lib.expected_units(cfq=False)
  required = [u for u in expected if u.grid not in optional_grids]
  optional = [u for u in expected if u.grid in optional_grids]
  seeds_1_2 = [g for g in grids_lib.SEEDS_1_2_GRIDS if g not in optional_grids]
  lines = ['## Missing units', '',
           'A complete reproduction is seed 0 of every grid of the paper plus seeds 1 and 2 of '
           f"{', '.join(f'`{g}`' for g in seeds_1_2)} (CFQ units only where the data is "
           f'available), with Tables 2, 4 and 6 under {protocol.title} procedure, the '
           'protocol. The same runs under the other procedure '
           f"({', '.join(f'`{g}`' for g in sorted(optional_grids))}) are comparisons beside "
           'it: optional, and counted apart.', '']
  lines += _missing_lines(required, have, 'required units')
  lines += ['', '### Optional: the other procedure\'s comparison runs', '']
  lines += _missing_lines(optional, have, 'optional units')
  return lines + ['']


# ---------------------------------------------------------------------------------------
# Tallies: the counts that results/NOTES.md states, generated from results/. NOTES.md
# writes `{{tally:NAME}}` where a count belongs, and `fill_tallies` replaces it with
# TALLIES[NAME] of the results when REPRODUCTION.md is written; an unknown NAME is an
# error naming the valid ones, never a blank.

TALLY = re.compile(r'\{\{tally:([^{}]*)\}\}')


class Facts(NamedTuple):
  """What a tally may read: the unit results (the protocol's seeds), the paper's numbers,
  the authors'-code runs, and the unit results of every seed (`PROTOCOL_SEEDS`)."""
  results: Mapping[Tuple[str, str, str], List[Dict[str, Any]]]
  paper: Mapping[Tuple[str, str], str]
  authors_runs: Sequence[Mapping[str, Any]]
  every_seed: Mapping[Tuple[str, str, str], List[Dict[str, Any]]] = {}


TALLIES: Dict[str, Callable[[Facts], str]] = {}


def tally(name: str) -> Callable[[Callable[[Facts], str]], Callable[[Facts], str]]:
  """Registers a function of `Facts` as the text of `{{tally:name}}`."""
  def register(fn: Callable[[Facts], str]) -> Callable[[Facts], str]:
    TALLIES[name] = fn
    return fn
  return register


def fill_tallies(text: str, facts: Facts) -> str:
  """`text` with every `{{tally:NAME}}` replaced by TALLIES[NAME](facts)."""
  def fill(m: 're.Match[str]') -> str:
    if m.group(1) not in TALLIES:
      raise errors.unknown_name('tally', m.group(1), TALLIES)
    return TALLIES[m.group(1)](facts)
  return TALLY.sub(fill, text)


def _run_name(task: str, label: str) -> str:
  return f"{TASK_NAMES[task]} / {label.split('.')[0]}"


def _second(task: str) -> str:
  """The split at the second test length (30; Lookup and Reverse Lookup: 9)."""
  return splits_of(task)[1]


def _agreement(protocol: Protocol) -> Callable[[Facts], str]:
  """'A of C': Table 2's agreeing cells of C compared, from `protocol`'s units."""
  def text(facts: Facts) -> str:
    _, _, agree, compared = table2(facts.results, facts.paper, protocol)
    return f'{agree} of {compared}'
  return text


def _disagreeing(protocol: Protocol) -> Callable[[Facts], str]:
  """Table 2's disagreeing cells under `protocol`, as 'Run at length, ...'."""
  def text(facts: Facts) -> str:
    cells = [c for c in compared_cells(facts.results, facts.paper, protocol) if not c.agree]
    by_run: Dict[Tuple[str, str], List[str]] = {}
    for c in cells:
      by_run.setdefault((c.task, c.variant), []).append(LENGTH_OF[c.split])
    return ', '.join(f"{_run_name(t, v)} at {' and '.join(ls)}" for (t, v), ls in by_run.items())
  return text


for _name, _protocol_of in PROTOCOLS.items():
  TALLIES[f'table2_agreement_{_name}'] = _agreement(_protocol_of)
  TALLIES[f'table2_disagreeing_{_name}'] = _disagreeing(_protocol_of)


def _both_procedures(results) -> List[Tuple[str, str, str, Dict[int, Dict], Dict[int, Dict]]]:
  """(table, task, variant, {seed: library unit}, {seed: authors' unit}) of every run of
  Tables 2, 4 and 6 with units under both procedures, restricted to the seeds run under both."""
  out = []
  for base, authors_grid, task_list, variant_list in PROCEDURE_GRIDS:
    for task in task_list:
      for variant in variant_list:
        lib = {r['seed']: r for r in results.get((base, task, variant), [])}
        auth = {r['seed']: r for r in results.get((authors_grid, task, variant + AUTHORS_TAG), [])}
        both = sorted(lib.keys() & auth.keys())
        if both:
          out.append((base, task, variant, {s: lib[s] for s in both}, {s: auth[s] for s in both}))
  return out


@tally('procedures_epochs')
def _procedures_epochs(facts: Facts) -> str:
  """How many units ran under both procedures, and the median ratio of their epochs."""
  pairs = [(a['epochs'], l['epochs']) for _, _, _, lib, auth in _both_procedures(facts.results)
           for l, a in zip(lib.values(), auth.values())]
  ratio = _median([a / l for a, l in pairs])
  return (f'{len(pairs)} units (the same run and seed of Tables 2, 4 and 6) ran under both '
          f"procedures; the authors' procedure trained a median {ratio:.1f}× as many epochs "
          f"(median {_median([a for a, _ in pairs]):.0f} epochs against "
          f"{_median([l for _, l in pairs]):.0f})")


@tally('procedures_solved_seeds')
def _procedures_solved_seeds(facts: Facts) -> str:
  """Per run, which procedure solves more of the seeds run under both (≥ SOLVED at the
  second test length)."""
  more = {'library': [], 'authors': []}
  same = 0
  for base, task, variant, lib, auth in _both_procedures(facts.results):
    solved = [sum(r['test'][_second(task)]['accuracy'] >= SOLVED for r in units.values())
              for units in (lib, auth)]
    if solved[0] == solved[1]:
      same += 1
    else:
      more['library' if solved[0] > solved[1] else 'authors'].append(
          f'{_run_name(task, variant)} in Table {base[5:]}, {solved[0]} of {len(lib)} '
          f'against {solved[1]}')
  runs = same + len(more['library']) + len(more['authors'])
  return (f'Of the {runs} runs of Tables 2, 4 and 6 with seeds under both procedures, counting '
          f'a seed solved at ≥ {SOLVED:.0f} at the second test length (30; Lookup and Reverse '
          "Lookup: 9) on the seeds run under both, the authors' procedure solves more seeds "
          f"on {len(more['authors'])} runs, the library procedure on {len(more['library'])} "
          f"({'; '.join(more['library']) or 'none'}), and the two the same number on {same}")


@tally('table2_outcome_seeds')
def _table2_outcome_seeds(facts: Facts) -> str:
  """Seeds of Table 2 whose mark at the second test length matches the paper's, per
  procedure, on the seeds run under both."""
  match = {'library': 0, 'authors': 0}
  seeds = 0
  for base, task, variant, lib, auth in _both_procedures(facts.results):
    if base != 'table2':
      continue
    ref = facts.paper.get((variant, paper_column(task, _second(task))))
    if not ref:
      continue
    seeds += len(lib)
    for name, units in (('library', lib), ('authors', auth)):
      match[name] += sum(mark(r['test'][_second(task)]['accuracy']) == mark(float(ref))
                         for r in units.values())
  return (f"{match['authors']} of {seeds} Table 2 seeds under the authors' procedure and "
          f"{match['library']} of {seeds} under the library's have the paper's mark at the "
          'second test length (the seeds run under both)')


@tally('best_dev_epoch_pattern')
def _best_dev_epoch_pattern(facts: Facts) -> str:
  """Among the authors'-procedure units of Tables 2 and 4 that fit the training lengths
  (best dev ≥ 99%), how often those whose best dev came at the last epoch, and the
  others, solve the second test length."""
  units = [r for (g, _, _), rs in facts.results.items() if g in ('table2_authors', 'table4_authors')
           for r in rs if r['best_dev_accuracy'] >= 99]
  last = max(r['protocol']['max_epochs'] for r in units)
  late = [r for r in units if r['best_dev_epoch'] == last]
  early = [r for r in units if r['best_dev_epoch'] != last]
  def solved(rs):
    n = sum(r['test'][_second(r['task'])]['accuracy'] >= SOLVED for r in rs)
    return f'{n} of these {len(rs)} ({100 * n / len(rs):.0f}%)'
  epochs = sorted(r['best_dev_epoch'] for r in early)
  return (f"Of the {len(units)} units of `table2_authors` and `table4_authors` that fit the "
          f'training lengths (best dev ≥ 99%), {len(late)} last reached their best dev at '
          f'epoch {last}, and {solved(late)} score ≥ {SOLVED:.0f} at the second test '
          f'length (30; Lookup and Reverse Lookup: 9); the other {len(early)} reached it at '
          f'epochs {epochs[0]}–{epochs[-1]}, and {solved(early)} do')


@tally('split_stage_authors')
def _split_stage_authors(facts: Facts) -> str:
  """The split stage under the protocol: seeds 3 and 4 of every run whose seeds 0-2 split."""
  have = _have(facts.results)
  runs = expected = done = 0
  for _, grid_name, task_list, variant_list in PROCEDURE_GRIDS:
    for task in task_list:
      for variant in variant_list:
        seeds = {r['seed']: r for r in facts.results.get((grid_name, task, variant + AUTHORS_TAG), [])}
        if all(s in seeds for s in (0, 1, 2)) and grids_lib.split_run(
            task, [seeds[s]['test'] for s in (0, 1, 2)]):
          runs += 1
          expected += len(grids_lib.SPLIT_RUN_SEEDS)
          done += sum((grid_name, task, variant + AUTHORS_TAG, s) in have
                      for s in grids_lib.SPLIT_RUN_SEEDS)
  return (f'{done} of {expected} units: seeds 3 and 4 of the {runs} runs of Tables 2, 4 and 6 '
          'whose first three seeds split on a mark')


@tally('transformer_iid')
def _transformer_iid(facts: Facts) -> str:
  """How many Transformer units fit the training lengths (test_iid), and the exceptions."""
  units = [r for (g, _, _), rs in facts.results.items() if g == 'transformer' for r in rs]
  scored = [r for r in units if 'test_iid' in r['test']]
  threshold = 85.0
  fit = [r['test']['test_iid']['accuracy'] for r in scored
         if r['test']['test_iid']['accuracy'] >= threshold]
  others = [f"{_run_name(r['task'], r['label'])} seed {r['seed']}, "
            f"{r['test']['test_iid']['accuracy']:g}%"
            for r in scored if r['test']['test_iid']['accuracy'] < threshold]
  return (f'{len(fit)} of the {len(scored)} Transformer units scored on test_iid (of '
          f'{len(units)}) reach {min(fit):g}–{max(fit):g}% on the training lengths'
          + (f" (below {threshold:g}%: {'; '.join(others)})" if others else ''))


@tally('table6_reruns')
def _table6_reruns(facts: Facts) -> str:
  """Of Table 6's units (the protocol's) whose test_iid came from a retrain
  (`reproduce.py --add_test_splits --retrain_gone`), how many reproduced their committed
  figures, per task; the ones that did, by name, where they are the few."""
  parts = []
  for task in ('dedupe', 'posretrieve'):
    notes = [(r, r['added_test_splits']['test_iid'])
             for (g, t, _), rs in sorted(facts.results.items()) if g == 'table6_authors' and t == task
             for r in rs if 'reproduced' in r.get('added_test_splits', {}).get('test_iid', {})]
    ok = [f"{r['label'].split('.')[0]} seed {r['seed']}" for r, n in notes if n['reproduced']]
    named = f" ({', '.join(ok)})" if 0 < len(ok) <= 3 and len(ok) < len(notes) else ''
    parts.append(f'{len(ok)} of the {len(notes)} {TASK_NAMES[task]} reruns{named}')
  return ' and '.join(parts)


@tally('transformer_vs_gru')
def _transformer_vs_gru(facts: Facts) -> str:
  """Grid `transformer` against the GRU's `table2`: the medians' marks at the compared
  lengths, run by run."""
  same, gru_better, transformer_better = 0, [], []
  runs = grids_lib.grid_runs()['transformer']
  for task, label in runs:
    marks = []
    for grid_name, setup in (('transformer', label), ('table2', label.split('.')[0])):
      records = facts.results.get((grid_name, task, setup), [])
      marks.append(tuple(mark(_median([r['test'][s]['accuracy'] for r in records]))
                         for s in grids_lib.compared_splits(task)) if records else None)
    rank = {'failed': 0, 'partial': 1, 'solved': 2}
    if None in marks:
      continue
    if marks[0] == marks[1]:
      same += 1
    elif sum(map(rank.get, marks[1])) > sum(map(rank.get, marks[0])):
      gru_better.append(_run_name(task, label))
    else:
      transformer_better.append(_run_name(task, label))
  compared = same + len(gru_better) + len(transformer_better)
  return (f'the same marks at both compared lengths on {same} of {compared} runs; the GRU '
          f"better on {len(gru_better)} ({', '.join(gru_better) or 'none'}); the Transformer "
          f"better on {len(transformer_better)}"
          + (f" ({', '.join(transformer_better)})" if transformer_better else ''))


@tally('authors_code_solved')
def _authors_code_solved(facts: Facts) -> str:
  """Per run of the authors' code on a length task (results/authors_code/), its seeds
  solved (≥ SOLVED) at the second test length, with the per-seed values."""
  parts = []
  for item in facts.authors_runs:
    if item['task'] in PAPER_SEEDS:              # SCAN / CFQ: one test split
      continue
    accs = [s['test'][_second(item['task'])] for run in item['runs'] for s in run['seeds']]
    parts.append(f"{_run_name(item['task'], item['label'])} {sum(a >= SOLVED for a in accs)} "
                 f"of {len(accs)} [{', '.join(f'{a:g}' for a in accs)}]")
  return '; '.join(parts)


def fisher_exact(a: int, n_a: int, b: int, n_b: int) -> float:
  """Two-sided Fisher's exact test of a of n_a against b of n_b successes: the probability,
  with the margins fixed (hypergeometric), of a table no more likely than the one seen."""
  total, hits = n_a + n_b, a + b
  def prob(k: int) -> float:
    return math.comb(hits, k) * math.comb(total - hits, n_a - k) / math.comb(total, n_a)
  seen = prob(a)
  ks = range(max(0, hits - n_b), min(hits, n_a) + 1)
  return min(1.0, sum(prob(k) for k in ks if prob(k) <= seen * (1 + 1e-9)))


def _codes_compared(facts: Facts, grid_name: str, task: str, label: str,
                    split: str, every_seed: bool = False
                    ) -> Tuple[List[float], List[float], float]:
  """A run's per-seed accuracies at `split`: the authors' procedure here (grid `grid_name`,
  label `label`.authors; the protocol's seeds, or every seed) and the authors' code
  (results/authors_code/), both in seed order, and Fisher's exact test (two-sided) of
  their solved (≥ SOLVED) counts."""
  units = facts.every_seed if every_seed else facts.results
  ours = [r['test'][split]['accuracy'] for r in
          sorted(units.get((grid_name, task, f'{label}.authors'), []),
                 key=lambda r: r['seed'])]
  theirs = [s['test'][split] for item in facts.authors_runs
            if (item['task'], item['label']) == (task, label)
            for run in item['runs'] for s in sorted(run['seeds'], key=lambda s: s['seed'])]
  a, b = sum(x >= SOLVED for x in ours), sum(x >= SOLVED for x in theirs)
  p = fisher_exact(a, len(ours), b, len(theirs)) if ours and theirs else float('nan')
  return ours, theirs, p


def _solved_of(accs: Sequence[float], what: str = '') -> str:
  """'k of n[ what] [a, b, ...]': the seeds solved (≥ SOLVED) of per-seed accuracies."""
  return (f"{sum(x >= SOLVED for x in accs)} of {len(accs)}{what} "
          f"[{', '.join(f'{x:g}' for x in accs)}]")


@tally('irr_mono_codes')
def _irr_mono_codes(facts: Facts) -> str:
  """Inv Reverse ReCopy / MonoAttn at 100: the seeds solved by the authors' procedure here
  and by the authors' code, with Fisher's exact test of the two rates."""
  ours, theirs, p = _codes_compared(facts, 'table2_authors', 'inv_reverse_recopy', 'mono',
                                    'test_100')
  every, _, p_every = _codes_compared(facts, 'table2_authors', 'inv_reverse_recopy', 'mono',
                                      'test_100', every_seed=True)
  text = (f"the authors' procedure here solves {_solved_of(ours, ' seeds at 100')} (seeds "
          f"0–{len(ours) - 1}, the protocol's), the authors' code {_solved_of(theirs)}; "
          f"Fisher's exact test, two-sided: p = {p:.3g}")
  if len(every) > len(ours):
    text += (f". With seeds {len(ours)}–{len(every) - 1} too, ours solve "
             f"{_solved_of(every)}: p = {p_every:.3g}")
  return text


# The Table 4 / 6 runs of issue "Fidelity III" that the authors' code was run on.
FIDELITY3_RUNS = (('table4_authors', 'copy', 'onestep_minus_step3'),
                  ('table4_authors', 'inv_recopy', 'onestep_minus_step3'),
                  ('table4_authors', 'inv_recopy', 'onestep_minus_sigmoid'),
                  ('table4_authors', 'reverse_copy', 'onestep_minus_step2'),
                  ('table4_authors', 'lookup', 'onestep_minus_sigmoid'),
                  ('table6_authors', 'dedupe', 'locattn'),
                  ('table6_authors', 'dedupe', 'onestep'))


@tally('fidelity3_codes')
def _fidelity3_codes(facts: Facts) -> str:
  """Per run of FIDELITY3_RUNS, at its second test length: the seeds the authors' procedure
  here and the authors' code solve, and Fisher's exact test of the two rates."""
  lines = []
  for grid_name, task, label in FIDELITY3_RUNS:
    split = _second(task)
    ours, theirs, p = _codes_compared(facts, grid_name, task, label, split)
    lines.append(f"- {_run_name(task, label)} at {split}: ours {_solved_of(ours)}, the "
                 f"authors' code {_solved_of(theirs) if theirs else 'not run yet'}"
                 + (f"; p = {p:.3g}" if theirs and ours else ''))
  return '\n'.join(lines)


def _progress(grid_name: str) -> Callable[[Facts], str]:
  """'H of N units': the units of a complete reproduction in grid `grid_name` that have results."""
  return lambda facts: '{} of {} units'.format(*grid_progress(facts.results, grid_name))


for _grid in grids_lib.PAPER_GRID_NAMES:
  TALLIES[f'progress_{_grid}'] = _progress(_grid)
for _grid in grids_lib.GRID_NAMES:
  TALLIES[f'units_{_grid}'] = (
      lambda facts, _g=_grid: f"{sum(len(rs) for (g, _, _), rs in facts.results.items() if g == _g)}"
                              ' units')


def embed_notes(text: str, facts: Facts) -> str:
  """results/NOTES.md as REPRODUCTION.md's "Explanations": its tallies filled in
  (`fill_tallies`), its title dropped and each heading one level down, so that its
  sections sit under the report's own."""
  lines = fill_tallies(text, facts).rstrip().splitlines()
  if lines and lines[0].startswith('# '):
    lines = lines[1:]
    while lines and not lines[0].strip():
      lines = lines[1:]
  return '\n'.join('#' + l if re.match(r'#+ ', l) else l for l in lines)


def render(results_dir: pathlib.Path, paper_paths: Sequence[pathlib.Path] = PAPER_FILES,
           protocol: str = PROTOCOL, interim: str = INTERIM, figures: bool = True) -> str:
  """REPRODUCTION.md: Tables 2, 4 and 6 from `protocol`'s units (per table, `interim`'s
  until that table's units are all in), the rest as named; figures: also (re)draw the
  horizon figures under results/range/figures/."""
  results = load_results(results_dir)
  paper = read_paper(*paper_paths)
  shown = shown_protocols(results, PROTOCOLS[protocol], PROTOCOLS[interim])
  authors_runs = load_authors_code(results_dir)
  t2, disagreements, _, _ = table2(results, paper, shown['table2'], authors_runs)
  out = ['# Reproduction of Ray Chowdhury & Caragea (ICML 2023) with monoloc_jax', '',
         'Generated by `python experiments/report.py` from `results/` (one JSON per unit: one '
         'seed of one task × variant run); do not edit by hand. The runs come from '
         '`python experiments/reproduce.py` (see README.md). Paper numbers: '
         '`experiments/data/paper_results.md` (Tables 2 and 3 of the paper, from the project\'s '
         'reference folder; the paper\'s other tables are not in it, so Tables 4 and 6 print '
         'no paper column).', '']
  out += protocol_section(results, protocol, shown)
  out += t2
  out += ['## Table 2 disagreements', '']
  out += disagreements or ['None among the cells that have run.']
  out += ['']
  notes = results_dir / 'NOTES.md'
  out += ['## Explanations (results/NOTES.md)', '']
  out += ([embed_notes(notes.read_text(encoding='utf-8'),
                       Facts(results, paper, authors_runs,
                             load_results(results_dir, max_seed=None))), ''] if notes.exists()
          else ['_No notes yet (results/NOTES.md)._', ''])
  out += table3(results, paper)
  out += other_table(results, shown['table4'].grids['table4'], 'Table 4: OneStepAttn ablations',
                     grids_lib.TABLE2_TASKS, grids_lib.TABLE4_VARIANTS, shown['table4'].tag,
                     paper=paper)
  out += other_table(results, shown['table6'].grids['table6'], 'Table 6: DeDupe and PosRetrieve',
                     ('dedupe', 'posretrieve'), grids_lib.TABLE2_VARIANTS, shown['table6'].tag,
                     iid=True, paper=paper)
  out += other_table(results, 'table7', 'Table 7: the remaining variants', grids_lib.TABLE2_TASKS,
                     grids_lib.TABLE7_VARIANTS)
  out += recopy_mono(results)
  out += table2_explain(results, paper)
  out += table3_explain(results, paper)
  out += procedures(results, paper)
  out += authors_code(authors_runs, results, paper)
  out += transformer_grid(results)
  out += transformer_dropout05(results)
  out += chomsky_grid(results)
  out += horizons(results_dir, results, figures)
  out += missing(results)
  return '\n'.join(out).rstrip() + '\n'


def main(argv) -> None:
  del argv
  f = flags.FLAGS
  text = render(pathlib.Path(f.results_dir), figures=not f.check)
  out = pathlib.Path(f.out)
  if f.check:
    if not out.exists() or out.read_text(encoding='utf-8') != text:
      print(f'{out} is stale: run python experiments/report.py', file=sys.stderr)
      sys.exit(1)
    return
  out.write_text(text, encoding='utf-8')
  print(out)


if __name__ == '__main__':
  # Flags are defined only when run as a script, so tests can import this module
  # beside reproduce.py (which defines --results_dir too).
  flags.DEFINE_string('results_dir', str(REPO / 'results'), 'The unit results.')
  flags.DEFINE_string('out', str(REPO / 'REPRODUCTION.md'), 'The report to write.')
  flags.DEFINE_bool('check', False, 'Only check that --out is up to date.')
  app.run(errors.one_line_errors(main))
