"""Training (the paper's App. E protocol), several seeds at once.

`train_and_evaluate(config, workdir)` is the whole job: load the task, train N
seeds at once (every array of the train state has a leading seed axis, and the
jitted step runs over it as `multiseed` resolves config.seed_strategy: vmapped,
one seed after another in one program, or one seed per host thread), keep per-seed plateau schedules, early
stopping (the procedure's rules, `recipes.Tracker`) and best-dev parameters on
the host, checkpoint every epoch with orbax, and finally greedy-decode every
test split with each seed's best parameters (`inference`). Run-directory files are `rundir`'s; re-scoring and
decoding a finished run are `inference.evaluate` / `inference.predict`.
"""

import pathlib
import time
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from monoloc_jax import backbones
from monoloc_jax import checkpointing
from monoloc_jax import compile_ahead
from monoloc_jax import errors
from monoloc_jax import faults
from monoloc_jax import inference
from monoloc_jax import input_pipeline as ip
from monoloc_jax import logs
from monoloc_jax import multiseed
from monoloc_jax import precision
from monoloc_jax import recipes
from monoloc_jax import rundir
from monoloc_jax import sharding
from monoloc_jax import validation
from monoloc_jax.vocab import Vocabulary

Array = jax.Array


class TrainState(NamedTuple):
  """Everything that evolves during training; each leaf has a leading seed axis [N]."""
  params: Any
  opt_state: Any
  num_updates: Array  # [N] int32, optimizer updates done
  key: Array          # [N, 2] uint32, dropout key of each seed


class EpochStats(NamedTuple):
  """What the train step accumulates on device during an epoch (no host sync).

  loss_sum [N]: summed token cross-entropy; tokens [N]: target tokens counted;
  first_bad_update [N]: the first update with a non-finite loss or gradient
  (-1 = none); that update was skipped.
  """
  loss_sum: Array
  tokens: Array
  first_bad_update: Array

  @classmethod
  def zeros(cls, n: int) -> 'EpochStats':
    return cls(jnp.zeros((n,)), jnp.zeros((n,)), jnp.full((n,), -1, jnp.int32))


# ---------------------------------------------------------------------------
# Building blocks.
# ---------------------------------------------------------------------------
def warmup_factor(warmup_steps: int) -> Callable[[Array], Array]:
  """The linear warmup multiplier of update `count` (0-based): min(1, (count + 1) / W).

  The first update is scaled by 1 / W, update W - 1 onwards by 1.
  """
  def factor(count: Array) -> Array:
    return jnp.minimum(1.0, (count + 1).astype(jnp.float32) / warmup_steps)
  return factor


# The layout of TrainState.opt_state that checkpoints record (`checkpointing`): the
# optimizer runs on one flat vector of all parameters (`make_optimizer`).
STATE_LAYOUT = 'flat_opt_state'


def per_leaf_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """AdamW (weight decay 0 by default) after global-norm clipping, one state array per
  parameter; the lr is a state hyperparameter so that each seed can halve its own.

  config.warmup_steps W > 0 multiplies the whole AdamW update by
  `warmup_factor(W)` (a separate `scale_by_schedule` after AdamW, so the per-seed
  lr stays AdamW's injected hyperparameter and the plateau rules halve it as
  before); W = 0 builds exactly the optimizer without warmup.
  The Transformer backbone needs it to start learning (tests/transformer_test.py).
  """
  parts = [optax.clip_by_global_norm(config.grad_clip),
           optax.inject_hyperparams(optax.adamw)(
               learning_rate=config.learning_rate, weight_decay=config.weight_decay)]
  if config.warmup_steps > 0:
    parts.append(optax.scale_by_schedule(warmup_factor(config.warmup_steps)))
  return optax.chain(*parts)


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """`per_leaf_optimizer` run on the parameters as one flat vector (`optax.flatten`).

  The same update: g <- g min(1, c / ||g||) over all parameters, then AdamW
  (m, v and the step on the concatenation of every parameter, in tree-leaf order).
  One vector instead of one array per parameter compiles about 20% faster; the
  moments mu, nu are [P] (or [N, P] over seeds). Checkpoints of the per-leaf
  layout (before 2026-11-25) are converted on resume (`state_migrations`).
  """
  return optax.flatten(per_leaf_optimizer(config))


