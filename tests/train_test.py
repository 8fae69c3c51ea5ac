"""Training, evaluation and launcher tests (issue 4). All on CPU, small and seeded."""

import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from monoloc_jax import checkpointing
from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import train
from monoloc_jax.configs import default


def small_config(**overrides):
  c = default.get_config()
  c.task = 'copy'
  c.variant = 'onestep'
  c.train_size = 600
  c.eval_size = 100
  c.max_epochs = 2
  c.test_splits = 'test_15'
  c.progress = False
  c.update(overrides)
  return c


def history(workdir):
  return [json.loads(l) for l in (pathlib.Path(workdir) / 'metrics.jsonl').read_text().splitlines()]


def test_onestep_learns_copy_and_generalizes_to_length_30(tmp_path):
  """A small seeded OneStepAttn run trained on lengths 5-10 reaches >= 99% at length 30."""
  config = small_config(train_size=3000, eval_size=200, max_epochs=2,
                        test_splits='test_30,test_100')
  results = train.train_and_evaluate(config, str(tmp_path))
  assert results['test']['test_30']['accuracy'] >= 99.0, results['test']
  # results.json carries what the issue asks for.
  saved = json.loads((tmp_path / 'results.json').read_text())
  assert saved['test']['test_30']['accuracy'] == results['test']['test_30']['accuracy']
  assert saved['wall_time_s'] > 0 and saved['versions']['jax']
  # Evaluate-only mode re-scores the workdir with the same numbers.
  again = inference.evaluate(str(tmp_path))
  assert again['test']['test_30']['accuracy'] == results['test']['test_30']['accuracy']
  # Predict mode: a length-12 input is copied and attention walks one step at a time.
  (output, positions), = inference.predict(str(tmp_path), ['3 1 4 1 5 9 2 6 5 3 5 8'])
  assert ' '.join(output) == '3 1 4 1 5 9 2 6 5 3 5 8'
  assert positions[:12] == list(range(12))


def test_vmapped_seeds_match_single_seed_runs(tmp_path):
  """Two seeds in one vmapped program track two separate single-seed runs."""
  config = small_config(train_size=800, max_epochs=2, seeds=2, seed=3)
  train.train_and_evaluate(config, str(tmp_path / 'both'))
  both = np.array([r['dev_accuracy'] for r in history(tmp_path / 'both')])   # [epochs, 2]
  for i, seed in enumerate((3, 4)):
    train.train_and_evaluate(small_config(train_size=800, max_epochs=2, seed=seed),
                             str(tmp_path / f'single{seed}'))
    single = np.array([r['dev_accuracy'][0] for r in history(tmp_path / f'single{seed}')])
    np.testing.assert_allclose(both[:, i], single, atol=0.5)
  # The two seeds really are different runs.
  losses = np.array([r['loss'] for r in history(tmp_path / 'both')])
  assert not np.allclose(losses[:, 0], losses[:, 1])


def test_interrupted_run_resumes_to_the_same_result(tmp_path, monkeypatch):
  config = small_config(max_epochs=3)
  full = train.train_and_evaluate(config, str(tmp_path / 'full'))

  original_save = checkpointing.Checkpointer.save

  def save_then_die(self, epoch, tree):
    original_save(self, epoch, tree)
    if epoch == 1:
      self.wait()
      raise KeyboardInterrupt

  monkeypatch.setattr(checkpointing.Checkpointer, 'save', save_then_die)
  with pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(config, str(tmp_path / 'cut'))
  monkeypatch.setattr(checkpointing.Checkpointer, 'save', original_save)
  resumed = train.train_and_evaluate(config, str(tmp_path / 'cut'))

  assert resumed['epochs'] == full['epochs'] == 3
  assert resumed['test']['test_15']['per_seed'] == full['test']['test_15']['per_seed']
  cut, ref = history(tmp_path / 'cut'), history(tmp_path / 'full')
  assert [r['epoch'] for r in cut] == [1, 2, 3]
  np.testing.assert_allclose([r['loss'] for r in cut], [r['loss'] for r in ref], rtol=1e-6)
  assert [r['dev_accuracy'] for r in cut] == [r['dev_accuracy'] for r in ref]


