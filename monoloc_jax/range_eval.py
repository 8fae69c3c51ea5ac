"""Range evaluation: a trained run scored at every length of a range.

The protocol of Delétang et al. (2023) and Ruoss et al. (2023): draw
`samples` fresh examples at each length lo, lo + 1, ..., hi from the task's
generator (`tasks.sample`, a fixed seed, the run's training sources
excluded where the task makes others at that length: Lookup's 64 sources of
length 3 are all in training, and range.json's `lengths_with_training_examples`
names such lengths), greedy-decode them with every seed of the run at once, and score
each length and seed: exact-match sequence accuracy, per-token accuracy
(`metrics.token_accuracy`) and mean edit distance.

    monoloc-train --mode=range --workdir=RUN --config.range_lengths=1:120
    from monoloc_jax import range_eval
    result = range_eval.range_evaluate('RUN', '1:120', samples=50)

Compiles are bounded: lengths are grouped into at most `MAX_PROGRAMS` buckets
(`plan_buckets`), each decoded in one program shape (batch size, source
width, decode steps); rows of several lengths share a batch, each masked by
its own length. A length's predictions are read up to its own decode bound
(its longest target, `<eos>` included), so the grouping changes no score.

Files written into the run directory: `range.json` (`RANGE_JSON`),
`range.csv` and `range.png`.
"""

import csv
import pathlib
import time
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import jax
import numpy as np

from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import input_pipeline as ip
from monoloc_jax import logs
from monoloc_jax import metrics
from monoloc_jax import multiseed
from monoloc_jax import precision
from monoloc_jax import rundir
from monoloc_jax import sharding
from monoloc_jax import tasks
from monoloc_jax.vocab import Vocabulary

RANGE_JSON = 'range.json'
RANGE_CSV = 'range.csv'
RANGE_PNG = 'range.png'
# The default range is 1:L, L = DEFAULT_FACTOR x the longest training length, at most
# DEFAULT_MAX_LENGTH (Delétang et al. train on 1-40 and test on 41-500).
DEFAULT_FACTOR = 10
DEFAULT_MAX_LENGTH = 500
# The most programs (bucket shapes) one range evaluation compiles.
MAX_PROGRAMS = 10
# A compile costs about as much time as decoding this many rows x steps (2-core CPU,
# the small GRU model); `plan_buckets` takes another bucket only where it saves more.
COMPILE_ROW_STEPS = 200_000
# A bucket's batch has at most this many rows x source width (and at most
# config.eval_batch_size rows, at least MIN_BATCH): on a 2-core CPU, 32 rows of
# 480 tokens decode 2.3x as fast per row as 256 rows (the state stays in cache).
BATCH_ROW_TOKENS = 16384
MIN_BATCH = 16
# `horizon`: the median sequence accuracy (%) every length up to it must reach.
HORIZON_ACCURACY = 90.0
# The seed of the drawn examples (fixed: every run of a task sees the same ones).
SAMPLE_SEED = 2023
# Config fields that --mode=range may set; nothing else changes what it computes.
RANGE_OVERRIDES = ('range_lengths', 'range_samples', 'eval_batch_size', 'progress')
METRIC_NAMES = ('accuracy', 'token_accuracy', 'edit_distance')


def default_range(task) -> Tuple[int, int]:
  """(lo, hi) of the task's default range: its `test_lengths` where it states them
  (the Chomsky-hierarchy tasks: 41-500); else lo = max(1, the shortest length the
  task makes), hi = min(DEFAULT_MAX_LENGTH, DEFAULT_FACTOR x its longest training
  length)."""
  spec = tasks.get(task)
  lo = max(1, _min_length(spec))
  if spec.test_lengths is not None:
    return max(lo, spec.test_lengths[0]), max(lo, spec.test_lengths[1])
  if spec.train_lengths is None:
    return lo, lo
  return lo, max(lo, min(DEFAULT_MAX_LENGTH, int(DEFAULT_FACTOR * spec.train_lengths[1])))


def _min_length(spec: tasks.TaskSpec) -> int:
  if spec.sampler is None:
    tasks.sample(spec, 1, 0)          # the task's one-line "has no length axis" error
  return spec.sampler.min_length


