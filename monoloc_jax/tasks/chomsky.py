"""The fifteen tasks of the Chomsky-hierarchy suite (Delétang et al., ICLR 2023).

Our own generators and rules, written from the suite's definitions (its paper,
App. B, and the task classes of google-deepmind/neural_networks_chomsky_hierarchy,
tasks/{regular,dcf,cs}/*.py). Three layers, as `synthetic`:

* `RULES[task](source) -> target`: a pure function from input tokens to output
  tokens (the task's definition, usable on any well-formed input); a malformed
  input is a MonolocError.
* `ChomskyTask`: one task for the generator: its slug, its fixed random-stream
  id, its level of the hierarchy, its rule, `draw(rng, length)` (one input of a
  given length, drawn as the suite draws it), its input and output tokens, its
  shortest length and how a source's length is read back. `TASKS` holds the 15.
* `generate(task, seed)` (every split of one seed, cached by the registry) and
  `sample(task, length, n, seed, exclude)` (distinct examples at any length,
  for range evaluation).

The suite trains on lengths 1-40 (`TRAIN_LENGTHS`, each example's length
uniform, i.i.d.) and tests on 41-500 (`TEST_LENGTHS`). Classification tasks
have a one-token target (the class); the others a sequence. A target never
includes `<eos>`; the pipeline's `<eos>` plays the role of the suite's
termination token, and the suite's zero padding of outputs to a fixed width is
dropped (it is an artifact of its fixed-size output layer).

Each task, its definition, what the suite's `length` is in ours, and where we
chose differently (tokens are ours; the suite feeds integer ids):

Regular
  even_pairs: a bit string; class 1 iff the number of unequal adjacent pairs
    ('01' or '10') is odd (equivalently: first bit != last bit), else 0.
    Length: bits.
  parity_check: a bit string; class = number of '1's mod 2. Length: bits.
  cycle_navigation: a string of moves '-1', '0', '+1' on a cycle of 5 states,
    starting at state 0; class = the final state (sum of moves mod 5).
    Length: moves.
  modular_arithmetic: `d op d op ... d`, digits 0-4 and operators '+', '-',
    '*' (all uniform); class = its value mod 5 with the usual precedence
    (* before + and -, left to right). Length: the suite's length, which it
    makes odd by taking one off an even length, so an input of suite length L
    has L tokens if L is odd, L - 1 if L is even (`lengths_of` gives both).
DCF
  stack_manipulation: an initial stack of bits, bottom to top, then actions
    'POP', 'PUSH0', 'PUSH1' executed left to right (a POP on an empty stack
    does nothing); target = the final stack read top to bottom (empty for an
    empty stack). Length: tokens; for length 1 the input is one bit and no
    action, else the stack has k ~ U{1 .. L-1} bits and L - k uniform actions.
  reverse_string: a bit string; target = the string reversed. Length: bits.
  modular_arithmetic_brackets: an expression over digits 0-4 whose every
    binary operation ('+', '-', '*', as the suite's paper runs use mult=True)
    is in its own brackets, and whose leaves are `d`, `-d`, `(d)` or `(-d)`;
    class = its value mod 5. Length: characters (= tokens). A length-L input
    (L >= 5) is `( left op right )` with the left part's length uniform in
    1 .. L-4 and the op uniform; L = 1 .. 4 are the four leaf forms.
  solve_equation: `e = v`: an expression as above but with '+' and '-' only
    (the suite's choice, so that the solution is unique), of length L - 2, in
    which one digit was replaced by the unknown 'x', then '=' and its value v;
    class = the value of x that makes the equation hold mod 5. Length: tokens.
    The replaced digit is picked as the suite picks it: a uniform position,
    then the first digit at or after it, cyclically. Shortest length 3 (a
    deviation: the suite's lengths 1 and 2 are all-zero placeholder inputs
    with class 0, not equations; we train on 3-40).
CS
  duplicate_string: a bit string s; target = s s. Length: bits (the target
    has twice as many tokens).
  missing_duplicate_string: a bit string of L // 2 bits, written twice, with
    one uniform position of the 2 (L // 2) replaced by '_' and, for odd L, a
    final '#' (the suite's empty token); class = the hidden bit. Length:
    tokens. Shortest length 2 (a deviation: the suite's length 1 is a
    placeholder input '1' with class 1).
  odds_first: a bit string s_1 ... s_n; target = s_1 s_3 s_5 ... s_2 s_4 ...
    (the odd positions, counted from 1, first). Length: bits. This follows the
    suite's stated definition and example (its docstring: 00110101 -> 0100
    0111); the suite's code emits the even positions first (s_2 s_4 ... s_1
    s_3 ...), the mirror task.
  binary_addition: `n + m`, two little-endian binary numbers (least
    significant bit first); target = n + m in little-endian binary without
    high zeros ('0' for zero). Length: tokens: for L >= 3, n has a ~ U{1 ..
    L-2} bits and m the other L-1-a, each uniform in [1, 2^bits - 1] written
    with exactly that many bits (high zeros allowed); for L = 1, 2 the input
    is one number in [0, 2^L - 2] (L bits) and no '+' (as the suite: the
    target is that number).
  binary_multiplication: `n * m`, drawn as binary_addition's inputs; target
    = n * m, little-endian, no high zeros. The target has at most L - 1
    tokens. Shortest length 3 (a deviation: at L = 1, 2 the suite pairs a
    lone number with a fixed target, '' or '0', that is no product).
  compute_sqrt: a big-endian binary number of exactly L bits (uniform in
    [1, 2^L - 1], leading zeros allowed); target = floor(sqrt(number)) in
    big-endian binary padded to ceil(L / 2) bits. Length: bits.
  bucket_sort: a string over '0' .. '4' (uniform); target = its tokens sorted
    in increasing order. Length: tokens.

Splits (`SPLIT_SPECS`, sizes ours; the suite samples fresh batches each step,
we train on a fixed dataset per (task, seed) like every task of the library):
train 10,000 inputs, dev 1,000 and test_iid 1,000, all with lengths uniform in
the training range (dev never peeks at test lengths, as the suite selects no
checkpoint there); test_ood 500 with lengths uniform in 41-500 (its accuracy
estimates the suite's score, the mean over those lengths) and 500 each at
exactly 50, 100 and 200. Inputs are drawn i.i.d. as the suite draws them, so
the training split repeats inputs where the space is small (a bit string of 3
bits has 8); a dev or test_iid input that is a training input is redrawn up to
`_HELD_OUT_TRIES` times (at short lengths every input is a training input and
the last draw is kept). Each split draws from a numpy Generator seeded with
(seed, task_id, split id).
"""

