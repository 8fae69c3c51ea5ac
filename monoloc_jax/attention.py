"""Pure, jittable cross-attention kernels.

Every function here is a pure function of arrays: no Flax state, no Python-side
randomness, safe under `jax.jit`, `jax.vmap` and `jax.grad`. Equation numbers
(Eq. N) are those of Ray Chowdhury & Caragea (ICML 2023), "Monotonic Location
Attention for Length Generalization"; Dubois et al. (ACL 2020) is cited where
the kernel is theirs. Positions are 0-based; encoder position 0 is START.

Shapes use B for batch, S for encoder positions, D for the model width.

The module has three layers:
  1. elementary kernels (softstair, leaky_clamp, Gaussian weights, scores,
     rotary and sinusoidal embeddings, direction and content mixing);
  2. `LOCATION_RULES`, a registry that says, per location variant, which step
     activation and which mu update (Eq. 11-13, §5.3, Eq. 19) it uses;
  3. `attention_step`, which composes them into one decoder step of any variant
     described by an `AttentionSpec`.
"""

import dataclasses
import math
from typing import Callable, Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp

Array = jax.Array

# Constants of SPEC.md §2.
MIN_SIGMA = 0.27           # Eq. 10
SOFTSTAIR_TEMPERATURE = 20.0  # Eq. 14
LEAKY_SLOPE = 0.01         # Eq. 8
SIGMOID_STEP_SCALE = 5.0   # §5.3: sigmoid(5 rho)
DIRECTION_SCALE = 5.0      # Eq. 17: sigmoid(5 f_dir(e_cls))
GAUSSIAN_EPS = 1e-20       # guard of the Eq. 9 normaliser
ROPE_BASE = 10000.0


# --------------------------------------------------------------------------
# 1. Elementary kernels.
# --------------------------------------------------------------------------
def softstair(x: Array, temperature: float = SOFTSTAIR_TEMPERATURE) -> Array:
  """Eq. 14: softstair(x) = floor(x) + sigmoid(tau (x - floor(x) - 0.5)).

  A differentiable staircase: near-integer valued, with gradient concentrated
  at the half-integers. `floor` contributes no gradient.
  """
  floor = jnp.floor(x)
  return floor + jax.nn.sigmoid(temperature * (x - floor - 0.5))


def leaky_clamp(x: Array, lower: float = 0.0, upper: float = 1.0,
                slope: float = LEAKY_SLOPE) -> Array:
  """Eq. 8: leaky_clamp(x) = max(lower + m x, min(upper + m x, x)), m = slope.

  The identity on [lower, upper] (up to the m x leak outside it), so mu can
  leave the valid range only slowly while gradients never vanish.
  """
  return jnp.maximum(lower + slope * x, jnp.minimum(upper + slope * x, x))


def stepsize(lengths: Array) -> Array:
  """Eq. 7: the distance between neighbouring normalised positions, 1/max(1, s-1).

  lengths: [...] int, the number of valid encoder positions s (START/END
  included). Returns float32 [...].
  """
  return 1.0 / jnp.maximum(1, lengths - 1).astype(jnp.float32)


def normalized_positions(lengths: Array, max_len: int) -> Array:
  """Eq. 7: norm(i) = i / max(1, length - 1), for i = 0 ... max_len - 1.

  lengths: [B] (or any [...]) ints. Returns float32 [..., max_len]. Values past
  a row's length exceed 1; callers mask them.
  """
  idx = jnp.arange(max_len, dtype=jnp.float32)
  return idx * stepsize(lengths)[..., None]


def location_sigma(raw: Array, lengths: Array,
                   min_sigma: float = MIN_SIGMA) -> Array:
  """Eq. 10: sigma_t = (ReLU(w_sigma . l_t) + min_sigma) / s.

  raw: [...] the linear read-out w_sigma . l_t; lengths: [...] valid positions s.
  """
  return (jax.nn.relu(raw) + min_sigma) / lengths.astype(jnp.float32)


