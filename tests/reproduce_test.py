"""The reproduction runner and report (experiments/), on small fixtures: CI never runs the grid."""

import importlib.util
import json
import pathlib
import re
import sys

import pytest

from monoloc_jax import config_paths
from monoloc_jax import errors
from monoloc_jax import multiseed
from monoloc_jax import rundir

EXPERIMENTS = pathlib.Path(__file__).resolve().parent.parent / 'experiments'


def _load(name):
  if str(EXPERIMENTS) not in sys.path:
    sys.path.insert(0, str(EXPERIMENTS))
  spec = importlib.util.spec_from_file_location(f'experiments_{name}', EXPERIMENTS / f'{name}.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


grid = _load('grid')
report = _load('report')
reproduce = _load('reproduce')     # defines the runner's absl flags, once


def record(grid_name, task, label, seed, accs, edit=0.0, epochs=5):
  """A unit record as reproduce.py writes it; accs maps split -> accuracy %."""
  return {
      'grid': grid_name, 'task': task, 'variant': label.split('.')[0], 'label': label,
      'seed': seed, 'overrides': {}, 'epochs': epochs, 'best_dev_epoch': epochs,
      'best_dev_accuracy': 100.0, 'wall_time_s': 12.5, 'data': 'generated',
      'code': {'commit': 'abcdef0123', 'dirty': False},
      'protocol': {'max_epochs': 30, 'early_stop_patience': 10, 'perfect_dev_patience': 3,
                   'lr_patience': 4, 'dev_metric': 'greedy', 'eval_size': 0},
      'test': {s: {'accuracy': a, 'seq_acc_be': a, 'edit_distance': edit, 'n': 2000}
               for s, a in accs.items()},
      'versions': {'python': '3.11', 'jax': '0', 'backend': 'cpu'},
  }


def write(root, rec):
  path = root / rec['grid'] / rec['task'] / rec['label'] / f"seed{rec['seed']}.json"
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(rec))


@pytest.fixture
def fixture_results(tmp_path):
  root = tmp_path / 'results'
  copy = {'test_15': 100.0, 'test_30': 100.0, 'test_100': 100.0}
  write(root, record('table2', 'copy', 'onestep', 0, copy))                 # agrees
  write(root, record('table2', 'copy', 'onestep', 1, copy))
  gpu_unit = record('table2', 'copy', 'onestep', 2, {**copy, 'test_100': 40.0})
  gpu_unit['versions']['backend'] = 'gpu'
  write(root, gpu_unit)
  write(root, record('table2', 'recopy', 'mono', 0,                         # disagrees
                     {'test_15': 10.0, 'test_30': 0.0, 'test_100': 0.0}, edit=3.5))
  write(root, record('table2', 'lookup', 'relative', 0,
                     {'test_long1': 100.0, 'test_long3': 95.0, 'test_long5': 70.0}))
  for seed, acc in enumerate([20.0, 30.0, 31.0]):
    write(root, record('table3', 'scan_length', 'mix_onestep', seed, {'test': acc}))
  write(root, record('table3', 'scan_length', 'mix_mono.reference_code', 0, {'test': 2.0}))
  write(root, record('recopy_mono', 'recopy', 'mono.gate0', 0,
                     {'test_15': 100.0, 'test_30': 96.5, 'test_100': 41.0}, edit=0.5))
  write(root, record('recopy_mono', 'recopy', 'mono.gate0', 1,
                     {'test_15': 100.0, 'test_30': 99.0, 'test_100': 90.0}, edit=0.25))
  write(root, record('table2_explain', 'reverse_recopy', 'mono.gate0', 0,
                     {'test_15': 100.0, 'test_30': 100.0, 'test_100': 97.5}, edit=0.125))
  write(root, record('table3_explain', 'scan_length', 'mix_onestep.paper_epochs', 0,
                     {'test': 25.0}))
  write(root, record('table6', 'dedupe', 'onestep', 0,
                     {'test_15': 50.0, 'test_30': 25.0, 'test_100': 0.0}, edit=1.25))
  authors_unit = record('table6_authors', 'dedupe', 'onestep.authors', 0,
                        {'test_15': 100.0, 'test_30': 99.5, 'test_100': 80.0}, edit=0.5,
                        epochs=100)
  authors_unit['protocol'].update(max_epochs=100, early_stop_patience=51,
                                  perfect_dev_patience=0, dev_metric='teacher_forced',
                                  plateau_rule='reduce_lr_on_plateau', plateau_threshold=1e-4)
  write(root, authors_unit)
  authors = root / 'authors_code' / 'scan_length' / 'mix_onestep.json'
  authors.parent.mkdir(parents=True)
  authors.write_text(json.dumps({
      'task': 'scan_length', 'label': 'mix_onestep', 'model': 'BiGRU_MixOneStep',
      'source': {'repo': 'owner/repo', 'commit': '0123456789abcdef', 'torch': '2.0',
                 'device': 'CPU'},
      'command': 'python train.py', 'changes': 'none.',
      'runs': [{'budget': '30 epochs', 'seeds': [
          {'seed': 0, 'test_accuracy': 10.0, 'best_dev_epoch': 29},
          {'seed': 1, 'test_accuracy': 14.0, 'best_dev_epoch': 30}]},
               {'budget': '100 epochs', 'ours': ['table3_explain', 'mix_onestep.paper_epochs'],
                'seeds': [{'seed': 0, 'test_accuracy': 16.0, 'best_dev_epoch': 100}]}],
      'notes': ['Seed k is their run index k.']}))
  by_length = root / 'authors_code' / 'dedupe' / 'onestep.json'
  by_length.parent.mkdir(parents=True)
  by_length.write_text(json.dumps({
      'task': 'dedupe', 'label': 'onestep', 'model': 'BiGRU_OneStep',
      'source': {'repo': 'owner/repo', 'commit': '0123456789abcdef', 'torch': '2.0',
                 'device': 'CPU'},
      'command': 'python train.py', 'changes': 'none.',
      'runs': [{'budget': '100 epochs', 'seeds': [
          {'seed': s, 'best_dev_epoch': 40 + s, 'epochs_run': 90 + s,
           'test': {'test_iid': 100.0, 'test_15': a, 'test_30': a / 2, 'test_100': 0.0}}
          for s, a in enumerate([90.0, 70.0, 10.0])]}]}))
  return root


def test_report_regenerates_byte_identically_and_states_the_cells(fixture_results):
  text = report.render(fixture_results)
  assert report.render(fixture_results) == text
  # Copy / OneStep: median of [100, 100, 40] at length 100 is 100 -> agrees with the paper.
  assert '| onestep | 3 | 100.0 S [100.0, 100.0, 100.0] | 100 S |' in text
  assert '100.0 S [100.0, 100.0, 40.0] | 100 S | yes | yes | 5, 5, 5 |' in text
  # ReCopy / Mono: ours failed, the paper solved -> two disagreeing cells, listed.
  assert '| mono | 1 | 10.0 F [10.0] | 100 S | 0.0 F [0.0] | 100 S | 0.0 F [0.0] | 100 S | ' \
         '**no** | **no** | 5 |' in text
  assert '- ReCopy / mono, length 30: ours 0.0 (failed), paper 100 (solved)' in text
  # Lookup / Relative at 9 (95, solved) agrees; at 11 (70, partial vs 100 solved) does not.
  assert '| relative | 1 | 100.0 S [100.0] | 100 S | 95.0 S [95.0] | 100 S | 70.0 P [70.0] | ' \
         '100 S | yes | **no** | 5 |' in text
  assert '**Agreement: 3 of 6 compared cells**' in text
  # Table 3: mean 27.00 ± 6.08 vs the paper's 29.51 ± 9.46 -> within one std.
  # Welch's t-test, 3 seeds against the paper's 5: t = -0.46, p = 0.66.
  assert ('| mix_onestep | 3 | 27.00 ± 6.08 | 20.0, 30.0, 31.0 | 29.51 ± 9.46 | yes | 0.66 |'
          in text)
  assert '| mix_mono.reference_code | 1 | 2.00 ± 0.00 | 2.0 | 21.08 ± 7.17 | **no** | – |' in text
  # Table 6: accuracy / edit distance.
  assert '| onestep | 1 | – | 50.0 / 1.25 | 25.0 / 1.25 | 0.0 / 1.25 |' in text
  # The ReCopy / MonoAttn investigation: per-seed cells beside Table 2's rows.
  assert '| recopy_mono | mono.gate0 | 2 | 100.0 [100.0, 100.0] / 0.38 | 97.8 [96.5, 99.0] / ' \
         '0.38 | 65.5 [41.0, 90.0] / 0.38 | 100.0, 100.0 | 5, 5 |' in text
  assert '| table2 | mono | 1 | 10.0 [10.0] / 3.50 |' in text
  assert '| recopy_mono | rmono | 0 | not run |' in text
  # The Table 2 reruns: each disagreeing run beside its reruns, with the paper's row.
  assert 'The paper, lengths 7 / 9 / 11: bi_relative 100 / 100 / 100; onestep 100 / 100 / 100.' \
      in text
  assert '| table2_explain | mono.gate0 | 1 | 100.0 [100.0] / 0.12 | 100.0 [100.0] / 0.12 | ' \
         '97.5 [97.5] / 0.12 | 100.0 | 5 |' in text
  assert '| table2_explain | onestep.random_batches | 0 | not run |' in text
  assert '| table2_explain | onestep.paper_epochs | 0 | not run |' in text
  assert '| table2 | bi_relative | 0 | not run |' in text    # Reverse Lookup, not run here
  # The Table 3 reruns: beside the Table 3 rows, with the paper's mean ± std.
  assert '| table3 | mix_onestep | 3 | 27.00 ± 6.08 | 20.0, 30.0, 31.0 | 29.51 ± 9.46 | yes |' \
      in text
  assert '| table3_explain | mix_onestep.paper_epochs | 1 | 25.00 ± 0.00 | 25.0 | 29.51 ± 9.46 ' \
         '| yes |' in text
  assert '| table3 | mix_onestep.reference_code | 0 | not run |' in text
  # 675 expected: 300 of the tables, 15 of the ReCopy / MonoAttn grid, 30 + 6 of the reruns,
  # seeds 1-2 of Tables 4 and 6 (72), and Tables 2, 4, 6 under the authors' procedure (252).
  # Required: all but the library procedure's Tables 2, 4 and 6 (144 + 72 + 36 = 252), the
  # comparisons beside the protocol, which are counted apart.
  assert '9 of 423 required units have results; 414 missing.' in text
  assert '6 of 252 optional units have results; 246 missing.' in text
  # The authors' procedure: its run beside the library's, with its own lr rule stated.
  assert ('| table6 | onestep | 1 | 50.0 [50.0] / 1.25 | 25.0 [25.0] / 1.25 | 0.0 [0.0] / '
          '1.25 | 100.0 | 5 |') in text
  assert ('| table6_authors | onestep.authors | 1 | 100.0 [100.0] / 0.50 | 99.5 [99.5] / 0.50 '
          '| 80.0 [80.0] / 0.50 | 100.0 | 100 |') in text
  assert "lr by torch's ReduceLROnPlateau (mode max, patience 4, threshold 0.0001" in text
  table2_line = next(l for l in text.splitlines() if l.startswith('- **table2** (139 missing)'))
  missing_table2 = table2_line.split(': ', 1)[1].split(', ')
  assert 'copy/content/seed0' in missing_table2 and 'copy/mono/seed1' in missing_table2
  assert 'copy/onestep/seed2' not in missing_table2 and 'recopy/mono/seed0' not in missing_table2
  assert 'at most 30 epochs' in text and 'the full dev split' in text
  assert 'backend: cpu 4 units, gpu 1 unit.' in text     # Table 2: where its units ran


