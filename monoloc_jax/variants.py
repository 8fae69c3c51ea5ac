"""The one registry from the paper's model names to attention variants (SPEC §2.6).

`MODELS` maps each slug to an `AttentionSpec`: which softmax branch, which
location rule, and whether direction mixing (Bi-, Eq. 17-18) and position
reference (PR, App. B) are on. Content mixing (Eq. 15-16) follows from having
both a softmax branch and a location rule. Everything else in the library looks
variants up here.
"""

from typing import Dict, Tuple

from monoloc_jax import errors
from monoloc_jax.attention import AttentionSpec

_C, _B = 'content', True  # brevity in the table below
_S = AttentionSpec

# slug: AttentionSpec(scores, location, direction_mixing, position_reference)
MODELS: Dict[str, AttentionSpec] = {
    'content': _S('content'),
    'relative': _S('relative'),
    'bi_relative': _S('relative', direction_mixing=_B),
    'bi_rope': _S('rope', direction_mixing=_B),
    'locattn': _S(None, 'locattn'),
    'locattn_s': _S(None, 'locattn_s'),
    'mix_locattn': _S(_C, 'locattn'),
    'mix_locattn_s': _S(_C, 'locattn_s'),
    'mix_locattn_s_pr': _S(_C, 'locattn_s', position_reference=True),
    'onestep': _S(None, 'onestep', direction_mixing=_B),
    'mix_onestep': _S(_C, 'onestep', direction_mixing=_B),
    'mix_onestep_pr': _S(_C, 'onestep', _B, position_reference=True),
    'mono': _S(None, 'mono', direction_mixing=_B),
    'mix_mono': _S(_C, 'mono', direction_mixing=_B),
    'mix_mono_pr': _S(_C, 'mono', _B, position_reference=True),
    'rmono': _S(None, 'rmono', direction_mixing=_B),
    'mix_rmono': _S(_C, 'rmono', direction_mixing=_B),
    'mix_rmono_pr': _S(_C, 'rmono', _B, position_reference=True),
    'onestep_minus_step2': _S(None, 'onestep_minus_step2', direction_mixing=_B),
    'onestep_minus_step3': _S(None, 'onestep_minus_step3', direction_mixing=_B),
    'onestep_minus_sigmoid': _S(None, 'onestep_minus_sigmoid', direction_mixing=_B),
}

# The paper's display names, for tables and plots.
DISPLAY_NAMES: Dict[str, str] = {
    'content': 'Content', 'relative': 'Relative', 'bi_relative': 'Bi-Relative',
    'bi_rope': 'Bi-ROPE', 'locattn': 'LocAttn', 'locattn_s': 'LocAttn S',
    'mix_locattn': 'Mix LocAttn', 'mix_locattn_s': 'Mix LocAttn S',
    'mix_locattn_s_pr': 'Mix LocAttn S PR', 'onestep': 'OneStepAttn',
    'mix_onestep': 'Mix OneStepAttn', 'mix_onestep_pr': 'Mix OneStepAttn PR',
    'mono': 'MonoAttn', 'mix_mono': 'Mix MonoAttn', 'mix_mono_pr': 'Mix MonoAttn PR',
    'rmono': 'RMonoAttn', 'mix_rmono': 'Mix RMonoAttn',
    'mix_rmono_pr': 'Mix RMonoAttn PR',
    'onestep_minus_step2': 'OneStepAttn -Step 2',
    'onestep_minus_step3': 'OneStepAttn -Step 3',
    'onestep_minus_sigmoid': 'OneStepAttn -Sigmoid',
}

MODEL_NAMES: Tuple[str, ...] = tuple(MODELS)


def get(name: str) -> AttentionSpec:
  """The variant of slug `name`; unknown names raise a ValueError listing the valid ones."""
  try:
    return MODELS[name]
  except KeyError:
    raise errors.unknown_name('model', name, MODELS) from None
