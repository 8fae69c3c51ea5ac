"""Long Lookup Tables, forward and reverse (Liska et al. 2018; Dubois et al.
2020; paper §2 and App. A).

Eight random bijections `t1 … t8` on the 3-bit strings are composed. A forward
input is `x t_a t_b … .` (tables applied left to right, `.` the end-of-input
token); a reverse input is `… t_b t_a x .` (tables applied from the one next to
`x` outward). The target is `x` followed by every intermediate result, e.g.
`000 t1 t2 .` -> `000 011 010`. `.` stays part of the source: the gold
attention of the target's `<eos>` points at it.

Two sources give the same raw files (named like the reference generator's
output, `make_lookup_tables.py` of YannDubs/machine-tasks, generation settings
in `generation_arguments.txt` of the reference data):

  * `train`: every table alone on every input (the held-out tables `t7`, `t8`
    appear *only* here), plus all compositions of 2 … 4 of `t1 … t6` on all
    inputs, less the held-out compositions, held-out inputs and validation.
  * `validation`: 5 % of the multi-table rows, stratified by composition
    length and set of tables used.
  * `heldout_inputs`: for each length-4 composition that is not held out, 2 of
    its 8 inputs (never trained on; the composition itself is).
  * `heldout_compositions`: 50 length-4 compositions absent from training (not
    used by the paper; kept for tests).
  * `longer_seen_k`, k = 1 … 5: compositions of 4 + k seen tables, built by
    appending one table (applied last) to the compositions of
    `longer_seen_{k-1}` (k = 1: to every length-4 composition) and keeping
    625 random compositions × 8 inputs = 5,000 rows (`bound_test`).

The paper's splits (the authors' code, `preprocess/process_llt.py` of
JRC1995/MonotonicLocationAttention) map onto them as: `train` = train;
`dev` = validation + 500 rows of longer_seen_1; `test_long1` = the other 4,500
rows of longer_seen_1; `test_long2 … 5` = longer_seen_2 … 5; `test_iid` =
heldout_inputs. The 500 rows are a deterministic function of `seed` (in both
modes below; the authors' code drew them unseeded).

`load_splits(..., data_dir=None)` generates the data in code (our own generator
following the rules above; seed 123 reproduces the reference tables `t1 … t8`
exactly, the sampled rows differ). With `data_dir` it reads the reference TSV
layout (`source<TAB>target[<TAB>attention]`), each file once.

Lengths: a source of k tables has k + 2 tokens (the input bits, k table names,
`.`), so training sources (1 … 4 tables) have 3 … 6 tokens, `test_iid` (4
tables) 6 and `test_longK` (4 + K tables) 6 + K: the paper's lengths 7 / 9 /
11 are `test_long1` / `test_long3` / `test_long5` (`TRAIN_LENGTHS`,
`SPLIT_LENGTHS`).

Any length (range evaluation): `sample(length, ...)` draws inputs of `length`
source tokens with the generator's rule (one table: any table; 2 or more: the
seen ones), with the tables of a data seed (`generated_rule`) or read back from
a directory's train file (`file_rule`; for the reference data they are the
generator's at seed 123, checked in tests/tasks_sample_test.py).

Gold attention (0-based source index per target token, then `<eos>`), as the
reference generator's `_append_target_attention`: forward target token j reads
source position j (x, then the j-th table) and `<eos>` reads `.`; reverse
target token j reads position k - j (k = number of tables; x sits at k) and
`<eos>` reads `.` at k + 1.
"""

import dataclasses
import functools
import itertools
import math
import os
import pathlib
import random
import types
from typing import (AbstractSet, Callable, Dict, List, Mapping, Optional,
                    Sequence, Tuple)

import numpy as np

from monoloc_jax.errors import MonolocError
from monoloc_jax.errors import unknown_name
from monoloc_jax.tasks import readers
from monoloc_jax.tasks import sampling
from monoloc_jax.tasks.types import Example

SPLITS = ('train', 'dev', 'test_iid', 'test_long1', 'test_long2', 'test_long3',
          'test_long4', 'test_long5')
