"""Training and evaluation (SPEC §4-5), several seeds in one vmapped program.

`train_and_evaluate(config, workdir)` is the whole job: load the task, train N
seeds at once (every array of the train state has a leading seed axis and the
jitted step is `jax.vmap`ped over it), keep per-seed plateau schedules, early
stopping and best-dev parameters on the host, checkpoint every epoch with
orbax, and finally greedy-decode every test split with each seed's best
parameters. `evaluate(workdir)` re-scores a finished run and `predict(workdir,
inputs)` decodes new inputs.
"""

import dataclasses
import json
import math
import os
import pathlib
import platform
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import tqdm

from monoloc_jax import checkpointing
from monoloc_jax import errors
from monoloc_jax import input_pipeline as ip
from monoloc_jax import metrics
from monoloc_jax import models
from monoloc_jax import tasks
from monoloc_jax import variants
from monoloc_jax.vocab import Vocabulary

Array = jax.Array


class TrainState(NamedTuple):
  """Everything that evolves during training; each leaf has a leading seed axis [N]."""
  params: Any
  opt_state: Any
  step: Array        # [N] int32, global step
  key: Array         # [N, 2] uint32, dropout key of each seed


@dataclasses.dataclass
class Tracker:
  """Host-side per-seed schedule and early-stopping state (SPEC §4)."""
  lr: np.ndarray            # [N] current learning rate
  best_dev: np.ndarray      # [N] best dev accuracy so far (fraction)
  best_epoch: np.ndarray    # [N] epoch of the best checkpoint (-1 = none)
  since_best: np.ndarray    # [N] epochs without improvement
  plateau: np.ndarray       # [N] epochs without improvement since the last lr change
  stopped: np.ndarray       # [N] early-stopped
  perfect: np.ndarray       # [N] consecutive epochs at 100% dev accuracy
  epoch: int = 0            # epochs completed

  @classmethod
  def create(cls, n: int, lr: float) -> 'Tracker':
    return cls(np.full(n, lr, np.float32), np.full(n, -1.0), np.full(n, -1, np.int32),
               np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, bool),
               np.zeros(n, np.int32))

  def to_tree(self) -> Dict[str, np.ndarray]:
    tree = {k: np.asarray(v) for k, v in dataclasses.asdict(self).items()}
    tree['epoch'] = np.asarray(self.epoch, np.int32)
    return tree

  @classmethod
  def from_tree(cls, tree: Dict[str, Any]) -> 'Tracker':
    kw = {k: np.asarray(v) for k, v in tree.items()}
    kw['epoch'] = int(kw['epoch'])
    return cls(**kw)

  def update(self, dev_acc: np.ndarray, config) -> np.ndarray:
    """Records one epoch's dev accuracy; returns which seeds improved.

    Improvement: acc >= best - tolerance (ties count, SPEC §4). The lr halves
    when a seed has not improved for `lr_patience` epochs (then the count
    restarts); a seed stops after `early_stop_patience` epochs without improvement,
    or, when `perfect_dev_patience` > 0, once its dev accuracy has been 100% for
    that many consecutive epochs.
    """
    active = ~self.stopped
    improved = active & (dev_acc >= self.best_dev - config.improvement_tolerance)
    self.best_dev = np.where(improved, np.maximum(self.best_dev, dev_acc), self.best_dev)
    self.best_epoch = np.where(improved, self.epoch, self.best_epoch)
    self.since_best = np.where(improved, 0, self.since_best + active)
    self.plateau = np.where(improved, 0, self.plateau + active)
    halve = active & (self.plateau >= config.lr_patience)
    self.lr = np.where(halve, self.lr * config.lr_factor, self.lr).astype(np.float32)
    self.plateau = np.where(halve, 0, self.plateau)
    self.perfect = np.where(active & (dev_acc >= 1.0), self.perfect + 1, 0).astype(np.int32)
    self.stopped = self.stopped | (self.since_best >= config.early_stop_patience)
    if config.perfect_dev_patience:
      self.stopped = self.stopped | (self.perfect >= config.perfect_dev_patience)
    self.epoch += 1
    return improved


