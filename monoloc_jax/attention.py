"""Pure, jittable cross-attention kernels.

Every function here is a pure function of arrays: no Flax state, no Python-side
randomness, safe under `jax.jit`, `jax.vmap` and `jax.grad`. Equation numbers
(Eq. N) are those of Ray Chowdhury & Caragea (ICML 2023), "Monotonic Location
Attention for Length Generalization"; Dubois et al. (ACL 2020) is cited where
the kernel is theirs. Positions are 0-based; encoder position 0 is START.

Shapes use B for batch, S for encoder positions, D for the model width, Q for
the query/key width (the paper's head dimension).

The module has three layers:
  1. elementary kernels (softstair, leaky_clamp, Gaussian weights, scores,
     rotary and sinusoidal embeddings, direction and content mixing);
  2. step activations and mu updates (Eq. 11-13, §5.3-5.4, Eq. 19, Table 4);
  3. variants as data: a `Variant` is a score branch (`SCORE_BRANCHES`), a
     location rule (`LOCATION_RULES`) and two switches; `fold_params`,
     `make_memory` and `attention_step` run one decoder step of any variant.

Dtypes. Every kernel returns the dtype of its float inputs (bfloat16 in,
bfloat16 out; float64 in, float64 out), and the mu updates return the dtype of
pa_{t-1}, so a `lax.scan` carry keeps its type. Kernels whose only inputs are
integers (`stepsize`, `normalized_positions`, `sinusoidal_embedding`) take a
`dtype` (default float32). Inside, the location recurrence (mu, sigma, the step
activations, softstair, the Gaussian and its normaliser, pa_t) and the softmaxes
run in at least float32 (`at_least_float32`): in bfloat16 (8 bits of mantissa)
pa_t = sum_i a_ti norm(i) could not tell position 300 from 301, and a rounded
mu moves the whole Gaussian. Score products accumulate in at least float32.

Input checks. The public entry points check ranks, matching shapes and the
mask dtype while tracing (no cost under jit) and raise a one-line
`MonolocError` naming the argument and the expected shape: broadcasting would
otherwise turn a [B, 1] into a [B, B] result, and a float (additive) mask
would be read as a boolean one.
"""

import dataclasses
import functools
import math
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import flax.struct
import jax
import jax.numpy as jnp

from monoloc_jax import errors
from monoloc_jax import tapped_scan
from monoloc_jax.tapped_scan import Tap
from monoloc_jax.tapped_scan import apply as apply_tap

Array = jax.Array
DType = Any

__all__ = [
    # Constants of the papers.
    'MIN_SIGMA', 'SOFTSTAIR_TEMPERATURE', 'LEAKY_SLOPE', 'SIGMOID_STEP_SCALE',
    'DIRECTION_SCALE', 'GAUSSIAN_EPS', 'ROPE_BASE', 'MONO_GATE_INIT',
    # 1. Elementary kernels.
    'at_least_float32', 'softstair', 'leaky_clamp', 'stepsize', 'normalized_positions',
    'location_sigma', 'LocationNormaliser', 'PADDING_FREE', 'AUTHORS_CODE_NORMALISER',
    'LOCATION_NORMALISERS', 'gaussian_location_attention', 'attended_position',
    'masked_softmax', 'content_scores', 'sinusoidal_embedding', 'relative_scores',
    'rotary_embedding', 'reverse_valid', 'direction_gate', 'direction_mixing',
    'input_attention', 'content_mixing',
    # 2. Step activations and mu updates.
    'sigmoid_step', 'softstair_step', 'relu_step', 'free_step', 'mono_step',
    'monotonic_mu', 'dubois_mu', 'dubois_s_mu', 'monotonic_update', 'dubois_update',
    'dubois_s_update', 'location_mu', 'location_step', 'location_update',
    # 3. Variants as data, and one decoder step.
    'Dims', 'ParamDef', 'INIT_SCHEMES', 'initializer', 'uniform_init', 'xavier_bound',
    'torch_linear_init', 'ScoreBranch', 'LocationRule',
    'CONTENT', 'RELATIVE', 'ROPE', 'SCORE_BRANCHES', 'LOCATION_RULES', 'Variant',
    'AttentionParams', 'fold_params', 'AttentionMemory', 'make_memory', 'AttentionCarry',
    'initial_carry', 'attention_step', 'Readouts', 'attention_readouts',
    'attention_recurrence',
]

# The papers' constants (equation numbers: Ray Chowdhury & Caragea 2023).
MIN_SIGMA = 0.27           # Eq. 10
SOFTSTAIR_TEMPERATURE = 20.0  # Eq. 14
LEAKY_SLOPE = 0.01         # Eq. 8
SIGMOID_STEP_SCALE = 5.0   # §5.3: sigmoid(5 rho)
DIRECTION_SCALE = 5.0      # Eq. 17: sigmoid(5 f_dir(e_cls))
GAUSSIAN_EPS = 1e-20       # guard of the Eq. 9 normaliser
ROPE_BASE = 10000.0


# --------------------------------------------------------------------------
# Dtypes and input checks.
# --------------------------------------------------------------------------
def at_least_float32(dtype: DType) -> DType:
  """The dtype the location recurrence and the softmaxes run in: `dtype`
  promoted to at least float32 (bfloat16/float16 -> float32, float64 stays)."""
  return jnp.promote_types(dtype, jnp.float32)


def _dtype(*xs) -> DType:
  """The float dtype the arrays `xs` promote to (integers alone give float32)."""
  dtype = jnp.result_type(*xs)
  return dtype if jnp.issubdtype(dtype, jnp.inexact) else jnp.dtype(jnp.float32)


def _cast(x: Array, dtype: DType) -> Array:
  """x in `dtype`; x itself when it already is (so `tapped_scan` sees the same array)."""
  return x if x.dtype == dtype else x.astype(dtype)


def _fmt(shape: Sequence[int]) -> str:
  return '[' + ', '.join(str(int(n)) for n in shape) + ']'


def _check(ok: bool, kernel: str, message: str) -> None:
  """Raises the one-line MonolocError `kernel: message` unless `ok`."""
  if not ok:
    raise errors.MonolocError(f'{kernel}: {message}')


def _check_shape(kernel: str, name: str, x: Array, expected: Sequence[int], meaning: str):
  _check(tuple(x.shape) == tuple(expected), kernel,
         f'{name} must have shape {_fmt(expected)} ({meaning}), got {_fmt(x.shape)}')


def _check_mask(kernel: str, mask: Array, shape: Sequence[int], meaning: str) -> None:
  _check(mask.dtype == jnp.bool_, kernel,
         f'mask must be a boolean {meaning} array (True = valid position), got '
         f'{mask.dtype}; an additive 0/-inf mask is not accepted: pass additive_mask == 0')
  _check_shape(kernel, 'mask', mask, shape, meaning)


# --------------------------------------------------------------------------
# 1. Elementary kernels.
# --------------------------------------------------------------------------
def softstair(x: Array, temperature: float = SOFTSTAIR_TEMPERATURE) -> Array:
  """Eq. 14: softstair(x) = floor(x) + sigmoid(tau (x - floor(x) - 0.5)).

  A differentiable staircase: near-integer valued, with gradient concentrated
  at the half-integers. `floor` contributes no gradient. Computed in at least
  float32 (x - floor(x) loses every fractional bit of a bfloat16 x >= 256).
  """
  x = jnp.asarray(x)
  xw = _cast(x, at_least_float32(_dtype(x)))
  floor = jnp.floor(xw)
  return _cast(floor + jax.nn.sigmoid(temperature * (xw - floor - 0.5)), x.dtype)


