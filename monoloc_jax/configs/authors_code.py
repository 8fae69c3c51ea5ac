"""The authors' training procedure: random batches, 100 epochs, their plateau and stopping rules.

`configs/default.py` with `recipes.AUTHORS_CODE`: every choice of the authors'
PyTorch code that the weight-for-weight check cannot see (batching, budget,
improvement and plateau rules, dev metric, DeDupe's source `<eos>`, parameter
initialisation, no sigma bias, their Eq. 9 normaliser). See `monoloc_jax/recipes.py`
for each value and where their code sets it, and README "Two training procedures".
"""

from monoloc_jax import recipes
from monoloc_jax.configs import default


def get_config():
  return recipes.apply(default.get_config(), 'authors_code')