def gaussian_location_attention(mu: Array, sigma: Array, positions: Array,
                                mask: Array, eps: float = GAUSSIAN_EPS) -> Array:
  """Eq. 5-6 and 9: normalised Gaussian location weights lambda'.

    lambda_i  = exp(-(pos_i - mu)^2 / (2 sigma^2)) * mask_i
    lambda'_i = lambda_i / (sum_j lambda_j + eps)

  mu, sigma: [...]; positions, mask: [..., S]. Returns [..., S]: 0 at masked
  positions, summing to 1 over the valid ones (unless every weight underflows,
  as in the reference code, in which case it is all 0).

  Computed with a max-shift, which is the same function in exact arithmetic:
  with a_i = -z_i^2 / 2 and c = max_i a_i (no gradient through c),
    lambda'_i = exp(a_i - c) / (sum_j exp(a_j - c) + eps exp(-c)).
  The direct form's gradient divides by (sum + eps)^2, about 1e-40 once mu has
  left the input: a float32 denormal that XLA:CPU flushes to 0, so training
  got NaN gradients (seen with MonoAttn on Inv ReCopy). This form's
  gradients stay finite.
  """
  mask = mask.astype(bool)
  z = (positions - mu[..., None]) / sigma[..., None]
  log_lam = jnp.where(mask, -0.5 * z * z, -jnp.inf)
  shift = jax.lax.stop_gradient(jnp.max(log_lam, axis=-1, keepdims=True))
  shift = jnp.where(jnp.isfinite(shift), shift, 0.0)
  lam = jnp.where(mask, jnp.exp(log_lam - shift), 0.0)
  return lam / (jnp.sum(lam, axis=-1, keepdims=True) + eps * jnp.exp(-shift))


def attended_position(weights: Array, positions: Array) -> Array:
  """pa_t = sum_i a_ti norm(i) (§5.1): the expected attended position. [..., S] -> [...]."""
  return jnp.sum(weights * positions, axis=-1)


def masked_softmax(scores: Array, mask: Array) -> Array:
  """Softmax over the last axis restricted to `mask`; exactly 0 at masked positions."""
  mask = mask.astype(bool)
  scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
  weights = jax.nn.softmax(scores, axis=-1)
  return jnp.where(mask, weights, 0.0)


def content_scores(query: Array, keys: Array) -> Array:
  """Eq. 1: c_ti = q_t . k_i / sqrt(D).  query [..., D], keys [..., S, D] -> [..., S]."""
  return jnp.einsum('...d,...sd->...s', query, keys) / math.sqrt(query.shape[-1])


def sinusoidal_embedding(positions: Array, dim: int) -> Array:
  """Fixed sinusoidal embedding of (possibly negative) positions (Eq. 3).

  pe(k) = [sin(k w_0), ..., sin(k w_{D/2-1}), cos(k w_0), ..., cos(k w_{D/2-1})],
  w_j = 10000^(-2j/D) (Transformer-XL's concatenated layout). positions [...] -> [..., D].
  """
  inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
  angles = positions.astype(jnp.float32)[..., None] * inv_freq
  return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


def relative_scores(query: Array, keys: Array, rel_embedding: Array,
                    rel_kernel: Array, content_bias: Array,
                    position_bias: Array) -> Array:
  """Eq. 3-4 (Transformer-XL): relative-position attention scores.

    c_ti = (q + b_1) . k_i / sqrt(D) + (q + b_2) . (W_r pe_{i-t+1}) / sqrt(D)

  query: [B, D]; keys: [B, S, D]; rel_embedding: [S, D] or [B, S, D], the
  sinusoidal pe of the distance i - (t-1) of each key from the query step;
  rel_kernel: [D, D], W_r applied as `pe @ rel_kernel`; content_bias (b_1),
  position_bias (b_2): [D]. Returns [B, S].
  """
  content = content_scores(query + content_bias, keys)
  # (q + b_2) . (pe W_r) = ((q + b_2) W_r^T) . pe: one [B, D] x [D, D] product
  # instead of projecting all S embeddings at every step.
  projected = (query + position_bias) @ rel_kernel.T
  if rel_embedding.ndim == 2:
    rel_embedding = rel_embedding[None]
  position = content_scores(projected, rel_embedding)
  return content + position