# The length splits the paper reports (lengths 7 / 9 / 11).
PAPER_SPLITS = ('test_long1', 'test_long3', 'test_long5')
GENERATOR_VERSION = 1

_TASK = 'Lookup'
# Raw files of the reference layout, in the order the reference writes them.
FILE_NAMES = ('train', 'validation', 'heldout_inputs', 'longer_seen_1',
              'longer_seen_2', 'longer_seen_3', 'longer_seen_4',
              'longer_seen_5')
_EXPECTED_FILES = tuple(f'{name}.tsv' for name in FILE_NAMES)

Composition = Tuple[str, ...]  # Table names in application order.
Tables = Dict[str, Dict[str, str]]  # name -> (input bits -> output bits).


@dataclasses.dataclass(frozen=True)
class LookupConfig:
  """Generator settings; the defaults are the reference data's settings.

  Attributes:
    n_bits: length of the bit strings (`n_repeats` in the reference).
    n_tables: number of random tables.
    n_heldout_tables: how many of the last tables appear only alone in train.
    max_composition_train: longest composition in train.
    n_heldout_compositions: longest compositions removed from train.
    n_heldout_inputs: inputs per longest composition removed from train.
    n_longer: number of `longer_seen_k` files.
    bound_test: rows per `longer_seen_k` file.
    validation_size: fraction of the multi-table rows used for validation.
    n_dev_long: rows of longer_seen_1 moved to the paper's dev split.
    eos: end-of-input token appended to every source.
  """
  n_bits: int = 3
  n_tables: int = 8
  n_heldout_tables: int = 2
  max_composition_train: int = 4
  n_heldout_compositions: int = 50
  n_heldout_inputs: int = 2
  n_longer: int = 5
  bound_test: int = 5000
  validation_size: float = 0.05
  n_dev_long: int = 500
  eos: str = '.'


DEFAULT_CONFIG = LookupConfig()


def source_length(n_tables: int) -> int:
  """Source tokens of an input composing `n_tables` tables (x, tables, '.')."""
  return n_tables + 2


# Tables composed in each evaluation split's inputs (the default settings).
SPLIT_TABLES: Mapping[str, int] = types.MappingProxyType({
    'test_iid': DEFAULT_CONFIG.max_composition_train,
    **{f'test_long{k}': DEFAULT_CONFIG.max_composition_train + k
       for k in range(1, DEFAULT_CONFIG.n_longer + 1)},
})
assert tuple(SPLIT_TABLES) == SPLITS[2:]
# Source tokens of the training inputs, (shortest, longest): 1 … 4 tables.
TRAIN_LENGTHS: Tuple[int, int] = (
    source_length(1), source_length(DEFAULT_CONFIG.max_composition_train))
# Source tokens of every input of each evaluation split.
SPLIT_LENGTHS: Mapping[str, float] = types.MappingProxyType(
    {split: float(source_length(k)) for split, k in SPLIT_TABLES.items()})


# ----------------------------------------------------------------------------
# Examples and gold attention.
# ----------------------------------------------------------------------------


def gold_attention(n_tables: int, *, reverse: bool) -> Tuple[int, ...]:
  """Gold source position of each target token and then of `<eos>`.

  Args:
    n_tables: number of tables k in the input (target length is k + 1).
    reverse: whether the input is in Reverse Lookup order.

  Returns:
    A tuple of k + 2 source indices (the source has k + 2 tokens, `.` last).
  """
  if reverse:
    return tuple(range(n_tables, -1, -1)) + (n_tables + 1,)
  return tuple(range(n_tables + 2))


def make_example(x: str, composition: Composition, tables: Tables, *,
                 reverse: bool, eos: str = '.') -> Example:
  """Builds one Lookup example.

  Args:
    x: the input bit string.
    composition: table names in the order they are applied.
    tables: the table mappings.
    reverse: Reverse Lookup order of the source.
    eos: end-of-input token.

  Returns:
    The example, with gold attention.
  """
  outputs = [x]
  for name in composition:
    outputs.append(tables[name][outputs[-1]])
  if reverse:
    source = tuple(reversed(composition)) + (x, eos)
  else:
    source = (x,) + tuple(composition) + (eos,)
  return Example(source=source, target=tuple(outputs),
                 gold_attention=gold_attention(len(composition),
                                               reverse=reverse))