import dataclasses
import math
import types
from typing import (AbstractSet, Callable, Dict, FrozenSet, List, Mapping,
                    Sequence, Tuple, Union)

import numpy as np

from monoloc_jax.errors import MonolocError
from monoloc_jax.errors import unknown_name
from monoloc_jax.tasks.synthetic import SplitSpec
from monoloc_jax.tasks.synthetic import check_seed
from monoloc_jax.tasks.types import Example

# Bump whenever the generated data changes (it keys the on-disk cache).
GENERATOR_VERSION = 1

# The suite's length ranges (inclusive): train on 1-40, test on 41-500.
TRAIN_LENGTHS: Tuple[int, int] = (1, 40)
TEST_LENGTHS: Tuple[int, int] = (41, 500)
# The suite's modulus (modular arithmetic, brackets, equations) and bucket_sort
# alphabet size; cycle_navigation's cycle has as many states.
MODULUS = 5
LEVELS: Tuple[str, ...] = ('regular', 'dcf', 'cs')

SPLIT_SPECS: Mapping[str, SplitSpec] = types.MappingProxyType({
    'train': SplitSpec(0, 10_000, *TRAIN_LENGTHS),
    'dev': SplitSpec(1, 1_000, *TRAIN_LENGTHS),
    'test_iid': SplitSpec(2, 1_000, *TRAIN_LENGTHS),
    'test_ood': SplitSpec(3, 500, *TEST_LENGTHS),
    'test_50': SplitSpec(4, 500, 50, 50),
    'test_100': SplitSpec(5, 500, 100, 100),
    'test_200': SplitSpec(6, 500, 200, 200),
})
SPLITS: Tuple[str, ...] = tuple(SPLIT_SPECS)
# test_ood stands for the suite's reported score (mean accuracy over 41-500).
PAPER_SPLITS: Tuple[str, ...] = ('test_ood',)
# dev and test_iid avoid training inputs: a draw that is one is redrawn this often.
_HELD_OUT = ('dev', 'test_iid')
_HELD_OUT_TRIES = 20

