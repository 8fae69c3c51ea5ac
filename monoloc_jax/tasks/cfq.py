"""CFQ length split (Keysers et al. 2020) from the official release layout.

Expected layout (the unpacked `cfq1.1.tar.gz`):

  <data_dir>/dataset.json                  JSON list of records; each needs
                                           `questionPatternModEntities` and
                                           `sparqlPatternModEntities`
  <data_dir>/splits/length_split.json      {"trainIdxs": [...],
                                            "devIdxs": [...],
                                            "testIdxs": [...]}

The release itself names the output-length split
`splits/query_complexity_split.json` (TFDS `cfq/query_complexity_split`, the
split the authors' code loads); it is used when
`splits/length_split.json` is absent.

Preprocessing follows google-research/google-research `cfq/preprocess.py`
(`tokenize_punctuation`, `preprocess_sparql`), which the authors' code
(`preprocess/process_cfq_length.py` of JRC1995/MonotonicLocationAttention)
copies:

  * question: every character of Python's `string.punctuation` becomes its own
    token (`'s` -> `' s`), then whitespace tokenisation;
  * query: `count(*)` -> `count ( * )`; whitespace tokenisation (newlines are
    whitespace); a token's *leading* `ns:` is dropped (as in the original, a
    second `ns:` inside a property path such as
    `ns:film.actor.film/ns:film.performance.film` stays); a leading `m.`
    becomes `m_`; literal two-character `\\n` sequences become spaces.

`dataset.json` of the release is several GB. It is not `json.load`-ed whole:
`iter_records` decodes it one record at a time and only the two fields of the
records a split needs are kept, so memory stays proportional to the split.
"""

import json
import os
import pathlib
import string
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from monoloc_jax.errors import MonolocError
from monoloc_jax.errors import unknown_name
from monoloc_jax.tasks import readers
from monoloc_jax.tasks.types import Example

SPLITS = ('train', 'dev', 'test')

_TASK = 'CFQ length split'
DATASET_FILE = 'dataset.json'
# Tried in order; the first that exists is used.
SPLIT_FILE_CANDIDATES = ('splits/length_split.json',
                         'splits/query_complexity_split.json')
INDEX_KEYS: Mapping[str, str] = {
    'train': 'trainIdxs',
    'dev': 'devIdxs',
    'test': 'testIdxs',
}
assert tuple(INDEX_KEYS) == SPLITS
QUESTION_FIELD = 'questionPatternModEntities'
QUERY_FIELD = 'sparqlPatternModEntities'

_PUNCTUATION = frozenset(string.punctuation)
_CHUNK_CHARS = 1 << 20
_MAX_RECORD_CHARS = 1 << 26


def tokenize_question(text: str) -> Tuple[str, ...]:
  """Splits every punctuation character off as its own token."""
  spaced = ''.join(f' {c} ' if c in _PUNCTUATION else c for c in text)
  return tuple(spaced.split())


def tokenize_query(query: str) -> Tuple[str, ...]:
  """The official CFQ SPARQL preprocessing, as a token tuple."""
  query = query.replace('count(*)', 'count ( * )')
  tokens = []
  for token in query.split():
    if token.startswith('ns:'):
      token = token[3:]
    if token.startswith('m.'):
      token = 'm_' + token[2:]
    tokens.append(token)
  return tuple(' '.join(tokens).replace('\\n', ' ').split())


def _json_error(path: pathlib.Path, line: int, column: int,
                what: str) -> MonolocError:
  return MonolocError(
      f'{os.fspath(path)}:{line}: malformed JSON ({what} at column {column})')


def iter_records(
    path: os.PathLike,
    chunk_chars: int = _CHUNK_CHARS) -> Iterator[Tuple[int, object]]:
  """Streams the elements of a top-level JSON list, one at a time.

  Args:
    path: a file holding one JSON list.
    chunk_chars: characters read per refill (small values are for tests).

  Yields:
    `(index, decoded element)` pairs.

  Raises:
    MonolocError: the file is empty, not a JSON list, or malformed (the
      message names the file and the 1-based line of the error).
  """
  path = pathlib.Path(path)
  decoder = json.JSONDecoder()
  lines_before = 0  # Newlines in the text already dropped from `buf`.
  try:
    f = open(path, 'r', encoding='utf-8')
  except OSError as e:
    raise MonolocError(
        f'{os.fspath(path)}: cannot read file ({e.strerror or e})') from e
  with f:
    buf, pos, eof = '', 0, False

    def refill() -> bool:
      nonlocal buf, pos, eof, lines_before
      if eof:
        return False
      try:
        more = f.read(chunk_chars)
      except UnicodeDecodeError as e:
        raise MonolocError(
            f'{os.fspath(path)}: not valid UTF-8 text ({e.reason})') from e
      if not more:
        eof = True
        return False
      # Drop the consumed text; `pos` (the current element's start) becomes 0.
      lines_before += buf.count('\n', 0, pos)
      buf, pos = buf[pos:] + more, 0
      return True

    def skip_space() -> str:
      """Moves `pos` to the next non-space char; returns it ('' at EOF)."""
      nonlocal pos
      while True:
        while pos < len(buf) and buf[pos] in ' \t\r\n':
          pos += 1
        if pos < len(buf):
          return buf[pos]
        if not refill():
          return ''

    def here() -> Tuple[int, int]:
      line = lines_before + buf.count('\n', 0, pos) + 1
      column = pos - (buf.rfind('\n', 0, pos) + 1) + 1
      return line, column

    first = skip_space()
    if not first:
      raise MonolocError(f'{os.fspath(path)}: file is empty')
    if first != '[':
      raise _json_error(path, *here(), 'expected a JSON list of records')
    pos += 1
    index = 0
    closed = skip_space() == ']'
    if closed:
      pos += 1
    while not closed:
      if not skip_space():
        raise _json_error(path, *here(), 'unexpected end of file')
      while True:
        try:
          value, end = decoder.raw_decode(buf, pos)
        except json.JSONDecodeError as e:
          # The element may continue in the next chunk (unless it is already
          # far larger than any CFQ record: then the file is broken).
          if len(buf) - pos < _MAX_RECORD_CHARS and refill():
            continue
          line = lines_before + buf.count('\n', 0, e.pos) + 1
          column = e.pos - (buf.rfind('\n', 0, e.pos) + 1) + 1
          raise _json_error(path, line, column, e.msg) from None
        except RecursionError:
          raise _json_error(path, *here(), 'a record nested too deeply') from None
        # A number or literal at the chunk end may be cut short: make sure
        # the element is followed by something before trusting it.
        if end == len(buf) and refill():
          continue
        break
      pos = end
      yield index, value
      index += 1
      separator = skip_space()
      if separator == ']':
        pos += 1
        closed = True
        continue
      if separator != ',':
        raise _json_error(path, *here(), "expected ',' or ']' after a record")
      pos += 1
    if skip_space():
      raise _json_error(path, *here(), 'extra data after the list')


