"""Tests of encoding and length-bucketed batching."""

import math
from typing import Dict, List, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from monoloc_jax import errors
from monoloc_jax import input_pipeline as ip
from monoloc_jax import train
from monoloc_jax.tasks.types import Example
from monoloc_jax.vocab import Vocabulary

N_EXAMPLES = 157
BATCH = 8

# Jitted: one compile per batch shape instead of one per operation.
token_loss = jax.jit(train.token_loss, static_argnums=2)


def make_examples(n: int = N_EXAMPLES, seed: int = 0) -> List[Example]:
  """Examples whose first source token `w<i>` names them; targets of 1-45
  tokens (2-46 with `<eos>`: buckets 8 to 48, none a whole number of batches),
  sources no longer than their targets (so short targets have short sources)."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    target = tuple(str(t) for t in rng.choice(['A', 'B', 'C'], rng.integers(1, 46)))
    source = (f'w{i}',) + tuple(str(t) for t in rng.choice(['a', 'b'],
                                                           rng.integers(0, len(target))))
    out.append(Example(source, target))
  return out


@pytest.fixture(scope='module')
def data():
  examples = make_examples()
  vocab = Vocabulary.from_examples(examples)
  split = ip.encode_split(examples, vocab)
  # Encoded source of example i starts with the id of `w<i>`.
  index_of_first_id = {vocab.id_of(f'w{i}'): i for i in range(len(examples))}
  return examples, vocab, split, index_of_first_id


def bucket_counts(split: ip.EncodedSplit) -> Dict[int, int]:
  """How many examples fall in each target-length bucket (computed by hand)."""
  counts: Dict[int, int] = {}
  for n in split.tgt_len:
    b = next(b for b in ip.BUCKETS if b >= n)
    counts[b] = counts.get(b, 0) + 1
  return counts


def real_rows(tgt_out: np.ndarray, eos_id: int) -> np.ndarray:
  """Rows that hold an example: every real target contains `<eos>`."""
  return (tgt_out == eos_id).any(-1)


def example_indices(src: np.ndarray, real: np.ndarray, index_of_first_id) -> List[int]:
  return [index_of_first_id[int(row[0])] for row in src[real]]


def per_bucket(batches: Sequence[ip.Batch]) -> Dict[int, List[np.ndarray]]:
  """Seed 0's source arrays of each bucket's batches, in epoch order."""
  out: Dict[int, List[np.ndarray]] = {}
  for b in batches:
    out.setdefault(b.tgt_out.shape[-1], []).append(b.src[0])
  return out


# ---------------------------------------------------------------------------
# bucket_length.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('n,expected', [
    (0, 8), (1, 8), (8, 8), (9, 16), (17, 24), (33, 48), (49, 64), (97, 128),
    (300, 320), (513, 768), (1024, 1024), (1025, 1280), (1280, 1280), (1281, 1536),
    (3000, 3072)])
def test_bucket_length_cases(n, expected):
  assert ip.bucket_length(n) == expected


def test_bucket_length_is_the_smallest_allowed_length():
  allowed = sorted(set(ip.BUCKETS) | {256 * k for k in range(5, 20)})
  for n in range(0, 4097):
    assert ip.bucket_length(n) == next(b for b in allowed if b >= n), n


# ---------------------------------------------------------------------------
# encode_split.
# ---------------------------------------------------------------------------
def test_encode_split_shapes_padding_and_eos():
  examples = [Example(('a', 'b', 'c'), ('X',)),
              Example(('b',), ('Y', 'X', 'Y', 'Y')),
              Example(('c', 'c'), ('X', 'X'))]
  vocab = Vocabulary.from_examples(examples)
  split = ip.encode_split(examples, vocab)
  assert len(split) == 3
  assert split.src.shape == (3, 3) and split.tgt.shape == (3, 5)
  assert split.src.dtype == np.int32 and split.tgt.dtype == np.int32
  np.testing.assert_array_equal(split.src_len, [3, 1, 2])
  np.testing.assert_array_equal(split.tgt_len, [2, 5, 3])   # `<eos>` included
  a, b, c, x, y = (vocab.id_of(t) for t in 'abcXY')
  eos = vocab.eos_id
  np.testing.assert_array_equal(split.src, [[a, b, c], [b, 0, 0], [c, c, 0]])
  np.testing.assert_array_equal(split.tgt, [[x, eos, 0, 0, 0],
                                            [y, x, y, y, eos],
                                            [x, x, eos, 0, 0]])
  assert split.gold is None and split.n_unk == 0


def test_encode_split_counts_unknown_tokens():
  vocab = Vocabulary.from_tokens(['a', 'X'])
  examples = [Example(('a', 'q', 'q'), ('X', 'Z')), Example(('a',), ('X',))]
  split = ip.encode_split(examples, vocab)
  assert split.n_unk == 3
  np.testing.assert_array_equal(split.src[0], [vocab.id_of('a'), vocab.unk_id, vocab.unk_id])
  np.testing.assert_array_equal(split.tgt[0], [vocab.id_of('X'), vocab.unk_id, vocab.eos_id])


def test_encode_split_gold_padded_with_minus_one():
  examples = [Example(('a', 'b', '.'), ('X',), (0, 2)),
              Example(('a', '.'), ('X', 'X', 'X'), (1, 0, 1, 1))]
  split = ip.encode_split(examples, Vocabulary.from_examples(examples))
  np.testing.assert_array_equal(split.gold, [[0, 2, -1, -1], [1, 0, 1, 1]])
  assert split.gold.shape == split.tgt.shape
  # Gold only when every example has it.
  mixed = examples + [Example(('a',), ('X',))]
  assert ip.encode_split(mixed, Vocabulary.from_examples(mixed)).gold is None


def test_encode_split_large(data):
  examples, vocab, split, _ = data
  assert split.src.shape == (N_EXAMPLES, max(len(e.source) for e in examples))
  assert split.tgt.shape == (N_EXAMPLES, max(len(e.target) for e in examples) + 1)
  for i, e in enumerate(examples):
    n, t = len(e.source), len(e.target)
    assert split.src_len[i] == n and split.tgt_len[i] == t + 1
    assert list(split.src[i, :n]) == vocab.encode(e.source)
    assert list(split.tgt[i, :t]) == vocab.encode(e.target)
    assert split.tgt[i, t] == vocab.eos_id
    assert not split.src[i, n:].any() and not split.tgt[i, t + 1:].any()


# ---------------------------------------------------------------------------
# Training batches.
# ---------------------------------------------------------------------------
def epoch_batches(split, seeds: Sequence[int], epoch: int = 0, schedule_seed: int = 0,
                  sos_id: int = 1, bucketed: bool = True) -> List[ip.Batch]:
  return list(ip.train_batches(split, BATCH, list(seeds), epoch, schedule_seed, sos_id,
                               bucketed))


def test_training_batch_shapes_follow_buckets(data):
  _, vocab, split, _ = data
  counts = bucket_counts(split)
  assert len(counts) >= 4 and all(c % BATCH for c in counts.values())
  batches = epoch_batches(split, [0])
  assert len(batches) == sum(math.ceil(c / BATCH) for c in counts.values())
  assert ip.num_train_steps(split, BATCH) == len(batches)
  # Widths: the split's longest source; per bucket, the bucket's longest target.
  src_width = int(split.src_len.max())
  longest = {}
  for n in split.tgt_len:
    bucket = next(b for b in ip.BUCKETS if b >= n)
    longest[bucket] = max(longest.get(bucket, 0), int(n))
  buckets = []
  for batch in batches:
    width = batch.tgt_out.shape[-1]
    assert batch.src.shape == (1, BATCH, src_width)
    assert batch.src_len.shape == (1, BATCH)
    assert batch.tgt_in.shape == batch.tgt_out.shape == (1, BATCH, width)
    real = real_rows(batch.tgt_out[0], vocab.eos_id)
    lengths = (batch.tgt_out[0] != 0).sum(-1)[real]
    # Every real row belongs to one bucket, whose longest target is the width.
    bucket = next(b for b in ip.BUCKETS if b >= lengths.max())
    below = max([0] + [b for b in ip.BUCKETS if b < bucket])
    assert np.all(lengths > below) and np.all(lengths <= bucket)
    assert width == longest[bucket]
    buckets.append(bucket)
  assert sorted(buckets) == sorted(w for w, c in counts.items()
                                   for _ in range(math.ceil(c / BATCH)))


def test_training_batches_hold_every_example_once(data):
  _, vocab, split, index_of = data
  for seed, epoch in [(0, 0), (4, 3)]:
    seen = []
    for batch in epoch_batches(split, [seed], epoch):
      real = real_rows(batch.tgt_out[0], vocab.eos_id)
      idx = example_indices(batch.src[0], real, index_of)
      seen += idx
      width = batch.tgt_out.shape[-1]
      for row, i in zip(np.flatnonzero(real), idx):
        n, t = split.src_len[i], split.tgt_len[i]
        assert batch.src_len[0, row] == n
        np.testing.assert_array_equal(batch.src[0, row, :n], split.src[i, :n])
        assert not batch.src[0, row, n:].any()
        np.testing.assert_array_equal(batch.tgt_out[0, row, :t], split.tgt[i, :t])
        assert not batch.tgt_out[0, row, t:].any()
        assert t <= width
    assert sorted(seen) == list(range(N_EXAMPLES))


def test_teacher_forcing_input_is_the_shifted_target(data):
  _, vocab, split, _ = data
  for batch in epoch_batches(split, [0, 1], sos_id=vocab.sos_id):
    assert np.all(batch.tgt_in[..., 0] == vocab.sos_id)
    np.testing.assert_array_equal(batch.tgt_in[..., 1:], batch.tgt_out[..., :-1])


def test_filler_rows_carry_no_loss(data):
  _, vocab, split, index_of = data
  rng = np.random.default_rng(0)
  n_filler = 0
  for batch in epoch_batches(split, [0]):
    tgt_out = batch.tgt_out[0]
    filler = ~real_rows(tgt_out, vocab.eos_id)
    if not filler.any():
      continue
    n_filler += filler.sum()
    # A filler row's target is all <pad>: nothing to predict.
    assert not tgt_out[filler].any()
    # token_loss counts exactly the real rows' tokens (<eos> included), none of the fillers'.
    logits = jnp.asarray(rng.standard_normal(tgt_out.shape + (len(vocab),)), jnp.float32)
    loss, count = token_loss(logits, jnp.asarray(tgt_out), vocab.pad_id)
    expected = sum(split.tgt_len[i] for i in example_indices(batch.src[0], ~filler, index_of))
    assert int(count) == expected and float(loss) > 0
    only_fillers = np.where(filler[:, None], tgt_out, vocab.pad_id)
    loss_f, count_f = token_loss(logits, jnp.asarray(only_fillers), vocab.pad_id)
    assert float(loss_f) == 0.0 and int(count_f) == 0
  # One incomplete batch per bucket, completed with fillers.
  assert n_filler == sum((-c) % BATCH for c in bucket_counts(split).values())
  assert n_filler > 0


def test_single_seed_equals_its_slice_of_a_multi_seed_epoch(data):
  _, vocab, split, _ = data
  seeds = [3, 5, 8]
  for epoch in (0, 2):
    multi = epoch_batches(split, seeds, epoch, schedule_seed=11)
    for k, seed in enumerate(seeds):
      single = epoch_batches(split, [seed], epoch, schedule_seed=11)
      assert len(single) == len(multi)
      for a, b in zip(single, multi):
        for field_a, field_b in zip(a, b):
          np.testing.assert_array_equal(field_a[0], field_b[k])
  # The seeds really draw different batches.
  multi = epoch_batches(split, seeds, 0, schedule_seed=11)
  assert any(not np.array_equal(b.src[0], b.src[1]) for b in multi)


def test_schedule_depends_on_schedule_seed_and_examples_on_seed(data):
  _, _, split, _ = data
  def widths(batches):
    return [b.tgt_out.shape[-1] for b in batches]

  a = epoch_batches(split, [1], 0, schedule_seed=0)
  b = epoch_batches(split, [2], 0, schedule_seed=0)
  c = epoch_batches(split, [1], 0, schedule_seed=1)
  # Same schedule seed: the same bucket order, whatever the seed.
  assert widths(a) == widths(b)
  # Another schedule seed: another bucket order, but each bucket's batches,
  # in order, are the same (they depend on (seed, epoch) only).
  assert widths(a) != widths(c)
  pa, pc = per_bucket(a), per_bucket(c)
  assert pa.keys() == pc.keys()
  for width in pa:
    for x, y in zip(pa[width], pc[width]):
      np.testing.assert_array_equal(x, y)


def test_epochs_differ_and_repeat(data):
  _, _, split, _ = data
  e0 = epoch_batches(split, [0], 0)
  e1 = epoch_batches(split, [0], 1)
  assert [b.tgt_out.shape for b in e0] != [b.tgt_out.shape for b in e1]
  # Within every bucket the examples come in another order, too.
  p0, p1 = per_bucket(e0), per_bucket(e1)
  for width in p0:
    assert not np.array_equal(np.concatenate(p0[width]), np.concatenate(p1[width])), width
  # Deterministic: the same arguments give the same epoch.
  again = epoch_batches(split, [0], 1)
  for x, y in zip(e1, again):
    for fx, fy in zip(x, y):
      np.testing.assert_array_equal(fx, fy)


def _rounded_width(n: int, cap: int) -> int:
  """n rounded up to a multiple of 8, at most cap (by hand)."""
  return min(cap, 8 * math.ceil(n / 8))


def test_unbucketed_batches_are_random_and_padded_to_their_own_longest(data):
  _, vocab, split, index_of = data
  batches = epoch_batches(split, [0], 2, bucketed=False)
  assert len(batches) == math.ceil(N_EXAMPLES / BATCH) == ip.num_train_steps(
      split, BATCH, bucketed=False)
  seen, mixed, widths = [], 0, set()
  for batch in batches:
    real = real_rows(batch.tgt_out[0], vocab.eos_id)
    idx = example_indices(batch.src[0], real, index_of)
    # Like the authors' collater: the batch's own longest target and source, here
    # rounded up to a multiple of 8 and capped at the split's longest.
    width = _rounded_width(int(split.tgt_len[idx].max()), int(split.tgt_len.max()))
    src_width = _rounded_width(int(split.src_len[idx].max()), int(split.src_len.max()))
    assert batch.tgt_out.shape == batch.tgt_in.shape == (1, BATCH, width)
    assert batch.src.shape == (1, BATCH, src_width)
    widths.add(width)
    seen += idx
    mixed += len({ip.bucket_length(int(split.tgt_len[i])) for i in idx}) > 1
  assert sorted(seen) == list(range(N_EXAMPLES))
  # Random, not length-grouped: most batches mix buckets.
  assert mixed > len(batches) // 2
  # Only the one incomplete batch has fillers.
  n_filler = sum((~real_rows(b.tgt_out[0], vocab.eos_id)).sum() for b in batches)
  assert n_filler == (-N_EXAMPLES) % BATCH
  # Some batches are narrower than the split's longest target: padding is per batch.
  assert len(widths) > 1 and min(widths) < int(split.tgt_len.max())


def test_unbucketed_seeds_share_the_width_of_their_longest_rows(data):
  _, vocab, split, index_of = data
  seeds = [0, 1, 2]
  batches = epoch_batches(split, seeds, 1, bucketed=False)
  singles = [epoch_batches(split, [s], 1, bucketed=False) for s in seeds]
  for step, batch in enumerate(batches):
    idx = [i for s in range(len(seeds))
           for i in example_indices(batch.src[s], real_rows(batch.tgt_out[s], vocab.eos_id),
                                    index_of)]
    width = _rounded_width(int(split.tgt_len[idx].max()), int(split.tgt_len.max()))
    assert batch.tgt_out.shape == (len(seeds), BATCH, width)
    # Each seed's rows are its single-seed run's rows, padded to the shared width.
    for s, single in enumerate(singles):
      one = single[step]
      w = one.tgt_out.shape[-1]
      assert w <= width
      np.testing.assert_array_equal(batch.tgt_out[s, :, :w], one.tgt_out[0])
      assert not batch.tgt_out[s, :, w:].any()


# ---------------------------------------------------------------------------
# Evaluation batches.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('batch_size', [16, 50, 157, 200])
def test_eval_batches_cover_every_example_once_in_order(data, batch_size):
  _, vocab, split, index_of = data
  batches = ip.eval_batches(split, batch_size, vocab.sos_id)
  assert len(batches) == math.ceil(N_EXAMPLES / batch_size)
  order = np.concatenate([idx for idx, _, _ in batches])
  assert sorted(order.tolist()) == list(range(N_EXAMPLES))
  # Sorted by target length, then source length.
  keys = list(zip(split.tgt_len[order], split.src_len[order]))
  assert keys == sorted(keys)
  shapes = ip.eval_shapes(split.src_len, split.tgt_len, batch_size)
  assert len(shapes) == len(batches)
  for (idx, batch, steps), (shape_idx, src_width, shape_steps) in zip(batches, shapes):
    n = len(idx)
    np.testing.assert_array_equal(idx, shape_idx)
    assert steps == shape_steps
    assert batch.src.shape == (batch_size, src_width)
    assert batch.src_len.shape == (batch_size,)
    assert batch.tgt_in.shape == batch.tgt_out.shape == (batch_size, steps)
    # Row r holds example idx[r].
    assert example_indices(batch.src, np.arange(batch_size) < n, index_of) == idx.tolist()
    np.testing.assert_array_equal(batch.src_len[:n], split.src_len[idx])
    for r, i in enumerate(idx):
      t = split.tgt_len[i]
      np.testing.assert_array_equal(batch.tgt_out[r, :t], split.tgt[i, :t])
      assert not batch.tgt_out[r, t:].any()
    # Filler rows up to the full batch size, with nothing to predict.
    assert not batch.tgt_out[n:].any()
    assert np.all(batch.tgt_in[:, 0] == vocab.sos_id)


def _bucketed(src_len, tgt_len, batch_size):
  """Each batch's own bucketed (source width, steps), by hand."""
  order = np.lexsort((src_len, tgt_len))
  out = []
  for start in range(0, len(order), batch_size):
    idx = order[start:start + batch_size]
    out.append((min(ip.bucket_length(int(src_len[idx].max())), int(src_len.max())),
                ip.bucket_length(int(tgt_len[idx].max()))))
  return out