def flat_moments(per_leaf_state, params):
  """The per-leaf optimizer state of `per_leaf_optimizer` in `make_optimizer`'s layout.

  Every subtree shaped like `params` ([N, ...] per leaf, N seeds) becomes one [N, P]
  array: each leaf reshaped to [N, -1] and concatenated in tree-leaf order, which is
  `optax.flatten`'s order. Other state (count, hyperparameters) is kept as it is.
  """
  params_def = jax.tree_util.tree_structure(params)
  is_params = lambda x: jax.tree_util.tree_structure(x) == params_def

  def flatten(tree):
    if not is_params(tree):
      return tree
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.concatenate([jnp.reshape(x, (x.shape[0], -1)) for x in leaves], axis=1)

  return jax.tree_util.tree_map(flatten, per_leaf_state, is_leaf=is_params)


def state_migrations(config: ml_collections.ConfigDict, target: Dict[str, Any]
                     ) -> Dict[str, checkpointing.Migration]:
  """How a checkpoint of an older layout becomes `target` ({'state', ...}, STATE_LAYOUT)."""
  state = target['state']
  per_leaf = jax.eval_shape(
      jax.vmap(per_leaf_optimizer(config).init), state.params)

  def convert(older: Dict[str, Any]) -> Dict[str, Any]:
    opt_state = flat_moments(older['state'].opt_state, older['state'].params)
    want = jax.tree_util.tree_map(np.shape, state.opt_state)
    if jax.tree_util.tree_map(np.shape, opt_state) != want:
      raise errors.MonolocError(
          'the optimizer state of the per-leaf checkpoint does not convert to this '
          'configuration\'s; start over with a fresh --workdir')
    return dict(older, state=older['state']._replace(opt_state=opt_state))

  older_target = dict(target, state=state._replace(opt_state=per_leaf))
  return {checkpointing.UNRECORDED_LAYOUT: checkpointing.Migration(older_target, convert)}


def set_learning_rate(opt_state, lr: Array):
  """Returns opt_state with its (per-seed, [N]) learning rate replaced."""
  return optax.tree_utils.tree_set(opt_state, learning_rate=jnp.asarray(lr))


