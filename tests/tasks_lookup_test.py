"""Tests of the Lookup / Reverse Lookup generator and reader.

The generated data is compared with the reference files in
`<repo>/../shared/data/lookup/{forward,reverse}/` (read-only, never copied).
"""

import collections
import pathlib
import subprocess
import sys
import time
from typing import Dict, List, Tuple

import pytest

from monoloc_jax.errors import MonolocError
from monoloc_jax.tasks import lookup
from monoloc_jax.tasks.types import Example

_REFERENCE = (pathlib.Path(__file__).resolve().parents[1].parent / 'shared' /
              'data' / 'lookup')
_REFERENCE_SEED = 123  # generation_arguments.txt of the reference data.
_SEEN = tuple(f't{i}' for i in range(1, 7))
_HELDOUT_TABLES = ('t7', 't8')
_DIRECTIONS = (False, True)

# Paper split sizes implied by the reference layout (see lookup.py).
_PAPER_SIZES = {
    'train': 9081, 'dev': 475 + 500, 'test_iid': 2492, 'test_long1': 4500,
    'test_long2': 5000, 'test_long3': 5000, 'test_long4': 5000,
    'test_long5': 5000,
}


def _ref_dir(reverse: bool) -> pathlib.Path:
  path = _REFERENCE / ('reverse' if reverse else 'forward')
  if not path.is_dir():
    pytest.skip(f'reference Lookup data not found at {path} (expected the '
                'shared data directory next to the repository)')
  return path


@pytest.fixture(scope='module')
def generated() -> Dict[bool, Dict[str, List[Example]]]:
  return {reverse: lookup.generate_files(reverse=reverse, seed=_REFERENCE_SEED)
          for reverse in _DIRECTIONS}


@pytest.fixture(scope='module')
def reference() -> Dict[bool, Dict[str, List[Example]]]:
  return {reverse: lookup.read_files(_ref_dir(reverse), reverse=reverse)
          for reverse in _DIRECTIONS}


def _rows(examples, reverse) -> List[Tuple[str, Tuple[str, ...]]]:
  return [lookup.parse_source(ex.source, reverse=reverse) for ex in examples]


def _stats(examples: List[Example], reverse: bool) -> dict:
  rows = _rows(examples, reverse)
  comps = [comp for _, comp in rows]
  src = [len(ex.source) for ex in examples]
  tgt = [len(ex.target) for ex in examples]
  return {
      'size': len(examples),
      'source_len': (min(src), max(src)),
      'target_len': (min(tgt), max(tgt)),
      'tables': sorted({t for c in comps for t in c}),
      'composition_lengths': sorted({len(c) for c in comps}),
      'n_compositions': len(set(comps)),
  }


def _reconstruct_tables(train: List[Example], reverse: bool):
  """Table mappings read off the one-table rows of a train file."""
  tables = collections.defaultdict(dict)
  for (x, comp), ex in zip(_rows(train, reverse), train):
    if len(comp) == 1:
      assert x not in tables[comp[0]], 'duplicate one-table row'
      tables[comp[0]][x] = ex.target[1]
  return dict(tables)


@pytest.mark.parametrize('reverse', _DIRECTIONS)
def test_generated_statistics_match_reference(generated, reference, reverse):
  for name in lookup.FILE_NAMES:
    gen = _stats(generated[reverse][name], reverse)
    ref = _stats(reference[reverse][name], reverse)
    assert abs(gen['size'] - ref['size']) <= 0.02 * ref['size'], name
    assert abs(gen['n_compositions'] -
               ref['n_compositions']) <= 0.02 * ref['n_compositions'], name
    for key in ('source_len', 'target_len', 'tables', 'composition_lengths'):
      assert gen[key] == ref[key], (name, key)
  # Absolute numbers of the reference (generation_arguments.txt).
  sizes = {name: len(reference[reverse][name]) for name in lookup.FILE_NAMES}
  assert sizes == {'train': 9081, 'validation': 475, 'heldout_inputs': 2492,
                   **{f'longer_seen_{k}': 5000 for k in range(1, 6)}}
  assert _stats(reference[reverse]['train'], reverse)['tables'] == [
      f't{i}' for i in range(1, 9)]


@pytest.mark.parametrize('reverse', _DIRECTIONS)
@pytest.mark.parametrize('source', ('generated', 'reference'))
def test_tables_are_bijections_consistent_on_all_rows(
    generated, reference, reverse, source):
  files = (generated if source == 'generated' else reference)[reverse]
  tables = _reconstruct_tables(files['train'], reverse)
  inputs = lookup.bit_strings(3)
  assert sorted(tables) == [f't{i}' for i in range(1, 9)]
  for name, mapping in tables.items():
    assert sorted(mapping) == inputs, name
    assert sorted(mapping.values()) == inputs, f'{name} is not a bijection'
  for name, examples in files.items():
    for (x, comp), ex in zip(_rows(examples, reverse), examples):
      expected = [x]
      for t in comp:
        expected.append(tables[t][expected[-1]])
      assert list(ex.target) == expected, (name, ex)


