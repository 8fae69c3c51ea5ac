"""Tests of the evaluation metrics against hand-worked cases and pure-Python references.

Ids: 0 `<pad>`, 2 `<eos>`, 4+ task tokens (the library's vocabulary layout).
"""

from typing import List, Sequence

import numpy as np
import pytest

from monoloc_jax import input_pipeline as ip
from monoloc_jax import metrics
from monoloc_jax.tasks import lookup
from monoloc_jax.vocab import Vocabulary

PAD, EOS = 0, 2


def rows(*seqs: Sequence[int], width: int = 0) -> np.ndarray:
  """Rows padded with `<pad>` to `width` (or the longest row)."""
  width = max([width] + [len(s) for s in seqs])
  out = np.full((len(seqs), width), PAD, np.int32)
  for i, s in enumerate(seqs):
    out[i, :len(s)] = s
  return out


# ---------------------------------------------------------------------------
# Pure-Python references.
# ---------------------------------------------------------------------------
def ref_cut(row: Sequence[int]) -> List[int]:
  """The tokens before the first `<eos>`; the whole row when there is none."""
  out = []
  for token in row:
    if token == EOS:
      break
    out.append(int(token))
  return out


def ref_levenshtein(a: Sequence[int], b: Sequence[int]) -> int:
  """Textbook dynamic programme: insertions, deletions, substitutions cost 1."""
  prev = list(range(len(b) + 1))
  for i in range(1, len(a) + 1):
    cur = [i] + [0] * len(b)
    for j in range(1, len(b) + 1):
      cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
    prev = cur
  return prev[-1]


def random_outputs(rng: np.random.Generator, n: int, width: int,
                   p_eos: float = 0.15) -> np.ndarray:
  """Random rows over {pad, eos, 4, 5, 6}."""
  return rng.choice([PAD, EOS, 4, 5, 6], size=(n, width),
                    p=[0.1, p_eos, (1 - 0.1 - p_eos) / 3, (1 - 0.1 - p_eos) / 3,
                       (1 - 0.1 - p_eos) / 3]).astype(np.int32)


# ---------------------------------------------------------------------------
# cut_lengths.
# ---------------------------------------------------------------------------
def test_cut_lengths():
  ids = rows([5, 6, 2, 7, 2], [2, 5], [5, 6, 7], [5, 0, 0, 2])
  np.testing.assert_array_equal(metrics.cut_lengths(ids, EOS), [2, 0, 5, 3])


# ---------------------------------------------------------------------------
# Sequence accuracy.
# ---------------------------------------------------------------------------
SEQ_ACC_CASES = [
    # (prediction, target, correct?)
    ([5, 6, 2], [5, 6, 2], True),
    ([5, 6, 2, 9, 9], [5, 6, 2], True),        # anything after <eos> is ignored
    ([5, 6, 2, 0, 0], [5, 6, 2], True),
    ([5, 2], [5, 6, 2], False),                # too short
    ([5, 6, 7, 2], [5, 6, 2], False),          # too long, same prefix
    ([5, 7, 2], [5, 6, 2], False),             # a wrong token
    ([5, 6, 0, 2], [5, 6, 2], False),          # <pad> before <eos> is not trimmed
    ([5, 6, 0, 0], [5, 6, 2], False),          # never ended
    ([5, 6], [5, 6, 2], False),                # narrower and never ended
    ([2], [2], True),                          # empty target, empty prediction
    ([2, 5], [2], True),
    ([5, 2], [2], False),
    ([2], [5, 2], False),
]


@pytest.mark.parametrize('pred,target,correct', SEQ_ACC_CASES)
def test_sequence_accuracy_cases(pred, target, correct):
  got = metrics.sequence_accuracy(rows(pred), rows(target), EOS)
  assert got.shape == (1,)
  assert bool(got[0]) is correct


