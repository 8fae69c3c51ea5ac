"""`monoloc-results` (issue 12): tabulates any set of runs, on synthetic result files."""

import json
import pathlib
import subprocess
import sys

import pytest

from monoloc_jax import errors
from monoloc_jax import results_table


def _write_run(workdir: pathlib.Path, task, variant, accuracies, dev, epochs=3):
  workdir.mkdir(parents=True)
  test = {split: {'accuracy': sorted(accs)[len(accs) // 2], 'n': 100,
                  'per_seed': [{'accuracy': a} for a in accs]}
          for split, accs in accuracies.items()}
  (workdir / 'config.json').write_text('{}')
  (workdir / 'results.json').write_text(json.dumps({
      'task': task, 'variant': variant, 'seeds': list(range(len(dev))), 'epochs': epochs,
      'dev': {'best_accuracy_per_seed': dev}, 'test': test}))


@pytest.fixture
def runs(tmp_path):
  _write_run(tmp_path / 'runs' / 'a', 'reverse_copy', 'onestep',
             {'test_100': [0.0, 100.0, 100.0], 'test_15': [0.0, 100.0, 99.0]}, [12.0, 100.0, 99.5])
  _write_run(tmp_path / 'runs' / 'b', 'reverse_copy', 'relative', {'test_15': [40.0]}, [33.0])
  _write_run(tmp_path / 'runs' / 'c', 'copy', 'mono', {'test_30': [97.0]}, [99.0])
  (tmp_path / 'runs' / 'unfinished').mkdir()
  (tmp_path / 'runs' / 'unfinished' / 'config.json').write_text('{}')
  unit = tmp_path / 'results' / 'table2' / 'copy' / 'relative' / 'seed1.json'
  unit.parent.mkdir(parents=True)
  unit.write_text(json.dumps({'task': 'copy', 'variant': 'relative', 'seed': 1, 'epochs': 9,
                              'best_dev_accuracy': 80.0,
                              'test': {'test_30': {'accuracy': 5.0, 'n': 2000}}}))
  return tmp_path


def test_tables_group_by_task_order_splits_by_length_and_name_the_best_dev_seed(runs):
  (runs / 'runs' / 'train.log').write_text('epoch 1 ...')   # caught by runs/*
  rows, notes = results_table.collect(sorted(str(p) for p in (runs / 'runs').iterdir())
                                      + [str(runs / 'results')])
  assert notes == [f"{runs / 'runs' / 'train.log'}: not a result file",
                   f"{runs / 'runs' / 'unfinished'}: training has not finished (no results.json)"]
  (t1, h1, b1), (t2, h2, b2) = results_table.tables(rows, per_seed=True)
  assert t1.startswith('reverse_copy: sequence accuracy (%)')
  assert h1[-2:] == ['test_15', 'test_100']                       # by input length
  assert b1[0][1:] == ['OneStepAttn', '0,1,2', '3', '100', '1 (100.0)', '99.0 [0.0 100.0 99.0]',
                       '100.0 [0.0 100.0 100.0]']
  assert b1[1][1:] == ['Relative', '0', '3', '100', '0 (33.0)', '40.0', '']
  assert [r[1] for r in b2] == ['MonoAttn', 'Relative']            # a run dir and a unit file
  assert b2[1][2:] == ['1', '9', '2000', '1 (80.0)', '5.0']
  assert t1.endswith('; n = samples per split')
  markdown = results_table.render(rows, 'markdown')
  assert ('| run | model | seeds | epochs | n | best-dev seed (dev %) | test_15 | test_100 |'
          in markdown)
  csv = results_table.render(rows, 'csv').splitlines()
  assert csv[0].startswith('table,run,model') and len(csv) == 1 + 4


def test_errors_are_one_line_and_name_the_choices(runs):
  with pytest.raises(errors.MonolocError, match='does not exist'):
    results_table.collect([str(runs / 'nope')])
  with pytest.raises(errors.MonolocError, match='valid metrics: accuracy, edit_distance'):
    results_table.tables([], metric='acc')
  proc = subprocess.run([sys.executable, '-m', 'monoloc_jax.results_table',
                         str(runs / 'runs' / 'unfinished')], capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      f"error: no finished runs found: {runs / 'runs' / 'unfinished'}: training has not "
      'finished (no results.json)']
  proc = subprocess.run([sys.executable, '-m', 'monoloc_jax.results_table', '--format=xml', 'x'],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip() == ('error: flag --format=xml: value should be one of '
                                 '<text|markdown|csv>')


@pytest.mark.parametrize('script, flag', [('monoloc-results', '--format'),
                                          ('monoloc-benchmark', '--batch_size'),
                                          ('monoloc-results', '--[no]per_seed')])
def test_console_script_help_lists_its_own_flags(script, flag):
  import shutil  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  path = shutil.which(script) or str(pathlib.Path(sys.executable).parent / script)
  out = subprocess.run([path, '--help'], capture_output=True, text=True, timeout=120,
                       check=False)
  assert out.returncode in (0, 1), out.stderr       # absl's --help exits with 1
  assert f'  {flag}' in out.stdout, out.stdout       # before the fix: only "Try --helpfull"