# ---------------------------------------------------------------------------
# Building blocks.
# ---------------------------------------------------------------------------
def make_model(config: ml_collections.ConfigDict, vocab: Vocabulary) -> models.Seq2Seq:
  return models.from_config(config, vocab)


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """AdamW (weight decay 0 by default) after global-norm clipping; the lr is a
  state hyperparameter so that each seed can halve its own."""
  return optax.chain(
      optax.clip_by_global_norm(config.grad_clip),
      optax.inject_hyperparams(optax.adamw)(
          learning_rate=config.learning_rate, weight_decay=config.weight_decay))


def set_learning_rate(opt_state, lr: Array):
  """Returns opt_state with the (per-seed) learning rate replaced."""
  clip, adam = opt_state
  return (clip, adam._replace(hyperparams={**adam.hyperparams,
                                           'learning_rate': jnp.asarray(lr)}))


def token_loss(logits: Array, targets: Array, pad_id: int) -> Tuple[Array, Array]:
  """Summed token cross-entropy over non-pad targets, and the token count."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  mask = (targets != pad_id).astype(logits.dtype)
  return jnp.sum(ce * mask), jnp.sum(mask)


class Programs(NamedTuple):
  """The jitted, seed-vmapped functions of a run."""
  init: Callable
  train_step: Callable
  greedy: Callable
  teacher_forced_accuracy: Callable


def make_programs(model: models.Seq2Seq, tx: optax.GradientTransformation) -> Programs:
  """Builds the seed-vmapped, jitted programs for `model`.

  train_step(state, batch, acc) -> (state, acc): one optimizer step per seed.
  acc = (loss_sum [N], tokens [N], first_bad_step [N]) accumulates on device
  so the epoch needs no host sync; first_bad_step is the first step with a
  non-finite loss (-1 = none), at which the update is skipped.
  """
  pad = model.pad_id

  def init_one(key, src, src_len, tgt_in):
    params = model.init({'params': key}, src, src_len, tgt_in)['params']
    return params, tx.init(params)

  def step_one(state: TrainState, batch: ip.Batch, acc):
    dropout_key = jax.random.fold_in(state.key, state.step)

    def loss_fn(params):
      out = model.apply({'params': params}, batch.src, batch.src_len, batch.tgt_in,
                        train=True, rngs={'dropout': dropout_key})
      total, count = token_loss(out.logits, batch.tgt_out, pad)
      return total / jnp.maximum(count, 1.0), (total, count)

    (loss, (total, count)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    finite = jnp.isfinite(loss)
    keep = lambda new, old: jax.tree_util.tree_map(
        lambda a, b: jnp.where(finite, a, b), new, old)
    loss_sum, tokens, bad = acc
    bad = jnp.where((bad < 0) & ~finite, state.step, bad)
    new_state = TrainState(keep(params, state.params), keep(opt_state, state.opt_state),
                           state.step + 1, state.key)
    return new_state, (loss_sum + jnp.where(finite, total, 0.0), tokens + count, bad)

  def greedy_one(params, src, src_len, steps):
    out = model.apply({'params': params}, src, src_len, steps, method=model.greedy)
    return out.tokens, out.attention

  def tf_one(params, batch: ip.Batch):
    out = model.apply({'params': params}, batch.src, batch.src_len, batch.tgt_in)
    pred = jnp.argmax(out.logits, -1)
    ok = (pred == batch.tgt_out) | (batch.tgt_out == pad)
    return jnp.all(ok, axis=-1)

  return Programs(
      init=jax.jit(jax.vmap(init_one, in_axes=(0, None, None, None))),
      train_step=jax.jit(jax.vmap(step_one), donate_argnums=(0,)),
      greedy=jax.jit(jax.vmap(greedy_one, in_axes=(0, None, None, None)),
                     static_argnums=(3,)),
      teacher_forced_accuracy=jax.jit(jax.vmap(tf_one, in_axes=(0, None))),
  )


# ---------------------------------------------------------------------------
# Data.
# ---------------------------------------------------------------------------
@dataclasses.dataclass
class TaskData:
  vocab: Vocabulary
  train: ip.EncodedSplit
  dev: ip.EncodedSplit
  tests: Dict[str, ip.EncodedSplit]


def resolve_test_splits(config) -> Tuple[str, ...]:
  """'paper' -> the paper's length splits, 'all' -> every test split, else a comma list."""
  spec = config.test_splits
  if spec == 'paper':
    return tuple(tasks.paper_length_splits(config.task))
  if spec == 'all':
    return tuple(tasks.test_splits(config.task))
  names = tuple(s.strip() for s in spec.split(',') if s.strip())
  valid = tasks.test_splits(config.task)
  for name in names:
    if name not in valid:
      raise errors.MonolocError(
          f"unknown test split {name!r} for task {config.task!r}; valid: "
          f"{', '.join(valid)} (or 'paper', 'all')")
  return names


