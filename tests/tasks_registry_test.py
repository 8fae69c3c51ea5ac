"""Tests of the task registry, split validation and the on-disk cache."""

import json
import os

import pytest

from monoloc_jax import tasks
from monoloc_jax.errors import MonolocError
from monoloc_jax.tasks import cfq
from monoloc_jax.tasks import lookup
from monoloc_jax.tasks import scan
from monoloc_jax.tasks import synthetic
from monoloc_jax.tasks.types import Example

ALL_TASKS = ('copy', 'reverse_copy', 'lookup', 'reverse_lookup', 'recopy',
             'reverse_recopy', 'inv_recopy', 'inv_reverse_recopy', 'dedupe',
             'posretrieve', 'scan_length', 'cfq_length',
             'even_pairs', 'modular_arithmetic', 'parity_check', 'cycle_navigation',
             'stack_manipulation', 'reverse_string', 'modular_arithmetic_brackets',
             'solve_equation', 'duplicate_string', 'missing_duplicate_string',
             'odds_first', 'binary_addition', 'binary_multiplication', 'compute_sqrt',
             'bucket_sort')
DIGIT_TASKS = ('copy', 'reverse_copy', 'recopy', 'reverse_recopy',
               'inv_recopy', 'inv_reverse_recopy', 'dedupe', 'posretrieve')
DIGIT_SPLITS = ('train', 'dev', 'test_iid', 'test_15', 'test_20', 'test_25',
                'test_30', 'test_50', 'test_100')
LOOKUP_SPLITS = ('train', 'dev', 'test_iid', 'test_long1', 'test_long2',
                 'test_long3', 'test_long4', 'test_long5')
LOOKUP_EXAMPLE = Example(('000', 't1', '.'), ('000', '110'), (0, 1, 2))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
  path = tmp_path / 'cache'
  monkeypatch.setenv('MONOLOC_CACHE_DIR', str(path))
  return path


class Recorder:
  """A stand-in reader that records its calls and returns one example/split."""

  def __init__(self, example):
    self.example = example
    self.calls = []

  def __call__(self, splits, **kwargs):
    self.calls.append((tuple(splits), kwargs))
    return {split: [self.example] for split in splits}


@pytest.fixture
def fake_lookup(monkeypatch):
  fake = Recorder(LOOKUP_EXAMPLE)
  monkeypatch.setattr(lookup, 'load_splits', fake)
  return fake


class FakeTask:
  """A task defined outside the package: a TaskSpec with a recording loader.

  Its data is generated (so it is cached); split `s` of seed k holds one
  example `(s, k) -> (k,)`. `siblings` are made along with each request.
  """

  def __init__(self, siblings=(), **fields):
    self.calls = []
    self.siblings = tuple(siblings)
    spec = dict(name='fake_task', splits=('train', 'dev', 'test_a', 'test_b'),
                paper_splits=('test_b',), loader=self.load,
                data_dir_mode='none', version=3)
    spec.update(fields)
    self.spec = tasks.TaskSpec(**spec)

  def load(self, names, seed, data_dir):
    self.calls.append((names, seed, data_dir))
    return {name: [Example((name, str(seed)), (str(seed),))]
            for name in names + self.siblings}


# --------------------------------------------------------------- registry ---


def test_task_names_and_order():
  assert tasks.TASKS == ALL_TASKS


@pytest.mark.parametrize('task', DIGIT_TASKS)
def test_digit_splits(task):
  assert tasks.splits(task) == DIGIT_SPLITS
  assert tasks.test_splits(task) == DIGIT_SPLITS[2:]
  assert tasks.paper_length_splits(task) == ('test_15', 'test_30', 'test_100')


@pytest.mark.parametrize('task', ['lookup', 'reverse_lookup'])
def test_lookup_splits(task):
  assert tasks.splits(task) == LOOKUP_SPLITS == lookup.SPLITS
  assert tasks.test_splits(task) == LOOKUP_SPLITS[2:]
  assert tasks.paper_length_splits(task) == (
      'test_long1', 'test_long3', 'test_long5')