def test_nan_loss_stops_with_epoch_and_step_and_keeps_last_checkpoint(tmp_path, monkeypatch):
  workdir = str(tmp_path)
  train.train_and_evaluate(small_config(max_epochs=1), workdir)
  # Resume the run (epoch 2) with a loss that is NaN from its first step.
  real_loss = train.token_loss
  def poisoned(logits, targets, pad_id):
    total, count = real_loss(logits, targets, pad_id)
    return total * jnp.nan, count
  monkeypatch.setattr(train, 'token_loss', poisoned)
  with pytest.raises(errors.MonolocError,
                     match=r'non-finite loss at epoch 2, step 1 \(seed 0\); training stopped; '
                           r'the last good checkpoint \(epoch 1\) is kept'):
    train.train_and_evaluate(small_config(max_epochs=2), workdir)
  assert checkpointing.Checkpointer(tmp_path / 'checkpoints').latest_epoch() == 1
  assert [r['epoch'] for r in history(tmp_path)] == [1]


def test_nan_in_first_epoch_says_no_checkpoint(tmp_path):
  with pytest.raises(errors.MonolocError, match='non-finite loss at epoch 1.*no checkpoint'):
    train.train_and_evaluate(small_config(learning_rate=1e30), str(tmp_path))


def test_corrupt_checkpoint_is_a_clear_error_not_a_restart(tmp_path):
  workdir = str(tmp_path)
  train.train_and_evaluate(small_config(max_epochs=1), workdir)
  for f in (tmp_path / 'checkpoints').rglob('*'):
    if f.is_file() and f.stat().st_size > 0 and 'state' in f.parts:
      f.write_bytes(b'\x00garbage' * 4)
  with pytest.raises(errors.MonolocError, match='checkpoint .* is corrupt or does not match'):
    train.train_and_evaluate(small_config(max_epochs=2), workdir)


@pytest.mark.parametrize('field, value, message', [
    ('task', 'nope', "unknown task 'nope'; valid tasks: cfq_length, copy"),
    ('variant', 'nope', "unknown variant 'nope'; valid variants: bi_relative"),
    ('learning_rate', -1.0, 'bad value for config.learning_rate: -1.0; it must be a positive'),
    ('seeds', 0, 'bad value for config.seeds: 0'),
    ('dev_metric', 'beam', "valid: greedy, teacher_forced"),
    ('test_splits', 'test_7', "unknown test split 'test_7' for task 'copy'; valid: test_iid"),
    ('lr_patience', -1, 'bad value for config.lr_patience: -1; it must be an integer >= 1'),
    ('early_stop_patience', 0, 'bad value for config.early_stop_patience: 0'),
    ('improvement_tolerance', -1.0, 'bad value for config.improvement_tolerance: -1.0'),
    ('min_sigma', -1.0, 'bad value for config.min_sigma: -1.0; it must be a positive number'),
    ('weight_decay', -1.0, 'bad value for config.weight_decay: -1.0'),
    ('value_dim', 0, 'bad value for config.value_dim: 0'),
    ('mix_mode', 'both', "unknown mix_mode 'both'; valid mix_modes: paper, reference_code"),
    ('decoder_init', 'backward_states', "needs num_layers=2"),
])
def test_bad_config_values(tmp_path, field, value, message):
  with pytest.raises(errors.MonolocError, match=message):
    train.train_and_evaluate(small_config(**{field: value}), str(tmp_path))


def test_scan_without_data_dir_is_a_clear_error(tmp_path):
  with pytest.raises(errors.MonolocError, match='data'):
    train.train_and_evaluate(small_config(task='scan_length', test_splits='paper'),
                             str(tmp_path))


def test_evaluate_and_predict_need_a_run_directory(tmp_path):
  with pytest.raises(errors.MonolocError, match='not a monoloc_jax run directory'):
    inference.evaluate(str(tmp_path))
  with pytest.raises(errors.MonolocError, match='not a monoloc_jax run directory'):
    inference.predict(str(tmp_path), ['1 2 3'])


