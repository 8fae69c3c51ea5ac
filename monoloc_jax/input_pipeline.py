"""Encoding and length-bucketed batching.

XLA compiles one program per batch shape, so batches come in a handful of
shapes. Training batches are grouped by target-length bucket (`BUCKETS`), and
every batch of a group is padded to the group's longest target and the split's
longest source: one shape per group, and no step spent on padding past the
longest example. Random batches (`bucketed=False`, the authors' procedure) are
padded like theirs, to the batch's own longest source and target, each rounded up
to a multiple of `RANDOM_WIDTH_MULTIPLE` (at most the split's longest): a few
shapes per split. Padding carries no loss and changes no valid position's output,
so widths change float rounding (and the shapes dropout masks are drawn for)
only. Evaluation batches are padded to `BUCKETS` lengths.

Training batches for several seeds at once (the vmapped multi-seed trainer)
must share one shape per step. So the *schedule* of buckets in an epoch (which
target-length bucket comes next) depends only on (schedule_seed, epoch), while
*which examples* fill each batch depends on (seed, epoch). A single-seed run of
seed s therefore sees exactly the batches seed s sees in a vmapped run.
"""

import dataclasses
import math
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from absl import logging

from monoloc_jax import errors
from monoloc_jax import tasks
from monoloc_jax.tasks.types import Example
from monoloc_jax.vocab import Vocabulary

# Padded lengths. Beyond the table, lengths round up to a multiple of 256.
BUCKETS: Tuple[int, ...] = (8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320,
                            384, 448, 512, 768, 1024)

# Random batches round their widths up to a multiple of this: 3 shapes or fewer on
# the paper's training splits (ReCopy's targets, 2 to 47 tokens, give widths 32, 40
# and 47 at batch 32), where the split's longest would pad ReCopy's average random
# batch (longest target 36) by 11 decoder steps.
RANDOM_WIDTH_MULTIPLE = 8

# How training batches are padded (config.train_widths, `train_batches`): 'bucket', to
# the widths of their bucket group (random batches: their own, `random_batch_widths`);
# 'widest', every batch to the split's longest source and target (one shape).
TRAIN_WIDTHS = ('bucket', 'widest')

# An evaluation split's batches share its widest shape when that costs at most this
# factor in positions (source width x steps) over their bucketed shapes (`eval_shapes`).
ONE_SHAPE_PADDING = 1.5


def bucket_length(n: int) -> int:
  """The smallest bucket >= n."""
  for b in BUCKETS:
    if n <= b:
      return b
  return int(math.ceil(n / 256) * 256)


@dataclasses.dataclass(frozen=True)
class EncodedSplit:
  """A split as padded id arrays (pad id 0).

  src: [n, N] source ids; src_len: [n].
  tgt: [n, T] target ids with `<eos>` appended; tgt_len: [n] (incl. `<eos>`).
  gold: [n, T] gold attention source index per target token (-1 = none), or None.
  n_unk: source/target tokens mapped to `<unk>` (not in the training vocabulary).
  """
  src: np.ndarray
  src_len: np.ndarray
  tgt: np.ndarray
  tgt_len: np.ndarray
  gold: Optional[np.ndarray]
  n_unk: int

  def __len__(self) -> int:
    return len(self.src_len)


def _pad(rows: Sequence[Sequence[int]], width: int, value: int = 0) -> np.ndarray:
  out = np.full((len(rows), max(width, 1)), value, np.int32)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def encode_split(examples: Sequence[Example], vocab: Vocabulary,
                 source_eos: bool = False) -> EncodedSplit:
  """Token ids for a list of Examples; targets get `<eos>`, and so do sources when
  `source_eos` (the authors' DeDupe data: a literal `<eos>` ends every input)."""
  enc = vocab.encode_examples(examples, target_eos=True)
  if source_eos:
    enc = enc._replace(sources=[s + [vocab.eos_id] for s in enc.sources])
  src_len = np.array([len(s) for s in enc.sources], np.int32)
  tgt_len = np.array([len(t) for t in enc.targets], np.int32)
  gold = None
  if examples and all(getattr(e, 'gold_attention', None) is not None for e in examples):
    gold = _pad([e.gold_attention for e in examples], int(tgt_len.max()), -1)
  return EncodedSplit(_pad(enc.sources, int(src_len.max(initial=1))), src_len,
                      _pad(enc.targets, int(tgt_len.max(initial=1))), tgt_len,
                      gold, enc.n_unk)