def test_seed_123_reproduces_the_reference_tables(reference):
  for reverse in _DIRECTIONS:
    assert _reconstruct_tables(reference[reverse]['train'],
                               reverse) == lookup.make_tables(_REFERENCE_SEED)


@pytest.mark.parametrize('reverse', _DIRECTIONS)
@pytest.mark.parametrize('source', ('generated', 'reference'))
def test_heldout_data_is_not_trained_on(generated, reference, reverse, source):
  files = (generated if source == 'generated' else reference)[reverse]
  train_rows = set(_rows(files['train'], reverse))
  train_comps = {comp for _, comp in train_rows}
  heldout = _rows(files['heldout_inputs'], reverse)
  # Held-out inputs: the composition was trained on, the input was not.
  assert not set(heldout) & train_rows
  assert {comp for _, comp in heldout} <= train_comps
  assert collections.Counter(comp for _, comp in heldout).most_common(1)[0][
      1] == 2
  assert not set(_rows(files['validation'], reverse)) & train_rows
  # Held-out tables only ever appear alone in train.
  for _, comp in train_rows:
    assert len(comp) == 1 or not set(comp) & set(_HELDOUT_TABLES)
  for k in range(1, 6):
    comps = {comp for _, comp in _rows(files[f'longer_seen_{k}'], reverse)}
    assert all(set(c) <= set(_SEEN) and len(c) == 4 + k for c in comps)
    assert not comps & train_comps
    if k > 1:  # Each level extends the previous one by one table.
      previous = {c for _, c in _rows(files[f'longer_seen_{k - 1}'], reverse)}
      assert {c[:-1] for c in comps} <= previous
  # 4-table compositions never trained on (the 50 held-out compositions).
  longest_train = {c for c in train_comps if len(c) == 4}
  assert len(longest_train) == 6**4 - 50
  if source == 'generated':
    held_comps = {c for _, c in _rows(files['heldout_compositions'], reverse)}
    assert len(held_comps) == 50 and not held_comps & train_comps


def test_gold_attention_matches_column_3_on_every_forward_line(reference):
  examples = reference[False]
  n_checked = 0
  for name in lookup.FILE_NAMES:
    for ex in examples[name]:
      assert ex.gold_attention == lookup.gold_attention(
          len(ex.source) - 2, reverse=False), (name, ex)
      n_checked += 1
  assert n_checked == 9081 + 475 + 2492 + 5 * 5000
  # And the file really has the column (the reader did not fill it in).
  first = (_ref_dir(False) / 'train.tsv').read_text().splitlines()[0]
  assert first.split('\t')[2] == '0 1 2'


@pytest.mark.parametrize('reverse', _DIRECTIONS)
def test_gold_attention_points_at_the_token_that_made_each_output(
    generated, reference, reverse):
  for files in (generated[reverse], reference[reverse]):
    for examples in files.values():
      for ex in examples:
        x, comp = lookup.parse_source(ex.source, reverse=reverse)
        attended = [ex.source[i] for i in ex.gold_attention]
        assert attended == [x, *comp, '.'], ex


def test_reverse_generation_mirrors_forward(generated):
  for name, forward in generated[False].items():
    reverse = generated[True][name]
    assert [ex.target for ex in forward] == [ex.target for ex in reverse]
    assert _rows(forward, False) == _rows(reverse, True)


def test_generation_is_deterministic_per_seed():
  a = lookup.generate_files(reverse=False, seed=7)
  b = lookup.generate_files(reverse=False, seed=7)
  c = lookup.generate_files(reverse=False, seed=8)
  assert a == b
  assert a['train'] != c['train']
  assert lookup.make_tables(7) != lookup.make_tables(8)


def test_generation_is_fast():
  start = time.perf_counter()
  lookup.generate_files(reverse=True, seed=0)
  assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize('reverse', _DIRECTIONS)