def parse_source(source: Sequence[str], *,
                 reverse: bool) -> Tuple[str, Composition]:
  """Splits a source into (x, composition in application order).

  Args:
    source: source tokens, ending with the end-of-input token.
    reverse: Reverse Lookup order.

  Returns:
    The input bit string and the table names in application order.
  """
  body = tuple(source[:-1])
  if reverse:
    return body[-1], tuple(reversed(body[:-1]))
  return body[0], body[1:]


# ----------------------------------------------------------------------------
# Generation.
# ----------------------------------------------------------------------------


def bit_strings(n_bits: int) -> List[str]:
  """All bit strings of length `n_bits` in lexicographic order."""
  return [''.join(bits) for bits in itertools.product('01', repeat=n_bits)]


def _nth_permutation(items: Sequence[str], index: int) -> List[str]:
  """The `index`-th permutation of `items` in lexicographic order."""
  pool = list(items)
  out = []
  for position in range(len(pool), 0, -1):
    block = math.factorial(position - 1)
    digit, index = divmod(index, block)
    out.append(pool.pop(digit))
  return out


def _check_seed(seed: int) -> int:
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
    raise MonolocError(f'Lookup seed must be an integer, got {seed!r}')
  if not 0 <= int(seed) < 2**32:
    raise MonolocError(f'Lookup seed must be in [0, 2**32), got {seed}')
  return int(seed)


def make_tables(seed: int, config: LookupConfig = DEFAULT_CONFIG) -> Tables:
  """Draws the random bijections `t1 … tN`.

  The draw follows the reference generator (distinct permutations of the
  lexicographically ordered inputs, chosen by NumPy's legacy `RandomState`
  seeded with `seed`), so seed 123 gives exactly the reference data's tables.

  Args:
    seed: random seed.
    config: generator settings.

  Returns:
    Mapping from table name to its input -> output dictionary.
  """
  seed = _check_seed(seed)
  inputs = bit_strings(config.n_bits)
  n_perms = math.factorial(len(inputs))
  # Legacy `choice(n, size, replace=False)` is `permutation(n)[:size]`.
  chosen = np.random.RandomState(seed).permutation(n_perms)[:config.n_tables]
  return {
      f't{i + 1}': dict(zip(inputs, _nth_permutation(inputs, int(index))))
      for i, index in enumerate(chosen)
  }


def _largest_remainder(sizes: Sequence[int], total: int) -> List[int]:
  """Integer quotas proportional to `sizes` that sum to `total`."""
  n = sum(sizes)
  exact = [s * total / n for s in sizes]
  quotas = [math.floor(e) for e in exact]
  order = sorted(range(len(sizes)), key=lambda i: (quotas[i] - exact[i], i))
  for i in order[:total - sum(quotas)]:
    quotas[i] += 1
  return quotas


def _stratified_split(rows: Sequence[Tuple[str, Composition]],
                      fraction: float, rng: random.Random):
  """Splits rows into (kept, held) with `held` ≈ `fraction` of every stratum.

  Strata are (composition length, set of tables used), as the reference's
  stratified `train_test_split`; the held size is ceil(fraction × len(rows)).
  """
  strata: Dict[Tuple[int, Tuple[str, ...]], List[int]] = {}
  for i, (_, comp) in enumerate(rows):
    strata.setdefault((len(comp), tuple(sorted(set(comp)))), []).append(i)
  keys = sorted(strata)
  quotas = _largest_remainder([len(strata[k]) for k in keys],
                              math.ceil(fraction * len(rows)))
  held = set()
  for key, quota in zip(keys, quotas):
    held.update(rng.sample(strata[key], quota))
  kept = [r for i, r in enumerate(rows) if i not in held]
  return kept, [rows[i] for i in sorted(held)]