def test_report_tables_follow_the_chosen_protocol(fixture_results):
  """Tables 2, 4 and 6 show the chosen procedure's units (`report.PROTOCOL`) once all of a
  table's units are in, and the interim procedure's until then."""
  write(fixture_results, record('table2_authors', 'recopy', 'mono.authors', 0,
                                {'test_15': 100.0, 'test_30': 99.0, 'test_100': 20.0},
                                epochs=100))
  code = fixture_results / 'authors_code' / 'recopy' / 'mono.json'
  code.parent.mkdir(parents=True)
  code.write_text(json.dumps({
      'task': 'recopy', 'label': 'mono', 'model': 'BiGRU_Mono', 'command': 'python train.py',
      'source': {'repo': 'owner/repo', 'commit': '0123456789abcdef', 'torch': '2.0',
                 'device': 'CPU'}, 'changes': 'none.',
      'runs': [{'budget': '100 epochs, patience 50 (the paper\'s)', 'seeds': [
          {'seed': s, 'best_dev_epoch': 50, 'epochs_run': 100,
           'test': {'test_15': 100.0, 'test_30': a, 'test_100': a}}
          for s, a in enumerate([100.0, 0.0])]}]}))
  text = report.render(fixture_results)
  assert report.PROTOCOL == 'authors' and report.INTERIM == 'library'
  assert "| 2 | `table2_authors` | 1 of 144 | the library's procedure (`table2`) |" in text
  assert "| 6 | `table6_authors` | 1 of 36 | the library's procedure (`table6`) |" in text
  # Table 2, ReCopy / mono: the library's failing seed while the authors' grid is partial.
  assert '| mono | 1 | 10.0 F [10.0] | 100 S | 0.0 F [0.0] | 100 S |' in text
  assert '| onestep | 1 | – | 50.0 / 1.25 | 25.0 / 1.25 | 0.0 / 1.25 |' in text   # Table 6
  # A disagreement line sets the other procedure's units and the authors' code beside it.
  assert ("- ReCopy / mono, length 30: ours 0.0 (failed), paper 100 (solved); beside it: the "
          "authors' procedure 99.0 [99.0]; the authors' code (100 epochs, patience 50) 50.0 "
          "[100.0, 0.0]; per-unit results in `results/table2/recopy/mono/seed{0}.json`.") in text
  # Forced onto the partial authors' grid: its seed, its disagreement, its gaps.
  authors = report.render(fixture_results, interim='authors')
  assert '| mono | 1 | 100.0 S [100.0] | 100 S | 99.0 S [99.0] | 100 S | 20.0 F [20.0] | ' \
         '100 S | yes | **no** | 100 |' in authors
  assert ("- ReCopy / mono, length 100: ours 20.0 (failed), paper 100 (solved); beside it: the "
          "library's procedure 0.0 [0.0]; the authors' code (100 epochs, patience 50) 50.0 "
          "[100.0, 0.0]; per-unit results in `results/table2_authors/recopy/mono.authors/"
          "seed{0}.json`.") in authors
  assert '| onestep | 0 | not run |' in authors                  # Copy: no authors' unit
  assert '| onestep | 1 | – | 100.0 / 0.50 | 99.5 / 0.50 | 80.0 / 0.50 |' in authors
  # Every Table 6 unit in under the authors' procedure: Table 6 switches, Table 2 does not.
  for u in grid.expected_units():
    if u.grid == 'table6_authors' and (u.task, u.label, u.seed) != ('dedupe', 'onestep.authors', 0):
      write(fixture_results, record(u.grid, u.task, u.label, u.seed,
                                    {'test_15': 90.0, 'test_30': 60.0, 'test_100': 30.0}))
  text = report.render(fixture_results)
  assert "| 6 | `table6_authors` | 36 of 36 | the authors' procedure (`table6_authors`) |" in text
  assert '| onestep | 3 | – | 90.0 / 0.17 | 60.0 / 0.17 | 30.0 / 0.17 |' in text
  assert '| mono | 1 | 10.0 F [10.0] | 100 S | 0.0 F [0.0] | 100 S |' in text
  assert report.render(fixture_results, protocol='library') != text


def test_report_sets_the_authors_code_beside_the_paper_and_ours(fixture_results):
  text = report.render(fixture_results)
  assert "### The authors' code, run on this machine" in text
  assert '`BiGRU_MixOneStep` (owner/repo at 0123456, torch 2.0, CPU)' in text
  # 12.00 ± 2.83 over 2 seeds. Welch against the paper's 29.51 ± 9.46 (5 seeds): p = 0.01;
  # against our 27.00 ± 6.08 (3 seeds): t = -3.71, p = 0.04.
  assert ('| 30 epochs | 2 | 12.00 ± 2.83 | 10.0 (29), 14.0 (30) | 29.51 ± 9.46 | **no** | '
          '0.01 | table3 / mix_onestep | 27.00 ± 6.08 | 0.04 |') in text
  # A run may name the run of ours it compares with; one seed of ours gives no p.
  assert ('| 100 epochs | 1 | 16.00 ± 0.00 | 16.0 (100) | 29.51 ± 9.46 | **no** | – | '
          'table3_explain / mix_onestep.paper_epochs | 25.00 ± 0.00 | – |') in text
  assert '- Seed k is their run index k.' in text
  # A length task: the authors' code beside our run under each procedure.
  assert ("| authors' code | 100 epochs | 3 | 70.0 [90.0, 70.0, 10.0] | 35.0 [45.0, 35.0, 5.0] | "
          '0.0 [0.0, 0.0, 0.0] | 40, 41, 42 | 90, 91, 92 |') in text
  assert '| ours: table6 | onestep | 1 | 50.0 [50.0] | 25.0 [25.0] | 0.0 [0.0] | 5 | 5 |' in text
  assert ('| ours: table6_authors | onestep.authors | 1 | 100.0 [100.0] | 99.5 [99.5] | '
          '80.0 [80.0] | 100 | 100 |') in text
  # The file is not a unit: the unit count is unchanged.
  assert '9 of 423 required units have results; 414 missing.' in text


def _section(text, title):
  """The report's section `title` ('## ...'), up to the next '## ' heading."""
  start = text.index(f'## {title}')
  end = text.find('\n## ', start + 1)
  return text[start:] if end < 0 else text[start:end]


def test_report_sets_tables_4_and_6_beside_the_paper(fixture_results, tmp_path):
  """A number in the Tables 4/6 paper file gives its task a paper column beside each of
  ours (marked S / P / F as in Table 2, with agree columns at the two longest lengths)
  and the authors'-code run a paper row; a task or run the paper file lacks gets none."""
  # Made-up fixture numbers, not the paper's.
  fixture_paper = tmp_path / 'tables_4_6.md'
  fixture_paper.write_text(
      '## Table 4\n\n| model | Copy 15 | Copy 30 | Copy 100 |\n|---|---|---|---|\n'
      '| onestep_minus_step3 |  | 100 |  |\n\n'
      '## Table 6\n\n| model | DeDupe IID | DeDupe 15 | DeDupe 30 | DeDupe 100 |\n'
      '|---|---|---|---|---|\n| onestep | 100 | 100 | 30 | 0 |\n')
  text = report.render(fixture_results, paper_paths=(report.PAPER, fixture_paper))
  table6 = _section(text, 'Table 6: DeDupe and PosRetrieve')
  assert ('| variant | seeds | IID [per seed] | paper | len 15 | paper | len 30 | paper | '
          'len 100 | paper | agree 30 | agree 100 |') in table6
  # Ours 50 / 25 / 0 (failed: ≤ 50) beside 100 / 30 / 0: agree at 30 and 100, not at 15.
  assert ('| onestep | 1 | – | 100 S | 50.0 F / 1.25 | 100 S | 25.0 F / 1.25 | 30 F | '
          '0.0 F / 1.25 | 0 F | yes | yes |') in table6
  assert '| mono | 0 | not run | – | not run | – | not run | – | not run | – | – | – |' in table6
  # PosRetrieve has no paper number: no paper column.
  posretrieve = table6[table6.index('### PosRetrieve'):]
  assert '| variant | seeds | IID [per seed] | len 15 | len 30 | len 100 |' in posretrieve
  assert 'paper' not in posretrieve
  table4 = _section(text, 'Table 4: OneStepAttn ablations')
  copy = table4[table4.index('### Copy'):table4.index('### Reverse Copy')]
  assert ('| onestep_minus_step3 | 0 | not run | – | not run | 100 S | not run | – | – | – |'
          in copy)
  assert 'paper' not in table4[table4.index('### Reverse Copy'):]
  # The authors' code on DeDupe / onestep: paper, authors' code and ours together.
  assert ("| paper | Table 6 | – | 100 | 30 | 0 | – | – |\n| authors' code | 100 epochs | 3 | "
          in text)
  # The shipped Tables 4/6 file has no number yet: no paper column, no paper row.
  default = report.render(fixture_results)
  assert '| paper | Table 6 |' not in default
  assert 'paper' not in _section(default, 'Table 6: DeDupe and PosRetrieve').split('### ', 1)[1]


