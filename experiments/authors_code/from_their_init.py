"""This library's procedure, trained from the authors' code's initial weights.

Inv Reverse ReCopy / MonoAttn is the Table 2 row where the two codes part: the
authors' code solves 5 of 5 seeds at length 100, the authors' procedure here 1 of 5
(results/NOTES.md). The model and one update are equal; a whole run differs in its
initial weights, batches and dropout draws. This trains the authors' procedure
(`table2_authors` unit config, our data) from the initial weights of the authors'
runs, with our batches and dropout: if it then solves as their code does, the
difference lies in the initial weights; if it fails as ours do, it lies in training.

1. Their initial weights, one trace per run `time` (their virtualenv; one update and
   one dev pass are run, only the weights before them are used):

     python experiments/authors_code/export_data.py --task=inv_reverse_recopy \\
         --out=/tmp/irr/processed_data
     for t in 0 1 2 3 4; do ../refcode/.venv/bin/python \\
         experiments/authors_code/trajectory.py authors --data=/tmp/irr/processed_data/rgc \\
         --dataset=rgc --model=BiGRU_MonoAttn --time=$t --dropout=0.5 --steps=1 \\
         --eval_every=1 --trace=/tmp/irr/their_init_t$t.npz; done

2. Training here (this repository's virtualenv), the traces' runs as the seeds of one
   program (resumable in --workdir), results in
   results/authors_code_init/<task>/<variant>.json:

     .venv/bin/python experiments/authors_code/from_their_init.py \\
         --traces=/tmp/irr/their_init_t0.npz,/tmp/irr/their_init_t1.npz --workdir=/tmp/irr/run

Each entry of the JSON is the unit record `reproduce.py` writes for that seed, plus
`initial_weights` (their run `time` and the trace). Dropout keys and batches are
those of our seeds --seed, --seed + 1, ... (the grid's seed numbers).
"""

import argparse
import json
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / 'experiments'))
sys.path.insert(0, str(HERE))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--traces', required=True,
                      help="comma list of trajectory.py authors traces (their initial weights)")
  parser.add_argument('--task', default='inv_reverse_recopy')
  parser.add_argument('--variant', default='mono')
  parser.add_argument('--seed', type=int, default=0, help='our first seed (dropout, batches)')
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--results_dir', default=str(REPO / 'results'))
  parser.add_argument('--max_epochs', type=int, default=0,
                      help="epoch budget (0: the unit's, 100); fewer only to try the script")
  args = parser.parse_args()
  traces = [pathlib.Path(t) for t in args.traces.split(',') if t]
  missing = [str(t) for t in traces if not t.is_file()]
  if not traces or missing:
    sys.exit(f'error: no such trace: {", ".join(missing) or "(none given)"}; write them with '
             'trajectory.py authors (see this script\'s docstring)')

  import jax  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from monoloc_jax import errors  # pylint: disable=g-import-not-at-top
  from monoloc_jax import input_pipeline as ip  # pylint: disable=g-import-not-at-top
  from monoloc_jax import rundir  # pylint: disable=g-import-not-at-top
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  import grid as grids_lib  # pylint: disable=g-import-not-at-top
  import reproduce  # pylint: disable=g-import-not-at-top
  import weights  # pylint: disable=g-import-not-at-top

  units = [grids_lib.Unit('table2_authors', args.task, f'{args.variant}.authors', args.seed + i)
           for i in range(len(traces))]
  data_dir, why = reproduce.DataDirs().for_task(args.task)   # generated tasks only
  if why:
    sys.exit(f'error: {args.task}: {why}; this script trains generated tasks only')
  config = reproduce.unit_config(default.get_config(), units[0], data_dir)
  config.seeds = len(units)
  if args.max_epochs:
    config.max_epochs = args.max_epochs
  vocab = ip.load_data(config).vocab

  per_seed, times = zip(*(weights.from_trace(path, vocab.tokens) for path in traces))
  initial = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *per_seed)

  t0 = time.time()
  try:
    results = train.train_and_evaluate(config, args.workdir, initial_params=initial)
  except errors.MonolocError as e:
    sys.exit(f'error: {e}')
  wall = reproduce.run_wall_s(results, time.time() - t0)
  history = rundir.read_history(pathlib.Path(args.workdir))
  records = []
  for i, (unit, path, their_time) in enumerate(zip(units, traces, times)):
    unit_config = ml_collections.ConfigDict(config.to_dict())    # the config that ran
    unit_config.seed, unit_config.seeds = unit.seed, 1
    record = reproduce.unit_record(unit, unit_config,
                                   reproduce.seed_results(results, history, i), data_dir,
                                   wall / len(units))
    record['initial_weights'] = {'from': 'authors_code', 'time': their_time,
                                 'trace': path.name}
    records.append(record)
  out = pathlib.Path(args.results_dir) / 'authors_code_init' / args.task / f'{args.variant}.json'
  out.parent.mkdir(parents=True, exist_ok=True)
  old = json.loads(out.read_text()) if out.exists() else []
  keep = [r for r in old if r['initial_weights']['time'] not in times]
  out.write_text(json.dumps(sorted(keep + records, key=lambda r: r['initial_weights']['time']),
                            indent=1) + '\n')
  for r in records:
    print(f"their time {r['initial_weights']['time']}: "
          + ', '.join(f"{k} {v['accuracy']}" for k, v in r['test'].items())
          + f"; best dev {r['best_dev_accuracy']} at epoch {r['best_dev_epoch']} of "
            f"{r['epochs']}", flush=True)
  print(f'wrote {out}')


if __name__ == '__main__':
  main()
