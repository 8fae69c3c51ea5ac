"""The README's main job: a short OneStepAttn run on Reverse Copy.

Protocol: all 10,000 training samples (lengths 5-10), at most 3 epochs, one
seed, the full 2,000-sample dev split and test splits at lengths 15, 30, 100.
Everything else (optimiser, lr plateau, early stopping) as in the paper.
"""

from monoloc_jax.configs import default


def get_config():
  c = default.get_config()
  c.task = 'reverse_copy'
  c.model = 'onestep'
  c.max_epochs = 3
  return c
