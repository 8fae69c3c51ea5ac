"""Tests of the Chomsky-hierarchy tasks (monoloc_jax/tasks/chomsky.py).

Each rule on hand-written examples (the suite's own examples, in our tokens, and
its edge cases), then the generated data against rules recomputed here
independently (Python's own arithmetic and `eval`), the suite's length meanings,
the splits, `tasks.sample` at the test lengths, the vocabulary, long targets,
and one real `monoloc-train` run used through every mode.
"""

import json
import math
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from monoloc_jax import input_pipeline as ip
from monoloc_jax import range_eval
from monoloc_jax import tasks
from monoloc_jax import viz
from monoloc_jax.errors import MonolocError
from monoloc_jax.tasks import chomsky
from monoloc_jax.vocab import Vocabulary

NAMES = ('even_pairs', 'modular_arithmetic', 'parity_check', 'cycle_navigation',
         'stack_manipulation', 'reverse_string', 'modular_arithmetic_brackets',
         'solve_equation', 'duplicate_string', 'missing_duplicate_string', 'odds_first',
         'binary_addition', 'binary_multiplication', 'compute_sqrt', 'bucket_sort')
CLASSIFICATION = ('even_pairs', 'modular_arithmetic', 'parity_check', 'cycle_navigation',
                  'modular_arithmetic_brackets', 'solve_equation',
                  'missing_duplicate_string')
LEVELS = {'regular': NAMES[:4], 'dcf': NAMES[4:8], 'cs': NAMES[8:]}
# The suite's shortest lengths that are real task inputs (below them it has placeholders).
MIN_LENGTH = {'solve_equation': 3, 'binary_multiplication': 3, 'missing_duplicate_string': 2}


def t(text):
  """'0 1 +' -> ('0', '1', '+'); '' -> ()."""
  return tuple(text.split())


# ------------------------------------------------------------ the rules ---

