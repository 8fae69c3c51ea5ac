"""Tests of the SCAN length-split and CFQ length-split readers."""

import io
import json
import pathlib
import re
import urllib.error
import urllib.request

import pytest

from monoloc_jax import tasks
from monoloc_jax.errors import MonolocError
from monoloc_jax.tasks import cfq
from monoloc_jax.tasks import scan
from monoloc_jax.tasks.types import Example

_SCAN_REFERENCE = (pathlib.Path(__file__).resolve().parents[1].parent /
                   'shared' / 'data' / 'scan' / 'length_split')


def _write(path: pathlib.Path, text: str) -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text, encoding='utf-8')
  return path


# ----------------------------------------------------------------------------
# SCAN.
# ----------------------------------------------------------------------------


@pytest.fixture(scope='module')
def scan_reference():
  if not _SCAN_REFERENCE.is_dir():
    pytest.skip(f'reference SCAN data not found at {_SCAN_REFERENCE} '
                '(expected the shared data directory next to the repository)')
  return {split: scan.load_split(split, data_dir=str(_SCAN_REFERENCE))
          for split in scan.SPLITS}


def test_scan_reference_sizes_and_lengths(scan_reference):
  sizes = {s: len(v) for s, v in scan_reference.items()}
  assert sizes == {'train': 13070, 'dev': 3920, 'test': 3920}
  target_lengths = {s: (min(len(e.target) for e in v),
                        max(len(e.target) for e in v))
                    for s, v in scan_reference.items()}
  # The length split: train/dev actions have at most 22 tokens, test 24-48.
  assert target_lengths == {'train': (1, 22), 'dev': (2, 22), 'test': (24, 48)}
  assert {s: max(len(e.source) for e in v)
          for s, v in scan_reference.items()} == {'train': 9, 'dev': 9,
                                                  'test': 9}
  # Leading spaces of the test file are not tokens.
  assert scan_reference['test'][0].source[:2] == ('run', 'around')
  assert all(e.gold_attention is None for e in scan_reference['train'])


def test_tasks_load_splits_reads_each_scan_file_once(tmp_path, monkeypatch):
  _write(tmp_path / 'tasks_train_length.txt', 'jump\tI_JUMP\nwalk\tI_WALK\n')
  _write(tmp_path / 'tasks_validation_length.txt', 'run\tI_RUN\n')
  _write(tmp_path / 'tasks_test_length.txt', 'look twice\tI_LOOK I_LOOK\n')
  reads = []
  real = scan.read_file
  monkeypatch.setattr(scan, 'read_file',
                      lambda path: reads.append(path.name) or real(path))
  got = tasks.load_splits('scan_length', ('test', 'train', 'dev'),
                          data_dir=tmp_path)
  assert sorted(reads) == sorted(scan.SPLIT_FILES.values())
  assert got == {
      'test': [Example(('look', 'twice'), ('I_LOOK', 'I_LOOK'))],
      'train': [Example(('jump',), ('I_JUMP',)), Example(('walk',),
                                                         ('I_WALK',))],
      'dev': [Example(('run',), ('I_RUN',))],
  }
  assert list(got) == ['test', 'train', 'dev']
  with pytest.raises(MonolocError, match=r"unknown SCAN split 'val'"):
    scan.load_splits(('train', 'val'), data_dir=str(tmp_path))


def test_scan_reads_the_original_in_out_format(tmp_path):
  _write(tmp_path / 'tasks_train_length.txt',
         'IN: jump twice OUT: I_JUMP I_JUMP\n'
         'IN: turn left OUT: I_TURN_LEFT\n\n')
  _write(tmp_path / 'tasks_test_length.txt',
         'walk\tI_WALK\n')  # Formats are detected per file.
  assert scan.load_split('train', data_dir=str(tmp_path)) == [
      Example(('jump', 'twice'), ('I_JUMP', 'I_JUMP')),
      Example(('turn', 'left'), ('I_TURN_LEFT',)),
  ]
  assert scan.load_split('test', data_dir=str(tmp_path)) == [
      Example(('walk',), ('I_WALK',))]
  # The original release has no validation file: a clear error for dev.
  with pytest.raises(MonolocError) as info:
    scan.load_split('dev', data_dir=str(tmp_path))
  message = str(info.value)
  assert 'tasks_validation_length.txt' in message and 'missing' in message
  assert "source='machine_tasks'" in message and '\n' not in message