def leaky_clamp(x: Array, lower: float = 0.0, upper: float = 1.0,
                slope: float = LEAKY_SLOPE) -> Array:
  """Eq. 8: leaky_clamp(x) = max(lower + m x, min(upper + m x, x)), m = slope.

  The identity on [lower, upper] (up to the m x leak outside it), so mu can
  leave the valid range only slowly while gradients never vanish.
  """
  return jnp.maximum(lower + slope * x, jnp.minimum(upper + slope * x, x))


def stepsize(lengths: Array, dtype: DType = jnp.float32) -> Array:
  """Eq. 7: the distance between neighbouring normalised positions, 1/max(1, s-1).

  lengths: [...] int, the number of valid encoder positions s (START/END
  included). Returns [...] in `dtype`.
  """
  return 1.0 / jnp.maximum(1, jnp.asarray(lengths) - 1).astype(dtype)


def normalized_positions(lengths: Array, max_len: int, dtype: DType = jnp.float32) -> Array:
  """Eq. 7: norm(i) = i / max(1, length - 1), for i = 0 ... max_len - 1.

  lengths: [B] (or any [...]) ints. Returns [..., max_len] in `dtype`. Values
  past a row's length exceed 1; callers mask them.
  """
  idx = jnp.arange(max_len, dtype=dtype)
  return idx * stepsize(lengths, dtype)[..., None]


def location_sigma(raw: Array, lengths: Array,
                   min_sigma: float = MIN_SIGMA) -> Array:
  """Eq. 10: sigma_t = (ReLU(w_sigma . l_t) + min_sigma) / s.

  raw: [B] (any [...]) the linear read-out w_sigma . l_t; lengths: the same
  shape, valid positions s. Returns raw's shape and dtype. A row with s = 0 (a
  row padded out of a fixed-shape batch) divides by 1 instead: its Gaussian
  has no valid position anyway, and sigma = inf gave NaN gradients.
  """
  raw, lengths = jnp.asarray(raw), jnp.asarray(lengths)
  _check_shape('location_sigma', 'raw', raw, lengths.shape, 'the shape of lengths')
  work = at_least_float32(_dtype(raw))
  s = jnp.maximum(lengths, 1).astype(work)
  return _cast((jax.nn.relu(_cast(raw, work)) + min_sigma) / s, raw.dtype)


@dataclasses.dataclass(frozen=True)
class LocationNormaliser:
  """How Eq. 9 normalises the Gaussian weights:

    lambda'_i = lambda_i / (sum_j lambda_j + n eps)

  name: the config value (`config.location_normaliser`).
  eps_per_position: n = S, the padded width of the weights (every position,
    padding included, adds one eps), as the authors' code's `sum_normalize`
    computes it (`sum(lambda + eps)`); otherwise n = 1.
  """
  name: str
  eps_per_position: bool


# n = 1: independent of how much padding the batch has (BUILD_NOTES §2 item 19).
PADDING_FREE = LocationNormaliser('padding_free', eps_per_position=False)
# n = S, the padded batch width: the authors' `sum_normalize`.
AUTHORS_CODE_NORMALISER = LocationNormaliser('authors_code', eps_per_position=True)
LOCATION_NORMALISERS: Dict[str, LocationNormaliser] = {
    n.name: n for n in (PADDING_FREE, AUTHORS_CODE_NORMALISER)}


def gaussian_location_attention(mu: Array, sigma: Array, positions: Array,
                                mask: Array, eps: float = GAUSSIAN_EPS,
                                normaliser: LocationNormaliser = PADDING_FREE) -> Array:
  """Eq. 5-6 and 9: normalised Gaussian location weights lambda'.

    lambda_i  = exp(-(pos_i - mu)^2 / (2 sigma^2)) * mask_i
    lambda'_i = lambda_i / (sum_j lambda_j + n eps)

  with n = 1, or n = S (the padded width, positions.shape[-1]) under the
  authors' code's normaliser (`LocationNormaliser`).

  mu, sigma: [B] (any [...]); positions: [B, S] float; mask: [B, S] bool.
  Returns [B, S] in the dtype of mu and sigma (computed in at least float32): 0
  at masked positions, summing to 1 over the valid ones (unless every weight
  underflows, as in the authors' code, in which case it is all 0; a row with
  no valid position is all 0, with zero gradients).

  Computed with a max-shift, which is the same function in exact arithmetic:
  with a_i = -z_i^2 / 2 and c = max_i a_i (no gradient through c),
    lambda'_i = exp(a_i - c) / (sum_j exp(a_j - c) + n eps exp(-c)).
  The direct form's gradient divides by (sum + eps)^2, about 1e-40 once mu has
  left the input: a float32 denormal that XLA:CPU flushes to 0, so training
  got NaN gradients (seen with MonoAttn on Inv ReCopy). This form's
  gradients stay finite.
  """
  mu, sigma = jnp.asarray(mu), jnp.asarray(sigma)
  positions, mask = jnp.asarray(positions), jnp.asarray(mask)
  kernel = 'gaussian_location_attention'
  _check(positions.ndim >= 1, kernel, f'positions must be [B, S], got {_fmt(positions.shape)}')
  _check_shape(kernel, 'mu', mu, positions.shape[:-1], 'positions.shape[:-1] ([B])')
  _check_shape(kernel, 'sigma', sigma, positions.shape[:-1], 'positions.shape[:-1] ([B])')
  _check_mask(kernel, mask, positions.shape, '[B, S] (the shape of positions)')
  out_dtype = _dtype(mu, sigma)
  work = at_least_float32(jnp.result_type(out_dtype, positions.dtype))
  n_eps = mask.shape[-1] if normaliser.eps_per_position else 1
  z = (_cast(positions, work) - _cast(mu, work)[..., None]) / _cast(sigma, work)[..., None]
  log_lam = jnp.where(mask, -0.5 * z * z, -jnp.inf)
  shift = jax.lax.stop_gradient(jnp.max(log_lam, axis=-1, keepdims=True))
  shift = jnp.where(jnp.isfinite(shift), shift, 0.0)
  lam = jnp.where(mask, jnp.exp(log_lam - shift), 0.0)
  denominator = jnp.sum(lam, axis=-1, keepdims=True) + (n_eps * eps) * jnp.exp(-shift)
  # A row without valid positions: lam = 0 over eps, whose derivative 1/eps^2
  # overflows to inf (inf * 0 = NaN); divide by 1 there instead.
  denominator = jnp.where(jnp.any(mask, axis=-1, keepdims=True), denominator, 1.0)
  return _cast(lam / denominator, out_dtype)


def attended_position(weights: Array, positions: Array) -> Array:
  """pa_t = sum_i a_ti norm(i) (§5.1): the expected attended position.

  weights: [B, S]; positions: [B, S] (any matching [..., S]). Returns [B] in
  the weights' dtype, summed in at least float32.
  """
  weights, positions = jnp.asarray(weights), jnp.asarray(positions)
  _check_shape('attended_position', 'positions', positions, weights.shape,
               'the shape of weights ([B, S])')
  work = at_least_float32(_dtype(weights, positions))
  return _cast(jnp.sum(_cast(weights, work) * _cast(positions, work), axis=-1),
               _dtype(weights))


def masked_softmax(scores: Array, mask: Array) -> Array:
  """Softmax over the last axis restricted to `mask`; exactly 0 at masked positions.

  scores: [B, S] (any [..., S]); mask: bool, the same shape. Returns the scores'
  shape and dtype; the softmax runs in at least float32.
  """
  scores, mask = jnp.asarray(scores), jnp.asarray(mask)
  _check_mask('masked_softmax', mask, scores.shape, '[B, S] (the shape of scores)')
  work = at_least_float32(_dtype(scores))
  scores_w = jnp.where(mask, _cast(scores, work), jnp.finfo(work).min)
  weights = jax.nn.softmax(scores_w, axis=-1)
  return _cast(jnp.where(mask, weights, 0.0), _dtype(scores))


