"""Writes tests/data/torch_adamw_steps.npz: the authors' optimizer step, run by torch.

The authors' `seq2seq_agent` steps with `clip_grad_norm_(params, 5)` and then
`torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)` (betas and eps at torch's
defaults), and their ReduceLROnPlateau changes the lr between epochs. This script
runs exactly that on fixed parameters and gradients for four steps (one with the
clip active, one with the lr halved in between, one with a gradient of zero in a
leaf) and saves the inputs and torch's parameters after every step.
`tests/recipes_test.py` checks that this library's optimizer
(`train.make_optimizer`) gives the same parameters within float32 rounding.

Run with a Python that has torch (e.g. the authors' code's virtualenv):
  ../refcode/.venv/bin/python experiments/authors_code/optimizer_steps.py
"""

import pathlib

import numpy as np
import torch

OUT = pathlib.Path(__file__).resolve().parents[2] / 'tests' / 'data' / 'torch_adamw_steps.npz'
SHAPES = {'a': (4, 3), 'b': (5,), 'c': (2, 2, 3)}
LRS = (1e-3, 1e-3, 5e-4, 5e-4)   # the lr of each step (halved by the plateau rule)
SCALES = (10.0, 0.3, 1.0, 0.05)  # gradient scale per step: step 1's global norm is > 5


def main():
  rng = np.random.default_rng(20231124)
  params = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
  grads = [{k: (scale * rng.normal(size=s)).astype(np.float32) for k, s in SHAPES.items()}
           for scale in SCALES]
  grads[3]['b'][:] = 0.0
  tp = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in params.items()}
  opt = torch.optim.AdamW(list(tp.values()), lr=LRS[0], weight_decay=0.0)
  out = {f'init/{k}': v for k, v in params.items()}
  for step, (lr, g) in enumerate(zip(LRS, grads)):
    for group in opt.param_groups:
      group['lr'] = lr
    for k, p in tp.items():
      p.grad = torch.tensor(g[k])
      out[f'grad{step}/{k}'] = g[k]
    norm = torch.nn.utils.clip_grad_norm_(list(tp.values()), 5.0)
    out[f'norm{step}'] = np.float32(norm)
    opt.step()
    opt.zero_grad()
    for k, p in tp.items():
      out[f'after{step}/{k}'] = p.detach().numpy().copy()
  out['lrs'] = np.array(LRS, np.float32)
  out['torch_version'] = np.array(torch.__version__)
  np.savez(OUT, **out)
  print(f'wrote {OUT}: torch {torch.__version__}, step norms '
        + ', '.join(f"{float(out[f'norm{i}']):.3f}" for i in range(len(LRS))))


if __name__ == '__main__':
  main()