class Batch(NamedTuple):
  """A padded batch. Leading axes: [seeds, B] for training, [B] for evaluation.

  src [.., N], src_len [..], tgt_in [.., T] (`<sos>` y_1 .. y_{T-1}),
  tgt_out [.., T] (y_1 .. `<eos>`, pad elsewhere, incl. filler rows).
  """
  src: np.ndarray
  src_len: np.ndarray
  tgt_in: np.ndarray
  tgt_out: np.ndarray


def _make_batch(split: EncodedSplit, idx: np.ndarray, src_width: int,
                tgt_width: int, sos_id: int) -> Batch:
  """Rows `idx` (-1 = filler row that carries no loss) padded to the given widths.

  A filler row repeats the batch's first real row, which the widths were chosen to
  fit (`random_batch_widths`). Repeating the split's row 0 instead gave a filler row
  whose src_len exceeded a random batch's source width: its forward pass could turn
  NaN, and 0 * NaN put a NaN into the gradient."""
  real = idx >= 0
  safe = np.where(real, idx, idx[real][0] if real.any() else 0)
  src = np.zeros((len(idx), src_width), np.int32)
  n = min(src_width, split.src.shape[1])
  src[:, :n] = split.src[safe, :n]
  tgt_out = np.zeros((len(idx), tgt_width), np.int32)
  n = min(tgt_width, split.tgt.shape[1])
  tgt_out[:, :n] = split.tgt[safe, :n]
  tgt_out[~real] = 0
  tgt_in = np.concatenate([np.full((len(idx), 1), sos_id, np.int32), tgt_out[:, :-1]], 1)
  return Batch(src, split.src_len[safe], tgt_in, tgt_out)


def num_train_steps(split: EncodedSplit, batch_size: int, bucketed: bool = True) -> int:
  """Steps per epoch (the same for every seed)."""
  keys = _train_bucket_keys(split, bucketed)
  return int(sum(math.ceil(c / batch_size) for c in np.unique(keys, return_counts=True)[1]))


def _train_bucket_keys(split: EncodedSplit, bucketed: bool) -> np.ndarray:
  if not bucketed:
    return np.zeros(len(split), np.int32)
  return np.array([bucket_length(int(n)) for n in split.tgt_len], np.int32)


def train_widths(split: EncodedSplit,
                 groups: Dict[int, np.ndarray]) -> Tuple[int, Dict[int, int]]:
  """(source width, {group: target width}) of bucketed training batches: the
  split's longest source and each group's longest target (groups: {key: example
  indices}). Random batches take them as the caps of `random_batch_widths`."""
  return (int(split.src_len.max()),
          {k: int(split.tgt_len[ix].max()) for k, ix in groups.items()})