def _subsample(examples, n: int):
  return list(examples) if not n or n >= len(examples) else list(examples)[:n]


def load_data(config, vocab: Optional[Vocabulary] = None, with_train: bool = True) -> TaskData:
  """Loads and encodes the task's splits. The vocabulary comes from train."""
  load = lambda split: tasks.load_examples(config.task, split, seed=config.data_seed,
                                           data_dir=config.data_dir or None)
  train_ex = _subsample(load('train'), config.train_size) if with_train else []
  if vocab is None:
    vocab = Vocabulary.from_examples(train_ex)
  dev = ip.encode_split(_subsample(load('dev'), config.eval_size), vocab)
  tests = {s: ip.encode_split(_subsample(load(s), config.eval_size), vocab)
           for s in resolve_test_splits(config)}
  for name, split in [('dev', dev), *tests.items()]:
    if split.n_unk:
      logging.warning('%s: %d tokens not in the training vocabulary were mapped to <unk>',
                      name, split.n_unk)
  train = ip.encode_split(train_ex, vocab) if with_train else None
  return TaskData(vocab, train, dev, tests)


# ---------------------------------------------------------------------------
# Evaluation.
# ---------------------------------------------------------------------------
def decode_split(programs: Programs, params, split: ip.EncodedSplit, batch_size: int,
                 vocab: Vocabulary, keep_attention: bool = False):
  """Greedy-decodes a split for every seed. Returns tokens [N, n, T] (and attention)."""
  n_seeds = jax.tree_util.tree_leaves(params)[0].shape[0]
  batches = ip.eval_batches(split, batch_size, vocab.sos_id)
  width = max(steps for _, _, steps in batches)
  tokens = np.zeros((n_seeds, len(split), width), np.int32)
  attention = None
  if keep_attention:
    s_max = max(b.src.shape[1] for _, b, _ in batches) + 2
    attention = np.zeros((n_seeds, len(split), width, s_max), np.float32)
  for idx, batch, steps in batches:
    tok, att = programs.greedy(params, batch.src, batch.src_len, steps)
    tokens[:, idx, :steps] = np.asarray(tok)[:, :len(idx)]
    if keep_attention:
      attention[:, idx, :steps, :att.shape[-1]] = np.asarray(att)[:, :len(idx)]
  return tokens, attention


def dev_accuracy(programs: Programs, params, data: TaskData, config) -> np.ndarray:
  """Per-seed dev sequence accuracy (fraction): greedy or teacher-forced (config.dev_metric)."""
  if config.dev_metric == 'teacher_forced':
    correct = []
    for idx, batch, _ in ip.eval_batches(data.dev, config.eval_batch_size, data.vocab.sos_id):
      correct.append(np.asarray(programs.teacher_forced_accuracy(params, batch))[:, :len(idx)])
    return np.concatenate(correct, axis=1).mean(axis=1)
  tokens, _ = decode_split(programs, params, data.dev, config.eval_batch_size, data.vocab)
  return np.stack([metrics.sequence_accuracy(t, data.dev.tgt, data.vocab.eos_id)
                   for t in tokens]).mean(axis=1)


