"""The single entry point for all twelve tasks.

    from monoloc_jax import tasks
    tasks.TASKS                          # task slugs
    tasks.splits('copy')                 # split names
    tasks.load('copy', 'train', seed=0)  # [(source, target), ...]

Every task is a `TaskSpec` in one registry. Generated data (the digit tasks,
and Lookup when no `data_dir` is given) is cached on disk as JSON under
`<cache_dir>/<task>/v<GENERATOR_VERSION>/seed<seed>/<split>.json`, where the
cache directory is `$MONOLOC_CACHE_DIR` or `~/.cache/monoloc_jax`. A cache file
that cannot be read is regenerated. Data read from files (`data_dir`) is not
cached.

The Lookup, SCAN and CFQ readers live in their own modules and are imported
lazily, so that the digit tasks need nothing beyond numpy.
"""

import dataclasses
import functools
import importlib
import json
import logging
import os
import pathlib
import tempfile
from types import MappingProxyType
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from monoloc_jax.errors import MonolocError
from monoloc_jax.errors import unknown_name
from monoloc_jax.tasks import synthetic
from monoloc_jax.tasks.types import Example

__all__ = [
    'CACHE_DIR_ENV',
    'Example',
    'TASKS',
    'TaskSpec',
    'cache_dir',
    'cache_path',
    'get_spec',
    'load',
    'load_examples',
    'paper_length_splits',
    'splits',
    'test_splits',
]

CACHE_DIR_ENV = 'MONOLOC_CACHE_DIR'
_CACHE_FORMAT = 'monoloc_jax.tasks.cache'

Pair = Tuple[Tuple[str, ...], Tuple[str, ...]]
# (split, seed, data_dir) -> {split: examples}. The mapping holds the requested
# split and may hold sibling splits made in the same pass (they get cached too).
Loader = Callable[[str, int, Optional[str]], Mapping[str, List[Example]]]

_TRAIN_DEV = ('train', 'dev')
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """How to get one task's data.

  Attributes:
    get_splits: () -> every split name, train and dev first.
    paper_splits: the length-generalisation splits the paper reports.
    loader: see `Loader`.
    data_dir_mode: 'none' (generated in code; a data_dir is an error), 'optional'
      (generated when None, else read from the directory) or 'required'.
    get_version: () -> generator version; keys the cache of generated data.
    missing_data_dir: the error message when a required data_dir is missing.
  """
  get_splits: Callable[[], Tuple[str, ...]]
  paper_splits: Tuple[str, ...]
  loader: Loader
  data_dir_mode: str
  get_version: Optional[Callable[[], int]] = None
  missing_data_dir: str = ''


def _module(name: str) -> Any:
  return importlib.import_module(f'monoloc_jax.tasks.{name}')


def _module_attr(name: str, attr: str) -> Any:
  return getattr(_module(name), attr)


def _load_digit(task: str, split: str, seed: int,
                data_dir: Optional[str]) -> Mapping[str, List[Example]]:
  del split, data_dir  # All splits are generated together.
  return synthetic.generate(task, seed)


def _load_lookup(reverse: bool, split: str, seed: int,
                 data_dir: Optional[str]) -> Mapping[str, List[Example]]:
  examples = _module('lookup').load_split(
      split, reverse=reverse, seed=seed, data_dir=data_dir)
  return {split: examples}


def _load_files(module: str, split: str, seed: int,
                data_dir: Optional[str]) -> Mapping[str, List[Example]]:
  del seed  # Fixed data.
  return {split: _module(module).load_split(split, data_dir=data_dir)}


def _digit_spec(task: str) -> TaskSpec:
  return TaskSpec(
      get_splits=lambda: synthetic.SPLITS,
      paper_splits=synthetic.PAPER_SPLITS,
      loader=functools.partial(_load_digit, task),
      data_dir_mode='none',
      get_version=lambda: synthetic.GENERATOR_VERSION)


def _lookup_spec(reverse: bool) -> TaskSpec:
  return TaskSpec(
      get_splits=lambda: tuple(_module_attr('lookup', 'SPLITS')),
      paper_splits=('test_long1', 'test_long3', 'test_long5'),
      loader=functools.partial(_load_lookup, reverse),
      data_dir_mode='optional',
      get_version=lambda: int(_module_attr('lookup', 'GENERATOR_VERSION')))


