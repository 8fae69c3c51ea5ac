"""Writes this library's data for a task in the authors' `processed_data/` format.

The authors' PyTorch code (JRC1995/MonotonicLocationAttention) reads
`processed_data/<dataset>/{train,dev_normal,test_<key>}.jsonl` and `metadata.pkl`.
This script writes those files from `monoloc_jax.tasks`, so that their code and
ours train and test on the *same* examples:

  python experiments/authors_code/export_data.py --task=copy --seed=0 \
      --out=../refcode/processed_data
  python experiments/authors_code/export_data.py --task=lookup \
      --data_dir=../shared/data/lookup/forward --out=../refcode/processed_data

Keep the authors' code outside this repository (fetch it, check it out beside
the repo, give it its own virtualenv with torch; see experiments/authors_code/
README.md). Nothing of their code is used here: only their file format, which
is one JSON object per line with the keys src, trg, src_vec, ptr_src_vec,
oov_num, trg_vec and label, targets ending in `<eos>`, and a pickled
{'dev_keys', 'test_keys', 'vocab2idx'} whose vocabulary ends with
<sos>, <unk>, <eos>, <pad>.

--source_eos appends a literal `<eos>` token to every source, as the authors'
DeDupe preprocessing does (their `process_dedupe.py`); it is on by default
for dedupe (`--source_eos=auto`).
"""

import json
import pathlib
import pickle
import sys
from typing import Dict, List, Sequence, Tuple

from absl import app
from absl import flags

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from monoloc_jax import errors  # pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax import tasks  # pylint: disable=g-import-not-at-top,wrong-import-position

# Our task slug -> the authors' --dataset name.
DATASETS = {
    'copy': 'copy', 'reverse_copy': 'rc', 'lookup': 'llt', 'reverse_lookup': 'rllt',
    'recopy': 'fpc', 'reverse_recopy': 'rpc', 'inv_recopy': 'fgc',
    'inv_reverse_recopy': 'rgc', 'dedupe': 'dedup', 'posretrieve': 'posretrieve',
    'scan_length': 'scan_length', 'cfq_length': 'cfq_length',
}
SPECIALS = ('<sos>', '<unk>', '<eos>', '<pad>')
SOURCE_EOS_TASKS = ('dedupe',)   # the authors' preprocessing ends these sources with <eos>

_TASK = flags.DEFINE_enum('task', None, sorted(DATASETS), 'Task to export.')
_SEED = flags.DEFINE_integer('seed', 0, 'Data seed of generated tasks (Lookup: 123 = the '
                             'reference tables).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Task files (SCAN, CFQ, Lookup); '
                                "'' = generate in code.")
_OUT = flags.DEFINE_string('out', None, 'The processed_data folder of the authors\' checkout; '
                           'files go to OUT/<their dataset name>/.')
_SOURCE_EOS = flags.DEFINE_enum('source_eos', 'auto', ['auto', 'yes', 'no'],
                                "Append <eos> to each source ('auto': for "
                                f"{', '.join(SOURCE_EOS_TASKS)} only).")


def split_key(split: str) -> Tuple[str, str]:
  """('dev' | 'test', the authors' key) of one of our split names."""
  if split == 'dev':
    return 'dev', 'normal'
  name = split[len('test_'):]
  return 'test', 'IID' if name == 'iid' else (f'long{name}' if name.isdigit() else name)


def vocabulary(examples: Sequence[tasks.Example]) -> Dict[str, int]:
  """Sorted tokens of the training split, then the authors' four special tokens."""
  tokens = sorted({t for ex in examples for t in (*ex.source, *ex.target)} - set(SPECIALS))
  return {t: i for i, t in enumerate(list(tokens) + list(SPECIALS))}


def record(src: List[str], trg: List[str], vocab2idx: Dict[str, int]) -> Dict[str, object]:
  unk = vocab2idx['<unk>']
  src_vec = [vocab2idx.get(t, unk) for t in src]
  trg_vec = [vocab2idx.get(t, unk) for t in trg]
  return {'src': src, 'trg': trg, 'src_vec': src_vec, 'ptr_src_vec': list(src_vec),
          'oov_num': 0, 'trg_vec': trg_vec, 'label': list(trg_vec)}


def export(task: str, seed: int, data_dir: str, out: pathlib.Path, source_eos: bool) -> pathlib.Path:
  names = [s for s in tasks.splits(task) if s == 'train' or s == 'dev' or s.startswith('test_')]
  data = tasks.load_splits(task, tuple(names), seed=seed, data_dir=data_dir or None)
  vocab2idx = vocabulary(data['train'])
  folder = out / DATASETS[task]
  folder.mkdir(parents=True, exist_ok=True)
  keys = {'dev': [], 'test': []}
  for split in names:
    if split == 'train':
      path = folder / 'train.jsonl'
    else:
      kind, key = split_key(split)
      keys[kind].append(key)
      path = folder / f'{kind}_{key}.jsonl'
    with open(path, 'w', encoding='utf-8') as f:
      for ex in data[split]:
        src = list(ex.source) + (['<eos>'] if source_eos else [])
        f.write(json.dumps(record(src, list(ex.target) + ['<eos>'], vocab2idx)) + '\n')
  with open(folder / 'metadata.pkl', 'wb') as f:
    pickle.dump({'dev_keys': keys['dev'], 'test_keys': keys['test'], 'vocab2idx': vocab2idx}, f)
  return folder


def main(argv):
  del argv
  eos = {'yes': True, 'no': False}.get(_SOURCE_EOS.value, _TASK.value in SOURCE_EOS_TASKS)
  folder = export(_TASK.value, _SEED.value, _DATA_DIR.value, pathlib.Path(_OUT.value), eos)
  print(f'wrote {folder} (source <eos>: {eos})')


if __name__ == '__main__':
  flags.mark_flags_as_required(['task', 'out'])
  app.run(errors.one_line_errors(main))
