"""The authors' training procedure as a recipe: its rules against a transcription of
their training loop, its config, and the data choice it carries (DeDupe's source <eos>)."""

import math

import ml_collections
import numpy as np
import pytest

from monoloc_jax import config_paths
from monoloc_jax import errors
from monoloc_jax import input_pipeline as ip
from monoloc_jax import launcher
from monoloc_jax import recipes
from monoloc_jax import rundir
from monoloc_jax import train
from monoloc_jax import validation
from monoloc_jax.configs import authors_code
from monoloc_jax.configs import default


def authors_loop(devs, patience=50, sched_patience=4, factor=0.5, lr=1e-3, threshold=1e-4):
  """The authors' train.py epoch loop and torch's ReduceLROnPlateau, transcribed.

  devs: dev accuracy per epoch, in percent (their scale). Returns, per epoch that
  ran: (lr for the next epoch, whether the best checkpoint was saved, stopped after it).
  """
  best, impatience = -math.inf, 0
  sched_best, bad = -math.inf, 0
  out = []
  for epoch, dev in enumerate(devs):
    if impatience > patience:          # checked at the top of each epoch
      break
    if epoch > 0:                      # agent.scheduler.step(dev_score), not after epoch 0
      if dev > sched_best * (1 + threshold):
        sched_best, bad = dev, 0
      else:
        bad += 1
      if bad > sched_patience:
        new = lr * factor
        if lr - new > 1e-8:
          lr = new
        bad = 0
    if epoch > 0:
      impatience += 1
    saved = dev > best or abs(dev - best) < 0.001
    if saved:
      best, impatience = dev, 0
    out.append((lr, saved, impatience > patience))
    if impatience > patience:
      break
  return out


def ours(devs, config):
  tracker = recipes.Tracker.create(1, config.learning_rate, config.plateau_rule)
  out = []
  for dev in devs:
    if tracker.stopped.all():
      break
    improved = tracker.update(np.array([dev / 100.0]), config)
    out.append((float(tracker.lr[0]), bool(improved[0]), bool(tracker.stopped[0])))
  return out


def scripted_curve():
  """A dev curve with what tells the rules apart: epoch 0 higher than the next epochs
  (their scheduler never sees epoch 0), exact ties (improvement for the checkpoint,
  bad epochs for the scheduler), a drop of one sample in 2,000 (0.05 points: not an
  improvement for them, one for the library's 0.1-point tolerance), long plateaus
  that halve the lr several times, and a final plateau that ends training."""
  devs = [54.0, 42.85, 47.0, 47.0, 47.0, 47.0, 47.0, 47.0, 60.0, 59.95, 59.95, 59.95,
          59.95, 59.95, 59.95, 61.5, 61.5]
  devs += [61.45] * 60
  return devs


def test_authors_rules_match_their_training_loop_epoch_by_epoch():
  devs = scripted_curve()
  want = authors_loop(devs)
  got = ours(devs, authors_code.get_config())
  assert len(got) == len(want)
  for epoch, (g, w) in enumerate(zip(got, want)):
    assert g[1:] == w[1:], (epoch, g, w)
    assert g[0] == pytest.approx(w[0], rel=1e-6), (epoch, g, w)
  # The curve exercises what it should: several lr halvings, and a stop.
  assert want[-1][2] and len({w[0] for w in want}) >= 4


def test_library_rules_differ_on_the_same_curve():
  # The same curve under the library's rules: the check above can tell the two apart.
  c = default.get_config()
  c.max_epochs, c.early_stop_patience = 100, 51
  assert ours(scripted_curve(), c) != authors_loop(scripted_curve())


def test_ties_are_bad_epochs_for_the_plateau_rule_only():
  c = authors_code.get_config()
  tracker = recipes.Tracker.create(1, 1e-3, c.plateau_rule)
  tracker.update(np.array([0.5]), c)                 # epoch 0: not seen by the scheduler
  for _ in range(5):                                 # five exact ties: all improvements,
    assert tracker.update(np.array([0.5]), c)[0]     # and five bad epochs for the lr
  assert tracker.lr[0] == pytest.approx(1e-3)        # epoch 1 set its best: 4 bad so far
  assert tracker.update(np.array([0.5]), c)[0]
  assert tracker.lr[0] == pytest.approx(5e-4)