@pytest.mark.parametrize('task', ['scan_length', 'cfq_length'])
def test_file_task_splits(task):
  assert tasks.splits(task) == ('train', 'dev', 'test')
  assert tasks.test_splits(task) == ('test',)
  assert tasks.paper_length_splits(task) == ('test',)


def test_test_splits_is_not_collected_by_pytest():
  assert tasks.test_splits.__test__ is False


def test_get_returns_the_spec_and_passes_a_spec_through():
  for task in ALL_TASKS:
    spec = tasks.get(task)
    assert isinstance(spec, tasks.TaskSpec) and spec.name == task
    assert tasks.get(spec) is spec
  assert tasks.get('lookup').data_dir_mode == 'optional'
  assert tasks.get('copy').data_dir_mode == 'none'
  assert tasks.get('scan_length').data_dir_mode == 'required'
  assert tasks.get('cfq_length').version is None


def test_every_query_accepts_a_spec():
  fake = FakeTask()
  assert tasks.splits(fake.spec) == ('train', 'dev', 'test_a', 'test_b')
  assert tasks.test_splits(fake.spec) == ('test_a', 'test_b')
  assert tasks.paper_length_splits(fake.spec) == ('test_b',)
  assert tasks.load(fake.spec, 'test_a', seed=4) == [(('test_a', '4'), ('4',))]
  assert tasks.load_examples(fake.spec, 'dev', seed=4) == [
      Example(('dev', '4'), ('4',))]
  assert tasks.cache_path(fake.spec, 'dev', 4).parts[-4:] == (
      'fake_task', 'v3', 'seed4', 'dev.json')
  assert 'fake_task' not in tasks.TASKS  # Nothing was registered.
  with pytest.raises(MonolocError, match="unknown task 'fake_task'"):
    tasks.get('fake_task')


# ------------------------------------------------------------ task facts ---


def test_digit_lengths_are_the_papers_and_match_the_data():
  spec = tasks.get('copy')
  assert spec.length_unit == 'items'
  # App. A: train on 5-10 items; test at exactly 15, 30 and 100.
  assert spec.train_lengths == (5, 10)
  assert [spec.split_lengths[s] for s in spec.paper_splits] == [15, 30, 100]
  assert tuple(spec.split_lengths) == spec.splits[2:]
  # Copy's inputs are the items: the facts describe the generated data.
  data = tasks.load_splits('copy', spec.splits, seed=0)
  train = [len(ex.source) for ex in data['train']]
  assert spec.train_lengths == (min(train), max(train))
  for split, length in spec.split_lengths.items():
    lengths = [len(ex.source) for ex in data[split]]
    assert length == (min(lengths) + max(lengths)) / 2, split
  for task in DIGIT_TASKS:
    assert tasks.get(task).split_lengths == spec.split_lengths
    assert tasks.get(task).train_lengths == spec.train_lengths


@pytest.mark.parametrize('task', ['lookup', 'reverse_lookup'])
def test_lookup_lengths_are_source_tokens_of_the_data(task):
  spec = tasks.get(task)
  assert spec.length_unit == 'source tokens'
  # The paper's Lookup lengths 7 / 9 / 11 are its three test splits.
  assert [spec.split_lengths[s] for s in spec.paper_splits] == [7, 9, 11]
  data = tasks.load_splits(task, spec.splits, seed=0)
  train = [len(ex.source) for ex in data['train']]
  assert spec.train_lengths == (min(train), max(train))
  assert tuple(spec.split_lengths) == spec.splits[2:]
  for split, length in spec.split_lengths.items():
    assert {len(ex.source) for ex in data[split]} == {length}, split


@pytest.mark.parametrize('task', ['scan_length', 'cfq_length'])
def test_file_tasks_have_no_length_axis(task):
  spec = tasks.get(task)
  assert spec.train_lengths is None
  assert not spec.split_lengths


# ------------------------------------------------------- spec validation ---


