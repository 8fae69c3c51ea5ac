"""The one registry from the paper's model names to attention variants.

`VARIANTS` maps each slug to an `attention.Variant`: its display name, its
softmax branch, its location rule, and whether direction mixing ("Bi-",
Eq. 17-18) and position reference ("PR", App. B) are on. Content mixing
("Mix", Eq. 15-16) follows from having both a softmax branch and a location
rule. Everything else in the library resolves a slug here, once, at its edge
(`get`, `from_config`) and then passes the `Variant` itself around.
"""

import dataclasses
import types
from typing import Callable, Mapping, Tuple

import jax

from monoloc_jax import attention
from monoloc_jax import errors
from monoloc_jax.attention import CONTENT, LOCATION_RULES, RELATIVE, ROPE, Variant

_R = LOCATION_RULES


def _entries():
  bi = dict(direction_mixing=True)
  # The authors' code builds Mix OneStep/Mono/RMono (and their PR forms) without
  # the softmax branch; see `from_config` and BUILD_NOTES.md §2.
  authors_no_mix = dict(authors_code_mixes=False)
  return (
      Variant('content', 'Content', scores=CONTENT),
      Variant('relative', 'Relative', scores=RELATIVE),
      Variant('bi_relative', 'Bi-Relative', scores=RELATIVE, **bi),
      Variant('bi_rope', 'Bi-ROPE', scores=ROPE, **bi),
      Variant('locattn', 'LocAttn', location=_R['locattn']),
      Variant('locattn_s', 'LocAttn S', location=_R['locattn_s']),
      Variant('mix_locattn', 'Mix LocAttn', CONTENT, _R['locattn']),
      Variant('mix_locattn_s', 'Mix LocAttn S', CONTENT, _R['locattn_s']),
      Variant('mix_locattn_s_pr', 'Mix LocAttn S PR', CONTENT, _R['locattn_s'],
              position_reference=True),
      Variant('onestep', 'OneStepAttn', location=_R['onestep'], **bi),
      Variant('mix_onestep', 'Mix OneStepAttn', CONTENT, _R['onestep'], **bi, **authors_no_mix),
      Variant('mix_onestep_pr', 'Mix OneStepAttn PR', CONTENT, _R['onestep'], **bi,
              position_reference=True, **authors_no_mix),
      Variant('mono', 'MonoAttn', location=_R['mono'], **bi),
      Variant('mix_mono', 'Mix MonoAttn', CONTENT, _R['mono'], **bi, **authors_no_mix),
      Variant('mix_mono_pr', 'Mix MonoAttn PR', CONTENT, _R['mono'], **bi,
              position_reference=True, **authors_no_mix),
      Variant('rmono', 'RMonoAttn', location=_R['rmono'], **bi),
      Variant('mix_rmono', 'Mix RMonoAttn', CONTENT, _R['rmono'], **bi, **authors_no_mix),
      Variant('mix_rmono_pr', 'Mix RMonoAttn PR', CONTENT, _R['rmono'], **bi,
              position_reference=True, **authors_no_mix),
      Variant('onestep_minus_step2', 'OneStepAttn -Step 2',
              location=_R['onestep_minus_step2'], **bi),
      Variant('onestep_minus_step3', 'OneStepAttn -Step 3',
              location=_R['onestep_minus_step3'], **bi),
      Variant('onestep_minus_sigmoid', 'OneStepAttn -Sigmoid',
              location=_R['onestep_minus_sigmoid'], **bi),
  )


VARIANTS: Mapping[str, Variant] = types.MappingProxyType({v.name: v for v in _entries()})
NAMES: Tuple[str, ...] = tuple(VARIANTS)


def get(name: str) -> Variant:
  """The variant of slug `name`; unknown names raise a MonolocError listing the valid ones."""
  try:
    return VARIANTS[name]
  except (KeyError, TypeError):
    raise errors.unknown_name('variant', name, VARIANTS) from None


def with_param_init(variant: Variant, name: str, init) -> Variant:
  """`variant` with the initialiser of its location rule's array `name` replaced
  (unchanged when the rule has no such array)."""
  rule = variant.location
  if rule is None or all(p.name != name for p in rule.params):
    return variant
  params = tuple(dataclasses.replace(p, init=init) if p.name == name else p
                 for p in rule.params)
  return dataclasses.replace(variant, location=dataclasses.replace(rule, params=params))


def authors_code_form(variant: Variant) -> Variant:
  """The variant as the authors' released code builds it.

  In that code's configs, Mix OneStepAttn, Mix MonoAttn, Mix RMonoAttn and their
  PR forms inherit `location_attention_only = True` from the LocAttn config, so
  they get no query/key projections and attend with the location weights
  lambda' alone (pa_t from lambda' too): they do not mix. Every other variant
  is returned unchanged.
  """
  if variant.authors_code_mixes:
    return variant
  return dataclasses.replace(variant, scores=None, position_reference=False,
                             display_name=f"{variant.display_name} (authors' code)")


# config.mix_mode -> how a Mix variant is built.
MIX_MODES: Mapping[str, Callable[[Variant], Variant]] = types.MappingProxyType({
    'paper': lambda variant: variant,       # Eq. 15-16: a name that says Mix mixes
    'authors_code': authors_code_form,
})


def with_config_options(variant: Variant, config) -> Variant:
  """`variant` with the config's options of the location read-out applied
  (`variant` itself when they are the defaults):

  config.sigma_bias: True (default; sigma = ReLU(w_sigma . l_t + b_sigma) ...) or
    False (no b_sigma, as the authors' code).
  config.location_normaliser: Eq. 9's normaliser, a key of
    `attention.LOCATION_NORMALISERS`: 'padding_free' (default) or 'authors_code'.
  """
  sigma_bias = config.sigma_bias
  if not isinstance(sigma_bias, bool):
    raise errors.MonolocError(f'bad value for config.sigma_bias: {sigma_bias!r}; '
                              'it must be True or False')
  name = config.location_normaliser
  if name not in attention.LOCATION_NORMALISERS:
    raise errors.unknown_name('location_normaliser', name, attention.LOCATION_NORMALISERS)
  normaliser = attention.LOCATION_NORMALISERS[name]
  if (sigma_bias, normaliser) == (variant.sigma_bias, variant.location_normaliser):
    return variant
  return dataclasses.replace(variant, sigma_bias=sigma_bias, location_normaliser=normaliser)


def from_config(config) -> Variant:
  """The variant a training config asks for: `config.variant`, with its options applied.

  config.mix_mode: 'paper' (default; Mix variants mix, Eq. 15-16) or
    'authors_code' (`authors_code_form`; run directories written before this name
    say 'reference_code', which `rundir.load_config` reads as 'authors_code').
  config.mono_gate_init: the initial MonoAttn gate logit p (Eq. 19).
  config.sigma_bias, config.location_normaliser: see `with_config_options`.
  """
  variant = get(config.variant)
  if config.mix_mode not in MIX_MODES:
    raise errors.unknown_name('mix_mode', config.mix_mode, MIX_MODES)
  variant = MIX_MODES[config.mix_mode](variant)
  if config.mono_gate_init != attention.MONO_GATE_INIT:
    variant = with_param_init(variant, 'gate_logit',
                              jax.nn.initializers.constant(config.mono_gate_init))
  return with_config_options(variant, config)