def test_eval_shapes_share_the_widest_when_padding_is_cheap():
  # Two batches of 4: sources 6 and 10 (widths 8 and 10), targets 7 and 11 (steps 8, 16):
  # positions 8*8 + 10*16 = 224; the widest shape for both, 2 * 10*16 = 320 <= 1.5 * 224.
  src_len = np.array([6] * 4 + [10] * 4)
  tgt_len = src_len + 1
  assert _bucketed(src_len, tgt_len, 4) == [(8, 8), (10, 16)]
  shapes = ip.eval_shapes(src_len, tgt_len, 4)
  assert [(w, t) for _, w, t in shapes] == [(10, 16), (10, 16)]
  assert [i.tolist() for i, _, _ in shapes] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_eval_shapes_keep_their_buckets_when_padding_is_dear():
  # Sources 6 and 100 (one batch each): the widest shape would cost 2 * 100*128 = 25600
  # against 8*8 + 100*128 = 12864 positions, more than 1.5x: each batch keeps its own.
  src_len = np.array([6] * 4 + [100] * 4)
  tgt_len = src_len + 1
  shapes = ip.eval_shapes(src_len, tgt_len, 4)
  assert [(w, t) for _, w, t in shapes] == [(8, 8), (100, 128)] == _bucketed(src_len, tgt_len, 4)


