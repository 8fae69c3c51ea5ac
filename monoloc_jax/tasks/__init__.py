"""The single entry point for all twenty-seven tasks.

    from monoloc_jax import tasks
    tasks.TASKS                          # task slugs
    tasks.splits('copy')                 # split names
    tasks.load('copy', 'train', seed=0)  # [(source, target), ...]
    tasks.load_splits('copy', ('train', 'dev'))  # {split: [Example, ...]}
    tasks.get('copy').split_lengths      # the task's facts: a TaskSpec
    tasks.sample('copy', 150, n=100, seed=0, exclude=train)  # any length

Every task is one `TaskSpec`: its splits, the splits the paper reports, its
training lengths and each evaluation split's input length, and how to load
it. Every function here takes a task slug or a `TaskSpec`, so a task defined
outside the package works like a built-in one; `digit_task` makes the spec of
a new synthetic digit task from its rule.

A task with a length axis (the digit tasks, Lookup, the Chomsky-hierarchy
tasks of `chomsky`) also makes examples at any length (range evaluation): `sample(task, length, n, seed, exclude)` returns up
to n distinct examples whose source has exactly `length` in the task's
`length_unit`, drawn as the task's generator draws, none with a source in
`exclude`; `lengths_of` / `length_of` read an example's length back.

Generated data (the digit and Chomsky-hierarchy tasks, and Lookup when no
`data_dir` is given) is cached on disk as JSON under
`<cache_dir>/<task>/v<version>/seed<seed>/<split>.json`, where the cache
directory is `$MONOLOC_CACHE_DIR` or `~/.cache/monoloc_jax`. A cache file that
cannot be read is regenerated. Data read from files (`data_dir`) is not cached.
"""

import dataclasses
import functools
import json
import logging
import numbers
import os
import pathlib
import re
import tempfile
from types import MappingProxyType
from typing import (Any, Callable, Dict, FrozenSet, Iterable, List, Mapping,
                    Optional, Sequence, Tuple, Union)

from monoloc_jax.errors import MonolocError
from monoloc_jax.errors import unknown_name
from monoloc_jax.tasks import cfq
from monoloc_jax.tasks import chomsky
from monoloc_jax.tasks import lookup
from monoloc_jax.tasks import scan
from monoloc_jax.tasks import synthetic
from monoloc_jax.tasks.types import Example

__all__ = [
    'CACHE_DIR_ENV',
    'DATA_DIR_MODES',
    'Example',
    'LengthSampler',
    'TASKS',
    'TaskLike',
    'TaskSpec',
    'cache_dir',
    'cache_path',
    'digit_task',
    'get',
    'length_of',
    'lengths_of',
    'load',
    'load_examples',
    'load_splits',
    'paper_length_splits',
    'sample',
    'splits',
    'test_splits',
]

CACHE_DIR_ENV = 'MONOLOC_CACHE_DIR'
_CACHE_FORMAT = 'monoloc_jax.tasks.cache'

Pair = Tuple[Tuple[str, ...], Tuple[str, ...]]
# (splits, seed, data_dir) -> {split: examples}. The mapping holds every
# requested split and may hold sibling splits made in the same pass (when the
# data is generated, they are cached too).
Loader = Callable[[Tuple[str, ...], int, Optional[str]],
                  Mapping[str, Sequence[Example]]]
Source = Tuple[str, ...]
# (length, n, seed, exclude, data_seed, data_dir) -> examples; see
# `LengthSampler`.
Sampler = Callable[[int, int, int, FrozenSet[Source], int, Optional[str]],
                   Sequence[Example]]