def parse_range(text: str, task) -> List[int]:
  """The lengths of 'lo:hi' (both included; '' = `default_range`).

  A malformed range, lo < 1, lo > hi or lo below the task's shortest length is a
  one-line MonolocError; so is a task without a length axis (SCAN, CFQ).
  """
  spec = tasks.get(task)
  least = max(1, _min_length(spec))
  text = '' if text is None else str(text).strip()
  if not text:
    lo, hi = default_range(spec)
    return list(range(lo, hi + 1))
  parts = text.split(':')
  ok = len(parts) == 2 and all(p.strip().isdigit() for p in parts)
  if ok:
    lo, hi = (int(p) for p in parts)
    ok = least <= lo <= hi
  if not ok:
    raise errors.MonolocError(
        f"bad value for config.range_lengths: {text!r}; it must be 'lo:hi' with "
        f"{least} <= lo <= hi (task {spec.name}: lengths >= {least} "
        f"{spec.length_unit})".replace(' )', ')'))
  return list(range(lo, hi + 1))


def check_samples(samples: Any) -> int:
  """config.range_samples as an int >= 1 (else a one-line MonolocError)."""
  if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
    raise errors.MonolocError(f'bad value for config.range_samples: {samples!r}; it must be '
                              'an integer >= 1')
  return int(samples)


def draw(config, lengths: Sequence[int], samples: int,
         exclude: Sequence[tasks.Example] = ()
         ) -> Tuple[Dict[int, List[tasks.Example]], List[int]]:
  """({length: up to `samples` examples}, the lengths drawn from `exclude` too).

  The examples come from the task's generator (`SAMPLE_SEED`), none with a source in
  `exclude` (the run's training split), fewer where fewer exist; at a length where
  the training split holds every example the task makes (Lookup's shortest inputs),
  they are drawn from all of them, and that length is in the second list."""
  by_length: Dict[int, set] = {}
  for example in exclude:
    for n in tasks.lengths_of(config.task, example):
      by_length.setdefault(n, set()).add(tuple(example.source))
  def sample(n: int, excluded) -> List[tasks.Example]:
    return tasks.sample(config.task, n, samples, seed=SAMPLE_SEED, exclude=excluded,
                        data_seed=config.data_seed, data_dir=config.data_dir or None)
  drawn = {n: sample(n, by_length.get(n, ())) for n in lengths}
  seen = [n for n in lengths if not drawn[n] and by_length.get(n)]
  for n in seen:
    drawn[n] = sample(n, ())
  return drawn, seen


class Bucket(NamedTuple):
  """Lengths decoded in one program shape: [batch, src_width] sources, `steps` steps."""
  lengths: Tuple[int, ...]
  src_width: int
  steps: int
  batch: int = 0           # rows per batch (`batch_rows`); 0 = not yet chosen