def generate_files(*, reverse: bool, seed: int,
                   config: LookupConfig = DEFAULT_CONFIG
                   ) -> Dict[str, List[Example]]:
  """Generates the raw Lookup files in memory (deterministic in `seed`).

  Args:
    reverse: Reverse Lookup order of the sources.
    seed: random seed (123 reproduces the reference tables).
    config: generator settings.

  Returns:
    Mapping from the reference file stems (`FILE_NAMES`) plus
    `heldout_compositions` to shuffled lists of examples.
  """
  tables = make_tables(seed, config)
  names = list(tables)
  seen = names[:config.n_tables - config.n_heldout_tables]
  inputs = bit_strings(config.n_bits)
  rng = random.Random(f'monoloc-lookup-v{GENERATOR_VERSION}/{seed}')
  longest = config.max_composition_train

  unary = [(x, (t,)) for t in names for x in inputs]
  shorter = [(x, comp) for length in range(2, longest)
             for comp in itertools.product(seen, repeat=length)
             for x in inputs]
  longest_comps = list(itertools.product(seen, repeat=longest))
  rng.shuffle(longest_comps)
  n_held = config.n_heldout_compositions
  heldout_comps = longest_comps[len(longest_comps) - n_held:]
  longest_comps = longest_comps[:len(longest_comps) - n_held]
  heldout_inputs, longest_rows = [], []
  for comp in longest_comps:
    held = set(rng.sample(inputs, config.n_heldout_inputs))
    for x in inputs:
      (heldout_inputs if x in held else longest_rows).append((x, comp))
  train_multi, validation = _stratified_split(
      shorter + longest_rows, config.validation_size, rng)
  raw = {
      'train': unary + train_multi,
      'validation': validation,
      'heldout_inputs': heldout_inputs,
      'heldout_compositions': [(x, c) for c in heldout_comps for x in inputs],
  }

  # Longer compositions: extend the previous level by one table applied last.
  n_keep = round(config.bound_test / len(inputs))
  previous = list(itertools.product(seen, repeat=longest))
  for k in range(1, config.n_longer + 1):
    candidates = [comp + (t,) for comp in previous for t in seen]
    if len(candidates) > n_keep:
      candidates = rng.sample(candidates, n_keep)
    raw[f'longer_seen_{k}'] = [(x, c) for c in candidates for x in inputs]
    previous = candidates

  files = {}
  for name, rows in raw.items():
    rows = list(rows)
    rng.shuffle(rows)
    if name.startswith('longer_seen_'):
      rows = rows[:config.bound_test]
    files[name] = [make_example(x, comp, tables, reverse=reverse,
                                eos=config.eos) for x, comp in rows]
  return files


# ----------------------------------------------------------------------------
# Reading the reference layout.
# ----------------------------------------------------------------------------


def _parse_line(path: pathlib.Path, number: int, line: str, *, reverse: bool,
                eos: str) -> Example:
  """Parses and checks one `source<TAB>target[<TAB>attention]` line."""
  columns = line.split('\t')
  if len(columns) not in (2, 3):
    raise readers.malformed(
        path, number, f'expected 2 or 3 tab-separated columns '
        f'(source, target[, attention]), got {len(columns)}: '
        f'{readers.quote_line(line)}')
  source = tuple(columns[0].split())
  target = tuple(columns[1].split())
  if len(source) < 3 or source[-1] != eos:
    raise readers.malformed(
        path, number, f'source must be at least an input, a table and '
        f'{eos!r}, ending with {eos!r}: {readers.quote_line(columns[0])}')
  n_tables = len(source) - 2
  if len(target) != n_tables + 1:
    raise readers.malformed(
        path, number, f'target has {len(target)} tokens, expected '
        f'{n_tables + 1} (input + one per table): '
        f'{readers.quote_line(line)}')
  x, _ = parse_source(source, reverse=reverse)
  if x != target[0]:
    order = 'reverse (t_c t_b t_a x .)' if reverse else 'forward (x t_a t_b .)'
    raise readers.malformed(
        path, number, f'the target must start with the input {x!r} of a '
        f'{order} source (wrong direction?): {readers.quote_line(line)}')
  attention = gold_attention(n_tables, reverse=reverse)
  if len(columns) == 3:
    try:
      attention = tuple(int(a) for a in columns[2].split())
    except ValueError:
      raise readers.malformed(
          path, number, f'attention column must hold integers: '
          f'{readers.quote_line(columns[2])}') from None
    if (len(attention) != len(target) + 1 or
        not all(0 <= a < len(source) for a in attention)):
      raise readers.malformed(
          path, number, f'attention column must hold {len(target) + 1} '
          f'source positions in [0, {len(source)}): '
          f'{readers.quote_line(columns[2])}')
  return Example(source=source, target=target, gold_attention=attention)


