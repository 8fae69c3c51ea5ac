"""The two codes' initial weights of Inv Reverse ReCopy / MonoAttn, compared per tensor.

Our seeds 0-4 (the `table2_authors` unit config) against the authors' runs 0-4 (traces
of `trajectory.py authors --steps=1`, mapped to our layout by `weights.from_trace`): per
parameter, the standard deviation, mean and largest magnitude over the five seeds of
each; `<--` marks a ratio of standard deviations outside 0.9-1.1 or means further apart
than a tenth of a standard deviation (with five seeds a one-element bias is marked by
chance; constant tensors are marked too). The last line prints the direction gate's
bias of each seed, the one parameter that sets the initial reading direction.

  PYTHONPATH=. .venv/bin/python experiments/authors_code/compare_init.py ../irrinit
"""

import pathlib
import sys

import jax
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import grid as grids_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
import reproduce  # pylint: disable=g-import-not-at-top,wrong-import-position
import weights  # pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax import backbones  # pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax import input_pipeline as ip  # pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax import train  # pylint: disable=g-import-not-at-top,wrong-import-position
from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top,wrong-import-position

SEEDS = range(5)
DIRECTION_BIAS = "['cross_attention']['direction']['bias']"


def by_path(tree):
  return {jax.tree_util.keystr(k): np.asarray(v)
          for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


def main():
  traces = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else '../irrinit')
  unit = grids_lib.Unit('table2_authors', 'inv_reverse_recopy', 'mono.authors', 0)
  config = reproduce.unit_config(default.get_config(), unit, None)
  data = ip.load_data(config)
  programs = train.make_train_programs(backbones.from_config(config, data.vocab),
                                       train.make_optimizer(config))
  probe = next(ip.train_batches(data.train, config.batch_size, [0], 0, config.data_seed,
                                data.vocab.sos_id, config.bucket_batches))
  ours = by_path(train.create_train_state(programs, list(SEEDS), probe).params)
  theirs = [weights.from_trace(traces / f'their_init_t{t}.npz', data.vocab.tokens)[0]
            for t in SEEDS]
  theirs = by_path(jax.tree_util.tree_map(lambda *xs: np.stack(xs), *theirs))
  print(f"{'param':60s} {'shape':>12s} {'std ours':>9s} {'theirs':>8s} {'ratio':>6s} "
        f"{'mean ours':>9s} {'theirs':>8s} {'max|ours|':>9s} {'theirs':>7s}")
  for key, o in ours.items():
    t = theirs[key]
    ratio = o.std() / t.std() if t.std() > 0 else float('nan')
    apart = not 0.9 < ratio < 1.1 or abs(o.mean() - t.mean()) > 0.1 * max(o.std(), 1e-9)
    print(f'{key[:60]:60s} {str(o.shape[1:]):>12s} {o.std():9.4f} {t.std():8.4f} '
          f'{ratio:6.3f} {o.mean():9.4f} {t.mean():8.4f} {np.abs(o).max():9.3f} '
          f'{np.abs(t).max():7.3f}' + ('  <--' if apart else ''))
  print('direction bias per seed: ours', ours[DIRECTION_BIAS].ravel().round(4),
        'theirs', theirs[DIRECTION_BIAS].ravel().round(4))


if __name__ == '__main__':
  main()