def aggregate(per_seed: List[Dict[str, float]]) -> Dict[str, Any]:
  """Median (the paper's Table 2), mean and std over seeds of every metric."""
  out: Dict[str, Any] = {}
  for key in per_seed[0]:
    vals = np.array([m[key] for m in per_seed], np.float64)
    if key == 'n':
      out[key] = int(vals[0])
      continue
    out[key] = float(np.median(vals))
    out[f'{key}_mean'] = float(vals.mean())
    out[f'{key}_std'] = float(vals.std())
  out['per_seed'] = per_seed
  return out


def evaluate_splits(programs: Programs, params, data: TaskData, config) -> Dict[str, Any]:
  """Per-seed and aggregated metrics for every test split."""
  results = {}
  for name, split in data.tests.items():
    t0 = time.time()
    want_att = split.gold is not None
    tokens, attention = decode_split(programs, params, split, config.eval_batch_size,
                                     data.vocab, keep_attention=want_att)
    per_seed = [metrics.summarize(tokens[i], split.tgt, data.vocab.eos_id,
                                  attention[i] if want_att else None, split.gold)
                for i in range(tokens.shape[0])]
    results[name] = aggregate(per_seed)
    results[name]['decode_s'] = time.time() - t0
    if split.n_unk:
      results[name]['n_unk'] = split.n_unk
  return results


# ---------------------------------------------------------------------------
# The job.
# ---------------------------------------------------------------------------
def seeds_of(config) -> List[int]:
  return [config.seed + i for i in range(config.seeds)]


def _versions() -> Dict[str, str]:
  import flax, optax as _optax, orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  return {'python': platform.python_version(), 'jax': jax.__version__,
          'jaxlib': jax.lib.__version__ if hasattr(jax.lib, '__version__') else '',
          'flax': flax.__version__, 'optax': _optax.__version__,
          'orbax': getattr(ocp, '__version__', ''), 'numpy': np.__version__,
          'backend': jax.default_backend(), 'devices': [str(d) for d in jax.devices()]}


def _write_json(path: pathlib.Path, obj) -> None:
  tmp = path.with_suffix('.tmp')
  tmp.write_text(json.dumps(obj, indent=2, default=float))
  os.replace(tmp, path)