def content_scores(query: Array, keys: Array, dim: Optional[int] = None,
                   out_dtype: Optional[DType] = None) -> Array:
  """Eq. 1: c_ti = q_t . k_i / sqrt(d_k), d_k = `dim` (default: the query's width).

  query [B, Q], keys [B, S, Q] (any [..., Q] and [..., S, Q]) -> [B, S]. `dim`
  differs from Q when W_q has been folded into the keys (`fold_params`): Q is
  then the model width, d_k the query/key width. The product accumulates in at
  least float32; out_dtype: the scores' dtype (default: the inputs').
  """
  query, keys = jnp.asarray(query), jnp.asarray(keys)
  _check(keys.ndim == query.ndim + 1 and keys.shape[-1] == query.shape[-1],
         'content_scores', f'keys must be [B, S, Q] for a query [B, Q]; got query '
         f'{_fmt(query.shape)}, keys {_fmt(keys.shape)}')
  dtype = _dtype(query, keys)
  work = at_least_float32(dtype)
  scale = math.sqrt(dim if dim is not None else query.shape[-1])
  scores = jnp.einsum('...d,...sd->...s', query, keys, preferred_element_type=work)
  return _cast(scores / scale, dtype if out_dtype is None else out_dtype)


def sinusoidal_embedding(positions: Array, dim: int, dtype: DType = jnp.float32) -> Array:
  """Fixed sinusoidal embedding of (possibly negative) positions (Eq. 3).

  pe(k) = [sin(k w_0), ..., sin(k w_{D/2-1}), cos(k w_0), ..., cos(k w_{D/2-1})],
  w_j = 10000^(-2j/D) (Transformer-XL's concatenated layout). positions [...]
  -> [..., D] in `dtype` (computed in at least float32).
  """
  work = at_least_float32(dtype)
  inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, dim, 2, dtype=work) / dim))
  angles = jnp.asarray(positions).astype(work)[..., None] * inv_freq
  return _cast(jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1), jnp.dtype(dtype))


def relative_scores(query: Array, keys: Array, rel_embedding: Array,
                    rel_kernel: Array, content_bias: Array,
                    position_bias: Array, out_dtype: Optional[DType] = None) -> Array:
  """Eq. 3-4 (Transformer-XL): relative-position attention scores.

    c_ti = (q + b_1) . k_i / sqrt(Q) + (q + b_2) . (W_r pe_{i-t+1}) / sqrt(Q)

  query: [B, Q]; keys: [B, S, Q]; rel_embedding: [S, P] or [B, S, P], the
  sinusoidal pe (P wide: the model width D, as the authors' code) of the
  distance i - (t-1) of each key from the query step; rel_kernel: [P, Q], W_r
  applied as `pe @ rel_kernel`; content_bias (b_1), position_bias (b_2): [Q].
  Returns [B, S] in the dtype of query and keys (out_dtype to override).
  """
  query, keys = jnp.asarray(query), jnp.asarray(keys)
  rel_embedding, rel_kernel = jnp.asarray(rel_embedding), jnp.asarray(rel_kernel)
  q_dim = query.shape[-1]
  _check(rel_kernel.ndim == 2 and rel_kernel.shape[1] == q_dim, 'relative_scores',
         f'rel_kernel must be [P, Q] with Q = {q_dim} (the query width), got '
         f'{_fmt(rel_kernel.shape)}')
  _check(rel_embedding.ndim in (2, 3) and rel_embedding.shape[-1] == rel_kernel.shape[0],
         'relative_scores', f'rel_embedding must be [S, P] or [B, S, P] with P = '
         f'{rel_kernel.shape[0]} (rel_kernel.shape[0]), got {_fmt(rel_embedding.shape)}')
  dtype = _dtype(query, keys) if out_dtype is None else out_dtype
  content = content_scores(query + content_bias, keys, out_dtype=at_least_float32(dtype))
  # (q + b_2) . (pe W_r) = ((q + b_2) W_r^T) . pe: one [B, Q] x [Q, P] product
  # instead of projecting all S embeddings at every step.
  projected = (query + position_bias) @ rel_kernel.T
  if rel_embedding.ndim == 2:
    rel_embedding = rel_embedding[None]
  position = content_scores(projected, rel_embedding, dim=q_dim,
                            out_dtype=at_least_float32(dtype))
  return _cast(content + position, dtype)


def rotary_embedding(x: Array, positions: Array, base: float = ROPE_BASE) -> Array:
  """Rotary position embedding (App. B, Bi-ROPE; Su et al. 2021).

  Rotates channel pairs (x_j, x_{j+D/2}) by the angle p * base^(-2j/D):
    [x1 cos - x2 sin, x1 sin + x2 cos].
  x: [..., D]; positions: broadcastable to x.shape[:-1]. Returns x's shape and
  dtype (the angles and rotation in at least float32).
  """
  x = jnp.asarray(x)
  work = at_least_float32(_dtype(x))
  half = x.shape[-1] // 2
  inv_freq = 1.0 / (base ** (jnp.arange(half, dtype=work) * 2.0 / x.shape[-1]))
  angles = jnp.asarray(positions).astype(work)[..., None] * inv_freq
  cos, sin = jnp.cos(angles), jnp.sin(angles)
  xw = _cast(x, work)
  x1, x2 = xw[..., :half], xw[..., half:]
  return _cast(jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1),
               _dtype(x))


def reverse_valid(x: Array, lengths: Array) -> Array:
  """Reverses each row's first `lengths` positions; padding stays at the end.

  x: [B, S, ...]; lengths: [B]. Used for e_rev (§2.2) and the backward GRU.
  """
  x, lengths = jnp.asarray(x), jnp.asarray(lengths)
  _check(x.ndim >= 2, 'reverse_valid', f'x must be [B, S, ...], got {_fmt(x.shape)}')
  _check_shape('reverse_valid', 'lengths', lengths, x.shape[:1], 'x.shape[:1] ([B])')
  s = x.shape[1]
  idx = jnp.arange(s)[None, :]
  src = jnp.where(idx < lengths[:, None], lengths[:, None] - 1 - idx, idx)
  return jnp.take_along_axis(x, src.reshape(src.shape + (1,) * (x.ndim - 2)), axis=1)


def direction_gate(logit: Array, scale: float = DIRECTION_SCALE) -> Array:
  """Eq. 17: alpha_dir = sigmoid(5 f_dir(e_cls)). logit [B] -> [B]."""
  return jax.nn.sigmoid(scale * logit)


def direction_mixing(encoded: Array, lengths: Array, alpha: Array) -> Array:
  """Eq. 18: e_dir = alpha e + (1 - alpha) e_rev.

  encoded: [B, S, D]; lengths: [B] valid positions; alpha: [B]. Returns
  [B, S, D] in the dtype of `encoded`.
  """
  encoded, alpha = jnp.asarray(encoded), jnp.asarray(alpha)
  _check(encoded.ndim == 3, 'direction_mixing',
         f'encoded must be [B, S, D], got {_fmt(encoded.shape)}')
  _check_shape('direction_mixing', 'alpha', alpha, encoded.shape[:1], 'encoded.shape[:1] ([B])')
  a = _cast(alpha, encoded.dtype)[:, None, None]
  return a * encoded + (1.0 - a) * reverse_valid(encoded, lengths)