@pytest.mark.parametrize('text, line, fragment', [
    ('walk\tI_WALK\njump I_JUMP\n', 2, 'columns), got 1'),
    ('walk\tI_WALK\n\njump\tI_JUMP\tX\n', 3, 'got 3'),
    ('walk\tI_WALK\nwalk\t \n', 2, 'empty command or action'),
    ('IN: walk OUT: I_WALK\nIN: jump I_JUMP\n', 2, 'IN: <command> OUT:'),
    ('IN: walk OUT: I_WALK\nIN: OUT: I_JUMP\n', 2, 'empty command'),
    ('walk I_WALK\n', 1, 'neither'),
])
def test_scan_malformed_line_names_file_and_line(tmp_path, text, line,
                                                 fragment):
  path = _write(tmp_path / 'tasks_train_length.txt', text)
  with pytest.raises(MonolocError) as info:
    scan.load_split('train', data_dir=str(tmp_path))
  assert f'{path}:{line}: malformed line' in str(info.value)
  assert fragment in str(info.value)


def test_scan_missing_dir_empty_file_and_unknown_split(tmp_path):
  with pytest.raises(MonolocError, match='does not exist.*tasks_train_length'):
    scan.load_split('train', data_dir=str(tmp_path / 'absent'))
  with pytest.raises(MonolocError, match='no data directory given'):
    scan.load_split('train', data_dir=None)
  with pytest.raises(MonolocError, match='is empty'):
    scan.load_split('train', data_dir=str(tmp_path))
  _write(tmp_path / 'tasks_test_length.txt', 'walk\tI_WALK\n')
  with pytest.raises(MonolocError, match=r'tasks_train_length\.txt.*not found'):
    scan.load_split('train', data_dir=str(tmp_path))
  _write(tmp_path / 'tasks_train_length.txt', '\n  \n')
  with pytest.raises(MonolocError, match='file is empty'):
    scan.load_split('train', data_dir=str(tmp_path))
  with pytest.raises(MonolocError, match='valid SCAN splits: dev, test, train'):
    scan.load_split('validation', data_dir=str(tmp_path))


def test_scan_download_offline_gives_a_clear_message(tmp_path, monkeypatch):
  def offline(*args, **kwargs):
    raise urllib.error.URLError('no network')
  monkeypatch.setattr(urllib.request, 'urlopen', offline)
  dest = tmp_path / 'scan'
  with pytest.raises(MonolocError) as info:
    scan.download(str(dest))
  message = str(info.value)
  assert 'cannot download' in message and 'no network' in message
  assert 'tasks_train_length.txt, tasks_test_length.txt' in message
  assert str(dest) in message and 'IN: <command> OUT: <actions>' in message
  assert '\n' not in message
  assert not list(dest.iterdir())  # Nothing half-written.


def test_scan_download_writes_loadable_files(tmp_path, monkeypatch):
  payloads = {
      'tasks_train_length.txt': b'IN: walk OUT: I_WALK\n',
      'tasks_test_length.txt': b'IN: walk twice OUT: I_WALK I_WALK\n',
  }
  seen_urls = []

  def fake_urlopen(url, timeout=None):
    del timeout
    seen_urls.append(url)
    return io.BytesIO(payloads[url.rsplit('/', 1)[1]])
  monkeypatch.setattr(urllib.request, 'urlopen', fake_urlopen)
  out = scan.download(str(tmp_path / 'd'))
  assert seen_urls == [
      'https://raw.githubusercontent.com/brendenlake/SCAN/master/length_split/'
      f'{name}' for name in payloads]
  assert scan.load_split('test', data_dir=out) == [
      Example(('walk', 'twice'), ('I_WALK', 'I_WALK'))]
  assert sorted(p.name for p in pathlib.Path(out).iterdir()) == sorted(payloads)
  with pytest.raises(MonolocError, match='valid SCAN download sources'):
    scan.download(out, source='nowhere')


