"""`--mode=evaluate --config.eval_size=N` ("Library users II", item 7).

Before: a re-score on fewer samples than results.json held replaced the full
results silently, and no table or plot showed how many samples a number rests
on. Now a smaller evaluation is written beside the full one
(results.json["partial_test"]) and says so; the sample count n is in the printed
table, in `monoloc-results` and in the accuracy-vs-length legend.
"""

import json
import os
import pathlib
import subprocess
import sys

import jax
import pytest

from monoloc_jax import inference
from monoloc_jax import results_table
from monoloc_jax import viz

@pytest.fixture
def run(tiny_run) -> pathlib.Path:
  """conftest's one-epoch run, shared by the tests that only evaluate or decode it."""
  return tiny_run


def _evaluate(workdir, *flags) -> subprocess.CompletedProcess:
  env = dict(os.environ, MONOLOC_XLA_CACHE=jax.config.jax_compilation_cache_dir or '')
  return subprocess.run([sys.executable, '-m', 'monoloc_jax.main', f'--workdir={workdir}',
                         '--mode=evaluate', *flags], capture_output=True, text=True,
                        timeout=600, env=env)


def test_a_smaller_evaluation_is_written_beside_the_full_one_and_says_so(run):
  full = json.loads((run / 'results.json').read_text())['test']['test_15']
  assert full['n'] == 32
  proc = _evaluate(run, '--config.eval_size=10')
  assert proc.returncode == 0, proc.stderr
  results = json.loads((run / 'results.json').read_text())
  assert results['test']['test_15'] == full                       # the full result is kept
  assert results['partial_test']['test_15']['n'] == 10
  assert results['last_evaluation']['partial'] == ['test_15']
  assert results['last_evaluation']['replaced'] == []
  out = proc.stdout
  assert 'n' in out.splitlines()[1].split()                        # the table has an n column
  assert out.splitlines()[2].split()[1] == '10'
  assert ('test_15: scored on 10 samples; results.json keeps the 32-sample result under '
          '"test" and writes this one under "partial_test"') in out
  # As many samples as the full result (or more): it replaces it, and says so.
  proc = _evaluate(run, '--config.eval_size=32')
  assert proc.returncode == 0, proc.stderr
  results = json.loads((run / 'results.json').read_text())
  assert results['test']['test_15']['n'] == 32
  assert results['last_evaluation']['replaced'] == ['test_15']
  assert results['partial_test']['test_15']['n'] == 10             # the earlier partial stays


def test_monoloc_results_and_the_plot_show_the_sample_count(run, tmp_path):
  results = json.loads((run / 'results.json').read_text())
  if 'partial_test' not in results:                  # independent of the test above
    results['partial_test'] = {'test_15': dict(results['test']['test_15'], n=10)}
    (run / 'results.json').write_text(json.dumps(results))
  rows, _ = results_table.collect([str(run)])
  (title, header, body), = results_table.tables(rows)
  assert header[:5] == ['run', 'model', 'seeds', 'epochs', 'n']
  assert [r[0] for r in body] == [str(run), f'{run} (partial evaluation)']
  assert [r[4] for r in body] == ['32', '10']
  proc = subprocess.run([sys.executable, '-m', 'monoloc_jax.results_table', str(run)],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert 'n = samples per split' in proc.stdout
  # Splits of one run scored on different sample counts: each cell says its own n.
  mixed = dict(results, test={**results['test'], 'test_30': dict(results['test']['test_15'],
                                                                 n=2000)})
  row = results_table._row('mixed', mixed)
  (_, header, body), = results_table.tables([row])
  assert body[0][4] == '32–2000'
  assert body[0][header.index('test_15')].endswith('(n=32)')
  assert '(n=' not in body[0][header.index('test_30')]
  fig = viz.plot_accuracy_vs_length({'OneStep': results})
  labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
  assert 'OneStep (n = 32 per length)' in labels
  fig = viz.plot_accuracy_vs_length({'OneStep': mixed})
  labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
  assert 'OneStep (n = 32–2000 per length)' in labels
