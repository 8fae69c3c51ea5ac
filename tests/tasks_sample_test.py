"""Tests of the tasks' generators at any length (`tasks.sample`), the ground of
range evaluation: every length of a range, n examples each, from a fixed seed,
disjoint from the training inputs where enough inputs exist.

The rules are recomputed here from the paper's definitions (App. A), not from
monoloc_jax's rule functions; the Lookup rule from the tables.
"""

import itertools
import pathlib

import numpy as np
import pytest

from monoloc_jax import tasks
from monoloc_jax.errors import MonolocError
from monoloc_jax.tasks import lookup
from monoloc_jax.tasks import synthetic

DIGIT_TASKS = ('copy', 'reverse_copy', 'recopy', 'reverse_recopy', 'inv_recopy',
               'inv_reverse_recopy', 'dedupe', 'posretrieve')
LOOKUP_TASKS = ('lookup', 'reverse_lookup')
# Train range ends 5 and 10, one inside, beyond every test split (100 items).
DIGIT_LENGTHS = (5, 7, 10, 150, 500)
# Source tokens: train ends 3 and 6 (1 and 4 tables), one inside, test_long5
# (11), and beyond.
LOOKUP_LENGTHS = (4, 5, 6, 11, 14, 40)
N = 60
_REFERENCE = (pathlib.Path(__file__).resolve().parents[1].parent / 'shared' /
              'data' / 'lookup')


# --------------------------------------------------- independent rules ---

def times(token):
  """The repeat rule r(x): 1 if x <= 3, 3 if 4 <= x <= 6, 5 if x >= 7."""
  return 1 if int(token) <= 3 else 3 if int(token) <= 6 else 5


def recopy(items):
  return tuple(t for t in items for _ in range(times(t)))


def dedupe_blocks(source):
  """Bitmask of every k such that `source` is k blocks of 1, 3 or 5 equal
  digits (DeDupe's inputs of k items), by dynamic programming."""
  reach = [0] * (len(source) + 1)
  reach[0] = 1
  for i in range(len(source)):
    if not reach[i]:
      continue
    for size in (1, 3, 5):
      block = source[i:i + size]
      if len(block) == size and len(set(block)) == 1:
        reach[i + size] |= reach[i] << 1
  return reach[-1]


def check_digit(task, length, example):
  """The target follows the task's rule and the source is an input the
  generator draws at `length` items."""
  src, tgt = example.source, example.target
  assert set(src) <= set('0123456789')
  if task == 'copy':
    assert tgt == src and len(src) == length
  elif task == 'reverse_copy':
    assert tgt == src[::-1] and len(src) == length
  elif task == 'recopy':
    assert tgt == recopy(src) and len(src) == length
  elif task == 'reverse_recopy':
    assert tgt == recopy(src[::-1]) and len(src) == length
  elif task == 'inv_recopy':
    assert recopy(tgt) == src and len(tgt) == length
  elif task == 'inv_reverse_recopy':
    assert recopy(tgt[::-1]) == src and len(tgt) == length
  elif task == 'dedupe':
    assert tgt == tuple(k for k, _ in itertools.groupby(src))
    assert dedupe_blocks(src) >> length & 1, (length, src)
  else:
    n = len(src)
    assert len(src) == length
    assert tgt == tuple(itertools.chain.from_iterable(
        (t, ':', src[int(t)] if int(t) < n else 'n/a', ';') for t in src))


def check_lookup(reverse, length, example, rule):
  src = example.source
  assert len(src) == length and src[-1] == '.'
  body = src[:-1][::-1] if reverse else src[:-1]
  x, comp = body[0], body[1:]
  assert len(comp) == length - 2
  pool = rule.tables if len(comp) == 1 else rule.seen
  assert set(comp) <= set(pool)
  out = [x]
  for name in comp:
    out.append(rule.tables[name][out[-1]])
  assert example.target == tuple(out)
  k = len(comp)
  gold = (tuple(range(k, -1, -1)) + (k + 1,) if reverse else
          tuple(range(k + 2)))
  assert example.gold_attention == gold


