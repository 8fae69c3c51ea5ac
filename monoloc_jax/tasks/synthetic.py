"""The eight synthetic digit tasks (paper §2 and App. A; SPEC §3).

Two layers:

* `RULES[task](source) -> target`: pure functions mapping an input token
  sequence to its output (the task's definition, usable on any input).
* `generate(task, seed) -> {split: [Example, ...]}`: the data generator. All
  splits of one (task, seed) are generated together, train first, with one
  shared set of already-used inputs, so that inputs are distinct within every
  split and no input appears in two splits (in particular no dev/test input is
  in train). Each split draws from its own numpy Generator seeded with
  `(seed, TASK_IDS[task], SPLIT_IDS[split])`, so the data is deterministic for a
  seed and differs between seeds.

"Length" is the number of *items* before repetition: for Inv ReCopy, Inv
Reverse ReCopy and DeDupe the input has more tokens than that.
"""

import dataclasses
import types
from typing import Callable, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from monoloc_jax.errors import MonolocError
from monoloc_jax.errors import unknown_name
from monoloc_jax.tasks.types import Example

# Bump whenever the generated data changes (it keys the on-disk cache).
GENERATOR_VERSION = 1

DIGITS: Tuple[str, ...] = tuple('0123456789')
_DIGIT_ARRAY = np.array(DIGITS)

# Fixed numeric ids: they seed the random streams, so never renumber them.
TASK_IDS: Mapping[str, int] = types.MappingProxyType({
    'copy': 0,
    'reverse_copy': 1,
    'recopy': 2,
    'reverse_recopy': 3,
    'inv_recopy': 4,
    'inv_reverse_recopy': 5,
    'dedupe': 6,
    'posretrieve': 7,
})
TASKS: Tuple[str, ...] = tuple(TASK_IDS)


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


RULES: Mapping[str, Callable[[Sequence[str]], Tuple[str, ...]]] = (
    types.MappingProxyType({
        'copy': _copy,
        'reverse_copy': _reverse_copy,
        'recopy': _recopy,
        'reverse_recopy': _reverse_recopy,
        'inv_recopy': _parse_recopy,
        'inv_reverse_recopy': _inv_reverse_recopy,
        'dedupe': _dedupe,
        'posretrieve': _posretrieve,
    }))


# ------------------------------------------------------------ generation ---

# A source builder maps a (k, n) array of item digits to k input rows (digit
# arrays); it may draw extra randomness (DeDupe's repetition counts).
_SourceBuilder = Callable[[np.random.Generator, np.ndarray], List[np.ndarray]]


def _items_as_source(rng: np.random.Generator,
                     items: np.ndarray) -> List[np.ndarray]:
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


_SOURCE_BUILDERS: Mapping[str, _SourceBuilder] = types.MappingProxyType({
    'copy': _items_as_source,
    'reverse_copy': _items_as_source,
    'recopy': _items_as_source,
    'reverse_recopy': _items_as_source,
    'inv_recopy': _recopy_source,
    'inv_reverse_recopy': _reverse_recopy_source,
    'dedupe': _dedupe_source,
    'posretrieve': _items_as_source,
})

_MAX_DRAW_ROUNDS = 100


def _draw_distinct(rng: np.random.Generator, build: _SourceBuilder,
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


def _generate_split(task: str, split: str, seed: int,
                    seen: set) -> List[Example]:
  spec = SPLIT_SPECS[split]
  rng = np.random.default_rng([seed, TASK_IDS[task], spec.split_id])
  lengths = rng.integers(spec.min_length, spec.max_length + 1, size=spec.size)
  counts = np.bincount(lengths - spec.min_length,
                       minlength=spec.max_length - spec.min_length + 1)
  build = _SOURCE_BUILDERS[task]
  rows: List[np.ndarray] = []
  for offset, count in enumerate(counts.tolist()):
    rows.extend(
        _draw_distinct(rng, build, spec.min_length + offset, count, seen))
  rule = RULES[task]
  examples = []
  for index in rng.permutation(len(rows)).tolist():
    source = tuple(_DIGIT_ARRAY[rows[index]].tolist())
    examples.append(Example(source, rule(source)))
  return examples


def check_task(task: str) -> None:
  """Raises MonolocError unless `task` is a digit task."""
  if task not in TASK_IDS:
    raise unknown_name('digit task', task, TASKS)


def check_seed(seed: int) -> int:
  """Returns `seed` as an int; raises MonolocError unless it is an int >= 0."""
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
    raise MonolocError(f'seed must be a non-negative integer, got {seed!r}')
  if seed < 0:
    raise MonolocError(f'seed must be a non-negative integer, got {seed}')
  return int(seed)


def generate(task: str, seed: int = 0) -> Dict[str, List[Example]]:
  """Generates every split of a digit task for one seed.

  Args:
    task: one of `TASKS`.
    seed: non-negative integer; the same seed gives the same data.

  Returns:
    {split: examples} for every split in `SPLITS`, in that order. Inputs are
    distinct within and across splits.
  """
  check_task(task)
  seed = check_seed(seed)
  seen: set = set()
  return {split: _generate_split(task, split, seed, seen) for split in SPLITS}


def generate_split(task: str, split: str, seed: int = 0) -> List[Example]:
  """One split of `generate(task, seed)` (still generates all splits)."""
  if split not in SPLIT_SPECS:
    raise MonolocError(f'unknown split {split!r} for task {task!r}; '
                       f'valid splits: {", ".join(SPLITS)}')
  return generate(task, seed)[split]
