"""monoloc_jax: "Monotonic Location Attention for Length Generalization" in JAX/Flax.

A reimplementation of Ray Chowdhury & Caragea (ICML 2023) and of the location
attention of Dubois et al. (ACL 2020): 21 cross-attention variants as pure,
jittable kernels (`monoloc_jax.attention`), a BiGRU->GRU seq2seq model in Flax
(`Seq2Seq`; a Transformer beside it: `monoloc_jax.backbones`), twelve length-generalization tasks of the paper and the fifteen of the Chomsky-hierarchy suite (`monoloc_jax.tasks.chomsky`), and a multi-seed trainer.

    import monoloc_jax as ml
    ml.attention.gaussian_location_attention(...)        # a kernel (Eq. 5-9)
    ml.train_and_evaluate(config, 'runs/x')              # train; results.json
    config, vocab, model, params, seed = ml.restore_seed('runs/x')   # best-dev seed
    ml.decode_with_attention('runs/x', ['4 7 9 8'])      # decode with its attention

The names below load on first use, so `import monoloc_jax` stays fast (it imports
neither JAX nor Flax). README "Using it from Python" has a worked example.
"""

import importlib
from typing import Any, List

__version__ = '0.1.0'      # pyproject.toml's [project] version (tests check they agree)

# Submodules reachable as monoloc_jax.<name> without an explicit import.
_SUBMODULES = ('attention', 'variants', 'backbones', 'rnn', 'train', 'inference', 'metrics',
               'tasks', 'configs', 'viz', 'rundir', 'input_pipeline', 'errors', 'range_eval')

# Re-exported entry points: name -> the module that defines it.
_EXPORTS = {
    # kernels and variants (monoloc_jax.attention, by name)
    'Variant': 'monoloc_jax.attention',
    'ScoreBranch': 'monoloc_jax.attention',
    'LocationRule': 'monoloc_jax.attention',
    'attention_step': 'monoloc_jax.attention',
    'get_variant': 'monoloc_jax.variants',
    # the model
    'Seq2Seq': 'monoloc_jax.backbones.gru',
    # training, evaluation, decoding
    'get_config': 'monoloc_jax.configs.default',
    'train_and_evaluate': 'monoloc_jax.train',
    'evaluate': 'monoloc_jax.inference',
    'predict': 'monoloc_jax.inference',
    'decode_with_attention': 'monoloc_jax.inference',
    'restore_for_eval': 'monoloc_jax.inference',
    'restore_seed': 'monoloc_jax.inference',
    # range evaluation: every length of a range, and its per-length metric
    'range_evaluate': 'monoloc_jax.range_eval',
    'token_accuracy': 'monoloc_jax.metrics',
    'MonolocError': 'monoloc_jax.errors',
}
# Exported under another name than the defining module's.
_RENAMED = {'get_variant': 'get'}

__all__ = ['__version__', *_EXPORTS, *_SUBMODULES]


def __getattr__(name: str) -> Any:
  if name in _EXPORTS:
    value = getattr(importlib.import_module(_EXPORTS[name]), _RENAMED.get(name, name))
  elif name in _SUBMODULES:
    value = importlib.import_module(f'{__name__}.{name}')
  else:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  globals()[name] = value          # later lookups skip __getattr__
  return value


def __dir__() -> List[str]:
  return sorted(set(globals()) | set(__all__))
