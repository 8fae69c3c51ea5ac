"""Beyond the paper: the Transformer's self-attention position schemes, one table
(`SCHEMES`, config.transformer.positions -> `PositionScheme`).

A scheme acts at (up to) three places of a self-attention stack (the encoder's, or
the decoder's causal one; the cross-attention is the variant's own and reads none of
this), always at the integer positions p_0 < p_1 < ... < p_{T-1} of the stack's T
slots (`stack_index`: 0..T-1, or an ordered random draw for the randomized schemes):

  (a) the embeddings: x_t += pe(p_t), a [D] vector per slot (`absolute`);
  (b) the queries and keys: q_t, k_t rotated by the angles of p_t (`rotary`, RoPE);
  (c) the scores: s_ij += bias^h(p_i, p_j), a [H, T, T] bias after the 1/sqrt(K)
      scaling (`bias`).

The names (`POSITIONS`, in this order):
  none                   NoPE: no position input at all (the encoder is then
                         permutation-equivariant);
  sinusoidal             (a) pe(p) = [sin(p w_j)]_j ++ [cos(p w_j)]_j, w_j = 10000^(-2j/D)
                         (`attention.sinusoidal_embedding`, Transformer-XL's layout);
  learned                (a) pe(p) = P[min(p, M - 1)], P a learned [M, D] table per
                         stack (M = config.transformer.max_positions); positions past
                         the table reuse its last row (clipped, as the gather of
                         Ruoss et al.'s Haiku table does), so range evaluation never
                         fails; the default M = 512 covers it up to length 500;
  relative               (c) T5 (Raffel et al. 2020): bias^h(i, j) = R[bucket(j - i), h],
                         R a learned [RELATIVE_BUCKETS, H] table per stack, shared by its
                         layers (as T5); bidirectional buckets in the encoder, causal
                         ones in the decoder (`t5_bucket`);
  alibi                  (c) Press et al. 2022: bias^h(i, j) = -m_h |i - j| in the encoder
                         (the bidirectional form), -m_h (i - j) for j <= i in the decoder
                         (j > i is masked; its bias is 0), slopes m_h = 2^(-8h/H)
                         (`alibi_slopes`); no parameters;
  rope                   (b) rotary (Su et al. 2021; `attention.rotary_embedding`, the
                         same function the Bi-ROPE cross-attention uses);
  randomized_sinusoidal  sinusoidal and rope at randomized positions (Ruoss et al.
  randomized_rope        2023): p = a sorted draw of T distinct integers from
                         range(L), L = config.transformer.randomized_max_length
                         (their 2048), at training AND at test (`random_index`).

Everything here is a pure function of arrays; the Transformer owns the tables
(`table_shape`, `table_init`) and the random keys, and asks a scheme for the
`StackPositions` of a stack once per sequence (`prepare`), before any decoder loop:
the parallel form and the cached step read the same arrays, so they agree by
construction.

Shapes: B batch (or 1 where every row shares the positions), T slots of the stack,
D model width, H heads, K head width, M table rows, L the randomized range.
"""

import dataclasses
import math
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from monoloc_jax import attention
from monoloc_jax import errors

Array = jax.Array
DType = Any

__all__ = ['PositionScheme', 'SCHEMES', 'POSITIONS', 'StackPositions', 'Sizes', 'scheme',
           'stack_index', 'random_index', 'prepare', 'absolute_at', 'rotate', 't5_bucket', 'alibi_slopes',
           'alibi_bias', 'relative_bias', 'sinusoidal_vectors', 'learned_vectors',
           'MAX_POSITIONS', 'RANDOMIZED_MAX_LENGTH', 'RELATIVE_BUCKETS',
           'RELATIVE_MAX_DISTANCE']

# The defaults of config.transformer.max_positions and .randomized_max_length (written
# once: `transformer.config_defaults` and the Transformer's attributes read them).
MAX_POSITIONS = 512            # learned table rows: 502 encoder slots at range length 500
RANDOMIZED_MAX_LENGTH = 2048   # Ruoss et al.'s L (their noise_max_length)
# T5's bucket layout (Raffel et al. 2020, and T5X): 32 buckets, exact up to 8 (encoder,
# per direction) / 16 (decoder), logarithmic up to a distance of 128, one bucket beyond.
RELATIVE_BUCKETS = 32
RELATIVE_MAX_DISTANCE = 128


class Sizes(NamedTuple):
  """What a scheme's table shape may depend on."""
  dim: int                  # D
  heads: int                # H
  max_positions: int        # M