# 'none': generated in code, a data_dir is an error; 'optional': generated
# when data_dir is None, else read from it; 'required': read from data_dir.
DATA_DIR_MODES = ('none', 'optional', 'required')
_TRAIN_DEV = ('train', 'dev')
# A task name keys its cache folder: no path separators, no leading dot.
_NAME_PATTERN = r'[A-Za-z0-9_][A-Za-z0-9_.-]*'
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """Everything the library knows about one task.

  Attributes:
    name: the task's slug; it names the task in messages and keys its cache.
    splits: every split name, train and dev first, then the evaluation splits.
    paper_splits: the evaluation splits the paper's tables report.
    loader: see `Loader`.
    data_dir_mode: one of `DATA_DIR_MODES`.
    version: generator version of generated data (keys the cache); bump it
      when the generated data changes. Unused (None) for data that is only
      read from files (data_dir_mode 'required').
    missing_data_dir: the error message when a required data_dir is missing.
    train_lengths: (shortest, longest) input length of the training data, in
      `length_unit`; None for a task without a length axis (SCAN, CFQ).
    split_lengths: evaluation split -> the input length it stands for, in
      `length_unit` (the x position of its point on an accuracy-versus-length
      plot); only splits with a length are listed.
    length_unit: what a length counts, e.g. 'items' or 'source tokens'.
    test_lengths: (shortest, longest) length a range evaluation scores by
      default (the Chomsky-hierarchy suite's 41-500); None: range_eval's rule
      from `train_lengths`.
    sampler: how the task makes examples at any length (`LengthSampler`);
      None for a task without a length axis (`sample` refuses it).
  """
  name: str
  splits: Tuple[str, ...]
  paper_splits: Tuple[str, ...]
  loader: Loader
  data_dir_mode: str
  version: Optional[int] = None
  missing_data_dir: str = ''
  train_lengths: Optional[Tuple[float, float]] = None
  split_lengths: Mapping[str, float] = dataclasses.field(
      default_factory=dict, hash=False)
  length_unit: str = ''
  sampler: Optional['LengthSampler'] = None
  test_lengths: Optional[Tuple[int, int]] = None

  def __post_init__(self):
    name = self.name
    if not isinstance(name, str) or not re.fullmatch(_NAME_PATTERN, name):
      raise MonolocError(
          f'a task name must be letters, digits, _ . - (not starting with . '
          f'or -), got {name!r}')
    set_field = functools.partial(object.__setattr__, self)
    set_field('splits', tuple(self.splits))
    set_field('paper_splits', tuple(self.paper_splits))
    if (self.splits[:2] != _TRAIN_DEV or len(set(self.splits)) !=
        len(self.splits) or not all(isinstance(s, str) for s in self.splits)):
      raise MonolocError(
          f'splits of task {name!r} must be distinct names starting with '
          f'train, dev; got {self.splits!r}')
    evaluation = self.splits[2:]
    for field, names in (('paper_splits', self.paper_splits),
                         ('split_lengths', tuple(self.split_lengths))):
      stray = [s for s in names if s not in evaluation]
      if stray:
        raise MonolocError(
            f'{field} of task {name!r} names {", ".join(map(repr, stray))}; '
            f'valid: its evaluation splits {", ".join(evaluation)}')
    if not callable(self.loader):
      raise MonolocError(f'loader of task {name!r} must be callable')
    if self.data_dir_mode not in DATA_DIR_MODES:
      raise unknown_name('data_dir_mode', self.data_dir_mode, DATA_DIR_MODES)
    if self.data_dir_mode != 'required' and (
        isinstance(self.version, bool) or not isinstance(self.version, int)):
      raise MonolocError(
          f'task {name!r} generates data, so it needs an integer version (it '
          f'keys the cache); got {self.version!r}')
    for field in ('train_lengths', 'test_lengths'):
      value = getattr(self, field)
      if value is None:
        continue
      try:
        lo, hi = value
        ordered = lo <= hi
      except (TypeError, ValueError):
        ordered = False
      if not ordered:
        raise MonolocError(f'{field} of task {name!r} must be (shortest, '
                           f'longest), got {value!r}')
      set_field(field, (lo, hi))
    set_field('split_lengths', MappingProxyType(dict(self.split_lengths)))
    if self.sampler is not None and not isinstance(self.sampler,
                                                   LengthSampler):
      raise MonolocError(f'sampler of task {name!r} must be a LengthSampler '
                         f'or None, got {self.sampler!r}')


TaskLike = Union[str, TaskSpec]