def _stack_where(mask: np.ndarray, new, old):
  mask = jnp.asarray(mask)
  return jax.tree_util.tree_map(
      lambda a, b: jnp.where(mask.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new, old)


def _truncate_history(path: pathlib.Path, epoch: int) -> None:
  """Drops history lines of epochs after `epoch` (written before a crash, not checkpointed)."""
  if path.exists():
    lines = [l for l in path.read_text().splitlines()
             if l.strip() and json.loads(l)['epoch'] <= epoch]
    path.write_text(''.join(l + '\n' for l in lines))


def format_table(results: Dict[str, Any], config) -> str:
  """The printed length-generalization table."""
  rows = [f"{variants.get(config.variant).display_name} on {config.task}, "
          f"{config.seeds} seed(s) (accuracy: median over seeds)",
          f"{'split':<12}{'acc %':>8}{'mean±std':>16}{'SeqAccBE %':>12}{'edit':>8}"
          + (f"{'att.loss':>10}" if any('attention_loss' in r for r in results.values()) else '')]
  for name, r in results.items():
    line = (f"{name:<12}{r['accuracy']:>8.1f}{r['accuracy_mean']:>9.1f}±{r['accuracy_std']:<6.1f}"
            f"{r['seq_acc_be']:>12.1f}{r['edit_distance']:>8.2f}")
    if 'attention_loss' in r:
      line += f"{r['attention_loss']:>10.3f}"
    rows.append(line)
  return '\n'.join(rows)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, Any]:
  """Trains config.seeds seeds of config.variant on config.task; returns results.json's content."""
  validate_config(config)
  t_start = time.time()
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  data = load_data(config)
  vocab_path = workdir / 'vocab.json'
  if vocab_path.exists() and Vocabulary.load(vocab_path) != data.vocab:
    raise errors.MonolocError(f'{workdir} holds a run with another vocabulary; '
                              'use a fresh --workdir')
  data.vocab.save(vocab_path)
  _write_json(workdir / 'config.json', config.to_dict())

  model = make_model(config, data.vocab)
  tx = make_optimizer(config)
  programs = make_programs(model, tx)
  seeds = seeds_of(config)
  n = len(seeds)

  probe = next(ip.train_batches(data.train, config.batch_size, seeds[:1], 0,
                                config.data_seed, data.vocab.sos_id, config.bucket_batches))
  keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
  init_keys, dropout_keys = jax.vmap(jax.random.split, out_axes=1)(keys)
  params, opt_state = programs.init(init_keys, probe.src[0], probe.src_len[0], probe.tgt_in[0])
  state = TrainState(params, opt_state, jnp.zeros((n,), jnp.int32), dropout_keys)
  best_params = jax.tree_util.tree_map(jnp.copy, params)  # params are donated to train_step
  tracker = Tracker.create(n, config.learning_rate)

  ckpt = checkpointing.Checkpointer(workdir / 'checkpoints')
  restored = ckpt.restore_latest({'state': state, 'best_params': best_params,
                                  'tracker': tracker.to_tree()})
  if restored is not None:
    state, best_params = restored['state'], restored['best_params']
    tracker = Tracker.from_tree(restored['tracker'])
    logging.info('resumed from %s at epoch %d', ckpt.directory, tracker.epoch)
    print(f'Resuming from the checkpoint of epoch {tracker.epoch} in {ckpt.directory}')
    _truncate_history(workdir / 'metrics.jsonl', tracker.epoch)

  steps_per_epoch = ip.num_train_steps(data.train, config.batch_size, config.bucket_batches)
  history_path = workdir / 'metrics.jsonl'
  train_time = 0.0
  while tracker.epoch < config.max_epochs and not tracker.stopped.all():
    epoch = tracker.epoch
    t0 = time.time()
    state = state._replace(opt_state=set_learning_rate(state.opt_state, tracker.lr))
    acc = (jnp.zeros((n,)), jnp.zeros((n,)), jnp.full((n,), -1, jnp.int32))
    batches = ip.train_batches(data.train, config.batch_size, seeds, epoch,
                               config.data_seed, data.vocab.sos_id, config.bucket_batches)
    for batch in tqdm.tqdm(batches, total=steps_per_epoch, desc=f'epoch {epoch + 1}',
                           leave=False, disable=not config.progress, file=sys.stderr):
      state, acc = programs.train_step(state, batch, acc)
    loss_sum, tokens, bad = (np.asarray(a) for a in acc)
    if (bad >= 0).any():
      seed_i = int(np.argmax(bad >= 0))
      step_in_epoch = int(bad[seed_i]) - epoch * steps_per_epoch + 1
      kept = (f'the last good checkpoint (epoch {epoch}) is kept in {ckpt.directory}'
              if ckpt.latest_epoch() is not None else 'no epoch had finished, so no checkpoint')
      raise errors.MonolocError(
          f'non-finite loss at epoch {epoch + 1}, step {step_in_epoch} '
          f'(seed {seeds[seed_i]}); training stopped; {kept}')
    train_s = time.time() - t0
    train_time += train_s
    dev_acc = dev_accuracy(programs, state.params, data, config)
    was_stopped = tracker.stopped.copy()
    improved = tracker.update(dev_acc, config)
    best_params = _stack_where(improved, state.params, best_params)
    record = {'epoch': tracker.epoch, 'loss': (loss_sum / np.maximum(tokens, 1)).tolist(),
              'dev_accuracy': (100 * dev_acc).tolist(), 'lr': tracker.lr.tolist(),
              'improved': improved.tolist(), 'stopped': (tracker.stopped & ~was_stopped).tolist(),
              'train_s': train_s, 'epoch_s': time.time() - t0}
    with history_path.open('a') as f:
      f.write(json.dumps(record) + '\n')
    ckpt.save(tracker.epoch, {'state': state, 'best_params': best_params,
                              'tracker': tracker.to_tree()})
    logging.info('epoch %d  loss %s  dev acc %s  lr %s  %.1fs (train %.1fs)', tracker.epoch,
                 np.array2string(loss_sum / np.maximum(tokens, 1), precision=4),
                 np.array2string(100 * dev_acc, precision=2), tracker.lr, record['epoch_s'],
                 train_s)
    if config.progress:
      print(f"epoch {tracker.epoch:3d}  loss {np.mean(record['loss']):.4f}  dev acc "
            f"{', '.join(f'{a:.1f}' for a in record['dev_accuracy'])}%  "
            f"lr {', '.join(f'{x:.2g}' for x in tracker.lr)}  {record['epoch_s']:.1f}s",
            flush=True)
  ckpt.wait()

  t_eval = time.time()
  test = evaluate_splits(programs, best_params, data, config)
  results = {
      'task': config.task, 'variant': config.variant, 'seeds': seeds,
      'dev_metric': config.dev_metric,
      'test': test,
      'dev': {'best_accuracy_per_seed': (100 * tracker.best_dev).tolist(),
              'best_epoch_per_seed': (tracker.best_epoch + 1).tolist()},
      'epochs': tracker.epoch,
      'steps_per_epoch': steps_per_epoch,
      'wall_time_s': time.time() - t_start,
      'train_time_s_this_process': train_time,
      'eval_time_s': time.time() - t_eval,
      'config': config.to_dict(),
      'versions': _versions(),
  }
  _write_json(workdir / 'results.json', results)
  return results