def _cli(*args):
  return subprocess.run([sys.executable, '-m', 'monoloc_jax.main', *args],
                        capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize('args, message', [
    (['--task=nope'], 'copy'),                      # absl lists the enum's valid values
    (['--model=nope'], 'onestep'),
    (['--mode=nope'], 'train|evaluate|predict'),
    (['--config.learning_rate=-1'], 'bad value for config.learning_rate'),
    (['--config.max_epochs=abc'], 'max_epochs'),
    (['--config.foo=1'], "error: unknown config field 'foo'; valid fields: batch_size"),
    (['--config=/nonexistent/config.py'], "cannot load the --config file '/nonexistent/config.py'"),
    (['--config.lr_patience=-1'], 'bad value for config.lr_patience: -1'),
    (['--config.embed_dim=0'], 'bad value for config.embed_dim: 0'),
    ([], '--workdir is required'),
])
def test_cli_errors_are_one_line(tmp_path, args, message):
  workdir = [] if not args else [f'--workdir={tmp_path}']
  proc = _cli(*workdir, *args)
  assert proc.returncode == 2
  assert 'Traceback' not in proc.stderr
  assert message in proc.stderr, proc.stderr
  assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_cli_trains_evaluates_and_predicts(tmp_path):
  common = [f'--workdir={tmp_path}', '--task=copy', '--config.train_size=300',
            '--config.eval_size=50', '--config.max_epochs=1', '--config.test_splits=test_15',
            '--config.progress=False']
  proc = _cli(*common)
  assert proc.returncode == 0, proc.stderr
  assert 'test_15' in proc.stdout and 'acc %' in proc.stdout
  proc = _cli(f'--workdir={tmp_path}', '--mode=evaluate')
  assert proc.returncode == 0 and 'test_15' in proc.stdout, proc.stderr
  proc = _cli(f'--workdir={tmp_path}', '--mode=predict', '--inputs=1 2 3 4 5')
  assert proc.returncode == 0, proc.stderr
  assert 'output:' in proc.stdout and 'attends:' in proc.stdout
  proc = _cli(f'--workdir={tmp_path}', '--mode=predict')
  assert proc.returncode == 2 and 'needs at least one --inputs' in proc.stderr


def test_perfect_dev_patience_stops_a_seed_after_n_perfect_epochs():
  config = small_config(perfect_dev_patience=2, early_stop_patience=50)
  tracker = train.Tracker.create(2, 1e-3)
  tracker.update(np.array([1.0, 0.9]), config)
  assert not tracker.stopped.any()
  tracker.update(np.array([1.0, 1.0]), config)      # seed 0: 2 perfect epochs in a row
  np.testing.assert_array_equal(tracker.stopped, [True, False])
  tracker.update(np.array([1.0, 0.99]), config)     # seed 1's run of perfect epochs broke
  np.testing.assert_array_equal(tracker.stopped, [True, False])
  off = small_config(perfect_dev_patience=0, early_stop_patience=50)
  tracker = train.Tracker.create(1, 1e-3)
  for _ in range(5):
    tracker.update(np.array([1.0]), off)
  assert not tracker.stopped.any()


def _tiny_programs(lr=1e-3, seed_strategy='auto', seeds=(0, 1)):
  from monoloc_jax import input_pipeline as ip  # pylint: disable=g-import-not-at-top
  from monoloc_jax import models  # pylint: disable=g-import-not-at-top
  config = small_config(train_size=64, learning_rate=lr)
  data = ip.load_data(config)
  model = models.from_config(config, data.vocab)
  programs = train.make_train_programs(model, train.make_optimizer(config), seed_strategy)
  batches = list(ip.train_batches(data.train, 32, list(seeds), 0, 0, data.vocab.sos_id))
  return programs, batches


def test_seed_strategies_give_each_seed_the_same_training():
  """vmap (one batched program) and map (seeds one after another) train every seed
  alike (to float rounding: XLA may order a batched product's sums differently)."""
  from monoloc_jax import multiseed  # pylint: disable=g-import-not-at-top
  assert multiseed.resolve('auto', 'cpu') == 'map'
  assert multiseed.resolve('auto', 'gpu') == multiseed.resolve('auto', 'tpu') == 'vmap'

  def train_two_steps(strategy, seeds):
    programs, batches = _tiny_programs(seed_strategy=strategy, seeds=seeds)
    state = train.create_train_state(programs, list(seeds), batches[0])
    stats = train.EpochStats.zeros(len(seeds))
    for batch in batches[:2]:
      state, stats = programs.train_step(state, batch, stats)
    return jax.device_get((state.params, stats))
  vmapped, mapped = train_two_steps('vmap', (0, 1)), train_two_steps('map', (0, 1))
  for a, b in zip(jax.tree_util.tree_leaves(vmapped), jax.tree_util.tree_leaves(mapped)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert not np.allclose(mapped[0]['embedding'][0], mapped[0]['embedding'][1])


def test_create_train_state_gives_each_seed_its_own_keys_and_params():
  programs, batches = _tiny_programs()
  state = train.create_train_state(programs, [0, 1], batches[0])
  assert state.num_updates.shape == (2,) and int(state.num_updates.sum()) == 0
  assert state.key.shape == (2, 2)
  emb = np.asarray(state.params['embedding'])
  assert emb.shape[0] == 2 and not np.allclose(emb[0], emb[1])
  again = train.create_train_state(programs, [1], batches[0])
  np.testing.assert_array_equal(np.asarray(again.params['embedding'])[0], emb[1])
  np.testing.assert_array_equal(np.asarray(again.key)[0], np.asarray(state.key)[1])


def test_epoch_stats_accumulate_and_per_seed_learning_rates_apply():
  programs, batches = _tiny_programs()
  state = train.create_train_state(programs, [0, 0], batches[0])   # two identical seeds
  before = np.asarray(state.params['out_kernel']).copy()
  state = state._replace(opt_state=train.set_learning_rate(state.opt_state,
                                                            np.array([1e-3, 0.0], np.float32)))
  stats = train.EpochStats.zeros(2)
  state, stats = programs.train_step(state, batches[0], stats)
  after = np.asarray(state.params['out_kernel'])
  assert not np.allclose(after[0], before[0])            # lr 1e-3 moved seed 0
  np.testing.assert_array_equal(after[1], before[1])     # lr 0 left seed 1 untouched
  assert np.all(np.asarray(stats.tokens) > 0) and np.all(np.asarray(stats.loss_sum) > 0)
  np.testing.assert_array_equal(stats.first_bad_update, [-1, -1])
  np.testing.assert_array_equal(state.num_updates, [1, 1])
  import optax  # pylint: disable=g-import-not-at-top
  np.testing.assert_allclose(optax.tree_utils.tree_get(state.opt_state, 'learning_rate'),
                             [1e-3, 0.0])


def test_evaluation_restores_without_an_optimizer(tmp_path, monkeypatch):
  workdir = str(tmp_path)
  train.train_and_evaluate(small_config(max_epochs=1), workdir)
  monkeypatch.setattr(train, 'make_optimizer',
                      lambda config: (_ for _ in ()).throw(AssertionError('optimizer built')))
  config, vocab, model, params = inference.restore_for_eval(workdir)
  assert jax.tree_util.tree_leaves(params)[0].shape[0] == config.seeds
  assert model.variant.name == 'onestep'



# ---------------------------------------------------------------------------
# The workdir contract: the stored config is the run's identity.
# ---------------------------------------------------------------------------
def _files(workdir):
  return {name: (pathlib.Path(workdir) / name).read_bytes()
          for name in ('config.json', 'results.json', 'metrics.jsonl', 'vocab.json')}


@pytest.mark.parametrize('change, field', [
    (dict(task='reverse_copy'), 'task'),      # same vocabulary, other task
    (dict(seeds=3), 'seeds'),
    (dict(hidden_dim=64), 'hidden_dim'),
    (dict(variant='relative'), 'variant'),
])
def test_a_conflicting_config_is_refused_and_the_workdir_is_intact(tmp_path, change, field):
  workdir = str(tmp_path)
  train.train_and_evaluate(small_config(max_epochs=1), workdir)
  before = _files(workdir)
  with pytest.raises(errors.MonolocError, match=f'holds a run with another configuration '
                     f'\\({field}: '):
    train.train_and_evaluate(small_config(max_epochs=2, **change), workdir)
  assert _files(workdir) == before


def test_resuming_may_change_max_epochs_and_the_stored_config_wins_on_the_cli(tmp_path):
  workdir = str(tmp_path)
  train.train_and_evaluate(small_config(max_epochs=1, train_size=200, eval_size=32), workdir)
  # The README's resume form names neither --task nor --model: W's own run resumes.
  proc = _cli(f'--workdir={workdir}', '--config.max_epochs=2', '--config.progress=False')
  assert proc.returncode == 0, proc.stderr
  assert 'Resuming from the checkpoint of epoch 1' in proc.stdout
  results = json.loads((tmp_path / 'results.json').read_text())
  assert results['task'] == 'copy' and results['epochs'] == 2
  assert [r['epoch'] for r in history(workdir)] == [1, 2]
  assert json.loads((tmp_path / 'config.json').read_text())['train_size'] == 200
  # A conflicting flag is refused with the one-line diff, and nothing changes.
  before = _files(workdir)
  proc = _cli(f'--workdir={workdir}', '--task=reverse_copy')
  assert proc.returncode == 2 and "task: 'copy' (stored) != 'reverse_copy'" in proc.stderr
  assert _files(workdir) == before


def test_a_second_process_on_the_same_workdir_is_refused(tmp_path):
  from monoloc_jax import rundir  # pylint: disable=g-import-not-at-top
  with rundir.lock(tmp_path):
    with pytest.raises(errors.MonolocError, match=r'is in use by another process \(pid \d+\)'):
      train.train_and_evaluate(small_config(max_epochs=1), str(tmp_path))
  assert not (tmp_path / 'config.json').exists()