class StackPositions(NamedTuple):
  """What one self-attention stack reads of its positions, prepared once per sequence.

  index: [B|1, T] int32, the slots' positions (`stack_index`);
  absolute: [B|1, T, D] added to the embeddings, or None (the cached decoder step
    recomputes its slot's vector from index, `absolute_at`, the same numbers);
  rotary: [B|1, T] the positions its queries and keys are rotated by, or None;
  bias: [B|1, H, T, T] float (at least float32) added to the scaled scores, or None.
  """
  index: Array
  absolute: Optional[Array]
  rotary: Optional[Array]
  bias: Optional[Array]


# ---------------------------------------------------------------------------
# The kernels.
# ---------------------------------------------------------------------------
def sinusoidal_vectors(index: Array, table: Optional[Array], dim: int, dtype: DType) -> Array:
  """pe(p) = `attention.sinusoidal_embedding`(p): index [B|1, T] -> [B|1, T, D]."""
  del table
  return attention.sinusoidal_embedding(index, dim, dtype)


def learned_vectors(index: Array, table: Array, dim: int, dtype: DType) -> Array:
  """pe(p) = table[min(p, M - 1)]: index [B|1, T], table [M, D] -> [B|1, T, D] (positions
  past the table reuse its last row)."""
  del dim
  rows = jnp.minimum(index, table.shape[0] - 1)
  return jnp.take(table, rows, axis=0).astype(dtype)


def rotate(x: Array, index: Array) -> Array:
  """RoPE of x [B, T, H, K] (or one step [B, H, K] with index [B|1, 1]) at index
  [B|1, T]: the same angle for every head (`attention.rotary_embedding`)."""
  return attention.rotary_embedding(x, index[..., None])


def t5_bucket(relative: Array, causal: bool, num_buckets: int = RELATIVE_BUCKETS,
              max_distance: int = RELATIVE_MAX_DISTANCE) -> Array:
  """T5's bucket of relative = key position - query position (int array, any shape).

  n = query - key. Bidirectional (causal=False): half the buckets per direction, keys
  after the query (n < 0) in the upper half, n = |n|. Causal: n = max(n, 0) (keys after
  the query are masked anyway). Then, with E = buckets // 2 (of the direction's buckets):
  bucket n for n < E; else E + floor(log(n / E) / log(max_distance / E) (buckets - E)),
  at most buckets - 1 (so every distance >= max_distance shares the last bucket).
  """
  n = -relative
  offset = jnp.zeros_like(n)
  if not causal:
    num_buckets //= 2
    offset = jnp.where(n < 0, num_buckets, 0)
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  exact = num_buckets // 2
  log_ratio = jnp.log(jnp.maximum(n, 1).astype(jnp.float32) / exact) / math.log(
      max_distance / exact)
  large = exact + (log_ratio * (num_buckets - exact)).astype(n.dtype)
  large = jnp.minimum(large, num_buckets - 1)
  return offset + jnp.where(n < exact, n, large)


def alibi_slopes(heads: int) -> Array:
  """Press et al.'s head slopes [H]: m_h = 2^(-8h/H), h = 1..H, for H a power of two;
  otherwise (their rule) the 2^floor(log2 H) slopes of that power, then every other
  slope of twice that power."""
  def power_of_two(n):
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]
  if heads & (heads - 1) == 0:
    return jnp.asarray(power_of_two(heads), jnp.float32)
  closest = 2 ** int(math.floor(math.log2(heads)))
  slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][:heads - closest]
  return jnp.asarray(slopes, jnp.float32)


def alibi_bias(index: Array, table: Optional[Array], causal: bool, heads: int) -> Array:
  """ALiBi: index [B|1, T] -> [B|1, H, T, T]: -m_h |p_i - p_j| (encoder) or
  -m_h max(p_i - p_j, 0) (decoder: the keys after the query are masked)."""
  del table
  distance = index[:, :, None] - index[:, None, :]                        # p_i - p_j
  distance = jnp.maximum(distance, 0) if causal else jnp.abs(distance)
  return -alibi_slopes(heads)[None, :, None, None] * distance[:, None].astype(jnp.float32)


def relative_bias(index: Array, table: Array, causal: bool, heads: int) -> Array:
  """T5 relative bias: index [B|1, T], table [buckets, H] -> [B|1, H, T, T] with
  [b, h, i, j] = table[t5_bucket(p_j - p_i), h]."""
  del heads
  bucket = t5_bucket(index[:, None, :] - index[:, :, None], causal, table.shape[0])
  bias = jnp.take(table, bucket, axis=0)                                  # [B|1, T, T, H]
  return jnp.moveaxis(bias, -1, 1).astype(attention.at_least_float32(table.dtype))