@dataclasses.dataclass(frozen=True)
class LengthSampler:
  """How a task makes examples at any length, in its `length_unit`.

  Attributes:
    sample: (length, n, seed, exclude, data_seed, data_dir) -> at most n
      examples with distinct sources, each of exactly `length` and none with a
      source in `exclude`; fewer only when fewer such inputs exist (see
      `sampling.draw_distinct` for when it fails instead). The same
      arguments give the same examples. `data_seed` / `data_dir` name the data
      the model was trained on, for a task whose rule depends on it (Lookup's
      tables); `data_dir` is checked like `load_splits` checks it.
    lengths_of: example -> the lengths at which `sample` can make it (one for
      every built-in task but DeDupe; empty if it cannot make it).
    min_length: the shortest length `sample` makes.
  """
  sample: Sampler
  lengths_of: Callable[[Example], FrozenSet[int]]
  min_length: int = 1

  def __post_init__(self):
    for field in ('sample', 'lengths_of'):
      if not callable(getattr(self, field)):
        raise MonolocError(f'{field} of a LengthSampler must be callable, got '
                           f'{getattr(self, field)!r}')
    if not _is_count(self.min_length):
      raise MonolocError(f'min_length of a LengthSampler must be an integer '
                         f'>= 0, got {self.min_length!r}')


def _is_count(value: Any) -> bool:
  """Whether `value` is an integer >= 0 (not a bool)."""
  return (isinstance(value, numbers.Integral) and
          not isinstance(value, bool) and value >= 0)


# --------------------------------------------------------------- loaders ---


def _load_digit(digit: synthetic.DigitTask, names: Tuple[str, ...], seed: int,
                data_dir: Optional[str]) -> Mapping[str, List[Example]]:
  del names, data_dir  # All splits are generated together.
  return synthetic.generate(digit, seed)


def _load_lookup(reverse: bool, names: Tuple[str, ...], seed: int,
                 data_dir: Optional[str]) -> Mapping[str, List[Example]]:
  if data_dir is None:
    names = lookup.SPLITS  # One generation makes every split.
  return lookup.load_splits(names, reverse=reverse, seed=seed,
                            data_dir=data_dir)


def _load_scan(names: Tuple[str, ...], seed: int,
               data_dir: Optional[str]) -> Mapping[str, List[Example]]:
  del seed  # Fixed data.
  return scan.load_splits(names, data_dir=data_dir)


def _load_cfq(names: Tuple[str, ...], seed: int,
              data_dir: Optional[str]) -> Mapping[str, List[Example]]:
  del seed  # Fixed data.
  return cfq.load_splits(names, data_dir=data_dir)


# ------------------------------------------------------------- samplers ---


def _data_free(sample: Callable[..., List[Example]], task: Any, length: int, n: int,
               seed: int, exclude: FrozenSet[Source], data_seed: int,
               data_dir: Optional[str]) -> List[Example]:
  """A `Sampler` from `sample(task, length, n, seed, exclude)` of a task whose rule does
  not depend on the data (digit and Chomsky tasks: data_seed and data_dir unused)."""
  del data_seed, data_dir
  return sample(task, length, n, seed, exclude)


def _digit_lengths(digit: synthetic.DigitTask,
                   example: Example) -> FrozenSet[int]:
  return synthetic.item_lengths(digit, example.source)


def _sample_lookup(reverse: bool, length: int, n: int, seed: int,
                   exclude: FrozenSet[Source], data_seed: int,
                   data_dir: Optional[str]) -> List[Example]:
  rule = (lookup.generated_rule(data_seed) if data_dir is None else
          lookup.file_rule(data_dir, reverse=reverse))
  return lookup.sample(length, n, seed, exclude, reverse=reverse, rule=rule)


def _source_tokens(example: Example) -> FrozenSet[int]:
  return frozenset((len(example.source),))


def _load_chomsky(task: chomsky.ChomskyTask, names: Tuple[str, ...], seed: int,
                  data_dir: Optional[str]) -> Mapping[str, List[Example]]:
  del names, data_dir  # All splits are generated together.
  return chomsky.generate(task, seed)


def _chomsky_lengths(task: chomsky.ChomskyTask,
                     example: Example) -> FrozenSet[int]:
  return chomsky.lengths_of(task, example.source)


