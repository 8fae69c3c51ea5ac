"""Tests of the synthetic digit tasks against independent re-implementations."""

import itertools

import pytest

from monoloc_jax.errors import MonolocError
from monoloc_jax.tasks import synthetic

DIGIT_TASKS = ('copy', 'reverse_copy', 'recopy', 'reverse_recopy',
               'inv_recopy', 'inv_reverse_recopy', 'dedupe', 'posretrieve')
# split: (size, min items, max items)
SPLIT_TABLE = {
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


# ------------------------------------------- independent reference rules ---


def times(token):
  """r(x), written as a table lookup on the digit's value."""
  value = int(token)
  if value >= 7:
    return 5
  if value >= 4:
    return 3
  return 1


def ref_recopy(xs):
  return [x for x in xs for _ in range(times(x))]


def ref_inverse(xs):
  """Splits a ReCopy output into groups of r(x) and keeps each group's head."""
  result, rest = [], list(xs)
  while rest:
    head = rest[0]
    group, rest = rest[:times(head)], rest[times(head):]
    assert group == [head] * times(head), xs
    result.append(head)
  return result


def ref_posretrieve(xs):
  out = []
  for x in xs:
    out += [x, ':']
    out += [xs[int(x)] if int(x) < len(xs) else 'n/a', ';']
  return out


REFERENCE = {
    'copy': list,
    'reverse_copy': lambda xs: list(xs)[::-1],
    'recopy': ref_recopy,
    'reverse_recopy': lambda xs: ref_recopy(list(xs)[::-1]),
    'inv_recopy': ref_inverse,
    'inv_reverse_recopy': lambda xs: ref_inverse(xs)[::-1],
    'dedupe': lambda xs: [key for key, _ in itertools.groupby(xs)],
    'posretrieve': ref_posretrieve,
}


def ref_item_count_bounds(task, source):
  """(fewest, most) items that can have produced `source`."""
  if task in ('inv_recopy', 'inv_reverse_recopy'):
    n = len(ref_inverse(list(source)))
    return n, n
  if task == 'dedupe':
    # Every item is repeated 1, 3 or 5 times: a run of m equal tokens holds
    # at least ceil(m / 5) items (with m's parity) and at most m.
    fewest = 0
    for _, run in itertools.groupby(source):
      m = len(list(run))
      k = -(-m // 5)
      fewest += k if (m - k) % 2 == 0 else k + 1
    return fewest, len(source)
  return len(source), len(source)


@pytest.fixture(scope='module', params=DIGIT_TASKS)
def generated(request):
  return request.param, synthetic.generate(request.param, seed=0)


# ------------------------------------------------------------------ tests ---


def s(text):
  return tuple(text.split())


TABLE1 = [
    ('copy', '4 7 9 8', '4 7 9 8'),
    ('reverse_copy', '4 7 9 8', '8 9 7 4'),
    ('recopy', '4 7 9 8', '4 4 4 7 7 7 7 7 9 9 9 9 9 8 8 8 8 8'),
    ('reverse_recopy', '4 7 9 8', '8 8 8 8 8 9 9 9 9 9 7 7 7 7 7 4 4 4'),
    ('inv_recopy', '4 4 4 7 7 7 7 7 9 9 9 9 9 8 8 8 8 8', '4 7 9 8'),
    ('inv_reverse_recopy', '8 8 8 8 8 9 9 9 9 9 7 7 7 7 7 4 4 4', '4 7 9 8'),
    ('dedupe', '4 4 4 7 7 7 7 7', '4 7'),
    ('dedupe', '4 4 4 4 1 4', '4 1 4'),
    ('posretrieve', '2 0 7', '2 : 7 ; 0 : 2 ; 7 : n/a ;'),
    ('posretrieve', '1 1 3 0', '1 : 1 ; 1 : 1 ; 3 : 0 ; 0 : 1 ;'),
]


@pytest.mark.parametrize('task,source,target', TABLE1)
def test_paper_examples(task, source, target):
  assert synthetic.RULES[task](s(source)) == s(target)


def test_rules_cover_all_tasks():
  assert tuple(synthetic.RULES) == DIGIT_TASKS == synthetic.TASKS
  assert synthetic.SPLITS == tuple(SPLIT_TABLE)
  assert synthetic.PAPER_SPLITS == ('test_15', 'test_30', 'test_100')


def test_repeat_rule():
  assert [synthetic.repeat_count(str(d)) for d in range(10)] == [
      1, 1, 1, 1, 3, 3, 3, 5, 5, 5]
  with pytest.raises(MonolocError, match='digit'):
    synthetic.repeat_count('x')


def test_inverse_rule_rejects_non_recopy_input():
  with pytest.raises(MonolocError, match='not a ReCopy output'):
    synthetic.RULES['inv_recopy'](s('7 7 7'))


def test_split_sizes_and_targets_follow_the_rule(generated):
  task, data = generated
  assert tuple(data) == tuple(SPLIT_TABLE)
  for split, (size, _, _) in SPLIT_TABLE.items():
    examples = data[split]
    assert len(examples) == size, split
    for ex in examples:
      assert list(ex.target) == REFERENCE[task](ex.source), (split, ex)
      assert ex.gold_attention is None


def test_lengths(generated):
  task, data = generated
  for split, (_, lo, hi) in SPLIT_TABLE.items():
    seen_lengths = set()
    for ex in data[split]:
      assert set(ex.source) <= set('0123456789')
      fewest, most = ref_item_count_bounds(task, ex.source)
      assert fewest <= hi and most >= lo, (split, ex)
      if task == 'dedupe':
        assert len(ex.target) <= hi, (split, ex)
        assert len(ex.source) <= 5 * hi, (split, ex)
        if lo == hi:
          # Odd repetition counts: #items has the parity of the token count.
          assert len(ex.source) % 2 == lo % 2, (split, ex)
      else:
        seen_lengths.add(fewest)
    if task != 'dedupe':
      # Uniform lengths: every length of the range occurs.
      assert seen_lengths == set(range(lo, hi + 1)), split


def test_inputs_distinct_and_disjoint_from_train(generated):
  _, data = generated
  train = {ex.source for ex in data['train']}
  everything = set()
  for split in SPLIT_TABLE:
    sources = [ex.source for ex in data[split]]
    assert len(set(sources)) == len(sources), split
    if split != 'train':
      assert not train & set(sources), split
    assert not everything & set(sources), split
    everything |= set(sources)


def test_train_lengths_are_roughly_uniform():
  data = synthetic.generate('copy', seed=0)['train']
  counts = {}
  for ex in data:
    counts[len(ex.source)] = counts.get(len(ex.source), 0) + 1
  assert sorted(counts) == list(range(5, 11))
  assert all(1500 <= c <= 1850 for c in counts.values()), counts


def test_posretrieve_uses_na_and_lookup():
  data = synthetic.generate('posretrieve', seed=0)['test_iid']
  targets = [t for ex in data for t in ex.target]
  assert 'n/a' in targets and ':' in targets and ';' in targets


def test_deterministic_for_a_seed_and_different_across_seeds():
  first = synthetic.generate('dedupe', seed=3)
  again = synthetic.generate('dedupe', seed=3)
  other = synthetic.generate('dedupe', seed=4)
  assert first == again
  for split in SPLIT_TABLE:
    assert first[split] != other[split], split


def test_tasks_draw_different_streams():
  copy = synthetic.generate('copy', seed=0)['train']
  recopy = synthetic.generate('recopy', seed=0)['train']
  assert [ex.source for ex in copy] != [ex.source for ex in recopy]


def test_generate_split_matches_generate():
  assert (synthetic.generate_split('reverse_copy', 'test_30', seed=1) ==
          synthetic.generate('reverse_copy', seed=1)['test_30'])


def test_errors():
  with pytest.raises(MonolocError, match=r"unknown digit task 'nope'; .*copy"):
    synthetic.generate('nope')
  with pytest.raises(MonolocError, match='valid splits: train, dev, test_iid'):
    synthetic.generate_split('copy', 'test_7')
  with pytest.raises(MonolocError, match='non-negative integer'):
    synthetic.generate('copy', seed=-1)
  with pytest.raises(MonolocError, match='non-negative integer'):
    synthetic.generate('copy', seed=1.5)