def test_reading_and_generating_give_the_same_paper_splits(reverse):
  data_dir = str(_ref_dir(reverse))
  read = {s: lookup.load_split(s, reverse=reverse, seed=0, data_dir=data_dir)
          for s in lookup.SPLITS}
  made = {s: lookup.load_split(s, reverse=reverse, seed=0, data_dir=None)
          for s in lookup.SPLITS}
  assert tuple(read) == tuple(made) == lookup.SPLITS
  for split in lookup.SPLITS:
    assert len(read[split]) == _PAPER_SIZES[split], split
    assert len(made[split]) == _PAPER_SIZES[split], split
    r, m = _stats(read[split], reverse), _stats(made[split], reverse)
    for key in ('source_len', 'target_len', 'tables', 'composition_lengths'):
      assert r[key] == m[key], (split, key)
    assert all(ex.gold_attention is not None for ex in read[split])
  # dev = validation + 500 rows of longer_seen_1; test_long1 = the rest.
  long1 = lookup.read_file(data_dir, 'longer_seen_1', reverse=reverse)
  validation = lookup.read_file(data_dir, 'validation', reverse=reverse)
  assert read['dev'][:len(validation)] == validation
  dev_long = read['dev'][len(validation):]
  assert collections.Counter(dev_long + read['test_long1']) == (
      collections.Counter(long1))
  assert all(len(ex.source) == 7 for ex in dev_long)
  # The selection is deterministic in the seed, and depends on it.
  again = lookup.load_split('dev', reverse=reverse, seed=0, data_dir=data_dir)
  other = lookup.load_split('dev', reverse=reverse, seed=1, data_dir=data_dir)
  assert again == read['dev'] and other != read['dev']


@pytest.mark.parametrize('reverse', _DIRECTIONS)
def test_load_splits_reads_each_file_once_or_generates_once(reverse,
                                                            monkeypatch):
  data_dir = str(_ref_dir(reverse))
  one_by_one = {s: lookup.load_split(s, reverse=reverse, seed=2,
                                     data_dir=data_dir)
                for s in lookup.SPLITS}
  made_dev = lookup.load_split('dev', reverse=reverse, seed=2, data_dir=None)
  reads, generations = [], []
  read_file, generate_files = lookup.read_file, lookup.generate_files

  def counting_read(directory, name, **kwargs):
    reads.append(name)
    return read_file(directory, name, **kwargs)

  def counting_generate(**kwargs):
    generations.append(kwargs['seed'])
    return generate_files(**kwargs)

  monkeypatch.setattr(lookup, 'read_file', counting_read)
  monkeypatch.setattr(lookup, 'generate_files', counting_generate)
  wanted = lookup.SPLITS[::-1]
  read = lookup.load_splits(wanted, reverse=reverse, seed=2, data_dir=data_dir)
  assert tuple(read) == wanted
  assert read == one_by_one
  assert sorted(reads) == sorted(lookup.FILE_NAMES)
  made = lookup.load_splits(wanted, reverse=reverse, seed=2, data_dir=None)
  assert generations == [2]
  assert tuple(made) == wanted and made['dev'] == made_dev
  with pytest.raises(MonolocError, match="unknown Lookup split 'test'"):
    lookup.load_splits(('train', 'test'), reverse=reverse, seed=2,
                       data_dir=None)


def _write(path: pathlib.Path, lines: List[str]) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(''.join(line + '\n' for line in lines))


_GOOD_LINES = ['000 t1 .\t000 011\t0 1 2', '001 t1 t2 .\t001 001 100\t0 1 2 3']


@pytest.mark.parametrize('bad_line, fragment', [
    ('000 t1 .', 'expected 2 or 3 tab-separated columns'),
    ('000 t1 t2 .\t000 011', 'target has 2 tokens, expected 3'),
    ('000 t1\t000 011', "ending with '.'"),
    ('000 t1 .\t000 011\t0 x 2', 'attention column must hold integers'),
    ('000 t1 .\t000 011\t0 1', 'attention column must hold 3'),
    ('t1 000 .\t000 011', 'wrong direction'),
])
def test_malformed_line_names_file_and_line_number(tmp_path, bad_line,
                                                   fragment):
  path = tmp_path / 'train.tsv'
  _write(path, _GOOD_LINES + [bad_line])
  with pytest.raises(MonolocError) as info:
    lookup.load_split('train', reverse=False, seed=0, data_dir=str(tmp_path))
  message = str(info.value)
  assert f'{path}:3:' in message and fragment in message
  assert '\n' not in message


def test_good_small_file_reads(tmp_path):
  _write(tmp_path / 'train.tsv', _GOOD_LINES)
  examples = lookup.load_split('train', reverse=False, seed=0,
                               data_dir=str(tmp_path))
  assert examples == [
      Example(('000', 't1', '.'), ('000', '011'), (0, 1, 2)),
      Example(('001', 't1', 't2', '.'), ('001', '001', '100'), (0, 1, 2, 3)),
  ]
  _write(tmp_path / 'rev' / 'train.tsv', ['t2 t1 001 .\t001 001 100'])
  (rev,) = lookup.load_split('train', reverse=True, seed=0,
                             data_dir=str(tmp_path / 'rev'))
  assert rev.gold_attention == (2, 1, 0, 3)