def input_attention(weights: Array, alpha: Array, lengths: Array) -> Array:
  """Maps weights over direction-mixed positions back to input positions (Eq. 18).

  e_dir_i = alpha e_i + (1 - alpha) e_rev(i), so a weight a_i on e_dir_i is a
  weight alpha a_i on position i and (1 - alpha) a_i on its mirror rev(i):
    input_weights = alpha a + (1 - alpha) reverse_valid(a).
  weights: [B, T, S]; alpha, lengths: [B]. Returns [B, T, S] in the weights'
  dtype, still summing to 1.
  """
  weights, alpha = jnp.asarray(weights), jnp.asarray(alpha)
  _check(weights.ndim == 3, 'input_attention',
         f'weights must be [B, T, S], got {_fmt(weights.shape)}')
  _check_shape('input_attention', 'alpha', alpha, weights.shape[:1], 'weights.shape[:1] ([B])')
  a = _cast(alpha, weights.dtype)[:, None, None]
  mirrored = jnp.swapaxes(reverse_valid(jnp.swapaxes(weights, 1, 2), lengths), 1, 2)
  return a * weights + (1.0 - a) * mirrored


def content_mixing(location_weights: Array, content_weights: Array,
                   mix: Array) -> Array:
  """Eq. 15-16: a_t = m_t lambda'_t + (1 - m_t) softmax(c_t).

  location_weights, content_weights: [B, S] (any [..., S]); mix: [B] in [0, 1].
  Returns the dtype of the two weights.
  """
  location_weights, content_weights = jnp.asarray(location_weights), jnp.asarray(content_weights)
  mix = jnp.asarray(mix)
  _check_shape('content_mixing', 'content_weights', content_weights, location_weights.shape,
               'the shape of location_weights ([B, S])')
  _check_shape('content_mixing', 'mix', mix, location_weights.shape[:-1],
               'location_weights.shape[:-1] ([B])')
  m = _cast(mix, _dtype(location_weights, content_weights))[..., None]
  return m * location_weights + (1.0 - m) * content_weights


# --------------------------------------------------------------------------
# 2. Location rules: step activations and mu updates.
# --------------------------------------------------------------------------
def _at_work(fn: Callable[..., Array]) -> Callable[..., Array]:
  """fn computed in at least float32 and returned in the dtype of its first argument."""
  @functools.wraps(fn)
  def wrapped(x, *args, **kwargs):
    x = jnp.asarray(x)
    work = at_least_float32(_dtype(x))
    return _cast(fn(_cast(x, work), *args, **kwargs), _dtype(x))
  return wrapped


@_at_work
def sigmoid_step(rho: Array) -> Array:
  """§5.3 (OneStepAttn): step = sigmoid(5 rho), in (0, 1)."""
  return jax.nn.sigmoid(SIGMOID_STEP_SCALE * rho)


def softstair_step(rho: Array) -> Array:
  """Eq. 11 and 14 (LocAttn): step = softstair(rho)."""
  return softstair(rho)


def relu_step(rho: Array) -> Array:
  """App. B (RMonoAttn): step = ReLU(rho) >= 0."""
  return jax.nn.relu(rho)


def free_step(rho: Array) -> Array:
  """Table 4 (OneStepAttn -Sigmoid): step = rho, unconstrained."""
  return rho


@_at_work
def mono_step(rho: Array, gate_logit: Array) -> Array:
  """Eq. 19 (MonoAttn): step = g sigmoid(5 rho) + (1 - g) ReLU(rho), g = sigmoid(p).

  gate_logit: the learned scalar p. Returns rho's dtype.
  """
  g = _cast(jax.nn.sigmoid(jnp.asarray(gate_logit)), rho.dtype)
  return g * jax.nn.sigmoid(SIGMOID_STEP_SCALE * rho) + (1.0 - g) * jax.nn.relu(rho)


def _mu_dtypes(kernel: str, pa_prev: Array, **others: Array):
  """(pa_prev's dtype, the dtype mu is computed in); checks that every [B] input
  of a mu update has pa_prev's shape."""
  pa_prev = jnp.asarray(pa_prev)
  for name, x in others.items():
    _check_shape(kernel, name, jnp.asarray(x), pa_prev.shape, 'the shape of pa_prev, [B]')
  return _dtype(pa_prev), at_least_float32(_dtype(pa_prev, *others.values()))


def monotonic_mu(step: Array, pa_prev: Array, step_size: Array) -> Array:
  """§5.3-5.4 (OneStep, Mono, RMono and the ablations): mu_t = pa_{t-1} + step * stepsize.

  step, pa_prev, step_size: [B]. Returns pa_prev's dtype (computed in at least float32).
  """
  out, work = _mu_dtypes('monotonic_mu', pa_prev, step=step, step_size=step_size)
  mu = _cast(jnp.asarray(pa_prev), work) + _cast(jnp.asarray(step), work) * _cast(
      jnp.asarray(step_size), work)
  return _cast(mu, out)


def dubois_mu(step: Array, rho_prev: Array, rho_bias: Array, pa_prev: Array,
              step_size: Array) -> Array:
  """Eq. 11-13 (Dubois et al.'s LocAttn), before clamping:

    mu_t = step * stepsize + sigmoid(rho_2) pa_{t-1} + sigmoid(rho_3)

  Every input [B]. Returns pa_prev's dtype (computed in at least float32).
  """
  out, work = _mu_dtypes('dubois_mu', pa_prev, step=step, rho_prev=rho_prev,
                          rho_bias=rho_bias, step_size=step_size)
  step, rho_prev, rho_bias, pa_prev, step_size = (
      _cast(jnp.asarray(x), work) for x in (step, rho_prev, rho_bias, pa_prev, step_size))
  mu = step * step_size + jax.nn.sigmoid(rho_prev) * pa_prev + jax.nn.sigmoid(rho_bias)
  return _cast(mu, out)


def dubois_s_mu(step: Array, rho_bias: Array, pa_prev: Array, step_size: Array,
                is_first: Array) -> Array:
  """LocAttn S (Dubois et al.'s simplified form), before clamping: the learned
  offset at the first step, pa_{t-1} after it.

    mu_1 = step * stepsize + sigmoid(rho_2);  mu_t = step * stepsize + pa_{t-1}

  step, rho_bias, pa_prev, step_size: [B]; is_first: [] bool. Returns pa_prev's
  dtype (computed in at least float32).
  """
  out, work = _mu_dtypes('dubois_s_mu', pa_prev, step=step, rho_bias=rho_bias,
                          step_size=step_size)
  step, rho_bias, pa_prev, step_size = (
      _cast(jnp.asarray(x), work) for x in (step, rho_bias, pa_prev, step_size))
  return _cast(step * step_size + jnp.where(is_first, jax.nn.sigmoid(rho_bias), pa_prev), out)


# Mu updates in the one signature a LocationRule calls:
#   update(step [B], rho [B, K], pa_prev [B], step_size [B], is_first []) -> mu [B].
def monotonic_update(step, rho, pa_prev, step_size, is_first):
  """`monotonic_mu`; uses rho_1 only (through `step`)."""
  del rho, is_first
  return monotonic_mu(step, pa_prev, step_size)


def dubois_update(step, rho, pa_prev, step_size, is_first):
  """`dubois_mu` with rho_2 = rho[..., 1] and rho_3 = rho[..., 2]."""
  del is_first
  return dubois_mu(step, rho[..., 1], rho[..., 2], pa_prev, step_size)


def dubois_s_update(step, rho, pa_prev, step_size, is_first):
  """`dubois_s_mu` with rho_2 = rho[..., 1]."""
  return dubois_s_mu(step, rho[..., 1], pa_prev, step_size, is_first)


# --------------------------------------------------------------------------
# 3. Variants as data: parameter declarations, score branches, location rules.
# --------------------------------------------------------------------------
class Dims(NamedTuple):
  """Widths a parameter shape may depend on.

  model: D, the decoder state and value width; qk: the query/key width (the
  paper's head dimension); encoded: the width of the encoder outputs e_i.
  """
  model: int
  qk: int
  encoded: int


Initializer = Callable[..., Array]     # fn(key, shape, dtype) -> array