def random_index(key: Array, batch: int, length: int, max_length: int) -> Array:
  """Ruoss et al.'s randomized positions: per row b, a draw of `length` distinct
  integers from range(max_length) without replacement, sorted; row b's draw uses
  fold_in(key, b). Returns [B, T] int32. A one-line MonolocError if length > max_length."""
  if length > max_length:
    raise errors.MonolocError(
        f'config.transformer.randomized_max_length={max_length} is smaller than a sequence '
        f'of {length} positions; it must be at least the longest encoder input + 2 and '
        'decoder output')

  def row(b):
    drawn = jax.random.choice(jax.random.fold_in(key, b), max_length, (length,),
                              replace=False)
    return jnp.sort(drawn).astype(jnp.int32)
  return jax.vmap(row)(jnp.arange(batch))


# ---------------------------------------------------------------------------
# The table.
# ---------------------------------------------------------------------------
Absolute = Callable[[Array, Optional[Array], int, DType], Array]
Bias = Callable[[Array, Optional[Array], bool, int], Array]


@dataclasses.dataclass(frozen=True)
class PositionScheme:
  """One self-attention position scheme (see the module docstring).

  absolute(index [B|1, T], table, D, dtype) -> [B|1, T, D], added to the embeddings;
  rotary: rotate the queries and keys by the positions;
  bias(index [B|1, T], table, causal, H) -> [B|1, H, T, T], added to the scores;
  table_shape(Sizes) -> the shape of the learned table each stack owns (None: none);
  table_init: its initialiser;
  randomized: the positions are `random_index`'s draw, not 0..T-1.
  """
  absolute: Optional[Absolute] = None
  rotary: bool = False
  bias: Optional[Bias] = None
  table_shape: Optional[Callable[[Sizes], Tuple[int, ...]]] = None
  table_init: Optional[Callable[..., Array]] = None
  randomized: bool = False


# config.transformer.positions -> its scheme (the one table; `POSITIONS` its names).
SCHEMES: Dict[str, PositionScheme] = {
    'none': PositionScheme(),
    'sinusoidal': PositionScheme(absolute=sinusoidal_vectors),
    # Ruoss et al.'s learned table: a Haiku Embed, initialised N(0, 1) truncated.
    'learned': PositionScheme(absolute=learned_vectors,
                              table_shape=lambda s: (s.max_positions, s.dim),
                              table_init=nn.initializers.truncated_normal(stddev=1.0)),
    # T5X initialises its relative bias table with variance scaling (fan_avg, uniform).
    'relative': PositionScheme(bias=relative_bias,
                               table_shape=lambda s: (RELATIVE_BUCKETS, s.heads),
                               table_init=nn.initializers.variance_scaling(
                                   1.0, 'fan_avg', 'uniform')),
    'alibi': PositionScheme(bias=alibi_bias),
    'rope': PositionScheme(rotary=True),
    'randomized_sinusoidal': PositionScheme(absolute=sinusoidal_vectors, randomized=True),
    'randomized_rope': PositionScheme(rotary=True, randomized=True),
}
POSITIONS: Tuple[str, ...] = tuple(SCHEMES)


def scheme(name: str) -> PositionScheme:
  """SCHEMES[name], or a one-line MonolocError naming the valid ones."""
  if name not in SCHEMES:
    raise errors.unknown_name('positions', name, SCHEMES)
  return SCHEMES[name]


def stack_index(s: PositionScheme, batch: int, length: int, key: Optional[Array],
                max_length: int) -> Array:
  """The stack's positions: [1, T] = 0..T-1, or (randomized) `random_index` [B, T]."""
  if s.randomized:
    return random_index(key, batch, length, max_length)
  return jnp.arange(length, dtype=jnp.int32)[None]


def prepare(s: PositionScheme, index: Array, table: Optional[Array], causal: bool,
            dim: int, heads: int, dtype: DType) -> StackPositions:
  """The `StackPositions` of a stack at positions index [B|1, T] (table: the stack's
  learned table or None; causal: the decoder's; dtype: the embeddings')."""
  return StackPositions(
      index=index,
      absolute=None if s.absolute is None else s.absolute(index, table, dim, dtype),
      rotary=index if s.rotary else None,
      bias=None if s.bias is None else s.bias(index, table, causal, heads))


def absolute_at(s: PositionScheme, pos: StackPositions, t: Array, table: Optional[Array],
                dim: int, dtype: DType) -> Array:
  """Slot t's row of pos.absolute, [B|1, D], computed from its position alone (the
  cached decoder step: the numbers a per-step computation gives, bit for bit)."""
  index_t = jax.lax.dynamic_index_in_dim(pos.index, t, 1)                  # [B|1, 1]
  return s.absolute(index_t, table, dim, dtype)[:, 0]
