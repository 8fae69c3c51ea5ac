"""The README's main job: a short OneStepAttn run on Reverse Copy.

Protocol: 4,000 of the 10,000 training samples, 500 samples per dev/test split,
at most 6 epochs (early stopping and the lr plateau as in the paper).
"""

from monoloc_jax.configs import default


def get_config():
  c = default.get_config()
  c.task = 'reverse_copy'
  c.model = 'onestep'
  c.train_size = 4000
  c.eval_size = 500
  c.max_epochs = 6
  return c
