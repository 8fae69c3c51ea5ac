"""Runs the paper's tables as a resumable grid of units; results land in results/.

  python experiments/reproduce.py --grid=all --seeds=0            # first pass, one seed
  python experiments/reproduce.py --grid=table2,table3 --seeds=1,2
  python experiments/reproduce.py --grid=table2 --dry_run         # what is done / left
  python experiments/reproduce.py --grid=transformer --seeds=0,1,2  # beyond the paper
  python experiments/report.py                                    # REPRODUCTION.md
  python experiments/reproduce.py --grid=all --seeds=0,1,2,3,4 --executor=ray \
      --ray_address=auto --ray_gpus_per_unit=1                   # units as Ray tasks

A unit is one seed of one (task, variant) run of one grid. It trains in its own
workdir (`--workdir/<grid>/<task>/<label>/seed<k>`), so a killed grid resumes
from that unit's last epoch checkpoint; a finished unit writes
`--results_dir/<grid>/<task>/<label>/seed<k>.json` and is skipped from then on.
The protocol is `experiments/configs/reproduce.py`; any field can be changed
with --config.<field>=..., and the unit's JSON records the protocol it ran.

--seeds_per_program=K trains up to K seeds of one run (consecutive seeds, none
of them started yet) in one program, in the workdir `.../<label>/seeds<a>-<b>`;
each seed still writes its own unit JSON, equal to its single-seed unit up to
float rounding (a seed's batches, dropout and stopping do not depend on the other
seeds), with `program` naming the seeds it shared a program with. That pays on an
accelerator, where the seeds are vmapped (5 seeds for 1.3x the time of one on an
H100, MEASUREMENTS.md §7); on one CPU the seeds run one after another and it gains
nothing.

--executor=local trains the units one after another in this process;
--executor=ray makes each unit a Ray task (`monoloc_jax.cluster`) on a local
Ray or the cluster at --ray_address. A task whose worker dies is retried and
resumes from its workdir's checkpoint (put --workdir on storage every node
sees); this process writes every results JSON, so results/ looks the same.
"""

import dataclasses
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import app
from absl import flags
from absl import logging
import ml_collections
from ml_collections import config_flags

# Train with the package of this checkout (not whichever copy is installed), so
# that the commit recorded in each unit's JSON is the code that ran.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import grid as grids_lib  # experiments/grid.py

from monoloc_jax import config_paths  # pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax import errors  # pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax import xla_cache  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO.parent / 'shared'


@dataclasses.dataclass(frozen=True)
class DataDirs:
  """Where file-based data comes from ('' = generated in code / unavailable)."""
  scan: str = ''
  lookup: str = ''
  cfq: str = ''

  def for_task(self, task: str) -> Tuple[Optional[str], Optional[str]]:
    """(data_dir or None, why the unit cannot run or None)."""
    if task == 'scan_length':
      return (self.scan, None) if self.scan else (None, 'no SCAN data (--scan_data_dir)')
    if task == 'cfq_length':
      return (self.cfq, None) if self.cfq else (None, 'no CFQ data (--cfq_data_dir)')
    if task in ('lookup', 'reverse_lookup') and self.lookup:
      return str(pathlib.Path(self.lookup) / ('forward' if task == 'lookup' else 'reverse')), None
    return None, None


def data_source(task: str, data_dir: Optional[str]) -> str:
  """A short, machine-independent description of where a unit's data came from."""
  if data_dir is None:
    return 'generated (data_seed 123)' if task in ('lookup', 'reverse_lookup') else 'generated'
  parts = pathlib.Path(data_dir).parts
  return 'files: ' + '/'.join(parts[-3:])


def unit_config(base: ml_collections.ConfigDict, unit: grids_lib.Unit,
                data_dir: Optional[str]) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict(base.to_dict())
  config.task, config.variant = unit.task, unit.variant
  config.seed, config.seeds = unit.seed, 1
  config.data_dir = data_dir or ''
  if unit.task in ('lookup', 'reverse_lookup') and not data_dir:
    config.data_seed = 123            # the reference tables
  return config_paths.overridden(config, unit.overrides)   # 'transformer.layers': a group's field


PROTOCOL_FIELDS = ('max_epochs', 'early_stop_patience', 'perfect_dev_patience', 'lr_patience',
                   'lr_factor', 'learning_rate', 'batch_size', 'dev_metric', 'eval_size',
                   'train_size', 'dropout', 'grad_clip', 'weight_decay', 'mix_mode',
                   'gru.num_layers', 'hidden_dim', 'qk_dim', 'gru.decoder_init', 'mono_gate_init',
                   'bucket_batches', 'data_seed', 'improvement_tolerance', 'plateau_rule',
                   'plateau_threshold', 'source_eos_tasks', 'init_scheme', 'sigma_bias',
                   'location_normaliser', 'warmup_steps', 'backbone', 'transformer.layers',
                   'transformer.heads', 'transformer.mlp_dim', 'transformer.positions',
                   'range_lengths', 'range_samples')