# ------------------------------------------------------------ the tasks ---


def _digit_spec(digit: synthetic.DigitTask) -> TaskSpec:
  return TaskSpec(
      name=digit.name,
      splits=synthetic.SPLITS,
      paper_splits=synthetic.PAPER_SPLITS,
      loader=functools.partial(_load_digit, digit),
      data_dir_mode='none',
      version=synthetic.GENERATOR_VERSION,
      train_lengths=synthetic.TRAIN_LENGTHS,
      split_lengths=synthetic.SPLIT_LENGTHS,
      length_unit='items',
      sampler=LengthSampler(functools.partial(_data_free, synthetic.sample, digit),
                            functools.partial(_digit_lengths, digit)))


def _lookup_spec(name: str, reverse: bool) -> TaskSpec:
  return TaskSpec(
      name=name,
      splits=lookup.SPLITS,
      paper_splits=lookup.PAPER_SPLITS,
      loader=functools.partial(_load_lookup, reverse),
      data_dir_mode='optional',
      version=lookup.GENERATOR_VERSION,
      train_lengths=lookup.TRAIN_LENGTHS,
      split_lengths=lookup.SPLIT_LENGTHS,
      length_unit='source tokens',
      sampler=LengthSampler(functools.partial(_sample_lookup, reverse),
                            _source_tokens,
                            min_length=lookup.source_length(1)))


def _chomsky_spec(task: chomsky.ChomskyTask) -> TaskSpec:
  return TaskSpec(
      name=task.name,
      splits=chomsky.SPLITS,
      paper_splits=chomsky.PAPER_SPLITS,
      loader=functools.partial(_load_chomsky, task),
      data_dir_mode='none',
      version=chomsky.GENERATOR_VERSION,
      train_lengths=chomsky.train_lengths(task),
      split_lengths=chomsky.split_lengths(task),
      length_unit=task.unit,
      sampler=LengthSampler(functools.partial(_data_free, chomsky.sample, task),
                            functools.partial(_chomsky_lengths, task),
                            min_length=task.min_length),
      test_lengths=chomsky.TEST_LENGTHS)


_SCAN_MISSING = (
    "task 'scan_length' needs data_dir: a directory with the SCAN length "
    'split files tasks_train_length.txt, tasks_validation_length.txt and '
    "tasks_test_length.txt; fetch all three with "
    "monoloc_jax.tasks.scan.download(dest_dir, source='machine_tasks')")
_CFQ_MISSING = (
    "task 'cfq_length' needs data_dir: the unpacked official CFQ release, "
    'holding dataset.json and splits/length_split.json')

_SPECS: Tuple[TaskSpec, ...] = (
    _digit_spec(synthetic.DIGIT_TASKS['copy']),
    _digit_spec(synthetic.DIGIT_TASKS['reverse_copy']),
    _lookup_spec('lookup', reverse=False),
    _lookup_spec('reverse_lookup', reverse=True),
    *(_digit_spec(synthetic.DIGIT_TASKS[name]) for name in (
        'recopy', 'reverse_recopy', 'inv_recopy', 'inv_reverse_recopy',
        'dedupe', 'posretrieve')),
    TaskSpec(
        name='scan_length',
        splits=scan.SPLITS,
        paper_splits=('test',),
        loader=_load_scan,
        data_dir_mode='required',
        missing_data_dir=_SCAN_MISSING),
    TaskSpec(
        name='cfq_length',
        splits=cfq.SPLITS,
        paper_splits=('test',),
        loader=_load_cfq,
        data_dir_mode='required',
        missing_data_dir=_CFQ_MISSING),
    *(_chomsky_spec(task) for task in chomsky.TASKS.values()),
)
_REGISTRY: Mapping[str, TaskSpec] = MappingProxyType(
    {spec.name: spec for spec in _SPECS})
TASKS: Tuple[str, ...] = tuple(_REGISTRY)


