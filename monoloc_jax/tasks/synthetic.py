"""The eight synthetic digit tasks (paper §2, Table 1 and App. A).

Three layers:

* `RULES[task](source) -> target`: pure functions mapping an input token
  sequence to its output (the task's definition, usable on any input).
* `DigitTask`: one task for the generator: its name, its fixed random-stream
  id, its rule and how an input is built from the drawn items. `DIGIT_TASKS`
  holds the eight of the paper; `DigitTask(...)` makes a new one.
* `generate(task, seed) -> {split: [Example, ...]}`: the data generator. All
  splits of one (task, seed) are generated together, train first, with one
  shared set of already-used inputs, so that inputs are distinct within every
  split and no input appears in two splits (in particular no dev/test input is
  in train). Each split draws from its own numpy Generator seeded with
  `(seed, task_id, SPLIT_SPECS[split].split_id)`, so the data is deterministic
  for a seed and differs between seeds.
* `sample(task, length, n, seed, exclude)`: examples at any item length
  (range evaluation), drawn as `generate` draws an input of that length, from
  a stream of their own; `item_lengths(task, source)` reads the length back.

The split sizes and lengths (`SPLIT_SPECS`) are the paper's (App. A: train
10,000 inputs of 5-10 items, dev 2,000 of 10-15, tests 2,000 each at 15, 30
and 100); the authors' code also makes `test_iid` (5-10 items) and lengths
20, 25 and 50, which are offered too.

"Length" is the number of *items* before repetition: for Inv ReCopy, Inv
Reverse ReCopy and DeDupe the input has more tokens than that.
"""

import dataclasses
import types
from typing import (AbstractSet, Callable, Dict, FrozenSet, List, Mapping,
                    Optional, Sequence, Tuple, Union)

import numpy as np

from monoloc_jax.errors import MonolocError
from monoloc_jax.errors import unknown_name
from monoloc_jax.tasks import sampling
from monoloc_jax.tasks.types import Example

# Bump whenever the generated data changes (it keys the on-disk cache).
GENERATOR_VERSION = 1

DIGITS: Tuple[str, ...] = tuple('0123456789')
_DIGIT_ARRAY = np.array(DIGITS)


@dataclasses.dataclass(frozen=True)
class SplitSpec:
  """Size and (inclusive) item-length range of one split."""
  split_id: int
  size: int
  min_length: int
  max_length: int


SPLIT_SPECS: Mapping[str, SplitSpec] = types.MappingProxyType({
    'train': SplitSpec(0, 10_000, 5, 10),
    'dev': SplitSpec(1, 2_000, 10, 15),
    'test_iid': SplitSpec(2, 2_000, 5, 10),
    'test_15': SplitSpec(3, 2_000, 15, 15),
    'test_20': SplitSpec(4, 2_000, 20, 20),
    'test_25': SplitSpec(5, 2_000, 25, 25),
    'test_30': SplitSpec(6, 2_000, 30, 30),
    'test_50': SplitSpec(7, 2_000, 50, 50),
    'test_100': SplitSpec(8, 2_000, 100, 100),
})
# Generation order (train first): also the order `splits()` reports.
SPLITS: Tuple[str, ...] = tuple(SPLIT_SPECS)
# The length splits the paper's tables report.
PAPER_SPLITS: Tuple[str, ...] = ('test_15', 'test_30', 'test_100')
# Item lengths of the training inputs, (shortest, longest).
TRAIN_LENGTHS: Tuple[int, int] = (SPLIT_SPECS['train'].min_length,
                                  SPLIT_SPECS['train'].max_length)
# The item length each evaluation split stands for: the middle of its range
# (7.5 for test_iid; N for test_N).
SPLIT_LENGTHS: Mapping[str, float] = types.MappingProxyType({
    name: (spec.min_length + spec.max_length) / 2
    for name, spec in SPLIT_SPECS.items() if name not in ('train', 'dev')})

# Repeat rule r(x): 1 if x <= 3, 3 if 4 <= x <= 6, 5 if x >= 7.
_REPEATS = np.array([1, 1, 1, 1, 3, 3, 3, 5, 5, 5], dtype=np.int64)
_REPEAT_OF: Mapping[str, int] = types.MappingProxyType(
    {digit: int(count) for digit, count in zip(DIGITS, _REPEATS)})
# DeDupe draws each item's repetition count uniformly from these.
DEDUPE_REPEATS: Tuple[int, ...] = (1, 3, 5)


# ------------------------------------------------------------------ rules ---


