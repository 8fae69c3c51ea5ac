"""SCAN length split (Lake & Baroni 2018).

A data directory holds one file per split:

  split   file
  train   tasks_train_length.txt
  dev     tasks_validation_length.txt
  test    tasks_test_length.txt

Two line formats are read, detected per file from its first data line:

  * tab-separated `command<TAB>actions` (i-machine-think/machine-tasks layout,
    the one the authors' code reads: train 13,070 / validation 3,920 /
    test 3,920, train + validation = the original 16,990 training commands);
  * the original release's `IN: jump twice OUT: I_JUMP I_JUMP`.

The original release (brendenlake/SCAN) has no validation file. Asking for
`dev` in such a directory raises an error that says which file is missing and
where to get it (`download(dest_dir, source='machine_tasks')` fetches the
paper's three-file layout); we do not carve a validation set out of the
original training file ourselves, since that would not be the paper's split.
"""

import os
import pathlib
import tempfile
import urllib.error
import urllib.request
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from monoloc_jax.errors import MonolocError
from monoloc_jax.errors import unknown_name
from monoloc_jax.tasks import readers
from monoloc_jax.tasks.types import Example

SPLITS = ('train', 'dev', 'test')

_TASK = 'SCAN length split'
SPLIT_FILES: Mapping[str, str] = {
    'train': 'tasks_train_length.txt',
    'dev': 'tasks_validation_length.txt',
    'test': 'tasks_test_length.txt',
}
assert tuple(SPLIT_FILES) == SPLITS

# Download sources: name -> (base URL, file names fetched).
_GITHUB_RAW = 'https://raw.githubusercontent.com'
DOWNLOAD_SOURCES: Mapping[str, Tuple[str, Tuple[str, ...]]] = {
    # The original release: train (16,990 rows) and test, IN:/OUT: format.
    'brendenlake': (f'{_GITHUB_RAW}/brendenlake/SCAN/master/length_split',
                    ('tasks_train_length.txt', 'tasks_test_length.txt')),
    # The paper's layout: train / validation / test, tab-separated.
    'machine_tasks': (
        f'{_GITHUB_RAW}/i-machine-think/machine-tasks/master/SCAN/length_split',
        ('tasks_train_length.txt', 'tasks_validation_length.txt',
         'tasks_test_length.txt')),
}
_DOWNLOAD_TIMEOUT_S = 60

_ORIGINAL_IN = 'IN:'
_ORIGINAL_OUT = ' OUT:'


def _parse_tab(path: pathlib.Path, number: int, line: str) -> Example:
  """Parses a `command<TAB>actions` line."""
  columns = line.split('\t')
  if len(columns) != 2:
    raise readers.malformed(
        path, number, f'expected `command<TAB>actions` (2 tab-separated '
        f'columns), got {len(columns)}: {readers.quote_line(line)}')
  source, target = columns[0].split(), columns[1].split()
  if not source or not target:
    raise readers.malformed(
        path, number, f'empty command or action sequence: '
        f'{readers.quote_line(line)}')
  return Example(source=tuple(source), target=tuple(target))


def _parse_original(path: pathlib.Path, number: int, line: str) -> Example:
  """Parses an `IN: <command> OUT: <actions>` line."""
  stripped = line.strip()
  body = stripped[len(_ORIGINAL_IN):]
  if not stripped.startswith(_ORIGINAL_IN) or body.count(_ORIGINAL_OUT) != 1:
    raise readers.malformed(
        path, number, f'expected `IN: <command> OUT: <actions>`: '
        f'{readers.quote_line(line)}')
  command, actions = body.split(_ORIGINAL_OUT)
  source, target = command.split(), actions.split()
  if not source or not target:
    raise readers.malformed(
        path, number, f'empty command or action sequence: '
        f'{readers.quote_line(line)}')
  return Example(source=tuple(source), target=tuple(target))


LineParser = Callable[[pathlib.Path, int, str], Example]


def _detect_format(path: pathlib.Path, number: int, line: str) -> LineParser:
  """Picks the line parser of a file from its first data line."""
  if line.lstrip().startswith(_ORIGINAL_IN):
    return _parse_original
  if '\t' in line:
    return _parse_tab
  raise readers.malformed(
      path, number, f'neither `command<TAB>actions` nor `IN: <command> OUT: '
      f'<actions>`: {readers.quote_line(line)}')


