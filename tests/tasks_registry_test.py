"""Tests of the task registry, split validation and the on-disk cache."""

import json
import os
import sys
import types

import pytest

from monoloc_jax import tasks
from monoloc_jax.errors import MonolocError
from monoloc_jax.tasks import synthetic
from monoloc_jax.tasks.types import Example

ALL_TASKS = ('copy', 'reverse_copy', 'lookup', 'reverse_lookup', 'recopy',
             'reverse_recopy', 'inv_recopy', 'inv_reverse_recopy', 'dedupe',
             'posretrieve', 'scan_length', 'cfq_length')
DIGIT_TASKS = ('copy', 'reverse_copy', 'recopy', 'reverse_recopy',
               'inv_recopy', 'inv_reverse_recopy', 'dedupe', 'posretrieve')
DIGIT_SPLITS = ('train', 'dev', 'test_iid', 'test_15', 'test_20', 'test_25',
                'test_30', 'test_50', 'test_100')
LOOKUP_SPLITS = ('train', 'dev', 'test_iid', 'test_long1', 'test_long2',
                 'test_long3', 'test_long4', 'test_long5')


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
  path = tmp_path / 'cache'
  monkeypatch.setenv('MONOLOC_CACHE_DIR', str(path))
  return path


class FakeLookup(types.ModuleType):
  """Stands in for monoloc_jax.tasks.lookup and records its calls."""

  SPLITS = LOOKUP_SPLITS
  GENERATOR_VERSION = 7

  def __init__(self):
    super().__init__('monoloc_jax.tasks.lookup')
    self.calls = []

  def load_split(self, split, *, reverse, seed, data_dir):
    self.calls.append((split, reverse, seed, data_dir))
    return [Example(('000', 't1', '.'), ('000', '110'), (0, 1, 2))]


class FakeFiles(types.ModuleType):
  """Stands in for the scan / cfq readers."""

  SPLITS = ('train', 'dev', 'test')

  def __init__(self, name):
    super().__init__(f'monoloc_jax.tasks.{name}')
    self.calls = []

  def load_split(self, split, *, data_dir):
    self.calls.append((split, data_dir))
    return [Example(('jump',), ('JUMP',))]


@pytest.fixture
def fake_lookup(monkeypatch):
  fake = FakeLookup()
  monkeypatch.setitem(sys.modules, 'monoloc_jax.tasks.lookup', fake)
  return fake


# --------------------------------------------------------------- registry ---


def test_task_names_and_order():
  assert tasks.TASKS == ALL_TASKS


@pytest.mark.parametrize('task', DIGIT_TASKS)
def test_digit_splits(task):
  assert tasks.splits(task) == DIGIT_SPLITS
  assert tasks.test_splits(task) == DIGIT_SPLITS[2:]
  assert tasks.paper_length_splits(task) == ('test_15', 'test_30', 'test_100')


@pytest.mark.parametrize('task', ['lookup', 'reverse_lookup'])
def test_lookup_splits(task, fake_lookup):
  assert tasks.splits(task) == LOOKUP_SPLITS
  assert tasks.test_splits(task) == LOOKUP_SPLITS[2:]
  assert tasks.paper_length_splits(task) == (
      'test_long1', 'test_long3', 'test_long5')


def test_lookup_splits_match_the_real_module():
  lookup = pytest.importorskip('monoloc_jax.tasks.lookup')
  assert tasks.splits('lookup') == tuple(lookup.SPLITS) == LOOKUP_SPLITS


@pytest.mark.parametrize('task', ['scan_length', 'cfq_length'])
def test_file_task_splits(task):
  assert tasks.splits(task) == ('train', 'dev', 'test')
  assert tasks.test_splits(task) == ('test',)
  assert tasks.paper_length_splits(task) == ('test',)


def test_test_splits_is_not_collected_by_pytest():
  assert tasks.test_splits.__test__ is False


# ----------------------------------------------------------------- errors ---


@pytest.mark.parametrize('call', [
    lambda: tasks.splits('kopy'),
    lambda: tasks.test_splits('kopy'),
    lambda: tasks.paper_length_splits('kopy'),
    lambda: tasks.load('kopy', 'train'),
])
def test_unknown_task(call):
  with pytest.raises(MonolocError) as info:
    call()
  message = str(info.value)
  assert message.startswith("unknown task 'kopy'; valid tasks: ")
  assert '\n' not in message
  for task in ALL_TASKS:
    assert task in message


def test_unknown_split():
  with pytest.raises(
      MonolocError,
      match=(r"^unknown split 'test_7' for task 'copy'; valid splits: train, "
             r'dev, test_iid, test_15, test_20, test_25, test_30, test_50, '
             r'test_100$')):
    tasks.load('copy', 'test_7')
  with pytest.raises(MonolocError,
                     match="valid splits: train, dev, test$"):
    tasks.load('scan_length', 'test_iid', data_dir='/nowhere')


def test_scan_needs_data_dir():
  with pytest.raises(MonolocError) as info:
    tasks.load('scan_length', 'train')
  message = str(info.value)
  for needed in ('data_dir', 'monoloc_jax.tasks.scan.download',
                 'tasks_train_length.txt', 'tasks_validation_length.txt',
                 'tasks_test_length.txt'):
    assert needed in message
  assert '\n' not in message


def test_cfq_needs_data_dir():
  with pytest.raises(MonolocError,
                     match=r'data_dir.*dataset\.json.*splits/length_split\.json'):
    tasks.load('cfq_length', 'test')