def rotary_embedding(x: Array, positions: Array, base: float = ROPE_BASE) -> Array:
  """Rotary position embedding (App. B, Bi-ROPE; Su et al. 2021).

  Rotates channel pairs (x_j, x_{j+D/2}) by the angle p * base^(-2j/D):
    [x1 cos - x2 sin, x1 sin + x2 cos].
  x: [..., D]; positions: broadcastable to x.shape[:-1]. Returns [..., D].
  """
  half = x.shape[-1] // 2
  inv_freq = 1.0 / (base ** (jnp.arange(half, dtype=jnp.float32) * 2.0 / x.shape[-1]))
  angles = jnp.asarray(positions, jnp.float32)[..., None] * inv_freq
  cos, sin = jnp.cos(angles), jnp.sin(angles)
  x1, x2 = x[..., :half], x[..., half:]
  return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def reverse_valid(x: Array, lengths: Array) -> Array:
  """Reverses each row's first `lengths` positions; padding stays at the end.

  x: [B, S, ...]; lengths: [B]. Used for e_rev (§2.2) and the backward GRU.
  """
  s = x.shape[1]
  idx = jnp.arange(s)[None, :]
  src = jnp.where(idx < lengths[:, None], lengths[:, None] - 1 - idx, idx)
  return jnp.take_along_axis(x, src.reshape(src.shape + (1,) * (x.ndim - 2)), axis=1)


def direction_gate(logit: Array, scale: float = DIRECTION_SCALE) -> Array:
  """Eq. 17: alpha_dir = sigmoid(5 f_dir(e_cls)). logit [B] -> [B]."""
  return jax.nn.sigmoid(scale * logit)


def direction_mixing(encoded: Array, lengths: Array, alpha: Array) -> Array:
  """Eq. 18: e_dir = alpha e + (1 - alpha) e_rev.

  encoded: [B, S, D]; lengths: [B] valid positions; alpha: [B]. Returns [B, S, D].
  """
  a = alpha[:, None, None]
  return a * encoded + (1.0 - a) * reverse_valid(encoded, lengths)


def input_attention(weights: Array, alpha: Array, lengths: Array) -> Array:
  """Maps weights over direction-mixed positions back to input positions (Eq. 18).

  e_dir_i = alpha e_i + (1 - alpha) e_rev(i), so a weight a_i on e_dir_i is a
  weight alpha a_i on position i and (1 - alpha) a_i on its mirror rev(i):
    input_weights = alpha a + (1 - alpha) reverse_valid(a).
  weights: [B, T, S]; alpha, lengths: [B]. Returns [B, T, S], still summing to 1.
  """
  a = alpha[:, None, None]
  mirrored = jnp.swapaxes(reverse_valid(jnp.swapaxes(weights, 1, 2), lengths), 1, 2)
  return a * weights + (1.0 - a) * mirrored


def content_mixing(location_weights: Array, content_weights: Array,
                   mix: Array) -> Array:
  """Eq. 15-16: a_t = m_t lambda'_t + (1 - m_t) softmax(c_t).

  location_weights, content_weights: [..., S]; mix: [...] in [0, 1].
  """
  m = mix[..., None]
  return m * location_weights + (1.0 - m) * content_weights


# --------------------------------------------------------------------------
# 2. Location rules: step activations and mu updates (SPEC §2.5 table).
# --------------------------------------------------------------------------
def sigmoid_step(rho: Array, gate_logit: Optional[Array] = None) -> Array:
  """§5.3 (OneStepAttn): step = sigmoid(5 rho) in (0, 1)."""
  del gate_logit
  return jax.nn.sigmoid(SIGMOID_STEP_SCALE * rho)


def softstair_step(rho: Array, gate_logit: Optional[Array] = None) -> Array:
  """Eq. 11 / 14 (LocAttn): step = softstair(rho)."""
  del gate_logit
  return softstair(rho)


def relu_step(rho: Array, gate_logit: Optional[Array] = None) -> Array:
  """App. B (RMonoAttn): step = ReLU(rho) >= 0."""
  del gate_logit
  return jax.nn.relu(rho)