def token_loss(logits: Array, targets: Array, pad_id: int) -> Tuple[Array, Array]:
  """Summed token cross-entropy over non-pad targets, and the token count."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  mask = (targets != pad_id).astype(logits.dtype)
  return jnp.sum(ce * mask), jnp.sum(mask)


class TrainPrograms(NamedTuple):
  """The jitted, seed-vmapped training functions of a run.

  init(keys [N, 2], src, src_len, tgt_in) -> (params, opt_state), each [N, ...].
  train_step(state, batch, stats) -> (state, stats): one optimizer update per
    seed; batch arrays are [N, B, ...]; `stats` is an `EpochStats`.
  """
  init: Callable
  train_step: Callable


def make_train_programs(model: backbones.Model, tx: optax.GradientTransformation,
                        seed_strategy: str = 'auto',
                        matmul_precision: str = precision.DEFAULT) -> TrainPrograms:
  """Builds the jitted training programs for `model`, over a leading seed axis.

  seed_strategy: how the programs run over the seeds (`multiseed.STRATEGIES`:
  vmapped, or one after another with `lax.map`; 'auto' picks per backend).
  matmul_precision: the precision of every float32 product, the backward pass's
  included (`precision.MATMUL_PRECISIONS`; config.matmul_precision).
  A non-finite loss or gradient skips that update (params and optimizer state
  are kept) and is recorded in `EpochStats.first_bad_update`.
  """
  pad = model.pad_id

  def init_one(key, src, src_len):
    params = backbones.init_params(model, key, src, src_len)
    return params, tx.init(params)

  def step_one(state: TrainState, batch: ip.Batch, stats: EpochStats):
    dropout_key = jax.random.fold_in(state.key, state.num_updates)

    def loss_fn(params):
      out = model.apply({'params': params}, batch.src, batch.src_len, batch.tgt_in,
                        train=True, rngs={'dropout': dropout_key})
      total, count = token_loss(out.logits, batch.tgt_out, pad)
      return total / jnp.maximum(count, 1.0), (total, count)

    (loss, (total, count)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    # A finite loss can still have a non-finite gradient (seen once: MonoAttn on Reverse
    # Copy, epoch 69, under the authors' procedure); either one skips the update, so no
    # NaN ever reaches the parameters or a checkpoint.
    finite = jnp.isfinite(loss) & jnp.all(jnp.stack(
        [jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)]))
    keep = lambda new, old: jax.tree_util.tree_map(
        lambda a, b: jnp.where(finite, a, b), new, old)
    bad = jnp.where((stats.first_bad_update < 0) & ~finite, state.num_updates,
                    stats.first_bad_update)
    new_state = TrainState(keep(params, state.params), keep(opt_state, state.opt_state),
                           state.num_updates + 1, state.key)
    return new_state, EpochStats(stats.loss_sum + jnp.where(finite, total, 0.0),
                                 stats.tokens + count, bad)

  return TrainPrograms(
      init=jax.jit(precision.traced_under(
          multiseed.over_seeds(init_one, (0, None, None), seed_strategy),
          matmul_precision)),
      train_step=jax.jit(precision.traced_under(
          multiseed.over_seeds(step_one, (0, 0, 0), seed_strategy), matmul_precision),
                         donate_argnums=(0,)))


def create_train_state(programs: TrainPrograms, seeds: Sequence[int],
                       probe: ip.Batch) -> TrainState:
  """The initial state of `seeds`: seed s initialises its parameters from
  split(PRNGKey(s))[0] and draws dropout from split(PRNGKey(s))[1].

  probe: any training batch ([N, B, ...]; its first seed's arrays give the shapes).
  """
  keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
  init_keys, dropout_keys = jax.vmap(jax.random.split, out_axes=1)(keys)
  params, opt_state = programs.init(init_keys, probe.src[0], probe.src_len[0])
  return TrainState(params, opt_state, jnp.zeros((len(seeds),), jnp.int32), dropout_keys)


def _prior_wall_time(workdir: pathlib.Path, history: Sequence[Dict[str, Any]],
                     epoch: int) -> float:
  """Wall seconds the run's earlier processes spent up to the restored `epoch` (0 for a
  fresh run): results.json's total when a finished run of that epoch is re-run, else the
  last epoch record's `wall_s` (records written before that field: their `epoch_s` summed,
  a lower bound). Time an interrupted process spent after its last checkpoint is lost."""
  if not history:
    return 0.0
  try:
    finished = rundir.load_results(workdir)
  except errors.MonolocError:
    finished = {}
  if finished.get('epochs') == epoch and isinstance(finished.get('wall_time_s'), (int, float)):
    return float(finished['wall_time_s'])
  last = history[-1]
  if isinstance(last.get('wall_s'), (int, float)):
    return float(last['wall_s'])
  return float(sum(r.get('epoch_s', 0.0) for r in history))


def _start_from(state: TrainState, params: Any, tx: optax.GradientTransformation
                ) -> TrainState:
  """`state` with the parameters `params` ([N, ...] per leaf) and their fresh optimizer
  state; a one-line MonolocError when their tree or shapes are not the model's."""
  leaves = lambda tree: {jax.tree_util.keystr(path): leaf for path, leaf
                         in jax.tree_util.tree_flatten_with_path(tree)[0]}
  ours, given = leaves(state.params), leaves(params)
  want = {k: np.shape(v) for k, v in ours.items()}
  got = {k: np.shape(v) for k, v in given.items()}
  bad = sorted(set(want) ^ set(got)) or sorted(k for k in want if want[k] != got[k])
  if bad:
    raise errors.MonolocError(
        f'initial_params does not fit the model ([N, ...] per leaf, N = config.seeds): '
        f'{len(bad)} leaves differ, first {bad[0]} (model {want.get(bad[0])}, '
        f'given {got.get(bad[0])})')
  params = jax.tree_util.tree_unflatten(   # the model's tree type, whatever `params`' is
      jax.tree_util.tree_structure(state.params),
      [jnp.asarray(given[k], ref.dtype) for k, ref in ours.items()])
  return state._replace(params=params, opt_state=jax.vmap(tx.init)(params))