_SCAN_MISSING = (
    "task 'scan_length' needs data_dir: a directory with the SCAN length "
    'split files tasks_train_length.txt, tasks_validation_length.txt and '
    "tasks_test_length.txt; fetch all three with "
    "monoloc_jax.tasks.scan.download(dest_dir, source='machine_tasks')")
_CFQ_MISSING = (
    "task 'cfq_length' needs data_dir: the unpacked official CFQ release, "
    'holding dataset.json and splits/length_split.json')

_REGISTRY: Mapping[str, TaskSpec] = MappingProxyType({
    'copy': _digit_spec('copy'),
    'reverse_copy': _digit_spec('reverse_copy'),
    'lookup': _lookup_spec(reverse=False),
    'reverse_lookup': _lookup_spec(reverse=True),
    'recopy': _digit_spec('recopy'),
    'reverse_recopy': _digit_spec('reverse_recopy'),
    'inv_recopy': _digit_spec('inv_recopy'),
    'inv_reverse_recopy': _digit_spec('inv_reverse_recopy'),
    'dedupe': _digit_spec('dedupe'),
    'posretrieve': _digit_spec('posretrieve'),
    'scan_length': TaskSpec(
        get_splits=lambda: ('train', 'dev', 'test'),
        paper_splits=('test',),
        loader=functools.partial(_load_files, 'scan'),
        data_dir_mode='required',
        missing_data_dir=_SCAN_MISSING),
    'cfq_length': TaskSpec(
        get_splits=lambda: ('train', 'dev', 'test'),
        paper_splits=('test',),
        loader=functools.partial(_load_files, 'cfq'),
        data_dir_mode='required',
        missing_data_dir=_CFQ_MISSING),
})

TASKS: Tuple[str, ...] = tuple(_REGISTRY)


# ------------------------------------------------------------- queries ---


def get_spec(task: str) -> TaskSpec:
  """The registry entry of `task`; MonolocError if there is none."""
  spec = _REGISTRY.get(task) if isinstance(task, str) else None
  if spec is None:
    raise unknown_name('task', task, TASKS)
  return spec


def splits(task: str) -> Tuple[str, ...]:
  """All split names of `task`: train, dev, then the evaluation splits."""
  return tuple(get_spec(task).get_splits())


def test_splits(task: str) -> Tuple[str, ...]:
  """The evaluation splits of `task` (every split except train and dev)."""
  return tuple(s for s in splits(task) if s not in _TRAIN_DEV)


test_splits.__test__ = False  # Not a pytest test when imported by name.


def paper_length_splits(task: str) -> Tuple[str, ...]:
  """The evaluation splits the paper's tables report for `task`."""
  return get_spec(task).paper_splits


def _check_split(task: str, split: str) -> None:
  valid = splits(task)
  if split not in valid:
    raise MonolocError(f'unknown split {split!r} for task {task!r}; '
                       f'valid splits: {", ".join(valid)}')


# --------------------------------------------------------------- cache ---


def cache_dir() -> pathlib.Path:
  """`$MONOLOC_CACHE_DIR` if set and non-empty, else ~/.cache/monoloc_jax."""
  env = os.environ.get(CACHE_DIR_ENV)
  if env:
    return pathlib.Path(env).expanduser()
  return pathlib.Path.home() / '.cache' / 'monoloc_jax'


def cache_path(task: str, split: str, seed: int = 0) -> pathlib.Path:
  """Where the generated `split` of `task` for `seed` is cached."""
  spec = get_spec(task)
  if spec.get_version is None:
    raise MonolocError(f'task {task!r} is read from files and is not cached')
  _check_split(task, split)
  seed = synthetic.check_seed(seed)
  return (cache_dir() / task / f'v{spec.get_version()}' / f'seed{seed}' /
          f'{split}.json')


def _tokens(text: Any) -> Tuple[str, ...]:
  if not isinstance(text, str):
    raise TypeError('token string expected')
  return tuple(text.split())


def _gold(value: Any) -> Optional[Tuple[int, ...]]:
  if value is None:
    return None
  if not isinstance(value, list) or not all(
      isinstance(v, int) and not isinstance(v, bool) for v in value):
    raise TypeError('gold attention must be a list of ints')
  return tuple(value)


