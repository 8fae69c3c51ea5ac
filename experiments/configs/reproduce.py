"""The reproduction protocol for a 2-core CPU machine (stated at the top of REPRODUCTION.md).

The paper's training setup (App. E: AdamW, lr 1e-3 halved after 4 epochs
without dev improvement, clip 5, batch 32, greedy-free full test splits), with
a smaller budget: at most 30 epochs (paper: 100), early stopping after 10
epochs without dev improvement (paper: 50), and a seed stops once its dev
accuracy has been 100% for 3 epochs in a row. Dev accuracy is greedy.
"""

from monoloc_jax.configs import default


def get_config():
  c = default.get_config()
  c.max_epochs = 30
  c.early_stop_patience = 10
  c.perfect_dev_patience = 3
  c.lr_patience = 4
  c.lr_factor = 0.5
  c.eval_size = 0            # the full 2,000-sample dev and test splits
  c.test_splits = 'paper'
  c.dev_metric = 'greedy'
  c.progress = False
  return c