@pytest.mark.parametrize('pred_width,target_width', [(6, 6), (9, 5), (4, 8), (1, 6)])
def test_sequence_accuracy_matches_reference(pred_width, target_width):
  """Random batches, predictions wider and narrower than the targets."""
  rng = np.random.default_rng(pred_width * 10 + target_width)
  target = random_outputs(rng, 400, target_width)
  pred = random_outputs(rng, 400, pred_width)
  # Many predictions copy their target (cut at a random point), so both answers occur.
  for i in range(0, 400, 2):
    k = min(pred_width, target_width)
    pred[i, :k] = target[i, :k]
  got = metrics.sequence_accuracy(pred, target, EOS)
  # A row without <eos> has not ended, so it can equal only a target that has not either
  # and has the same tokens (the narrower row counts as continued by <pad>).
  width = max(pred_width, target_width)
  def full(row):
    return list(row) + [PAD] * (width - len(row))
  expected = [ref_cut(full(p)) == ref_cut(full(t)) for p, t in zip(pred, target)]
  np.testing.assert_array_equal(got, expected)
  assert 0 < got.sum() < len(got)


# ---------------------------------------------------------------------------
# SeqAccBE.
# ---------------------------------------------------------------------------
SEQ_ACC_BE_CASES = [
    # (prediction, target, correct?)
    ([5, 6, 7, 2], [5, 6, 7, 2], True),        # exact
    ([5, 6, 2], [5, 6, 7, 2], True),           # stopped early, prefix right
    ([5, 2, 9, 9], [5, 6, 7, 2], True),
    ([6, 2], [5, 6, 7, 2], False),             # stopped early, prefix wrong
    ([5, 6, 7, 8, 2], [5, 6, 7, 2], False),    # longer than the target
    ([5, 6, 7, 4, 4, 4], [5, 6, 7, 2], False),  # no <eos>, wider than the target
    ([5, 6, 7, 0], [5, 6, 7, 2], False),       # no <eos>: never ended, <pad> kept
    ([5], [5, 6, 7, 2], False),                # no <eos>, narrower: never ended either
    ([2], [5, 6, 7, 2], True),                 # <eos> first: empty prefix, vacuously right
    ([2, 9], [5, 6, 7, 2], True),
    ([2], [2], True),                          # empty prediction, empty target
    ([5, 2], [2], False),                      # longer than an empty target
    ([5, 0, 2], [5, 6, 7, 2], False),          # <pad> inside the prefix is a wrong token
]


@pytest.mark.parametrize('pred,target,correct', SEQ_ACC_BE_CASES)
def test_seq_acc_before_eos_cases(pred, target, correct):
  got = metrics.seq_acc_before_eos(rows(pred), rows(target), EOS)
  assert got.shape == (1,)
  assert bool(got[0]) is correct


@pytest.mark.parametrize('pred_width,target_width', [(7, 7), (10, 5), (3, 8)])
def test_seq_acc_before_eos_matches_reference(pred_width, target_width):
  rng = np.random.default_rng(100 + pred_width * 10 + target_width)
  target = random_outputs(rng, 400, target_width)
  pred = random_outputs(rng, 400, pred_width, p_eos=0.3)
  for i in range(0, 400, 2):
    k = min(pred_width, target_width)
    pred[i, :k] = target[i, :k]
    pred[i, rng.integers(k)] = EOS            # stop somewhere inside a correct prefix
  got = metrics.seq_acc_before_eos(pred, target, EOS)
  # As for sequence accuracy, the narrower row counts as continued by <pad>, so a
  # prediction that never ended is longer than any target that did.
  width = max(pred_width, target_width)
  expected = []
  for p, t in zip(pred, target):
    cut_p = ref_cut(list(p) + [PAD] * (width - len(p)))
    cut_t = ref_cut(list(t) + [PAD] * (width - len(t)))
    expected.append(len(cut_p) <= len(cut_t) and cut_p == cut_t[:len(cut_p)])
  np.testing.assert_array_equal(got, expected)
  assert 0 < got.sum() < len(got)
  # Everything sequence accuracy accepts, SeqAccBE accepts too.
  assert np.all(got[metrics.sequence_accuracy(pred, target, EOS)])


# ---------------------------------------------------------------------------
# Edit distance.
# ---------------------------------------------------------------------------
EDIT_CASES = [
    ([5, 6, 7, 2], [5, 6, 7, 2], 0),
    ([5, 7, 2], [5, 6, 7, 2], 1),              # one deletion
    ([5, 6, 6, 7, 2], [5, 6, 7, 2], 1),        # one insertion
    ([5, 4, 7, 2], [5, 6, 7, 2], 1),           # one substitution
    ([2], [5, 6, 7, 2], 3),                    # empty prediction
    ([5, 6, 7, 2, 8, 8, 8], [5, 6, 7, 2], 0),  # after <eos> is ignored
    ([5, 6, 7, 0], [5, 6, 7, 2], 1),           # no <eos>: the <pad> counts
    ([7, 6, 5, 2], [5, 6, 7, 2], 2),           # reversed
    ([6, 7, 8, 9, 2], [5, 6, 7, 2], 3),        # insert 5, delete 8 and 9
]