@pytest.mark.parametrize('fields,message', [
    ({'name': 'a/b'}, r"task name .*got 'a/b'"),
    ({'name': ''}, 'task name'),
    ({'splits': ('dev', 'train', 'test')}, 'starting with train, dev'),
    ({'splits': ('train', 'dev', 'test', 'test')}, 'distinct'),
    ({'paper_splits': ('test_c',)},
     r"paper_splits of task 'fake_task' names 'test_c'; valid: its "
     r'evaluation splits test_a, test_b$'),
    ({'split_lengths': {'dev': 3.0}},
     r"split_lengths of task 'fake_task' names 'dev'"),
    ({'data_dir_mode': 'sometimes'},
     r"unknown data_dir_mode 'sometimes'; valid data_dir_modes: none, "
     r'optional, required$'),
    ({'version': None}, 'needs an integer version'),
    ({'train_lengths': (9, 4)}, r'must be \(shortest, longest\)'),
    ({'train_lengths': (4,)}, r'must be \(shortest, longest\), got \(4,\)$'),
    ({'loader': 'not a function'}, 'loader .* must be callable'),
])
def test_bad_spec_is_a_one_line_error(fields, message):
  with pytest.raises(MonolocError, match=message) as info:
    FakeTask(**fields)
  assert '\n' not in str(info.value)


def test_spec_stores_immutable_tuples_and_mapping():
  fake = FakeTask(splits=['train', 'dev', 'test_a', 'test_b'],
                  split_lengths={'test_a': 2}, train_lengths=[1, 2])
  assert fake.spec.splits == ('train', 'dev', 'test_a', 'test_b')
  assert fake.spec.train_lengths == (1, 2)
  with pytest.raises(TypeError):
    fake.spec.split_lengths['test_b'] = 3
  required = tasks.TaskSpec(name='files', splits=('train', 'dev'),
                            paper_splits=(), loader=fake.load,
                            data_dir_mode='required')
  assert required.version is None


# ----------------------------------------------------------------- errors ---