def read_file(path: os.PathLike) -> List[Example]:
  """Reads one SCAN file in either format (auto-detected).

  Args:
    path: the file.

  Returns:
    Its examples in file order (no gold attention).

  Raises:
    MonolocError: empty file or a malformed line (with its line number).
  """
  path = pathlib.Path(path)
  examples = []
  parse: Optional[LineParser] = None
  for number, line in readers.iter_lines(path):
    if parse is None:
      parse = _detect_format(path, number, line)
    examples.append(parse(path, number, line))
  return examples


def load_split(split: str, *, data_dir: Optional[str]) -> List[Example]:
  """Loads one split of the SCAN length split.

  Args:
    split: 'train', 'dev' or 'test'.
    data_dir: directory holding the `tasks_*_length.txt` files.

  Returns:
    The split's examples (commands -> actions, without `<eos>`).

  Raises:
    MonolocError: unknown split, missing/empty directory or file, malformed
      line.
  """
  if split not in SPLIT_FILES:
    raise unknown_name('SCAN split', split, SPLITS)
  directory = readers.require_dir(data_dir, task=_TASK,
                                  expected=tuple(SPLIT_FILES.values()))
  path = directory / SPLIT_FILES[split]
  if split == 'dev' and not path.is_file():
    raise MonolocError(
        f'{_TASK}: the dev split needs {os.fspath(path)!r}, which is missing; '
        f'the original SCAN release has no validation file: put the paper\'s '
        f'3,920-row validation split (i-machine-think/machine-tasks '
        f'SCAN/length_split/{SPLIT_FILES["dev"]}) there, e.g. with '
        f'monoloc_jax.tasks.scan.download(dest_dir, source=\'machine_tasks\')')
  readers.require_file(
      path, task=_TASK,
      hint=f'a SCAN length-split directory holds '
      f'{", ".join(SPLIT_FILES.values())} (`command<TAB>actions` or '
      f'`IN: ... OUT: ...` lines)')
  return read_file(path)


def load_splits(splits: Sequence[str], *,
                data_dir: Optional[str]) -> Dict[str, List[Example]]:
  """Loads several splits, reading each split's file once.

  Args:
    splits: names from `SPLITS`.
    data_dir: directory holding the `tasks_*_length.txt` files.

  Returns:
    {split: examples} in the order of `splits`.
  """
  for split in splits:
    if split not in SPLIT_FILES:
      raise unknown_name('SCAN split', split, SPLITS)
  return {split: load_split(split, data_dir=data_dir) for split in splits}


def download(dest_dir: str, *, source: str = 'brendenlake') -> str:
  """Downloads the public SCAN length-split files into `dest_dir`.

  Args:
    dest_dir: directory to write the files to (created if needed).
    source: 'brendenlake' (default; the original release: train and test in
      `IN: ... OUT: ...` format, no validation file, so `dev` is unavailable)
      or 'machine_tasks' (the paper's train / validation / test layout,
      tab-separated).

  Returns:
    `dest_dir`, ready to pass as `data_dir`.

  Raises:
    MonolocError: unknown source, or the files cannot be fetched (offline);
      the message says which files to put where by hand.
  """
  if source not in DOWNLOAD_SOURCES:
    raise unknown_name('SCAN download source', source, DOWNLOAD_SOURCES)
  base_url, names = DOWNLOAD_SOURCES[source]
  dest = pathlib.Path(dest_dir)
  try:
    dest.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise MonolocError(
        f'{_TASK}: cannot create {os.fspath(dest)!r} ({e.strerror or e})'
    ) from e
  for name in names:
    url = f'{base_url}/{name}'
    try:
      with urllib.request.urlopen(url, timeout=_DOWNLOAD_TIMEOUT_S) as response:
        data = response.read()
    except (urllib.error.URLError, OSError, ValueError) as e:
      reason = getattr(e, 'reason', None) or e
      raise MonolocError(
          f'{_TASK}: cannot download {url} ({reason}); offline, put '
          f'{", ".join(names)} from {base_url} into {os.fspath(dest)!r} by '
          f'hand (one example per line, `IN: <command> OUT: <actions>` or '
          f'`command<TAB>actions`)') from e
    if not data.strip():
      raise MonolocError(f'{_TASK}: {url} returned an empty file')
    # Write atomically so an interrupted download leaves no partial file.
    fd, tmp = tempfile.mkstemp(dir=dest, prefix=f'.{name}.', suffix='.part')
    try:
      with os.fdopen(fd, 'wb') as f:
        f.write(data)
      os.replace(tmp, dest / name)
    except BaseException:
      if os.path.exists(tmp):
        os.remove(tmp)
      raise
  return os.fspath(dest)