def code_commit() -> Dict[str, Any]:
  """The commit of the code that ran (its full 40-hex hash), and whether its
  package/experiments were modified.

  $MONOLOC_CODE_COMMIT, where set, names the commit instead, and $MONOLOC_CODE_DIRTY
  ('1' or '0', default '1') says whether the tree differed from it: a copy of the
  checkout on an accelerator machine carries no .git, or a stale one, so whoever copied
  it says what it holds. A short name is expanded to the full hash where this checkout's
  git knows it (`git rev-parse`); one it cannot expand is an error, so that no unit
  records an abbreviated commit."""
  def git(*args):
    try:
      return subprocess.run(['git', '-C', str(REPO), *args], capture_output=True, text=True,
                            check=False).stdout.strip()
    except OSError:  # no git at all
      return ''
  if 'MONOLOC_CODE_COMMIT' in os.environ:
    given = os.environ['MONOLOC_CODE_COMMIT']
    full = (given if re.fullmatch(r'[0-9a-f]{40}', given)
            else git('rev-parse', '--verify', '--quiet', f'{given}^{{commit}}'))
    if not re.fullmatch(r'[0-9a-f]{40}', full):
      raise errors.MonolocError(
          f'MONOLOC_CODE_COMMIT={given!r} is not a commit this checkout knows; give the full '
          '40-hex hash (git rev-parse HEAD)')
    return {'commit': full, 'dirty': os.environ.get('MONOLOC_CODE_DIRTY', '1') != '0'}
  return {'commit': git('rev-parse', 'HEAD') or 'unknown',
          'dirty': bool(git('status', '--porcelain', '--', 'monoloc_jax', 'experiments'))}


def write_json_atomic(path: pathlib.Path, obj: Any) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f'.{path.name}.tmp')
  with open(tmp, 'w', encoding='utf-8') as f:
    json.dump(obj, f, indent=1, sort_keys=True)
    f.write('\n')
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def _test_entry(r: Mapping[str, Any]) -> Dict[str, Any]:
  """A unit JSON's entry for one test split, from a one-seed results.json entry."""
  seed_r = r['per_seed'][0]
  entry = {k: round(float(seed_r[k]), 4) for k in
           ('accuracy', 'seq_acc_be', 'edit_distance', 'attention_loss') if k in seed_r}
  entry['n'] = int(r.get('n', seed_r.get('n', 0)))
  return entry


def add_test_splits(unit: grids_lib.Unit, splits: Sequence[str], results_dir: pathlib.Path,
                    workdir: pathlib.Path) -> Optional[List[str]]:
  """Scores a finished unit on the `splits` its results JSON lacks, from the best-dev
  checkpoint in its workdir (`inference.evaluate`), and adds them to the JSON, with
  'added_test_splits' recording the code that scored them. Returns the splits added,
  or None when the unit's workdir is gone (it cannot be scored without retraining)."""
  from monoloc_jax import inference  # pylint: disable=g-import-not-at-top
  path = unit.path(results_dir, '.json')
  record = json.loads(path.read_text(encoding='utf-8'))
  missing = [s for s in splits if s not in record['test']]
  if not missing:
    return []
  if not (unit.path(workdir) / 'results.json').exists():
    return None
  out = inference.evaluate(str(unit.path(workdir)), {'test_splits': ','.join(missing)})
  for split in missing:
    record['test'][split] = _test_entry(out['test'][split])
  record.setdefault('added_test_splits', {}).update(
      {s: {'code': code_commit(), 'how': "inference.evaluate of the unit's best-dev checkpoint"}
       for s in missing})
  write_json_atomic(path, record)
  return missing