def free_step(rho: Array, gate_logit: Optional[Array] = None) -> Array:
  """Table 4 (OneStep -Sigmoid): step = rho, unconstrained."""
  del gate_logit
  return rho


def mono_step(rho: Array, gate_logit: Array) -> Array:
  """Eq. 19 (MonoAttn): step = g sigmoid(5 rho) + (1 - g) ReLU(rho), g = sigmoid(p)."""
  g = jax.nn.sigmoid(gate_logit)
  return g * jax.nn.sigmoid(SIGMOID_STEP_SCALE * rho) + (1.0 - g) * jax.nn.relu(rho)


def monotonic_mu(step: Array, pa_prev: Array, step_size: Array) -> Array:
  """§5.3-5.4 (OneStep, Mono, RMono and ablations): mu_t = pa_{t-1} + step * stepsize."""
  return pa_prev + step * step_size


def dubois_mu(step: Array, rho_prev: Array, rho_bias: Array, pa_prev: Array,
              step_size: Array) -> Array:
  """Eq. 11-13 (Dubois et al.'s LocAttn), before clamping:

    mu_t = step * stepsize + sigmoid(rho_2) pa_{t-1} + sigmoid(rho_3)
  """
  return step * step_size + jax.nn.sigmoid(rho_prev) * pa_prev + jax.nn.sigmoid(rho_bias)


def dubois_s_mu(step: Array, rho_bias: Array, pa_prev: Array, step_size: Array,
                is_first: Array) -> Array:
  """LocAttn S (SPEC §2.5), before clamping: the bias at t = 1, pa_{t-1} after.

    mu_1 = step * stepsize + sigmoid(rho_2);  mu_t = step * stepsize + pa_{t-1}
  """
  return step * step_size + jnp.where(is_first, jax.nn.sigmoid(rho_bias), pa_prev)


# update name -> (fn(step, rho, pa_prev, stepsize, is_first) -> mu, num_rho).
MU_UPDATES = {
    'monotonic': (lambda step, rho, pa, ss, first: monotonic_mu(step, pa, ss), 1),
    'dubois': (lambda step, rho, pa, ss, first:
               dubois_mu(step, rho[..., 1], rho[..., 2], pa, ss), 3),
    'dubois_s': (lambda step, rho, pa, ss, first:
                 dubois_s_mu(step, rho[..., 1], pa, ss, first), 2),
}

STEP_ACTIVATIONS: Dict[str, Callable[..., Array]] = {
    'sigmoid': sigmoid_step,
    'softstair': softstair_step,
    'relu': relu_step,
    'free': free_step,
    'mono': mono_step,
}


@dataclasses.dataclass(frozen=True)
class LocationRule:
  """How one location variant moves mu.

  step: key of STEP_ACTIVATIONS applied to rho_1.
  update: 'monotonic' (pa_{t-1} + step * stepsize), 'dubois' (Eq. 11-13) or
    'dubois_s' (LocAttn S).
  clamp: whether leaky_clamp (Eq. 8) is applied to mu.
  """
  step: str
  update: str
  clamp: bool

  @property
  def num_rho(self) -> int:
    """How many outputs the rho projection W_rho needs."""
    return MU_UPDATES[self.update][1]

  @property
  def has_gate(self) -> bool:
    return self.step == 'mono'


LOCATION_RULES: Dict[str, LocationRule] = {
    'locattn': LocationRule('softstair', 'dubois', clamp=True),
    'locattn_s': LocationRule('softstair', 'dubois_s', clamp=True),
    'onestep': LocationRule('sigmoid', 'monotonic', clamp=False),
    'mono': LocationRule('mono', 'monotonic', clamp=False),
    'rmono': LocationRule('relu', 'monotonic', clamp=False),
    'onestep_minus_step2': LocationRule('sigmoid', 'dubois', clamp=True),
    'onestep_minus_step3': LocationRule('softstair', 'monotonic', clamp=False),
    'onestep_minus_sigmoid': LocationRule('free', 'monotonic', clamp=False),
}


