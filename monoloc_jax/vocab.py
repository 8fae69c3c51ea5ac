"""The token vocabulary: one table shared by encoder input, decoder input and
the (tied) output layer.

Ids 0-3 are the special tokens `<pad>`, `<sos>`, `<eos>`, `<unk>`; the task
tokens follow in sorted order, so a vocabulary built from the same examples is
always the same. Tokens never seen when the vocabulary was built encode to
`<unk>`, and the encoders report how many did so.
"""

import dataclasses
import json
import os
import types
from typing import Any, Iterable, List, Mapping, NamedTuple, Sequence, Tuple

from monoloc_jax.errors import MonolocError

PAD = '<pad>'
SOS = '<sos>'
EOS = '<eos>'
UNK = '<unk>'
SPECIAL_TOKENS: Tuple[str, ...] = (PAD, SOS, EOS, UNK)

_FORMAT = 'monoloc_jax.vocab'
_FORMAT_VERSION = 1
# Most task tokens an error message lists (CFQ's vocabulary has thousands).
_MAX_LISTED = 60


class EncodedExamples(NamedTuple):
  """Id sequences of a list of examples.

  sources: source ids (no `<eos>`).
  targets: target ids, ending with `<eos>` unless asked otherwise.
  n_unk: how many source and target tokens were mapped to `<unk>`.
  """
  sources: List[List[int]]
  targets: List[List[int]]
  n_unk: int


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """An immutable token <-> id table.

  Attributes:
    tokens: every token in id order; the first four are `SPECIAL_TOKENS`.
  """
  tokens: Tuple[str, ...]
  _index: Mapping[str, int] = dataclasses.field(
      init=False, repr=False, compare=False)

  def __post_init__(self):
    tokens = tuple(self.tokens)
    _check_tokens(tokens)
    object.__setattr__(self, 'tokens', tokens)
    object.__setattr__(self, '_index', types.MappingProxyType(
        {token: i for i, token in enumerate(tokens)}))

  # ------------------------------------------------------------ building ---

  @classmethod
  def from_tokens(cls, tokens: Iterable[str]) -> 'Vocabulary':
    """Builds from task tokens (specials are added; duplicates are fine)."""
    task_tokens = set()
    for token in tokens:
      if not isinstance(token, str) or not token:
        raise MonolocError(f'tokens must be non-empty strings, got {token!r}')
      if token in SPECIAL_TOKENS:
        raise MonolocError(
            f'task data contains the reserved token {token!r}; reserved: '
            f'{", ".join(SPECIAL_TOKENS)}')
      task_tokens.add(token)
    return cls(SPECIAL_TOKENS + tuple(sorted(task_tokens)))

  @classmethod
  def from_examples(cls, examples: Iterable[Any]) -> 'Vocabulary':
    """Builds from the source and target tokens of examples.

    Args:
      examples: `Example`s or (source, target) pairs.
    """
    def all_tokens():
      for example in examples:
        yield from example[0]
        yield from example[1]
    return cls.from_tokens(all_tokens())

  # ----------------------------------------------------------- properties ---

  @property
  def pad_id(self) -> int:
    return 0

  @property
  def sos_id(self) -> int:
    return 1

  @property
  def eos_id(self) -> int:
    return 2

  @property
  def unk_id(self) -> int:
    return 3

  def __len__(self) -> int:
    return len(self.tokens)

  def __contains__(self, token: object) -> bool:
    return token in self._index

  def id_of(self, token: str) -> int:
    """The id of `token`, `unk_id` if it is not in the vocabulary."""
    return self._index.get(token, self.unk_id)

  # -------------------------------------------------------------- coding ---

  def check_input(self, tokens: Sequence[str], *, text: str = '',
                  vocab_path: str = '') -> None:
    """MonolocError unless every token of a user's input is a task token.

    A reserved token (`SPECIAL_TOKENS`) would be decoded as if it were input, and a
    token not in the vocabulary as `<unk>`: both give a meaningless output.

    Args:
      tokens: the input's tokens.
      text: the input as the user wrote it (quoted in the message).
      vocab_path: where the vocabulary is stored (named when it is too long to list).
    """
    quoted = repr(text if text else ' '.join(tokens))
    reserved = list(dict.fromkeys(t for t in tokens if t in SPECIAL_TOKENS))
    if reserved:
      raise MonolocError(
          f'the input {quoted} holds the reserved token(s) {", ".join(reserved)}; an '
          f'input may not hold any of {", ".join(SPECIAL_TOKENS)} (the model adds the '
          'markers it needs)')
    unknown = list(dict.fromkeys(t for t in tokens if t not in self._index))
    if unknown:
      task = self.tokens[len(SPECIAL_TOKENS):]
      listed = ' '.join(task[:_MAX_LISTED])
      if len(task) > _MAX_LISTED:
        where = f' in {vocab_path}' if vocab_path else ''
        listed += f' ... ({len(task) - _MAX_LISTED} more{where})'
      raise MonolocError(
          f'the input {quoted} holds token(s) not in the vocabulary: '
          f'{", ".join(map(repr, unknown))}; an input is whitespace-separated tokens '
          f'of: {listed}')

  def encode_with_unk_count(self, tokens: Sequence[str], *,
                            add_eos: bool = False) -> Tuple[List[int], int]:
    """Token ids (unknown tokens -> `<unk>`) and how many were unknown."""
    unk = self.unk_id
    ids = [self._index.get(token, unk) for token in tokens]
    n_unk = sum(1 for token in tokens if token not in self._index)
    if add_eos:
      ids.append(self.eos_id)
    return ids, n_unk

  def encode(self, tokens: Sequence[str], *,
             add_eos: bool = False) -> List[int]:
    """Token ids; unknown tokens map to `<unk>`."""
    return self.encode_with_unk_count(tokens, add_eos=add_eos)[0]

  def encode_examples(self, examples: Iterable[Any], *,
                      target_eos: bool = True) -> EncodedExamples:
    """Encodes `Example`s or (source, target) pairs.

    Args:
      examples: the examples.
      target_eos: append `<eos>` to every target.

    Returns:
      `EncodedExamples(sources, targets, n_unk)`.
    """
    sources, targets, n_unk = [], [], 0
    for example in examples:
      src, src_unk = self.encode_with_unk_count(example[0])
      tgt, tgt_unk = self.encode_with_unk_count(example[1],
                                                add_eos=target_eos)
      sources.append(src)
      targets.append(tgt)
      n_unk += src_unk + tgt_unk
    return EncodedExamples(sources, targets, n_unk)

  def decode(self, ids: Iterable[int], *,
             cut_at_eos: bool = True) -> Tuple[str, ...]:
    """Tokens of `ids`, stopping before the first `<eos>` if `cut_at_eos`.

    Nothing else is dropped: `<pad>`, `<sos>` and `<unk>` decode as themselves.
    """
    out = []
    n = len(self.tokens)
    for i in ids:
      i = int(i)
      if cut_at_eos and i == self.eos_id:
        break
      if not 0 <= i < n:
        raise MonolocError(f'token id {i} is out of range for a vocabulary '
                           f'of size {n}')
      out.append(self.tokens[i])
    return tuple(out)

  # --------------------------------------------------------- persistence ---

  def to_json(self) -> str:
    """A JSON string that `from_json` reads back."""
    return json.dumps({'format': _FORMAT, 'version': _FORMAT_VERSION,
                       'tokens': list(self.tokens)}, ensure_ascii=False)

  @classmethod
  def from_json(cls, text: str) -> 'Vocabulary':
    """Reads `to_json` output; MonolocError if it is malformed."""
    try:
      content = json.loads(text)
    except (TypeError, ValueError) as e:
      raise MonolocError(f'vocabulary JSON is malformed: {e}') from None
    except RecursionError:
      raise MonolocError('vocabulary JSON is malformed: nested too deeply') from None
    if not isinstance(content, dict) or content.get('format') != _FORMAT:
      raise MonolocError(
          f'not a monoloc_jax vocabulary (expected a JSON object with '
          f'"format": "{_FORMAT}")')
    if content.get('version') != _FORMAT_VERSION:
      raise MonolocError(
          f'unsupported vocabulary version {content.get("version")!r}; '
          f'supported: {_FORMAT_VERSION}')
    tokens = content.get('tokens')
    if not isinstance(tokens, list):
      raise MonolocError('vocabulary JSON has no "tokens" list')
    return cls(tuple(tokens))

  def save(self, path: 'os.PathLike[str] | str') -> None:
    """Writes `to_json()` to `path`."""
    with open(path, 'w', encoding='utf-8') as f:
      f.write(self.to_json())

  @classmethod
  def load(cls, path: 'os.PathLike[str] | str') -> 'Vocabulary':
    """Reads a file written by `save`; MonolocError if missing or bad."""
    try:
      with open(path, encoding='utf-8') as f:
        text = f.read()
    except OSError as e:
      raise MonolocError(f'cannot read vocabulary {os.fspath(path)!r}: '
                         f'{e.strerror or e}') from None
    except UnicodeDecodeError as e:
      raise MonolocError(f'vocabulary {os.fspath(path)!r} is not UTF-8 text '
                         f'(byte {e.start})') from None
    return cls.from_json(text)


def _check_tokens(tokens: Tuple[str, ...]) -> None:
  """MonolocError unless `tokens` is a valid id-ordered token table."""
  if tokens[:len(SPECIAL_TOKENS)] != SPECIAL_TOKENS:
    raise MonolocError(
        f'vocabulary must start with {", ".join(SPECIAL_TOKENS)} (ids 0-3), '
        f'got {list(tokens[:len(SPECIAL_TOKENS)])}')
  for token in tokens:
    if not isinstance(token, str) or not token:
      raise MonolocError(
          f'vocabulary tokens must be non-empty strings, got {token!r}')
    try:
      token.encode('utf-8')
    except UnicodeEncodeError:
      raise MonolocError(
          f'vocabulary token {token!r} is not valid Unicode text (a lone '
          'surrogate); it cannot be saved') from None
  if len(set(tokens)) != len(tokens):
    duplicates = sorted({t for t in tokens if tokens.count(t) > 1})
    raise MonolocError(f'vocabulary has duplicate tokens: {duplicates}')