def test_paper_files_are_read_together_and_may_not_disagree(tmp_path):
  """read_paper reads every paper file given (a blank cell is left out); the files may
  not give one cell two values."""
  shipped = report.read_paper()
  assert '' not in shipped.values()                        # a blank cell is absent, not ''
  assert shipped[('mono', 'Copy 30')] == '100'             # Table 2
  extra = tmp_path / 'extra.md'
  extra.write_text('| model | DeDupe IID | DeDupe 15 |\n|---|---|---|\n| mono |  | 97.9 |\n')
  both = report.read_paper(report.PAPER, extra)
  assert both[('mono', 'DeDupe 15')] == '97.9' and ('mono', 'DeDupe IID') not in both
  assert both[('mono', 'Copy 30')] == '100'
  clash = tmp_path / 'clash.md'
  clash.write_text('| model | Copy 30 |\n|---|---|\n| mono | 99 |\n')
  with pytest.raises(errors.MonolocError, match=r'paper cell \(mono, Copy 30\) is 99'):
    report.read_paper(report.PAPER, clash)


def test_seeds_past_the_protocol_stay_out_of_the_tables(fixture_results):
  """A unit of seed 5 or later (`report.PROTOCOL_SEEDS`) changes no table: the tables keep
  the protocol's seeds 0-4, and only `Facts.every_seed` holds it."""
  before = report.render(fixture_results, figures=False)
  write(fixture_results, record('table2', 'recopy', 'mono', 5,         # would flip the cell
                                {'test_15': 100.0, 'test_30': 100.0, 'test_100': 100.0}))
  write(fixture_results, record('table2', 'recopy', 'mono', 6,
                                {'test_15': 100.0, 'test_30': 100.0, 'test_100': 100.0}))
  assert report.render(fixture_results, figures=False) == before
  assert [r['seed'] for r in report.load_results(fixture_results)[
      ('table2', 'recopy', 'mono')]] == [0]
  assert [r['seed'] for r in report.load_results(fixture_results, max_seed=None)[
      ('table2', 'recopy', 'mono')]] == [0, 5, 6]


def test_report_includes_hand_written_notes(fixture_results):
  (fixture_results / 'NOTES.md').write_text('ReCopy / mono: see the gate experiment.\n')
  assert 'ReCopy / mono: see the gate experiment.' in report.render(fixture_results)
  # Its title goes and its headings sit one level under the report's "Explanations".
  (fixture_results / 'NOTES.md').write_text('# Notes\n\n## Table 2\n\nText.\n')
  text = report.render(fixture_results)
  assert '## Explanations (results/NOTES.md)\n\n### Table 2\n\nText.\n' in text
  assert '# Notes' not in text


def test_notes_tallies_are_generated_from_the_results(fixture_results):
  """A `{{tally:NAME}}` in NOTES.md becomes TALLIES[NAME] of the results; a name that
  is not a tally is a one-line error naming the valid ones, never a blank."""
  notes = fixture_results / 'NOTES.md'
  notes.write_text('Agreement: {{tally:table2_agreement_library}} ({{tally:units_table2}}); '
                   'not under the protocol: {{tally:table2_disagreeing_library}}.\n'
                   '{{tally:progress_table3}}. {{tally:procedures_epochs}}.\n')
  text = report.render(fixture_results)
  assert 'Agreement: 3 of 6 (5 units); not under the protocol: Lookup / relative at 11, ' \
         'ReCopy / mono at 30 and 100.' in text
  assert '4 of 24 units.' in text                              # seed 0-2 of Table 3's SCAN rows
  assert '{{' not in text
  # DeDupe / OneStepAttn seed 0: 100 epochs under the authors' procedure, 5 under the library's.
  assert ("1 units (the same run and seed of Tables 2, 4 and 6) ran under both procedures; the "
          "authors' procedure trained a median 20.0× as many epochs") in text
  # More seeds solved under the authors' procedure on the one run with units under both.
  write(fixture_results, record('table6_authors', 'dedupe', 'onestep.authors', 1,
                                {'test_15': 100.0, 'test_30': 95.0, 'test_100': 0.0}))
  write(fixture_results, record('table6', 'dedupe', 'onestep', 1,
                                {'test_15': 100.0, 'test_30': 95.0, 'test_100': 0.0}))
  facts = report.Facts(report.load_results(fixture_results), report.read_paper(), [])
  assert "the authors' procedure solves more seeds on 1 runs, the library procedure on 0 " \
         '(none), and the two the same number on 0' in report.TALLIES['procedures_solved_seeds'](facts)
  notes.write_text('{{tally:table2_agreement}} cells agree.\n')
  with pytest.raises(errors.MonolocError, match=r"unknown tally 'table2_agreement'; valid "
                     r'tallys: .*table2_agreement_authors'):
    report.render(fixture_results)
  notes.write_text('{{tally:}}\n')
  with pytest.raises(errors.MonolocError, match="unknown tally ''"):
    report.render(fixture_results)


def test_the_table6_rerun_tally_counts_the_reruns_that_reproduced(tmp_path):
  root = tmp_path / 'results'
  base = {'test_15': 90.0, 'test_30': 10.0, 'test_100': 0.0, 'test_iid': 99.0}
  for task, variant, seed, reproduced in (('dedupe', 'mono', 0, False),
                                          ('dedupe', 'content', 2, True),
                                          ('dedupe', 'onestep', 1, False),
                                          ('posretrieve', 'mono', 0, True)):
    rec = record('table6_authors', task, f'{variant}.authors', seed, base)
    rec['added_test_splits'] = {'test_iid': {'reproduced': reproduced}}
    write(root, rec)
  write(root, record('table6_authors', 'posretrieve', 'onestep.authors', 0, base))  # scored
  facts = report.Facts(report.load_results(root), report.read_paper(), [])
  assert report.TALLIES['table6_reruns'](facts) == (
      '1 of the 3 DeDupe reruns (content seed 2) and 1 of the 1 PosRetrieve reruns')


def test_committed_notes_use_only_known_tallies():
  """results/NOTES.md states its counts through tallies that exist (render would fail
  otherwise), and its sections are headed."""
  text = (EXPERIMENTS.parent / 'results' / 'NOTES.md').read_text(encoding='utf-8')
  names = report.TALLY.findall(text)
  assert names and set(names) <= set(report.TALLIES), set(names) - set(report.TALLIES)
  headings = [l for l in text.splitlines() if l.startswith('## ')]
  assert '## Table 2 under the protocol' in headings and '## The Transformer grid' in headings


def test_grids_hold_the_papers_runs():
  runs = grid.grid_runs()
  assert len(runs['table2']) == 48 and len(set(runs['table2'])) == 48
  assert len(runs['table4']) == 24 and len(runs['table6']) == 12 and len(runs['table7']) == 96
  labels = [label for _, label in runs['table3']]
  assert labels == ['content', 'relative', 'mix_locattn', 'bi_relative', 'mix_onestep',
                    'mix_mono', 'mix_onestep.reference_code', 'mix_mono.reference_code']
  assert len(grid.grid_runs(cfq=True)['table3']) == 16
  assert len(runs['table2_explain']) == 10
  assert len(runs['table3_explain']) == 2
  assert {(t, label.split('.')[0]) for t, label in runs['table3_explain']} <= set(
      (t, label.split('.')[0]) for t, label in runs['table3'])
  assert grid.Unit('table3_explain', 'scan_length',
                   'mix_onestep.reference_code.tf_dev.random_batches.paper_epochs', 0
                   ).overrides == {'mix_mode': 'authors_code', 'dev_metric': 'teacher_forced',
                                   'bucket_batches': False, 'max_epochs': 100,
                                   'early_stop_patience': 50, 'perfect_dev_patience': 0}
  assert {(t, label.split('.')[0]) for t, label in runs['table2_explain']} <= set(runs['table2'])
  assert grid.Unit('recopy_mono', 'recopy', 'mono.tf_dev.random_batches', 0).overrides == {
      'dev_metric': 'teacher_forced', 'bucket_batches': False}
  unit = grid.Unit('table3', 'scan_length', 'mix_mono.reference_code', 1)
  assert unit.variant == 'mix_mono' and unit.overrides == {'mix_mode': 'authors_code'}
  assert grid.Unit('table3', 'cfq_length', 'content', 0).overrides['gru.num_layers'] == 2
  ordered = grid.units(['table6', 'table2'], [1, 0])
  assert [u.seed for u in ordered[:60]] == [1] * 60
  assert ordered[0].grid == 'table6' and ordered[12].grid == 'table2'


def test_transformer_grid_is_beyond_the_paper_and_not_expected():
  runs = grid.grid_runs()['transformer']
  assert len(runs) == 32 and len(set(runs)) == 32
  assert {t for t, _ in runs} == set(grid.TABLE2_TASKS)
  assert {l for _, l in runs} == {'content.transformer', 'relative.transformer',
                                  'onestep.transformer', 'mono.transformer'}
  unit = grid.Unit('transformer', 'copy', 'onestep.transformer', 0)
  assert unit.variant == 'onestep'
  assert unit.overrides['backbone'] == 'transformer' and unit.overrides['warmup_steps'] > 0
  # Every override is a field of the config, with a valid value.
  from monoloc_jax import validation  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  from monoloc_jax import config_paths  # pylint: disable=g-import-not-at-top
  config = config_paths.overridden(default.get_config(), unit.overrides)
  validation.validate(config)
  assert (config.transformer.layers, config.transformer.mlp_dim) == (1, 128)   # the grid's size
  # A complete reproduction of the paper does not wait for it.
  assert not [u for u in grid.expected_units() if u.grid == 'transformer']
  assert 'transformer' in grid.GRID_NAMES and 'transformer' not in grid.PAPER_GRID_NAMES


def _transformer_record(task, variant, seed, accs):
  rec = record('transformer', task, f'{variant}.transformer', seed, accs, epochs=7)
  rec['protocol'].update(backbone='transformer', transformer_layers=2, transformer_heads=4,
                         hidden_dim=128, transformer_mlp_dim=512,
                         transformer_positions='sinusoidal', warmup_steps=100, dropout=0.5)
  return rec