@dataclasses.dataclass(frozen=True)
class ParamDef:
  """One learned array of a variant: its name, shape (from `Dims`) and initialiser.

  init: the initialiser under `init_scheme='library'`.
  authors_init: fn(dims) -> the initialiser of the same array in the authors'
    code (`init_scheme='authors_code'`), drawn per element as their tensor is;
    None: the same as `init`.
  """
  name: str
  shape: Callable[[Dims], Tuple[int, ...]]
  init: Initializer
  authors_init: Optional[Callable[[Dims], Initializer]] = None


glorot = jax.nn.initializers.glorot_uniform()
zeros = jax.nn.initializers.zeros


def uniform_init(bound: float) -> Initializer:
  """U(-bound, bound) elementwise."""
  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)
  return init


def xavier_bound(fan_in: int, fan_out: int) -> float:
  """torch.nn.init.xavier_uniform_'s bound sqrt(6 / (fan_in + fan_out))."""
  return math.sqrt(6.0 / (fan_in + fan_out))


def torch_linear_init(fan_in: int) -> Initializer:
  """torch.nn.Linear's default init of weight and bias alike: U(+-1/sqrt(fan_in))
  (kaiming_uniform_(a=sqrt(5)) for the weight; the same bound for the bias)."""
  return uniform_init(1.0 / math.sqrt(fan_in))


def _authors_xavier(fan_in: Callable[[Dims], int], fan_out: Callable[[Dims], int]):
  """fn(dims) -> xavier_uniform_ with the authors' tensor's fans."""
  return lambda dims: uniform_init(xavier_bound(fan_in(dims), fan_out(dims)))


# config.init_scheme -> fn(param_def, dims) -> the initialiser of that array.
INIT_SCHEMES: Dict[str, Callable[[ParamDef, Dims], Initializer]] = {
    'library': lambda p, dims: p.init,
    'authors_code': lambda p, dims: p.init if p.authors_init is None else p.authors_init(dims),
}


def initializer(p: ParamDef, scheme: str, dims: Dims) -> Initializer:
  """The initialiser of array `p` under init scheme `scheme` (`INIT_SCHEMES`)."""
  return INIT_SCHEMES[scheme](p, dims)


@dataclasses.dataclass(frozen=True)
class ScoreBranch:
  """A softmax branch: how c_ti is computed from the query and the keys.

  name: a label for messages and reprs.
  score: fn(q [B, qk], memory, carry, params) -> c_t [B, S]; `q` is the query
    after W_q (or the raw h_{t-1} when `fold_query`), `params` the variant's
    `AttentionParams`.
  params: learned arrays beyond W_q and W_k (e.g. Transformer-XL's W_r, b_1, b_2).
  prepare_keys: fn(keys [B, S, qk], index [1, S]) -> keys, applied once per
    sequence (RoPE rotates k_i by i), or None.
  fold_query: q.k_i = h.(W_q^T k_i) is used to fold W_q into the keys (exact,
    one product per position instead of one per step); only valid when the
    score is a plain dot product of q with the keys.
  step_flops: fn(dims, S) -> nominal FLOPs of one step's scores (benchmarks).
  """
  name: str
  score: Callable[..., Array]
  params: Tuple[ParamDef, ...] = ()
  prepare_keys: Optional[Callable[[Array, Array], Array]] = None
  fold_query: bool = False
  step_flops: Callable[[Dims, int], float] = lambda dims, s: 2 * dims.model * dims.qk + 2 * s * dims.qk


@dataclasses.dataclass(frozen=True)
class LocationRule:
  """How one location variant moves mu.

  name: a label for messages and reprs.
  step: the step activation applied to rho_1, called as step(rho_1, **rule_params).
  update: the mu update (see `monotonic_update`), called as
    update(step, rho, pa_prev, stepsize, is_first).
  num_rho: how many outputs the rho read-out W_rho has (rho_1, rho_2, ...).
  clamp: whether leaky_clamp (Eq. 8) is applied to mu.
  params: learned arrays the step activation takes by name (MonoAttn's gate logit).
  """
  name: str
  step: Callable[..., Array]
  update: Callable[..., Array]
  num_rho: int
  clamp: bool
  params: Tuple[ParamDef, ...] = ()


def _content_score(q, memory, carry, params):
  """Eq. 1 on the (direction-mixed) keys; W_q is folded into them."""
  del carry
  return content_scores(q, memory.keys, params.qk_dim, out_dtype=at_least_float32(q.dtype))


def _relative_score(q, memory, carry, params):
  """Eq. 3-4: key i sits at distance i - (t-1) from the query of step t. The
  sinusoids are W_r's input width wide (the model width D, as the authors' code:
  sinusoids of width qD projected to Q by forward_position_linear)."""
  p = params.score
  distance = jnp.arange(memory.mask.shape[-1]) - carry.t
  pe = sinusoidal_embedding(distance, p['rel_kernel'].shape[0], q.dtype)
  return relative_scores(q, memory.keys, pe, p['rel_kernel'], p['content_bias'],
                         p['position_bias'], out_dtype=at_least_float32(q.dtype))


def _rope_score(q, memory, carry, params):
  """App. B: q rotated by its step index t-1 (the keys were rotated by i beforehand)."""
  del params
  return content_scores(rotary_embedding(q, carry.t), memory.keys,
                        out_dtype=at_least_float32(q.dtype))


def _rotate_keys(keys: Array, index: Array) -> Array:
  return rotary_embedding(keys, index)


_MODEL_QK = lambda dims: (dims.model, dims.qk)
_VEC = lambda dims: (dims.qk,)

CONTENT = ScoreBranch('content', _content_score, fold_query=True)
# W_r [D, Q]: the authors' code (heads = 1 in all their configs) projects sinusoids
# of width qD (the decoder width D) with forward_position_linear [Q, qD],
# xavier-uniform (fans D and Q), and so does this one (Glorot on [D, Q] is the same
# distribution). Per step: q W_q (2DQ), (q + b_2) W_r^T (2QD), the S content and
# the S position dot products (2SQ + 2SD).
RELATIVE = ScoreBranch(
    'relative', _relative_score,
    params=(ParamDef('rel_kernel', _MODEL_QK, glorot,
                     _authors_xavier(lambda dims: dims.model, lambda dims: dims.qk)),
            ParamDef('content_bias', _VEC, zeros), ParamDef('position_bias', _VEC, zeros)),
    step_flops=lambda dims, s: (4 * dims.model * dims.qk + 2 * s * dims.qk
                                + 2 * s * dims.model))
ROPE = ScoreBranch('rope', _rope_score, prepare_keys=_rotate_keys)

SCORE_BRANCHES: Dict[str, ScoreBranch] = {b.name: b for b in (CONTENT, RELATIVE, ROPE)}

# MonoAttn's gate logit p. The authors' code initialises it so that the
# sigmoid branch has weight 1 - sigmoid(20); see `MONO_GATE_INIT`.
MONO_GATE_INIT = -20.0
_GATE = ParamDef('gate_logit', lambda dims: (), jax.nn.initializers.constant(MONO_GATE_INIT))

LOCATION_RULES: Dict[str, LocationRule] = {r.name: r for r in (
    LocationRule('locattn', softstair_step, dubois_update, num_rho=3, clamp=True),
    LocationRule('locattn_s', softstair_step, dubois_s_update, num_rho=2, clamp=True),
    LocationRule('onestep', sigmoid_step, monotonic_update, num_rho=1, clamp=False),
    LocationRule('mono', mono_step, monotonic_update, num_rho=1, clamp=False, params=(_GATE,)),
    LocationRule('rmono', relu_step, monotonic_update, num_rho=1, clamp=False),
    LocationRule('onestep_minus_step2', sigmoid_step, dubois_update, num_rho=3, clamp=True),
    LocationRule('onestep_minus_step3', softstair_step, monotonic_update, num_rho=1,
                 clamp=False),
    LocationRule('onestep_minus_sigmoid', free_step, monotonic_update, num_rho=1,
                 clamp=False),
)}