@jax.jit
def _copy_tree(tree):
  """A copy of every leaf, in one program (jnp.copy per leaf compiles one per shape)."""
  return jax.tree_util.tree_map(jnp.copy, tree)


@jax.jit
def _stack_where(mask: Array, new, old):
  """Per seed (mask [N]): the leaves of `new` where mask, else those of `old`.

  One program for the whole tree (a `where` per leaf outside jit would compile
  one tiny program per leaf shape: 28 of them, about 1 s, in the main job).
  """
  return jax.tree_util.tree_map(
      lambda a, b: jnp.where(mask.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new, old)


# ---------------------------------------------------------------------------
# The job.
# ---------------------------------------------------------------------------
def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *, task=None,
                       variant=None,
                       devices: Optional[Sequence[jax.Device]] = None,
                       initial_params: Any = None) -> Dict[str, Any]:
  """Trains config.seeds seeds of config.variant on config.task; returns results.json's content.

  task: a `tasks.TaskSpec` (or anything the `tasks` functions accept) to train on
    instead of the registry's `config.task`, e.g. a task defined outside the package.
  variant: an `attention.Variant` to use instead of the registry's `config.variant`.
  devices: the devices the seeds (and batch rows) are laid over (default: all of
    `jax.devices()`; see `sharding.plan`); one device runs the plain vmapped program.
  initial_params: a parameter tree with a leading seed axis [N, ...] (N = config.seeds,
    the model's shapes) to start training from instead of drawing each seed's
    parameters (e.g. weights mapped from another code); the seeds' dropout keys and
    batches are still their own. The workdir does not record it: resuming the run
    continues from its checkpoint either way.
  """
  validation.validate(config, task=task, variant=variant)
  kill = faults.KillSwitch.from_env()
  workdir = pathlib.Path(workdir)
  with rundir.os_errors(f'cannot use the workdir {workdir}'):
    rundir.check_config(workdir, config)        # before anything is written
    workdir.mkdir(parents=True, exist_ok=True)
    with rundir.lock(workdir), compile_ahead.Ahead() as ahead:
      kill('startup')
      return _train_and_evaluate(config, workdir, task, variant, devices, kill, ahead,
                                 initial_params)