# ----------------------------------------------------------------------------
# CFQ.
# ----------------------------------------------------------------------------

# Records in the release's format (extra fields as in dataset.json).
_RECORDS = [
    {
        'questionPatternModEntities': "Did M1 's star , M2 , marry M0",
        'sparqlPatternModEntities':
            'SELECT count(*) WHERE {\n'
            'M1 ns:film.film.starring/ns:film.performance.actor M2 .\n'
            'M2 ns:people.person.spouse_s/ns:people.marriage.spouse M0 .\n'
            'FILTER ( M2 != M0 )\n}',
        'question': "Did Titanic 's star , Kate Winslet , marry Sam Mendes",
        'complexityMeasures': {'recursionDepth': 14,
                               'sparqlMaximumChainLength': 2},
    },
    {
        'questionPatternModEntities':
            "What did M0 's sibling produce and write",
        'sparqlPatternModEntities':
            'SELECT DISTINCT ?x0 WHERE {\n'
            '?x0 ns:film.film.produced_by ?x1 .\n'
            '?x0 ns:film.film.written_by ?x1 .\n'
            '?x1 ns:people.person.sibling_s/'
            'ns:people.sibling_relationship.sibling M0 .\n'
            'FILTER ( ?x1 != M0 )\n}',
    },
    {
        'questionPatternModEntities':
            "Was a screenwriter 's French-speaking parent M0",
        'sparqlPatternModEntities':
            'SELECT count(*) WHERE {\n'
            '?x0 ns:people.person.children M0 .\n'
            '?x0 ns:people.person.languages m.064_8sq .\n'
            '?x1 a ns:film.writer .\n}',
    },
    {
        'questionPatternModEntities': 'Who directed M0 and M1',
        'sparqlPatternModEntities':
            'SELECT DISTINCT ?x0 WHERE {\n'
            '?x0 ns:film.director.film M0 .\n'
            '?x0 ns:film.director.film M1\n}',
    },
    {
        'questionPatternModEntities': 'Did M0 edit , direct , and produce M1',
        'sparqlPatternModEntities':
            'SELECT count(*) WHERE {\n'
            'M0 ns:film.editor.film M1 .\n'
            'M0 ns:film.director.film M1 .\n'
            'M0 ns:film.producer.film|ns:film.production_company.films M1\n}',
    },
    {
        'questionPatternModEntities': 'Who influenced M0 ( and M1 ) ?',
        'sparqlPatternModEntities':
            'SELECT DISTINCT ?x0 WHERE {\n'
            '?x0 ns:influence.influence_node.influenced M0 .\n'
            '?x0 ns:influence.influence_node.influenced M1\n}',
    },
]
_SPLIT_INDICES = {'trainIdxs': [4, 0, 3], 'devIdxs': [2], 'testIdxs': [1, 5]}