def test_eval_shapes_threshold_is_inclusive():
  # Sources 7 and 8 (widths 8 and 8), targets 8 and 9 (steps 8 and 16): positions 64 + 128
  # = 192; one shape 2 * 128 = 256 <= 1.5 * 192 = 288: shared. Three short batches and one
  # long one: 3*64 + 128 = 320; one shape 4 * 128 = 512 > 480: kept.
  two = np.array([7] * 4 + [8] * 4)
  assert {(w, t) for _, w, t in ip.eval_shapes(two, two + 1, 4)} == {(8, 16)}
  four = np.array([7] * 12 + [8] * 4)
  assert [(w, t) for _, w, t in ip.eval_shapes(four, four + 1, 4)] == _bucketed(
      four, four + 1, 4) == [(8, 8)] * 3 + [(8, 16)]


def test_eval_shapes_take_a_compiled_shape_that_holds_them():
  # test_iid's spread (sources 5-10, one shape (10, 16) of its own, 2 * 160 = 320
  # positions) inside dev's compiled (15, 16): 2 * 240 = 480 <= 1.5 * 320, so no program
  # of its own; of two holders the smaller; (30, 32) alone would cost 1920 > 480: kept.
  src_len = np.array([5] * 4 + [10] * 4)
  tgt_len = src_len + 1
  assert {(w, t) for _, w, t in ip.eval_shapes(src_len, tgt_len, 4)} == {(10, 16)}
  shapes = ip.eval_shapes(src_len, tgt_len, 4, in_use={(15, 16), (30, 32)})
  assert [(w, t) for _, w, t in shapes] == [(15, 16), (15, 16)]
  assert [i.tolist() for i, _, _ in shapes] == [[0, 1, 2, 3], [4, 5, 6, 7]]
  assert [(w, t) for _, w, t in ip.eval_shapes(src_len, tgt_len, 4, in_use={(30, 32)})] == [
      (10, 16), (10, 16)]
  # A compiled shape narrower than the split's widest batch never holds it (steps 16 > 8).
  assert [(w, t) for _, w, t in ip.eval_shapes(src_len, tgt_len, 4, in_use={(15, 8)})] == [
      (10, 16), (10, 16)]
  # A split already in a compiled shape keeps it. A split whose buckets are dear to merge
  # (3 * 64 + 160 = 352 positions, widest 4 * 160 = 640 > 528) is dearer still in any
  # shape that holds its widest batch: it keeps its buckets.
  assert [(w, t) for _, w, t in ip.eval_shapes(src_len, tgt_len, 4, in_use={(10, 16)})] == [
      (10, 16), (10, 16)]
  many = np.array([6] * 12 + [10] * 4)
  assert [(w, t) for _, w, t in ip.eval_shapes(many, many + 1, 4, in_use={(10, 16)})] == [
      (8, 8)] * 3 + [(10, 16)] == _bucketed(many, many + 1, 4)