def _read_split_file(path: pathlib.Path) -> Dict[str, List[int]]:
  """Reads and checks a `{"trainIdxs": [...], ...}` split file."""
  try:
    with open(path, 'r', encoding='utf-8') as f:
      data = json.load(f)
  except json.JSONDecodeError as e:
    raise _json_error(path, e.lineno, e.colno, e.msg) from None
  except (OSError, UnicodeDecodeError) as e:
    raise MonolocError(f'{os.fspath(path)}: cannot read file ({e})') from e
  except RecursionError:
    raise MonolocError(f'{os.fspath(path)}: malformed JSON (nested too deeply)') from None
  if not isinstance(data, dict):
    raise MonolocError(
        f'{os.fspath(path)}: expected a JSON object with keys '
        f'{", ".join(INDEX_KEYS.values())}')
  indices = {}
  for split, key in INDEX_KEYS.items():
    values = data.get(key)
    if not isinstance(values, list):
      raise MonolocError(
          f'{os.fspath(path)}: missing list {key!r} (expected keys '
          f'{", ".join(INDEX_KEYS.values())})')
    for position, value in enumerate(values):
      if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MonolocError(
            f'{os.fspath(path)}: {key}[{position}] = {value!r} is not a '
            f'non-negative integer index')
    indices[split] = values
  return indices


def _find_split_file(directory: pathlib.Path) -> pathlib.Path:
  for relative in SPLIT_FILE_CANDIDATES:
    if (directory / relative).is_file():
      return directory / relative
  raise MonolocError(
      f'{_TASK}: no split file in {os.fspath(directory)!r}; expected '
      f'{" or ".join(SPLIT_FILE_CANDIDATES)} (keys '
      f'{", ".join(INDEX_KEYS.values())}) from the official CFQ release')


def _to_example(path: pathlib.Path, index: int, record: object) -> Example:
  if not isinstance(record, dict):
    raise MonolocError(
        f'{os.fspath(path)}: record {index} is not a JSON object')
  fields = []
  for field in (QUESTION_FIELD, QUERY_FIELD):
    value = record.get(field)
    if not isinstance(value, str) or not value.strip():
      raise MonolocError(
          f'{os.fspath(path)}: record {index} lacks a non-empty string '
          f'field {field!r}')
    fields.append(value)
  return Example(source=tokenize_question(fields[0]),
                 target=tokenize_query(fields[1]))


def load_splits(splits: Sequence[str], *,
                data_dir: Optional[str]) -> Dict[str, List[Example]]:
  """Loads several splits in one pass over `dataset.json`.

  Args:
    splits: names from `SPLITS`.
    data_dir: the unpacked official release (see the module docstring).

  Returns:
    Mapping from split name to its examples, in split-file order.

  Raises:
    MonolocError: unknown split, missing directory or files, malformed JSON,
      a record without the needed fields, or an index out of range.
  """
  for split in splits:
    if split not in INDEX_KEYS:
      raise unknown_name('CFQ split', split, SPLITS)
  directory = readers.require_dir(
      data_dir, task=_TASK, expected=(DATASET_FILE, SPLIT_FILE_CANDIDATES[0]))
  dataset_path = readers.require_file(
      directory / DATASET_FILE, task=_TASK,
      hint='the official CFQ release (cfq1.1.tar.gz) holds dataset.json and '
      'splits/')
  split_path = _find_split_file(directory)
  indices = _read_split_file(split_path)
  needed: Set[int] = {i for split in splits for i in indices[split]}
  records: Dict[int, Example] = {}
  n_records = 0
  for index, record in iter_records(dataset_path):
    n_records = index + 1
    if index in needed:
      records[index] = _to_example(dataset_path, index, record)
  out = {}
  for split in splits:
    key = INDEX_KEYS[split]
    for position, index in enumerate(indices[split]):
      if index >= n_records:
        raise MonolocError(
            f'{os.fspath(split_path)}: {key}[{position}] = {index} is out of '
            f'range for {os.fspath(dataset_path)} ({n_records} records)')
    out[split] = [records[i] for i in indices[split]]
  return out


def load_split(split: str, *, data_dir: Optional[str]) -> List[Example]:
  """Loads one split ('train', 'dev' or 'test') of the CFQ length split."""
  return load_splits((split,), data_dir=data_dir)[split]
