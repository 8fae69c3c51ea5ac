"""Shared data types of the task layer."""

from typing import NamedTuple, Optional, Tuple


class Example(NamedTuple):
  """One sequence-to-sequence pair.

  source: input tokens.
  target: output tokens, *without* `<eos>`.
  gold_attention: for tasks where it is known (Lookup), the 0-based index into
    `source` that each target token (and then `<eos>`) should attend to, so
    `len(gold_attention) == len(target) + 1`; otherwise None.
  """
  source: Tuple[str, ...]
  target: Tuple[str, ...]
  gold_attention: Optional[Tuple[int, ...]] = None