def repeat_count(token: str) -> int:
  """The repeat rule r(x) of ReCopy for one digit token."""
  count = _REPEAT_OF.get(token)
  if count is None:
    raise MonolocError(f'repeat rule needs a digit token 0-9, got {token!r}')
  return count


def _copy(source: Sequence[str]) -> Tuple[str, ...]:
  return tuple(source)


def _reverse_copy(source: Sequence[str]) -> Tuple[str, ...]:
  return tuple(reversed(source))


def _recopy(source: Sequence[str]) -> Tuple[str, ...]:
  out: List[str] = []
  for token in source:
    out.extend([token] * repeat_count(token))
  return tuple(out)


def _reverse_recopy(source: Sequence[str]) -> Tuple[str, ...]:
  return _recopy(tuple(reversed(source)))


def _parse_recopy(source: Sequence[str]) -> Tuple[str, ...]:
  """Inverts ReCopy: reads an item, then skips its r(item) copies."""
  items: List[str] = []
  pos = 0
  while pos < len(source):
    token = source[pos]
    count = repeat_count(token)
    if tuple(source[pos:pos + count]) != (token,) * count:
      raise MonolocError(
          f'input is not a ReCopy output: item {token!r} at position {pos} '
          f'should be repeated {count} times')
    items.append(token)
    pos += count
  return tuple(items)


def _inv_reverse_recopy(source: Sequence[str]) -> Tuple[str, ...]:
  return tuple(reversed(_parse_recopy(source)))


def _dedupe(source: Sequence[str]) -> Tuple[str, ...]:
  out: List[str] = []
  for token in source:
    if not out or out[-1] != token:
      out.append(token)
  return tuple(out)


def _posretrieve(source: Sequence[str]) -> Tuple[str, ...]:
  n = len(source)
  out: List[str] = []
  for token in source:
    if token not in DIGITS:
      raise MonolocError(f'posretrieve needs digit tokens 0-9, got {token!r}')
    index = int(token)
    out.extend((token, ':', source[index] if index < n else 'n/a', ';'))
  return tuple(out)


# ------------------------------------------------------------ generation ---

Rule = Callable[[Sequence[str]], Tuple[str, ...]]
# A source builder maps a (k, n) int8 array of item digits to k input rows
# (int8 digit arrays); it may draw extra randomness (DeDupe's repetition
# counts) from the generator it is given.
SourceBuilder = Callable[[np.random.Generator, np.ndarray], List[np.ndarray]]


def items_as_source(rng: np.random.Generator,
                    items: np.ndarray) -> List[np.ndarray]:
  """The default source builder: the drawn items are the input."""
  del rng  # Unused.
  return list(items)


def _recopy_source(rng: np.random.Generator,
                   items: np.ndarray) -> List[np.ndarray]:
  del rng  # Unused.
  return [np.repeat(row, _REPEATS[row]) for row in items]


def _reverse_recopy_source(rng: np.random.Generator,
                           items: np.ndarray) -> List[np.ndarray]:
  return _recopy_source(rng, items[:, ::-1])


def _dedupe_source(rng: np.random.Generator,
                   items: np.ndarray) -> List[np.ndarray]:
  counts = rng.choice(np.array(DEDUPE_REPEATS), size=items.shape)
  return [np.repeat(row, row_counts) for row, row_counts in zip(items, counts)]


# source -> every item length n at which the task's source builder can make
# that source (empty when it cannot make it at all). A source made from n items
# by `items_as_source` or ReCopy's builders has exactly one; DeDupe's can have
# several (a run of 3 equal digits is 1 item x 3 or 3 items x 1).
ItemLengths = Callable[[Sequence[str]], FrozenSet[int]]


def source_items(source: Sequence[str]) -> FrozenSet[int]:
  """`ItemLengths` of `items_as_source`: the source's own length."""
  return frozenset((len(source),))


def _recopy_items(source: Sequence[str]) -> FrozenSet[int]:
  """`ItemLengths` of ReCopy's builders: the items `_parse_recopy` reads."""
  try:
    return frozenset((len(_parse_recopy(source)),))
  except MonolocError:
    return frozenset()