_EXPECTED = {
    0: Example(
        tuple("Did M1 ' s star , M2 , marry M0".split()),
        tuple('SELECT count ( * ) WHERE { '
              'M1 film.film.starring/ns:film.performance.actor M2 . '
              'M2 people.person.spouse_s/ns:people.marriage.spouse M0 . '
              'FILTER ( M2 != M0 ) }'.split())),
    1: Example(
        tuple("What did M0 ' s sibling produce and write".split()),
        tuple('SELECT DISTINCT ?x0 WHERE { '
              '?x0 film.film.produced_by ?x1 . '
              '?x0 film.film.written_by ?x1 . '
              '?x1 people.person.sibling_s/'
              'ns:people.sibling_relationship.sibling M0 . '
              'FILTER ( ?x1 != M0 ) }'.split())),
    2: Example(
        tuple("Was a screenwriter ' s French - speaking parent M0".split()),
        tuple('SELECT count ( * ) WHERE { '
              '?x0 people.person.children M0 . '
              '?x0 people.person.languages m_064_8sq . '
              '?x1 a film.writer . }'.split())),
    3: Example(
        ('Who', 'directed', 'M0', 'and', 'M1'),
        tuple('SELECT DISTINCT ?x0 WHERE { ?x0 film.director.film M0 . '
              '?x0 film.director.film M1 }'.split())),
    4: Example(
        tuple('Did M0 edit , direct , and produce M1'.split()),
        tuple('SELECT count ( * ) WHERE { M0 film.editor.film M1 . '
              'M0 film.director.film M1 . '
              'M0 film.producer.film|ns:film.production_company.films M1 }'
              .split())),
    5: Example(
        ('Who', 'influenced', 'M0', '(', 'and', 'M1', ')', '?'),
        tuple('SELECT DISTINCT ?x0 WHERE { '
              '?x0 influence.influence_node.influenced M0 . '
              '?x0 influence.influence_node.influenced M1 }'.split())),
}


def _cfq_release(root: pathlib.Path, records=None, indices=None,
                 split_name: str = 'length_split') -> pathlib.Path:
  _write(root / 'dataset.json',
         json.dumps(_RECORDS if records is None else records, indent=2))
  _write(root / 'splits' / f'{split_name}.json',
         json.dumps(_SPLIT_INDICES if indices is None else indices))
  return root


def test_cfq_splits_match_hand_tokenised_records(tmp_path):
  root = str(_cfq_release(tmp_path))
  for split, key in (('train', 'trainIdxs'), ('dev', 'devIdxs'),
                     ('test', 'testIdxs')):
    assert cfq.load_split(split, data_dir=root) == [
        _EXPECTED[i] for i in _SPLIT_INDICES[key]], split
  everything = cfq.load_splits(cfq.SPLITS, data_dir=root)
  assert [len(everything[s]) for s in cfq.SPLITS] == [3, 1, 2]


def test_tasks_load_splits_streams_dataset_json_once(tmp_path, monkeypatch):
  root = _cfq_release(tmp_path)
  passes = []
  real = cfq.iter_records
  monkeypatch.setattr(cfq, 'iter_records',
                      lambda path: passes.append(path) or real(path))
  got = tasks.load_splits('cfq_length', ('test', 'train', 'dev'),
                          data_dir=root)
  assert passes == [root / 'dataset.json']
  assert list(got) == ['test', 'train', 'dev']
  for split, key in (('train', 'trainIdxs'), ('dev', 'devIdxs'),
                     ('test', 'testIdxs')):
    assert got[split] == [_EXPECTED[i] for i in _SPLIT_INDICES[key]], split


def test_cfq_release_split_name_is_accepted(tmp_path):
  root = str(_cfq_release(tmp_path, split_name='query_complexity_split'))
  assert cfq.load_split('dev', data_dir=root) == [_EXPECTED[2]]


def test_cfq_tokenisers_follow_the_official_preprocessing():
  assert cfq.tokenize_question('a-b,c"d\'s  (x)?') == (
      'a', '-', 'b', ',', 'c', '"', 'd', "'", 's', '(', 'x', ')', '?')
  assert cfq.tokenize_query(
      'SELECT count(*) WHERE {\\n?x0 ns:a.b m.01 .\\n}') == (
          'SELECT', 'count', '(', '*', ')', 'WHERE', '{', '?x0', 'a.b', 'm_01',
          '.', '}')