def _read_cache(path: pathlib.Path, header: Mapping[str, Any]
                ) -> Optional[List[Example]]:
  """The cached examples, or None if the file is missing or unusable."""
  try:
    with open(path, encoding='utf-8') as f:
      content = json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, ValueError) as e:
    _LOG.warning('unreadable task cache %s (%s); regenerating', path, e)
    return None
  try:
    if any(content[key] != value for key, value in header.items()):
      raise ValueError('header does not match')
    return [Example(_tokens(src), _tokens(tgt), _gold(gold))
            for src, tgt, gold in content['examples']]
  except (KeyError, TypeError, ValueError) as e:
    _LOG.warning('corrupt task cache %s (%s); regenerating', path, e)
    return None


def _write_cache(path: pathlib.Path, header: Mapping[str, Any],
                 examples: Sequence[Example]) -> None:
  """Writes `examples` atomically; a failure only logs a warning."""
  rows = []
  for ex in examples:
    source, target = ' '.join(ex.source), ' '.join(ex.target)
    if (len(source.split()) != len(ex.source) or
        len(target.split()) != len(ex.target)):
      _LOG.warning('not caching %s: a token is empty or has whitespace', path)
      return
    gold = (None if ex.gold_attention is None else
            [int(i) for i in ex.gold_attention])
    rows.append([source, target, gold])
  content = dict(header)
  content['examples'] = rows
  tmp_name = None
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        'w', encoding='utf-8', dir=path.parent, prefix=f'.{path.name}.',
        suffix='.tmp', delete=False) as f:
      tmp_name = f.name
      json.dump(content, f, separators=(',', ':'))
    os.replace(tmp_name, path)
  except OSError as e:
    _LOG.warning('could not write task cache %s (%s)', path, e)
    if tmp_name is not None and os.path.exists(tmp_name):
      os.remove(tmp_name)


def _header(task: str, split: str, seed: int, version: int) -> dict:
  return {'format': _CACHE_FORMAT, 'task': task, 'split': split,
          'seed': seed, 'generator_version': version}


def _load_generated(task: str, split: str, seed: int,
                    spec: TaskSpec) -> List[Example]:
  version = spec.get_version()
  path = cache_path(task, split, seed)
  cached = _read_cache(path, _header(task, split, seed, version))
  if cached is not None:
    return cached
  generated = spec.loader(split, seed, None)
  for name, examples in generated.items():
    _write_cache(cache_path(task, name, seed),
                 _header(task, name, seed, version), examples)
  return list(generated[split])


# -------------------------------------------------------------- loading ---


def load_examples(task: str, split: str, seed: int = 0,
                  data_dir: Optional[str] = None, *,
                  cache: bool = True) -> List[Example]:
  """Loads one split of one task.

  Args:
    task: one of `TASKS`.
    split: one of `splits(task)`.
    seed: data seed of generated tasks (digit tasks; Lookup without data_dir).
      Ignored for data read from files.
    data_dir: directory of the data files. Required for scan_length and
      cfq_length; optional for lookup/reverse_lookup (None generates the data
      in code); not accepted by the digit tasks.
    cache: read/write the on-disk cache of generated data.

  Returns:
    The examples; targets do not include `<eos>`.
  """
  spec = get_spec(task)
  _check_split(task, split)
  seed = synthetic.check_seed(seed)
  if data_dir is not None:
    if spec.data_dir_mode == 'none':
      raise MonolocError(f'task {task!r} is generated in code and takes no '
                         f'data_dir (got {data_dir!r})')
    data_dir = os.fspath(data_dir)
  elif spec.data_dir_mode == 'required':
    raise MonolocError(spec.missing_data_dir)
  if data_dir is not None or not cache:
    return list(spec.loader(split, seed, data_dir)[split])
  return _load_generated(task, split, seed, spec)


def load(task: str, split: str, seed: int = 0,
         data_dir: Optional[str] = None, *, cache: bool = True) -> List[Pair]:
  """Like `load_examples`, as (source, target) token tuples."""
  return [(ex.source, ex.target)
          for ex in load_examples(task, split, seed, data_dir, cache=cache)]