def _dedupe_items(source: Sequence[str]) -> FrozenSet[int]:
  """`ItemLengths` of `_dedupe_source`.

  A maximal run of r equal digits is c items repeated 1, 3 or 5 times each,
  possible iff c = r (mod 2) and c <= r <= 5c; the item count of the source
  is the sum over its runs, so every n = len(source) (mod 2) from the sum of
  the runs' fewest c up to len(source).
  """
  if not source or any(token not in _REPEAT_OF for token in source):
    return frozenset()
  runs = [1]
  for previous, token in zip(source, source[1:]):
    if token == previous:
      runs[-1] += 1
    else:
      runs.append(1)
  # Fewest c for a run r: ceil(r / 5), raised by one if its parity differs.
  fewest = sum(-(-r // 5) + (-(-r // 5) - r) % 2 for r in runs)
  return frozenset(range(fewest, len(source) + 1, 2))


@dataclasses.dataclass(frozen=True)
class DigitTask:
  """One digit task, as the generator needs it.

  Attributes:
    name: the task's slug.
    task_id: integer >= 0 mixed into the seed of every split's random stream
      (with the data seed and the split id), so two tasks draw different
      inputs. The built-in ids (`TASK_IDS`) are fixed: never renumber them.
    rule: source tokens -> target tokens.
    build_source: how a split's drawn items (a [k, n] int8 array of digits,
      n = the item length) become k inputs; `items_as_source` by default.
    item_lengths: source -> the item lengths it could have been built from
      (see `ItemLengths`); None is right only for `items_as_source` (the
      length is the source's), and leaves it unknown for another builder.
  """
  name: str
  task_id: int
  rule: Rule
  build_source: SourceBuilder = items_as_source
  item_lengths: Optional['ItemLengths'] = None

  def __post_init__(self):
    if not isinstance(self.name, str) or not self.name:
      raise MonolocError(
          f'a digit task needs a non-empty name, got {self.name!r}')
    if (isinstance(self.task_id, bool) or
        not isinstance(self.task_id, (int, np.integer)) or self.task_id < 0):
      raise MonolocError(f'task_id of digit task {self.name!r} must be a '
                         f'non-negative integer, got {self.task_id!r}')
    fields = ('rule', 'build_source') + (
        () if self.item_lengths is None else ('item_lengths',))
    for field in fields:
      if not callable(getattr(self, field)):
        raise MonolocError(f'{field} of digit task {self.name!r} must be '
                           f'callable, got {getattr(self, field)!r}')


# The eight tasks of the paper. Their ids seed the data: never renumber them.
DIGIT_TASKS: Mapping[str, DigitTask] = types.MappingProxyType({
    task.name: task for task in (
        DigitTask('copy', 0, _copy),
        DigitTask('reverse_copy', 1, _reverse_copy),
        DigitTask('recopy', 2, _recopy),
        DigitTask('reverse_recopy', 3, _reverse_recopy),
        DigitTask('inv_recopy', 4, _parse_recopy, _recopy_source,
                  _recopy_items),
        DigitTask('inv_reverse_recopy', 5, _inv_reverse_recopy,
                  _reverse_recopy_source, _recopy_items),
        DigitTask('dedupe', 6, _dedupe, _dedupe_source, _dedupe_items),
        DigitTask('posretrieve', 7, _posretrieve),
    )})
TASKS: Tuple[str, ...] = tuple(DIGIT_TASKS)
TASK_IDS: Mapping[str, int] = types.MappingProxyType(
    {name: task.task_id for name, task in DIGIT_TASKS.items()})
RULES: Mapping[str, Rule] = types.MappingProxyType(
    {name: task.rule for name, task in DIGIT_TASKS.items()})

_MAX_DRAW_ROUNDS = 100


def _draw_distinct(rng: np.random.Generator, build: SourceBuilder,
                   length: int, count: int, seen: set) -> List[np.ndarray]:
  """Draws `count` inputs of `length` items that are not in `seen` (updated)."""
  kept: List[np.ndarray] = []
  for _ in range(_MAX_DRAW_ROUNDS):
    need = count - len(kept)
    if need == 0:
      return kept
    items = rng.integers(0, 10, size=(need + need // 20 + 8, length),
                         dtype=np.int8)
    for row in build(rng, items):
      key = row.tobytes()
      if key not in seen:
        seen.add(key)
        kept.append(row)
        if len(kept) == count:
          break
  raise MonolocError(
      f'could not draw {count} distinct inputs of {length} items; the input '
      'space is too small for the requested split size')


def _generate_split(task: DigitTask, split: str, seed: int,
                    seen: set) -> List[Example]:
  spec = SPLIT_SPECS[split]
  rng = np.random.default_rng([seed, int(task.task_id), spec.split_id])
  lengths = rng.integers(spec.min_length, spec.max_length + 1, size=spec.size)
  counts = np.bincount(lengths - spec.min_length,
                       minlength=spec.max_length - spec.min_length + 1)
  rows: List[np.ndarray] = []
  for offset, count in enumerate(counts.tolist()):
    rows.extend(_draw_distinct(rng, task.build_source,
                               spec.min_length + offset, count, seen))
  examples = []
  for index in rng.permutation(len(rows)).tolist():
    source = tuple(_DIGIT_ARRAY[rows[index]].tolist())
    examples.append(Example(source, tuple(task.rule(source))))
  return examples


def get_task(task: Union[str, DigitTask]) -> DigitTask:
  """`task` itself if it is a DigitTask, else the built-in task of that name.

  Raises:
    MonolocError: unknown name.
  """
  if isinstance(task, DigitTask):
    return task
  found = DIGIT_TASKS.get(task) if isinstance(task, str) else None
  if found is None:
    raise unknown_name('digit task', task, TASKS)
  return found


def check_seed(seed: int) -> int:
  """Returns `seed` as an int; raises MonolocError unless it is an int >= 0."""
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
    raise MonolocError(f'seed must be a non-negative integer, got {seed!r}')
  if seed < 0:
    raise MonolocError(f'seed must be a non-negative integer, got {seed}')
  return int(seed)


def generate(task: Union[str, DigitTask],
             seed: int = 0) -> Dict[str, List[Example]]:
  """Generates every split of a digit task for one seed.

  Args:
    task: one of `TASKS`, or a `DigitTask`.
    seed: non-negative integer; the same seed gives the same data.

  Returns:
    {split: examples} for every split in `SPLITS`, in that order
    (`SPLIT_SPECS` gives each split's size and item lengths). Inputs are
    distinct within and across splits.
  """
  task = get_task(task)
  seed = check_seed(seed)
  seen: set = set()
  return {split: _generate_split(task, split, seed, seen) for split in SPLITS}


def generate_split(task: Union[str, DigitTask], split: str,
                   seed: int = 0) -> List[Example]:
  """One split of `generate(task, seed)` (still generates all splits)."""
  if split not in SPLIT_SPECS:
    name = task.name if isinstance(task, DigitTask) else task
    raise MonolocError(f'unknown split {split!r} for task {name!r}; '
                       f'valid splits: {", ".join(SPLITS)}')
  return generate(task, seed)[split]


# ------------------------------------------------------ any-length samples ---

# Entropy word that keeps the samplers' streams apart from the splits' streams
# (those are seeded with (seed, task_id, split id), split ids 0 … 8).
_SAMPLE_STREAM = 1_000


def sample(task: Union[str, DigitTask], length: int, n: int, seed: int,
           exclude: AbstractSet[Tuple[str, ...]] = frozenset()
           ) -> List[Example]:
  """`n` examples of `task` drawn at exactly `length` items.

  An input is made as `generate` makes one at item length `length`: uniform
  digit items, then the task's `build_source` (DeDupe's random repetition
  counts included), then its rule. Item rows are drawn without replacement
  (`sampling.draw_distinct`) and a source in `exclude` (e.g. the training
  sources) or already drawn is dropped, so the sources are distinct. When fewer
  than `n` usable item rows exist (copy of 1 item has 10), all of them come
  back: fewer than `n` examples, never a repeat (for DeDupe each item row is
  tried with one draw of repetition counts).

  Args:
    task: one of `TASKS`, or a `DigitTask`.
    length: item length, >= 1.
    n: examples wanted, >= 0.
    seed: the same (task, length, n, seed) gives the same examples; the
      stream is seeded with (seed, task_id, `_SAMPLE_STREAM`, length), apart
      from every split's stream.
    exclude: sources (token tuples) never returned.

  Returns:
    At most `n` examples, no gold attention.
  """
  task = get_task(task)
  rng = np.random.default_rng(
      [check_seed(seed), int(task.task_id), _SAMPLE_STREAM, int(length)])

  def build(rows: np.ndarray) -> List[Example]:
    examples = []
    for row in task.build_source(rng, rows.astype(np.int8)):
      source = tuple(_DIGIT_ARRAY[row].tolist())
      examples.append(Example(source, tuple(task.rule(source))))
    return examples

  return sampling.draw_distinct(rng, (10,) * int(length), n, build, exclude,
                                f'{task.name} inputs of {length} items')


def item_lengths(task: Union[str, DigitTask],
                 source: Sequence[str]) -> FrozenSet[int]:
  """The item lengths at which `task` can make `source` (see `ItemLengths`).

  Raises:
    MonolocError: a task with a custom `build_source` and no `item_lengths`.
  """
  task = get_task(task)
  if task.item_lengths is not None:
    return frozenset(task.item_lengths(tuple(source)))
  if task.build_source is not items_as_source:
    raise MonolocError(
        f'digit task {task.name!r} has a custom build_source and no '
        f'item_lengths, so the item length of its inputs is unknown')
  return source_items(source)