def test_missing_empty_and_wrong_directories(tmp_path):
  with pytest.raises(MonolocError, match='does not exist.*train.tsv'):
    lookup.load_split('train', reverse=False, seed=0,
                      data_dir=str(tmp_path / 'nope'))
  with pytest.raises(MonolocError, match='is empty.*validation.tsv'):
    lookup.load_split('train', reverse=False, seed=0, data_dir=str(tmp_path))
  _write(tmp_path / 'train.tsv', _GOOD_LINES)
  with pytest.raises(MonolocError, match=r'longer_seen_1\.tsv.* not found'):
    lookup.load_split('dev', reverse=False, seed=0, data_dir=str(tmp_path))
  (tmp_path / 'validation.tsv').write_text('\n\n')
  _write(tmp_path / 'longer_seen_1.tsv', _GOOD_LINES * 251)    # 500 go to dev
  with pytest.raises(MonolocError, match=r'validation\.tsv: file is empty'):
    lookup.load_split('dev', reverse=False, seed=0, data_dir=str(tmp_path))
  _write(tmp_path / 'generation_arguments.txt', ['seed=123', 'reverse=True'])
  with pytest.raises(MonolocError, match='reverse=True data'):
    lookup.load_split('train', reverse=False, seed=0, data_dir=str(tmp_path))


def test_unknown_split_and_bad_seed():
  with pytest.raises(MonolocError, match='valid Lookup splits: dev, '):
    lookup.load_split('test', reverse=False, seed=0, data_dir=None)
  with pytest.raises(MonolocError, match='seed'):
    lookup.load_split('train', reverse=False, seed=-1, data_dir=None)


# ---------------------------------------------------------------------------
# Files too short for the paper's splits.
# ---------------------------------------------------------------------------
def _write_reference_layout(directory: pathlib.Path,
                            files: Dict[str, List[Example]],
                            short: str = '', rows: int = 0) -> pathlib.Path:
  """Writes `files` as reference TSVs; `short`.tsv keeps only its first `rows`."""
  for name in lookup.FILE_NAMES:
    examples = files[name][:rows] if name == short else files[name]
    _write(directory / f'{name}.tsv',
           [f"{' '.join(ex.source)}\t{' '.join(ex.target)}\t"
            f"{' '.join(map(str, ex.gold_attention))}" for ex in examples])
  return directory


@pytest.mark.parametrize('name', lookup.FILE_NAMES)
def test_a_file_too_short_for_its_splits_is_one_line_naming_it(tmp_path, generated,
                                                               name):
  fewest = 501 if name == 'longer_seen_1' else 1
  data_dir = _write_reference_layout(tmp_path, generated[False], name, fewest - 1)
  with pytest.raises(MonolocError) as info:
    lookup.load_splits(lookup.SPLITS, reverse=False, seed=0, data_dir=str(data_dir))
  message = str(info.value)
  assert '\n' not in message
  if name == 'longer_seen_1':
    assert message == (
        f'Lookup: {data_dir}/longer_seen_1.tsv has 500 rows, too few: 500 of its rows '
        'go to the dev split and the others are test_long1, so it needs at least 501 '
        '(the reference file has 5000)')
  else:
    assert message == f'{data_dir}/{name}.tsv: file is empty (no data lines)'
  # One row more is enough: every split has an example.
  _write_reference_layout(tmp_path, generated[False], name, fewest)
  splits = lookup.load_splits(lookup.SPLITS, reverse=False, seed=0,
                              data_dir=str(data_dir))
  assert all(splits.values())
  if name == 'longer_seen_1':
    assert len(splits['test_long1']) == 1 and len(splits['dev']) == (
        len(generated[False]['validation']) + 500)
  assert lookup.min_rows(name) == fewest


def test_monoloc_train_on_a_short_longer_seen_1_is_one_line(tmp_path, generated):
  """The user's case: longer_seen_1.tsv of 500 rows left test_long1 empty, and the
  run trained and then ended in `ValueError: max() arg is an empty sequence`."""
  data_dir = _write_reference_layout(tmp_path / 'data', generated[False],
                                     'longer_seen_1', 500)
  proc = subprocess.run(
      [sys.executable, '-m', 'monoloc_jax.main', '--task=lookup', '--model=onestep',
       f'--data_dir={data_dir}', f'--workdir={tmp_path / "w"}',
       '--config.train_size=64', '--config.eval_size=16', '--config.max_epochs=1',
       '--config.progress=False'],
      capture_output=True, text=True, timeout=600)
  assert proc.returncode == 2, proc.stderr
  assert proc.stderr.splitlines() == [
      f'error: Lookup: {data_dir}/longer_seen_1.tsv has 500 rows, too few: 500 of its '
      'rows go to the dev split and the others are test_long1, so it needs at least '
      '501 (the reference file has 5000)'], proc.stderr