def digit_task(name: str, rule: synthetic.Rule, task_id: int, *,
               build_source: synthetic.SourceBuilder = synthetic.items_as_source,
               item_lengths: Optional[synthetic.ItemLengths] = None
               ) -> TaskSpec:
  """The spec of a new synthetic digit task, generated like the built-in ones.

  It has the nine digit splits with their sizes and item lengths
  (`synthetic.SPLIT_SPECS`), distinct inputs within and across splits,
  per-split random streams seeded with (seed, task_id, split id), and a
  sampler at any item length (`sample`). Nothing is registered: pass the returned spec wherever a task slug is accepted.

    swap = tasks.digit_task('swap_pairs', my_rule, task_id=100)
    tasks.load_splits(swap, ('train', 'dev'), seed=0)

  Args:
    name: a new slug (not one of `TASKS`); it keys the on-disk cache, so give
      a changed rule a new name (or load with cache=False).
    rule: source tokens -> target tokens.
    task_id: integer >= 0, not one of the built-in digit tasks' ids
      (`synthetic.TASK_IDS`), so the task draws its own inputs.
    build_source: how drawn items become an input (see
      `synthetic.DigitTask`); by default the items are the input.
    item_lengths: for a custom `build_source`, source -> the item lengths it
      can be built from (`synthetic.ItemLengths`), so `lengths_of` works.

  Returns:
    The task's `TaskSpec`.
  """
  digit = synthetic.DigitTask(name, task_id, rule, build_source, item_lengths)
  if name in _REGISTRY:
    raise MonolocError(f'task name {name!r} is taken by a built-in task; '
                       f'built-in tasks: {", ".join(TASKS)}')
  taken = {task_id: task for task, task_id in synthetic.TASK_IDS.items()}
  if task_id in taken:
    raise MonolocError(
        f'task_id {task_id!r} is taken by {taken[task_id]!r}; the built-in '
        f'digit tasks use {", ".join(map(str, sorted(taken)))}')
  return _digit_spec(digit)


# ------------------------------------------------------------- queries ---


def get(task: TaskLike) -> TaskSpec:
  """The spec of `task` (a slug of `TASKS`, or a TaskSpec, returned as is).

  Raises:
    MonolocError: unknown slug.
  """
  if isinstance(task, TaskSpec):
    return task
  spec = _REGISTRY.get(task) if isinstance(task, str) else None
  if spec is None:
    raise unknown_name('task', task, TASKS)
  return spec


def splits(task: TaskLike) -> Tuple[str, ...]:
  """All split names of `task`: train, dev, then the evaluation splits."""
  return get(task).splits


def test_splits(task: TaskLike) -> Tuple[str, ...]:
  """The evaluation splits of `task` (every split except train and dev)."""
  return get(task).splits[len(_TRAIN_DEV):]


test_splits.__test__ = False  # Not a pytest test when imported by name.


def paper_length_splits(task: TaskLike) -> Tuple[str, ...]:
  """The evaluation splits the paper's tables report for `task`."""
  return get(task).paper_splits


def _check_split(spec: TaskSpec, split: str) -> None:
  if split not in spec.splits:
    raise MonolocError(f'unknown split {split!r} for task {spec.name!r}; '
                       f'valid splits: {", ".join(spec.splits)}')


# --------------------------------------------------------------- cache ---


def cache_dir() -> pathlib.Path:
  """`$MONOLOC_CACHE_DIR` if set and non-empty, else ~/.cache/monoloc_jax."""
  env = os.environ.get(CACHE_DIR_ENV)
  if env:
    return pathlib.Path(env).expanduser()
  return pathlib.Path.home() / '.cache' / 'monoloc_jax'


