"""Runs the authors' PyTorch code on this library's data, resumably, one unit at a time.

A unit is one seed (the authors' `--initial_time k --times k+1`) of one
(task, variant) run. Each unit trains in its own copy of the authors' checkout
(their temporary checkpoint path does not depend on the seed), on the data
`export_data.py` writes from `monoloc_jax.tasks`, with their config unchanged
(100 epochs, patience 50) unless --epochs / --patience say otherwise:

  python experiments/authors_code/run.py --refcode=../refcode --workdir=../refruns \
      --runs=copy/onestep_minus_sigmoid,recopy/onestep_minus_step3 --seeds=0,1,2
  python experiments/authors_code/run.py --refcode=../refcode --workdir=../refruns \
      --runs=copy/onestep_minus_sigmoid --seeds=0,1,2 --collect   # results/authors_code/

A killed unit resumes from the authors' end-of-epoch checkpoint
(`--load_checkpoint`; their code does not restore the lr scheduler's state, which
is recorded in the unit's JSON). A finished unit (their `_test.txt` written, or the
seed already collected into results/authors_code/ with the same budget on an
earlier machine, whose workdir is gone) is skipped. `--refcode` is a checkout of
JRC1995/MonotonicLocationAttention with a virtualenv holding torch, tqdm, nltk and
jsonlines at `<refcode>/.venv` (see experiments/authors_code/README.md). Nothing of
their code is in this repo.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from absl import app
from absl import flags

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import export_data  # pylint: disable=g-import-not-at-top,wrong-import-position
import grid as grids_lib  # pylint: disable=g-import-not-at-top,wrong-import-position  # experiments/grid.py

from monoloc_jax import errors  # pylint: disable=g-import-not-at-top,wrong-import-position

# Our variant slug -> the authors' --model name (their readme's mapping).
MODELS = {
    'content': 'BiGRU', 'relative': 'BiGRUrel', 'bi_relative': 'BiGRUrel_mixdir',
    'bi_rope': 'BiGRUrope_mixdir', 'locattn_s': 'BiGRU_locattn_simple',
    'locattn': 'BiGRU_locattn', 'mix_locattn_s': 'BiGRU_mixattn_simple',
    'mix_locattn': 'BiGRU_mixattn', 'mix_locattn_s_pr': 'BiGRU_mixattn_simplePR',
    'onestep': 'BiGRU_OneStep', 'mix_onestep': 'BiGRU_MixOneStep',
    'mix_onestep_pr': 'BiGRU_MixOneStepPR', 'mono': 'BiGRU_MonoAttn',
    'mix_mono': 'BiGRU_MixMonoAttn', 'mix_mono_pr': 'BiGRU_MixMonoAttnPR',
    'rmono': 'BiGRU_RMonoAttn', 'mix_rmono': 'BiGRU_MixRMonoAttn',
    'mix_rmono_pr': 'BiGRU_MixRMonoAttnPR', 'onestep_minus_step2': 'BiGRU_AblationStep',
    'onestep_minus_step3': 'BiGRU_SoftStairStep', 'onestep_minus_sigmoid': 'BiGRU_FreeStep',
}
LOOKUP_FILES = {'lookup': 'forward', 'reverse_lookup': 'reverse'}

_REFCODE = flags.DEFINE_string('refcode', '../refcode', 'Checkout of the authors\' code, '
                               'with its virtualenv at <refcode>/.venv.')
_WORKDIR = flags.DEFINE_string('workdir', '../refruns', 'One folder per unit goes here.')
_RUNS = flags.DEFINE_list('runs', [], 'task/variant runs, e.g. copy/onestep_minus_sigmoid.')
_SEEDS = flags.DEFINE_list('seeds', ['0'], 'Seeds (the authors\' "time" index).')
_EPOCHS = flags.DEFINE_integer('epochs', 0, 'Edit their config\'s epochs (0 = unchanged, 100).')
_PATIENCE = flags.DEFINE_integer('patience', 0, 'Edit their early_stop_patience (0 = unchanged).')
_DATA_SEED = flags.DEFINE_integer('data_seed', 0, 'Data seed of generated tasks.')
_SHARED = flags.DEFINE_string('shared', str(REPO.parent / 'shared'), 'The shared data folder '
                              '(Lookup and SCAN files).')
_COLLECT = flags.DEFINE_bool('collect', False, 'Write results/authors_code/<task>/<variant>'
                             '.json from the finished units instead of training.')
_RESULTS = flags.DEFINE_string('results_dir', str(REPO / 'results'), 'Where --collect writes.')
_IF_SPLIT = flags.DEFINE_bool('if_split', False, "Train the given seeds of a run only if its "
                              'collected seeds 0 and 1 disagree on the mark (solved / partial / '
                              'failed) at a compared length (grid.compared_splits): a third '
                              'seed where the first two split.')


def unit_dir(task: str, variant: str, seed: int) -> pathlib.Path:
  tag = f'e{_EPOCHS.value}p{_PATIENCE.value}' if _EPOCHS.value or _PATIENCE.value else 'paper'
  return pathlib.Path(_WORKDIR.value).resolve() / f'{task}.{variant}.{tag}.seed{seed}'


def data_dir_of(task: str) -> str:
  if task in LOOKUP_FILES:
    return str(pathlib.Path(_SHARED.value) / 'data' / 'lookup' / LOOKUP_FILES[task])
  if task == 'scan_length':
    return str(pathlib.Path(_SHARED.value) / 'data' / 'scan' / 'length_split')
  return ''


def edit_config(path: pathlib.Path) -> None:
  text = path.read_text()
  if _EPOCHS.value:
    text = re.sub(r'self\.epochs = \d+', f'self.epochs = {_EPOCHS.value}', text)
  if _PATIENCE.value:
    text = re.sub(r'self\.early_stop_patience = \d+',
                  f'self.early_stop_patience = {_PATIENCE.value}', text)
  path.write_text(text)


def prepare(task: str, variant: str, seed: int) -> pathlib.Path:
  d = unit_dir(task, variant, seed)
  dataset = export_data.DATASETS[task]
  if not (d / 'train.py').exists():
    tmp = d.with_name(d.name + '.tmp')
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(_REFCODE.value, tmp, ignore=shutil.ignore_patterns('.git', '.venv',
                                                                       'processed_data'))
    export_data.export(task, _DATA_SEED.value, data_dir_of(task), tmp / 'processed_data',
                       task in export_data.SOURCE_EOS_TASKS)
    edit_config(tmp / 'configs' / f'{dataset}_configs.py')
    tmp.rename(d)
  return d


def final_file(d: pathlib.Path, task: str, variant: str) -> pathlib.Path:
  return d / 'experiments' / 'final_results' / (
      f'{export_data.DATASETS[task]}_{MODELS[variant]}_seq2seq_test.txt')


def budget_label() -> str:
  """The budget a collected run is filed under (their config's, unless edited)."""
  return (f'{_EPOCHS.value or 100} epochs, patience {_PATIENCE.value or 50}' +
          ('' if _EPOCHS.value or _PATIENCE.value else " (the paper's; their config unchanged)"))


def collected_units(path: pathlib.Path, budget: str) -> Dict[int, Dict[str, Any]]:
  """seed -> unit of `path`'s run with this budget (finished on this or an earlier machine)."""
  if not path.exists():
    return {}
  return {u['seed']: u for run in json.loads(path.read_text()).get('runs', [])
          if run.get('budget') == budget for u in run['seeds']}


def collected_seeds(path: pathlib.Path, budget: str) -> List[int]:
  """The seeds `collected_units` holds, ascending."""
  return sorted(collected_units(path, budget))


def results_path(task: str, variant: str) -> pathlib.Path:
  return pathlib.Path(_RESULTS.value) / 'authors_code' / task / f'{variant}.json'


def run_unit(task: str, variant: str, seed: int) -> None:
  if seed in collected_seeds(results_path(task, variant), budget_label()):
    print(f'{task}/{variant}/seed{seed}: done (collected in {results_path(task, variant)})',
          flush=True)
    return
  d = prepare(task, variant, seed)
  if final_file(d, task, variant).exists():
    print(f'{task}/{variant}/seed{seed}: done', flush=True)
    return
  ckpt = d / 'experiments' / 'checkpoints' / (
      f'{export_data.DATASETS[task]}_{MODELS[variant]}_seq2seq.pt')
  cmd = [str(pathlib.Path(_REFCODE.value).resolve() / '.venv' / 'bin' / 'python'), 'train.py',
         '--model', MODELS[variant], '--dataset', export_data.DATASETS[task], '--device', 'cpu',
         '--initial_time', str(seed), '--times', str(seed + 1), '--no_display']
  if ckpt.exists():
    cmd.append('--load_checkpoint')
  env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1',
             TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD='1')
  print(f'{task}/{variant}/seed{seed}: {" ".join(cmd[1:])} in {d}', flush=True)
  t0 = time.time()
  with open(d / 'run.log', 'a', encoding='utf-8') as log:
    log.write(f'\n=== {time.ctime()} {" ".join(cmd)}\n')
    log.flush()
    proc = subprocess.run(cmd, cwd=d, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
  wall = time.time() - t0
  with open(d / 'wall_s.txt', 'a', encoding='utf-8') as f:
    f.write(f'{wall:.1f}\n')
  print(f'{task}/{variant}/seed{seed}: exit {proc.returncode} after {wall:.0f}s', flush=True)


def epoch_curves(log_text: str) -> Dict[str, List[float]]:
  """Their training loss and dev accuracy (%) per epoch, from a unit's `<seed>_logs.txt`.

  Each epoch's summary is `Epoch k Summary:`, then `Training loss: l; …` and
  `Validation (normal) loss: …; accuracy: a;`. A resumed unit logs the epochs it redoes
  again; the last entry of an epoch wins. Entry k is their epoch k (0-based), this
  library's epoch k + 1.
  """
  by_epoch: Dict[int, tuple] = {}
  for epoch, loss, acc in re.findall(
      r'Epoch (\d+) Summary:\s*\nTraining loss: ([0-9.eE+-]+);[^\n]*\n\s*'
      r'Validation \(normal\) loss: [^\n]*?accuracy: ([0-9.eE+-]+);', log_text):
    by_epoch[int(epoch)] = (round(float(loss), 6), round(float(acc), 4))
  epochs = sorted(by_epoch)
  return {'train_loss': [by_epoch[k][0] for k in epochs],
          'dev_accuracy': [by_epoch[k][1] for k in epochs]}


def parse_unit(d: pathlib.Path, task: str, variant: str, seed: int) -> Optional[Dict[str, Any]]:
  """Test accuracies, epochs taken, epochs run and per-epoch curves of one finished unit."""
  final = final_file(d, task, variant)
  if not final.exists():
    return None
  text = final.read_text()
  taken = re.search(r'Epochs Taken: (\d+)', text)
  ours = {export_data.split_key(s)[1]: s for s in export_data.tasks.splits(task)
          if s.startswith('test_')}
  test = {}
  for key, acc in re.findall(r'\((\w+)\) loss: .*?accuracy: ([0-9.eE+-]+);', text, re.S):
    test[ours.get(key, key)] = float(acc)     # under this library's split names
  log = d / 'experiments' / 'logs' / (
      f'{export_data.DATASETS[task]}_{MODELS[variant]}_seq2seq') / f'{seed}_logs.txt'
  log_text = log.read_text() if log.exists() else ''
  epochs = len(re.findall(r'\nEpoch \d+ Summary', log_text)) if log.exists() else None
  resumed = (d / 'run.log').read_text().count('--load_checkpoint') if (d / 'run.log').exists() \
      else 0
  return {'seed': seed, 'test': test, 'best_dev_epoch': int(taken.group(1)) if taken else None,
          'epochs_run': epochs, 'resumes': resumed, **epoch_curves(log_text)}


def collect(task: str, variant: str, seeds: List[int]) -> None:
  units = [parse_unit(unit_dir(task, variant, s), task, variant, s) for s in seeds]
  units = [u for u in units if u is not None]
  if not units:
    print(f'{task}/{variant}: no finished unit')
    return
  commit = subprocess.run(['git', '-C', _REFCODE.value, 'rev-parse', 'HEAD'], capture_output=True,
                          text=True, check=False).stdout.strip()
  torch_v = subprocess.run([str(pathlib.Path(_REFCODE.value) / '.venv' / 'bin' / 'python'), '-c',
                            'import torch; print(torch.__version__)'], capture_output=True,
                           text=True, check=False).stdout.strip()
  budget = budget_label()
  out = {
      'task': task, 'label': variant, 'model': MODELS[variant],
      'source': {'repo': 'JRC1995/MonotonicLocationAttention', 'commit': commit,
                 'torch': torch_v, 'device': 'CPU, 1 thread per seed'},
      'command': (f'python train.py --model {MODELS[variant]} --dataset '
                  f'{export_data.DATASETS[task]} --device cpu --initial_time k --times k+1 '
                  '--no_display'),
      'changes': ('none to the model or training code' +
                  ('' if not (_EPOCHS.value or _PATIENCE.value) else
                   f'; configs: epochs {_EPOCHS.value or 100}, early_stop_patience '
                   f'{_PATIENCE.value or 50}') +
                  '. Data: this library\'s splits of the task (data seed '
                  f'{_DATA_SEED.value}), written in their format by '
                  'experiments/authors_code/export_data.py' +
                  (', sources ending in <eos> as their preprocessing does'
                   if task in export_data.SOURCE_EOS_TASKS else '') +
                  '. A resumed unit restarts their lr scheduler (their code does not save it).'),
      'runs': [{'budget': budget, 'max_epochs': _EPOCHS.value or 100,
                'early_stop_patience': _PATIENCE.value or 50, 'seeds': units}],
  }
  path = results_path(task, variant)
  out['runs'][0]['seeds'] = merged_seeds(path, budget, units)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(out, indent=1, sort_keys=True) + '\n')
  print(f'wrote {path} ({len(out["runs"][0]["seeds"])} seed(s), {len(units)} from this machine)')