def test_digit_tasks_take_no_data_dir():
  with pytest.raises(MonolocError, match='generated in code'):
    tasks.load('copy', 'train', data_dir='/tmp')


@pytest.mark.parametrize('seed', [-1, 1.0, '0', True])
def test_bad_seed(seed):
  with pytest.raises(MonolocError, match='non-negative integer'):
    tasks.load('copy', 'train', seed=seed)


# ---------------------------------------------------------------- loading ---


def test_load_returns_pairs_matching_the_generator():
  pairs = tasks.load('recopy', 'test_15', seed=2)
  expected = synthetic.generate('recopy', seed=2)['test_15']
  assert pairs == [(ex.source, ex.target) for ex in expected]
  assert all(isinstance(src, tuple) and isinstance(tgt, tuple)
             for src, tgt in pairs)
  assert tasks.load_examples('recopy', 'test_15', seed=2) == expected


@pytest.mark.parametrize('task,module', [('scan_length', 'scan'),
                                         ('cfq_length', 'cfq')])
def test_file_tasks_delegate_to_their_reader(task, module, monkeypatch,
                                             cache_dir, tmp_path):
  fake = FakeFiles(module)
  monkeypatch.setitem(sys.modules, f'monoloc_jax.tasks.{module}', fake)
  data_dir = tmp_path / 'data'
  assert tasks.load(task, 'dev', data_dir=data_dir) == [(('jump',), ('JUMP',))]
  assert fake.calls == [('dev', str(data_dir))]
  assert not cache_dir.exists()


def test_lookup_with_data_dir_is_read_not_cached(fake_lookup, cache_dir):
  examples = tasks.load_examples('reverse_lookup', 'test_long3', seed=5,
                                 data_dir='/data/lookup/reverse')
  assert examples[0].gold_attention == (0, 1, 2)
  assert fake_lookup.calls == [('test_long3', True, 5, '/data/lookup/reverse')]
  assert not cache_dir.exists()


def test_generated_lookup_is_cached(fake_lookup, cache_dir):
  first = tasks.load_examples('lookup', 'dev', seed=3)
  path = cache_dir / 'lookup' / 'v7' / 'seed3' / 'dev.json'
  assert path.is_file()
  assert tasks.cache_path('lookup', 'dev', 3) == path
  again = tasks.load_examples('lookup', 'dev', seed=3)
  assert first == again
  assert again[0].gold_attention == (0, 1, 2)
  assert fake_lookup.calls == [('dev', False, 3, None)]


# ------------------------------------------------------------------ cache ---


def _refuse(*args, **kwargs):
  raise AssertionError('generator called although the data is cached')


def test_cache_layout_and_hit(cache_dir, monkeypatch):
  first = tasks.load_examples('copy', 'test_20', seed=1)
  # All splits of the seed were generated together, and all were cached.
  folder = cache_dir / 'copy' / f'v{synthetic.GENERATOR_VERSION}' / 'seed1'
  assert sorted(p.name for p in folder.iterdir()) == sorted(
      f'{split}.json' for split in DIGIT_SPLITS)
  monkeypatch.setattr(synthetic, 'generate', _refuse)
  assert tasks.load_examples('copy', 'test_20', seed=1) == first
  assert len(tasks.load_examples('copy', 'train', seed=1)) == 10_000
  with pytest.raises(AssertionError, match='generator called'):
    tasks.load_examples('copy', 'test_20', seed=2)


@pytest.mark.parametrize('garbage', [
    '{"format": "monoloc_jax.tasks.cache", "examp',  # Truncated write.
    '[1, 2, 3]',
    '',
    '\x00\xff binary',
    'WRONG_SEED',
    'BAD_ROW',
])
def test_corrupt_cache_is_regenerated(garbage, cache_dir):
  expected = tasks.load_examples('copy', 'test_30', seed=0)
  path = tasks.cache_path('copy', 'test_30', 0)
  content = json.loads(path.read_text())
  if garbage == 'WRONG_SEED':
    content['seed'] = 1
    garbage = json.dumps(content)
  elif garbage == 'BAD_ROW':
    content['examples'][5] = ['1 2', 3, None]
    garbage = json.dumps(content)
  path.write_text(garbage, encoding='latin-1')
  assert tasks.load_examples('copy', 'test_30', seed=0) == expected
  repaired = json.loads(path.read_text())  # Overwritten with good data.
  assert len(repaired['examples']) == 2000
  assert repaired['seed'] == 0
  assert not [p for p in path.parent.iterdir() if p.name.endswith('.tmp')]


def test_cache_off(cache_dir):
  examples = tasks.load_examples('posretrieve', 'test_50', cache=False)
  assert len(examples) == 2000
  assert not cache_dir.exists()


def test_default_cache_dir(monkeypatch, tmp_path):
  monkeypatch.delenv('MONOLOC_CACHE_DIR')
  monkeypatch.setenv('HOME', str(tmp_path))
  assert tasks.cache_dir() == tmp_path / '.cache' / 'monoloc_jax'


def test_unwritable_cache_still_loads(cache_dir, monkeypatch):
  cache_dir.parent.mkdir(parents=True, exist_ok=True)
  cache_dir.write_text('a file where the cache folder should be')
  examples = tasks.load_examples('reverse_copy', 'test_25', seed=0)
  assert examples == synthetic.generate('reverse_copy', seed=0)['test_25']
  assert cache_dir.is_file()
  assert os.path.getsize(cache_dir) > 0


def test_cache_path_rejects_file_tasks():
  with pytest.raises(MonolocError, match='not cached'):
    tasks.cache_path('scan_length', 'train')