def test_test_splits_are_names_and_groups_in_order():
  def resolve(spec, task='copy'):
    return ip.resolve_test_splits(ml_collections.ConfigDict(
        {'task': task, 'test_splits': spec}))
  assert resolve('paper') == ('test_15', 'test_30', 'test_100')
  assert resolve('test_iid,paper') == ('test_iid', 'test_15', 'test_30', 'test_100')
  assert resolve('test_30, paper') == ('test_30', 'test_15', 'test_100')     # no repeats
  assert resolve('test_iid,paper', 'lookup') == ('test_iid', 'test_long1', 'test_long3',
                                                 'test_long5')
  assert resolve('all') == ('test_iid', 'test_15', 'test_20', 'test_25', 'test_30',
                            'test_50', 'test_100')
  with pytest.raises(errors.MonolocError, match="unknown test split 'papr' for task 'copy'; "
                     r"valid: test_iid, .* \(or 'paper', 'all'\)"):
    resolve('test_iid,papr')


def test_filler_rows_of_a_random_batch_fit_its_widths():
  """A partial last batch is completed with filler rows. Their src_len and target must fit
  the widths chosen from the batch's real rows, also when the split's row 0 is its
  longest example (its row 0 used to be the filler: src_len 10 in a batch of width 8)."""
  src_len = np.array([10] + [3] * 4)
  tgt_len = src_len + 1
  src = np.zeros((5, 10), np.int32)
  tgt = np.zeros((5, 11), np.int32)
  for i, (n, m) in enumerate(zip(src_len, tgt_len)):
    src[i, :n], tgt[i, :m] = 5, 6
  split = ip.EncodedSplit(src, src_len, tgt, tgt_len, None, 0)
  batch = ip._make_batch(split, np.array([1, 2, -1, -1]), 8, 8, sos_id=1)   # widths of rows 1, 2
  assert batch.src.shape == (4, 8)
  np.testing.assert_array_equal(batch.src_len, [3, 3, 3, 3])
  assert (batch.tgt_out[2:] == 0).all()                   # filler rows carry no loss
  for seed in range(20):                                   # whole epochs of random batches
    for b in ip.train_batches(split, 4, [seed], 0, 0, 1, bucketed=False):
      assert (b.src_len <= b.src.shape[-1]).all(), (b.src_len, b.src.shape)


