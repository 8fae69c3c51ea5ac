"""Tests of the shared vocabulary."""

import json

import numpy as np
import pytest

from monoloc_jax import vocab as vocab_lib
from monoloc_jax.errors import MonolocError
from monoloc_jax.tasks.types import Example

EXAMPLES = [
    Example(('b', 'a', 'jump'), ('JUMP', 'a')),
    (('a', 'c'), ('c', ':', 'n/a', ';')),
]


@pytest.fixture
def vocab():
  return vocab_lib.Vocabulary.from_examples(EXAMPLES)


def test_special_ids(vocab):
  assert vocab.tokens[:4] == ('<pad>', '<sos>', '<eos>', '<unk>')
  assert (vocab.pad_id, vocab.sos_id, vocab.eos_id, vocab.unk_id) == (
      0, 1, 2, 3)


def test_built_from_sources_and_targets_sorted(vocab):
  task_tokens = sorted({':', ';', 'JUMP', 'a', 'b', 'c', 'jump', 'n/a'})
  assert vocab.tokens[4:] == tuple(task_tokens)
  assert len(vocab) == 4 + len(task_tokens)
  assert 'JUMP' in vocab and 'walk' not in vocab


def test_deterministic_regardless_of_order(vocab):
  shuffled = vocab_lib.Vocabulary.from_examples(EXAMPLES[::-1])
  assert shuffled == vocab
  assert shuffled.tokens == vocab.tokens


def test_encode_decode_roundtrip(vocab):
  for example in EXAMPLES:
    for tokens in example[:2]:
      ids = vocab.encode(tokens)
      assert all(isinstance(i, int) for i in ids)
      assert vocab.decode(ids) == tuple(tokens)
      with_eos = vocab.encode(tokens, add_eos=True)
      assert with_eos == ids + [2]
      assert vocab.decode(with_eos) == tuple(tokens)


def test_unknown_tokens_map_to_unk_and_are_counted(vocab):
  ids, n_unk = vocab.encode_with_unk_count(('a', 'walk', 'run', 'a'),
                                           add_eos=True)
  a = vocab.tokens.index('a')
  assert ids == [a, 3, 3, a, 2]
  assert n_unk == 2
  assert vocab.encode(('walk',)) == [3]
  assert vocab.decode([3]) == ('<unk>',)


def test_encode_examples(vocab):
  encoded = vocab.encode_examples(
      [(('a', 'zz'), ('b',)), Example(('c',), ('yy', 'xx'))])
  sources, targets, n_unk = encoded
  assert n_unk == 3
  assert encoded.n_unk == 3
  assert sources == [vocab.encode(('a', 'zz')), vocab.encode(('c',))]
  assert targets[0][-1] == 2 and targets[1] == [3, 3, 2]
  no_eos = vocab.encode_examples(EXAMPLES, target_eos=False)
  assert no_eos.n_unk == 0
  assert [vocab.decode(t) for t in no_eos.targets] == [
      tuple(ex[1]) for ex in EXAMPLES]


def test_decode_cuts_at_first_eos_only(vocab):
  a, b = vocab.tokens.index('a'), vocab.tokens.index('b')
  ids = [1, a, 0, 3, b, 2, a, 2]
  assert vocab.decode(ids) == ('<sos>', 'a', '<pad>', '<unk>', 'b')
  assert vocab.decode(np.array(ids, dtype=np.int32)) == vocab.decode(ids)
  assert vocab.decode(ids, cut_at_eos=False) == (
      '<sos>', 'a', '<pad>', '<unk>', 'b', '<eos>', 'a', '<eos>')
  assert vocab.decode([2, a]) == ()


def test_decode_out_of_range(vocab):
  with pytest.raises(MonolocError, match='out of range'):
    vocab.decode([len(vocab)])


def test_json_roundtrip(vocab, tmp_path):
  restored = vocab_lib.Vocabulary.from_json(vocab.to_json())
  assert restored == vocab
  assert restored.encode(('n/a', 'jump')) == vocab.encode(('n/a', 'jump'))
  path = tmp_path / 'vocab.json'
  vocab.save(path)
  assert vocab_lib.Vocabulary.load(path) == vocab


def _with_tokens(tokens):
  return json.dumps({'format': 'monoloc_jax.vocab', 'version': 1,
                     'tokens': tokens})


@pytest.mark.parametrize('text,message', [
    ('{"tokens": [', 'malformed'),
    ('[]', 'not a monoloc_jax vocabulary'),
    ('{"format": "monoloc_jax.vocab", "version": 9, "tokens": []}',
     'unsupported vocabulary version 9'),
    ('{"format": "monoloc_jax.vocab", "version": 1}', 'no "tokens" list'),
    (_with_tokens(['a', '<pad>', '<sos>', '<eos>', '<unk>']), 'must start'),
    (_with_tokens(['<pad>', '<sos>', '<eos>', '<unk>', 'a', 'a']),
     'duplicate tokens'),
    (_with_tokens(['<pad>', '<sos>', '<eos>', '<unk>', 3]), 'non-empty'),
])
def test_corrupt_json(text, message):
  with pytest.raises(MonolocError, match=message) as info:
    vocab_lib.Vocabulary.from_json(text)
  assert '\n' not in str(info.value)


def test_load_missing_file(tmp_path):
  with pytest.raises(MonolocError, match='cannot read vocabulary'):
    vocab_lib.Vocabulary.load(tmp_path / 'missing.json')


def test_reserved_tokens_in_data():
  with pytest.raises(MonolocError, match='reserved token'):
    vocab_lib.Vocabulary.from_examples([(('a', '<eos>'), ('a',))])


def test_immutable(vocab):
  with pytest.raises(AttributeError):
    vocab.tokens = ()
  with pytest.raises(TypeError):
    vocab._index['x'] = 5  # pylint: disable=protected-access


def test_posretrieve_vocab():
  built = vocab_lib.Vocabulary.from_tokens(['n/a', ';', '7', ':'] +
                                           list('9876543210'))
  assert built.tokens[4:] == tuple('0123456789') + (':', ';', 'n/a')
  assert len(built) == 17


def test_check_input_refuses_reserved_and_unknown_tokens(vocab):
  vocab.check_input(('a', 'jump', 'c'))                    # task tokens: fine
  with pytest.raises(MonolocError) as info:
    vocab.check_input(('a', '<unk>', '<eos>', '<unk>'), text='a <unk> <eos> <unk>')
  assert str(info.value) == (
      "the input 'a <unk> <eos> <unk>' holds the reserved token(s) <unk>, <eos>; an "
      'input may not hold any of <pad>, <sos>, <eos>, <unk> (the model adds the markers '
      'it needs)')
  with pytest.raises(MonolocError) as info:
    vocab.check_input(('a', 'zz', 'a,c', 'zz'))
  assert str(info.value) == (
      "the input 'a zz a,c zz' holds token(s) not in the vocabulary: 'zz', 'a,c'; an "
      'input is whitespace-separated tokens of: : ; JUMP a b c jump n/a')


def test_check_input_lists_at_most_60_tokens_of_a_large_vocabulary():
  big = vocab_lib.Vocabulary.from_tokens(f'w{i:03d}' for i in range(100))
  with pytest.raises(MonolocError) as info:
    big.check_input(('w999',), vocab_path='/run/vocab.json')
  message = str(info.value)
  assert message.endswith('of: ' + ' '.join(f'w{i:03d}' for i in range(60))
                          + ' ... (40 more in /run/vocab.json)')
