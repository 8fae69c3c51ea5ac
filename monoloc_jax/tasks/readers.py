"""Small helpers shared by the file-backed task readers (Lookup, SCAN, CFQ).

Every failure is a `MonolocError` with a one-line message that names the
directory or file involved and, for a bad line, its 1-based line number, so a
user can open the file at the right place.
"""

import os
import pathlib
from typing import Iterator, Optional, Sequence, Tuple, Union

from monoloc_jax.errors import MonolocError

PathLike = Union[str, os.PathLike]

# Longest excerpt of an offending line quoted in an error message.
_MAX_QUOTE = 80


def quote_line(line: str) -> str:
  """Returns a short, single-line `repr` of `line` for error messages."""
  if len(line) > _MAX_QUOTE:
    line = line[:_MAX_QUOTE] + '...'
  return repr(line)


def malformed(path: PathLike, line_number: int, why: str) -> MonolocError:
  """The standard 'malformed line' error: `<file>:<line>: malformed ...`."""
  why = ' '.join(why.split())  # Keep the message on one line.
  return MonolocError(f'{os.fspath(path)}:{line_number}: malformed line: {why}')


def require_dir(data_dir: Optional[PathLike], *, task: str,
                expected: Sequence[str]) -> pathlib.Path:
  """Checks that `data_dir` is an existing, non-empty directory.

  Args:
    data_dir: the directory given by the user.
    task: task name used in the message (e.g. 'SCAN length split').
    expected: the file names the reader looks for there (for the message).

  Returns:
    `data_dir` as a `pathlib.Path`.

  Raises:
    MonolocError: when `data_dir` is None, missing, not a directory or empty.
  """
  wanted = ', '.join(expected)
  if data_dir is None:
    raise MonolocError(
        f'{task}: no data directory given; point data_dir at a directory '
        f'holding {wanted}')
  path = pathlib.Path(data_dir)
  if not path.exists():
    raise MonolocError(
        f'{task}: data directory {os.fspath(path)!r} does not exist; expected '
        f'{wanted} there')
  if not path.is_dir():
    raise MonolocError(
        f'{task}: data directory {os.fspath(path)!r} is not a directory; '
        f'expected a directory holding {wanted}')
  if not any(path.iterdir()):
    raise MonolocError(
        f'{task}: data directory {os.fspath(path)!r} is empty; expected '
        f'{wanted} there')
  return path


def require_file(path: PathLike, *, task: str, hint: str = '') -> pathlib.Path:
  """Checks that `path` is an existing regular file.

  Args:
    path: the file the reader needs.
    task: task name used in the message.
    hint: optional extra sentence (what the file is, where to get it).

  Returns:
    `path` as a `pathlib.Path`.

  Raises:
    MonolocError: when the file is missing.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    suffix = f'; {hint}' if hint else ''
    raise MonolocError(
        f'{task}: expected file {os.fspath(path)!r} not found{suffix}')
  return path


def iter_lines(path: PathLike) -> Iterator[Tuple[int, str]]:
  """Yields `(1-based line number, line)` for each non-blank line of a file.

  Trailing newline characters are removed; blank (whitespace-only) lines are
  skipped. The file must be UTF-8 text.

  Args:
    path: the text file to read.

  Yields:
    Pairs of line number and line text.

  Raises:
    MonolocError: if the file is empty (no non-blank line), unreadable or not
      valid UTF-8.
  """
  path = pathlib.Path(path)
  seen_any = False
  try:
    with open(path, 'r', encoding='utf-8', newline=None) as f:
      for number, line in enumerate(f, start=1):
        line = line.rstrip('\r\n')
        if not line.strip():
          continue
        seen_any = True
        yield number, line
  except UnicodeDecodeError as e:
    raise MonolocError(
        f'{os.fspath(path)}: not valid UTF-8 text ({e.reason} at byte '
        f'{e.start})') from e
  except OSError as e:
    raise MonolocError(
        f'{os.fspath(path)}: cannot read file ({e.strerror or e})') from e
  if not seen_any:
    raise MonolocError(f'{os.fspath(path)}: file is empty (no data lines)')