def location_mu(rule: LocationRule, rho: Array, pa_prev: Array, step_size: Array,
                is_first: Array, rule_params: Optional[Mapping[str, Array]] = None,
                tap: Tap = apply_tap):
  """Applies `rule` to the rho read-out. Returns (mu [...], step [...]).

  rho: [B, rule.num_rho]; pa_prev, step_size: [B] (any [...] for B); is_first:
  [] bool; rule_params: the rule's own learned arrays by name (e.g.
  {'gate_logit': p}); tap: how the step reads them (see `attention_step`).
  mu has pa_prev's dtype, step rho's. (= `location_update` after `location_step`:
  the step reads rho only, the update pa_prev.)
  """
  rho, pa_prev = jnp.asarray(rho), jnp.asarray(pa_prev)
  _check_shape('location_mu', 'rho', rho, pa_prev.shape + (rule.num_rho,),
               f'[B, num_rho] for pa_prev [B]; rule {rule.name!r} reads {rule.num_rho} rho')
  step = location_step(rule, rho, rule_params, tap)
  return location_update(rule, step, rho, pa_prev, step_size, is_first), step


def location_step(rule: LocationRule, rho: Array,
                  rule_params: Optional[Mapping[str, Array]] = None,
                  tap: Tap = apply_tap) -> Array:
  """The rule's step (Eq. 11-13 and the ablations) from rho [..., num_rho] -> [...]."""
  return tap(functools.partial(_rule_step, rule), rho[..., 0], dict(rule_params or {}))


def location_update(rule: LocationRule, step: Array, rho: Array, pa_prev: Array,
                    step_size: Array, is_first: Array) -> Array:
  """mu_t from the step and pa_{t-1} (Eq. 14-15 or Dubois's update), leaky-clamped
  where the rule clamps (Eq. 15). step, pa_prev, step_size: [...]; rho [..., K]."""
  mu = rule.update(step, rho, pa_prev, step_size, is_first)
  return leaky_clamp(mu) if rule.clamp else mu


def _rule_step(rule: LocationRule, rho_1: Array, rule_params: Mapping[str, Array]) -> Array:
  return rule.step(rho_1, **rule_params)


# The location read-outs of Eq. 9-10: l_t = W_l h + b_l (W_l: [D, Q], so l_t is Q
# wide), sigma from w_sigma . l_t (+ b_sigma, this library's bias,
# `Variant.sigma_bias`; see BUILD_NOTES), rho = W_rho l_t.
# authors_init: the authors' code (Multiheaded_{Monotonic,GRUMix,Ablation}_Attention,
# heads = 1, d = qk) has W_l = position_state_linear [qk, qD], xavier weight and torch's
# default U(+-1/sqrt(qD)) bias; w_sigma = Wsigma [1, qk, 1] and W_rho = Wrho [1, qk, K],
# xavier over those 3-d shapes (torch fans: fan_in = qk * K, fan_out = 1 * K);
# no sigma bias; f_mix = mix_scorer [1, qD], xavier weight, U(+-1/sqrt(qD)) bias.
_LOC_KERNEL = ParamDef('loc_kernel', lambda dims: (dims.model, dims.qk), glorot,
                       _authors_xavier(lambda dims: dims.model, lambda dims: dims.qk))
_LOC_BIAS = ParamDef('loc_bias', lambda dims: (dims.qk,), zeros,
                     lambda dims: torch_linear_init(dims.model))
_SIGMA_KERNEL = ParamDef('sigma_kernel', lambda dims: (dims.qk, 1), glorot,
                         _authors_xavier(lambda dims: dims.qk, lambda dims: 1))
_SIGMA_BIAS = ParamDef('sigma_bias', lambda dims: (), zeros)


def _rho_kernel(num_rho: int) -> ParamDef:
  return ParamDef('rho_kernel', lambda dims: (dims.qk, num_rho), glorot,
                  _authors_xavier(lambda dims: dims.qk * num_rho, lambda dims: num_rho))


_MIX_PARAMS = (
    ParamDef('mix_kernel', lambda dims: (dims.model, 1), glorot),
    ParamDef('mix_bias', lambda dims: (), zeros, lambda dims: torch_linear_init(dims.model)),
)


@dataclasses.dataclass(frozen=True)
class Variant:
  """One cross-attention variant, as data (the registry is `monoloc_jax.variants`).

  name: the slug ('onestep'); display_name: the paper's name ('OneStepAttn').
  scores: the softmax branch (Eq. 1, Eq. 3-4 or RoPE), or None (location only).
  location: the location rule (Eq. 5-14, 19), or None (no location attention).
  direction_mixing: keys/values from e_dir (Eq. 17-18) instead of e ("Bi-").
  position_reference: "PR" (App. B): pa_t is computed from lambda'_t instead of
    the mixed a_t.
  authors_code_mixes: False where the authors' released code, as configured,
    builds this Mix variant without its softmax branch (see `variants.from_config`).
  sigma_bias: the sigma read-out has a bias b_sigma (this library's default;
    False: no such parameter, as the authors' code). Location variants only.
  location_normaliser: Eq. 9's normaliser (`LocationNormaliser`).
  With both `scores` and `location` set, the two are mixed (Eq. 15-16).
  """
  name: str
  display_name: str
  scores: Optional[ScoreBranch] = None
  location: Optional[LocationRule] = None
  direction_mixing: bool = False
  position_reference: bool = False
  authors_code_mixes: bool = True
  sigma_bias: bool = True
  location_normaliser: LocationNormaliser = PADDING_FREE

  def __post_init__(self):
    if self.scores is None and self.location is None:
      raise ValueError(f'variant {self.name!r} needs scores, a location rule or both')
    if self.position_reference and not self.mixes:
      raise ValueError(f'variant {self.name!r}: position_reference only applies to mixed '
                       'variants')

  @property
  def mixes(self) -> bool:
    """Content mixing (Eq. 15-16): both a softmax branch and a location branch."""
    return self.scores is not None and self.location is not None

  def param_defs(self) -> Tuple[ParamDef, ...]:
    """Every learned array of the attention (besides the value path), in creation order."""
    defs = [ParamDef('out', lambda dims: (dims.model, dims.model), glorot)]    # f_o, Eq. 2
    if self.scores is not None:
      defs += [ParamDef('key', lambda dims: (dims.encoded, dims.qk), glorot),
               ParamDef('query', lambda dims: (dims.model, dims.qk), glorot)]
      defs += self.scores.params
    if self.location is not None:
      defs += [_LOC_KERNEL, _LOC_BIAS, _SIGMA_KERNEL]
      if self.sigma_bias:
        defs.append(_SIGMA_BIAS)
      defs.append(_rho_kernel(self.location.num_rho))
      defs += self.location.params
    if self.mixes:
      defs += _MIX_PARAMS
    return tuple(defs)


@flax.struct.dataclass
class AttentionParams:
  """The arrays one attention step reads, in their exactly folded forms (`fold_params`).

  key: [D_enc, Q] the key projection W_k (content: W_k W_q^T), or None.
  query: [D, Q] W_q, or None (no softmax branch, or folded into `key`).
  score: the score branch's own arrays by name (e.g. 'rel_kernel').
  readout_kernel, readout_bias: [D, 1 + K], [1 + K]: the sigma and rho
    read-outs with W_l folded in, or None (no location rule).
  rule: the location rule's own arrays by name (e.g. 'gate_logit').
  mix_kernel, mix_bias: [D], []: f_mix of Eq. 16, or None (no mixing).
  out: [D, M]: f_o of Eq. 2, times any linear map the caller applies next.
  qk_dim: the query/key width d_k of Eq. 1 (static; 0 without a softmax branch).
  """
  key: Optional[Array]
  query: Optional[Array]
  score: Mapping[str, Array]
  readout_kernel: Optional[Array]
  readout_bias: Optional[Array]
  rule: Mapping[str, Array]
  mix_kernel: Optional[Array]
  mix_bias: Optional[Array]
  out: Array
  qk_dim: int = flax.struct.field(pytree_node=False, default=0)