@pytest.fixture(scope='module')
def train():
  """Training sources per task, loaded when first asked for."""
  loaded = {}

  def get(task):
    if task not in loaded:
      loaded[task] = tasks.load_examples(task, 'train', seed=0)
    return loaded[task]
  return get


# ------------------------------------------------------------ samples ---


@pytest.mark.parametrize('task', DIGIT_TASKS)
def test_digit_samples_have_the_length_and_rule(task):
  for length in (1, 2) + DIGIT_LENGTHS:
    examples = tasks.sample(task, length, N, seed=3)
    assert len(examples) == min(N, 10**length), (task, length)
    assert len({ex.source for ex in examples}) == len(examples)
    for ex in examples:
      check_digit(task, length, ex)
      assert length in tasks.lengths_of(task, ex)
      if task != 'dedupe':
        assert tasks.length_of(task, ex) == length


@pytest.mark.parametrize('task', LOOKUP_TASKS)
def test_lookup_samples_have_the_length_and_rule(task):
  reverse = task == 'reverse_lookup'
  for data_seed in (0, 7):
    rule = lookup.generated_rule(data_seed)
    for length in (3,) + LOOKUP_LENGTHS:
      examples = tasks.sample(task, length, N, seed=3, data_seed=data_seed)
      assert len(examples) == N, (task, length)   # 64 >= N inputs at 3
      assert len({ex.source for ex in examples}) == N
      for ex in examples:
        check_lookup(reverse, length, ex, rule)
        assert tasks.length_of(task, ex) == length


def test_lookup_rule_is_the_data_seeds_tables(train):
  """Same rows for two data seeds, targets from each seed's tables, which are
  the tables of that seed's training split."""
  for data_seed in (0, 1):
    tables = {}
    for ex in tasks.load_examples('lookup', 'train', seed=data_seed):
      if len(ex.source) == 3:
        tables.setdefault(ex.source[1], {})[ex.source[0]] = ex.target[1]
    assert tables == {k: dict(v) for k, v in
                      lookup.generated_rule(data_seed).tables.items()}
  a = tasks.sample('lookup', 9, N, seed=0, data_seed=0)
  b = tasks.sample('lookup', 9, N, seed=0, data_seed=1)
  assert [ex.source for ex in a] == [ex.source for ex in b]
  assert [ex.target for ex in a] != [ex.target for ex in b]


@pytest.mark.parametrize('task', DIGIT_TASKS[:1] + DIGIT_TASKS[6:7] +
                         LOOKUP_TASKS[:1])
def test_reproducible_for_a_seed_and_different_for_another(task):
  length = 11 if task in LOOKUP_TASKS else 30
  first = tasks.sample(task, length, N, seed=5)
  assert tasks.sample(task, length, N, seed=5) == first
  assert {ex.source for ex in tasks.sample(task, length, N, seed=6)} != {
      ex.source for ex in first}
  # Another length draws another stream, not a cut of this one.
  other = tasks.sample(task, length + 1, N, seed=5)
  assert [ex.source[:length - 1] for ex in other] != [
      ex.source[:length - 1] for ex in first]


@pytest.mark.parametrize('task', DIGIT_TASKS)
def test_digit_samples_avoid_the_training_inputs(task, train):
  sources = {ex.source for ex in train(task)}
  for length in (5, 10):
    # 1,200 of 100,000 inputs of 5 items: about 2 % (20 overlaps) would be
    # training inputs if `exclude` were ignored.
    examples = tasks.sample(task, length, 1200, seed=0, exclude=train(task))
    assert len(examples) == 1200
    assert not sources & {ex.source for ex in examples}, (task, length)


