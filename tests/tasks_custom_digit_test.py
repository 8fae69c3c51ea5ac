"""A digit task defined here, outside the package, generated like the paper's.

"Swap neighbours" exchanges items 0 and 1, 2 and 3, ... (an odd last item
stays). Nothing in monoloc_jax knows it: `tasks.digit_task` makes its spec and
every task function takes that spec.
"""

import numpy as np
import pytest

from monoloc_jax import tasks
from monoloc_jax import viz
from monoloc_jax.errors import MonolocError
from monoloc_jax.tasks import synthetic

SWAP_ID = 100


def swap_neighbours(source):
  out = list(source)
  for i in range(0, len(out) - 1, 2):
    out[i], out[i + 1] = out[i + 1], out[i]
  return tuple(out)


SWAP = tasks.digit_task('swap_neighbours', swap_neighbours, task_id=SWAP_ID)

# The paper's digit splits (App. A): split -> (size, fewest, most items).
SPLITS = {
    'train': (10_000, 5, 10),
    'dev': (2_000, 10, 15),
    'test_iid': (2_000, 5, 10),
    'test_15': (2_000, 15, 15),
    'test_20': (2_000, 20, 20),
    'test_25': (2_000, 25, 25),
    'test_30': (2_000, 30, 30),
    'test_50': (2_000, 50, 50),
    'test_100': (2_000, 100, 100),
}


def reference_swap(source):
  """Position i reads position i XOR 1 when that exists."""
  n = len(source)
  return [source[i ^ 1] if i ^ 1 < n else source[i] for i in range(n)]


@pytest.fixture(scope='module')
def data():
  return tasks.load_splits(SWAP, tasks.splits(SWAP), seed=0)


def test_spec_has_the_digit_splits_and_facts():
  assert SWAP.name == 'swap_neighbours'
  assert tasks.splits(SWAP) == tuple(SPLITS)
  assert tasks.test_splits(SWAP) == tuple(SPLITS)[2:]
  assert tasks.paper_length_splits(SWAP) == ('test_15', 'test_30', 'test_100')
  assert SWAP.train_lengths == (5, 10)
  assert SWAP.split_lengths['test_iid'] == 7.5
  assert SWAP.split_lengths['test_50'] == 50
  assert SWAP.length_unit == 'items'
  assert viz.training_range(SWAP) == (5, 10)
  assert viz.split_length(SWAP, 'test_100') == 100.0


def test_sizes_lengths_and_the_rule(data):
  assert tuple(data) == tuple(SPLITS)
  for split, (size, lo, hi) in SPLITS.items():
    examples = data[split]
    assert len(examples) == size, split
    assert {len(ex.source) for ex in examples} == set(range(lo, hi + 1)), split
    for ex in examples:
      assert set(ex.source) <= set('0123456789'), ex
      assert list(ex.target) == reference_swap(ex.source), ex
      assert ex.gold_attention is None


def test_inputs_are_distinct_and_not_in_train(data):
  seen = set()
  for split in SPLITS:
    sources = {ex.source for ex in data[split]}
    assert len(sources) == len(data[split]), split
    assert not sources & seen, split
    seen |= sources


def test_each_split_draws_from_seed_task_id_split_id(data):
  # The first draw of a split's stream is its items' lengths (uniform in the
  # split's range), so the length histogram identifies the stream.
  for split, (size, lo, hi) in SPLITS.items():
    split_id = synthetic.SPLIT_SPECS[split].split_id
    rng = np.random.default_rng([0, SWAP_ID, split_id])
    expected = np.bincount(rng.integers(lo, hi + 1, size=size) - lo,
                           minlength=hi - lo + 1)
    observed = np.bincount([len(ex.source) - lo for ex in data[split]],
                           minlength=hi - lo + 1)
    np.testing.assert_array_equal(observed, expected, err_msg=split)


def test_deterministic_per_seed_and_its_own_inputs(data):
  again = tasks.load_splits(SWAP, ('test_30', 'dev'), seed=0, cache=False)
  assert again == {'test_30': data['test_30'], 'dev': data['dev']}
  other = tasks.load_splits(SWAP, ('test_30',), seed=1, cache=False)
  assert other['test_30'] != data['test_30']
  copy = tasks.load_examples('copy', 'test_30', seed=0)
  assert {ex.source for ex in copy}.isdisjoint(
      ex.source for ex in data['test_30'])


def test_load_splits_and_cache_use_the_spec(data):
  got = tasks.load_splits(SWAP, ('test_15', 'train'), seed=0)
  assert list(got) == ['test_15', 'train']
  assert got['test_15'] == data['test_15']
  assert tasks.load(SWAP, 'test_15', seed=0) == [
      (ex.source, ex.target) for ex in data['test_15']]
  path = tasks.cache_path(SWAP, 'test_15', 0)
  assert path.is_file()
  assert path.parts[-4:] == ('swap_neighbours',
                             f'v{synthetic.GENERATOR_VERSION}', 'seed0',
                             'test_15.json')


def test_nothing_is_registered():
  assert 'swap_neighbours' not in tasks.TASKS
  with pytest.raises(MonolocError, match="unknown task 'swap_neighbours'"):
    tasks.get('swap_neighbours')


def test_a_source_builder_makes_longer_inputs():
  """Stutter: every item is written twice; the target is the items."""
  def stutter(rng, items):
    del rng
    return [np.repeat(row, 2) for row in items]

  spec = tasks.digit_task('destutter', lambda source: source[::2],
                          task_id=101, build_source=stutter)
  test_20 = tasks.load_examples(spec, 'test_20', seed=0, cache=False)
  assert len(test_20) == 2000
  for ex in test_20:
    assert len(ex.source) == 40 and ex.source[::2] == ex.source[1::2]
    assert ex.target == ex.source[::2]


@pytest.mark.parametrize('args,message', [
    (('copy', swap_neighbours, 100),
     r"^task name 'copy' is taken by a built-in task; built-in tasks: copy, "),
    (('swap', swap_neighbours, 2),
     r"^task_id 2 is taken by 'recopy'; the built-in digit tasks use "
     r'0, 1, 2, 3, 4, 5, 6, 7$'),
    (('swap', swap_neighbours, -1), 'must be a non-negative integer'),
    (('swap', swap_neighbours, True), 'must be a non-negative integer'),
    (('swap', swap_neighbours, [1]), 'must be a non-negative integer'),
    (('swap', 'not a rule', 100), 'rule of digit task .* must be callable'),
    (('a b', swap_neighbours, 100), 'task name must be'),
])
def test_bad_digit_task_is_a_one_line_error(args, message):
  with pytest.raises(MonolocError, match=message) as info:
    tasks.digit_task(*args)
  assert '\n' not in str(info.value)
