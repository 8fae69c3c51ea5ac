"""The README's main job: a short OneStepAttn run on Reverse Copy.

Protocol: all 10,000 training samples (lengths 5-10), at most 3 epochs, three
seeds trained together (`multiseed`: side by side from host threads on a multi-core
CPU, one vmapped program on an accelerator), the full 2,000-sample dev split
and test splits at lengths 15, 30, 100; the table reports the median over the
seeds (the paper's statistic) and mean ± std. Everything else (optimiser, lr
plateau, early stopping) as in the paper.

Why three seeds: OneStepAttn on Reverse Copy either leaves its initial plateau
within the first epoch or settles in a basin that fits the training lengths
and does not extrapolate. Which seeds do which can change with the jax version
and the machine (float rounding in the first steps decides it; MEASUREMENTS.md §1 shows the per-seed marks),
so the table reports the median, as the paper does over five seeds.

The in-distribution split (test_iid, lengths 5-10) is evaluated too, so the table
and the accuracy-vs-length figure show the drop from training lengths to longer ones.

Speed: every training batch takes the split's longest target (train_widths='widest'):
one train step to compile instead of two, for about 16% more decoder steps per
epoch, a gain over three epochs (MEASUREMENTS.md §4).
"""

from monoloc_jax.configs import default


def get_config():
  c = default.get_config()
  c.task = 'reverse_copy'
  c.variant = 'onestep'
  c.seeds = 3
  c.max_epochs = 3
  c.test_splits = 'test_iid,test_15,test_30,test_100'
  c.train_widths = 'widest'
  return c