@pytest.mark.parametrize('pred,target,distance', EDIT_CASES)
def test_edit_distance_cases(pred, target, distance):
  assert ref_levenshtein(ref_cut(pred), ref_cut(target)) == distance   # the reference itself
  got = metrics.edit_distances(rows(pred), rows(target), EOS)
  np.testing.assert_array_equal(got, [distance])


@pytest.mark.parametrize('pred_width,target_width', [(8, 8), (12, 6), (5, 9)])
def test_edit_distance_matches_reference(pred_width, target_width):
  rng = np.random.default_rng(200 + pred_width * 10 + target_width)
  target = random_outputs(rng, 300, target_width, p_eos=0.1)
  pred = random_outputs(rng, 300, pred_width, p_eos=0.1)
  got = metrics.edit_distances(pred, target, EOS)
  expected = [ref_levenshtein(ref_cut(p), ref_cut(t)) for p, t in zip(pred, target)]
  np.testing.assert_array_equal(got, expected)
  assert len(set(expected)) > 3
  # The split's value is the mean.
  assert metrics.summarize(pred, target, EOS)['edit_distance'] == pytest.approx(np.mean(expected))


# ---------------------------------------------------------------------------
# Attention loss: expected attended source index vs gold, in token positions.
# Attention is over encoder positions START x_0 .. x_{n-1} END, so encoder
# position p is source index p - 1 (START = -1, END = n).
# ---------------------------------------------------------------------------
def test_attention_loss_hand_worked():
  attention = np.zeros((1, 3, 5))               # source of 3 tokens: S = 5
  attention[0, 0, 1] = 1.0                      # source 0 = gold 0: error 0
  attention[0, 1, 2] = attention[0, 1, 3] = 0.5  # source 1.5 vs gold 2: error 0.25
  attention[0, 2, 4] = 1.0                      # beyond the target length: ignored
  gold = np.array([[0, 2, 0]])
  assert metrics.attention_loss(attention, gold, np.array([2])) == pytest.approx(0.125)


@pytest.mark.parametrize('position,gold,error', [
    (0, 0, 1.0),        # START is source index -1
    (1, 0, 0.0),
    (4, 3, 0.0),        # END of a 3-token source is source index 3
    (4, 0, 9.0),
    (2, 3, 4.0),
])
def test_attention_loss_offset(position, gold, error):
  attention = np.zeros((1, 1, 5))
  attention[0, 0, position] = 1.0
  got = metrics.attention_loss(attention, np.array([[gold]]), np.array([1]))
  assert got == pytest.approx(error)


def test_attention_loss_is_squared_error_of_the_expectation_not_of_the_argmax():
  attention = np.zeros((1, 1, 6))
  attention[0, 0, [1, 5]] = [0.75, 0.25]        # expected encoder position 2 = source 1
  # argmax would give source 0 (error 1); the expectation gives source 1 (error 0).
  assert metrics.attention_loss(attention, np.array([[1]]), np.array([1])) == pytest.approx(0.0)
  # Spread weights: expected source index 0.75 * 0 + 0.25 * 4 = 1, gold 3: error 4.
  assert metrics.attention_loss(attention, np.array([[3]]), np.array([1])) == pytest.approx(4.0)


def test_attention_loss_masks_missing_gold_and_averages_over_tokens():
  attention = np.zeros((2, 4, 6))
  attention[:, :, 1] = 1.0                      # always source 0
  gold = np.array([[2, -1, 0, 0],               # row 0: error 4, then no gold, then 0
                   [0, 0, 0, 5]])               # row 1: errors 0, 0, 0 (len 3)
  target_len = np.array([3, 3])
  # Kept tokens: row 0 steps 0 and 2, row 1 steps 0-2 -> (4 + 0 + 0 + 0 + 0) / 5,
  # a mean over tokens, not over examples ((2 + 0) / 2 = 1).
  assert metrics.attention_loss(attention, gold, target_len) == pytest.approx(0.8)