def test_reduce_lr_on_plateau_state_is_checkpointed_and_library_layout_kept():
  c = authors_code.get_config()
  t = recipes.Tracker.create(2, 1e-3, c.plateau_rule)
  t.update(np.array([0.2, 0.4]), c)
  t.update(np.array([0.3, 0.1]), c)    # epoch 1: the scheduler's first step sets its best
  t.update(np.array([0.25, 0.4]), c)
  back = recipes.Tracker.from_tree(t.to_tree())
  np.testing.assert_array_equal(back.plateau_best, [0.3, 0.4])
  np.testing.assert_array_equal(back.plateau, [1, 0])
  # The library rule's checkpoint tree has exactly the keys it always had.
  lib = recipes.Tracker.create(2, 1e-3).to_tree()
  assert set(lib) == {'lr', 'best_dev', 'best_epoch', 'since_best', 'plateau', 'stopped',
                      'perfect', 'epoch'}
  with pytest.raises(errors.MonolocError, match='valid plateau_rules: library, '
                                                'reduce_lr_on_plateau'):
    recipes.Tracker.create(1, 1e-3, 'torch')


def test_recipe_fields_are_config_fields_and_the_named_config_applies_them():
  base = default.get_config()
  for name, recipe in recipes.RECIPES.items():
    for field, value in recipe.items():
      assert field in base, (name, field)
      assert type(base[field]) is type(value) or isinstance(value, (int, float)), field
  c = authors_code.get_config()
  for field, value in recipes.AUTHORS_CODE.items():
    assert c[field] == value
  validation.validate(c)
  assert launcher.resolve('authors_code').endswith('authors_code.py')
  # Applying a recipe does not change the config it is given.
  assert base.bucket_batches and recipes.apply(base, 'authors_code').bucket_batches is False
  with pytest.raises(errors.MonolocError, match='valid recipes: authors_code, library'):
    recipes.apply(base, 'theirs')


def test_bad_recipe_field_values_get_one_line_errors():
  c = authors_code.get_config()
  c.source_eos_tasks = 'dedupe,dedup'
  with pytest.raises(errors.MonolocError, match="unknown task 'dedup' in config.source_eos"):
    validation.validate(c)
  c = authors_code.get_config()
  c.init_scheme = 'torch'
  with pytest.raises(errors.MonolocError, match='valid init_schemes: authors_code, library'):
    validation.validate(c)
  c = authors_code.get_config()
  c.plateau_threshold = -1.0
  with pytest.raises(errors.MonolocError, match='plateau_threshold'):
    validation.validate(c)


def test_dedupe_sources_end_in_eos_under_the_authors_recipe():
  def load(cfg):
    cfg.task, cfg.train_size, cfg.eval_size, cfg.test_splits = 'dedupe', 50, 20, 'test_15'
    return ip.load_data(cfg)
  ours_ = load(default.get_config())
  theirs = load(authors_code.get_config())
  assert ours_.vocab == theirs.vocab
  for a, b in [(ours_.train, theirs.train), (ours_.dev, theirs.dev),
               (ours_.tests['test_15'], theirs.tests['test_15'])]:
    np.testing.assert_array_equal(b.src_len, a.src_len + 1)
    rows = np.arange(len(a))
    np.testing.assert_array_equal(b.src[rows, a.src_len], theirs.vocab.eos_id)
    np.testing.assert_array_equal(b.src[:, :a.src.shape[1]] * (np.arange(a.src.shape[1])
                                                              < a.src_len[:, None]), a.src)
    np.testing.assert_array_equal(b.tgt, a.tgt)
  # Other tasks are untouched by the recipe's data choice.
  c = authors_code.get_config()
  c.task, c.train_size, c.eval_size, c.test_splits = 'copy', 20, 10, 'test_15'
  assert not ip.source_eos(c)


def test_workdir_of_a_config_without_the_new_fields_still_resumes():
  stored = default.get_config().to_dict()
  for field in ('plateau_rule', 'plateau_threshold', 'source_eos_tasks', 'init_scheme',
                'sigma_bias', 'location_normaliser'):
    del stored[field]
  assert rundir.config_changes(ml_collections.ConfigDict(stored), default.get_config()) == []
  # ... but asking such a workdir for the authors' rules is a change of configuration.
  changed = [k for k, _, _ in rundir.config_changes(ml_collections.ConfigDict(stored),
                                                    authors_code.get_config())]
  assert 'plateau_rule' in changed and 'bucket_batches' in changed


