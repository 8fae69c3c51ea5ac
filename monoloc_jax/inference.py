"""Evaluation and decoding: greedy decoding of splits, metrics over seeds, and the
restore / evaluate / predict entry points for a finished run directory.

Everything here works on parameters with a leading seed axis [N, ...] (the
trainer's layout) and needs no optimizer.
"""

import pathlib
import time
from typing import (Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence,
                    Set, Tuple)

import jax
import jax.numpy as jnp
import numpy as np

from monoloc_jax import backbones
from monoloc_jax import checkpointing
from monoloc_jax import compile_ahead
from monoloc_jax import errors
from monoloc_jax import input_pipeline as ip
from monoloc_jax import metrics
from monoloc_jax import multiseed
from monoloc_jax import precision
from monoloc_jax import rundir
from monoloc_jax import sharding
from monoloc_jax import tasks
from monoloc_jax import validation
from monoloc_jax import variants
from monoloc_jax.vocab import Vocabulary

Array = jax.Array


class EvalPrograms(NamedTuple):
  """The jitted evaluation functions of a model, over a leading seed axis.

  greedy(params [N, ...], src [B, L], src_len [B], steps) -> (tokens [N, B, steps],
    attention [N, B, steps, L + 2]).
  teacher_forced_accuracy(params, batch) -> [N, B] bool: every target token is the argmax.
  threads: how many batches of a split are decoded side by side, from host threads
    (`multiseed.host_threads`: the cores under seed strategy 'threads', else 1).
  """
  greedy: Callable
  teacher_forced_accuracy: Callable
  threads: int = 1


def make_eval_programs(model: backbones.Model, seed_strategy: str = 'auto',
                       matmul_precision: str = precision.DEFAULT) -> EvalPrograms:
  """The evaluation programs of `model` over a leading seed axis (`multiseed`), their
  float32 products at `matmul_precision` (`precision.MATMUL_PRECISIONS`)."""
  pad = model.pad_id

  def greedy_one(params, src, src_len, steps):
    out = model.apply({'params': params}, src, src_len, steps, method=model.greedy)
    return out.tokens, out.attention

  def tf_one(params, batch: ip.Batch):
    out = model.apply({'params': params}, batch.src, batch.src_len, batch.tgt_in)
    pred = jnp.argmax(out.logits, -1)
    ok = (pred == batch.tgt_out) | (batch.tgt_out == pad)
    return jnp.all(ok, axis=-1)

  return EvalPrograms(
      greedy=jax.jit(precision.traced_under(
          multiseed.over_seeds(greedy_one, (0, None, None, None), seed_strategy),
          matmul_precision), static_argnums=(3,)),
      teacher_forced_accuracy=jax.jit(precision.traced_under(
          multiseed.over_seeds(tf_one, (0, None), seed_strategy), matmul_precision)),
      threads=multiseed.host_threads(seed_strategy))


def decode_split(programs: EvalPrograms, params, split: ip.EncodedSplit, batch_size: int,
                 vocab: Vocabulary, keep_attention: bool = False,
                 in_use: Iterable[Tuple[int, int]] = ()):
  """Greedy-decodes a split for every seed. Returns tokens [N, n, T] (and attention).

  in_use: the (source width, steps) of greedy programs compiled already (`ip.eval_shapes`).
  """
  n_seeds = jax.tree_util.tree_leaves(params)[0].shape[0]
  batches = ip.eval_batches(split, batch_size, vocab.sos_id, in_use)
  width = max(steps for _, _, steps in batches)
  tokens = np.zeros((n_seeds, len(split), width), np.int32)
  attention = None
  if keep_attention:
    s_max = max(b.src.shape[1] for _, b, _ in batches) + 2
    attention = np.zeros((n_seeds, len(split), width, s_max), np.float32)
  def decode(idx, batch, steps):
    src, src_len = sharding.put_like(params, batch.src, batch.src_len)
    tok, att = programs.greedy(params, src, src_len, steps)
    tokens[:, idx, :steps] = sharding.to_host(tok)[:, :len(idx)]
    if keep_attention:
      attention[:, idx, :steps, :att.shape[-1]] = sharding.to_host(att)[:, :len(idx)]
  multiseed.side_by_side(decode, batches, programs.threads)
  return tokens, attention