Source = Tuple[str, ...]
Rule = Callable[[Sequence[str]], Tuple[str, ...]]
# (rng, length) -> one input of exactly that length (in the task's unit).
Drawer = Callable[[np.random.Generator, int], Source]

BITS: Tuple[str, ...] = ('0', '1')
DIGITS: Tuple[str, ...] = tuple(str(d) for d in range(MODULUS))
MOVES: Mapping[str, int] = types.MappingProxyType({'-1': -1, '0': 0, '+1': 1})
POP, PUSH0, PUSH1 = 'POP', 'PUSH0', 'PUSH1'
_PUSHED = types.MappingProxyType({PUSH0: '0', PUSH1: '1'})
HOLE, PAD = '_', '#'   # missing_duplicate_string's hidden bit and odd-length pad
UNKNOWN = 'x'          # solve_equation's unknown


def _fail(task: str, why: str) -> MonolocError:
  return MonolocError(f'not a {task} input: {why}')


def _check_tokens(task: str, source: Sequence[str],
                  allowed: AbstractSet[str]) -> None:
  stray = sorted(set(source) - set(allowed))
  if stray:
    raise _fail(task, f'token(s) {", ".join(map(repr, stray))}; valid: '
                f'{", ".join(sorted(allowed))}')


# ------------------------------------------------------------------ rules ---


def reverse_string(source: Sequence[str]) -> Tuple[str, ...]:
  """s_1 ... s_n -> s_n ... s_1."""
  _check_tokens('reverse_string', source, BITS)
  return tuple(reversed(source))


def duplicate_string(source: Sequence[str]) -> Tuple[str, ...]:
  """s -> s s (2n tokens)."""
  _check_tokens('duplicate_string', source, BITS)
  return tuple(source) * 2


def odds_first(source: Sequence[str]) -> Tuple[str, ...]:
  """s_1 s_2 ... s_n -> s_1 s_3 s_5 ... s_2 s_4 ... (1-based odd positions first)."""
  _check_tokens('odds_first', source, BITS)
  return tuple(source[0::2]) + tuple(source[1::2])


def bucket_sort(source: Sequence[str]) -> Tuple[str, ...]:
  """The tokens (digits 0 .. MODULUS-1) in increasing order."""
  _check_tokens('bucket_sort', source, DIGITS)
  return tuple(sorted(source, key=int))


def parity_check(source: Sequence[str]) -> Tuple[str, ...]:
  """Class (#'1' mod 2)."""
  _check_tokens('parity_check', source, BITS)
  return (str(list(source).count('1') % 2),)


def even_pairs(source: Sequence[str]) -> Tuple[str, ...]:
  """Class (#{i: s_i != s_i+1} mod 2): 0 when the '01' and '10' pairs are even."""
  _check_tokens('even_pairs', source, BITS)
  return (str(sum(a != b for a, b in zip(source, source[1:])) % 2),)


def cycle_navigation(source: Sequence[str]) -> Tuple[str, ...]:
  """Class (sum of the moves mod MODULUS): the state reached from state 0."""
  _check_tokens('cycle_navigation', source, MOVES)
  return (str(sum(MOVES[t] for t in source) % MODULUS),)