def test_report_shows_the_transformer_grid_only_once_it_has_results(fixture_results):
  without = report.render(fixture_results)
  assert 'Transformer' not in without
  copy = {'test_15': 100.0, 'test_30': 90.0, 'test_100': 20.0}
  for seed, acc in enumerate([20.0, 60.0, 10.0]):
    iid = {'test_iid': 97.0 + seed} if seed else {}       # seed 0 not scored on test_iid
    write(fixture_results, _transformer_record('copy', 'onestep', seed,
                                               {**copy, 'test_100': acc, **iid}))
  write(fixture_results, _transformer_record('lookup', 'content', 0,
                                             {'test_long1': 80.0, 'test_long3': 5.0,
                                              'test_long5': 0.0}))
  text = report.render(fixture_results)
  assert report.render(fixture_results) == text
  section = text.split("## Beyond the paper: a Transformer backbone on Table 2's tasks")[1]
  section = section.split('\n## ')[0]
  assert 'Not in the paper, and not part of the reproduction' in section
  assert ('Transformer: encoder and decoder layers 2; heads 4; width 128; MLP width 512; '
          'self-attention positions sinusoidal; lr warmup updates 100; dropout 0.5.') in section
  # Copy / OneStep: the median of [20, 60, 10] at length 100 is 20; table2's three GRU
  # seeds of onestep (fixture) have medians 100 / 100 / 100.
  assert ('| onestep | 3 | 98.5 [–, 98.0, 99.0] | 100.0 [100.0, 100.0, 100.0] | '
          '90.0 [90.0, 90.0, 90.0] | 20.0 [20.0, 60.0, 10.0] | 3 | 100.0 / 100.0 / 100.0 | '
          '7, 7, 7 |') in section
  assert '| content | 0 | not run | not run | not run | not run | 0 | not run | – |' in section
  assert ('| content | 1 | – | 80.0 [80.0] | 5.0 [5.0] | 0.0 [0.0] | 0 | not run | 7 |'
          in section)                                            # Lookup, lengths 7 / 9 / 11
  assert '| GRU: seeds | GRU: len 7 / 9 / 11 | epochs |' in section
  assert section.count('### ') == 8
  # Its units are not missing units of the reproduction.
  assert '9 of 423 required units have results; 414 missing.' in text
  def outside(report_text, start, end='## Missing units'):   # all but [start, end)
    return report_text.replace(
        report_text[report_text.index(start):report_text.index(end)], '')
  # Only the Transformer sections and the horizons' Transformer part differ.
  assert outside(text, '## Beyond the paper') == outside(without, '## Horizons')
  assert '### the Transformer grid' in text[text.index('## Horizons'):]


def test_transformer_grid_at_dropout_05_is_beyond_the_paper_and_reported_beside_the_grid(
    fixture_results):
  # The grid trains at a Transformer's dropout, 0.1; grid transformer_dropout05 at the GRU's.
  assert grid.Unit('transformer', 'recopy', 'mono.transformer', 0).overrides['dropout'] == 0.1
  runs = grid.grid_runs()['transformer_dropout05']
  assert [(t, l.replace('.dropout05', '')) for t, l in runs] == grid.grid_runs()['transformer']
  unit = grid.Unit('transformer_dropout05', 'recopy', 'mono.transformer.dropout05', 0)
  assert unit.overrides['backbone'] == 'transformer' and unit.overrides['dropout'] == 0.5
  assert 'transformer_dropout05' not in grid.PAPER_GRID_NAMES
  assert not [u for u in grid.expected_units() if u.grid == 'transformer_dropout05']
  assert 'The Transformer at dropout 0.5' not in report.render(fixture_results)
  write(fixture_results, _transformer_record('recopy', 'mono', 0,
                                             {'test_iid': 99.0, 'test_15': 95.0, 'test_30': 80.0,
                                              'test_100': 10.0}))
  rec = record('transformer_dropout05', 'recopy', 'mono.transformer.dropout05', 0,
               {'test_iid': 20.0, 'test_15': 0.0, 'test_30': 0.0, 'test_100': 0.0}, epochs=30)
  write(fixture_results, rec)
  write(fixture_results, record('transformer_dropout05', 'lookup', 'relative.transformer.dropout05',
                                0, {'test_long1': 100.0, 'test_long3': 0.1, 'test_long5': 0.0},
                                epochs=6))
  text = report.render(fixture_results)
  assert report.render(fixture_results) == text
  section = text.split('### The Transformer at dropout 0.5 (grid `transformer_dropout05`)')[1]
  section = section.split('\n## ')[0]
  assert '| ReCopy | mono | 0.5 | 1 | 20.0 [20.0] | 15 / 30 / 100 | 0.0 / 0.0 / 0.0 | 30 |' in section
  assert ('| ReCopy | mono | 0.1 | 1 | 99.0 [99.0] | 15 / 30 / 100 | 95.0 / 80.0 / 10.0 | 7 |'
          in section)
  assert '| Lookup | relative | 0.5 | 1 | – | 7 / 9 / 11 | 100.0 / 0.1 / 0.0 | 6 |' in section
  assert '| Lookup | relative | 0.1 | 0 | not run | 7 / 9 / 11 | not run | – |' in section
  assert section.count('| 0.5 |') == section.count('| 0.1 |') == 32


def test_grid_and_seed_flags_give_one_line_errors():
  with pytest.raises(errors.MonolocError, match="unknown grid 'table5'; valid grids: table2"):
    grid.parse_grids('table2,table5')
  with pytest.raises(errors.MonolocError, match="bad --seeds 'a'"):
    grid.parse_seeds('a')
  # 'all' is every grid of the paper; a grid beyond it is named on its own.
  assert grid.parse_grids('all') == list(grid.PAPER_GRID_NAMES)
  assert 'transformer' not in grid.parse_grids('all')
  assert grid.parse_grids('transformer') == ['transformer']
  todo = grid.units(['table2', 'table3'], [3, 4])
  picked = grid.select_runs(todo, 'lookup/mono, scan_length/mix_onestep.reference_code')
  assert [(u.task, u.label, u.seed) for u in picked] == [
      ('lookup', 'mono', 3), ('scan_length', 'mix_onestep.reference_code', 3),
      ('lookup', 'mono', 4), ('scan_length', 'mix_onestep.reference_code', 4)]
  assert grid.select_runs(todo, '') == todo
  with pytest.raises(errors.MonolocError, match="unknown run 'lookup/mno' for these grids; "
                     "valid runs: copy/content, copy/relative"):
    grid.select_runs(todo, 'lookup/mno')
  assert grid.parse_seeds('1,2') == [1, 2]


def test_runs_whose_first_three_seeds_disagree_get_seeds_3_and_4(tmp_path):
  """--split_runs_only keeps a run exactly when its seeds 0-2 are all in and their marks
  (solved >= 90, failed <= 50) differ at a compared length (30 or 100; Lookup 9 or 11)."""
  results = tmp_path / 'results'
  runs = {  # (task, label): accuracies of seeds 0-2 at the three paper lengths
      ('copy', 'onestep'): [(100, 100, 100), (100, 100, 100), (100, 100, 40)],     # split at 100
      ('copy', 'mono'): [(100, 100, 99), (100, 95, 91), (100, 90, 90)],           # all solved
      ('copy', 'content'): [(100, 0, 0), (40, 10, 0), (95, 50, 0)],               # all failed
      ('reverse_copy', 'onestep'): [(100, 100, 100), (100, 100, 100)],            # seed 2 missing
      ('recopy', 'mono'): [(0, 0, 0), (100, 100, 100), (100, 100, 100)],          # split
      ('lookup', 'onestep'): [(40, 100, 100), (100, 100, 100), (100, 100, 100)],  # split at 7 only
  }
  for (task, label), per_seed in runs.items():
    splits = grid.tasks.get(task).paper_splits
    for seed, accs in enumerate(per_seed):
      write(results, record('table2_authors', task, label + '.authors', seed,
                            dict(zip(splits, map(float, accs)))))
  todo = grid.units(['table2_authors'], list(grid.SPLIT_RUN_SEEDS))
  kept = reproduce.split_runs_only(todo, results)
  assert [(u.task, u.label, u.seed) for u in kept] == [
      ('copy', 'onestep.authors', 3), ('recopy', 'mono.authors', 3),
      ('copy', 'onestep.authors', 4), ('recopy', 'mono.authors', 4)]
  assert grid.compared_splits('lookup') == ('test_long3', 'test_long5')
  with pytest.raises(ValueError, match='seeds 0, 1 and 2'):
    grid.split_run('copy', [])
  (results / 'table2_authors/copy/onestep.authors/seed1.json').write_text('{"test": ')
  with pytest.raises(errors.MonolocError, match='table2_authors/copy/onestep.authors/seed1.json '
                     'is damaged .*; move it away to rerun that unit'):
    reproduce.split_runs_only(todo, results)


def test_a_tiny_unit_runs_and_a_finished_unit_is_skipped(tmp_path):
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  base = default.get_config()
  base.update(max_epochs=1, train_size=64, eval_size=16, test_splits='test_15',
              progress=False, perfect_dev_patience=3)
  unit = grid.Unit('table2', 'copy', 'onestep', 0)
  results, work = tmp_path / 'results', tmp_path / 'runs'
  assert reproduce.unit_state(unit, results, work) == 'todo'
  rec = reproduce.run_unit(unit, base, results, work, reproduce.DataDirs())
  saved = json.loads(unit.path(results, '.json').read_text())
  assert saved == json.loads(json.dumps(rec))
  assert set(saved['test']) == {'test_15'} and saved['test']['test_15']['n'] == 16
  assert {'accuracy', 'seq_acc_be', 'edit_distance'} <= set(saved['test']['test_15'])
  assert saved['epochs'] == 1 and saved['protocol']['max_epochs'] == 1
  assert saved['variant'] == 'onestep' and saved['seed'] == 0
  assert re.fullmatch(r'[0-9a-f]{40}', saved['code']['commit'])      # the full hash
  # The versions of the process that trained it, every package named, none blank.
  assert set(saved['versions']) == {'python', 'jax', 'jaxlib', 'flax', 'optax', 'orbax',
                                    'numpy', 'backend', 'host_cores'}
  assert saved['versions']['host_cores'] == str(multiseed.host_cores())
  assert all(saved['versions'].values()), saved['versions']
  here = rundir.versions()
  assert saved['versions'] == {k: str(here[k]) for k in saved['versions']}
  assert reproduce.unit_state(unit, results, work) == 'done'
  # A split added later is scored from the unit's checkpoint, once; the rest is kept.
  assert reproduce.add_test_splits(unit, ['test_iid', 'test_15'], results, work) == ['test_iid']
  added = json.loads(unit.path(results, '.json').read_text())
  assert added['test']['test_iid']['n'] == 16 and 0 <= added['test']['test_iid']['accuracy'] <= 100
  assert added['test']['test_15'] == saved['test']['test_15']
  assert set(added['added_test_splits']) == {'test_iid'}
  assert {k: v for k, v in added.items() if k not in ('test', 'added_test_splits')} == {
      k: v for k, v in saved.items() if k != 'test'}
  assert reproduce.add_test_splits(unit, ['test_iid'], results, work) == []
  with pytest.raises(errors.MonolocError, match="unknown test split 'test_7'"):
    reproduce.add_test_splits(unit, ['test_7'], results, work)
  gone = grid.Unit('table2', 'copy', 'mono', 0)
  write(results, record('table2', 'copy', 'mono', 0, {'test_15': 100.0}))
  assert reproduce.add_test_splits(gone, ['test_iid'], results, work) is None