@pytest.mark.parametrize('chunk_chars', [1, 2, 3, 5, 17, 4096])
def test_cfq_streaming_reader_matches_json_load(tmp_path, chunk_chars):
  data = [{'a': 'x,]"\\n', 'n': 12345}, 678, [1, 2.5e3], 'str', None, True, {}]
  path = _write(tmp_path / 'd.json', json.dumps(data, indent=1))
  assert [v for _, v in cfq.iter_records(path, chunk_chars)] == data
  compact = _write(tmp_path / 'c.json', json.dumps(data))
  assert [v for _, v in cfq.iter_records(compact, chunk_chars)] == data
  empty_list = _write(tmp_path / 'e.json', ' [ ] ')
  assert not list(cfq.iter_records(empty_list, chunk_chars))


@pytest.mark.parametrize('text, line', [
    ('[\n {"a": 1},\n {"a": 2\n]\n', 4),
    ('[\n {"a": 1}\n {"a": 2}\n]', 3),
    ('[\n {"a": 1},\n', 3),
    ('{"a": 1}', 1),
    ('[1, 2]\n[3]', 2),
    ('[ ]\n x', 2),
    ('[\n 1, 2,\n]', 3),
])
def test_cfq_malformed_dataset_json_names_file_and_line(tmp_path, text, line):
  root = _cfq_release(tmp_path)
  path = _write(root / 'dataset.json', text)
  for chunk_chars in (3, 1 << 20):
    with pytest.raises(MonolocError) as info:
      list(cfq.iter_records(path, chunk_chars))
    assert f'{path}:{line}: malformed JSON' in str(info.value), chunk_chars
  # Through the loader, the first problem in file order is reported (here
  # possibly a record that is not a CFQ record), naming the file.
  with pytest.raises(MonolocError, match=re.escape(str(path))):
    cfq.load_split('train', data_dir=str(root))


def test_cfq_errors(tmp_path):
  with pytest.raises(MonolocError, match='does not exist.*dataset.json'):
    cfq.load_split('train', data_dir=str(tmp_path / 'absent'))
  root = _cfq_release(tmp_path / 'release')
  (root / 'dataset.json').unlink()
  with pytest.raises(MonolocError, match=r"dataset\.json' not found"):
    cfq.load_split('train', data_dir=str(root))
  root = _cfq_release(tmp_path / 'no_split')
  (root / 'splits' / 'length_split.json').unlink()
  with pytest.raises(MonolocError,
                     match=r'no split file.*splits/length_split\.json or '
                     r'splits/query_complexity_split\.json'):
    cfq.load_split('train', data_dir=str(root))
  root = _cfq_release(tmp_path / 'bad_split')
  split_path = _write(root / 'splits' / 'length_split.json',
                      '{"trainIdxs": [0],\n "devIdxs": [1,]}')
  with pytest.raises(MonolocError, match=f'{split_path}:2: malformed JSON'):
    cfq.load_split('train', data_dir=str(root))
  root = _cfq_release(tmp_path / 'keys', indices={'trainIdxs': [0]})
  with pytest.raises(MonolocError, match="missing list 'devIdxs'"):
    cfq.load_split('train', data_dir=str(root))
  root = _cfq_release(tmp_path / 'range', indices={
      'trainIdxs': [0], 'devIdxs': [1], 'testIdxs': [2, 6]})
  with pytest.raises(MonolocError,
                     match=r'testIdxs\[1\] = 6 is out of range .*6 records'):
    cfq.load_split('test', data_dir=str(root))
  root = _cfq_release(tmp_path / 'negative', indices={
      'trainIdxs': [-1], 'devIdxs': [1], 'testIdxs': [2]})
  with pytest.raises(MonolocError, match='not a non-negative integer'):
    cfq.load_split('dev', data_dir=str(root))
  broken = _RECORDS[:2] + [{'questionPatternModEntities': 'x'}]
  root = _cfq_release(tmp_path / 'field', records=broken)
  with pytest.raises(MonolocError,
                     match="record 2 lacks .*'sparqlPatternModEntities'"):
    cfq.load_split('dev', data_dir=str(root))
  with pytest.raises(MonolocError, match='valid CFQ splits: dev, test, train'):
    cfq.load_split('validation', data_dir=str(root))