def _check_direction(data_dir: pathlib.Path, reverse: bool) -> None:
  """Fails early when generation_arguments.txt says the other direction."""
  path = data_dir / 'generation_arguments.txt'
  if not path.is_file():
    return
  for _, line in readers.iter_lines(path):
    key, _, value = line.partition('=')
    if key.strip() == 'reverse' and value.strip() in ('True', 'False'):
      if (value.strip() == 'True') != reverse:
        raise MonolocError(
            f'{_TASK}: {os.fspath(data_dir)!r} holds reverse={value.strip()} '
            f'data (see {path.name}) but reverse={reverse} was requested')


def read_file(data_dir: os.PathLike, name: str, *, reverse: bool,
              config: LookupConfig = DEFAULT_CONFIG) -> List[Example]:
  """Reads one reference file `<data_dir>/<name>.tsv`.

  Args:
    data_dir: directory in the reference layout.
    name: file stem, one of `FILE_NAMES`.
    reverse: whether the data is Reverse Lookup.
    config: generator settings (only `eos` is used).

  Returns:
    The examples in file order. Gold attention comes from the third column
    when present, else from the rule (see the module docstring).

  Raises:
    MonolocError: missing/empty directory or file, a malformed line, or fewer
      rows than `min_rows` (longer_seen_1 must outnumber the rows dev takes).
  """
  directory = readers.require_dir(
      data_dir, task=f'{_TASK} ({"reverse" if reverse else "forward"})',
      expected=_EXPECTED_FILES)
  _check_direction(directory, reverse)
  path = readers.require_file(
      directory / f'{name}.tsv', task=_TASK,
      hint=f'a Long Lookup Tables directory holds {", ".join(_EXPECTED_FILES)}')
  examples = [_parse_line(path, number, line, reverse=reverse, eos=config.eos)
               for number, line in readers.iter_lines(path)]
  if len(examples) < min_rows(name, config):     # longer_seen_1 (the others: 1 row)
    raise MonolocError(
        f'{_TASK}: {os.fspath(path)} has {len(examples)} rows, too few: '
        f'{config.n_dev_long} of its rows go to the dev split and the others are '
        f'test_long1, so it needs at least {config.n_dev_long + 1} (the reference '
        f'file has {config.bound_test})')
  return examples


def min_rows(name: str, config: LookupConfig = DEFAULT_CONFIG) -> int:
  """Fewest rows of reference file `name` for every paper split built from it to
  have an example: 1 (`readers.iter_lines` refuses an empty file), but
  longer_seen_1 gives `n_dev_long` rows to dev and the others to test_long1."""
  return config.n_dev_long + 1 if name == 'longer_seen_1' else 1


def read_files(data_dir: os.PathLike, *, reverse: bool,
               config: LookupConfig = DEFAULT_CONFIG
               ) -> Dict[str, List[Example]]:
  """Reads every file of `FILE_NAMES` from a reference-layout directory."""
  return {name: read_file(data_dir, name, reverse=reverse, config=config)
          for name in FILE_NAMES}


# ----------------------------------------------------------------------------
# Paper splits.
# ----------------------------------------------------------------------------

FileGetter = Callable[[str], List[Example]]