def cache_path(task: TaskLike, split: str, seed: int = 0) -> pathlib.Path:
  """Where the generated `split` of `task` for `seed` is cached."""
  spec = get(task)
  if spec.data_dir_mode == 'required':
    raise MonolocError(
        f'task {spec.name!r} is read from files and is not cached')
  _check_split(spec, split)
  seed = synthetic.check_seed(seed)
  return (cache_dir() / spec.name / f'v{spec.version}' / f'seed{seed}' /
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
  except (OSError, ValueError, RecursionError) as e:
    _LOG.warning('unreadable task cache %s (%s); regenerating', path, type(e).__name__)
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


def _header(spec: TaskSpec, split: str, seed: int) -> dict:
  return {'format': _CACHE_FORMAT, 'task': spec.name, 'split': split,
          'seed': seed, 'generator_version': spec.version}


# -------------------------------------------------------------- loading ---


def _run_loader(spec: TaskSpec, names: Tuple[str, ...], seed: int,
                data_dir: Optional[str]) -> Mapping[str, Sequence[Example]]:
  loaded = spec.loader(names, seed, data_dir)
  missing = [name for name in names if name not in loaded]
  if missing:
    raise MonolocError(f'the loader of task {spec.name!r} returned no '
                       f'{", ".join(missing)} split')
  return loaded


def _check_data_dir(spec: TaskSpec, data_dir: Optional[os.PathLike]
                    ) -> Optional[str]:
  """`data_dir` as a str (or None) if `spec` accepts it, else MonolocError."""
  if data_dir is not None:
    if spec.data_dir_mode == 'none':
      raise MonolocError(f'task {spec.name!r} is generated in code and takes '
                         f'no data_dir (got {data_dir!r})')
    return os.fspath(data_dir)
  if spec.data_dir_mode == 'required':
    raise MonolocError(spec.missing_data_dir or
                       f'task {spec.name!r} needs data_dir')
  return None


def load_splits(task: TaskLike, split_names: Sequence[str], seed: int = 0,
                data_dir: Optional[str] = None, *,
                cache: bool = True) -> Dict[str, List[Example]]:
  """Loads several splits of one task in one pass.

  Generated data is generated once for all splits (and cached); files are read
  once each (CFQ's dataset.json is streamed once for all splits).

  Args:
    task: one of `TASKS`, or a TaskSpec.
    split_names: names from `splits(task)`.
    seed: data seed of generated tasks (digit tasks; Lookup without data_dir).
      Ignored for data read from files.
    data_dir: directory of the data files. Required for scan_length and
      cfq_length; optional for lookup/reverse_lookup (None generates the data
      in code); not accepted by the digit tasks.
    cache: read/write the on-disk cache of generated data.

  Returns:
    {split: examples} in the order of `split_names`; targets do not include
    `<eos>`.
  """
  spec = get(task)
  if isinstance(split_names, str):
    raise MonolocError(
        f'split_names must be a sequence of split names, e.g. '
        f'({split_names!r},), not the string {split_names!r}')
  names = tuple(dict.fromkeys(split_names))
  for split in names:
    _check_split(spec, split)
  seed = synthetic.check_seed(seed)
  data_dir = _check_data_dir(spec, data_dir)
  if data_dir is not None or not cache:
    loaded = _run_loader(spec, names, seed, data_dir)
    return {name: list(loaded[name]) for name in names}

  out: Dict[str, List[Example]] = {}
  for name in names:
    cached = _read_cache(cache_path(spec, name, seed),
                         _header(spec, name, seed))
    if cached is not None:
      out[name] = cached
  missing = tuple(name for name in names if name not in out)
  if missing:
    generated = _run_loader(spec, missing, seed, None)
    for name, examples in generated.items():
      if name in spec.splits:
        _write_cache(cache_path(spec, name, seed), _header(spec, name, seed),
                     examples)
    out.update((name, list(generated[name])) for name in missing)
  return {name: out[name] for name in names}


def load_examples(task: TaskLike, split: str, seed: int = 0,
                  data_dir: Optional[str] = None, *,
                  cache: bool = True) -> List[Example]:
  """Loads one split of one task (see `load_splits` for the arguments)."""
  return load_splits(task, (split,), seed, data_dir, cache=cache)[split]


def load(task: TaskLike, split: str, seed: int = 0,
         data_dir: Optional[str] = None, *, cache: bool = True) -> List[Pair]:
  """Like `load_examples`, as (source, target) token tuples."""
  return [(ex.source, ex.target)
          for ex in load_examples(task, split, seed, data_dir, cache=cache)]


# ------------------------------------------------------- any length ---

_NO_AXIS_REASONS = {'required': 'its data are read from files'}


def _sampler(spec: TaskSpec) -> LengthSampler:
  """The sampler of `spec`, or the one-line error of a task without one."""
  if spec.sampler is None:
    reason = _NO_AXIS_REASONS.get(spec.data_dir_mode, 'it has no sampler')
    with_axis = [name for name, other in _REGISTRY.items() if other.sampler]
    raise MonolocError(f'task {spec.name!r} has no length axis: {reason}; '
                       f'tasks with one: {", ".join(with_axis)}')
  return spec.sampler


def _sources(exclude: Iterable[Union[Example, Sequence[str]]]
             ) -> FrozenSet[Source]:
  """Sources (token sequences, or examples for their sources) as tuples."""
  if isinstance(exclude, (str, Example)):
    raise MonolocError('exclude must be a collection of sources or examples, '
                       f'not one {type(exclude).__name__}')
  return frozenset(tuple(item.source) if isinstance(item, Example) else
                   tuple(item) for item in exclude)


def sample(task: TaskLike, length: int, n: int, seed: int = 0,
           exclude: Iterable[Union[Example, Sequence[str]]] = (), *,
           data_seed: int = 0,
           data_dir: Optional[os.PathLike] = None) -> List[Example]:
  """Up to `n` examples of `task` at exactly `length` (its `length_unit`).

  They are drawn as the task's generator draws an input of that length (digit
  tasks: `synthetic.sample`; Lookup: `lookup.sample`; the Chomsky-hierarchy
  tasks: `chomsky.sample`), with distinct sources,
  none in `exclude`; fewer than `n` come back only when fewer such inputs
  exist (copy at 1 item has 10). Not cached.

    train = tasks.load_examples('copy', 'train')
    tasks.sample('copy', 500, n=100, seed=1, exclude=train)

  Args:
    task: one of `TASKS`, or a TaskSpec with a `sampler`.
    length: integer >= the task's `sampler.min_length` (digit tasks: 1 item;
      Lookup: 3 source tokens, one table; Chomsky tasks: 1, 2 or 3 tokens).
    n: examples wanted, integer >= 0.
    seed: the same (task, length, n, seed, exclude) gives the same examples.
    exclude: sources (token sequences) or examples (their sources) never
      returned, e.g. the training split.
    data_seed, data_dir: the data the model was trained on, for a rule that
      depends on it: Lookup's tables are those of `load(..., seed=data_seed)`,
      or read from `data_dir`'s train file. Digit tasks take no data_dir.

  Returns:
    The examples; targets without `<eos>`.

  Raises:
    MonolocError: a task without a length axis (SCAN, CFQ), a bad length, n,
      seed or data_dir.
  """
  spec = get(task)
  sampler = _sampler(spec)
  if not _is_count(length) or length < sampler.min_length:
    raise MonolocError(
        f'length of task {spec.name!r} must be an integer >= '
        f'{sampler.min_length} ({spec.length_unit or "its unit"}), got '
        f'{length!r}')
  if not _is_count(n):
    raise MonolocError(f'n must be an integer >= 0, got {n!r}')
  seed = synthetic.check_seed(seed)
  data_seed = synthetic.check_seed(data_seed)
  data_dir = _check_data_dir(spec, data_dir)
  return list(sampler.sample(int(length), int(n), seed, _sources(exclude),
                             data_seed, data_dir))


def lengths_of(task: TaskLike, example: Example) -> FrozenSet[int]:
  """Every length (in `task`'s unit) at which `sample` can make `example`.

  One length for every built-in task but DeDupe, whose runs of equal digits
  are ambiguous (`synthetic.ItemLengths`); empty if it cannot make it.
  """
  return frozenset(_sampler(get(task)).lengths_of(example))


def length_of(task: TaskLike, example: Example) -> int:
  """The length of `example`'s source in `task`'s `length_unit`.

  Raises:
    MonolocError: a task without a length axis, or an example whose length
      is not one number (a DeDupe source: use `lengths_of`).
  """
  spec = get(task)
  found = lengths_of(spec, example)
  if len(found) != 1:
    raise MonolocError(
        f'the length of this {spec.name!r} example is not one number: it '
        f'could be made at {", ".join(map(str, sorted(found))) or "no"} '
        f'{spec.length_unit or "length"}; use tasks.lengths_of')
  return next(iter(found))