class _Parser:
  """Evaluates an expression mod `MODULUS`, by recursive descent.

    expr  := term (('+' | '-') term)*
    term  := unary ('*' unary)*
    unary := '-' unary | atom
    atom  := digit | '(' expr ')'

  Covers both suite grammars: modular_arithmetic's flat `d op d ...` (where
  precedence matters) and the bracketed expressions (every binary op in its own
  brackets, leaves `d`, `-d`, `(d)`, `(-d)`).
  """

  def __init__(self, task: str, tokens: Sequence[str]):
    self.task, self.tokens, self.pos = task, tuple(tokens), 0

  def value(self) -> int:
    if not self.tokens:
      raise _fail(self.task, 'an empty expression')
    out = self._expr()
    if self.pos != len(self.tokens):
      raise _fail(self.task, f'unexpected {self.tokens[self.pos]!r} at position '
                  f'{self.pos}')
    return out

  def _peek(self) -> str:
    return self.tokens[self.pos] if self.pos < len(self.tokens) else ''

  def _expr(self) -> int:
    total = self._term()
    while self._peek() in ('+', '-'):
      sign = 1 if self.tokens[self.pos] == '+' else -1
      self.pos += 1
      total = (total + sign * self._term()) % MODULUS
    return total

  def _term(self) -> int:
    product = self._unary()
    while self._peek() == '*':
      self.pos += 1
      product = (product * self._unary()) % MODULUS
    return product

  def _unary(self) -> int:
    if self._peek() == '-':
      self.pos += 1
      return -self._unary() % MODULUS
    return self._atom()

  def _atom(self) -> int:
    token = self._peek()
    self.pos += 1
    if token in DIGITS:
      return int(token)
    if token == '(':
      inner = self._expr()
      if self._peek() != ')':
        raise _fail(self.task, f'unclosed bracket before position {self.pos}')
      self.pos += 1
      return inner
    raise _fail(self.task, f'expected a digit or ( at position {self.pos - 1}, '
                f'got {token or "the end"!r}')


_OPERATORS = ('+', '-', '*')
_BRACKETS = ('(', ')')


def modular_arithmetic(source: Sequence[str]) -> Tuple[str, ...]:
  """Class (value of `d op d ... d` mod 5; * before + and -)."""
  _check_tokens('modular_arithmetic', source, DIGITS + _OPERATORS)
  return (str(_Parser('modular_arithmetic', source).value()),)


def modular_arithmetic_brackets(source: Sequence[str]) -> Tuple[str, ...]:
  """Class (value of the bracketed expression mod 5)."""
  task = 'modular_arithmetic_brackets'
  _check_tokens(task, source, DIGITS + _OPERATORS + _BRACKETS)
  return (str(_Parser(task, source).value()),)


def solve_equation(source: Sequence[str]) -> Tuple[str, ...]:
  """Class (the one x in 0 .. 4 with lhs(x) = rhs mod 5) of `lhs = rhs`."""
  task = 'solve_equation'
  _check_tokens(task, source, DIGITS + _OPERATORS + _BRACKETS + ('=', UNKNOWN))
  source = tuple(source)
  if source.count('=') != 1 or source.count(UNKNOWN) != 1:
    raise _fail(task, "it needs one '=' and one 'x'")
  split = source.index('=')
  lhs, rhs = source[:split], source[split + 1:]
  target = _Parser(task, rhs).value()
  roots = [x for x in range(MODULUS) if _Parser(
      task, [str(x) if t == UNKNOWN else t for t in lhs]).value() == target]
  if len(roots) != 1:
    raise _fail(task, f'{len(roots)} solutions, not one')
  return (str(roots[0]),)