# (task, source, target): the suite's docstring examples in our tokens, then edge cases.
RULE_CASES = [
    # reverse_string: 011010 -> 010110.
    ('reverse_string', '0 1 1 0 1 0', '0 1 0 1 1 0'),
    ('reverse_string', '1', '1'),
    ('reverse_string', '1 0', '0 1'),
    # duplicate_string: 101 -> 101 101; the target is 2n long.
    ('duplicate_string', '1 0 1', '1 0 1 1 0 1'),
    ('duplicate_string', '0', '0 0'),
    ('duplicate_string', '1 1 0', '1 1 0 1 1 0'),
    # odds_first: 00110101 -> 0100 0111 (1-based odd positions first); 110 -> 10 1.
    ('odds_first', '0 0 1 1 0 1 0 1', '0 1 0 0 0 1 1 1'),
    ('odds_first', '1 1 0', '1 0 1'),
    ('odds_first', '1', '1'),
    ('odds_first', '1 0', '1 0'),
    # bucket_sort: 10204112 -> 00111224.
    ('bucket_sort', '1 0 2 0 4 1 1 2', '0 0 1 1 1 2 2 4'),
    ('bucket_sort', '3', '3'),
    ('bucket_sort', '4 3 2 1 0', '0 1 2 3 4'),
    # parity_check: 1010100 -> 1; 01111 -> 0.
    ('parity_check', '1 0 1 0 1 0 0', '1'),
    ('parity_check', '0 1 1 1 1', '0'),
    ('parity_check', '0', '0'),
    ('parity_check', '1', '1'),
    # even_pairs: 001110 -> 0; 0101001 -> 1; one bit has no pair.
    ('even_pairs', '0 0 1 1 1 0', '0'),
    ('even_pairs', '0 1 0 1 0 0 1', '1'),
    ('even_pairs', '1', '0'),
    ('even_pairs', '1 0', '1'),
    # cycle_navigation: 1 -1 0 -1 -1 -> 3; 1 1 1 -1 -> 2; wrap-arounds.
    ('cycle_navigation', '+1 -1 0 -1 -1', '3'),
    ('cycle_navigation', '+1 +1 +1 -1', '2'),
    ('cycle_navigation', '-1', '4'),
    ('cycle_navigation', '0', '0'),
    ('cycle_navigation', '+1 +1 +1 +1 +1', '0'),
    # modular_arithmetic (mod 5): 1+2*3 = 2; 1-1-1 = 4; 0*1+4*3-2 = 0; precedence.
    ('modular_arithmetic', '1 + 2 * 3', '2'),
    ('modular_arithmetic', '1 - 1 - 1', '4'),
    ('modular_arithmetic', '0 * 1 + 4 * 3 - 2', '0'),
    ('modular_arithmetic', '3', '3'),
    ('modular_arithmetic', '2 - 3 * 4', '0'),
    ('modular_arithmetic', '4 * 4 * 4', '4'),
    ('modular_arithmetic', '1 - 2 - 3', '1'),
    # modular_arithmetic_brackets: the leaf forms d, -d, (d), (-d), and nesting.
    ('modular_arithmetic_brackets', '4', '4'),
    ('modular_arithmetic_brackets', '- 2', '3'),
    ('modular_arithmetic_brackets', '( 3 )', '3'),
    ('modular_arithmetic_brackets', '( - 4 )', '1'),
    ('modular_arithmetic_brackets', '( 1 + 2 )', '3'),
    ('modular_arithmetic_brackets', '( 1 - - 3 )', '4'),
    ('modular_arithmetic_brackets', '( ( 3 * 4 ) - ( - 2 ) )', '4'),
    ('modular_arithmetic_brackets', '( ( ( 1 + 1 ) + 1 ) * ( 2 - 4 ) )', '4'),
    ('modular_arithmetic_brackets', '( 2 - ( 3 - ( 4 - 1 ) ) )', '2'),
    # solve_equation: the x in 0..4 that makes it hold mod 5.
    ('solve_equation', 'x = 3', '3'),
    ('solve_equation', '( x + 3 ) = 3', '0'),
    ('solve_equation', '- x = 2', '3'),
    ('solve_equation', '( x + 2 ) = 1', '4'),
    ('solve_equation', '( ( x - 1 ) - ( - 4 ) ) = 0', '2'),
    ('solve_equation', '( 3 - ( x + 1 ) ) = 0', '2'),
    # stack_manipulation: the suite's two examples, empty-stack pops, length 1.
    ('stack_manipulation', '0 1 1 0 PUSH1 POP POP', '1 1 0'),
    ('stack_manipulation', '1 1 0 POP POP POP', ''),
    ('stack_manipulation', '1 POP POP PUSH0', '0'),
    ('stack_manipulation', '0 POP POP POP POP', ''),
    ('stack_manipulation', '1', '1'),
    ('stack_manipulation', '0 1 PUSH0 PUSH1', '1 0 1 0'),
    # binary_addition (little-endian): 4 + 22 = 26; 9 + 32 = 41; carries; lone numbers.
    ('binary_addition', '0 0 1 + 0 1 1 0 1', '0 1 0 1 1'),
    ('binary_addition', '1 0 0 1 + 0 0 0 0 0 1', '1 0 0 1 0 1'),
    ('binary_addition', '1 1 1 + 1', '0 0 0 1'),
    ('binary_addition', '1 1 + 1 1', '0 1 1'),
    ('binary_addition', '1 + 1', '0 1'),
    ('binary_addition', '0', '0'),
    ('binary_addition', '0 0', '0'),
    ('binary_addition', '0 1', '0 1'),
    ('binary_addition', '1 0', '1'),
    # binary_multiplication: 4 * 22 = 88; 9 * 32 = 288; no high zeros.
    ('binary_multiplication', '0 0 1 * 0 1 1 0 1', '0 0 0 1 1 0 1'),
    ('binary_multiplication', '1 0 0 1 * 0 0 0 0 0 1', '0 0 0 0 0 1 0 0 1'),
    ('binary_multiplication', '1 * 1', '1'),
    ('binary_multiplication', '1 1 * 1 1', '1 0 0 1'),
    ('binary_multiplication', '1 0 * 1 1 0', '1 1'),
    # compute_sqrt (big-endian, ceil(L/2) bits): 37 -> 6 = 110 (the suite's docstring
    # writes 101); 7 -> 2; perfect squares; 0 and 1; leading zeros.
    ('compute_sqrt', '1 0 0 1 0 1', '1 1 0'),
    ('compute_sqrt', '1 1 1', '1 0'),
    ('compute_sqrt', '1 0 0 1', '1 1'),
    ('compute_sqrt', '1 0 0 0 0', '1 0 0'),
    ('compute_sqrt', '1 1 0 0 0 1', '1 1 1'),
    ('compute_sqrt', '1 1 0 0 0 0', '1 1 0'),
    ('compute_sqrt', '1', '1'),
    ('compute_sqrt', '0', '0'),
    ('compute_sqrt', '0 0', '0'),
    ('compute_sqrt', '0 0 0 1', '0 1'),
    # missing_duplicate_string: 01100210 -> 1; 1011213 -> 0 (odd: '#' pad); edges.
    ('missing_duplicate_string', '0 1 1 0 0 _ 1 0', '1'),
    ('missing_duplicate_string', '1 0 1 1 _ 1 #', '0'),
    ('missing_duplicate_string', '_ 1 0 1', '0'),
    ('missing_duplicate_string', '_ 1', '1'),
    ('missing_duplicate_string', '0 _', '0'),
    ('missing_duplicate_string', '1 _ #', '1'),
]