def dev_accuracy(programs: EvalPrograms, params, data: ip.TaskData, config) -> np.ndarray:
  """Per-seed dev sequence accuracy (fraction): greedy or teacher-forced (config.dev_metric)."""
  if config.dev_metric == 'teacher_forced':
    def score(idx, batch, _):
      batch = ip.Batch(*sharding.put_like(params, *batch))
      return sharding.to_host(programs.teacher_forced_accuracy(params, batch))[:, :len(idx)]
    correct = multiseed.side_by_side(
        score, ip.eval_batches(data.dev, config.eval_batch_size, data.vocab.sos_id),
        programs.threads)
    return np.concatenate(correct, axis=1).mean(axis=1)
  tokens, _ = decode_split(programs, params, data.dev, config.eval_batch_size, data.vocab)
  return np.stack([metrics.sequence_accuracy(t, data.dev.tgt, data.vocab.eos_id)
                   for t in tokens]).mean(axis=1)


def aggregate(per_seed: List[Dict[str, float]]) -> Dict[str, Any]:
  """Median (the paper's Table 2 statistic), mean and std over seeds of every metric."""
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


def greedy_shapes(split: ip.EncodedSplit, batch_size: int,
                  in_use: Iterable[Tuple[int, int]] = ()) -> Set[Tuple[int, int]]:
  """The (source width, steps) of the greedy programs that decoding `split` runs."""
  return {(w, t) for _, w, t in ip.eval_shapes(split.src_len, split.tgt_len, batch_size,
                                                 in_use)}


def dev_greedy_shapes(data: ip.TaskData, config) -> Set[Tuple[int, int]]:
  """The greedy programs training compiles for the dev split (none when config.dev_metric
  is 'teacher_forced'): `evaluate_splits`' `in_use` after training."""
  if config.dev_metric != 'greedy':
    return set()
  return greedy_shapes(data.dev, config.eval_batch_size)


def _one_batch_per_shape(batches: Iterable[Tuple[np.ndarray, ip.Batch, int]]
                         ) -> List[Tuple[ip.Batch, int]]:
  seen: Dict[Tuple[int, int], Tuple[ip.Batch, int]] = {}
  for _, batch, steps in batches:
    seen.setdefault((batch.src.shape[1], steps), (batch, steps))
  return list(seen.values())


def _splits_with_compiled(data: ip.TaskData, batch_size: int,
                          in_use: Iterable[Tuple[int, int]]
                          ) -> Iterable[Tuple[str, ip.EncodedSplit, Set[Tuple[int, int]]]]:
  """Each test split in order, with the greedy shapes compiled before it: `in_use`, then
  each earlier split's (`greedy_shapes`)."""
  in_use = set(in_use)
  for name, split in data.tests.items():
    yield name, split, set(in_use)
    in_use |= greedy_shapes(split, batch_size, in_use)


def compile_decoding_ahead(ahead: compile_ahead.Ahead, programs: EvalPrograms, params,
                           data: ip.TaskData, config) -> Tuple[list, list]:
  """Queues on `ahead` every evaluation program a training run calls, in the order it
  calls them: the dev split's (greedy or teacher-forced, config.dev_metric), then each
  test split's greedy programs that `evaluate_splits` (with `dev_greedy_shapes` in use)
  does not find compiled already. Returns the futures of (dev's, the tests').

  params: the [N, ...] parameters, or their shapes (`jax.eval_shape`).
  """
  size, sos = config.eval_batch_size, data.vocab.sos_id
  if config.dev_metric == 'teacher_forced':
    dev = [ahead.compile(programs.teacher_forced_accuracy, params, batch)
           for batch, _ in _one_batch_per_shape(ip.eval_batches(data.dev, size, sos))]
  else:
    dev = [ahead.compile(programs.greedy, params, batch.src, batch.src_len, steps)
           for batch, steps in _one_batch_per_shape(ip.eval_batches(data.dev, size, sos))]
  tests = [ahead.compile(programs.greedy, params, batch.src, batch.src_len, steps)
           for _, split, in_use in _splits_with_compiled(data, size,
                                                         dev_greedy_shapes(data, config))
           for batch, steps in _one_batch_per_shape(ip.eval_batches(split, size, sos, in_use))
           if (batch.src.shape[1], steps) not in in_use]
  return dev, tests


