"""Drawing distinct examples at one length (the range-evaluation generators).

A task's sampler at one length (`synthetic.sample`, `lookup.sample`) sees its
inputs at that length as the rows of a finite space: `bases[i]` choices in
column i (10 digits per item; the Lookup input bits and then one table per
position). `draw_distinct` draws rows uniformly *without replacement* and turns
them into examples with the task's own builder, keeping an example unless its
source is excluded or already kept:

* a space of at most `ENUMERATE_LIMIT` rows is walked in one random order, so
  when fewer than `n` usable rows exist every one of them comes back (fewer
  than `n` examples, never a duplicate);
* a larger space is drawn by rejection (a row drawn twice is skipped); it fails
  with a MonolocError when `_MAX_ROUNDS` rounds do not find `n` (only when `n`
  and the excluded rows nearly fill the space).
"""

import math
from typing import AbstractSet, Callable, List, Sequence, Tuple

import numpy as np

from monoloc_jax.errors import MonolocError
from monoloc_jax.tasks.types import Example

# Spaces up to this many rows are enumerated (digits: up to 5 items).
ENUMERATE_LIMIT = 2**17
_MAX_ROUNDS = 100

Source = Tuple[str, ...]
# [m, len(bases)] int64 rows -> their m examples (in row order).
Builder = Callable[[np.ndarray], List[Example]]


def _decode(indices: np.ndarray, bases: Sequence[int]) -> np.ndarray:
  """Row index -> mixed-radix digits, first column most significant."""
  strides = np.cumprod((list(bases[1:]) + [1])[::-1])[::-1]
  return (indices[:, None] // strides[None, :]) % np.asarray(bases)[None, :]


def _chunk(need: int) -> int:
  return need + need // 20 + 8


def draw_distinct(rng: np.random.Generator, bases: Sequence[int], n: int,
                  build: Builder, exclude: AbstractSet[Source],
                  what: str) -> List[Example]:
  """Up to `n` examples from distinct rows, none with a source in `exclude`.

  Args:
    rng: the random stream (fixes the rows and anything `build` draws).
    bases: choices per column; the space has prod(bases) rows.
    n: how many examples to return at most.
    build: rows -> examples (the task's source builder and rule).
    exclude: sources never returned.
    what: the examples, in words, for the error message.

  Returns:
    min(n, usable rows) examples with distinct sources, in draw order.
  """
  kept: List[Example] = []
  taken = set(exclude)

  def keep(rows: np.ndarray) -> bool:
    """Adds the usable examples of `rows`; True once `n` are kept."""
    for example in build(rows):
      if example.source not in taken:
        taken.add(example.source)
        kept.append(example)
        if len(kept) == n:
          return True
    return False

  if n == 0:
    return kept
  space = math.prod(bases)
  if space <= ENUMERATE_LIMIT:
    order = rng.permutation(space)
    start = 0
    while start < space:
      stop = start + _chunk(n - len(kept))
      if keep(_decode(order[start:stop], bases)):
        break
      start = stop
    return kept
  high = np.asarray(bases, dtype=np.int64)
  drawn = set()
  for _ in range(_MAX_ROUNDS):
    rows = rng.integers(0, high, size=(_chunk(n - len(kept)), len(bases)))
    fresh = []
    for row in rows:
      key = row.tobytes()
      if key not in drawn:
        drawn.add(key)
        fresh.append(row)
    if fresh and keep(np.stack(fresh)):
      return kept
  raise MonolocError(
      f'could not draw {n} distinct {what} outside the excluded inputs in '
      f'{_MAX_ROUNDS} rounds; ask for fewer')