def fold_params(variant: Variant, raw: Mapping[str, Array],
                out_next: Optional[Array] = None,
                dtype: Optional[DType] = None) -> AttentionParams:
  """Turns the raw arrays of `variant.param_defs()` into `AttentionParams`.

  Every fold is an exact rewrite:
    * content scores: q.k_i = (W_q^T h).(W_k^T e_i) = h.((W_k W_q^T)^T e_i), so
      W_q is folded into the key projection (one product per position, none per step);
    * location read-outs: l_t = W_l h + b_l (W_l: [D, Q]) is only read through
      w_sigma . l_t and W_rho l_t, so [sigma_raw, rho] = h (W_l [w_sigma | W_rho]) +
      (b_l [w_sigma | W_rho] + [b_sigma, 0]): one [D, 1 + K] product per step
      instead of a [D, Q] one (b_sigma only where `variant.sigma_bias`);
    * out_next [D, M]: a linear map the caller applies to o_t (the decoder
      GRU's input projection), folded into f_o.

  The folds run in the raw arrays' precision. dtype: the computation dtype
  (Flax's `dtype`; default: the raw arrays'): the keys, queries, score arrays and
  f_o are cast to it; the location read-outs, the rule's arrays and f_mix, which
  feed the location recurrence, are kept in `at_least_float32(dtype)`.
  """
  raw = {k: jnp.asarray(v) for k, v in raw.items()}
  dtype = jnp.dtype(_dtype(*raw.values()) if dtype is None else dtype)
  location = at_least_float32(dtype)
  key = query = readout_kernel = readout_bias = mix_kernel = mix_bias = None
  score, rule = {}, {}
  qk_dim = 0
  if variant.scores is not None:
    key, query = raw['key'], raw['query']
    qk_dim = int(query.shape[-1])
    if variant.scores.fold_query:
      key, query = key @ query.T, None
    key = _cast(key, dtype)
    query = None if query is None else _cast(query, dtype)
    score = {p.name: _cast(raw[p.name], dtype) for p in variant.scores.params}
  if variant.location is not None:
    heads = jnp.concatenate([raw['sigma_kernel'], raw['rho_kernel']], axis=1)   # [Q, 1 + K]
    readout_kernel = _cast(raw['loc_kernel'] @ heads, location)                 # [D, 1 + K]
    readout_bias = raw['loc_bias'] @ heads
    if variant.sigma_bias:
      readout_bias = readout_bias.at[0].add(raw['sigma_bias'])
    readout_bias = _cast(readout_bias, location)
    rule = {p.name: _cast(raw[p.name], location) for p in variant.location.params}
  if variant.mixes:
    mix_kernel = _cast(raw['mix_kernel'][:, 0], location)
    mix_bias = _cast(raw['mix_bias'], location)
  out = _cast(raw['out'] if out_next is None else raw['out'] @ out_next, dtype)
  return AttentionParams(key, query, score, readout_kernel, readout_bias, rule,
                         mix_kernel, mix_bias, out, qk_dim)


class AttentionMemory(NamedTuple):
  """Per-sequence quantities computed once, before the decoder scan (`make_memory`).

  keys: [B, S, Q] projected keys (RoPE-rotated for Bi-ROPE), or None when the
    variant has no softmax branch.
  values: [B, S, D_v] values.
  mask: [B, S] bool, valid encoder positions.
  positions: [B, S] normalised positions norm(i) (Eq. 7), in at least float32.
  lengths: [B] int, valid positions s (START and END included).
  """
  keys: Optional[Array]
  values: Array
  mask: Array
  positions: Array
  lengths: Array


def make_memory(variant: Variant, params: AttentionParams, encoded: Array,
                values: Array, lengths: Array) -> AttentionMemory:
  """The encoder side of the attention, once per sequence.

  encoded: [B, S, D_enc], the keys' source: e, or for a variant with
  `direction_mixing` e_dir = `direction_mixing`(e, lengths, alpha) (this
  function does not mix directions; see `attention_step`); values: [B, S, D_v],
  computed from the same e or e_dir; lengths: [B] ints. The keys are in
  `params.key`'s dtype, the positions in at least float32.
  """
  encoded, values, lengths = jnp.asarray(encoded), jnp.asarray(values), jnp.asarray(lengths)
  _check(encoded.ndim == 3, 'make_memory', f'encoded must be [B, S, D_enc], got '
         f'{_fmt(encoded.shape)}')
  _check(values.ndim == 3 and values.shape[:2] == encoded.shape[:2], 'make_memory',
         f'values must be [B, S, D_v] with [B, S] = {_fmt(encoded.shape[:2])} (from encoded), '
         f'got {_fmt(values.shape)}')
  _check_shape('make_memory', 'lengths', lengths, encoded.shape[:1], 'encoded.shape[:1], [B]')
  max_len = encoded.shape[1]
  keys = None
  if variant.scores is not None:
    keys = _cast(encoded, params.key.dtype) @ params.key
    if variant.scores.prepare_keys is not None:
      keys = variant.scores.prepare_keys(keys, jnp.arange(max_len)[None, :])
  return AttentionMemory(
      keys=keys, values=values,
      mask=jnp.arange(max_len)[None, :] < lengths[:, None],
      positions=normalized_positions(lengths, max_len, at_least_float32(_dtype(encoded))),
      lengths=lengths)


class AttentionCarry(NamedTuple):
  """What a step hands to the next: pa_{t-1} [B] and the 0-based step index t-1 []."""
  pa_prev: Array
  t: Array


def initial_carry(batch_size: int, dtype: DType = jnp.float32) -> AttentionCarry:
  """pa_0 = 0 ([batch_size] in `dtype`: a float64 model needs float64, and a bfloat16
  model keeps its location recurrence in float32, `at_least_float32`), step index 0."""
  return AttentionCarry(jnp.zeros((batch_size,), dtype), jnp.zeros((), jnp.int32))


matmul, affine = tapped_scan.matmul, tapped_scan.affine
# Eq. 2's sum_i a_ti v_i: weights [B, S], values [B, S, D_v] -> [B, D_v]; over the
# steps, dV = sum_t a_t^T dctx_t is one einsum.
weighted_sum = tapped_scan.TapOp(
    lambda weights, values: jnp.einsum('bs,bsd->bd', weights, values),
    lambda weights, d_context, values: jnp.einsum('tbs,tbd->bsd', weights, d_context))


def _branch_scores(branch: ScoreBranch, memory: AttentionMemory, params: AttentionParams,
                   x: Tuple[Array, AttentionCarry], w: Tuple[Optional[Array], Mapping]):
  """The score branch with its loop invariants (keys, own arrays) given separately."""
  q, carry = x
  keys, score_params = w
  return branch.score(q, memory._replace(keys=keys), carry,
                      params.replace(score=score_params))