def restore_for_eval(workdir: str):
  """Loads config, vocabulary, model programs and best parameters of a finished run."""
  workdir = pathlib.Path(workdir)
  for name in ('config.json', 'vocab.json'):
    if not (workdir / name).exists():
      raise errors.MonolocError(f'{workdir} has no {name}: not a monoloc_jax run directory')
  config = ml_collections.ConfigDict(json.loads((workdir / 'config.json').read_text()))
  vocab = Vocabulary.load(workdir / 'vocab.json')
  model = make_model(config, vocab)
  programs = make_programs(model, make_optimizer(config))
  dummy = jnp.ones((1, 1), jnp.int32)
  keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds_of(config)])
  params, _ = jax.eval_shape(programs.init, keys, dummy, jnp.ones((1,), jnp.int32), dummy)
  ckpt = checkpointing.Checkpointer(workdir / 'checkpoints')
  best = ckpt.restore_best_params(params)
  if best is None:
    raise errors.MonolocError(f'{workdir} has no checkpoint to evaluate')
  return config, vocab, programs, best


def evaluate(workdir: str, config_overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
  """Re-scores an existing workdir's best checkpoint on the test splits."""
  config, vocab, programs, params = restore_for_eval(workdir)
  if config_overrides:
    config.update(config_overrides)
  data = load_data(config, vocab=vocab, with_train=False)
  t0 = time.time()
  test = evaluate_splits(programs, params, data, config)
  path = pathlib.Path(workdir) / 'results.json'
  results = json.loads(path.read_text()) if path.exists() else {
      'task': config.task, 'variant': config.variant, 'seeds': seeds_of(config),
      'config': config.to_dict()}
  results['test'] = {**results.get('test', {}), **test}
  results['eval_time_s'] = time.time() - t0
  results.setdefault('wall_time_s', results['eval_time_s'])
  results['versions'] = _versions()
  _write_json(path, results)
  return results


class Decoded(NamedTuple):
  """One greedy decode, for inspection and plots.

  source/output: tokens (output cut at `<eos>`); attention: [len(output) + 1,
  len(source) + 2] weights over START, the source tokens and END, one row per
  output token and one for `<eos>`; aux: per-step values [len(output) + 1]
  ('mu', 'sigma', 'step', 'mix' where the variant has them; mu and sigma in
  normalised position units) and 'direction' (alpha_dir, a float).
  """
  source: Tuple[str, ...]
  output: Tuple[str, ...]
  attention: np.ndarray
  aux: Dict[str, Any]


def decode_with_attention(workdir: str, inputs: Sequence[str], seed_index: int = 0,
                          max_steps: int = 0) -> List[Decoded]:
  """Greedy-decodes whitespace-tokenised `inputs` with one seed's best parameters."""
  config, vocab, programs, params = restore_for_eval(workdir)
  if not 0 <= seed_index < config.seeds:
    raise errors.MonolocError(f'seed_index {seed_index} out of range; the run has '
                              f'{config.seeds} seed(s)')
  params = jax.tree_util.tree_map(lambda x: x[seed_index:seed_index + 1], params)
  model = make_model(config, vocab)
  greedy = jax.jit(lambda p, src, n, steps: model.apply({'params': p}, src, n, steps,
                                                        method=model.greedy),
                   static_argnums=3)
  out = []
  for text in inputs:
    tokens = tuple(text.split())
    if not tokens:
      raise errors.MonolocError('an input to decode is empty')
    ids, n_unk = vocab.encode_with_unk_count(tokens)
    if n_unk:
      logging.warning('%d input tokens are not in the vocabulary and map to <unk>', n_unk)
    steps = max_steps or ip.bucket_length(5 * len(ids) + 10)
    one = jax.tree_util.tree_map(lambda x: x[0], params)
    res = greedy(one, np.asarray([ids], np.int32), np.asarray([len(ids)], np.int32), steps)
    decoded = vocab.decode(np.asarray(res.tokens)[0].tolist())
    rows = min(len(decoded) + 1, steps)
    aux = {k: np.asarray(v)[0, :rows] for k, v in res.aux.items() if k != 'direction'}
    aux['direction'] = float(np.asarray(res.aux['direction'])[0])
    out.append(Decoded(tokens, decoded, np.asarray(res.attention)[0, :rows, :len(ids) + 2], aux))
  return out


def predict(workdir: str, inputs: Sequence[str], max_steps: int = 0):
  """Greedy-decodes `inputs` with seed 0's best parameters.

  Returns, per input, (output tokens, attended source position per output
  token and `<eos>`: the argmax, as a 0-based source index; -1 = START, n = END).
  """
  return [(d.output, (d.attention.argmax(-1) - 1).tolist())
          for d in decode_with_attention(workdir, inputs, max_steps=max_steps)]


def validate_config(config) -> None:
  """Checks every field a user can set; raises a one-line MonolocError."""
  if config.task not in tasks.TASKS:
    raise errors.unknown_name('task', config.task, tasks.TASKS)
  variants.get(config.variant)
  checks = [
      ('seeds', config.seeds >= 1, 'an integer >= 1'),
      ('seed', config.seed >= 0, 'an integer >= 0'),
      ('batch_size', config.batch_size >= 1, 'an integer >= 1'),
      ('eval_batch_size', config.eval_batch_size >= 1, 'an integer >= 1'),
      ('learning_rate', math.isfinite(config.learning_rate) and config.learning_rate > 0,
       'a positive number'),
      ('max_epochs', config.max_epochs >= 1, 'an integer >= 1'),
      ('dropout', 0.0 <= config.dropout < 1.0, 'in [0, 1)'),
      ('grad_clip', config.grad_clip > 0, 'a positive number'),
      ('lr_factor', 0 < config.lr_factor <= 1, 'in (0, 1]'),
      ('train_size', config.train_size >= 0, 'an integer >= 0 (0 = all)'),
      ('eval_size', config.eval_size >= 0, 'an integer >= 0 (0 = all)'),
      ('hidden_dim', config.hidden_dim >= 2 and config.hidden_dim % 2 == 0,
       'an even integer >= 2'),
      ('num_layers', config.num_layers >= 1, 'an integer >= 1'),
      ('perfect_dev_patience', config.perfect_dev_patience >= 0, 'an integer >= 0 (0 = off)'),
  ]
  for name, ok, want in checks:
    if not ok:
      raise errors.MonolocError(f'bad value for config.{name}: {getattr(config, name)!r}; '
                                f'it must be {want}')
  if config.dev_metric not in ('greedy', 'teacher_forced'):
    raise errors.MonolocError(f"bad value for config.dev_metric: {config.dev_metric!r}; "
                              "valid: greedy, teacher_forced")
  resolve_test_splits(config)