def merged_seeds(path: pathlib.Path, budget: str, units: List[Dict[str, Any]]
                 ) -> List[Dict[str, Any]]:
  """The seeds of `path`'s run with this budget (units from earlier machines, whose
  workdirs are gone), with `units` (finished here) added or replacing the same seed."""
  by_seed = collected_units(path, budget)
  by_seed.update({u['seed']: u for u in units})
  return [by_seed[k] for k in sorted(by_seed)]


def first_two_split(task: str, variant: str) -> Optional[bool]:
  """Whether the run's collected seeds 0 and 1 (this budget) disagree on `grid.mark` at a
  compared split; None until both are collected."""
  units = collected_units(results_path(task, variant), budget_label())
  if 0 not in units or 1 not in units:
    return None
  return any(grids_lib.mark(units[0]['test'][s]) != grids_lib.mark(units[1]['test'][s])
             for s in grids_lib.compared_splits(task))


def main(argv):
  del argv
  runs = []
  for r in _RUNS.value:
    task, _, variant = r.partition('/')
    if task not in export_data.DATASETS or variant not in MODELS:
      raise errors.MonolocError(f'bad run {r!r}; give task/variant with a task of '
                                f"{', '.join(sorted(export_data.DATASETS))} and a variant of "
                                f"{', '.join(sorted(MODELS))}")
    runs.append((task, variant))
  seeds = [int(s) for s in _SEEDS.value]
  for task, variant in runs:
    if _COLLECT.value:
      collect(task, variant, seeds)
      continue
    if _IF_SPLIT.value:
      split = first_two_split(task, variant)
      if not split:
        print(f'{task}/{variant}: seeds 0 and 1 ' + (
            'not both collected yet' if split is None else 'agree on every compared mark') +
              f"; seeds {', '.join(map(str, seeds))} not run (--if_split)", flush=True)
        continue
    for seed in seeds:
      run_unit(task, variant, seed)


if __name__ == '__main__':
  app.run(errors.one_line_errors(main))