def test_a_unit_whose_workdir_is_gone_is_retrained_to_add_a_split(tmp_path):
  """--retrain_gone: the unit trains again from scratch; the committed figures stay, the
  new split is added, and `reproduced` says whether the rerun scored what was committed."""
  import shutil  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  base = default.get_config()
  base.update(max_epochs=1, train_size=64, eval_size=16, test_splits='test_15',
              progress=False, perfect_dev_patience=3)
  unit = grid.Unit('table2', 'copy', 'onestep', 0)
  results, work = tmp_path / 'results', tmp_path / 'runs'
  reproduce.run_unit(unit, base, results, work, reproduce.DataDirs())
  saved = json.loads(unit.path(results, '.json').read_text())
  shutil.rmtree(unit.path(work))
  assert reproduce.add_test_splits(unit, ['test_iid'], results, work) is None
  added = reproduce.retrain_and_add_splits(unit, ['test_iid', 'test_15'], base, results, work,
                                           reproduce.DataDirs())
  assert added == ['test_iid']
  now = json.loads(unit.path(results, '.json').read_text())
  assert now['test']['test_15'] == saved['test']['test_15']          # committed figures kept
  assert now['test']['test_iid']['n'] == 16
  note = now['added_test_splits']['test_iid']
  assert note['reproduced'] is True and 'retrained_test' not in note, note
  assert note['epochs'] == 1 and re.fullmatch(r'[0-9a-f]{40}', note['code']['commit'])
  assert note['versions']['host_cores'] == str(multiseed.host_cores()), note['versions']
  assert reproduce.retrain_and_add_splits(unit, ['test_iid'], base, results, work,
                                          reproduce.DataDirs()) == []
  # A committed figure the rerun does not reproduce (off by more than one example).
  shutil.rmtree(unit.path(work))
  tampered = dict(now, test={'test_15': dict(saved['test']['test_15'])})
  tampered['test']['test_15']['accuracy'] = (saved['test']['test_15']['accuracy'] + 50) % 100
  del tampered['added_test_splits']
  unit.path(results, '.json').write_text(json.dumps(tampered))
  reproduce.retrain_and_add_splits(unit, ['test_iid'], base, results, work, reproduce.DataDirs())
  note = json.loads(unit.path(results, '.json').read_text())['added_test_splits']['test_iid']
  assert note['reproduced'] is False
  assert note['retrained_test']['test_15'] == saved['test']['test_15']


def test_a_unit_another_worker_is_retraining_is_skipped_by_add_splits_and_range(tmp_path,
                                                                               capsys):
  """Two workers on one queue of reruns: a unit whose workdir the other holds is skipped
  with one line, and the queue goes on to the next unit (it used to end the command)."""
  import shutil  # pylint: disable=g-import-not-at-top
  from monoloc_jax import rundir  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  base = default.get_config()
  base.update(max_epochs=1, train_size=64, eval_size=16, test_splits='test_15',
              progress=False, perfect_dev_patience=3)
  units = [grid.Unit('table2', 'copy', 'onestep', 0), grid.Unit('table2', 'copy', 'mono', 0)]
  results, work = tmp_path / 'results', tmp_path / 'runs'
  for u in units:
    reproduce.run_unit(u, base, results, work, reproduce.DataDirs())
  shutil.rmtree(units[0].path(work))
  units[0].path(work).mkdir(parents=True)
  with rundir.lock(units[0].path(work)):
    reproduce.add_splits_to_finished(units, ['test_iid'], base, results, work,
                                     reproduce.DataDirs(), retrain_gone=True)
    reproduce.range_evaluate_runs(units, base, results, work, reproduce.DataDirs(),
                                  lengths='1:6', samples=4)
  out = capsys.readouterr().out
  assert '[1/2] table2/copy/onestep/seed0: in use by another worker; skipped' in out, out
  assert '[2/2] table2/copy/mono/seed0: added test_iid' in out, out
  # (Range evaluation visits the run whose workdir is here first: `range_cost_s`.)
  assert '[1/2] table2/copy/mono: wrote ' in out, out
  assert '[2/2] table2/copy/onestep: in use by another worker; skipped' in out, out
  assert 'test_iid' not in json.loads(units[0].path(results, '.json').read_text())['test']
  assert not reproduce.range_path(results, units[0]).exists()
  assert reproduce.range_path(results, units[1]).exists()


def test_range_evaluation_visits_the_cheapest_retrain_first(tmp_path, capsys):
  """A run whose workdir is here costs nothing; of the rest, the shorter committed
  training goes first, so a session's end cuts the fewest retrains."""
  import shutil  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  base = default.get_config()
  base.update(max_epochs=1, train_size=64, eval_size=16, test_splits='test_15',
              progress=False, perfect_dev_patience=3)
  units = [grid.Unit('table2', 'copy', label, 0) for label in ('content', 'onestep', 'mono')]
  results, work = tmp_path / 'results', tmp_path / 'runs'
  for u, wall in zip(units, (50.0, 100.0, 5.0)):
    reproduce.run_unit(u, base, results, work, reproduce.DataDirs())
    rec = json.loads(u.path(results, '.json').read_text())
    rec['wall_time_s'] = wall
    u.path(results, '.json').write_text(json.dumps(rec))
  for u in units[1:]:
    shutil.rmtree(u.path(work))
  assert [reproduce.range_cost_s([u], results, work) for u in units] == [0.0, 100.0, 5.0]
  reproduce.range_evaluate_runs(units, base, results, work, reproduce.DataDirs(),
                                lengths='1:6', samples=4)
  lines = [l for l in capsys.readouterr().out.splitlines() if ': wrote ' in l]
  assert [l.split(':')[0] for l in lines] == ['[1/3] table2/copy/content',
                                              '[2/3] table2/copy/mono',
                                              '[3/3] table2/copy/onestep'], lines


def test_a_run_whose_range_evaluation_fails_is_one_line_and_the_queue_goes_on(
    tmp_path, capsys, monkeypatch):
  from monoloc_jax import errors  # pylint: disable=g-import-not-at-top
  units = [grid.Unit('table2', 'copy', label, 0) for label in ('content', 'onestep', 'mono')]
  done = []
  def fake(run_units, *args, **kwargs):
    if run_units[0].label == 'onestep':
      raise errors.MonolocError('task copy makes no examples at length 7')
    done.append(run_units[0].label)
    return None
  monkeypatch.setattr(reproduce, 'range_evaluate_run', fake)
  with pytest.raises(errors.MonolocError, match=r'^1 of 3 runs failed \(see above\): '
                     r'table2/copy/onestep$'):
    reproduce.range_evaluate_runs(units, None, tmp_path / 'r', tmp_path / 'w',
                                  reproduce.DataDirs())
  assert done == ['content', 'mono']
  assert ('[2/3] table2/copy/onestep: error: task copy makes no examples at length 7'
          in capsys.readouterr().out)


def test_best_seed_ranks_the_longest_compared_split_first():
  recs = {0: {'test': {'test_30': {'accuracy': 100.0}, 'test_100': {'accuracy': 10.0}}},
          1: {'test': {'test_30': {'accuracy': 0.0}, 'test_100': {'accuracy': 12.0}}},
          2: {'test': {'test_30': {'accuracy': 90.0}, 'test_100': {'accuracy': 12.0}}}}
  assert reproduce.best_seed('copy', recs) == 2          # 12 at 100 ties; 90 > 0 at 30
  recs[3] = dict(recs[2])
  assert reproduce.best_seed('copy', recs) == 2          # a full tie: the lower seed
  recs[3] = {'test': recs[2]['test'], 'best_dev_accuracy': 99.0}
  assert reproduce.best_seed('copy', recs) == 3          # then the best dev accuracy