def location_mu(rule: LocationRule, rho: Array, pa_prev: Array,
                step_size: Array, is_first: Array,
                gate_logit: Optional[Array] = None):
  """Applies `rule` to the rho read-out. Returns (mu [...], step [...]).

  rho: [..., rule.num_rho]; pa_prev, step_size: [...]; is_first: [] bool.
  """
  step = STEP_ACTIVATIONS[rule.step](rho[..., 0], gate_logit)
  mu = MU_UPDATES[rule.update][0](step, rho, pa_prev, step_size, is_first)
  if rule.clamp:
    mu = leaky_clamp(mu)
  return mu, step


# --------------------------------------------------------------------------
# 3. One decoder step of any variant.
# --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AttentionSpec:
  """A cross-attention variant as data (see `monoloc_jax.variants.MODELS`).

  scores: the softmax branch: 'content' (Eq. 1), 'relative' (Eq. 3-4),
    'rope' (App. B) or None (location only).
  location: key of LOCATION_RULES, or None (no location attention).
  direction_mixing: keys/values from e_dir (Eq. 17-18) instead of e.
  position_reference: 'PR' (App. B): pa_t is computed from lambda'_t instead
    of the mixed a_t.
  With both `scores` and `location` set, the two are mixed (Eq. 15-16).
  """
  scores: Optional[str] = None
  location: Optional[str] = None
  direction_mixing: bool = False
  position_reference: bool = False

  def __post_init__(self):
    if self.scores is None and self.location is None:
      raise ValueError('an attention variant needs scores, location or both')
    if self.scores is not None and self.scores not in SCORE_FUNCTIONS:
      raise ValueError(f'unknown scores {self.scores!r}')
    if self.location is not None and self.location not in LOCATION_RULES:
      raise ValueError(f'unknown location rule {self.location!r}')
    if self.position_reference and not self.mixes:
      raise ValueError('position_reference only applies to mixed variants')

  @property
  def mixes(self) -> bool:
    """Content mixing (Eq. 15-16): both a softmax branch and a location branch."""
    return self.scores is not None and self.location is not None

  @property
  def rule(self) -> Optional[LocationRule]:
    return None if self.location is None else LOCATION_RULES[self.location]


class AttentionMemory(NamedTuple):
  """Per-sequence quantities computed once, before the decoder scan.

  keys: [B, S, D] projected keys (RoPE-rotated for 'rope'), or None when the
    variant has no softmax branch.
  values: [B, S, D] projected values.
  mask: [B, S] bool, valid encoder positions.
  positions: [B, S] normalised positions norm(i) (Eq. 7).
  lengths: [B] int, valid positions s (START and END included).
  """
  keys: Optional[Array]
  values: Array
  mask: Array
  positions: Array
  lengths: Array


class AttentionCarry(NamedTuple):
  """What a step hands to the next: pa_{t-1} [B] and the 0-based step t-1 []."""
  pa_prev: Array
  step: Array


def initial_carry(batch_size: int) -> AttentionCarry:
  """pa_0 = 0, first step index 0."""
  return AttentionCarry(jnp.zeros((batch_size,), jnp.float32),
                        jnp.zeros((), jnp.int32))


def fold_location_readout(params: Dict[str, Array]) -> Dict[str, Array]:
  """Folds W_l into the sigma and rho read-outs (an exact rewrite of Eq. 9-10).

  l_t = W_l h + b_l is only read through w_sigma . l_t and W_rho l_t, so
    [sigma_raw, rho] = h (W_l [w_sigma | W_rho]) + (b_l [w_sigma | W_rho] + [b_sigma, 0])
  is one [D, 1 + K] product per step instead of a [D, D] one. Returns params
  with 'readout_kernel' [D, 1 + K] and 'readout_bias' [1 + K] replacing
  'loc_kernel', 'loc_bias', 'sigma_kernel', 'sigma_bias' and 'rho_kernel'.
  """
  params = dict(params)
  heads = jnp.concatenate([params.pop('sigma_kernel')[:, None], params['rho_kernel']], axis=1)
  params.pop('rho_kernel')
  params['readout_kernel'] = params.pop('loc_kernel') @ heads
  bias = params.pop('loc_bias') @ heads
  params['readout_bias'] = bias.at[0].add(params.pop('sigma_bias'))
  return params