def evaluate_splits(programs: EvalPrograms, params, data: ip.TaskData, config,
                    report: Optional[Callable[[str], None]] = None,
                    in_use: Iterable[Tuple[int, int]] = ()) -> Dict[str, Any]:
  """Per-seed and aggregated metrics for every test split.

  report: called with one line per split once it is scored (samples, seeds,
  median accuracy, seconds), e.g. `print`.
  in_use: the shapes of greedy programs the run has compiled (the dev split's, when
  training decoded it); each split may decode in one of them or in an earlier
  split's instead of compiling its own (`ip.eval_shapes`).
  """
  results = {}
  for name, split, compiled in _splits_with_compiled(data, config.eval_batch_size, in_use):
    t0 = time.time()
    want_att = split.gold is not None
    tokens, attention = decode_split(programs, params, split, config.eval_batch_size,
                                     data.vocab, keep_attention=want_att, in_use=compiled)
    per_seed = [metrics.summarize(tokens[i], split.tgt, data.vocab.eos_id,
                                  attention[i] if want_att else None, split.gold)
                for i in range(tokens.shape[0])]
    results[name] = aggregate(per_seed)
    results[name]['decode_s'] = time.time() - t0
    if split.n_unk:
      results[name]['n_unk'] = split.n_unk
    if report is not None:
      report(f"  {name:<12} {len(split)} samples x {tokens.shape[0]} seed(s): accuracy "
             f"{results[name]['accuracy']:.1f}% (median)  {results[name]['decode_s']:.1f}s")
  return results


def format_table(results: Dict[str, Any], config) -> str:
  """The printed length-generalization table (n: the samples each split was scored on)."""
  rows = [f"{variants.get(config.variant).display_name} on {config.task}, "
          f"{config.seeds} seed(s) (accuracy: median over seeds)",
          f"{'split':<12}{'n':>6}{'acc %':>8}{'mean±std':>16}{'SeqAccBE %':>12}{'edit':>8}"
          + (f"{'att.loss':>10}" if any('attention_loss' in r for r in results.values()) else '')]
  for name, r in results.items():
    line = (f"{name:<12}{str(r.get('n', '?')):>6}{r['accuracy']:>8.1f}{r['accuracy_mean']:>9.1f}±{r['accuracy_std']:<6.1f}"
            f"{r['seq_acc_be']:>12.1f}{r['edit_distance']:>8.2f}")
    if 'attention_loss' in r:
      line += f"{r['attention_loss']:>10.3f}"
    rows.append(line)
  return '\n'.join(rows)


def abstract_params(model: backbones.Model, n_seeds: int):
  """Shapes/dtypes of a seed-stacked parameter tree [N, ...], computed without running."""
  dummy = jnp.ones((1, 1), jnp.int32)
  keys = jax.random.split(jax.random.PRNGKey(0), n_seeds)
  init = lambda key: backbones.init_params(model, key, dummy, jnp.ones((1,), jnp.int32))
  return jax.eval_shape(jax.vmap(init), keys)


def restore_for_eval(workdir: str):
  """Loads config, vocabulary, model and best parameters of a run (no optimizer is built).

  Returns (config, vocab, model, params). A run trains `config.seeds` seeds together,
  so every leaf of `params` has a leading seed axis [N, ...]: index i holds the
  best-dev parameters of model seed `config.seed + i` (`rundir.seeds_of(config)`).
  `model.apply` takes one seed's tree: `jax.tree_util.tree_map(lambda x: x[i], params)`,
  or use `restore_seed`, which picks the best-dev seed and does this.
  """
  workdir = pathlib.Path(workdir)
  with rundir.os_errors(f'cannot read the workdir {workdir}'):
    config = rundir.load_config(workdir)
    if config.task in tasks.TASKS:    # a task defined outside the registry is the caller's
      validation.validate(config)
    if not (workdir / rundir.VOCAB).exists():
      raise errors.MonolocError(f'{workdir} has no {rundir.VOCAB}: not a monoloc_jax run '
                                'directory')
    vocab = Vocabulary.load(workdir / rundir.VOCAB)
    model = backbones.from_config(config, vocab)
    ckpt = checkpointing.Checkpointer(workdir / rundir.CHECKPOINTS, read_only=True)
    best = ckpt.restore_best_params(abstract_params(model, config.seeds),
                                    vocab_path=workdir / rundir.VOCAB)
  if best is None:
    raise errors.MonolocError(f'{workdir} has no checkpoint to evaluate')
  return config, vocab, model, best


# Config fields that `evaluate` may change: which test splits, how many samples of
# each, and the batch size. Nothing else changes what a run's parameters compute.
EVALUATE_OVERRIDES = ('test_splits', 'eval_size', 'eval_batch_size')