def retrain(unit: grids_lib.Unit, record: Mapping[str, Any], extra_splits: Sequence[str],
            base_config, workdir: pathlib.Path, data_dirs: DataDirs
            ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
  """Trains a finished unit whose workdir is gone again from scratch, into its workdir
  (its grid's config, the same seed and data; an interrupted retrain resumes), scored on
  the splits its committed JSON `record` has and on `extra_splits`.

  Returns (test entries of the retrained model, by split; a note for the JSON: the code,
  its epochs and best-dev epoch, its versions (`unit_versions`: with `host_cores`, which
  moves a CPU trajectory), and `reproduced`: whether it scored every committed
  split within one example of the committed figure, else also `retrained_test`, what it
  scored on them)."""
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  data_dir, _ = data_dirs.for_task(unit.task)
  config = unit_config(base_config, unit, data_dir)
  committed = record['test']
  config.test_splits = ','.join([*committed, *[s for s in extra_splits if s not in committed]])
  results = train.train_and_evaluate(config, str(unit.path(workdir)))
  again = {split: _test_entry(r) for split, r in results['test'].items()}
  reproduced = all(abs(again[split]['accuracy'] - entry['accuracy']) <=
                   100.0 / max(int(entry.get('n') or 1), 1) + 1e-9
                   for split, entry in committed.items())
  note: Dict[str, Any] = {
      'code': code_commit(),
      'how': ('retrained from scratch (the workdir was gone): the same grid config, seed '
              'and data; scored from its best-dev checkpoint'),
      'reproduced': reproduced, 'epochs': int(results['epochs']),
      'best_dev_epoch': int(results['dev']['best_epoch_per_seed'][0]),
      'versions': unit_versions(results)}
  if not reproduced:
    note['retrained_test'] = {split: again[split] for split in committed}
  return again, note


def retrain_and_add_splits(unit: grids_lib.Unit, splits: Sequence[str], base_config,
                           results_dir: pathlib.Path, workdir: pathlib.Path,
                           data_dirs: DataDirs) -> List[str]:
  """`add_test_splits` for a unit whose workdir is gone: `retrain` it, add the splits its
  JSON lacks, keep the committed figures, and record the retrain's note per added split
  under 'added_test_splits' (so the report can say where an added split comes from a
  rerun that differs). Returns the splits added ([] if none was missing)."""
  path = unit.path(results_dir, '.json')
  record = json.loads(path.read_text(encoding='utf-8'))
  missing = [s for s in splits if s not in record['test']]
  if not missing:
    return []
  again, note = retrain(unit, record, missing, base_config, workdir, data_dirs)
  for split in missing:
    record['test'][split] = again[split]
  record.setdefault('added_test_splits', {}).update({s: dict(note) for s in missing})
  write_json_atomic(path, record)
  return missing


# The range each run of a grid is range-evaluated over (`--range_evaluate`): the digit
# tasks 1-200 (twenty times their longest training length); a task not listed, its
# `range_eval.default_range` (Lookup: what its tables can compose).
RANGE_LENGTHS = {task: '1:200' for task in ('copy', 'reverse_copy', 'recopy', 'reverse_recopy',
                                            'inv_recopy', 'inv_reverse_recopy', 'dedupe',
                                            'posretrieve')}
RANGE_SAMPLES = 200


def best_seed(task: str, records: Mapping[int, Mapping[str, Any]]) -> int:
  """The seed of a run whose committed figures are best: the highest accuracy at the
  task's longest paper split, then at the next longest, …, then the best dev accuracy;
  ties go to the lower seed."""
  from monoloc_jax import tasks  # pylint: disable=g-import-not-at-top
  splits = list(reversed(tasks.get(task).paper_splits))
  def key(seed):
    test = records[seed]['test']
    return (*(test.get(s, {}).get('accuracy', -1.0) for s in splits),
            records[seed].get('best_dev_accuracy', -1.0), -seed)
  return max(records, key=key)


def range_path(results_dir: pathlib.Path, unit: grids_lib.Unit) -> pathlib.Path:
  """results/range/<grid>/<task>/<label>.json: the range evaluation of a run's best seed."""
  return results_dir / 'range' / unit.grid / unit.task / f'{unit.label}.json'


def finished_records(units_of_run: Sequence[grids_lib.Unit], results_dir: pathlib.Path
                     ) -> Dict[int, Dict[str, Any]]:
  """The committed JSONs of a run's finished units, by seed."""
  return {u.seed: json.loads(u.path(results_dir, '.json').read_text(encoding='utf-8'))
          for u in units_of_run if u.path(results_dir, '.json').exists()}


def best_unit(units_of_run: Sequence[grids_lib.Unit], records: Mapping[int, Mapping[str, Any]]
              ) -> grids_lib.Unit:
  """The unit of the run's `best_seed` among its finished `records`."""
  seed = best_seed(units_of_run[0].task, records)
  return next(u for u in units_of_run if u.seed == seed)


def range_cost_s(units_of_run: Sequence[grids_lib.Unit], results_dir: pathlib.Path,
                 workdir: pathlib.Path) -> float:
  """What range-evaluating a run costs before its evaluation: 0 where its best seed's
  workdir holds a finished run, else that seed's committed `wall_time_s` (the retrain;
  a proxy, measured on the machine and load it first ran on)."""
  records = finished_records(units_of_run, results_dir)
  if not records:
    return 0.0
  unit = best_unit(units_of_run, records)
  if (unit.path(workdir) / 'results.json').exists():
    return 0.0
  return float(records[unit.seed].get('wall_time_s') or 0.0)


# In a retrained unit's workdir: `retrain`'s note, so that an evaluation cut off after
# the retrain (a session's end) still records it.
RETRAIN_NOTE = 'retrained.json'


def range_evaluate_run(units_of_run: Sequence[grids_lib.Unit], base_config,
                       results_dir: pathlib.Path, workdir: pathlib.Path, data_dirs: DataDirs,
                       lengths: str = '', samples: int = RANGE_SAMPLES) -> Optional[pathlib.Path]:
  """Range-evaluates the best seed (`best_seed`) of one run's finished units and writes
  `range_path`: range.json's figures for that seed, which seed and why, and, where its
  workdir was gone, `retrained`: the note of `retrain` (whether it reproduced the seed).
  Returns the path written, or None if the run has no finished unit or is already done."""
  from monoloc_jax import range_eval  # pylint: disable=g-import-not-at-top
  records = finished_records(units_of_run, results_dir)
  if not records:
    return None
  unit = best_unit(units_of_run, records)
  seed = unit.seed
  out = range_path(results_dir, unit)
  lengths = lengths or RANGE_LENGTHS.get(unit.task, '')
  if out.exists():
    done = json.loads(out.read_text(encoding='utf-8'))
    if done.get('seed') == seed and done.get('range_lengths') == lengths:
      return None
  run_dir = unit.path(workdir)
  note = run_dir / RETRAIN_NOTE
  if not (run_dir / 'results.json').exists():
    write_json_atomic(note, retrain(unit, records[seed], (), base_config, workdir,
                                    data_dirs)[1])
  retrained = json.loads(note.read_text(encoding='utf-8')) if note.exists() else None
  t0 = time.time()
  result = range_eval.range_evaluate(str(run_dir), lengths or None, samples)
  record = {k: v for k, v in result.items() if k != 'versions'}   # range.json, one seed
  record.update({
      'grid': unit.grid, 'task': unit.task, 'variant': unit.variant, 'label': unit.label,
      'seed': seed,
      'seed_rule': 'best committed accuracy at the longest paper split, then the next',
      'range_lengths': lengths, 'range_wall_time_s': round(time.time() - t0, 1),
      'committed_test': records[seed]['test'], 'retrained': retrained,
      'code': code_commit(), 'versions': unit_versions({})})
  write_json_atomic(out, record)
  return out


def add_splits_to_finished(todo: Sequence[grids_lib.Unit], splits: Sequence[str], base_config,
                           results_dir: pathlib.Path, workdir: pathlib.Path,
                           data_dirs: DataDirs, retrain_gone: bool = False) -> None:
  """--add_test_splits: scores the finished units of `todo` on `splits` (`add_test_splits`),
  retraining a unit whose workdir is gone where `retrain_gone`
  (`retrain_and_add_splits`), one line per unit. A unit whose workdir another worker
  holds (it is retraining that unit) is skipped, so several workers can share a queue."""
  done = [u for u in todo if unit_state(u, results_dir, workdir) == 'done']
  print(f'{len(done)} of {len(todo)} units finished; scoring them on {", ".join(splits)}',
        flush=True)
  for i, u in enumerate(done):
    name = f'[{i + 1}/{len(done)}] {u.grid}/{u.task}/{u.label}/seed{u.seed}'
    try:
      added = add_test_splits(u, splits, results_dir, workdir)
      if added is None and retrain_gone and data_dirs.for_task(u.task)[1] is None:
        print(f'{name}: workdir gone; retraining', flush=True)
        added = retrain_and_add_splits(u, splits, base_config, results_dir, workdir, data_dirs)
    except errors.WorkdirInUse:
      print(f'{name}: in use by another worker; skipped', flush=True)
      continue
    what = ('its workdir is gone; not scored (--retrain_gone trains it again)'
            if added is None else
            f"added {', '.join(added)}" if added else 'has them already')
    print(f'{name}: {what}', flush=True)


def range_evaluate_runs(todo: Sequence[grids_lib.Unit], base_config, results_dir: pathlib.Path,
                        workdir: pathlib.Path, data_dirs: DataDirs, lengths: str = '',
                        samples: int = RANGE_SAMPLES) -> None:
  """--range_evaluate: `range_evaluate_run` on each run of `todo` whose data is here, one
  line per run, the cheapest first (`range_cost_s`: a run whose workdir is gone is
  trained again, and a session's end cuts the fewest retrains that way). A run whose best
  seed another worker holds (it is retraining or evaluating it) is skipped, so several
  workers can share one queue in the same order; a run that fails is one line, and the
  queue goes on (the command then fails, naming those runs)."""
  runs: Dict[Tuple[str, str, str], List[grids_lib.Unit]] = {}
  for u in todo:
    if data_dirs.for_task(u.task)[1] is None:
      runs.setdefault((u.grid, u.task, u.label), []).append(u)
  runs = dict(sorted(runs.items(), key=lambda kv: range_cost_s(kv[1], results_dir, workdir)))
  failed = []
  for i, (key, run_units) in enumerate(runs.items()):
    name = f"[{i + 1}/{len(runs)}] {'/'.join(key)}"
    try:
      written = range_evaluate_run(run_units, base_config, results_dir, workdir, data_dirs,
                                   lengths, samples)
    except errors.WorkdirInUse:
      print(f'{name}: in use by another worker; skipped', flush=True)
      continue
    except errors.MonolocError as e:        # one run's error ends only that run
      print(f'{name}: error: {e}', flush=True)
      failed.append('/'.join(key))
      continue
    print(f"{name}: {'wrote ' + str(written) if written else 'done or no finished unit'}",
          flush=True)
  if failed:
    raise errors.MonolocError(f'{len(failed)} of {len(runs)} runs failed (see above): '
                              + ', '.join(failed))


def run_wall_s(results: Mapping[str, Any], this_process_s: float) -> float:
  """A run's wall seconds over every process that trained it (results.json's
  `wall_time_s`: a resumed run counts the processes before it too), else the seconds
  this process spent (results written before that field)."""
  wall = results.get('wall_time_s')
  return float(wall) if isinstance(wall, (int, float)) else this_process_s


def unit_record(unit: grids_lib.Unit, config, results: Mapping[str, Any], data_dir: Optional[str],
                wall_s: float, backend: Optional[str] = None) -> Dict[str, Any]:
  """The small JSON committed for a finished unit (backend: where it trained;
  default this process's JAX backend)."""
  test = {split: _test_entry(r) for split, r in results['test'].items()}
  return {
      'grid': unit.grid, 'task': unit.task, 'variant': unit.variant, 'label': unit.label,
      'seed': unit.seed, 'overrides': {k: v for k, v in unit.overrides.items()},
      'test': test,
      'epochs': int(results['epochs']),
      'best_dev_epoch': int(results['dev']['best_epoch_per_seed'][0]),
      'best_dev_accuracy': round(float(results['dev']['best_accuracy_per_seed'][0]), 4),
      'wall_time_s': round(wall_s, 1),
      'code': code_commit(),
      'data': data_source(unit.task, data_dir),
      'protocol': {k: config_paths.stored_field(config.to_dict(), k) for k in PROTOCOL_FIELDS},
      'versions': unit_versions(results, backend),
  }


# What a unit JSON records of `rundir.versions()` (all of it but the device list).
UNIT_VERSIONS = ('python', 'jax', 'jaxlib', 'flax', 'optax', 'orbax', 'numpy', 'backend',
                 'host_cores')


def unit_versions(results: Mapping[str, Any], backend: Optional[str] = None) -> Dict[str, str]:
  """The versions a unit JSON records: those of the process that trained the unit
  (results.json's `versions`, `rundir.versions()` there), else this process's; `backend`,
  where given, names where it trained. A key the training process did not record is ''."""
  from monoloc_jax import rundir  # pylint: disable=g-import-not-at-top
  trained = results.get('versions') or rundir.versions()
  out = {key: str(trained.get(key, '')) for key in UNIT_VERSIONS}
  if backend:
    out['backend'] = backend
  return out


def unit_state(unit: grids_lib.Unit, results_dir: pathlib.Path, workdir: pathlib.Path) -> str:
  if unit.path(results_dir, '.json').exists():
    return 'done'
  if (unit.path(workdir) / 'checkpoints').exists():
    return 'partial'
  return 'todo'


def group_units(units: Sequence[grids_lib.Unit], per_program: int, results_dir: pathlib.Path,
                workdir: pathlib.Path) -> List[List[grids_lib.Unit]]:
  """`units` as the groups that share a program: up to `per_program` units of one run
  (grid, task, label) with consecutive seeds, in the order their runs first appear.
  A unit whose own single-seed workdir has a checkpoint ('partial') stays alone, so
  that it resumes there."""
  groups: List[List[grids_lib.Unit]] = []
  open_group: Dict[Tuple[str, str, str], List[grids_lib.Unit]] = {}
  for u in units:
    key = (u.grid, u.task, u.label)
    alone = per_program == 1 or unit_state(u, results_dir, workdir) == 'partial'
    g = open_group.get(key)
    if not alone and g is not None and len(g) < per_program and u.seed == g[-1].seed + 1:
      g.append(u)
      continue
    groups.append([u])
    if alone:
      open_group.pop(key, None)
    else:
      open_group[key] = groups[-1]
  return groups


def group_path(group: Sequence[grids_lib.Unit], workdir: pathlib.Path) -> pathlib.Path:
  """The workdir of a group: the unit's own for one unit, `seeds<a>-<b>` for several."""
  if len(group) == 1:
    return group[0].path(workdir)
  return group[0].path(workdir).with_name(f'seeds{group[0].seed}-{group[-1].seed}')


def seed_results(results: Mapping[str, Any], history: Sequence[Mapping[str, Any]],
                 i: int) -> Dict[str, Any]:
  """The results of seed i of a several-seed run, as its single-seed run reports them:
  its test metrics, its best dev epoch and accuracy, and its epochs (the epoch at
  which it stopped early, else the run's last)."""
  stopped = [h['epoch'] for h in history if h.get('stopped') and h['stopped'][i]]
  return {
      'test': {split: {**r, 'per_seed': [r['per_seed'][i]]} for split, r in results['test'].items()},
      'epochs': stopped[0] if stopped else results['epochs'],
      'dev': {k: [v[i]] for k, v in results['dev'].items()},
      **({'versions': results['versions']} if 'versions' in results else {}),
  }


def run_group(group: Sequence[grids_lib.Unit], base_config, results_dir: pathlib.Path,
              workdir: pathlib.Path, data_dirs: DataDirs) -> List[Dict[str, Any]]:
  """Trains the units of `group` (one run, consecutive seeds) in one program, resuming
  its workdir, and writes each unit's results JSON; one unit is `run_unit`."""
  if len(group) == 1:
    return [run_unit(group[0], base_config, results_dir, workdir, data_dirs)]
  from monoloc_jax import rundir  # pylint: disable=g-import-not-at-top
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  data_dir, _ = data_dirs.for_task(group[0].task)
  config = unit_config(base_config, group[0], data_dir)
  config.seeds = len(group)
  path = group_path(group, workdir)
  t0 = time.time()
  results = train.train_and_evaluate(config, str(path))
  wall = run_wall_s(results, time.time() - t0)
  history = rundir.read_history(path)
  records = []
  ranges = unit_range(path) if group[0].grid in grids_lib.RANGE_GRIDS else None
  for i, u in enumerate(group):
    record = unit_record(u, unit_config(base_config, u, data_dir), seed_results(results, history, i),
                         data_dir, wall / len(group))
    record['program'] = {'seeds': [v.seed for v in group], 'wall_time_s': round(wall, 1)}
    if ranges is not None:
      record['range'] = ranges[i]
    write_json_atomic(u.path(results_dir, '.json'), record)
    records.append(record)
  return records


def run_unit(unit: grids_lib.Unit, base_config, results_dir: pathlib.Path, workdir: pathlib.Path,
             data_dirs: DataDirs) -> Dict[str, Any]:
  """Trains and evaluates one unit (resuming its workdir) and writes its results JSON."""
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  data_dir, _ = data_dirs.for_task(unit.task)
  config = unit_config(base_config, unit, data_dir)
  t0 = time.time()
  results = train.train_and_evaluate(config, str(unit.path(workdir)))
  record = unit_record(unit, config, results, data_dir, run_wall_s(results, time.time() - t0))
  if unit.grid in grids_lib.RANGE_GRIDS:
    record['range'] = unit_range(unit.path(workdir))[0]
  write_json_atomic(unit.path(results_dir, '.json'), record)
  return record


def unit_range(run_dir: pathlib.Path) -> List[Dict[str, Any]]:
  """Range-evaluates a finished run (`range_eval.range_evaluate`, its config's
  range_lengths and range_samples) and returns, per seed, the unit JSON's 'range' entry:
  the lengths, that seed's accuracy / token_accuracy / edit_distance per length, its
  horizon and OOD score (the Chomsky suite's score: mean per-token accuracy over the
  lengths above training), the samples per length and the programs compiled."""
  from monoloc_jax import range_eval  # pylint: disable=g-import-not-at-top
  result = range_eval.range_evaluate(str(run_dir))
  lengths, lo, hi = result['lengths'], *(result['train_lengths'] or (None, None))
  out = []
  for i, _ in enumerate(result['per_seed']['seeds']):
    seed = {k: result['per_seed'][k][i] for k in range_eval.METRIC_NAMES}
    out.append({'lengths': [lengths[0], lengths[-1]], **seed,
                'horizon': range_eval.horizon(lengths, seed['accuracy'], lo,
                                              result['lengths_with_training_examples']),
                'ood_score': range_eval.ood_score(lengths, seed['token_accuracy'], hi),
                'samples': result['samples'], 'compiled_programs': result['compiled_programs'],
                'wall_time_s': round(result['wall_time_s'], 1)})
  return out


def run_units_locally(left: Sequence[grids_lib.Unit], base_config, results_dir: pathlib.Path,
                      workdir: pathlib.Path, data_dirs: DataDirs, seeds_per_program: int = 1
                      ) -> Tuple[List[float], int]:
  """Trains `left` one after another in this process, up to `seeds_per_program` seeds
  of a run in one program (`group_units`); returns (wall seconds per unit run,
  failures).

  Several workers may run the same grid at once (e.g. the same command started
  twice): each unit's workdir lock keeps a unit to one worker, and a unit that
  another worker finished meanwhile is not rerun. Both are skipped, not failures.
  """
  durations, failed, n = [], 0, 0
  for group in group_units(left, seeds_per_program, results_dir, workdir):
    names = [f'{u.grid}/{u.task}/{u.label}/seed{u.seed}' for u in group]
    first = n
    n += len(group)
    done = [unit_state(u, results_dir, workdir) == 'done' for u in group]
    for j in (j for j, d in enumerate(done) if d):
      print(f'[{first + j + 1}/{len(left)}] {names[j]}: finished by another worker; skipped',
            flush=True)
    todo = [u for u, d in zip(group, done) if not d]
    # A group another worker thinned out runs its remaining seeds one by one (a program's
    # seeds are consecutive).
    batches = [todo] if len(todo) == len(group) else [[u] for u in todo]
    for batch in batches:
      j = first + group.index(batch[0])
      label = names[group.index(batch[0])] + (f'..{batch[-1].seed}' if len(batch) > 1 else '')
      t0 = time.time()
      try:
        records = run_group(batch, base_config, results_dir, workdir, data_dirs)
      except errors.WorkdirInUse:
        print(f'[{j + 1}/{len(left)}] {label}: in use by another worker; skipped', flush=True)
        continue
      except errors.MonolocError as e:
        failed += len(batch)
        print(f'[{j + 1}/{len(left)}] {label}: error: {e}', flush=True)
        continue
      per_unit = (time.time() - t0) / len(batch)
      durations.extend([per_unit] * len(batch))
      for k, record in enumerate(records):
        remaining = len(left) - (j + k) - 1
        eta = sum(durations) / len(durations) * remaining / 3600
        print(f"[{j + k + 1}/{len(left)}] {names[group.index(batch[k])]}: {_headline(record)}  "
              f"epochs {record['epochs']}  {per_unit:.0f}s; {remaining} left, about {eta:.1f} h",
              flush=True)
  return durations, failed


def run_units_on_ray(units: Sequence[grids_lib.Unit], base_config, results_dir: pathlib.Path,
                     workdir: pathlib.Path, data_dirs: DataDirs, options: Mapping[str, Any]
                     ) -> Tuple[List[float], int]:
  """Trains `units` as Ray tasks (`cluster.run_jobs(**options)`) and writes each
  finished unit's results JSON here; returns (wall seconds of finished units, failures)."""
  from monoloc_jax import cluster  # pylint: disable=g-import-not-at-top
  cluster.import_ray()                      # the install hint before any work
  by_name, jobs = {}, []
  for u in units:
    data_dir, _ = data_dirs.for_task(u.task)
    config = unit_config(base_config, u, data_dir)
    name = f'{u.grid}/{u.task}/{u.label}/seed{u.seed}'
    by_name[name] = (u, config, data_dir)
    jobs.append(cluster.Job(name, config.to_dict(), str(u.path(workdir).absolute())))
  durations, failed = [], 0
  for i, (job, out) in enumerate(cluster.run_jobs(jobs, **options)):
    u, config, data_dir = by_name[job.name]
    if isinstance(out, errors.MonolocError):
      failed += 1
      print(f'[{i + 1}/{len(jobs)}] {job.name}: error: {out}', flush=True)
      continue
    record = unit_record(u, config, out['results'], data_dir,
                         run_wall_s(out['results'], out['wall_s']), out['backend'])
    write_json_atomic(u.path(results_dir, '.json'), record)
    durations.append(out['wall_s'])
    resumed = (f"; resumed from epoch {out['resumed_from_epoch']}"
               if out['resumed_from_epoch'] is not None else '')
    print(f"[{i + 1}/{len(jobs)}] {job.name}: {_headline(record)}  epochs {record['epochs']}  "
          f"{out['wall_s']:.0f}s on {out['node']}{resumed}", flush=True)
  return durations, failed


def _default_dir(path: pathlib.Path) -> str:
  return str(path) if path.is_dir() else ''


config_flags.DEFINE_config_file(
    'config', str(REPO / 'experiments' / 'configs' / 'reproduce.py'),
    'The protocol (default: experiments/configs/reproduce.py).', lock_config=True)
_GRID = flags.DEFINE_string('grid', 'table2', f"Comma list of {', '.join(grids_lib.GRID_NAMES)}, "
                            "or 'all' (every grid of the paper; "
                            f"{', '.join(grids_lib.BEYOND_PAPER_GRIDS)}: by name only).")
_SEEDS = flags.DEFINE_string('seeds', '0', 'Comma list of model seeds, e.g. 0 or 1,2.')
_RUNS = flags.DEFINE_string('runs', '', "Only these task/label runs of the grids, a comma "
                            "list, e.g. 'reverse_lookup/onestep,lookup/mono' ('' = all).")
_RESULTS = flags.DEFINE_string('results_dir', str(REPO / 'results'), 'Where unit JSONs go.')
_WORKDIR = flags.DEFINE_string('workdir', str(REPO / 'runs' / 'reproduce'),
                               'Root of the units\' training workdirs (checkpoints).')
_SCAN = flags.DEFINE_string('scan_data_dir', _default_dir(SHARED / 'data' / 'scan' / 'length_split'),
                            'SCAN length-split files (default: ../shared/... when present).')
_LOOKUP = flags.DEFINE_string('lookup_data_dir', _default_dir(SHARED / 'data' / 'lookup'),
                              'Directory with forward/ and reverse/ Lookup files (the ones the '
                              'paper used; default ../shared/... when present; else the '
                              'reference tables are generated with data_seed 123).')
_CFQ = flags.DEFINE_string('cfq_data_dir', '', 'The CFQ release (adds CFQ units to table3).')
_DRY = flags.DEFINE_bool('dry_run', False, 'List the units and their state; train nothing.')
_EXECUTOR = flags.DEFINE_enum('executor', 'local', ['local', 'ray'],
                              'local: units one after another here; ray: each unit a Ray task.')
_RAY_ADDRESS = flags.DEFINE_string('ray_address', '', "--executor=ray: '' starts a local Ray; "
                                   "'auto' or ray://HOST:10001 joins a running cluster.")
_RAY_NUM_CPUS = flags.DEFINE_integer('ray_num_cpus', 0, 'CPUs of the local Ray (0 = all).',
                                     lower_bound=0)
_RAY_CPUS = flags.DEFINE_float('ray_cpus_per_unit', 1.0, 'CPUs each unit reserves.',
                               lower_bound=0.0)
_RAY_GPUS = flags.DEFINE_float('ray_gpus_per_unit', 0.0, 'GPUs each unit reserves (1 on a GPU '
                               'cluster).', lower_bound=0.0)
_RAY_TPUS = flags.DEFINE_float('ray_tpus_per_unit', 0.0, 'TPU chips each unit reserves.',
                               lower_bound=0.0)
_RAY_RETRIES = flags.DEFINE_integer('ray_max_retries', 3, 'Times a unit whose worker died is '
                                    'run again (it resumes from its checkpoint).', lower_bound=0)
_PER_PROGRAM = flags.DEFINE_integer(
    'seeds_per_program', 1, 'Train up to this many consecutive seeds of a run in one program '
    '(vmapped on an accelerator; see above). --executor=local only.', lower_bound=1)
_MAX_UNITS = flags.DEFINE_integer('max_units', 0, 'Stop after this many units (0 = no limit).',
                                  lower_bound=0)
_ADD_SPLITS = flags.DEFINE_string(
    'add_test_splits', '', 'Instead of training: score the finished units of the selected '
    "grids, seeds and runs on these test splits too (a comma list, e.g. 'test_iid'), from "
    "each unit's best-dev checkpoint under --workdir, and add them to its results JSON "
    '(a unit whose workdir is gone: see --retrain_gone).')
_RETRAIN = flags.DEFINE_bool(
    'retrain_gone', False, 'With --add_test_splits: train a unit whose workdir is gone again '
    'from scratch (same config, seed, data) to score the missing splits; the JSON records '
    'whether the retrained model reproduced its committed figures (within one example).')
_RANGE = flags.DEFINE_bool(
    'range_evaluate', False, "Instead of training: range-evaluate the best seed of each "
    "selected run (results/range/<grid>/<task>/<label>.json), from its workdir's best-dev "
    'checkpoint, training that seed again from scratch where its workdir is gone.')
_RANGE_LENGTHS = flags.DEFINE_string(
    'range_evaluate_lengths', '', "--range_evaluate: 'lo:hi' for every run ('' = "
    "RANGE_LENGTHS per task, else the task's default range).")
_SPLIT_ONLY = flags.DEFINE_bool(
    'split_runs_only', False, 'Only runs whose seeds 0, 1 and 2 are all finished and disagree '
    'on the solved / partial / failed mark at a compared length (a median within one seed of '
    'flipping; grid.split_run), e.g. with --seeds=3,4.')


def split_runs_only(todo: Sequence[grids_lib.Unit], results_dir: pathlib.Path
                    ) -> List[grids_lib.Unit]:
  """The units of `todo` whose run is split (`grid.split_run`) by its finished seeds 0-2
  in `results_dir`; a run without all three is not split yet."""
  decided: Dict[Tuple[str, str, str], bool] = {}
  for u in todo:
    key = (u.grid, u.task, u.label)
    if key not in decided:
      paths = [dataclasses.replace(u, seed=k).path(results_dir, '.json') for k in (0, 1, 2)]
      decided[key] = all(p.exists() for p in paths) and grids_lib.split_run(
          u.task, [_unit_test_results(p) for p in paths])
  return [u for u in todo if decided[(u.grid, u.task, u.label)]]


def _unit_test_results(path: pathlib.Path) -> Mapping[str, Mapping[str, float]]:
  """The `test` dict of a finished unit's JSON; a damaged file is one clear error."""
  try:
    return json.loads(path.read_text(encoding='utf-8'))['test']
  except (ValueError, KeyError, TypeError) as e:
    raise errors.MonolocError(f'the unit result {path} is damaged ({type(e).__name__}: {e}); '
                              'move it away to rerun that unit') from None


def _headline(record: Mapping[str, Any]) -> str:
  return '  '.join(f"{s} {r['accuracy']:.1f}" for s, r in record['test'].items())


RAY_FLAGS = ('ray_address', 'ray_num_cpus', 'ray_cpus_per_unit', 'ray_gpus_per_unit',
             'ray_tpus_per_unit', 'ray_max_retries')


def ray_options(flag_values) -> Optional[Dict[str, Any]]:
  """`cluster.run_jobs` keyword arguments for --executor=ray, None for local; a
  --ray_* flag given with --executor=local is an error."""
  if flag_values.executor == 'local':
    given = [f for f in RAY_FLAGS if flag_values[f].present]
    if given:
      raise errors.MonolocError(f'--{given[0]} needs --executor=ray; valid executors: local, ray')
    return None
  from monoloc_jax import cluster  # pylint: disable=g-import-not-at-top
  return {'address': flag_values.ray_address, 'local_cpus': flag_values.ray_num_cpus,
          'max_retries': flag_values.ray_max_retries,
          'resources': cluster.Resources(flag_values.ray_cpus_per_unit,
                                         flag_values.ray_gpus_per_unit,
                                         flag_values.ray_tpus_per_unit)}


def main(argv) -> None:
  if len(argv) > 1:
    raise errors.MonolocError(f"unexpected arguments {' '.join(argv[1:])!r}")
  ray = ray_options(flags.FLAGS)
  if ray is not None and _PER_PROGRAM.value > 1:
    raise errors.MonolocError('--seeds_per_program needs --executor=local (a Ray task trains '
                              'one unit); valid executors: local')
  logging.set_verbosity(logging.WARNING)
  xla_cache.enable_compilation_cache()
  grids, seeds = grids_lib.parse_grids(_GRID.value), grids_lib.parse_seeds(_SEEDS.value)
  results_dir, workdir = pathlib.Path(_RESULTS.value), pathlib.Path(_WORKDIR.value)
  data_dirs = DataDirs(_SCAN.value, _LOOKUP.value, _CFQ.value)
  todo = grids_lib.select_runs(grids_lib.units(grids, seeds, cfq=bool(_CFQ.value)), _RUNS.value)
  if _SPLIT_ONLY.value:
    todo = split_runs_only(todo, results_dir)
    print(f"{len({(u.grid, u.task, u.label) for u in todo})} split runs (seeds 0-2 disagree "
          'on a mark)', flush=True)
  if _ADD_SPLITS.value:
    splits = [x.strip() for x in _ADD_SPLITS.value.split(',') if x.strip()]
    add_splits_to_finished(todo, splits, flags.FLAGS.config, results_dir, workdir, data_dirs,
                           _RETRAIN.value)
    return
  if _RANGE.value:
    range_evaluate_runs(todo, flags.FLAGS.config, results_dir, workdir, data_dirs,
                        _RANGE_LENGTHS.value)
    return
  if _DRY.value:
    for u in todo:
      _, why = data_dirs.for_task(u.task)
      state = 'skipped: ' + why if why else unit_state(u, results_dir, workdir)
      print(f'{u.grid:<7} {u.task:<19} {u.label:<28} seed{u.seed}  {state}')
    return
  runnable = [u for u in todo if data_dirs.for_task(u.task)[1] is None]
  for u in todo:
    why = data_dirs.for_task(u.task)[1]
    if why:
      print(f'skipping {u.grid}/{u.task}/{u.label}/seed{u.seed}: {why}', flush=True)
  left = [u for u in runnable if unit_state(u, results_dir, workdir) != 'done']
  print(f'{len(runnable) - len(left)} of {len(runnable)} units done; {len(left)} to run',
        flush=True)
  if ray is not None:
    durations, failed = run_units_on_ray(left[:_MAX_UNITS.value or None], flags.FLAGS.config,
                                         results_dir, workdir, data_dirs, ray)
    print(f'finished: {len(durations)} units run, {failed} failed', flush=True)
    return
  durations, failed = run_units_locally(left[:_MAX_UNITS.value or None], flags.FLAGS.config,
                                        results_dir, workdir, data_dirs, _PER_PROGRAM.value)
  print(f'finished: {len(durations)} units run, {failed} failed', flush=True)


def _interrupted(signum, frame) -> None:
  """SIGINT / SIGTERM: one line and exit code 130 at once, as `monoloc-train` does.

  Exiting at once is safe (a unit's files are written atomically and a
  checkpoint counts only once its manifest exists, so the rerun resumes the
  unit from its last complete epoch); unwinding instead could wait on
  background threads.
  """
  del signum, frame
  sys.stdout.flush()
  os.write(2, b'interrupted; rerun the same command to resume (finished units are kept)\n')
  os._exit(130)  # pylint: disable=protected-access


def _run(argv) -> None:
  signal.signal(signal.SIGTERM, _interrupted)
  signal.signal(signal.SIGINT, _interrupted)
  errors.one_line_errors(main)(argv)


if __name__ == '__main__':
  app.run(_run)