def test_optimizer_step_equals_torch_adamw_with_clip_grad_norm():
  """train.make_optimizer against the authors' torch step (clip_grad_norm_(5) then
  AdamW(lr, weight_decay=0)), recorded by experiments/authors_code/optimizer_steps.py:
  four steps, the clip active in the first, the lr halved before the third."""
  import pathlib  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  golden = np.load(pathlib.Path(__file__).parent / 'data' / 'torch_adamw_steps.npz')
  keys = ('a', 'b', 'c')
  c = authors_code.get_config()
  tx = train.make_optimizer(c)
  params = {k: jnp.asarray(golden[f'init/{k}']) for k in keys}
  state = tx.init(params)
  for step, lr in enumerate(golden['lrs']):
    state = train.set_learning_rate(state, jnp.asarray(lr))
    grads = {k: jnp.asarray(golden[f'grad{step}/{k}']) for k in keys}
    assert float(optax.tree.norm(grads)) == pytest.approx(float(golden[f'norm{step}']),
                                                            rel=1e-6)
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    for k in keys:
      want = golden[f'after{step}/{k}']
      # float32 rounding: the parameters move by ~1e-3 a step; 2e-7 is a few ulps of them.
      np.testing.assert_allclose(np.asarray(params[k]), want, rtol=0, atol=2e-7,
                                 err_msg=f'step {step}, leaf {k}')
    moved = np.abs(np.asarray(params['a']) - golden[f'init/a']).max()
    assert moved > 1e-4 * (step + 1)   # the comparison is not vacuous


def test_both_recipes_set_the_same_fields_and_the_default_config_takes_the_library_one():
  assert list(recipes.LIBRARY) == list(recipes.AUTHORS_CODE)
  base = default.get_config()
  for field, value in recipes.LIBRARY.items():
    assert base[field] == value and type(base[field]) is type(value), field
  assert recipes.apply(base, 'library').to_dict() == base.to_dict()
  # Every procedure field has its --help line, and every config field a comment.
  assert set(recipes.FIELD_HELP) == set(recipes.LIBRARY)
  missing = [f for f, _, comment in launcher.field_help() if not comment]
  assert set(missing) <= {'dtype', 'matmul_precision'}, missing   # block comments above them
  assert {f for f, _, _ in launcher.field_help()} == set(config_paths.flatten(base.to_dict()))


def test_subset_and_named_views_of_the_recipes():
  assert recipes.subset('authors_code', 'dev_metric') == {'dev_metric': 'teacher_forced'}
  assert recipes.subset('library', 'bucket_batches', 'max_epochs') == {
      'bucket_batches': True, 'max_epochs': 100}
  with pytest.raises(errors.MonolocError, match='valid recipes: authors_code, library'):
    recipes.subset('theirs', 'dev_metric')
  with pytest.raises(errors.MonolocError, match="unknown authors_code recipe field 'dropout'"):
    recipes.subset('authors_code', 'dropout')
  # The paper's budget: the authors' epochs and no perfect-dev stop, the paper's patience 50
  # (their code's rule stops one epoch later).
  assert dict(recipes.PAPER_EPOCHS) == {'max_epochs': 100, 'early_stop_patience': 50,
                                        'perfect_dev_patience': 0}
  assert recipes.AUTHORS_CODE['early_stop_patience'] == 51
  c = config_paths.overridden(default.get_config(), recipes.TRANSFORMER_GRID)
  assert (c.transformer.layers, c.transformer.mlp_dim, c.dropout) == (1, 128, 0.1)
  validation.validate(c)


def test_rules_stop_and_improve_as_documented():
  assert list(recipes.improvement(np.array([0.5, 0.4989, 0.6]), np.array([0.5] * 3), 0.001)) == [
      True, False, True]
  assert list(recipes.early_stop(np.array([49, 50]), 50)) == [False, True]
  assert list(recipes.perfect_dev_stop(np.array([0, 3]), 0)) == [False, False]   # off
  assert list(recipes.perfect_dev_stop(np.array([2, 3]), 3)) == [False, True]


def test_a_run_directory_of_the_old_mix_mode_name_still_loads(tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  stored = default.get_config().to_dict()
  stored.update(task='scan_length', variant='mix_onestep', mix_mode='reference_code')
  (tmp_path / rundir.CONFIG).write_text(json.dumps(stored), encoding='utf-8')
  config = rundir.load_config(tmp_path)
  assert config.mix_mode == 'authors_code'
  assert config.variant == 'mix_onestep'
  given = ml_collections.ConfigDict(dict(stored, mix_mode='authors_code'))
  rundir.check_config(tmp_path, given)      # resumes: the same run under its new name