@pytest.mark.parametrize('task', DIGIT_TASKS + LOOKUP_TASKS)
def test_excluded_sources_are_replaced(task):
  """Excluding half of what a seed draws gives other inputs, as many (this
  also fails for DeDupe, whose inputs rarely meet its training inputs)."""
  length = 12 if task in LOOKUP_TASKS else 40
  drawn = tasks.sample(task, length, N, seed=9)
  again = tasks.sample(task, length, N, seed=9, exclude=drawn[:N // 2])
  assert len(again) == N
  assert not {ex.source for ex in drawn[:N // 2]} & {ex.source for ex in again}


@pytest.mark.parametrize('task', LOOKUP_TASKS)
def test_lookup_samples_avoid_the_training_inputs(task, train):
  sources = {ex.source for ex in train(task)}
  n_seen = len(lookup.generated_rule(0).seen)
  for length in (3, 4, 5, 6, 7):
    k = length - 2
    space = 8 * (8 if k == 1 else n_seen**k)
    left = space - sum(len(s) == length for s in sources)
    examples = tasks.sample(task, length, 5000, seed=0, exclude=sources)
    # Every usable input, each once: 0 of one table (train has all 64).
    assert len(examples) == min(5000, left), (task, length)
    assert len({ex.source for ex in examples}) == len(examples)
    assert not sources & {ex.source for ex in examples}
  assert tasks.sample(task, 3, 10, exclude=sources) == []


def test_small_spaces_give_every_input_once():
  ones = tasks.sample('copy', 1, 100, seed=0)
  assert sorted(ex.source for ex in ones) == [(d,) for d in '0123456789']
  twos = tasks.sample('copy', 2, 1000, seed=0, exclude=[('0', '0'), ('1', '2')])
  assert len(twos) == 98 and len({ex.source for ex in twos}) == 98
  # DeDupe draws each item row once, with one draw of repetition counts.
  dedupe = tasks.sample('dedupe', 1, 100, seed=0)
  assert sorted(set(ex.target for ex in dedupe)) == [(d,) for d in
                                                     '0123456789']
  assert tasks.sample('copy', 3, 0) == []


def test_dedupe_lengths_match_enumeration():
  """`lengths_of` for DeDupe equals every way the generator makes a source."""
  made = {}
  for k in range(1, 4):
    for items in itertools.product('0123456789'[:3] + '7', repeat=k):
      for counts in itertools.product((1, 3, 5), repeat=k):
        source = tuple(t for t, c in zip(items, counts) for _ in range(c))
        made.setdefault(source, set()).add(k)
  for source, lengths in made.items():
    found = tasks.lengths_of('dedupe', tasks.Example(source, ()))
    assert set(found) & {1, 2, 3} == lengths, source
    assert {k for k in range(len(source) + 1)
            if dedupe_blocks(source) >> k & 1} == set(found)
  assert tasks.lengths_of('dedupe', tasks.Example(('1', '2', '2'), ())) == {3}
  with pytest.raises(MonolocError, match='not one number'):
    tasks.length_of('dedupe', tasks.Example(('5', '5', '5'), ()))


def test_custom_digit_task_gets_a_sampler():
  swap = tasks.digit_task(
      'sample_swap', lambda s: tuple(s[1:2] + s[:1] + tuple(s[2:])), 101)
  examples = tasks.sample(swap, 150, 20, seed=0)
  assert len(examples) == 20
  assert all(tasks.length_of(swap, ex) == 150 for ex in examples)
  assert all(ex.target[:2] == ex.source[1::-1] for ex in examples)

  def doubled(rng, items):
    del rng
    return [np.repeat(row, 2) for row in items]
  twice = tasks.digit_task('sample_twice', tuple, 102, build_source=doubled)
  assert all(len(ex.source) == 14 for ex in tasks.sample(twice, 7, 5))
  with pytest.raises(MonolocError, match='no item_lengths'):
    tasks.lengths_of(twice, tasks.sample(twice, 7, 1)[0])
  known = tasks.digit_task(
      'sample_twice_known', tuple, 103, build_source=doubled,
      item_lengths=lambda source: frozenset((len(source) // 2,)))
  assert tasks.length_of(known, tasks.sample(known, 7, 1)[0]) == 7


# ------------------------------------------------------ reference files ---


@pytest.mark.parametrize('reverse', (False, True))
def test_file_rule_matches_the_files_and_the_generator(reverse):
  """The tables read from train.tsv are the generator's at seed 123 and give
  every target of the files; every composition of 2+ uses the seen tables,
  as the sampler's rule."""
  path = _REFERENCE / ('reverse' if reverse else 'forward')
  if not path.is_dir():
    pytest.skip(f'reference Lookup data not found at {path}')
  rule = lookup.file_rule(str(path), reverse=reverse)
  generated = lookup.generated_rule(123)
  assert {k: dict(v) for k, v in rule.tables.items()} == {
      k: dict(v) for k, v in generated.tables.items()}
  assert rule.seen == generated.seen
  for name, examples in lookup.read_files(path, reverse=reverse).items():
    for ex in examples:
      check_lookup(reverse, len(ex.source), ex, rule)
  task = 'reverse_lookup' if reverse else 'lookup'
  train = lookup.read_file(path, 'train', reverse=reverse)
  sampled = tasks.sample(task, 5, 500, seed=0, exclude=train, data_dir=path)
  assert sampled and not {ex.source for ex in train} & {
      ex.source for ex in sampled}
  assert tasks.sample(task, 12, 10, data_dir=path) == tasks.sample(
      task, 12, 10, data_seed=123)


# --------------------------------------------------------------- errors ---


def one_line(excinfo):
  message = str(excinfo.value)
  assert '\n' not in message
  return message


@pytest.mark.parametrize('task', ('scan_length', 'cfq_length'))
def test_tasks_read_from_files_have_no_length_axis(task):
  for call in (lambda: tasks.sample(task, 10, 5),
               lambda: tasks.length_of(task, tasks.Example(('a',), ('b',)))):
    with pytest.raises(MonolocError) as excinfo:
      call()
    message = one_line(excinfo)
    assert message.startswith(f"task '{task}' has no length axis: its data "
                              'are read from files; tasks with one: copy, ')
    assert 'scan_length' not in message.split(':', 2)[2]


@pytest.mark.parametrize('task,length,valid', [
    ('copy', 0, '>= 1 (items)'), ('dedupe', -3, '>= 1 (items)'),
    ('copy', 2.5, '>= 1'), ('copy', True, '>= 1'), ('copy', '5', '>= 1'),
    ('lookup', 2, '>= 3 (source tokens)'),
    ('reverse_lookup', 0, '>= 3 (source tokens)')])
def test_bad_length_names_the_valid_range(task, length, valid):
  with pytest.raises(MonolocError) as excinfo:
    tasks.sample(task, length, 5)
  message = one_line(excinfo)
  assert message.startswith(f'length of task {task!r} must be an integer')
  assert valid in message and repr(length) in message


def test_bad_arguments():
  with pytest.raises(MonolocError, match='n must be an integer >= 0'):
    tasks.sample('copy', 5, -1)
  with pytest.raises(MonolocError, match='seed must be'):
    tasks.sample('copy', 5, 1, seed=-1)
  with pytest.raises(MonolocError, match='takes no data_dir'):
    tasks.sample('copy', 5, 1, data_dir='/tmp')
  with pytest.raises(MonolocError, match='collection of sources'):
    tasks.sample('copy', 5, 1, exclude=tasks.Example(('1',), ('1',)))
  with pytest.raises(MonolocError, match='unknown task'):
    tasks.sample('nope', 5, 1)
  with pytest.raises(MonolocError, match='must be a LengthSampler'):
    tasks.TaskSpec(name='x', splits=('train', 'dev'), paper_splits=(),
                   loader=lambda *a: {}, data_dir_mode='none', version=1,
                   sampler=print)