@pytest.mark.parametrize('task,source,target', RULE_CASES)
def test_rule_on_hand_written_examples(task, source, target):
  assert chomsky.RULES[task](t(source)) == t(target)


def test_every_task_has_hand_written_examples():
  assert {case[0] for case in RULE_CASES} == set(NAMES)


def test_compute_sqrt_floor_on_every_number_up_to_12_bits():
  for bits in range(1, 13):
    for n in range(2**bits):
      root = chomsky.compute_sqrt(tuple(format(n, f'0{bits}b')))
      assert len(root) == -(-bits // 2)
      assert int(''.join(root), 2) == math.isqrt(n)


def test_binary_addition_and_multiplication_on_every_pair_up_to_5_bits():
  for a in range(1, 32):
    for b in range(1, 32):
      source = tuple(format(a, 'b')[::-1]) + ('+',) + tuple(format(b, 'b')[::-1])
      assert chomsky.binary_addition(source) == tuple(format(a + b, 'b')[::-1])
      source = tuple(x if x != '+' else '*' for x in source)
      assert chomsky.binary_multiplication(source) == tuple(format(a * b, 'b')[::-1])


@pytest.mark.parametrize('task,source', [
    ('reverse_string', '0 2'), ('bucket_sort', '5'), ('cycle_navigation', '1'),
    ('modular_arithmetic', '1 +'), ('modular_arithmetic', '1 2'),
    ('modular_arithmetic_brackets', '( 1 + 2'), ('modular_arithmetic_brackets', ''),
    ('solve_equation', '1 = 1'), ('solve_equation', 'x = x'),
    ('stack_manipulation', 'POP 1'), ('binary_addition', '1 + + 1'),
    ('binary_multiplication', '1 *'), ('compute_sqrt', ''),
    ('missing_duplicate_string', '0 1 1 0'), ('missing_duplicate_string', '0 _ 1 1'),
    ('missing_duplicate_string', '# _ 1'),
])
def test_a_malformed_input_is_a_one_line_error(task, source):
  with pytest.raises(MonolocError) as info:
    chomsky.RULES[task](t(source))
  assert str(info.value).startswith(f'not a {task} input: ')
  assert '\n' not in str(info.value)


# ----------------------------------------------- independent recomputation ---


def little(bits):
  return int(''.join(reversed(bits)), 2)


def independent(task, source):
  """The target of `source` by the suite's definition, recomputed without chomsky.py.

  The arithmetic tasks use Python's `eval` (same precedence and unary minus)."""
  s = list(source)
  text = ''.join(s)
  if task == 'reverse_string':
    return tuple(s[::-1])
  if task == 'duplicate_string':
    return tuple(s + s)
  if task == 'odds_first':
    return tuple(s[i] for i in range(0, len(s), 2)) + tuple(s[i] for i in range(1, len(s), 2))
  if task == 'bucket_sort':
    return tuple(d for d in '01234' for _ in range(s.count(d)))
  if task == 'parity_check':
    return (str(s.count('1') % 2),)
  if task == 'even_pairs':
    return ('0' if s[0] == s[-1] else '1',)
  if task == 'cycle_navigation':
    return (str(sum(int(x) for x in s) % 5),)
  if task in ('modular_arithmetic', 'modular_arithmetic_brackets'):
    return (str(eval(text) % 5),)  # pylint: disable=eval-used
  if task == 'solve_equation':
    lhs, rhs = text.split('=')
    roots = [x for x in range(5) if eval(lhs.replace('x', f'({x})')) % 5 == int(rhs)]  # pylint: disable=eval-used
    assert len(roots) == 1
    return (str(roots[0]),)
  if task == 'stack_manipulation':
    stack = [b for b in s if b in '01']
    assert s[:len(stack)] == stack           # the bits come first
    for action in s[len(stack):]:
      if action == 'POP':
        stack = stack[:-1]
      else:
        stack.append(action[-1])
    return tuple(stack[::-1])
  if task in ('binary_addition', 'binary_multiplication'):
    op = '+' if task == 'binary_addition' else '*'
    values = [little(part.split()) for part in ' '.join(s).split(op)]
    result = sum(values) if op == '+' else math.prod(values)
    return tuple(format(result, 'b')[::-1])
  if task == 'compute_sqrt':
    return tuple(format(math.isqrt(int(text, 2)), 'b').zfill(-(-len(s) // 2)))
  if task == 'missing_duplicate_string':
    body = s[:-1] if len(s) % 2 else s
    half = len(body) // 2
    i = body.index('_')
    return (body[(i + half) % len(body)],)
  raise AssertionError(task)


@pytest.fixture(scope='module')
def data():
  return {name: tasks.load_splits(name, ('train', 'dev', 'test_iid', 'test_50'))
          for name in NAMES}


@pytest.mark.parametrize('task', NAMES)
def test_generated_targets_follow_the_definition(task, data):
  for split in ('train', 'test_50'):
    for ex in data[task][split][:400]:
      assert ex.target == independent(task, ex.source), (split, ex)


@pytest.mark.parametrize('task', NAMES)
def test_classification_tasks_have_one_token_targets(task, data):
  lengths = {len(ex.target) for ex in data[task]['train']}
  if task in CLASSIFICATION:
    assert lengths == {1}
  else:
    assert len(lengths) > 1
  assert chomsky.TASKS[task].classification == (task in CLASSIFICATION)


def test_the_levels_are_the_suites():
  assert tuple(chomsky.TASKS) == NAMES
  for level, names in LEVELS.items():
    assert tuple(n for n, task in chomsky.TASKS.items() if task.level == level) == names


# --------------------------------------------------------- lengths ---


def drawn(task, length, n=30, seed=0):
  rng = np.random.default_rng([seed, length])
  return [chomsky.TASKS[task].draw(rng, length) for _ in range(n)]


@pytest.mark.parametrize('task', NAMES)
def test_draw_makes_exactly_the_length_asked(task):
  lo = MIN_LENGTH.get(task, 1)
  for length in list(range(lo, 14)) + [40, 41, 77, 500]:
    for source in drawn(task, length, n=10):
      assert length in tasks.lengths_of(task, tasks.Example(source, ()))
      expected = length - 1 if task == 'modular_arithmetic' and length % 2 == 0 else length
      assert len(source) == expected


def test_modular_arithmetic_counts_the_suites_length():
  # The suite makes an even length odd by taking one off: 40 -> 39 tokens.
  assert {len(s) for s in drawn('modular_arithmetic', 40)} == {39}
  assert {len(s) for s in drawn('modular_arithmetic', 2)} == {1}
  example = tasks.Example(t('1 + 2'), t('3'))
  assert tasks.lengths_of('modular_arithmetic', example) == {3, 4}
  with pytest.raises(MonolocError, match='not one number'):
    tasks.length_of('modular_arithmetic', example)
  assert tasks.length_of('parity_check', tasks.Example(t('1 0 1'), t('0'))) == 3


def test_short_lengths_draw_the_suites_forms():
  def space(task, length):
    return {' '.join(ex.source) for ex in tasks.sample(task, length, 100)}
  # binary numbers at 1-2 bits: one number in [0, 2^L - 2], no operator.
  assert space('binary_addition', 1) == {'0'}
  assert space('binary_addition', 2) == {'0 0', '1 0', '0 1'}
  # at 3: a 1-bit non-zero number each side.
  assert space('binary_addition', 3) == {'1 + 1'}
  assert space('binary_multiplication', 3) == {'1 * 1'}
  # compute_sqrt: L bits of a number in [1, 2^L - 1].
  assert space('compute_sqrt', 2) == {'0 1', '1 0', '1 1'}
  # brackets' leaf forms.
  assert space('modular_arithmetic_brackets', 2) == {f'- {d}' for d in '01234'}
  assert space('modular_arithmetic_brackets', 4) == {f'( - {d} )' for d in '01234'}
  assert len(space('modular_arithmetic_brackets', 5)) == 75     # ( d op d )
  assert space('solve_equation', 3) == {f'x = {d}' for d in '01234'}
  assert space('stack_manipulation', 1) == {'0', '1'}
  assert space('missing_duplicate_string', 2) == {'_ 0', '_ 1', '0 _', '1 _'}
  assert space('missing_duplicate_string', 3) == {'_ 0 #', '_ 1 #', '0 _ #', '1 _ #'}


def test_structure_of_long_inputs():
  for source in drawn('binary_addition', 60):
    assert source.count('+') == 1
    left, right = ' '.join(source).split('+')
    assert '1' in left and '1' in right
  for source in drawn('stack_manipulation', 60):
    assert source[0] in '01' and source[-1] in ('POP', 'PUSH0', 'PUSH1')
  for source in drawn('missing_duplicate_string', 61):
    assert source.count('_') == 1 and source[-1] == '#'
  for source in drawn('solve_equation', 60):
    assert source.count('x') == 1 and source[-2] == '='
  for source in drawn('compute_sqrt', 50):
    assert '1' in source


@pytest.mark.parametrize('task', NAMES)
def test_registry_facts(task):
  spec = tasks.get(task)
  assert spec.splits == ('train', 'dev', 'test_iid', 'test_ood', 'test_50', 'test_100',
                         'test_200')
  assert spec.paper_splits == ('test_ood',)
  assert spec.train_lengths == (MIN_LENGTH.get(task, 1), 40)
  assert spec.test_lengths == (41, 500) == chomsky.TEST_LENGTHS
  assert range_eval.default_range(task) == (41, 500)
  assert spec.split_lengths['test_100'] == 100
  assert spec.sampler.min_length == MIN_LENGTH.get(task, 1)
  assert viz.dev_range(task) == (MIN_LENGTH.get(task, 1), 40)


@pytest.mark.parametrize('task', NAMES)
def test_split_lengths_and_sizes(task, data):
  lo = MIN_LENGTH.get(task, 1)
  sizes = {'train': 10_000, 'dev': 1_000, 'test_iid': 1_000, 'test_50': 500}
  for split, examples in data[task].items():
    assert len(examples) == sizes[split]
    lengths = {min(tasks.lengths_of(task, ex)) for ex in examples}
    if split == 'test_50':
      assert lengths == ({49} if task == 'modular_arithmetic' else {50})
    else:
      assert min(lengths) == lo and max(lengths) >= 39 and max(lengths) <= 40


def test_train_lengths_are_uniform_over_1_to_40(data):
  counts = np.bincount([len(ex.source) for ex in data['parity_check']['train']])[1:]
  assert len(counts) == 40 and counts.min() > 180 and counts.max() < 330


def test_dev_avoids_training_inputs_where_the_space_allows(data):
  for task in ('parity_check', 'bucket_sort', 'stack_manipulation'):
    train = {ex.source for ex in data[task]['train']}
    for split in ('dev', 'test_iid'):
      overlap = [ex for ex in data[task][split] if ex.source in train]
      assert all(len(ex.source) <= 12 for ex in overlap), (task, split)
  # at 1 bit every input is a training input: dev keeps one anyway.
  assert any(len(ex.source) == 1 for ex in data['parity_check']['dev'])


def test_generation_is_deterministic_per_seed():
  again = chomsky.generate('cycle_navigation', seed=0)
  assert [(e.source, e.target) for e in again['train']] == tasks.load(
      'cycle_navigation', 'train')
  assert again == chomsky.generate('cycle_navigation', seed=0)
  other = chomsky.generate('cycle_navigation', seed=1)
  assert again['train'][:50] != other['train'][:50]
  assert again['test_ood'][:20] != other['test_ood'][:20]


def test_test_ood_covers_41_to_500():
  examples = tasks.load('reverse_string', 'test_ood')
  lengths = [len(source) for source, _ in examples]
  assert len(examples) == 500 and min(lengths) >= 41 and max(lengths) <= 500
  assert min(lengths) < 80 and max(lengths) > 460


# -------------------------------------------------------- any length ---


@pytest.mark.parametrize('task', NAMES)
def test_sample_at_41_and_500(task):
  for length in (41, 500):
    examples = tasks.sample(task, length, n=6, seed=3)
    assert len(examples) == 6
    assert len({ex.source for ex in examples}) == 6
    for ex in examples:
      assert tasks.lengths_of(task, ex) >= {length}
      if length == 41 or task not in ('modular_arithmetic_brackets', 'solve_equation'):
        assert ex.target == independent(task, ex.source)
      else:
        assert ex.target == chomsky.RULES[task](ex.source)
    assert tasks.sample(task, length, n=6, seed=3) == examples
    assert tasks.sample(task, length, n=6, seed=4) != examples


def test_sample_exhausts_a_small_space_and_respects_exclude():
  every = tasks.sample('parity_check', 3, n=100)
  assert len(every) == 8 and len({ex.source for ex in every}) == 8
  rest = tasks.sample('parity_check', 3, n=100, exclude=every[:3])
  assert {ex.source for ex in rest} == {ex.source for ex in every[3:]}
  assert tasks.sample('parity_check', 3, n=100, exclude=every) == []
  train = tasks.load_examples('bucket_sort', 'train')
  fresh = tasks.sample('bucket_sort', 6, n=50, exclude=train)
  assert len(fresh) == 50 and not {ex.source for ex in fresh} & {ex.source for ex in train}


def test_sample_refuses_lengths_below_the_shortest():
  with pytest.raises(MonolocError, match=r"length of task 'solve_equation' must be an "
                     r'integer >= 3 \(tokens\)'):
    tasks.sample('solve_equation', 2, 5)
  with pytest.raises(MonolocError, match='>= 1'):
    tasks.sample('parity_check', 0, 5)


# --------------------------------------------------------- vocabulary ---


@pytest.mark.parametrize('task', NAMES)
def test_every_test_range_token_appears_in_training(task, data):
  seen = {tok for ex in data[task]['train'] for tok in ex.source + ex.target}
  spec = chomsky.TASKS[task]
  assert set(spec.inputs) | set(spec.outputs) == seen
  long = tasks.sample(task, 500, n=3) + tasks.sample(task, 41, n=20)
  assert {tok for ex in long for tok in ex.source + ex.target} <= seen


# ------------------------------------------------------- long targets ---


def test_a_long_target_gets_enough_decode_steps():
  vocab = Vocabulary.from_examples(tasks.load_examples('duplicate_string', 'train'))
  split = ip.encode_split(tasks.sample('duplicate_string', 500, n=3), vocab)
  assert int(split.tgt_len.max()) == 1001                  # 2 x 500 tokens and <eos>
  for idx, batch, steps in ip.eval_batches(split, 4, vocab.sos_id):
    assert steps >= int(split.tgt_len[idx].max())
    assert batch.tgt_out.shape[1] == steps


# ------------------------------------------------ one run, every mode ---


@pytest.fixture(scope='module')
def cli_run(tmp_path_factory):
  """One real `monoloc-train` epoch of OneStepAttn on modular_arithmetic_brackets, small:
  a one-token target keeps training to one batch shape (one compile)."""
  workdir = tmp_path_factory.mktemp('chomsky_run')
  env = dict(os.environ, MONOLOC_XLA_CACHE=jax.config.jax_compilation_cache_dir or '')
  proc = subprocess.run(
      [sys.executable, '-m', 'monoloc_jax.main', f'--workdir={workdir}',
       '--task=modular_arithmetic_brackets', '--model=onestep', '--config.max_epochs=1',
       '--config.train_size=256', '--config.eval_size=16', '--config.hidden_dim=32',
       '--config.test_splits=test_50', '--config.progress=False'],
      capture_output=True, text=True, timeout=600, env=env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return workdir


def test_one_epoch_through_the_cli_writes_results(cli_run):
  results = json.loads((cli_run / 'results.json').read_text())
  assert results['task'] == 'modular_arithmetic_brackets' and results['epochs'] == 1
  assert 'test_50' in results['test']


def test_the_run_evaluates_predicts_and_ranges(cli_run):
  from monoloc_jax import inference  # pylint: disable=g-import-not-at-top
  evaluated = inference.evaluate(str(cli_run), {'test_splits': 'test_iid', 'eval_size': 8})
  assert 'test_iid' in evaluated['test'] or 'test_iid' in evaluated.get('partial_test', {})
  [(output, _)] = inference.predict(str(cli_run), ['( 1 + ( - 2 ) )'])
  assert set(output) <= set('01234()+-*')
  result = range_eval.range_evaluate(str(cli_run), '41:42', samples=4)
  assert result['lengths'] == [41, 42] and result['samples'] == [4, 4]
  assert (cli_run / range_eval.RANGE_JSON).is_file()