def test_range_evaluating_a_run_retrains_its_best_seed_when_its_workdir_is_gone(tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  base = default.get_config()
  base.update(max_epochs=1, train_size=64, eval_size=16, test_splits='test_15',
              progress=False, perfect_dev_patience=3)
  units = [grid.Unit('table2', 'copy', 'onestep', k) for k in (0, 1)]
  results, work = tmp_path / 'results', tmp_path / 'runs'
  for u in units:
    reproduce.run_unit(u, base, results, work, reproduce.DataDirs())
  committed = json.loads(units[1].path(results, '.json').read_text())
  shutil.rmtree(units[1].path(work))
  seed0 = json.loads(units[0].path(results, '.json').read_text())
  seed0['test']['test_15']['accuracy'] = -1.0           # seed 1 is the best
  units[0].path(results, '.json').write_text(json.dumps(seed0))
  out = reproduce.range_evaluate_run(units, base, results, work, reproduce.DataDirs(),
                                     lengths='1:12', samples=4)
  assert out == reproduce.range_path(results, units[1])
  rec = json.loads(out.read_text())
  assert rec['seed'] == 1 and rec['lengths'] == list(range(1, 13))
  assert len(rec['accuracy']) == 12 and rec['compiled_programs'] <= 10
  assert rec['retrained']['reproduced'] is True, rec['retrained']
  assert rec['committed_test'] == committed['test']
  assert (units[1].path(work) / 'range.json').exists()
  # Done: not evaluated again; another range is.
  assert reproduce.range_evaluate_run(units, base, results, work, reproduce.DataDirs(),
                                      lengths='1:12', samples=4) is None
  assert reproduce.range_evaluate_run(units, base, results, work, reproduce.DataDirs(),
                                      lengths='1:6', samples=4) == out
  # The retrain's note stays in the workdir: an evaluation after it (or one cut off by
  # a session's end and run again) still records that the seed was trained again.
  assert json.loads(out.read_text())['retrained'] == rec['retrained']
  (units[1].path(work) / reproduce.RETRAIN_NOTE).unlink()      # a workdir trained here
  assert reproduce.range_evaluate_run(units, base, results, work, reproduce.DataDirs(),
                                      lengths='1:5', samples=4) == out
  assert json.loads(out.read_text())['retrained'] is None


def test_the_report_shows_horizons_and_what_the_fixed_lengths_hid(tmp_path, monkeypatch):
  from monoloc_jax import viz  # pylint: disable=g-import-not-at-top
  legends, plot_range = [], viz.plot_range
  def recording(curves, **kw):
    legends.append(sorted(curves))
    return plot_range(curves, **kw)
  monkeypatch.setattr(viz, 'plot_range', recording)
  root = tmp_path / 'results'
  for seed, acc30 in ((0, 0.0), (1, 20.0)):
    write(root, record('table2_authors', 'copy', 'onestep.authors', seed,
                       {'test_15': 100.0, 'test_30': acc30, 'test_100': 0.0}))
  write(root, record('table2_authors', 'copy', 'mono.authors', 0,
                     {'test_15': 100.0, 'test_30': 100.0, 'test_100': 99.0}))
  lengths = list(range(1, 41))
  def curve(h):
    return [100.0 if n <= (h or 0) else 0.0 for n in lengths]
  write(root, record('table2_authors', 'copy', 'content.authors', 0,
                     {'test_15': 10.0, 'test_30': 0.0, 'test_100': 0.0}))
  for label, seed, h, reproduced in (('onestep.authors', 1, 25, True),
                                     ('mono.authors', 0, 40, False),
                                     ('content.authors', 0, None, True)):
    rec = {'grid': 'table2_authors', 'task': 'copy', 'variant': label.split('.')[0],
           'label': label, 'seed': seed, 'lengths': lengths, 'accuracy': curve(h),
           'token_accuracy': curve(h), 'edit_distance': [0.0] * 40, 'horizon': h,
           'ood_score': 50.0, 'train_lengths': [5, 10], 'samples': [4] * 40,
           'per_seed': {'seeds': [seed], 'accuracy': [curve(h)]},
           'committed_test': json.loads(json.dumps(
               record('table2_authors', 'copy', label, seed,
                      {'test_15': 100.0, 'test_30': 20.0 if h == 25 else 100.0,
                       'test_100': 0.0 if h == 25 else 99.0})['test'])),
           'retrained': {'reproduced': reproduced}}
    path = root / 'range' / 'table2_authors' / 'copy' / f'{label}.json'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
  text = report.render(root)
  assert report.render(root, figures=False) == text          # --check draws nothing
  section = text[text.index('## Horizons'):]
  assert '3 of 3 runs range-evaluated.' in section, section[:800]
  assert '| onestep.authors | 25 / 50.0 |' in section
  assert '| mono.authors | 40 / 50.0† |' in section
  assert '| content.authors | none / 50.0 |' in section      # below 90% from the start
  assert ('- Between two fixed lengths, the longer one failed: Copy / onestep.authors '
          '(seed 1) holds to 25, 20.0 at 30.') in section
  assert 'mono.authors (seed 0' not in section                # solved at 30: nothing hidden
  assert (root / 'range' / 'figures' / 'table2_authors.copy.png').stat().st_size > 1000
  assert legends[0] == ['content.authors', 'mono.authors†', 'onestep.authors']  # as the table
  stale = root / 'range' / 'figures' / 'table2_authors.lookup.png'   # its runs are gone
  stale.write_bytes(b'png')
  report.render(root, figures=False)
  assert stale.exists()                                        # --check touches nothing
  report.render(root)
  assert not stale.exists()
  assert (root / 'range' / 'figures' / 'table2_authors.copy.png').exists()
  assert 'the Transformer grid' not in section                # no Transformer units here


def test_what_the_fixed_lengths_hid_by_kind():
  lengths = list(range(1, 201))
  def rec(h, fixed, retrained_test=None):
    curve = [100.0 if n <= (h or 0) else 40.0 for n in lengths]
    return {'horizon': h, 'lengths': lengths, 'accuracy': curve, 'train_lengths': [5, 10],
            'committed_test': {s: {'accuracy': a} for s, a in fixed.items()},
            'retrained': ({'reproduced': False, 'retrained_test':
                           {s: {'accuracy': a} for s, a in retrained_test.items()}}
                          if retrained_test else None)}
  hid = report.hidden_by_fixed_lengths
  f = lambda a15, a30, a100: {'test_15': a15, 'test_30': a30, 'test_100': a100}
  assert hid(rec(13, f(58.9, 0, 0))) == ('past_training', 'holds to 13, 58.9 at 15')
  assert hid(rec(25, f(100, 20, 0))) == ('between', 'holds to 25, 20.0 at 30')
  assert hid(rec(60, f(100, 100, 0))) == ('between', 'holds to 60, 0.0 at 100')
  assert hid(rec(20, f(100, 95, 99))) == ('dip', 'holds to 20 (40.0 at 21), 99.0 at 100')
  assert hid(rec(150, f(100, 100, 100))) == (
      'beyond', 'holds to 150 of 200 (40.0 at 151); 100.0 at 15, 100.0 at 30, 100.0 at 100')
  assert hid(rec(200, f(100, 100, 100))) is None           # the whole range
  assert hid(rec(15, f(99, 0, 0))) is None                 # at a fixed length
  assert hid(rec(10, f(0, 0, 0))) is None                  # at the training lengths' end
  assert hid(rec(30, f(0, 100, 0))) is None                # 15 failed: not an anchor
  assert hid(rec(None, f(0, 0, 0))) is None
  short = dict(rec(40, f(100, 100, 99)), lengths=lengths[:40], accuracy=[100.0] * 40)
  assert hid(short) is None                               # 100 is past the range's end
  short = dict(short, horizon=35)
  assert hid(short)[0] == 'beyond'
  # A retrained seed is compared with its own fixed figures, not the committed seed's.
  assert hid(rec(13, f(100, 0, 0), retrained_test=f(60, 0, 0))) == (
      'past_training', 'holds to 13, 60.0 at 15')
  assert hid(rec(13, f(60, 0, 0), retrained_test=f(100, 0, 0))) == (
      'dip', 'holds to 13 (40.0 at 14), 100.0 at 15')


def test_the_report_says_where_a_rerun_solves_other_lengths_than_its_committed_seed():
  fixed = lambda a15, a30, a100: {'test_15': {'accuracy': a15}, 'test_30': {'accuracy': a30},
                                  'test_100': {'accuracy': a100}}
  def rec(committed, rerun, reproduced):
    return {'seed': 1, 'committed_test': committed,
            'retrained': {'reproduced': reproduced, 'retrained_test': rerun}}
  changes = report.rerun_changes
  assert changes(rec(fixed(99.5, 98.75, 95.6), fixed(27.65, 0.3, 0.0), False)) == [
      '99.5 → 27.6 at 15', '98.8 → 0.3 at 30', '95.6 → 0.0 at 100']
  assert changes(rec(fixed(0.0, 0.0, 0.0), fixed(95.7, 10.0, 0.0), False)) == [
      '0.0 → 95.7 at 15']
  assert changes(rec(fixed(52.1, 0.8, 0.0), fixed(45.4, 0.3, 0.0), False)) == []  # unsolved both
  assert changes(rec(fixed(90.0, 0.8, 0.0), fixed(89.9, 0.8, 0.0), False)) == [
      '90.0 → 89.9 at 15']                                 # the horizon's 90% exactly
  assert changes({'seed': 0, 'committed_test': fixed(100, 100, 100), 'retrained': None}) == []
  have = {('copy', 'mono.transformer'): rec(fixed(99.5, 98.75, 95.6), fixed(27.65, 0.3, 0.0),
                                            False),
          ('recopy', 'mono.transformer'): rec(fixed(52.1, 0.8, 0.0), fixed(45.4, 0.3, 0.0),
                                              False),
          ('copy', 'onestep.transformer'): rec(fixed(100, 100, 100), fixed(100, 100, 100),
                                               True),
          ('copy', 'content.transformer'): {'seed': 0, 'retrained': None,
                                            'committed_test': fixed(10, 0, 0)}}
  text = '\n'.join(report._rerun_lines(have))
  assert text.startswith('Retrained: 3 of 4 (the others were scored from their own '
                         'checkpoints); 1 reproduced their committed figures within one '
                         'example, 2 did not (†).'), text
  assert ('(committed → rerun): Copy / mono.transformer (seed 1): 99.5 → 27.6 at 15, '
          '98.8 → 0.3 at 30, 95.6 → 0.0 at 100.') in text
  assert 'ReCopy' not in text
  del have[('copy', 'content.transformer')]
  assert report._rerun_lines(have)[0].startswith('Retrained: 3 of 3; 1 reproduced')
  assert report._rerun_lines({('copy', 'content.transformer'): {'retrained': None}}) == []


def test_table6_shows_test_iid_and_marks_a_retrain_that_did_not_reproduce(tmp_path):
  root = tmp_path / 'results'
  base = {'test_15': 90.0, 'test_30': 10.0, 'test_100': 0.0}
  write(root, record('table6', 'dedupe', 'mono', 0, {**base, 'test_iid': 99.0}))
  later = record('table6', 'dedupe', 'mono', 1, {**base, 'test_iid': 97.0})
  later['added_test_splits'] = {'test_iid': {'reproduced': False}}
  write(root, later)
  write(root, record('table6', 'dedupe', 'mono', 2, base))
  text = report.render(root)
  table = text[text.index('## Table 6'):text.index('## Table 7')]
  assert '| variant | seeds | IID [per seed] | len 15 | len 30 | len 100 |' in table
  assert '| mono | 3 | 98.0 [99.0, 97.0†, –] | 90.0 / 0.00 |' in table, table


def test_the_chomsky_grid_range_evaluates_each_unit(tmp_path, monkeypatch):
  """The `chomsky` grid: 15 tasks x 13 models, a position tag per scheme, and each unit's
  JSON carries its range evaluation (here a tiny budget and range instead of the grid's)."""
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  runs = grid.grid_runs()['chomsky']
  assert len(runs) == 15 * 13 and 'chomsky' in grid.BEYOND_PAPER_GRIDS
  assert not [u for u in grid.expected_units() if u.grid == 'chomsky']
  alibi = grid.Unit('chomsky', 'parity_check', 'content.transformer.chomsky.pos_alibi', 0)
  assert alibi.overrides['transformer.positions'] == 'alibi'
  assert alibi.overrides['backbone'] == 'transformer' and alibi.overrides['max_epochs'] == 10
  assert {u for _, u in runs if u.startswith('content.transformer')} == {
      'content.transformer.chomsky', *(f'content.transformer.chomsky.pos_{p}' for p in (
          'none', 'learned', 'relative', 'alibi', 'rope', 'randomized_sinusoidal',
          'randomized_rope'))}
  monkeypatch.setitem(grid.OPTION_TAGS, 'chomsky', {
      'max_epochs': 1, 'test_splits': 'test_iid', 'range_lengths': '41:43', 'range_samples': 2})
  base = default.get_config()
  base.update(train_size=64, eval_size=8, progress=False)
  unit = grid.Unit('chomsky', 'parity_check', 'onestep.chomsky', 0)
  rec = reproduce.run_unit(unit, base, tmp_path / 'results', tmp_path / 'runs',
                           reproduce.DataDirs())
  saved = json.loads(unit.path(tmp_path / 'results', '.json').read_text())
  assert saved == json.loads(json.dumps(rec))
  r = saved['range']
  assert r['lengths'] == [41, 43] and len(r['accuracy']) == 3 and r['samples'] == [2, 2, 2]
  assert r['ood_score'] == pytest.approx(sum(r['token_accuracy']) / 3)
  assert set(saved['test']) == {'test_iid'} and saved['protocol']['range_samples'] == 2


def test_the_report_shows_the_chomsky_grid_once_it_has_a_unit(fixture_results):
  assert 'Chomsky' not in report.render(fixture_results)
  for seed, score in ((0, 40.0), (1, 60.0), (2, 55.5)):
    rec = record('chomsky', 'parity_check', 'content.transformer.chomsky.pos_alibi', seed,
                 {'test_iid': 100.0, 'test_ood': 0.0})
    rec['range'] = {'ood_score': score, 'horizon': 40}
    write(fixture_results, rec)
  text = report.render(fixture_results)
  section = text[text.index('## Beyond the paper II'):].split('\n## ')[0]
  header = next(line for line in section.splitlines() if line.startswith('| task |'))
  row = next(line for line in section.splitlines() if line.startswith('| parity_check |'))
  column = header.split(' | ').index('TF content / alibi')
  assert row.split(' | ')[column] == '55.5 [3]', (header, row)
  assert row.split(' | ')[1] == 'regular'
  assert header.split(' | ')[1:4] == ['level', 'GRU OneStep', 'GRU Mono']
  assert '3 of 585 units of seeds 0-2 have results; 582 missing.' in section
  assert '- **chomsky** (582 missing): even_pairs/onestep.chomsky/seed0, ' in section


def test_fisher_exact_by_hand():
  # 3 of 3 against 0 of 3: the two extreme tables, each 1/20.
  assert report.fisher_exact(3, 3, 0, 3) == pytest.approx(0.1)
  # 5 of 5 against 1 of 5: C(6,5)C(4,0)/C(10,5) = 6/252 on each side.
  assert report.fisher_exact(5, 5, 1, 5) == pytest.approx(12 / 252)
  assert report.fisher_exact(1, 5, 5, 5) == pytest.approx(12 / 252)   # symmetric
  assert report.fisher_exact(2, 4, 2, 4) == pytest.approx(1.0)        # equal rates


def test_units_locked_or_finished_by_another_worker_are_skipped(tmp_path, capsys):
  """Two workers on one grid: a unit whose workdir another process holds, and a unit
  another worker finished after this one listed it, are skipped without failing."""
  from monoloc_jax import rundir  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  base = default.get_config()
  base.update(max_epochs=1, train_size=64, eval_size=16, test_splits='test_15', progress=False)
  results, work = tmp_path / 'results', tmp_path / 'runs'
  busy = grid.Unit('table2', 'copy', 'onestep', 0)
  finished = grid.Unit('table2', 'copy', 'mono', 0)
  busy.path(work).mkdir(parents=True)
  write(results, record('table2', 'copy', 'mono', 0, {'test_15': 100.0}))
  with rundir.lock(busy.path(work)):
    # The lock is per open file description, so this process's second open is refused
    # exactly as another worker's would be.
    durations, failed = reproduce.run_units_locally(
        [busy, finished], base, results, work, reproduce.DataDirs())
  assert (durations, failed) == ([], 0)
  out = capsys.readouterr().out
  assert '[1/2] table2/copy/onestep/seed0: in use by another worker; skipped' in out
  assert '[2/2] table2/copy/mono/seed0: finished by another worker; skipped' in out
  assert not busy.path(results, '.json').exists()


def test_seeds_of_a_run_group_into_programs_of_consecutive_seeds(tmp_path):
  results, work = tmp_path / 'results', tmp_path / 'runs'
  todo = grid.units(['table2'], [0, 1, 2, 4])
  todo = grid.select_runs(todo, 'copy/onestep,copy/mono')
  partial = grid.Unit('table2', 'copy', 'mono', 1)
  (partial.path(work) / 'checkpoints').mkdir(parents=True)    # resumes on its own
  groups = reproduce.group_units(todo, 2, results, work)
  assert [[(u.label, u.seed) for u in g] for g in groups] == [
      [('onestep', 0), ('onestep', 1)], [('mono', 0)], [('mono', 1)], [('onestep', 2)],
      [('mono', 2)], [('onestep', 4)], [('mono', 4)]]
  assert reproduce.group_path(groups[0], work) == work / 'table2/copy/onestep/seeds0-1'
  assert reproduce.group_path(groups[1], work) == work / 'table2/copy/mono/seed0'
  assert [len(g) for g in reproduce.group_units(todo, 1, results, work)] == [1] * len(todo)


def test_seeds_per_program_on_ray_is_one_line():
  import subprocess  # pylint: disable=g-import-not-at-top
  proc = subprocess.run([sys.executable, str(EXPERIMENTS / 'reproduce.py'), '--executor=ray',
                         '--seeds_per_program=5', '--dry_run'],
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr
  assert proc.stderr.strip() == ('error: --seeds_per_program needs --executor=local (a Ray task '
                                 'trains one unit); valid executors: local')


def test_a_seed_of_a_shared_program_reports_its_own_stop():
  results = {'epochs': 4, 'dev': {'best_epoch_per_seed': [2, 4], 'best_accuracy_per_seed': [90.0, 80.0]},
             'test': {'test_15': {'n': 8, 'accuracy': 50.0,
                                  'per_seed': [{'accuracy': 100.0}, {'accuracy': 0.0}]}}}
  history = [{'epoch': e, 'stopped': [e == 3, False]} for e in (1, 2, 3, 4)]
  first, second = (reproduce.seed_results(results, history, i) for i in (0, 1))
  assert first['epochs'] == 3 and second['epochs'] == 4
  assert first['dev'] == {'best_epoch_per_seed': [2], 'best_accuracy_per_seed': [90.0]}
  assert second['test']['test_15']['per_seed'] == [{'accuracy': 0.0}]
  assert second['test']['test_15']['n'] == 8


def test_seeds_trained_in_one_program_write_their_single_seed_units(tmp_path):
  """Two seeds in one program give each seed the unit JSON its own run gives."""
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  base = default.get_config()
  base.update(max_epochs=2, train_size=96, eval_size=16, test_splits='test_15',
              progress=False)
  units = [grid.Unit('table2', 'copy', 'onestep', s) for s in (0, 1)]
  alone, shared = tmp_path / 'alone', tmp_path / 'shared'
  for root, k in ((alone, 1), (shared, 2)):
    assert reproduce.run_units_locally(units, base, root / 'results', root / 'runs',
                                       reproduce.DataDirs(), seeds_per_program=k)[1] == 0
  assert (shared / 'runs/table2/copy/onestep/seeds0-1/checkpoints').exists()
  assert not (shared / 'runs/table2/copy/onestep/seed0').exists()
  for u in units:
    one = json.loads(u.path(alone / 'results', '.json').read_text())
    two = json.loads(u.path(shared / 'results', '.json').read_text())
    assert two.pop('program')['seeds'] == [0, 1] and 'program' not in one
    for key in ('test', 'epochs', 'best_dev_epoch', 'best_dev_accuracy', 'seed', 'protocol'):
      assert two[key] == one[key], (u.seed, key, one[key], two[key])
  seed0 = json.loads(units[0].path(alone / 'results', '.json').read_text())
  seed1 = json.loads(units[1].path(alone / 'results', '.json').read_text())
  assert seed0['best_dev_accuracy'] != seed1['best_dev_accuracy'] or seed0['test'] != seed1['test']


def test_data_dirs_for_tasks():
  dirs = reproduce.DataDirs(scan='/d/scan', lookup='/d/lookup', cfq='')
  assert dirs.for_task('scan_length') == ('/d/scan', None)
  assert dirs.for_task('lookup') == ('/d/lookup/forward', None)
  assert dirs.for_task('reverse_lookup') == ('/d/lookup/reverse', None)
  assert dirs.for_task('cfq_length')[1] == 'no CFQ data (--cfq_data_dir)'
  assert reproduce.DataDirs().for_task('lookup') == (None, None)
  assert reproduce.data_source('lookup', None) == 'generated (data_seed 123)'
  assert reproduce.data_source('scan_length', '/x/shared/data/scan/length_split') == \
      'files: data/scan/length_split'


def test_committed_report_is_current():
  """REPRODUCTION.md is exactly what `python experiments/report.py` makes of results/."""
  repo = EXPERIMENTS.parent
  assert (repo / 'REPRODUCTION.md').read_text(encoding='utf-8') == \
      report.render(repo / 'results'), 'REPRODUCTION.md is stale: run python experiments/report.py'


def test_authors_code_collect_keeps_seeds_from_earlier_machines(tmp_path):
  """`run.py --collect` merges: a unit finished on an earlier machine (its workdir gone)
  stays in the JSON; one finished here is added or replaces the same seed; a run with
  another budget is not mixed in, and a queue rerun on a new machine skips the seeds
  collected under its budget. (Before: the file was rewritten from this machine's
  units only, so seeds 0 and 1 of Copy / -Sigmoid would have been lost.)"""
  import subprocess  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'onestep_minus_sigmoid.json'
  budget = "100 epochs, patience 50 (the paper's; their config unchanged)"
  path.write_text(json.dumps({'runs': [
      {'budget': budget, 'seeds': [{'seed': 0, 'test': {'long15': 0.0}},
                                   {'seed': 1, 'test': {'long15': 100.0}}]},
      {'budget': '20 epochs, patience 5', 'seeds': [{'seed': 2, 'test': {'long15': 7.0}}]}]}))
  script = (
      'import json, pathlib, sys\n'
      f'sys.path.insert(0, {str(EXPERIMENTS / "authors_code")!r})\n'
      'import run\n'
      f'seeds = run.merged_seeds(pathlib.Path({str(path)!r}), {budget!r}, '
      "[{'seed': 2, 'test': {'long15': 50.0}}, {'seed': 1, 'test': {'long15': 99.0}}])\n"
      'print(json.dumps(seeds))\n'
      "print(json.dumps(run.merged_seeds(pathlib.Path('/nonexistent.json'), 'b', "
      "[{'seed': 3, 'test': {}}])))\n"
      f'print(json.dumps([run.collected_seeds(pathlib.Path({str(path)!r}), b) for b in '
      f"({budget!r}, '20 epochs, patience 5', 'x')] + "
      "[run.collected_seeds(pathlib.Path('/nonexistent.json'), 'x')]))\n")
  proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  merged, fresh, collected = (json.loads(line) for line in proc.stdout.strip().splitlines())
  assert merged == [{'seed': 0, 'test': {'long15': 0.0}}, {'seed': 1, 'test': {'long15': 99.0}},
                    {'seed': 2, 'test': {'long15': 50.0}}]
  assert fresh == [{'seed': 3, 'test': {}}]
  # What a rerun of the queue skips on a new machine: seeds collected under its budget only.
  assert collected == [[0, 1], [2], [], []]


def test_authors_code_third_seed_only_where_the_first_two_split(tmp_path):
  """`run.py --if_split`: seed 2 of a run trains only if its collected seeds 0 and 1
  disagree on the mark at a compared length (Copy: 30 and 100)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  budget = "100 epochs, patience 50 (the paper's; their config unchanged)"
  def write_run(variant, acc30):
    path = tmp_path / 'authors_code' / 'copy' / f'{variant}.json'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({'runs': [{'budget': budget, 'seeds': [
        {'seed': 0, 'test': {'test_15': 100.0, 'test_30': 100.0, 'test_100': 0.0}},
        {'seed': 1, 'test': {'test_15': 100.0, 'test_30': acc30, 'test_100': 0.0}}]}]}))
  write_run('onestep_minus_step3', 100.0)          # agree
  write_run('onestep_minus_step2', 20.0)           # split at 30
  script = (
      'import sys\n'
      f'sys.path.insert(0, {str(EXPERIMENTS / "authors_code")!r})\n'
      'import run\n'
      f"run.flags.FLAGS(['run', '--results_dir={tmp_path}'])\n"
      "print([run.first_two_split('copy', v) for v in "
      "('onestep_minus_step3', 'onestep_minus_step2', 'onestep_minus_sigmoid')])\n")
  proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.strip() == '[False, True, None]'
  # The queue's command: an agreeing run trains nothing (no refcode is needed to say so).
  proc = subprocess.run(
      [sys.executable, str(EXPERIMENTS / 'authors_code' / 'run.py'), f'--results_dir={tmp_path}',
       '--refcode=/nonexistent', f'--workdir={tmp_path / "runs"}',
       '--runs=copy/onestep_minus_step3,copy/onestep_minus_sigmoid', '--seeds=2', '--if_split'],
      capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert ('copy/onestep_minus_step3: seeds 0 and 1 agree on every compared mark; seeds 2 not '
          'run (--if_split)') in proc.stdout
  assert 'copy/onestep_minus_sigmoid: seeds 0 and 1 not both collected yet' in proc.stdout
  assert not (tmp_path / 'runs').exists()


def test_authors_code_epoch_curves_follow_their_log_and_its_resumes():
  """`run.py --collect` records the authors' code's training loss and dev accuracy per
  epoch, read from their `<seed>_logs.txt`: an epoch that a resume logs again counts once,
  with its last figures, and the training summary between the two lines is skipped."""
  import subprocess  # pylint: disable=g-import-not-at-top
  def summary(k, loss, acc):
    return (f'\n\nEpoch {k} Summary:\nTraining loss: {loss}; ed: -0.0; accuracy: 50.0; \n\n'
            f'Validation (normal) loss: 0.02; ed: -0.0; accuracy: {acc}; \n\n')
  log = (summary(0, 0.5, 93.85) + summary(1, 0.25, 98.45) + '\nLoading checkpoint...\n' +
         summary(1, 0.125, 97.5) + summary(2, 0.0625, 100.0))
  script = (
      'import json, sys\n'
      f'sys.path.insert(0, {str(EXPERIMENTS / "authors_code")!r})\n'
      'import run\n'
      f'print(json.dumps(run.epoch_curves({log!r})))\n'
      "print(json.dumps(run.epoch_curves('no summary here')))\n")
  proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  curves, empty = (json.loads(line) for line in proc.stdout.strip().splitlines())
  assert curves == {'train_loss': [0.5, 0.125, 0.0625], 'dev_accuracy': [93.85, 97.5, 100.0]}
  assert empty == {'train_loss': [], 'dev_accuracy': []}


def test_code_commit_can_be_given_by_whoever_copied_the_tree(tmp_path, monkeypatch):
  """A checkout copied without .git, or with a stale one (an accelerator machine's copy),
  records the commit it was given, dirty unless told otherwise; without one given it
  asks git, and outside a repository it says 'unknown'."""
  monkeypatch.delenv('MONOLOC_CODE_COMMIT', raising=False)
  monkeypatch.delenv('MONOLOC_CODE_DIRTY', raising=False)
  monkeypatch.setattr(reproduce, 'REPO', tmp_path)
  assert reproduce.code_commit() == {'commit': 'unknown', 'dirty': False}
  monkeypatch.setattr(reproduce, 'REPO', EXPERIMENTS.parent)
  head = reproduce.code_commit()['commit']
  assert re.fullmatch(r'[0-9a-f]{40}', head)
  # A short name is expanded to the full hash; one git does not know is a one-line error.
  monkeypatch.setenv('MONOLOC_CODE_COMMIT', head[:7])
  assert reproduce.code_commit() == {'commit': head, 'dirty': True}
  monkeypatch.setenv('MONOLOC_CODE_DIRTY', '0')
  assert reproduce.code_commit() == {'commit': head, 'dirty': False}
  monkeypatch.setenv('MONOLOC_CODE_COMMIT', 'notacommit')
  with pytest.raises(errors.MonolocError, match='give the full 40-hex hash'):
    reproduce.code_commit()
  monkeypatch.setattr(reproduce, 'REPO', tmp_path)       # no git: a full hash is kept as given
  monkeypatch.setenv('MONOLOC_CODE_COMMIT', head)
  assert reproduce.code_commit() == {'commit': head, 'dirty': False}


def test_a_resumed_unit_records_the_wall_time_of_every_process(tmp_path, monkeypatch):
  """A unit's `wall_time_s` (and a program's) is results.json's total over every process
  that trained the run, not only the last one's: a run resumed near its end took longer
  than its last process."""
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  def fake_train(config, workdir):
    n = config.seeds
    return {'wall_time_s': 1000.0, 'epochs': 7,
            'dev': {'best_accuracy_per_seed': [90.0] * n, 'best_epoch_per_seed': [5] * n},
            'test': {'test_15': {'n': 8, 'per_seed': [{'accuracy': 100.0, 'n': 8}] * n}}}
  monkeypatch.setattr(train, 'train_and_evaluate', fake_train)
  base = default.get_config()
  one = reproduce.run_unit(grid.Unit('table2', 'copy', 'onestep', 0), base, tmp_path / 'r',
                           tmp_path / 'w', reproduce.DataDirs())
  assert one['wall_time_s'] == 1000.0
  pair = reproduce.run_group([grid.Unit('table2', 'copy', 'mono', s) for s in (0, 1)], base,
                             tmp_path / 'r', tmp_path / 'w', reproduce.DataDirs())
  assert [r['wall_time_s'] for r in pair] == [500.0, 500.0]
  assert pair[0]['program'] == {'seeds': [0, 1], 'wall_time_s': 1000.0}
  assert reproduce.run_wall_s({}, 12.5) == 12.5     # results from before the field


def test_procedure_tags_are_recipe_views_and_committed_units_keep_their_overrides():
  from monoloc_jax import recipes  # pylint: disable=g-import-not-at-top
  assert grid.OPTION_TAGS['tf_dev'] == recipes.subset('authors_code', 'dev_metric')
  assert grid.OPTION_TAGS['random_batches'] == recipes.subset('authors_code', 'bucket_batches')
  assert grid.OPTION_TAGS['paper_epochs'] == dict(recipes.PAPER_EPOCHS)
  assert grid.OPTION_TAGS['authors'] == dict(recipes.AUTHORS_CODE)
  assert grid.OPTION_TAGS['transformer'] == dict(recipes.TRANSFORMER_GRID)
  # Every committed unit's stored overrides are what its label asks for today (mix_mode
  # under its old name 'reference_code'), so the report finds them and nothing reruns.
  checked = 0
  for path in sorted((EXPERIMENTS.parent / 'results').glob('*/*/*/seed*.json')):
    unit_json = json.loads(path.read_text(encoding='utf-8'))
    if 'overrides' not in unit_json:
      continue
    unit = grid.Unit(unit_json['grid'], unit_json['task'], unit_json['label'], unit_json['seed'])
    assert unit.path(EXPERIMENTS.parent / 'results', '.json') == path
    now = config_paths.flatten(config_paths.upgrade(unit.overrides))
    stored = config_paths.flatten(config_paths.upgrade(unit_json['overrides']))  # old flat names
    for field, value in stored.items():
      if (field, value) == ('mix_mode', 'reference_code'):
        value = 'authors_code'
      assert now.get(field) == value, (path, field, value, now.get(field))
    checked += 1
  assert checked > 500