def evaluate(workdir: str, config_overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
  """Re-scores an existing workdir's best checkpoint on the test splits.

  config_overrides: values of `EVALUATE_OVERRIDES` (test_splits, eval_size,
  eval_batch_size) to use instead of the stored ones; any other field is refused.
  Each entry records its sample count `n`. A split scored on at least as many
  samples as results.json holds for it (or not yet there) replaces its entry under
  "test"; one scored on fewer (a smaller eval_size) is written under "partial_test"
  and the full result is kept (`replaces`). results.json's 'last_evaluation'
  records the overrides, the splits scored, and which were 'replaced' / 'partial'.
  """
  overrides = dict(config_overrides or {})
  rundir.refuse_overrides('evaluate', overrides, EVALUATE_OVERRIDES)
  rundir.load_config(pathlib.Path(workdir))     # a clear error if this is no run directory
  with rundir.os_errors(f'cannot use the workdir {workdir}'), rundir.lock(pathlib.Path(workdir)):
    return _evaluate(workdir, overrides)


def replaces(kept: Mapping[str, Any], new: Mapping[str, Any], eval_size: int) -> bool:
  """Whether a new evaluation of a split replaces the one results.json holds: when it
  rests on at least as many samples (`n`), or on the whole split (eval_size 0) where
  the kept entry does not say its n. Otherwise it is partial and is written beside it."""
  if kept.get('n') is None:
    return eval_size == 0
  return new.get('n', 0) >= kept['n']


def evaluation_notes(results: Mapping[str, Any]) -> List[str]:
  """One line per split of the last evaluation that was written under "partial_test"."""
  last = results.get('last_evaluation', {})
  return [f"{name}: scored on {results['partial_test'][name]['n']} samples; results.json "
          f"keeps the {results['test'][name].get('n', '?')}-sample result under \"test\" "
          'and writes this one under "partial_test"' for name in last.get('partial', [])]


def evaluation_report(results: Mapping[str, Any]) -> str:
  """What --mode=evaluate prints: the table of the splits it scored (each as written:
  under "test", or "partial_test" when it scored fewer samples), then `evaluation_notes`."""
  last = results['last_evaluation']
  scored = {k: results['partial_test' if k in last.get('partial', []) else 'test'][k]
            for k in last['splits']}
  return '\n'.join([format_table(scored, rundir.with_defaults(results['config'])),
                    *evaluation_notes(results)])


def _evaluate(workdir: str, overrides: Dict[str, Any]) -> Dict[str, Any]:
  existing = rundir.load_results(pathlib.Path(workdir))   # a damaged one is an error, kept
  config, vocab, model, params = restore_for_eval(workdir)
  if overrides:
    config.update(overrides)
    validation.validate(config)
  data = ip.load_data(config, vocab=vocab, with_train=False)
  t0 = time.time()
  programs = make_eval_programs(model, config.seed_strategy, precision.of(config))
  test = evaluate_splits(programs, params, data, config)
  results = existing or {
      'task': config.task, 'variant': config.variant, 'seeds': rundir.seeds_of(config),
      'config': config.to_dict()}
  full, partial = dict(results.get('test', {})), dict(results.get('partial_test', {}))
  replaced, written_partial = [], []
  for name, entry in test.items():
    if name in full and not replaces(full[name], entry, config.eval_size):
      partial[name] = entry
      written_partial.append(name)
    else:
      if name in full:
        replaced.append(name)
      full[name] = entry
  results['test'] = full
  if partial:
    results['partial_test'] = partial
  results['eval_time_s'] = time.time() - t0
  results['last_evaluation'] = {'overrides': overrides, 'splits': list(test),
                                'replaced': replaced, 'partial': written_partial}
  results.setdefault('wall_time_s', results['eval_time_s'])
  results['versions'] = rundir.versions()
  rundir.save_results(pathlib.Path(workdir), results)
  return results


class SeedChoice(NamedTuple):
  """Which seed of a run decodes: its index in the run, the model seed, its best dev
  accuracy (%; None when unknown) and why it was chosen (a phrase, e.g. 'the best of
  3 seeds' or '--seed_index=2')."""
  index: int
  seed: int
  dev_accuracy: Optional[float]
  reason: str

  def describe(self) -> str:
    """E.g. 'seed 1 (best dev accuracy 100.0%: the best of 3 seeds)'."""
    dev = '' if self.dev_accuracy is None else f'best dev accuracy {self.dev_accuracy:.1f}%: '
    return f'seed {self.seed} ({dev}{self.reason})'


def best_dev_per_seed(workdir: str) -> Optional[List[float]]:
  """Each seed's best dev accuracy (%): results.json's `dev.best_accuracy_per_seed`,
  or, for a run that has not finished, the best dev accuracy in metrics.jsonl up to
  the epoch the seed stopped. None when neither exists."""
  workdir = pathlib.Path(workdir)
  best = rundir.load_results(workdir).get('dev', {}).get('best_accuracy_per_seed')
  if best:
    return [float(x) for x in best]
  # The one reader of metrics.jsonl: a damaged line (a half line an older version could
  # leave, binary garbage) is skipped, as on resume.
  rows = [r for r in rundir.read_history(workdir)
          if isinstance(r.get('dev_accuracy'), list) and r['dev_accuracy']]
  width = len(rows[-1]['dev_accuracy']) if rows else 0
  rows = [r for r in rows if len(r['dev_accuracy']) == width]
  if not rows:
    return None
  dev = np.array([r['dev_accuracy'] for r in rows], np.float64)            # [epochs, N]
  stopped = np.array([r.get('stopped') if isinstance(r.get('stopped'), list)
                      and len(r['stopped']) == width else [False] * width for r in rows], bool)
  active = np.cumsum(stopped, axis=0) - stopped == 0                      # up to the stop epoch
  return np.where(active, dev, -np.inf).max(axis=0).tolist()


def choose_seed(workdir: str, config, seed_index: Optional[int] = None) -> SeedChoice:
  """The seed that decodes: `seed_index` when given, else the seed with the best dev
  accuracy (the lowest index among ties). Raises MonolocError for an index out of range."""
  seeds = rundir.seeds_of(config)
  best = best_dev_per_seed(workdir)
  if best is not None and len(best) != len(seeds):
    best = None
  if seed_index is None:
    index = int(np.argmax(best)) if best else 0
    reason = (f'the best of {len(seeds)} seeds' if best and len(seeds) > 1 else
              'the only seed' if len(seeds) == 1 else 'the first; no dev accuracy recorded')
  else:
    if not 0 <= seed_index < len(seeds):
      raise errors.MonolocError(
          f'seed_index {seed_index} out of range; the run has {len(seeds)} seed(s): valid '
          f'indices 0..{len(seeds) - 1} (seeds {", ".join(map(str, seeds))})')
    index, reason = seed_index, f'--seed_index={seed_index} of {len(seeds)} seeds'
  return SeedChoice(index, seeds[index], None if best is None else best[index], reason)


class RestoredSeed(NamedTuple):
  """One seed of a trained run, ready for `model.apply({'params': params}, ...)`.

  params: that seed's best-dev parameters (no seed axis); seed: the `SeedChoice`
  (index in the run, model seed, best dev accuracy, why it was chosen).
  """
  config: Any
  vocab: Vocabulary
  model: backbones.Model
  params: Any
  seed: SeedChoice


def restore_seed(workdir: str, seed_index: Optional[int] = None) -> RestoredSeed:
  """The best-dev seed of a run (or `seed_index`'s), without the seed axis.

  `restore_for_eval` returns every seed's parameters stacked on a leading axis;
  this picks one (`choose_seed`: the highest best dev accuracy, the lowest index
  among ties) and returns (config, vocab, model, params, seed).
  """
  config, vocab, model, params = restore_for_eval(workdir)
  choice = choose_seed(workdir, config, seed_index)
  one = jax.tree_util.tree_map(lambda x: x[choice.index], params)
  return RestoredSeed(config, vocab, model, one, choice)


# DecodeOutput.aux entries with no step axis ([B, ...]); every other entry is [B, T, ...].
# 'layer_direction' [B, L]: the Transformer's alpha_dir of every decoder layer.
PER_INPUT_AUX = ('direction', 'layer_direction')


class Decoded(NamedTuple):
  """One greedy decode, for inspection and plots.

  source/output: tokens (output cut at `<eos>`); attention: [len(output) + 1,
  len(source) + 2] weights over START, the source tokens and END, one row per
  output token and one for `<eos>`; aux: per-step values [len(output) + 1]
  ('mu', 'sigma', 'step', 'mix' where the variant has them; mu and sigma in
  normalised position units) and 'direction' (alpha_dir, a float); the Transformer
  backbone adds 'layer_direction' [L] and 'layer_attention' [len(output) + 1, L, H, S]
  and its per-step values are [len(output) + 1, L, H]; seed: the
  `SeedChoice` of the run's seed that decoded.
  """
  source: Tuple[str, ...]
  output: Tuple[str, ...]
  attention: np.ndarray
  aux: Dict[str, Any]
  seed: Optional[SeedChoice] = None   # which seed of the run decoded (None: not from a run)


def decode_with_attention(workdir: str, inputs: Sequence[str],
                          seed_index: Optional[int] = None,
                          max_steps: int = 0) -> List[Decoded]:
  """Greedy-decodes whitespace-tokenised `inputs` with one seed's best parameters.

  seed_index: which of the run's seeds (0 = config.seed); default: the seed with
  the best dev accuracy (`choose_seed`). Each `Decoded.seed` names the seed used.
  An input holding a reserved token (`<eos>`, ...) or one not in the vocabulary is a
  MonolocError (`Vocabulary.check_input`); a run whose sources ended in `<eos>`
  (`config.source_eos_tasks`) has it appended, as `Decoded.source` shows.
  """
  config, vocab, model, one, choice = restore_seed(workdir, seed_index)
  greedy = jax.jit(precision.traced_under(
      lambda p, src, n, steps: model.apply({'params': p}, src, n, steps, method=model.greedy),
      precision.of(config)), static_argnums=3)
  out = []
  for text in inputs:                        # every input is checked before any decodes
    if not text.split():
      raise errors.MonolocError('an input to decode is empty')
    vocab.check_input(text.split(), text=text,
                      vocab_path=str(pathlib.Path(workdir) / rundir.VOCAB))
  # A run trained on sources that end in a literal <eos> (`ip.source_eos`) gets one.
  marker = (vocab.tokens[vocab.eos_id],) if ip.source_eos(config) else ()
  for text in inputs:
    tokens = tuple(text.split()) + marker
    ids = vocab.encode(tokens)
    steps = max_steps or ip.bucket_length(5 * len(ids) + 10)
    res = greedy(one, np.asarray([ids], np.int32), np.asarray([len(ids)], np.int32), steps)
    decoded = vocab.decode(np.asarray(res.tokens)[0].tolist())
    rows = min(len(decoded) + 1, steps)
    aux = {k: np.asarray(v)[0, :rows] if k not in PER_INPUT_AUX else np.asarray(v)[0]
           for k, v in res.aux.items()}
    aux['direction'] = float(aux['direction'])
    out.append(Decoded(tokens, decoded, np.asarray(res.attention)[0, :rows, :len(ids) + 2], aux,
                       choice))
  return out


def attended_positions(decoded: Decoded) -> List[int]:
  """The attended source position of each output token and `<eos>`: the argmax, as a
  0-based source index; -1 = START, len(source) = END."""
  return (decoded.attention.argmax(-1) - 1).tolist()


def prediction_report(inputs: Sequence[str], decoded: Sequence[Decoded]) -> str:
  """What --mode=predict prints: the seed that decoded, then per input three lines:

    input : the input as given
    output: the output tokens
    attends: TOKEN@P(NAME) for each output token and the final <eos>, P its
             `attended_positions` entry and NAME the token there (START at -1, the
             source's tokens, END at len(source); '?' beyond).
  """
  lines = [f'decoding with {decoded[0].seed.describe()}']
  for text, d in zip(inputs, decoded):
    src = list(d.source)        # the input's tokens (and an <eos> the run's data had)
    names = ['START'] + src + ['END']
    lines += [f'input : {text}', f"output: {' '.join(d.output)}",
              'attends: ' + ' '.join(
                  f'{tok}@{p}({names[p + 1] if -1 <= p <= len(src) else "?"})'
                  for tok, p in zip(list(d.output) + ['<eos>'], attended_positions(d)))]
  return '\n'.join(lines)


def predict(workdir: str, inputs: Sequence[str], max_steps: int = 0,
            seed_index: Optional[int] = None):
  """Greedy-decodes `inputs` with the best-dev seed's (or `seed_index`'s) best parameters.

  Returns, per input, (output tokens, `attended_positions`). The seed used is
  `decode_with_attention(...)[i].seed`, as the launcher prints it.
  """
  return [(d.output, attended_positions(d))
          for d in decode_with_attention(workdir, inputs, seed_index=seed_index,
                                         max_steps=max_steps)]