def test_one_shape_per_split_decodes_the_same_tokens(monkeypatch):
  """A split decoded in its one widest shape (`eval_shapes`) gives, for untrained seeds,
  the tokens up to each gold length and the teacher-forced marks of its bucketed shapes."""
  from monoloc_jax import inference, variants
  from monoloc_jax.backbones import gru
  rng = np.random.default_rng(3)
  examples = [Example(tuple(str(t) for t in rng.choice(list('abcdefgh'), n)),
                      tuple(str(t) for t in rng.choice(list('abcdefgh'), n)))
              for n in rng.integers(5, 11, 96)]          # test_iid's spread: 5-10
  vocab = Vocabulary.from_examples(examples)
  split = ip.encode_split(examples, vocab)
  model = gru.Seq2Seq(vocab_size=len(vocab), variant=variants.get('onestep'), hidden_dim=16,
                      embed_dim=8, value_dim=16)
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  params = jax.vmap(lambda k: model.init({'params': k}, split.src[:2], split.src_len[:2],
                                         method='build')['params'])(keys)
  programs = inference.make_eval_programs(model)
  out = []
  # 0: every batch keeps its buckets; then the split's one widest shape; then a dev
  # split's compiled (15, 16) (`in_use`).
  for factor, in_use in ((0.0, ()), (ip.ONE_SHAPE_PADDING, ()),
                         (ip.ONE_SHAPE_PADDING, {(15, 16)})):
    monkeypatch.setattr(ip, 'ONE_SHAPE_PADDING', factor)
    batches = ip.eval_batches(split, 32, vocab.sos_id, in_use)
    tokens, _ = inference.decode_split(programs, params, split, 32, vocab, in_use=in_use)
    marks = np.zeros((3, len(split)), bool)
    for idx, batch, _ in batches:
      marks[:, idx] = np.asarray(programs.teacher_forced_accuracy(params, batch))[:, :len(idx)]
    out.append(({(b.src.shape[1], s) for _, b, s in batches}, tokens, marks))
  (shapes0, tok0, marks0) = out[0]
  assert len(shapes0) == 3 and [o[0] for o in out[1:]] == [{(10, 16)}, {(15, 16)}]
  for _, tok1, marks1 in out[1:]:
    for i, n in enumerate(split.tgt_len):
      np.testing.assert_array_equal(tok0[:, i, :n], tok1[:, i, :n])
    np.testing.assert_array_equal(marks0, marks1)