def random_batch_widths(split: EncodedSplit, idx: np.ndarray, src_cap: int,
                        tgt_cap: int) -> Tuple[int, int]:
  """(source, target) width of a random batch of rows `idx` (-1 = filler): the
  longest real source and target, each rounded up to a multiple of
  `RANDOM_WIDTH_MULTIPLE` and capped at `src_cap` / `tgt_cap`."""
  real = idx[idx >= 0]

  def up(n: int, cap: int) -> int:
    return min(cap, -(-n // RANDOM_WIDTH_MULTIPLE) * RANDOM_WIDTH_MULTIPLE)

  return (up(int(split.src_len[real].max()), src_cap),
          up(int(split.tgt_len[real].max()), tgt_cap))


def train_batches(split: EncodedSplit, batch_size: int, seeds: Sequence[int],
                  epoch: int, schedule_seed: int, sos_id: int,
                  bucketed: bool = True, widths: str = 'bucket') -> Iterator[Batch]:
  """One epoch of training batches for several seeds, stacked on axis 0.

  Examples are grouped by target-length bucket (or one group, when not
  `bucketed`); each seed shuffles each group with its own generator
  (seed, epoch); the order in which groups take turns is shuffled with
  (schedule_seed, epoch) and is shared by all seeds. A group's last batch is
  completed with filler rows that carry no loss. Widths: the group's longest
  target and the split's longest source (`train_widths`); random batches
  (`bucketed=False`): `random_batch_widths` of the rows of all seeds' batches of
  the step, which share one shape. widths='widest' (`TRAIN_WIDTHS`): every batch at
  the split's longest source and target instead; the batches' rows do not change.
  """
  if widths not in TRAIN_WIDTHS:
    raise ValueError(f'unknown train widths {widths!r}; valid: {", ".join(TRAIN_WIDTHS)}')
  keys = _train_bucket_keys(split, bucketed)
  groups = {int(k): np.flatnonzero(keys == k) for k in np.unique(keys)}
  src_width, tgt_widths = train_widths(split, groups)
  widest = src_width, int(split.tgt_len.max())
  schedule = np.concatenate([np.full(math.ceil(len(ix) / batch_size), k)
                             for k, ix in sorted(groups.items())])
  np.random.default_rng([schedule_seed, epoch, 7]).shuffle(schedule)
  # Per seed and group: a shuffled index list padded with -1 to whole batches.
  plans = []
  for seed in seeds:
    rng = np.random.default_rng([seed, epoch])
    plan = {}
    for k, ix in sorted(groups.items()):
      perm = rng.permutation(ix)
      pad = (-len(perm)) % batch_size
      plan[k] = np.concatenate([perm, np.full(pad, -1)]).reshape(-1, batch_size)
    plans.append(plan)
  cursor = {k: 0 for k in groups}
  for k in schedule:
    k = int(k)
    rows = [plan[k][cursor[k]] for plan in plans]
    cursor[k] += 1
    if widths == 'widest':
      shape = widest
    elif bucketed:
      shape = src_width, tgt_widths[k]
    else:
      shape = random_batch_widths(split, np.concatenate(rows), src_width, tgt_widths[k])
    batches = [_make_batch(split, r, *shape, sos_id) for r in rows]
    yield Batch(*(np.stack(parts) for parts in zip(*batches)))


def eval_shapes(src_len: np.ndarray, tgt_len: np.ndarray, batch_size: int,
                in_use: Iterable[Tuple[int, int]] = ()) -> List[Tuple[np.ndarray, int, int]]:
  """The batches of an evaluation split (lengths src_len [n], tgt_len [n]) as
  (example indices, source width, decode steps), sorted by length.

  Each batch takes bucketed widths: its longest source rounded up to a bucket (at most
  the split's longest source: a split of length-100 inputs is read at width 100, not
  128) and its longest target's bucket as steps. When giving every batch the split's
  widest shape instead costs at most `ONE_SHAPE_PADDING` times their positions
  (source width x steps, summed over the batches), they all take it: one compiled
  program for the split, where a spread of short lengths (test_iid: 3 shapes) costs a
  program for each (about 3 CPU s on the CPU VM) to save a fraction of a second of
  decoding (greedy decoding stops at the batch's longest output in any case).

  in_use: (source width, steps) of programs the run has already compiled (the dev
  split's, earlier test splits'). Every batch takes the smallest of them that holds
  the split's widest batch, when that costs at most `ONE_SHAPE_PADDING` times the
  positions chosen above: no new program (test_iid at 5-10 inside dev's 10-15 shape).
  """
  order = np.lexsort((src_len, tgt_len))
  longest_src = int(src_len.max())
  out = []
  for start in range(0, len(order), batch_size):
    idx = order[start:start + batch_size]
    out.append((idx, min(bucket_length(int(src_len[idx].max())), longest_src),
                bucket_length(int(tgt_len[idx].max()))))
  widest = max(w for _, w, _ in out), max(t for _, _, t in out)
  positions = sum(w * t for _, w, t in out)
  if len(out) * widest[0] * widest[1] <= ONE_SHAPE_PADDING * positions:
    out = [(idx,) + widest for idx, _, _ in out]
    positions = len(out) * widest[0] * widest[1]
  in_use = set(in_use)
  if not {(w, t) for _, w, t in out} <= in_use:
    holding = sorted((w * t, w, t) for w, t in in_use
                     if w >= widest[0] and t >= widest[1]
                     and len(out) * w * t <= ONE_SHAPE_PADDING * positions)
    if holding:
      out = [(idx,) + holding[0][1:] for idx, _, _ in out]
  return out


def eval_batches(split: EncodedSplit, batch_size: int, sos_id: int,
                 in_use: Iterable[Tuple[int, int]] = ()
                 ) -> List[Tuple[np.ndarray, Batch, int]]:
  """Evaluation batches sorted by length: (example indices, batch, decode steps).

  Every batch has exactly `batch_size` rows (filler rows repeat row 0 and are
  dropped by the caller via the indices); widths and steps as `eval_shapes` (with
  the run's compiled shapes `in_use`), so a whole split compiles one program or a few.
  """
  out = []
  for idx, src_width, steps in eval_shapes(split.src_len, split.tgt_len, batch_size, in_use):
    padded = np.concatenate([idx, np.full(batch_size - len(idx), -1)])
    out.append((idx, _make_batch(split, padded, src_width, steps, sos_id), steps))
  return out


# ---------------------------------------------------------------------------
# A task's splits, encoded for a run.
# ---------------------------------------------------------------------------
@dataclasses.dataclass
class TaskData:
  """A task's splits for one run: the vocabulary (from train) and encoded splits."""
  vocab: Vocabulary
  train: EncodedSplit
  dev: EncodedSplit
  tests: Dict[str, EncodedSplit]


def resolve_test_splits(config, task=None) -> Tuple[str, ...]:
  """A comma list of split names and groups, in order, without repeats: 'paper' -> the
  paper's length splits, 'all' -> every test split (e.g. 'test_iid,paper')."""
  task = config.task if task is None else task
  groups = {'paper': tuple(tasks.paper_length_splits(task)), 'all': tuple(tasks.test_splits(task))}
  valid = tasks.test_splits(task)
  names = []
  for item in (s.strip() for s in config.test_splits.split(',') if s.strip()):
    if item not in groups and item not in valid:
      raise errors.MonolocError(
          f"unknown test split {item!r} for task {getattr(task, 'name', task)!r}; valid: "
          f"{', '.join(valid)} (or 'paper', 'all')")
    names += groups.get(item, (item,))
  return tuple(dict.fromkeys(names))


def source_eos_tasks(config) -> Tuple[str, ...]:
  """The task names of `config.source_eos_tasks` (a comma list; '' = none)."""
  return tuple(t.strip() for t in config.source_eos_tasks.split(',') if t.strip())


def source_eos(config, task=None) -> bool:
  """Whether the run's sources end in `<eos>` (its task is in `source_eos_tasks`)."""
  task = config.task if task is None else task
  return getattr(task, 'name', task) in source_eos_tasks(config)


def _subsample(examples, n: int):
  return list(examples) if not n or n >= len(examples) else list(examples)[:n]


def load_data(config, vocab: Optional[Vocabulary] = None, with_train: bool = True,
              task=None) -> TaskData:
  """Loads and encodes the task's splits. The vocabulary comes from train.

  task: a task to use instead of the registry's `config.task` (see `tasks`).
  """
  task = config.task if task is None else task
  test_names = resolve_test_splits(config, task)
  names = (('train',) if with_train else ()) + ('dev',) + test_names
  loaded = tasks.load_splits(task, names, seed=config.data_seed,
                             data_dir=config.data_dir or None)       # each file read once
  train_ex = _subsample(loaded['train'], config.train_size) if with_train else []
  if vocab is None:
    vocab = Vocabulary.from_examples(train_ex)
  eos = source_eos(config, task)
  dev = encode_split(_subsample(loaded['dev'], config.eval_size), vocab, eos)
  tests = {s: encode_split(_subsample(loaded[s], config.eval_size), vocab, eos)
           for s in test_names}
  for name, split in [('dev', dev), *tests.items()]:
    if split.n_unk:
      logging.warning('%s: %d tokens not in the training vocabulary were mapped to <unk>',
                      name, split.n_unk)
  train = encode_split(train_ex, vocab, eos) if with_train else None
  return TaskData(vocab, train, dev, tests)