def _train_and_evaluate(config, workdir: pathlib.Path, task, variant, devices,
                        kill: Callable[[str], None], ahead: compile_ahead.Ahead,
                        initial_params: Any) -> Dict[str, Any]:
  t_start = time.time()
  data = ip.load_data(config, task=task)
  vocab_path = workdir / rundir.VOCAB
  if vocab_path.exists():
    if Vocabulary.load(vocab_path) != data.vocab:
      raise errors.MonolocError(f'{workdir} holds a run with another vocabulary; '
                                'use a fresh --workdir')
  else:
    rundir.write_bytes_atomic(vocab_path, data.vocab.to_json().encode('utf-8'))

  model = backbones.from_config(config, data.vocab, variant=variant)
  tx = make_optimizer(config)
  seeds = rundir.seeds_of(config)
  n = len(seeds)
  placement = sharding.plan(n, config.batch_size, devices)
  if placement.mesh is not None and config.progress:
    print(placement.describe(), flush=True)
  strategy = config.seed_strategy
  if placement.mesh is not None and multiseed.resolve(strategy) == 'threads':
    raise errors.MonolocError(
        f"seed_strategy='threads' runs on one CPU device, and this run lays its seeds over "
        f"{placement.devices_used} devices; use 'auto', 'vmap' or 'map'")
  programs = make_train_programs(model, tx, strategy, precision.of(config))
  eval_programs = inference.make_eval_programs(model, strategy, precision.of(config))

  probe = next(ip.train_batches(data.train, config.batch_size, seeds[:1], 0,
                                config.data_seed, data.vocab.sos_id, config.bucket_batches,
                                config.train_widths))
  step_ready, dev_ready, tests_ready = [], [], []
  if placement.mesh is None:
    # The train step compiles while init runs, then the evaluation programs while the
    # first epoch trains (`compile_ahead`). With a mesh, their arguments would need their
    # shardings too; such runs compile each program at its first call.
    shapes = jax.eval_shape(lambda: create_train_state(programs, seeds, probe))
    first = next(ip.train_batches(data.train, config.batch_size, seeds, 0, config.data_seed,
                                  data.vocab.sos_id, config.bucket_batches,
                                  config.train_widths))
    stats = EpochStats.zeros(n)
    if multiseed.resolve(strategy) == 'threads' and n > 1:
      # Each seed steps alone (`multiseed.run_steps`): the one-seed program, and the
      # programs that split the state into seeds and join it again.
      one = lambda tree: jax.tree_util.tree_map(lambda x: x[:1], tree)
      step_ready = [ahead.compile(multiseed.split_seeds, (shapes, stats), n),
                    ahead.compile(programs.train_step, jax.eval_shape(one, shapes), one(first),
                                  one(stats)),
                    ahead.compile(multiseed.join_seeds,
                                  [jax.eval_shape(one, (shapes, stats))] * n)]
    else:
      step_ready = [ahead.compile(programs.train_step, shapes, first, stats)]
    dev_ready, tests_ready = inference.compile_decoding_ahead(
        ahead, eval_programs, shapes.params, data, config)
  state = create_train_state(programs, seeds, probe)
  if initial_params is not None:
    state = _start_from(state, initial_params, tx)
  state = placement.put_state(state)
  best_params = _copy_tree(state.params)  # params are donated to train_step
  tracker = recipes.Tracker.create(n, config.learning_rate, config.plateau_rule)

  ckpt = checkpointing.Checkpointer(workdir / rundir.CHECKPOINTS)
  target = {'state': state, 'best_params': best_params, 'tracker': tracker.to_tree()}
  restored = ckpt.restore_for_resume(
      target, history=rundir.read_history(workdir), vocab_path=vocab_path,
      claims_training=rundir.history_claims_epochs(workdir), layout=STATE_LAYOUT,
      migrations=state_migrations(config, target))
  history = []
  if restored is not None:
    state, best_params = placement.put_state((restored['state'], restored['best_params']))
    tracker = recipes.Tracker.from_tree(restored['tracker'])
    logging.info('resumed from %s at epoch %d', ckpt.directory, tracker.epoch)
    print(f'Resuming from the checkpoint of epoch {tracker.epoch} in {ckpt.directory}')
    # The history is the checkpoint's own copy: cut back to the restored epoch exactly.
    history = restored['history']
    rundir.write_history(workdir, history)
  prior_wall_s = _prior_wall_time(workdir, history, tracker.epoch)
  rundir.save_config(workdir, config)       # once the checkpoint is known to be good
  print(logs.header(config, workdir, data, seeds, tracker.epoch, model.variant.display_name),
        flush=True)
  # Event files are flushed every epoch; the writer is closed when the run ends.
  writer = logs.MetricWriter(workdir, seeds, purge_step=tracker.epoch + 1 if restored else None)
  bars = logs.progress_enabled(config)

  steps_per_epoch = ip.num_train_steps(data.train, config.batch_size, config.bucket_batches)
  train_time = 0.0
  ahead.wait(step_ready)
  while tracker.epoch < config.max_epochs and not tracker.stopped.all():
    epoch = tracker.epoch
    t0 = time.time()
    state = placement.put_state(
        state._replace(opt_state=set_learning_rate(state.opt_state, tracker.lr)))
    stats = placement.put_state(EpochStats.zeros(n))
    batches = [placement.put_batch(batch) for batch in ip.train_batches(
        data.train, config.batch_size, seeds, epoch, config.data_seed, data.vocab.sos_id,
        config.bucket_batches, config.train_widths)]
    state, stats = multiseed.run_steps(
        programs.train_step, state, stats, batches, strategy,
        progress=lambda it: logs.progress(it, steps_per_epoch, f'epoch {epoch + 1}', bars),
        on_step=lambda i: kill('mid_epoch') if i == 0 else None)
    loss_sum, tokens, bad = (sharding.to_host(a) for a in stats)
    if (bad >= 0).any():
      seed_i = int(np.argmax(bad >= 0))
      step_in_epoch = int(bad[seed_i]) - epoch * steps_per_epoch + 1
      kept = (f'the last good checkpoint (epoch {epoch}) is kept in {ckpt.directory}'
              if ckpt.latest_epoch() is not None else 'no epoch had finished, so no checkpoint')
      writer.close()
      raise errors.MonolocError(
          f'non-finite loss or gradient at epoch {epoch + 1}, step {step_in_epoch} '
          f'(seed {seeds[seed_i]}); training stopped; {kept}')
    train_s = time.time() - t0
    train_time += train_s
    ahead.wait(dev_ready)
    dev_acc = inference.dev_accuracy(eval_programs, state.params, data, config)
    kill('dev')
    was_stopped = tracker.stopped.copy()
    improved = tracker.update(dev_acc, config)
    best_params = _stack_where(improved, state.params, best_params)
    record = {'epoch': tracker.epoch, 'loss': (loss_sum / np.maximum(tokens, 1)).tolist(),
              'dev_accuracy': (100 * dev_acc).tolist(), 'lr': tracker.lr.tolist(),
              'improved': improved.tolist(), 'stopped': (tracker.stopped & ~was_stopped).tolist(),
              'train_s': train_s, 'epoch_s': time.time() - t0,
              'wall_s': prior_wall_s + time.time() - t_start}
    history.append(record)
    writer.write_epoch(record)
    # Checkpoint (with its manifest holding the history), then metrics.jsonl, then the
    # previous checkpoint is deleted: a kill between any two leaves a consistent workdir.
    ckpt.save(tracker.epoch, {'state': state, 'best_params': best_params,
                              'tracker': tracker.to_tree()}, history, vocab_path, kill,
              layout=STATE_LAYOUT)
    kill('manifest')
    rundir.write_history(workdir, history)
    kill('history')
    ckpt.prune(keep=tracker.epoch)
    logging.info('epoch %d  loss %s  dev acc %s  lr %s  %.1fs (train %.1fs)', tracker.epoch,
                 np.array2string(loss_sum / np.maximum(tokens, 1), precision=4),
                 np.array2string(100 * dev_acc, precision=2), tracker.lr, record['epoch_s'],
                 train_s)
    print(logs.epoch_line(record), flush=True)

  t_eval = time.time()
  print(f"testing each seed's best-dev parameters on {', '.join(data.tests)}", flush=True)
  ahead.wait(tests_ready)
  test = inference.evaluate_splits(eval_programs, best_params, data, config,
                                   report=lambda line: print(line, flush=True),
                                   in_use=inference.dev_greedy_shapes(data, config))
  kill('final')
  writer.write_test(test, tracker.epoch)
  results = {
      'task': getattr(task, 'name', config.task), 'variant': getattr(variant, 'name', config.variant),
      'seeds': seeds,
      'dev_metric': config.dev_metric,
      'test': test,
      'dev': {'best_accuracy_per_seed': (100 * tracker.best_dev).tolist(),
              'best_epoch_per_seed': (tracker.best_epoch + 1).tolist()},
      'epochs': tracker.epoch,
      'steps_per_epoch': steps_per_epoch,
      'wall_time_s': prior_wall_s + time.time() - t_start,   # over every process of the run
      'train_time_s_this_process': train_time,
      'eval_time_s': time.time() - t_eval,
      'config': config.to_dict(),
      'versions': rundir.versions(),
  }
  rundir.save_results(workdir, results)
  writer.close()
  return results