def batch_rows(src_width: int, most: int) -> int:
  """Rows per batch of a bucket: the largest power of two with rows x src_width <=
  BATCH_ROW_TOKENS, within [min(MIN_BATCH, most), most]."""
  rows = 1 << max(0, (BATCH_ROW_TOKENS // max(src_width, 1)).bit_length() - 1)
  return max(min(MIN_BATCH, most), min(most, rows))


def plan_buckets(rows: Mapping[int, int], src_width: Mapping[int, int],
                 steps: Mapping[int, int], max_programs: int = MAX_PROGRAMS,
                 compile_cost: float = COMPILE_ROW_STEPS) -> List[Bucket]:
  """Groups lengths into at most `max_programs` buckets.

  Lengths sorted by their decode bound `steps` are cut into contiguous buckets; a
  bucket decodes all its rows for its longest bound. The cut minimises
      sum over buckets (rows x steps) + compile_cost x (number of buckets)
  (exactly, by dynamic programming): the padded decode work plus the compiles.
  """
  order = sorted(rows, key=lambda n: (steps[n], src_width[n], n))
  m = len(order)
  if m == 0:
    return []
  need = np.array([steps[n] for n in order], np.float64)
  cum = np.concatenate([[0.0], np.cumsum([rows[n] for n in order])])
  k_max = min(max_programs, m)
  # best[k][j]: least work covering order[:j] with k buckets; cut[k][j]: the last start.
  best = np.full((k_max + 1, m + 1), np.inf)
  cut = np.zeros((k_max + 1, m + 1), np.int64)
  best[0, 0] = 0.0
  for k in range(1, k_max + 1):
    for j in range(1, m + 1):
      starts = np.arange(j)                            # the bucket is order[i:j]
      work = best[k - 1, starts] + (cum[j] - cum[starts]) * need[j - 1]
      i = int(np.argmin(work))
      best[k, j], cut[k, j] = work[i], i
  totals = best[1:, m] + compile_cost * np.arange(1, k_max + 1)
  k = int(np.argmin(totals)) + 1
  spans, j = [], m
  while k > 0:
    i = int(cut[k, j])
    spans.append(order[i:j])
    j, k = i, k - 1
  return [Bucket(tuple(sorted(span)), max(src_width[n] for n in span),
                 max(steps[n] for n in span)) for span in reversed(spans)]


def tokens_only(programs: inference.EvalPrograms) -> Callable:
  """The greedy program without its attention output: (params, src, src_len, steps)
  -> tokens [N, B, steps]. Its jit cache counts the programs compiled."""
  return jax.jit(lambda params, src, src_len, steps: programs.greedy(
      params, src, src_len, steps)[0], static_argnums=(3,))


def fill_batch(bucket: Bucket, chunk: Sequence[Tuple[int, int]],
               splits: Mapping[int, ip.EncodedSplit]) -> Tuple[np.ndarray, np.ndarray]:
  """One batch of `bucket`: sources [batch, src_width] and lengths [batch] of the rows
  `chunk` ((length, index) pairs); filler rows repeat the chunk's first row."""
  src = np.zeros((bucket.batch, bucket.src_width), np.int32)
  src_len = np.zeros((bucket.batch,), np.int32)
  for row, (n, i) in enumerate(list(chunk) + [chunk[0]] * (bucket.batch - len(chunk))):
    width = int(splits[n].src_len[i])
    src[row, :width] = splits[n].src[i, :width]
    src_len[row] = width
  return src, src_len


def decode_buckets(greedy: Callable, params, splits: Mapping[int, ip.EncodedSplit],
                   buckets: Sequence[Bucket], progress: bool = False, threads: int = 1
                   ) -> Tuple[Dict[int, np.ndarray], float]:
  """({length: tokens [N, n, steps of that length]} of every seed, first-call seconds).

  Each bucket's rows (its lengths' examples, in order) are cut into batches of
  exactly `bucket.batch` rows (filler rows repeat the bucket's first row and are
  dropped), padded to the bucket's source width and decoded for its steps. Each
  bucket's first batch runs alone, one after another (its compile and one run: the
  second value sums them, as the benchmark's compile_s counts); the other batches
  then run up to `threads` at a time from host threads (`multiseed.side_by_side`;
  `EvalPrograms.threads`), each batch's tokens the same either way.
  """
  n_seeds = jax.tree_util.tree_leaves(params)[0].shape[0]
  own = {n: int(s.tgt_len.max()) for n, s in splits.items()}
  out = {n: np.zeros((n_seeds, len(s), own[n]), np.int32) for n, s in splits.items()}
  jobs = []
  for bucket in buckets:
    where = [(n, i) for n in bucket.lengths for i in range(len(splits[n]))]
    for start in range(0, len(where), bucket.batch):
      jobs.append((bucket, start == 0, where[start:start + bucket.batch]))

  def run(bucket, first, chunk) -> float:
    src, src_len = fill_batch(bucket, chunk, splits)
    t0 = time.perf_counter()
    src, src_len = sharding.put_like(params, src, src_len)
    tok = sharding.to_host(greedy(params, src, src_len, bucket.steps))
    elapsed = time.perf_counter() - t0
    for row, (n, i) in enumerate(chunk):
      out[n][:, i] = tok[:, row, :own[n]]
    return elapsed if first else 0.0

  firsts = [job for job in jobs if job[1]]
  rest = [job for job in jobs if not job[1]]
  first_call_s = sum(multiseed.side_by_side(
      run, firsts, 1, lambda it: logs.progress(it, len(firsts), 'range (compiling)', progress)))
  multiseed.side_by_side(run, rest, threads,
                         lambda it: logs.progress(it, len(rest), 'range', progress))
  return out, first_call_s


def score(tokens: np.ndarray, split: ip.EncodedSplit, eos_id: int) -> List[Dict[str, float]]:
  """Per seed: accuracy and token_accuracy (%), mean edit_distance. tokens [N, n, T]."""
  return [{'accuracy': 100.0 * float(metrics.sequence_accuracy(t, split.tgt, eos_id).mean()),
           'token_accuracy': 100.0 * float(metrics.token_accuracy(t, split.tgt, eos_id).mean()),
           'edit_distance': float(metrics.edit_distances(t, split.tgt, eos_id).mean())}
          for t in tokens]


def horizon(lengths: Sequence[int], accuracy: Sequence[float],
            shortest_train: Optional[float] = None, seen: Sequence[int] = (),
            threshold: float = HORIZON_ACCURACY) -> Optional[int]:
  """The longest length h with accuracy >= threshold at every length of the range from
  its start to h; lengths below `shortest_train` (shorter than any training input) and
  the lengths in `seen` (whose every input is a training input, `draw`: they test
  fitting, not generalisation) are not required. None when the first required length
  falls short."""
  found = None
  skip = set(seen)
  for n, acc in zip(lengths, accuracy):
    if (shortest_train is not None and n < shortest_train) or n in skip:
      continue
    if acc < threshold:
      break
    found = n
  return found


def ood_score(lengths: Sequence[int], token_accuracy: Sequence[float],
              longest_train: Optional[float]) -> Optional[float]:
  """Mean per-token accuracy (%) over the lengths above the longest training length
  (the papers' out-of-distribution score); None when the range has none."""
  if longest_train is None:
    return None
  above = [a for n, a in zip(lengths, token_accuracy) if n > longest_train]
  return float(np.mean(above)) if above else None


def evaluate_lengths(programs: inference.EvalPrograms, params, vocab: Vocabulary, config,
                     lengths: Sequence[int], samples: int,
                     exclude: Sequence[tasks.Example] = (), progress: bool = False,
                     seeds: Optional[Sequence[int]] = None) -> Dict[str, Any]:
  """Range evaluation of `params` [N, ...] (every seed at once); the range.json dict.

  lengths: the lengths to score (`parse_range`); exclude: the training examples.
  """
  t0 = time.time()
  drawn, seen = draw(config, lengths, samples, exclude)
  draw_s = time.time() - t0
  empty = [n for n, ex in drawn.items() if not ex]
  if empty:
    raise errors.MonolocError(f'task {config.task} makes no examples at length {empty[0]}')
  source_eos = ip.source_eos(config)
  splits = {n: ip.encode_split(ex, vocab, source_eos) for n, ex in drawn.items()}
  buckets = plan_buckets({n: len(s) for n, s in splits.items()},
                         {n: int(s.src_len.max()) for n, s in splits.items()},
                         {n: int(s.tgt_len.max()) for n, s in splits.items()})
  buckets = [b._replace(batch=batch_rows(b.src_width, config.eval_batch_size))
             for b in buckets]
  greedy = tokens_only(programs)
  t1 = time.time()
  tokens, first_call_s = decode_buckets(greedy, params, splits, buckets, progress,
                                        programs.threads)
  decode_s = time.time() - t1
  per_length = {n: score(tokens[n], splits[n], vocab.eos_id) for n in lengths}
  n_seeds = len(next(iter(per_length.values())))
  spec = tasks.get(config.task)
  train_lengths = list(spec.train_lengths) if spec.train_lengths is not None else None
  result: Dict[str, Any] = {'task': config.task, 'variant': config.variant,
                            'lengths': list(lengths),
                            'samples': [len(splits[n]) for n in lengths],
                            'lengths_with_training_examples': seen}
  for key in METRIC_NAMES:
    result[key] = [float(np.median([s[key] for s in per_length[n]])) for n in lengths]
  result['per_seed'] = {
      'seeds': list(seeds) if seeds is not None else list(range(n_seeds)),
      **{key: [[per_length[n][i][key] for n in lengths] for i in range(n_seeds)]
         for key in METRIC_NAMES}}
  result['train_lengths'] = train_lengths
  result['dev_lengths'] = _dev_lengths(spec)
  result['length_unit'] = spec.length_unit
  result['horizon'] = horizon(lengths, result['accuracy'],
                              train_lengths[0] if train_lengths else None, seen)
  result['ood_score'] = ood_score(lengths, result['token_accuracy'],
                                  train_lengths[1] if train_lengths else None)
  result['compiled_programs'] = int(greedy._cache_size())   # pylint: disable=protected-access
  result['buckets'] = [{'lengths': [b.lengths[0], b.lengths[-1]], 'src_width': b.src_width,
                        'steps': b.steps, 'batch': b.batch} for b in buckets]
  result['sample_seed'] = SAMPLE_SEED
  result['draw_s'] = draw_s
  result['decode_s'] = decode_s            # compiles included
  result['first_call_s'] = first_call_s    # each bucket's first batch: compile + one run
  result['wall_time_s'] = time.time() - t0
  return result


def _dev_lengths(spec) -> Optional[List[float]]:
  from monoloc_jax import viz  # pylint: disable=g-import-not-at-top
  span = viz.dev_range(spec)
  return list(span) if span is not None else None


def range_evaluate(workdir: str, lengths: Optional[str] = None, samples: Optional[int] = None,
                   config_overrides: Optional[Mapping[str, Any]] = None,
                   report: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
  """Range-evaluates the best-dev parameters of every seed of the run in `workdir`.

  lengths: 'lo:hi' (default: config.range_lengths, '' = `default_range`); samples:
  examples per length (default: config.range_samples). config_overrides: values of
  `RANGE_OVERRIDES` (the launcher's --config.FIELD); any other field is refused.
  Writes range.json, range.csv and range.png into `workdir`; returns range.json's dict.
  """
  overrides = dict(config_overrides or {})
  rundir.refuse_overrides('range', overrides, RANGE_OVERRIDES)
  workdir = pathlib.Path(workdir)
  config = rundir.load_config(workdir)       # a clear error if this is no run directory
  config.update(overrides)
  length_list = parse_range(config.range_lengths if lengths is None else lengths, config.task)
  samples = check_samples(config.range_samples if samples is None else samples)
  with rundir.os_errors(f'cannot use the workdir {workdir}'), rundir.lock(workdir):
    config, vocab, model, params = inference.restore_for_eval(str(workdir))
    config.update(overrides)
    train = tasks.load_splits(config.task, ('train',), seed=config.data_seed,
                              data_dir=config.data_dir or None)['train']
    programs = inference.make_eval_programs(model, config.seed_strategy, precision.of(config))
    result = evaluate_lengths(programs, params, vocab, config, length_list, samples, train,
                              logs.progress_enabled(config), rundir.seeds_of(config))
    result['range_samples'] = samples
    result['versions'] = rundir.versions()
    rundir.write_json(workdir / RANGE_JSON, result)
    write_csv(workdir / RANGE_CSV, result)
    from monoloc_jax import viz  # pylint: disable=g-import-not-at-top
    viz.save(viz.plot_range(result), workdir / RANGE_PNG)
  if report is not None:
    report(summary(result, workdir))
  return result


def write_csv(path: pathlib.Path, result: Mapping[str, Any]) -> None:
  """One row per length: length, samples, the medians, then each seed's values."""
  seeds = result['per_seed']['seeds']
  header = ['length', 'samples', *METRIC_NAMES,
            *(f'{key}_seed{s}' for key in METRIC_NAMES for s in seeds)]
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.writer(f)
    writer.writerow(header)
    for j, n in enumerate(result['lengths']):
      writer.writerow([n, result['samples'][j], *(f'{result[k][j]:.4f}' for k in METRIC_NAMES),
                       *(f"{result['per_seed'][k][i][j]:.4f}" for k in METRIC_NAMES
                         for i in range(len(seeds)))])


def summary(result: Mapping[str, Any], workdir: Optional[pathlib.Path] = None) -> str:
  """What --mode=range prints: the range, horizon, OOD score, programs and time."""
  lengths = result['lengths']
  hz, ood = result['horizon'], result['ood_score']
  lines = [f"range evaluation of {result['variant']} on {result['task']}: lengths "
           f"{lengths[0]}-{lengths[-1]}, up to {max(result['samples'])} samples each, "
           f"{len(result['per_seed']['seeds'])} seed(s)",
           f"horizon (median accuracy >= {HORIZON_ACCURACY:g}% up to): "
           f"{'none' if hz is None else hz}; OOD per-token accuracy: "
           f"{'n/a' if ood is None else f'{ood:.1f}%'}",
           f"{result['compiled_programs']} compiled program(s); wall time "
           f"{result['wall_time_s']:.1f}s"]
  if workdir is not None:
    lines.append(f'written: {workdir / RANGE_JSON}, {RANGE_CSV}, {RANGE_PNG}')
  return '\n'.join(lines)


def load(workdir) -> Optional[Dict[str, Any]]:
  """The run's range.json, or None when it has none."""
  path = pathlib.Path(workdir) / RANGE_JSON
  return rundir.read_json(path, 'range result') if path.is_file() else None