def dev_long_indices(n_rows: int, seed: int,
                     config: LookupConfig = DEFAULT_CONFIG) -> List[int]:
  """Sorted indices of the longer_seen_1 rows that go to the dev split."""
  rng = random.Random(f'monoloc-lookup-dev/{seed}')
  return sorted(rng.sample(range(n_rows), min(config.n_dev_long, n_rows)))


def _dev(get: FileGetter, seed: int, config: LookupConfig) -> List[Example]:
  long1 = get('longer_seen_1')
  picked = dev_long_indices(len(long1), seed, config)
  return get('validation') + [long1[i] for i in picked]


def _test_long1(get: FileGetter, seed: int,
                config: LookupConfig) -> List[Example]:
  long1 = get('longer_seen_1')
  picked = set(dev_long_indices(len(long1), seed, config))
  return [ex for i, ex in enumerate(long1) if i not in picked]


def _file(name: str) -> Callable[[FileGetter, int, LookupConfig],
                                 List[Example]]:
  """A split builder that returns one raw file unchanged."""
  def build(get: FileGetter, seed: int,
            config: LookupConfig) -> List[Example]:
    del seed, config  # Unused.
    return get(name)
  return build


_SPLIT_BUILDERS: Mapping[str, Callable[[FileGetter, int, LookupConfig],
                                       List[Example]]] = {
    'train': _file('train'),
    'dev': _dev,
    'test_iid': _file('heldout_inputs'),
    'test_long1': _test_long1,
    'test_long2': _file('longer_seen_2'),
    'test_long3': _file('longer_seen_3'),
    'test_long4': _file('longer_seen_4'),
    'test_long5': _file('longer_seen_5'),
}
assert tuple(_SPLIT_BUILDERS) == SPLITS


def load_splits(splits: Sequence[str], *, reverse: bool, seed: int,
                data_dir: Optional[str],
                config: LookupConfig = DEFAULT_CONFIG
                ) -> Dict[str, List[Example]]:
  """Loads several paper splits of Lookup (reverse=False) or Reverse Lookup.

  The data is generated once (data_dir=None), or each file is read at most
  once, whatever the number of splits.

  Args:
    splits: names from `SPLITS`.
    reverse: Reverse Lookup.
    seed: generator seed (data_dir=None) and, in both modes, the seed that
      picks the 500 longer_seen_1 rows moved to `dev`.
    data_dir: None to generate in code; else a directory in the reference
      layout (train.tsv, validation.tsv, heldout_inputs.tsv,
      longer_seen_{1..5}.tsv).
    config: generator settings.

  Returns:
    {split: examples} in the order of `splits`, each example with gold
    attention.

  Raises:
    MonolocError: unknown split, bad seed, or unreadable data.
  """
  for split in splits:
    if split not in _SPLIT_BUILDERS:
      raise unknown_name('Lookup split', split, SPLITS)
  seed = _check_seed(seed)
  if data_dir is None:
    files = generate_files(reverse=reverse, seed=seed, config=config)
    get = files.__getitem__
  else:
    read: Dict[str, List[Example]] = {}

    def get(name: str) -> List[Example]:
      if name not in read:
        read[name] = read_file(data_dir, name, reverse=reverse, config=config)
      return read[name]
  return {split: _SPLIT_BUILDERS[split](get, seed, config) for split in splits}


def load_split(split: str, *, reverse: bool, seed: int,
               data_dir: Optional[str],
               config: LookupConfig = DEFAULT_CONFIG) -> List[Example]:
  """One split of `load_splits` (the arguments are the same)."""
  return load_splits((split,), reverse=reverse, seed=seed, data_dir=data_dir,
                     config=config)[split]


# ----------------------------------------------------------------------------
# Examples at any length (range evaluation).
# ----------------------------------------------------------------------------

# Entropy word that keeps the samplers' streams apart from anything else.
_SAMPLE_STREAM = 1_000


@dataclasses.dataclass(frozen=True)
class LookupRule:
  """The tables a trained model learned, and which may be composed.

  Attributes:
    tables: name -> (input bits -> output bits).
    seen: the tables that appear in compositions of 2 or more (every file but
      train's single-table rows composes only these; `t1 … t6` by default).
  """
  tables: Mapping[str, Mapping[str, str]]
  seen: Tuple[str, ...]