def _check_step_inputs(memory: AttentionMemory, query: Array, carry: AttentionCarry) -> None:
  """Shapes of one step's inputs (memory.keys/values may be `tapped_scan`'s
  placeholders: only their .shape and .dtype are read)."""
  kernel = 'attention_step'
  _check(len(query.shape) == 2, kernel,
         f'query (h_(t-1)) must be [B, D], got {_fmt(query.shape)}')
  b = query.shape[0]
  mask = memory.mask
  _check(len(mask.shape) == 2 and mask.shape[0] == b, kernel,
         f'memory.mask must be [B, S] with B = {b} (from query), got {_fmt(mask.shape)}')
  _check_mask(kernel, mask, mask.shape, '[B, S]')
  s = mask.shape[1]
  _check_shape(kernel, 'memory.positions', memory.positions, (b, s), '[B, S], as memory.mask')
  _check_shape(kernel, 'memory.lengths', memory.lengths, (b,), '[B]')
  values = memory.values.shape
  _check(len(values) == 3 and tuple(values[:2]) == (b, s), kernel,
         f'memory.values must be [B, S, D_v] with [B, S] = {_fmt((b, s))}, got {_fmt(values)}')
  _check_shape(kernel, 'carry.pa_prev', carry.pa_prev, (b,), '[B], one pa_(t-1) per row')


def attention_step(variant: Variant, params: AttentionParams, memory: AttentionMemory,
                   query: Array, carry: AttentionCarry, min_sigma: float = MIN_SIGMA,
                   tap: Tap = apply_tap):
  """One cross-attention step (Eq. 1-16, 19) of any variant, for one decoder step.

  Direction mixing (Eq. 17-18; the Bi- variants and every OneStep/Mono/RMono
  variant, `variant.direction_mixing`) is NOT applied here. It changes the
  encoder side, so it is applied once per sequence, before the steps, by the
  caller: e_dir = `direction_mixing`(e, lengths, `direction_gate`(f_dir(e_cls))),
  then the keys AND the values are computed from e_dir and `make_memory` gets
  e_dir (`backbones.gru.CrossAttention` does exactly this). Given a memory built from e,
  this function cannot tell and attends over e: for such a variant that is the
  model with alpha_dir = 1 (reading forwards only). Weights over e_dir map back
  to input positions with `input_attention`.

  Args:
    variant: the variant.
    params: its folded arrays (`fold_params`).
    memory: the encoder side (`make_memory`), from e_dir when the variant mixes
      directions (see above).
    query: [B, D] the decoder state h_{t-1}.
    carry: pa_{t-1} [B] and the step index.
    min_sigma: Eq. 10's floor.
    tap: how the step reads its loop invariants (`params` and memory.keys /
      memory.values): every use is `tap(op, x, w)` = op(x, w), so that
      `tapped_scan` can take their gradients after the decoder loop. The
      default computes op(x, w) directly.

  Returns:
    (o_t [B, M], a_t [B, S], new carry, aux): o_t = (sum_i a_ti v_i) params.out;
    aux maps 'mu', 'sigma', 'step', 'mix' to [B] arrays where the variant has them.

  Dtypes: the products with W_q, the keys and the values run in the memory's
  dtype (memory.values.dtype; the query is cast to it), and o_t and a_t have it;
  the location read-out reads the query in at least float32; the location
  recurrence and the softmax run in at least float32; the carry and aux have
  carry.pa_prev's dtype. (`backbones.gru.Seq2Seq` passes a float32 h_{t-1} and carry
  with a bfloat16 memory.)
  """
  _check_step_inputs(memory, query, carry)
  work = at_least_float32(_dtype(query, carry.pa_prev))
  readouts = attention_readouts(variant, params, memory, query, carry.t, min_sigma, tap, work)
  weights, carry, aux = attention_recurrence(variant, readouts, memory, carry, work)
  weights = _cast(weights, memory.values.dtype)
  context = tap(weighted_sum, weights, memory.values)                    # [B, D_v]
  return tap(matmul, context, params.out), weights, carry, aux


class Readouts(NamedTuple):
  """What one step computes from the query h_{t-1} and the step index t alone:
  every product with a learned array, and what follows from them before the
  location recurrence. A Transformer forms them for all steps at once.

  content: [B, S] the score branch's softmax (Eq. 1-5; relative and ROPE
  scores read t); sigma: [B] (Eq. 10); rho: [B, K] the rule's read-out;
  step: [B] the rule's step (Eq. 11-13 and the ablations); mix: [B] Eq. 16's
  gate. Each is None where the variant has no such part.
  """
  content: Optional[Array]
  sigma: Optional[Array]
  rho: Optional[Array]
  step: Optional[Array]
  mix: Optional[Array]


def attention_readouts(variant: Variant, params: AttentionParams, memory: AttentionMemory,
                       query: Array, t: Array, min_sigma: float = MIN_SIGMA,
                       tap: Tap = apply_tap, work_dtype: Optional[DType] = None) -> Readouts:
  """The read-outs of one step (`Readouts`): query [B, D], t [] the step index.

  work_dtype: the dtype of the location read-outs and softmaxes (default: the
  query's, at least float32). The products with W_q and the keys run in the
  memory's dtype. Every read of a loop invariant goes through `tap`.
  """
  work = work_dtype or at_least_float32(_dtype(query))
  content = sigma = rho = step = mix = None
  if variant.scores is not None:
    query_c = _cast(query, memory.values.dtype)
    q = query_c if params.query is None else tap(matmul, query_c, params.query)
    scores = tap(functools.partial(_branch_scores, variant.scores, memory, params),
                 (q, AttentionCarry(None, t)), (memory.keys, params.score))
    content = masked_softmax(_cast(scores, work), memory.mask)              # [B, S]
  if variant.location is not None:
    query_w = _cast(query, work)
    readout = _cast(tap(affine, query_w, (params.readout_kernel, params.readout_bias)),
                    work)                                                    # [B, 1 + K]
    sigma = location_sigma(readout[:, 0], memory.lengths, min_sigma)       # [B]
    rho = readout[:, 1:]
    _check_shape('attention_readouts', 'rho', rho, sigma.shape + (variant.location.num_rho,),
                 f'[B, num_rho]; rule {variant.location.name!r} reads '
                 f'{variant.location.num_rho} rho')
    step = location_step(variant.location, rho, params.rule, tap)
    if variant.mixes:
      mix = jax.nn.sigmoid(_cast(tap(affine, query_w, (params.mix_kernel, params.mix_bias)),
                                 work))                                      # Eq. 16
  return Readouts(content, sigma, rho, step, mix)


def attention_recurrence(variant: Variant, readouts: Readouts, memory: AttentionMemory,
                         carry: AttentionCarry, work_dtype: Optional[DType] = None):
  """The sequential part of one step: pa_{t-1} -> mu_t -> lambda_t -> a_t -> pa_t.

  Reads no learned array (elementwise over [B, S]; no matrix product). Returns
  (a_t [B, S] in the work dtype, the new carry, aux {'mu', 'sigma', 'step',
  'mix'} [B] where the variant has them, in pa_prev's dtype).
  """
  carry_dtype = carry.pa_prev.dtype
  work = work_dtype or at_least_float32(carry_dtype)
  pa_prev = _cast(carry.pa_prev, work)
  aux = {}
  weights = pa_weights = readouts.content
  if variant.location is not None:
    mu = location_update(variant.location, readouts.step, readouts.rho, pa_prev,
                         stepsize(memory.lengths, work), carry.t == 0)
    lam = gaussian_location_attention(mu, readouts.sigma, memory.positions, memory.mask,
                                      normaliser=variant.location_normaliser)
    aux.update(mu=mu, sigma=readouts.sigma, step=readouts.step)
    weights = pa_weights = lam
    if variant.mixes:
      aux['mix'] = readouts.mix
      weights = content_mixing(lam, readouts.content, readouts.mix)
      pa_weights = lam if variant.position_reference else weights
  pa = attended_position(pa_weights, _cast(memory.positions, work))
  aux = {k: _cast(v, carry_dtype) for k, v in aux.items()}
  return weights, AttentionCarry(_cast(pa, carry_dtype), carry.t + 1), aux