def stack_manipulation(source: Sequence[str]) -> Tuple[str, ...]:
  """The final stack, top to bottom, of: initial bits (bottom to top), then
  POP / PUSH0 / PUSH1 left to right (POP on an empty stack does nothing)."""
  task = 'stack_manipulation'
  _check_tokens(task, source, BITS + (POP, PUSH0, PUSH1))
  stack: List[str] = []
  acting = False
  for position, token in enumerate(source):
    if token in BITS:
      if acting:
        raise _fail(task, f'bit {token!r} at position {position} after an action')
      stack.append(token)
    else:
      acting = True
      if token == POP:
        if stack:
          stack.pop()
      else:
        stack.append(_PUSHED[token])
  return tuple(reversed(stack))


def _little_endian(value: int) -> Tuple[str, ...]:
  """`value` >= 0 in binary, least significant bit first, no high zeros."""
  return tuple(reversed(format(value, 'b')))


def _operands(task: str, source: Sequence[str], operator: str) -> List[int]:
  """The little-endian binary numbers of `source`, separated by `operator`."""
  _check_tokens(task, source, BITS + (operator,))
  numbers, current = [], []
  for token in tuple(source) + (operator,):
    if token == operator:
      if not current:
        raise _fail(task, f'an empty number around {operator!r}')
      numbers.append(int(''.join(reversed(current)), 2))
      current = []
    else:
      current.append(token)
  return numbers


def binary_addition(source: Sequence[str]) -> Tuple[str, ...]:
  """n + m in little-endian binary (no high zeros) of little-endian `n + m`
  (a lone number, the suite's inputs of length 1 and 2, is its own sum)."""
  return _little_endian(sum(_operands('binary_addition', source, '+')))


def binary_multiplication(source: Sequence[str]) -> Tuple[str, ...]:
  """n * m in little-endian binary (no high zeros) of little-endian `n * m`."""
  return _little_endian(math.prod(_operands('binary_multiplication', source, '*')))


def compute_sqrt(source: Sequence[str]) -> Tuple[str, ...]:
  """floor(sqrt(n)) in big-endian binary, ceil(L / 2) bits, of an L-bit big-endian n."""
  _check_tokens('compute_sqrt', source, BITS)
  if not source:
    raise _fail('compute_sqrt', 'an empty number')
  root = math.isqrt(int(''.join(source), 2))
  return tuple(format(root, f'0{-(-len(source) // 2)}b'))


def missing_duplicate_string(source: Sequence[str]) -> Tuple[str, ...]:
  """Class (the bit under '_') of s s with one bit hidden (and '#' if L is odd)."""
  task = 'missing_duplicate_string'
  _check_tokens(task, source, BITS + (HOLE, PAD))
  body = tuple(source[:-1]) if source and source[-1] == PAD else tuple(source)
  if PAD in body or len(body) % 2 or body.count(HOLE) != 1:
    raise _fail(task, "it needs s s with one '_', then '#' only if its length is odd")
  half, hole = len(body) // 2, body.index(HOLE)
  twin = body[hole + half] if hole < half else body[hole - half]
  if any(body[i] != body[i + half] for i in range(half) if HOLE not in
         (body[i], body[i + half])):
    raise _fail(task, 'its two halves differ')
  return (twin,)


# ------------------------------------------------------------- generators ---


def _choice(rng: np.random.Generator, tokens: Sequence[str], n: int) -> Source:
  """n tokens drawn uniformly from `tokens`."""
  return tuple(tokens[i] for i in rng.integers(0, len(tokens), size=n).tolist())


def _nonzero_bits(rng: np.random.Generator, n: int) -> List[str]:
  """n bits of a number uniform in [1, 2^n - 1] (order as the caller writes them)."""
  while True:
    bits = rng.integers(0, 2, size=n)
    if bits.any():
      return [BITS[b] for b in bits.tolist()]


def _draw_uniform(tokens: Sequence[str]) -> Drawer:
  return lambda rng, length: _choice(rng, tokens, length)