def test_attention_loss_gold_and_attention_of_different_widths():
  attention = np.zeros((1, 2, 4))
  attention[0, :, 2] = 1.0                      # source 1
  gold_wide = np.array([[1, 3, 0, 0, 0]])       # steps beyond the attention are ignored
  assert metrics.attention_loss(attention, gold_wide, np.array([5])) == pytest.approx(2.0)
  gold_narrow = np.array([[3]])                 # steps beyond the gold are ignored
  assert metrics.attention_loss(attention, gold_narrow, np.array([2])) == pytest.approx(4.0)


def test_attention_loss_nan_without_gold():
  attention = np.full((1, 2, 4), 0.25)
  assert np.isnan(metrics.attention_loss(attention, np.array([[-1, -1]]), np.array([2])))
  assert np.isnan(metrics.attention_loss(attention, np.array([[1, 1]]), np.array([0])))


def _tables() -> dict:
  bits = ['000', '001', '010', '011', '100', '101', '110', '111']
  return {'t1': {b: bits[(i + 1) % 8] for i, b in enumerate(bits)},
          't2': {b: bits[(i + 3) % 8] for i, b in enumerate(bits)}}


def test_attention_loss_zero_for_lookup_gold_through_the_pipeline():
  """Attention on each Lookup gold index, via encode_split, costs nothing; the
  `<eos>` step is not scored, so attention there may be anywhere."""
  examples = [lookup.make_example('010', ('t1', 't2'), _tables(), reverse=False),
              lookup.make_example('110', ('t2', 't1', 't2'), _tables(), reverse=True)]
  vocab = Vocabulary.from_examples(examples)
  split = ip.encode_split(examples, vocab)
  n, steps = split.tgt.shape
  attention = np.zeros((n, steps + 2, split.src.shape[1] + 2))
  for i, example in enumerate(examples):
    for t, g in enumerate(example.gold_attention[:-1]):
      attention[i, t, g + 1] = 1.0
    attention[i, len(example.target), 0] = 1.0  # <eos> step on START: not scored
  result = metrics.summarize(split.tgt, split.tgt, vocab.eos_id, attention, split.gold)
  assert result['attention_loss'] == 0.0
  # Moving every scored step one encoder position right costs exactly 1 per token.
  shifted = np.roll(attention, 1, axis=-1)
  result = metrics.summarize(split.tgt, split.tgt, vocab.eos_id, shifted, split.gold)
  assert result['attention_loss'] == pytest.approx(1.0)


# ---------------------------------------------------------------------------
# summarize.
# ---------------------------------------------------------------------------
def test_summarize_keys_and_values():
  target = rows([5, 6, 7, 2], [5, 6, 2], [4, 2], [5, 5, 5, 2])
  pred = rows([5, 6, 7, 2],     # exact: acc, BE; distance 0
              [5, 2, 9],        # early stop: BE only; distance 1
              [4, 4, 2],        # too long: neither; distance 1
              [6, 5, 5, 2])     # wrong token: neither; distance 1
  result = metrics.summarize(pred, target, EOS)
  assert set(result) == {'accuracy', 'seq_acc_be', 'edit_distance', 'n'}
  assert result['accuracy'] == pytest.approx(25.0)
  assert result['seq_acc_be'] == pytest.approx(50.0)
  assert result['edit_distance'] == pytest.approx(0.75)
  assert result['n'] == 4 and isinstance(result['n'], int)
  for key in ('accuracy', 'seq_acc_be', 'edit_distance'):
    assert isinstance(result[key], float)


def test_summarize_attention_loss_only_with_both_attention_and_gold():
  target = rows([5, 6, 2], [5, 2])
  attention = np.zeros((2, 3, 5))
  attention[:, :, 1] = 1.0                          # always source 0
  gold = np.array([[0, 1, 2], [3, 0, -1]])
  with_att = metrics.summarize(target, target, EOS, attention, gold)
  # Scored: row 0 steps 0, 1 (errors 0, 1); row 1 step 0 (error 9) -> 10 / 3.
  assert with_att['attention_loss'] == pytest.approx(10.0 / 3.0)
  assert with_att['accuracy'] == 100.0
  assert 'attention_loss' not in metrics.summarize(target, target, EOS, attention, None)
  assert 'attention_loss' not in metrics.summarize(target, target, EOS, None, gold)