@pytest.mark.parametrize('call', [
    lambda: tasks.splits('kopy'),
    lambda: tasks.test_splits('kopy'),
    lambda: tasks.paper_length_splits('kopy'),
    lambda: tasks.load('kopy', 'train'),
    lambda: tasks.load_splits('kopy', ('train',)),
    lambda: tasks.cache_path('kopy', 'train'),
    lambda: tasks.get('kopy'),
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


def test_load_splits_checks_every_split_and_refuses_a_string():
  with pytest.raises(MonolocError,
                     match=r"^unknown split 'test_9' for task 'copy'"):
    tasks.load_splits('copy', ('train', 'test_9'))
  with pytest.raises(MonolocError, match=r"sequence of split names.*\('dev',\)"):
    tasks.load_splits('copy', 'dev')


def test_a_loader_that_drops_a_split_is_an_error():
  spec = tasks.TaskSpec(name='lossy', splits=('train', 'dev', 'test'),
                        paper_splits=('test',), version=1,
                        loader=lambda names, seed, data_dir: {'train': []},
                        data_dir_mode='none')
  with pytest.raises(MonolocError,
                     match=r"^the loader of task 'lossy' returned no dev, "
                     r'test split$'):
    tasks.load_splits(spec, ('train', 'dev', 'test'))


# ---------------------------------------------------------------- loading ---


def test_load_returns_pairs_matching_the_generator():
  pairs = tasks.load('recopy', 'test_15', seed=2)
  expected = synthetic.generate('recopy', seed=2)['test_15']
  assert pairs == [(ex.source, ex.target) for ex in expected]
  assert all(isinstance(src, tuple) and isinstance(tgt, tuple)
             for src, tgt in pairs)
  assert tasks.load_examples('recopy', 'test_15', seed=2) == expected


@pytest.mark.parametrize('task,module', [('scan_length', scan),
                                         ('cfq_length', cfq)])
def test_file_tasks_delegate_to_their_reader(task, module, monkeypatch,
                                             cache_dir, tmp_path):
  fake = Recorder(Example(('jump',), ('JUMP',)))
  monkeypatch.setattr(module, 'load_splits', fake)
  data_dir = tmp_path / 'data'
  assert tasks.load(task, 'dev', data_dir=data_dir) == [(('jump',), ('JUMP',))]
  assert fake.calls == [(('dev',), {'data_dir': str(data_dir)})]
  # Several splits: one call (CFQ streams dataset.json once for all of them).
  both = tasks.load_splits(task, ('test', 'train', 'test'), data_dir=data_dir)
  assert list(both) == ['test', 'train']
  assert fake.calls[1:] == [(('test', 'train'), {'data_dir': str(data_dir)})]
  assert not cache_dir.exists()


def test_lookup_with_data_dir_is_read_not_cached(fake_lookup, cache_dir):
  examples = tasks.load_examples('reverse_lookup', 'test_long3', seed=5,
                                 data_dir='/data/lookup/reverse')
  assert examples[0].gold_attention == (0, 1, 2)
  assert fake_lookup.calls == [(('test_long3',), dict(
      reverse=True, seed=5, data_dir='/data/lookup/reverse'))]
  assert not cache_dir.exists()


def test_generated_lookup_is_made_once_and_cached(fake_lookup, cache_dir):
  first = tasks.load_splits('lookup', ('dev', 'test_long5'), seed=3)
  # One generation for every split; all of them are cached.
  assert fake_lookup.calls == [(LOOKUP_SPLITS, dict(
      reverse=False, seed=3, data_dir=None))]
  folder = cache_dir / 'lookup' / f'v{lookup.GENERATOR_VERSION}' / 'seed3'
  assert sorted(p.name for p in folder.iterdir()) == sorted(
      f'{split}.json' for split in LOOKUP_SPLITS)
  assert tasks.cache_path('lookup', 'dev', 3) == folder / 'dev.json'
  again = tasks.load_examples('lookup', 'dev', seed=3)
  assert again == first['dev'] == [LOOKUP_EXAMPLE]
  assert tasks.load_examples('lookup', 'train', seed=3) == [LOOKUP_EXAMPLE]
  assert len(fake_lookup.calls) == 1


def test_load_splits_generates_only_what_is_not_cached(cache_dir):
  fake = FakeTask()
  got = tasks.load_splits(fake.spec, ('test_b', 'dev'), seed=1)
  assert list(got) == ['test_b', 'dev']
  assert got['test_b'] == [Example(('test_b', '1'), ('1',))]
  assert fake.calls == [(('test_b', 'dev'), 1, None)]
  got = tasks.load_splits(fake.spec, ('dev', 'train', 'test_b'), seed=1)
  assert fake.calls[1:] == [(('train',), 1, None)]
  assert got['train'] == [Example(('train', '1'), ('1',))]
  assert got['dev'] == [Example(('dev', '1'), ('1',))]
  assert tasks.load_splits(fake.spec, ('train', 'dev'), seed=1, cache=False)
  assert fake.calls[2:] == [(('train', 'dev'), 1, None)]
  assert sorted(p.name for p in tasks.cache_path(
      fake.spec, 'dev', 1).parent.iterdir()) == [
          'dev.json', 'test_b.json', 'train.json']


def test_siblings_made_in_the_same_pass_are_cached(cache_dir):
  fake = FakeTask(siblings=('test_a', 'not_a_split'))
  tasks.load_examples(fake.spec, 'train', seed=0)
  folder = tasks.cache_path(fake.spec, 'train', 0).parent
  assert sorted(p.name for p in folder.iterdir()) == ['test_a.json',
                                                      'train.json']
  assert tasks.load_examples(fake.spec, 'test_a', seed=0) == [
      Example(('test_a', '0'), ('0',))]
  assert len(fake.calls) == 1


def test_data_dir_modes_of_a_spec(tmp_path):
  optional = FakeTask(data_dir_mode='optional')
  tasks.load_splits(optional.spec, ('dev',), data_dir=tmp_path)
  assert optional.calls == [(('dev',), 0, str(tmp_path))]
  with pytest.raises(MonolocError,
                     match=r"^task 'fake_task' is generated in code"):
    tasks.load_splits(FakeTask().spec, ('dev',), data_dir=tmp_path)
  required = FakeTask(data_dir_mode='required', missing_data_dir='bring data')
  with pytest.raises(MonolocError, match='^bring data$'):
    tasks.load_splits(required.spec, ('dev',))
  with pytest.raises(MonolocError, match='is read from files and is not cached'):
    tasks.cache_path(required.spec, 'dev')


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
