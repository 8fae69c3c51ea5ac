"""The backbones: the one table `BACKBONES` (config.backbone -> `Backbone`) and
`from_config`, the one seam between a config and a model.

  gru.py          the paper's BiGRU -> GRU (`gru.Seq2Seq`, config.backbone 'gru')
  transformer.py  beyond the paper: a pre-LN Transformer (`transformer.Transformer`)
  positions.py    the Transformer's self-attention position schemes (`positions.SCHEMES`)
  decoding.py     what both share: `DecodeOutput` and the greedy loop

Each backbone owns its config group (`config.gru`, `config.transformer`: its
`config_defaults`, read by configs/default.py), checks it (`validate`), builds its
model (`build`) and counts its FLOPs for the benchmark (`config_flops`). The shared
fields (hidden_dim, qk_dim, dropout, dtype, init_scheme, min_sigma, ...) stay top-level.
"""

from typing import Any, Callable, Dict, NamedTuple, Optional, Protocol

import jax
import jax.numpy as jnp
import ml_collections

from monoloc_jax import attention
from monoloc_jax import errors
from monoloc_jax import variants
from monoloc_jax.backbones import gru
from monoloc_jax.backbones import transformer
from monoloc_jax.backbones.decoding import DecodeOutput

Array = jax.Array
DType = Any

__all__ = ['Backbone', 'BACKBONES', 'Model', 'DTYPES', 'count_params', 'dtype_of', 'from_config',
           'init_params', 'validate', 'gru', 'transformer', 'decoding']

# config.dtype -> the computation dtype (the model's `dtype`); the parameters are kept in
# at_least_float32(dtype): float32 for bfloat16 (mixed precision), float64 for float64.
DTYPES: Dict[str, DType] = {
    'float32': jnp.float32,
    'bfloat16': jnp.bfloat16,
    'float64': jnp.float64,     # needs jax_enable_x64
}


class Backbone(NamedTuple):
  """One backbone: everything the rest of the library needs of it.

  build(config, vocab, variant, dtype) -> the Flax model;
  defaults() -> its config group (`config.<name>`), each field with its default;
  validate(config) -> None, or a one-line MonolocError about its group;
  flops(n_src, n_tgt, vocab, config, variant) -> forward FLOPs of one sample.
  """
  build: Callable[..., Any]
  defaults: Callable[[], ml_collections.ConfigDict]
  validate: Callable[[Any], None]
  flops: Callable[..., float]


# config.backbone -> its `Backbone` (the one table).
BACKBONES: Dict[str, Backbone] = {
    'gru': Backbone(gru.build, gru.config_defaults, gru.validate, gru.config_flops),
    'transformer': Backbone(transformer.build, transformer.config_defaults,
                            transformer.validate, transformer.config_flops),
}


class Model(Protocol):
  """What every backbone's Flax module offers (`gru.Seq2Seq`, `transformer.Transformer`):
  the Flax `init`/`apply`, and, through `apply(..., method=...)`:
    __call__(src [B, N], src_lengths [B], tgt_in [B, T], train) -> DecodeOutput (teacher-forced);
    greedy(src, src_lengths, max_steps) -> DecodeOutput (tokens [B, max_steps]);
    build(src, src_lengths) -> None: creates every parameter, decoder not run (`init_params`);
  plus its attributes `variant`, `dtype`, `pad_id`, `sos_id`, `eos_id`."""
  variant: attention.Variant
  pad_id: int
  sos_id: int
  eos_id: int

  def __call__(self, src: Array, src_lengths: Array, tgt_in: Array,
               train: bool = False) -> DecodeOutput: ...

  def greedy(self, src: Array, src_lengths: Array, max_steps: int) -> DecodeOutput: ...

  def build(self, src: Array, src_lengths: Array) -> None: ...

  def init(self, *args, **kwargs) -> Any: ...

  def apply(self, *args, **kwargs) -> Any: ...


def init_params(model: Model, key: Array, src: Array, src_lengths: Array) -> Any:
  """The parameters of `model` drawn from `key` (src [B, N], src_lengths [B]: any batch,
  they give the shapes only). Equal to `model.init(key, src, src_lengths, tgt_in)`, whose
  teacher-forced pass the parameters do not depend on, but traced through `model.build`,
  which creates them without running the decoder: a smaller program to compile."""
  return model.init({'params': key}, src, src_lengths, method=model.build)['params']


def count_params(params: Any) -> int:
  """Total number of scalars in a parameter tree."""
  return sum(x.size for x in jax.tree_util.tree_leaves(params))


def dtype_of(config) -> DType:
  """config.dtype (a key of DTYPES) as a dtype; a one-line MonolocError for an unknown
  name, or for 'float64' without jax_enable_x64."""
  name = config.dtype
  if name not in DTYPES:
    raise errors.unknown_name('dtype', name, DTYPES)
  if name == 'float64' and not jax.config.jax_enable_x64:
    raise errors.MonolocError("config.dtype='float64' needs jax_enable_x64 (set "
                              'JAX_ENABLE_X64=1 or jax.config.update("jax_enable_x64", True))')
  return DTYPES[name]


def validate(config) -> None:
  """Checks config.backbone, config.init_scheme, config.dtype and every backbone's group
  (the unselected ones too: a stored config must be valid whichever backbone reads it)."""
  if config.backbone not in BACKBONES:
    raise errors.unknown_name('backbone', config.backbone, BACKBONES)
  if config.init_scheme not in attention.INIT_SCHEMES:
    raise errors.unknown_name('init_scheme', config.init_scheme, attention.INIT_SCHEMES)
  dtype_of(config)                 # unknown dtype, or float64 without x64
  for backbone in BACKBONES.values():
    backbone.validate(config)


def from_config(config, vocab, variant: Optional[attention.Variant] = None) -> Model:
  """The model a training config describes, for vocabulary `vocab`.

  config.backbone: a key of BACKBONES: 'gru' (default; `gru.Seq2Seq`, the paper's) or
    'transformer' (`transformer.Transformer`, beyond the paper); its size is the shared
    fields and its group (config.gru, config.transformer).
  variant: an attention variant to use instead of the registry's `config.variant`
  (e.g. one defined outside the package); config.sigma_bias and
  config.location_normaliser apply to it too (`variants.with_config_options`).

  config.init_scheme: 'library' (default) or 'authors_code' (attention.INIT_SCHEMES).
  config.sigma_bias: True (default) or False (no sigma read-out bias).
  config.location_normaliser: 'padding_free' (default) or 'authors_code'
    (`attention.LOCATION_NORMALISERS`).
  config.dtype: the computation dtype, a key of DTYPES ('float32' by default,
    'bfloat16', or 'float64' with jax_enable_x64); the parameters are kept in
    at least float32 (float64 for 'float64').
  """
  validate(config)
  variant = (variants.from_config(config) if variant is None
             else variants.with_config_options(variant, config))
  return BACKBONES[config.backbone].build(config, vocab, variant, dtype_of(config))