def generated_rule(seed: int, config: LookupConfig = DEFAULT_CONFIG
                   ) -> LookupRule:
  """The rule of `generate_files(seed=seed)`: its tables, the first
  n_tables - n_heldout_tables of them seen."""
  tables = make_tables(seed, config)
  return LookupRule(_frozen(tables), tuple(tables)[:config.n_tables -
                                                   config.n_heldout_tables])


def _frozen(tables: Tables) -> Mapping[str, Mapping[str, str]]:
  return types.MappingProxyType(
      {name: types.MappingProxyType(dict(table))
       for name, table in tables.items()})


@functools.lru_cache(maxsize=8)
def file_rule(data_dir: str, *, reverse: bool,
              config: LookupConfig = DEFAULT_CONFIG) -> LookupRule:
  """The rule of a reference-layout directory, read from its train file.

  train.tsv holds every table alone on every input (the generator's rule, and
  the reference's), so its single-table rows give the tables exactly; the
  tables of its multi-table rows are the seen ones.

  Raises:
    MonolocError: unreadable data, or a table not given on every input.
  """
  tables: Dict[str, Dict[str, str]] = {}
  seen = set()
  for example in read_file(data_dir, 'train', reverse=reverse, config=config):
    x, composition = parse_source(example.source, reverse=reverse)
    if len(composition) == 1:
      tables.setdefault(composition[0], {})[x] = example.target[1]
    else:
      seen.update(composition)
  inputs = bit_strings(config.n_bits)
  partial = sorted(name for name, table in tables.items()
                   if sorted(table) != inputs)
  if partial or not seen or not seen <= set(tables):
    raise MonolocError(
        f'{_TASK}: the train file of {data_dir!r} must give every table alone '
        f'on every input of {config.n_bits} bits to sample at other lengths '
        f'(incomplete: {", ".join(partial or sorted(seen - set(tables)))})')
  return LookupRule(_frozen(dict(sorted(tables.items()))),
                    tuple(sorted(seen)))


def sample(length: int, n: int, seed: int,
           exclude: AbstractSet[Tuple[str, ...]] = frozenset(), *,
           reverse: bool, rule: LookupRule,
           config: LookupConfig = DEFAULT_CONFIG) -> List[Example]:
  """`n` Lookup examples whose sources have exactly `length` tokens.

  A source of `length` tokens composes k = length - 2 tables
  (`source_length`). As the generator does, an input of one table uses any
  table (train holds them all alone) and an input of 2 or more composes only
  the seen ones; x and each table are uniform. (x, composition) rows are drawn
  without replacement (`sampling.draw_distinct`) and a source in `exclude` is
  dropped; when fewer than `n` usable rows exist (64 of one table, all of them
  in train), all of them come back: fewer than `n`, never a repeat.

  Args:
    length: source tokens, >= 3 (one table).
    n: examples wanted, >= 0.
    seed: the same (length, n, seed, reverse) gives the same rows.
    exclude: sources (token tuples) never returned.
    reverse: Reverse Lookup order.
    rule: the tables (`generated_rule` / `file_rule`).
    config: generator settings (bits, `eos`).

  Returns:
    At most `n` examples, each with gold attention.
  """
  n_tables = int(length) - source_length(0)
  pool = tuple(rule.tables) if n_tables == 1 else rule.seen
  inputs = bit_strings(config.n_bits)
  rng = np.random.default_rng([seed, int(reverse), _SAMPLE_STREAM, int(length)])

  def build(rows: np.ndarray) -> List[Example]:
    return [make_example(inputs[row[0]], tuple(pool[i] for i in row[1:]),
                         rule.tables, reverse=reverse, eos=config.eos)
            for row in rows.tolist()]

  return sampling.draw_distinct(
      rng, (len(inputs),) + (len(pool),) * n_tables, n, build, exclude,
      f'{_TASK} inputs of {n_tables} tables')
