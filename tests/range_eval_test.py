"""Range evaluation: the per-length metrics by hand, the range rule, the bucket plan,
shared programs scoring as lengths alone, and --mode=range end to end.

Ids in the metric cases: 0 `<pad>`, 2 `<eos>`, 4+ task tokens.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import metrics
from monoloc_jax import precision
from monoloc_jax import range_eval
from monoloc_jax import results_table
from monoloc_jax import viz

EOS = 2


def rows(*seqs, width=0):
  width = max([width] + [len(s) for s in seqs])
  out = np.zeros((len(seqs), width), np.int32)
  for i, s in enumerate(seqs):
    out[i, :len(s)] = s
  return out


# ---------------------------------------------------------------------------
# Per-token accuracy by hand.
# ---------------------------------------------------------------------------
def test_token_accuracy_by_hand():
  gold = rows([4, 5, 6, 7, EOS], [4, 5, 6, 7, EOS], [4, 5, 6, 7, EOS], [4, 5, 6, 7, EOS],
              [4, 5, 6, 7, EOS], [4, 5, 6, 7, EOS])
  pred = rows([4, 5, 6, 7, EOS],          # exact: 4/4
              [4, 5, EOS],                # shorter: the 2 missing positions wrong: 2/4
              [4, 5, 6, 7, 8, 9, EOS],    # longer: extra tokens do not count: 4/4
              [5, 6, 7, EOS],             # shifted (one short): no position matches: 0/4
              [4, 9, 6, 9, 9],            # no <eos>, width 5: positions 0 and 2: 2/4
              [EOS, 5, 6, 7])             # empty prediction (after it nothing counts): 0/4
  np.testing.assert_allclose(metrics.token_accuracy(pred, gold, EOS),
                             [1.0, 0.5, 1.0, 0.0, 0.5, 0.0])
  # Sequence accuracy differs where lengths differ: only the exact row is right.
  np.testing.assert_array_equal(metrics.sequence_accuracy(pred, gold, EOS),
                                [True, False, False, False, False, False])


def test_token_accuracy_wrong_length_and_width_and_empty_gold():
  # The prediction array narrower than the gold one (a short decode bound): missing = wrong.
  np.testing.assert_allclose(metrics.token_accuracy(rows([4, 5]), rows([4, 5, 6, 7, 8, EOS]),
                                                    EOS), [0.4])
  # A 3-token gold, the prediction right but one token too long: 3/3 (sequence: wrong).
  np.testing.assert_allclose(metrics.token_accuracy(rows([4, 5, 6, 4, EOS]),
                                                    rows([4, 5, 6, EOS]), EOS), [1.0])
  # An empty gold output scores 1 iff the prediction is empty too.
  np.testing.assert_allclose(metrics.token_accuracy(rows([EOS], [4, EOS]), rows([EOS], [EOS]),
                                                    EOS), [1.0, 0.0])


def test_horizon_and_ood_score_by_hand():
  lengths = [1, 2, 3, 4, 5, 6, 7]
  acc = [10.0, 95.0, 100.0, 90.0, 89.9, 100.0, 100.0]
  assert range_eval.horizon(lengths, acc) is None            # length 1 falls short
  assert range_eval.horizon(lengths, acc, shortest_train=2) == 4   # 5 breaks the run
  assert range_eval.horizon(lengths, [100.0] * 7, 2) == 7
  # A length whose every input is a training input is not required (Lookup's 3).
  assert range_eval.horizon(lengths, acc, seen=[1]) == 4
  assert range_eval.horizon(lengths, acc, 2, seen=[5]) == 7
  assert range_eval.ood_score(lengths, [0, 0, 0, 0, 50.0, 70.0, 90.0], 4) == pytest.approx(70.0)
  assert range_eval.ood_score(lengths, acc, 7) is None


# ---------------------------------------------------------------------------
# The range rule.
# ---------------------------------------------------------------------------
def test_range_parses_and_defaults_to_ten_times_training():
  assert range_eval.parse_range('3:6', 'copy') == [3, 4, 5, 6]
  assert range_eval.parse_range('7:7', 'copy') == [7]
  assert range_eval.parse_range('', 'copy') == list(range(1, 101))     # train 5-10 -> 1:100
  lo, hi = range_eval.default_range('lookup')                          # train 3-6 tokens
  assert (lo, hi) == (3, 60)


@pytest.mark.parametrize('text', ['0:10', '9:3', 'abc', '1:', ':5', '1:2:3', '-1:4', '1.5:3'])
def test_a_bad_range_is_one_line(text):
  with pytest.raises(errors.MonolocError) as e:
    range_eval.parse_range(text, 'copy')
  message = str(e.value)
  assert '\n' not in message
  assert message == (f"bad value for config.range_lengths: {text!r}; it must be 'lo:hi' with "
                     "1 <= lo <= hi (task copy: lengths >= 1 items)")


def test_a_range_below_the_tasks_shortest_length_and_a_task_without_one():
  with pytest.raises(errors.MonolocError, match=r"1 <= lo|3 <= lo <= hi \(task lookup"):
    range_eval.parse_range('1:5', 'lookup')
  with pytest.raises(errors.MonolocError, match='has no length axis') as e:
    range_eval.parse_range('1:5', 'scan_length')
  assert '\n' not in str(e.value)
  with pytest.raises(errors.MonolocError, match='range_samples'):
    range_eval.check_samples(0)


def test_the_draw_excludes_training_and_falls_back_where_training_holds_all():
  """Lookup's 64 sources of length 3 (a bit string, one function, '.') are all in its
  training split: that length is drawn from all of them and named; the other lengths
  hold no training source."""
  from monoloc_jax import tasks  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  config = default.get_config()
  config.task = 'lookup'
  train = tasks.load_splits('lookup', ('train',), seed=config.data_seed)['train']
  sources = {tuple(e.source) for e in train}
  drawn, seen = range_eval.draw(config, [3, 4, 6, 9], 50, train)
  assert seen == [3]
  assert drawn[3] and all(tuple(e.source) in sources for e in drawn[3])
  for n in (4, 6, 9):
    assert drawn[n] and not any(tuple(e.source) in sources for e in drawn[n]), n
  assert range_eval.draw(config, [3], 50)[1] == []          # nothing excluded: nothing to name


# ---------------------------------------------------------------------------
# The bucket plan.
# ---------------------------------------------------------------------------
def test_lengths_1_to_500_need_at_most_ten_programs():
  lengths = range(1, 501)
  plan = range_eval.plan_buckets({n: 200 for n in lengths}, {n: n for n in lengths},
                                 {n: n + 1 for n in lengths})
  assert 1 < len(plan) <= range_eval.MAX_PROGRAMS
  assert sorted(n for b in plan for n in b.lengths) == list(lengths)
  for b in plan:                              # each bucket fits its lengths
    assert b.steps == max(b.lengths) + 1 and b.src_width == max(b.lengths)
  # Without a compile cost every allowed program is used; with a huge one, a single one.
  free = range_eval.plan_buckets({n: 200 for n in lengths}, {n: n for n in lengths},
                                 {n: n + 1 for n in lengths}, compile_cost=0)
  assert len(free) == range_eval.MAX_PROGRAMS
  assert len(range_eval.plan_buckets({n: 1 for n in lengths}, {n: n for n in lengths},
                                     {n: n + 1 for n in lengths}, compile_cost=1e12)) == 1


def test_batch_rows_rule():
  assert range_eval.batch_rows(480, 256) == 32
  assert range_eval.batch_rows(200, 256) == 64
  assert range_eval.batch_rows(10, 256) == 256
  assert range_eval.batch_rows(5000, 256) == range_eval.MIN_BATCH
  assert range_eval.batch_rows(5000, 8) == 8


# ---------------------------------------------------------------------------
# Shared programs score as each length alone.
# ---------------------------------------------------------------------------
def test_lengths_sharing_a_program_score_as_each_length_alone(tiny_run, monkeypatch):
  config, vocab, model, params = inference.restore_for_eval(str(tiny_run))
  programs = inference.make_eval_programs(model, config.seed_strategy, precision.of(config))
  monkeypatch.setattr(range_eval, 'COMPILE_ROW_STEPS', 1e12)      # one bucket for all
  together = range_eval.evaluate_lengths(programs, params, vocab, config, list(range(4, 10)), 24)
  assert together['compiled_programs'] == 1 and len(together['buckets']) == 1
  for j, n in enumerate(together['lengths']):
    if n not in (4, 7, 9):
      continue
    alone = range_eval.evaluate_lengths(programs, params, vocab, config, [n], 24)
    assert alone['samples'] == [together['samples'][j]]
    for key in range_eval.METRIC_NAMES:
      assert [s[0] for s in alone['per_seed'][key]] == \
          [s[j] for s in together['per_seed'][key]], (n, key)
  # The untrained-ish run is not perfect: the equality is not one of all-correct outputs.
  assert min(together['token_accuracy']) < 100.0


def test_batches_decoded_side_by_side_score_as_one_after_another(tiny_run, monkeypatch):
  """Under seed strategy 'threads' the batches after each bucket's first run from host
  threads (`decode_buckets`); every length scores exactly as with the batches in order."""
  from monoloc_jax import multiseed  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(multiseed, 'host_cores', lambda: 2)
  config, vocab, model, params = inference.restore_for_eval(str(tiny_run))
  monkeypatch.setattr(range_eval, 'BATCH_ROW_TOKENS', 64)         # several batches a bucket
  results = {}
  for strategy in ('map', 'threads'):
    programs = inference.make_eval_programs(model, strategy, precision.of(config))
    assert programs.threads == (2 if strategy == 'threads' else 1)
    results[strategy] = range_eval.evaluate_lengths(programs, params, vocab, config,
                                                    list(range(3, 12)), 40)
  assert any(b['batch'] < 40 for b in results['map']['buckets'])  # so batches were split
  for key in range_eval.METRIC_NAMES:
    assert results['map']['per_seed'][key] == results['threads']['per_seed'][key], key


# ---------------------------------------------------------------------------
# --mode=range end to end (the acceptance run).
# ---------------------------------------------------------------------------
@pytest.fixture(scope='module')
def copy_run(tmp_path_factory):
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  workdir = tmp_path_factory.mktemp('range_run')
  config = default.get_config()
  config.update(dict(task='copy', variant='onestep', seeds=2, max_epochs=2, train_size=2000,
                     eval_size=32, test_splits='test_15', progress=False))
  train.train_and_evaluate(config, str(workdir))
  return workdir


def test_mode_range_writes_the_curve(copy_run):
  proc = subprocess.run(
      [sys.executable, '-m', 'monoloc_jax.main', f'--workdir={copy_run}', '--mode=range',
       '--config.range_lengths=1:120', '--config.range_samples=50'],
      capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'horizon' in proc.stdout and 'compiled program' in proc.stdout
  result = json.loads((copy_run / range_eval.RANGE_JSON).read_text())
  for key in ('lengths', 'accuracy', 'token_accuracy', 'edit_distance', 'per_seed',
              'train_lengths', 'horizon', 'ood_score', 'compiled_programs', 'wall_time_s'):
    assert key in result, key
  assert result['lengths'] == list(range(1, 121))
  for key in range_eval.METRIC_NAMES:
    assert len(result[key]) == 120
    assert len(result['per_seed'][key]) == 2 and len(result['per_seed'][key][0]) == 120
  assert result['per_seed']['seeds'] == [0, 1]
  assert result['train_lengths'] == [5, 10]
  assert 1 <= result['compiled_programs'] <= 10
  assert result['samples'][0] == 10 and result['samples'][5] == 50   # 10 one-digit inputs
  assert min(result['accuracy'][4:10]) >= 90.0                        # lengths 5-10
  assert result['horizon'] is not None and result['horizon'] >= 10
  assert 0.0 <= result['ood_score'] <= 100.0
  assert (copy_run / range_eval.RANGE_PNG).stat().st_size > 1000
  csv_lines = (copy_run / range_eval.RANGE_CSV).read_text().splitlines()
  assert len(csv_lines) == 121 and csv_lines[0].startswith('length,samples,accuracy,')
  # monoloc-results shows the horizon and OOD score.
  found, _ = results_table.collect([str(copy_run)])
  text = results_table.render(found)
  assert 'range horizon' in text and f"{result['horizon']} (of 1–120)" in text
  # The plot of several runs' curves.
  fig = viz.plot_range({'a': copy_run, 'b': result})
  gids = {line.get_gid() for line in fig.axes[0].lines}
  assert {'range:a', 'range:b'} <= gids
  labels = {line.get_label() for line in fig.axes[0].lines}
  # Copy makes only 10 inputs of length 1: the legend shows the span of the sample counts.
  assert result['samples'][0] == 10 and max(result['samples']) == 50
  assert 'a (median of 2 seeds, n = 10–50 per length)' in labels, labels
  one = {**result, 'per_seed': {**result['per_seed'], 'seeds': [1]},
         'samples': [50] * len(result['samples'])}           # one seed is named
  labels = {line.get_label() for line in viz.plot_range({'b': one}).axes[0].lines}
  assert 'b (seed 1, n = 50 per length)' in labels, labels
  # A log length axis: ticks 1, 2, 5, ... and the range's ends; the runs' line styles differ.
  ax = viz.plot_range({'a': copy_run, 'b': result}, xscale='log').axes[0]
  assert ax.get_xscale() == 'log'
  assert [t.get_text() for t in ax.get_xticklabels()] == ['1', '2', '5', '10', '20', '50',
                                                          '100']     # 120: too near 100
  styles = {l.get_gid(): l.get_linestyle() for l in ax.lines if l.get_gid()}
  assert styles['range:a'] != styles['range:b'], styles
  with pytest.raises(errors.MonolocError, match="unknown xscale 'symlog'; valid: linear, log"):
    viz.plot_range(result, xscale='symlog')


def test_mode_range_refuses_other_fields(copy_run):
  with pytest.raises(errors.MonolocError, match='--mode=range cannot change '
                     'config.learning_rate; it may change only range_lengths'):
    range_eval.range_evaluate(str(copy_run), config_overrides={'learning_rate': 0.1})
  with pytest.raises(errors.MonolocError, match=r"bad value for config.range_lengths: '9:3'"):
    range_eval.range_evaluate(str(copy_run), '9:3')