def _content_branch(q, memory, carry, params):
  """Eq. 1 on the (direction-mixed) keys."""
  del carry, params
  return content_scores(q, memory.keys)


def _relative_branch(q, memory, carry, params):
  """Eq. 3-4: key i sits at distance i - (t-1) from the query step."""
  distance = jnp.arange(memory.mask.shape[-1]) - carry.step
  pe = sinusoidal_embedding(distance, q.shape[-1])
  return relative_scores(q, memory.keys, pe, params['rel_kernel'],
                         params['content_bias'], params['position_bias'])


def _rope_branch(q, memory, carry, params):
  """App. B: q rotated by its step index (keys were rotated by i beforehand)."""
  del params
  return content_scores(rotary_embedding(q, carry.step), memory.keys)


# scores name -> fn(q [B, D], memory, carry, params) -> scores [B, S].
SCORE_FUNCTIONS = {
    'content': _content_branch,
    'relative': _relative_branch,
    'rope': _rope_branch,
}


def attention_step(spec: AttentionSpec, params: Dict[str, Array],
                   memory: AttentionMemory, query: Array,
                   carry: AttentionCarry, min_sigma: float = MIN_SIGMA):
  """One cross-attention step (Eq. 1-19), for any variant described by `spec`.

  Args:
    spec: the variant.
    params: arrays, by name; which are needed depends on `spec`:
      'query' [D, D] (W_q); 'rel_kernel' [D, D], 'content_bias' [D],
      'position_bias' [D] (relative); 'loc_kernel' [D, D], 'loc_bias' [D]
      (W_l, b_l), 'sigma_kernel' [D], 'sigma_bias' [], 'rho_kernel'
      [D, num_rho], 'gate_logit' [] (mono step), 'mix_kernel' [D],
      'mix_bias' [] (mixing); 'out' [D, D] (f_o, Eq. 2).
      Exact folded forms are accepted too: without 'query' (content scores)
      the keys must already be W_q k_i; without 'out' the values must already
      be f_o v_i (or any linear map of it, and o_t is then Σ_i a_ti v_i); and
      'readout_kernel'/'readout_bias' (see `fold_location_readout`) may
      replace the five location read-out arrays.
    memory: the encoder side, see AttentionMemory.
    query: [B, D] the decoder state h_{t-1}.
    carry: pa_{t-1} and the step index.
    min_sigma: Eq. 10's floor.

  Returns:
    (o_t [B, D], a_t [B, S], new carry, aux) where aux maps 'mu', 'sigma',
    'step', 'mix' to [B] arrays for the variants that have them.
  """
  aux = {}
  softmax_weights = None
  if spec.scores is not None:
    q = query @ params['query'] if 'query' in params else query
    scores = SCORE_FUNCTIONS[spec.scores](q, memory, carry, params)
    softmax_weights = masked_softmax(scores, memory.mask)

  weights = softmax_weights
  pa_weights = softmax_weights
  if spec.rule is not None:
    if 'readout_kernel' not in params:
      params = fold_location_readout(params)
    readout = query @ params['readout_kernel'] + params['readout_bias']   # [B, 1 + K]
    sigma = location_sigma(readout[:, 0], memory.lengths, min_sigma)      # [B]
    rho = readout[:, 1:]                                                  # [B, K]
    mu, step = location_mu(spec.rule, rho, carry.pa_prev,
                           stepsize(memory.lengths), carry.step == 0,
                           params.get('gate_logit'))
    lam = gaussian_location_attention(mu, sigma, memory.positions, memory.mask)
    aux.update(mu=mu, sigma=sigma, step=step)
    weights = pa_weights = lam
    if spec.mixes:
      mix = jax.nn.sigmoid(query @ params['mix_kernel'] + params['mix_bias'])
      aux['mix'] = mix
      weights = content_mixing(lam, softmax_weights, mix)
      pa_weights = lam if spec.position_reference else weights

  pa = attended_position(pa_weights, memory.positions)
  context = jnp.einsum('bs,bsd->bd', weights, memory.values)
  out = context @ params['out'] if 'out' in params else context          # Eq. 2
  return out, weights, AttentionCarry(pa, carry.step + 1), aux
