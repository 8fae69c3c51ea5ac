"""The two codes' initial weights of Inv Reverse ReCopy / MonoAttn, compared per tensor.

Our seeds 0-4 (the `table2_authors` unit config) against the authors' runs 0-4 (traces
of `trajectory.py authors --steps=1`, mapped to our layout by weights.py): per parameter,
the standard deviation, mean and largest magnitude over the five seeds of each; `<--`
marks a ratio of standard deviations outside 0.9-1.1 or means further apart than a tenth
of a standard deviation (with five seeds a one-element bias is marked by chance).

  PYTHONPATH=. .venv/bin/python experiments/authors_code/compare_init.py ../irrinit
"""
import pathlib
import sys

import jax
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent)); sys.path.insert(0, str(HERE))
TRACES = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else '../irrinit')
import grid as grids_lib, reproduce, weights
from monoloc_jax.configs import default
from monoloc_jax import input_pipeline as ip, backbones, train
u = grids_lib.Unit('table2_authors', 'inv_reverse_recopy', 'mono.authors', 0)
c = reproduce.unit_config(default.get_config(), u, None); c.seeds = 5
data = ip.load_data(c)
model = backbones.from_config(c, data.vocab)
progs = train.make_train_programs(model, train.make_optimizer(c))
probe = next(ip.train_batches(data.train, c.batch_size, [0], 0, c.data_seed, data.vocab.sos_id, False))
ours = train.create_train_state(progs, list(range(5)), probe).params
theirs = []
for t in range(5):
  d = dict(np.load(TRACES / f'their_init_t{t}.npz'))
  th = weights.unflatten(d['before'], d['names'], d['shapes'])
  theirs.append(weights.to_ours(th, weights.vocab_perm([str(x) for x in d['vocab']], data.vocab.tokens), skip=[str(n) for n in d['unused']]))
T = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *theirs)
fo = {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_flatten_with_path(ours)[0]}
ft = {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_flatten_with_path(T)[0]}
print(f"{'param':70s} {'shape':>14s} {'std ours':>9s} {'std theirs':>10s} {'ratio':>6s} {'mean o':>8s} {'mean t':>8s} {'max|o|':>7s} {'max|t|':>7s}")
for k in fo:
  o, t = fo[k], ft.get(k)
  if t is None: print(k, 'missing in theirs'); continue
  r = o.std() / t.std() if t.std() > 0 else float('nan')
  flag = '  <--' if not (0.9 < r < 1.1) or abs(o.mean()-t.mean()) > 0.1*max(o.std(),1e-9) else ''
  print(f"{k[:70]:70s} {str(o.shape[1:]):>14s} {o.std():9.4f} {t.std():10.4f} {r:6.3f} {o.mean():8.4f} {t.mean():8.4f} {np.abs(o).max():7.3f} {np.abs(t).max():7.3f}{flag}")
k="['cross_attention']['direction']['bias']"
print('direction bias ours', fo[k].ravel().round(4), 'theirs', ft[k].ravel().round(4))