def _draw_modular(rng: np.random.Generator, length: int) -> Source:
  tokens = length if length % 2 else length - 1      # the suite's odd length
  digits = _choice(rng, DIGITS, tokens // 2 + 1)
  ops = _choice(rng, _OPERATORS, tokens // 2)
  out = [digits[0]]
  for op, digit in zip(ops, digits[1:]):
    out += [op, digit]
  return tuple(out)


def _bracketed(rng: np.random.Generator, length: int,
               operators: Sequence[str]) -> List[str]:
  """A bracketed expression of `length` tokens, drawn as the suite draws it."""
  digit = DIGITS[int(rng.integers(0, MODULUS))]
  if length < 5:
    return [[digit], ['-', digit], ['(', digit, ')'], ['(', '-', digit, ')']][length - 1]
  left = int(rng.integers(1, length - 3))            # 1 .. length - 4
  left_part = _bracketed(rng, left, operators)
  right_part = _bracketed(rng, length - 3 - left, operators)
  op = operators[int(rng.integers(0, len(operators)))]
  return ['('] + left_part + [op] + right_part + [')']


def _draw_brackets(rng: np.random.Generator, length: int) -> Source:
  return tuple(_bracketed(rng, length, _OPERATORS))


def _draw_equation(rng: np.random.Generator, length: int) -> Source:
  expression = _bracketed(rng, length - 2, ('+', '-'))
  value = _Parser('solve_equation', expression).value()
  position = int(rng.integers(0, len(expression)))
  while expression[position] not in DIGITS:
    position = (position + 1) % len(expression)
  expression[position] = UNKNOWN
  return tuple(expression) + ('=', str(value))


def _draw_stack(rng: np.random.Generator, length: int) -> Source:
  if length == 1:
    return _choice(rng, BITS, 1)
  size = int(rng.integers(1, length))                # 1 .. length - 1
  return _choice(rng, BITS, size) + _choice(rng, (POP, PUSH0, PUSH1), length - size)


def _binary_drawer(operator: str) -> Drawer:
  def draw(rng: np.random.Generator, length: int) -> Source:
    if length <= 2:
      value = int(rng.integers(0, 2**length - 1))    # 0 .. 2^L - 2, as the suite
      return tuple(format(value, f'0{length}b')[::-1])
    first = int(rng.integers(1, length - 1))         # 1 .. length - 2 bits
    return tuple(_nonzero_bits(rng, first) + [operator] +
                 _nonzero_bits(rng, length - 1 - first))
  return draw


def _draw_sqrt(rng: np.random.Generator, length: int) -> Source:
  return tuple(_nonzero_bits(rng, length))


def _draw_missing(rng: np.random.Generator, length: int) -> Source:
  half = _choice(rng, BITS, length // 2)
  doubled = list(half * 2)
  doubled[int(rng.integers(0, len(doubled)))] = HOLE
  return tuple(doubled) + ((PAD,) if length % 2 else ())


def _source_length(source: Sequence[str]) -> FrozenSet[int]:
  return frozenset((len(source),))


def _modular_lengths(source: Sequence[str]) -> FrozenSet[int]:
  """An n-token input (n odd) is drawn at suite length n and at n + 1."""
  n = len(source)
  return frozenset((n, n + 1)) if n % 2 else frozenset()


@dataclasses.dataclass(frozen=True)
class ChomskyTask:
  """One task of the suite, as the generator needs it.

  Attributes:
    name: the suite's task name (our slug).
    task_id: mixed into every split's and sampler's random stream; fixed, never
      renumber (ids 100+ keep them apart from the digit tasks' 0 .. 7).
    level: one of `LEVELS` (the suite's place of the task in the hierarchy).
    rule: source tokens -> target tokens.
    draw: (rng, length) -> one input of that length.
    inputs: every token an input can hold.
    outputs: every token a target can hold (the classes of a classification
      task).
    classification: the target is one token.
    min_length: the shortest length `draw` makes.
    lengths: source -> the lengths `draw` can make it at.
    unit: what a length counts (the registry's `length_unit`).
  """
  name: str
  task_id: int
  level: str
  rule: Rule
  draw: Drawer
  inputs: Tuple[str, ...]
  outputs: Tuple[str, ...]
  classification: bool
  min_length: int = 1
  lengths: Callable[[Sequence[str]], FrozenSet[int]] = _source_length
  unit: str = 'tokens'


_CLASSES = tuple(str(c) for c in range(MODULUS))
# modular_arithmetic counts the suite's length: an even one draws one token less.
_MODULAR_UNIT = 'suite length (tokens, an even length draws one less)'
_EXPRESSION = DIGITS + _OPERATORS
_T = ChomskyTask
# The 15 tasks, in the suite's order within each level. Ids seed the data.
TASKS: Mapping[str, ChomskyTask] = types.MappingProxyType({task.name: task for task in (
    _T('even_pairs', 100, 'regular', even_pairs, _draw_uniform(BITS), BITS, BITS, True),
    _T('modular_arithmetic', 101, 'regular', modular_arithmetic, _draw_modular,
       _EXPRESSION, _CLASSES, True, lengths=_modular_lengths, unit=_MODULAR_UNIT),
    _T('parity_check', 102, 'regular', parity_check, _draw_uniform(BITS), BITS, BITS, True),
    _T('cycle_navigation', 103, 'regular', cycle_navigation, _draw_uniform(tuple(MOVES)),
       tuple(MOVES), _CLASSES, True),
    _T('stack_manipulation', 104, 'dcf', stack_manipulation, _draw_stack,
       BITS + (POP, PUSH0, PUSH1), BITS, False),
    _T('reverse_string', 105, 'dcf', reverse_string, _draw_uniform(BITS), BITS, BITS, False),
    _T('modular_arithmetic_brackets', 106, 'dcf', modular_arithmetic_brackets,
       _draw_brackets, _EXPRESSION + _BRACKETS, _CLASSES, True),
    _T('solve_equation', 107, 'dcf', solve_equation, _draw_equation,
       DIGITS + ('+', '-') + _BRACKETS + ('=', UNKNOWN), _CLASSES, True, min_length=3),
    _T('duplicate_string', 108, 'cs', duplicate_string, _draw_uniform(BITS), BITS, BITS,
       False),
    _T('missing_duplicate_string', 109, 'cs', missing_duplicate_string, _draw_missing,
       BITS + (HOLE, PAD), BITS, True, min_length=2),
    _T('odds_first', 110, 'cs', odds_first, _draw_uniform(BITS), BITS, BITS, False),
    _T('binary_addition', 111, 'cs', binary_addition, _binary_drawer('+'), BITS + ('+',),
       BITS, False),
    _T('binary_multiplication', 112, 'cs', binary_multiplication, _binary_drawer('*'),
       BITS + ('*',), BITS, False, min_length=3),
    _T('compute_sqrt', 113, 'cs', compute_sqrt, _draw_sqrt, BITS, BITS, False),
    _T('bucket_sort', 114, 'cs', bucket_sort, _draw_uniform(DIGITS), DIGITS, DIGITS, False),
)})
del _T
RULES: Mapping[str, Rule] = types.MappingProxyType(
    {name: task.rule for name, task in TASKS.items()})


def get_task(task: Union[str, ChomskyTask]) -> ChomskyTask:
  """`task` itself if it is a ChomskyTask, else the task of that name."""
  if isinstance(task, ChomskyTask):
    return task
  found = TASKS.get(task) if isinstance(task, str) else None
  if found is None:
    raise unknown_name('Chomsky-hierarchy task', task, tuple(TASKS))
  return found


def train_lengths(task: Union[str, ChomskyTask]) -> Tuple[int, int]:
  """(shortest, longest) training length of `task`: the suite's 1-40, from its
  `min_length` up."""
  return max(TRAIN_LENGTHS[0], get_task(task).min_length), TRAIN_LENGTHS[1]


def split_lengths(task: Union[str, ChomskyTask]) -> Dict[str, float]:
  """The length each evaluation split stands for: the middle of its range."""
  lo = get_task(task).min_length
  return {name: (max(lo, spec.min_length) + spec.max_length) / 2
          for name, spec in SPLIT_SPECS.items() if name not in ('train', 'dev')}


# ------------------------------------------------------------- generation ---


def make_example(task: ChomskyTask, source: Source) -> Example:
  """The example of `source`: its target by the task's rule."""
  return Example(source, tuple(task.rule(source)))


def _generate_split(task: ChomskyTask, split: str, seed: int,
                    train_sources: AbstractSet[Source]) -> List[Example]:
  spec = SPLIT_SPECS[split]
  rng = np.random.default_rng([seed, task.task_id, spec.split_id])
  lo = max(spec.min_length, task.min_length)
  tries = _HELD_OUT_TRIES if split in _HELD_OUT else 1
  out = []
  for length in rng.integers(lo, spec.max_length + 1, size=spec.size).tolist():
    for _ in range(tries):
      source = task.draw(rng, length)
      if source not in train_sources:
        break
    out.append(make_example(task, source))
  return out


def generate(task: Union[str, ChomskyTask], seed: int = 0) -> Dict[str, List[Example]]:
  """Every split (`SPLITS`, train first) of `task` for `seed`; see the module
  docstring for the sizes, lengths and the held-out rule of dev and test_iid."""
  task, seed = get_task(task), check_seed(seed)
  train = _generate_split(task, 'train', seed, frozenset())
  seen = frozenset(ex.source for ex in train)
  return {'train': train, **{split: _generate_split(task, split, seed, seen)
                             for split in SPLITS[1:]}}


# ------------------------------------------------------ any-length samples ---

# Entropy word that keeps the samplers' streams apart from the splits' streams.
_SAMPLE_STREAM = 1_000
# `sample` stops after this many draws in a row gave no new input (times n, at
# least the floor): the inputs at that length are taken as exhausted.
_STALE_FACTOR = 20
_STALE_FLOOR = 2_000


def sample(task: Union[str, ChomskyTask], length: int, n: int, seed: int,
           exclude: AbstractSet[Source] = frozenset()) -> List[Example]:
  """Up to `n` examples of `task` with distinct sources at exactly `length`.

  Inputs are drawn with the task's `draw` from a stream seeded with (seed,
  task_id, `_SAMPLE_STREAM`, length); a source in `exclude` or already kept is
  redrawn. The space of inputs is not enumerated (the grammar tasks' inputs are
  not a product space): once max(_STALE_FLOOR, _STALE_FACTOR * n) draws in a row
  bring nothing new, the length is taken as exhausted and fewer than `n` come
  back (parity_check at 3 bits has 8 inputs). At the test lengths (41+) no
  draw is ever redrawn in practice.

  Raises:
    MonolocError: `length` below the task's `min_length`.
  """
  task = get_task(task)
  if length < task.min_length:
    raise MonolocError(f'length of task {task.name!r} must be >= {task.min_length}, '
                       f'got {length!r}')
  rng = np.random.default_rng([check_seed(seed), task.task_id, _SAMPLE_STREAM,
                               int(length)])
  kept: List[Example] = []
  taken = set(exclude)
  stale, patience = 0, max(_STALE_FLOOR, _STALE_FACTOR * n)
  while len(kept) < n and stale < patience:
    source = task.draw(rng, int(length))
    if source in taken:
      stale += 1
      continue
    stale = 0
    taken.add(source)
    kept.append(make_example(task, source))
  return kept


def lengths_of(task: Union[str, ChomskyTask], source: Sequence[str]) -> FrozenSet[int]:
  """The lengths at which `task` can draw `source` (one, but two for
  modular_arithmetic's odd token counts; none below `min_length`)."""
  task = get_task(task)
  return frozenset(n for n in task.lengths(tuple(source)) if n >= task.min_length)
