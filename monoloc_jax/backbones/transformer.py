"""Beyond the paper: a Transformer encoder-decoder whose cross-attention is any
registry variant (`monoloc_jax.variants`), trained in parallel.

The paper's backbone is a GRU (`gru.Seq2Seq`): its decoder is sequential
anyway, so the location recurrence pa_{t-1} -> mu_t -> lambda'_t -> pa_t
(Eq. 5-14, 19) costs nothing extra. In a Transformer decoder the queries of
all steps are known at once under teacher forcing (causal self-attention), so
only that recurrence is sequential. This module keeps it so:

  1. every read-out of the query (the query/key products and content scores,
     the sigma and rho read-outs, MonoAttn's step activation, the mix gate
     f_mix) is computed for all T steps at once, one batched product each;
  2. only the light location recurrence runs in a `jax.lax.scan` over t:
     O(S) elementwise work per step (the Gaussian, the softmax of the
     precomputed scores, the mixing, pa_t), no matrix product;
  3. the outputs o_t = sum_h (sum_i a^h_ti v^h_i) W_o^h for all t are one
     batched product after the loop.
Variants without a location rule (Content, Relative, Bi-Relative, Bi-ROPE)
have no recurrence at all and skip step 2.

No equation is copied: `attention.attention_step` is itself the composition
of `attention.attention_readouts` (everything that reads the query and the step
index only: every product with a learned array, the content softmax, sigma,
rho, the step activation, the mix gate), `attention.attention_recurrence`
(pa_{t-1} -> a_t -> pa_t, elementwise) and the weighted sum with f_o. Step 1
runs the first under `jax.vmap` over t, step 2 the second in the scan, step 3
the last for all t (the tests check the parallel form against the
step-by-step form, which calls `attention_step`, for all 21 variants, in
float64 to 1e-9).

Design, per variant (L decoder layers, H heads of width d_h = model_dim / H):
  * one location recurrence per decoder layer AND per head: head h of layer l
    has its own raw arrays (`variant.param_defs()` with
    Dims(model=D, qk=qk_dim or d_h, encoded=D), a leading head axis, folded by
    `attention.fold_params` per head), its own pa_{t-1} (pa_0 = 0) and its
    own read-outs sigma, rho, f_mix; pa^{l,h}_t is the attended position of
    that head (with `position_reference`: from its lambda'^{l,h}_t);
  * the query of layer l at step t is that layer's post-self-attention hidden
    state at t, normalised by the layer's cross-attention pre-LayerNorm (the
    same vector feeds W_q, the location read-outs and f_mix); for the
    Relative / ROPE score branches the query's step index is the 0-based
    decoder position t - 1, as in the GRU model;
  * the memory is the encoder's output e (after its final LayerNorm); for a
    direction-mixing ("Bi-") variant each layer has one gate
    alpha^l = sigmoid(5 f^l_dir(e_cls)) (Eq. 17), shared by its heads, with
    e_cls the encoder's output at START (position 0, which attends to the whole
    input), and that layer's keys AND values come from
    e^l_dir = alpha^l e + (1 - alpha^l) e_rev (Eq. 18), as `gru.CrossAttention`;
    f^l_dir starts at zero (alpha = 1/2): e_cls is a LayerNorm output, and a
    Glorot f_dir saturated the gate before training (Copy, 1 layer, 2 heads,
    seeds 0-11: 7 learned with it, 12 with the zero start);
  * values: v^h_i = e_i W_v^h (no bias, d_h wide: the standard multi-head value
    path, not the GRU model's leaky-ReLU "inter value" transform); f_o of
    Eq. 2 is the head's slice W_o^h [d_h, D] of the usual output projection,
    passed to `fold_params` as the raw 'out' array (the registry declares
    'out' [D, D], i.e. d_v = D; here d_v = d_h);
  * the content branch is used unfolded (`ScoreBranch.fold_query=False`, the
    same function of the same raw arrays): folding W_q into the keys makes
    them D wide instead of d_h, H times the memory, and in the parallel form
    the per-step query product it saves is one batched product anyway.

The rest is a standard pre-LN Transformer: the encoder reads
`START x_1..x_n END` (learned START/END vectors; s = n + 2 positions, the
attention kernels' convention), embeddings are scaled by sqrt(D) and shared by
encoder, decoder and the (tied) output layer, plus a vocabulary bias; the
self-attention positions are `positions`, a name of the one table
`positions.SCHEMES` ('sinusoidal' by default; 'none', 'learned', 'relative',
'alibi', 'rope', 'randomized_sinusoidal', 'randomized_rope'): each scheme adds a
vector to the embeddings, rotates the self-attention queries and keys, or adds a
bias to the self-attention scores, in the encoder and in the decoder alike
(`positions.StackPositions`, prepared once per sequence and stack, before the
decoder loop; the cross-attention reads none of it).
Dropout (training only) on the embeddings and on every residual branch.

Two forms, equal on the same weights: the parallel teacher-forced `__call__`
and the step-by-step form (`decode_step`: a KV cache for the self-attention
and the per-layer, per-head location carry), used by `teacher_forced_steps`
(gold tokens fed through the cached step) and `greedy`.

Shapes: B batch, N source tokens, S = N + 2 encoder positions, T decoder
steps, V vocabulary, D model width, H heads, d_h (K below) head width, Q the
query/key width of the cross-attention, L decoder layers.

Dtypes (Flax's convention, as `gru.Seq2Seq`): `param_dtype` is the
parameters', `dtype` the computation's; the LayerNorms, softmaxes, location
recurrence and logits run in at least float32.
"""

import dataclasses
import functools
import math
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from monoloc_jax import attention
from monoloc_jax import errors
from monoloc_jax.attention import AttentionCarry, AttentionMemory, AttentionParams, Variant
from monoloc_jax.backbones import positions as position_schemes
from monoloc_jax.backbones.decoding import DecodeOutput, as_dtype, greedy_loop
from monoloc_jax.backbones.positions import StackPositions

Array = jax.Array
DType = Any

__all__ = ['Transformer', 'POSITIONS', 'CrossInvariants', 'DecodeCache', 'layer_norm',
           'self_attention', 'self_attention_step', 'cross_attention_parallel',
           'cross_attention_step', 'kernel_variant', 'config_defaults', 'validate', 'build',
           'flops_per_sample']

POSITIONS = position_schemes.POSITIONS      # config.transformer.positions' names
# The fixed key of a randomized scheme's draw at evaluation (no rng given): see
# `Transformer._draw_key`.
EVAL_POSITIONS_SEED = 0
LAYER_NORM_EPS = 1e-6


# --------------------------------------------------------------------------
# Pure pieces, shared by the parallel and the step-by-step forms.
# --------------------------------------------------------------------------
def layer_norm(x: Array, scale: Array, bias: Array, eps: float = LAYER_NORM_EPS) -> Array:
  """LayerNorm over the last axis, computed in at least float32; x [..., D] -> x's dtype."""
  work = attention.at_least_float32(x.dtype)
  xw = as_dtype(x, work)
  mean = jnp.mean(xw, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(xw - mean), axis=-1, keepdims=True)
  y = (xw - mean) * jax.lax.rsqrt(var + eps) * as_dtype(scale, work) + as_dtype(bias, work)
  return as_dtype(y, x.dtype)


class SelfAttentionArrays(NamedTuple):
  """Multi-head self-attention kernels (no biases): query, key, value [D, H, K];
  out [H, K, D]."""
  query: Array
  key: Array
  value: Array
  out: Array


class MLPArrays(NamedTuple):
  """The position-wise MLP: [D, F] + [F], gelu, [F, D] + [D]."""
  w_in: Array
  b_in: Array
  w_out: Array
  b_out: Array


class DecoderLayerArrays(NamedTuple):
  """A pre-LN decoder layer's arrays besides its cross-attention (`CrossInvariants`)."""
  ln_self: Tuple[Array, Array]
  attn: SelfAttentionArrays
  ln_cross: Tuple[Array, Array]
  ln_mlp: Tuple[Array, Array]
  mlp: MLPArrays


def mlp(p: MLPArrays, x: Array) -> Array:
  """x [..., D] -> [..., D]."""
  return nn.gelu(x @ p.w_in + p.b_in) @ p.w_out + p.b_out


def _project(x: Array, kernel: Array) -> Array:
  """x [..., D] with kernel [D, H, K] -> [..., H, K]."""
  return jnp.einsum('...d,dhk->...hk', x, kernel)


def self_attention(p: SelfAttentionArrays, x: Array, mask: Array,
                   pos: StackPositions) -> Array:
  """Parallel multi-head self-attention. x [B, T, D]; mask [B or 1, T, T] bool
  (query t may read key j); pos: the stack's positions (`positions.StackPositions`:
  queries and keys rotated by pos.rotary [B|1, T], pos.bias [B|1, H, T, T] added to
  the scores q.k / sqrt(K)). Returns [B, T, D]."""
  q, k, v = _project(x, p.query), _project(x, p.key), _project(x, p.value)    # [B, T, H, K]
  if pos.rotary is not None:
    q, k = position_schemes.rotate(q, pos.rotary), position_schemes.rotate(k, pos.rotary)
  work = attention.at_least_float32(x.dtype)
  scores = jnp.einsum('bthk,bshk->bhts', q, k, preferred_element_type=work)
  scores = scores / math.sqrt(q.shape[-1])
  if pos.bias is not None:
    scores = scores + as_dtype(pos.bias, work)
  weights = attention.masked_softmax(scores, jnp.broadcast_to(mask[:, None], scores.shape))
  context = jnp.einsum('bhts,bshk->bthk', as_dtype(weights, v.dtype), v)
  return jnp.einsum('bthk,hkd->btd', context, p.out)


def self_attention_step(p: SelfAttentionArrays, x: Array, cache_k: Array, cache_v: Array,
                        t: Array, pos: StackPositions) -> Tuple[Array, Array, Array]:
  """One causal self-attention step with a KV cache.

  x [B, D], the layer's normalised input at step t (0-based); cache_k [B, H, K, T_max]
  and cache_v [B, H, T_max, K] with the keys/values of steps < t; pos: the decoder's
  positions for all T_max steps (slot t read here). Returns (output [B, D], cache_k,
  cache_v) with step t written. Equal to row t of `self_attention` under a causal mask
  (masked keys get weight exactly 0 in both).

  The caches are laid out as the two products read them (batch axes, then the
  contracted axis, then the kept one: q.k contracts K, a.v contracts T_max), so XLA:CPU
  does not transpose a whole cache at every step (the [B, T_max, H, K] layout did, and
  decoded about 3x slower; MEASUREMENTS.md §9).
  """
  q, k, v = _project(x, p.query), _project(x, p.key), _project(x, p.value)    # [B, H, K]
  if pos.rotary is not None:
    at_t = jax.lax.dynamic_index_in_dim(pos.rotary, t, 1)                    # [B|1, 1]
    q = position_schemes.rotate(q[:, None], at_t)[:, 0]
    k = position_schemes.rotate(k[:, None], at_t)[:, 0]
  cache_k = jax.lax.dynamic_update_index_in_dim(cache_k, as_dtype(k, cache_k.dtype)[..., None],
                                                t, 3)
  cache_v = jax.lax.dynamic_update_index_in_dim(cache_v, as_dtype(v, cache_v.dtype), t, 2)
  work = attention.at_least_float32(x.dtype)
  scores = jnp.einsum('bhk,bhks->bhs', q, cache_k, preferred_element_type=work)
  scores = scores / math.sqrt(q.shape[-1])
  if pos.bias is not None:                                                  # row t
    scores = scores + as_dtype(jax.lax.dynamic_index_in_dim(pos.bias, t, 2, False), work)
  mask = jnp.broadcast_to(jnp.arange(cache_v.shape[2]) <= t, scores.shape)
  weights = attention.masked_softmax(scores, mask)
  context = jnp.einsum('bhs,bhsk->bhk', as_dtype(weights, cache_v.dtype), cache_v)
  return jnp.einsum('bhk,hkd->bd', context, p.out), cache_k, cache_v


# --------------------------------------------------------------------------
# The cross-attention: any variant, per layer and per head.
# --------------------------------------------------------------------------
def kernel_variant(variant: Variant) -> Variant:
  """The variant the kernels run: `variant` with the content branch unfolded
  (`ScoreBranch.fold_query=False`), the same function of the same raw arrays
  (see the module docstring)."""
  if variant.scores is None or not variant.scores.fold_query:
    return variant
  return dataclasses.replace(variant,
                             scores=dataclasses.replace(variant.scores, fold_query=False))


class CrossInvariants(NamedTuple):
  """One decoder layer's cross-attention, prepared once per sequence.

  params: the folded `attention.AttentionParams` of the H heads, every array
    with a leading head axis (params.out [H, K, D]: head h's f_o = W_o^h);
  memory: `attention.AttentionMemory` with keys [H, B, S, Q] (or None) and
    values [H, B, S, K] per head; mask, positions [B, S] and lengths [B] shared;
  alpha: [B] the layer's direction gate alpha_dir (ones without direction mixing).
  """
  params: AttentionParams
  memory: AttentionMemory
  alpha: Array


def _head_parallel(variant: Variant, params: AttentionParams, memory: AttentionMemory,
                   queries: Array, min_sigma: float) -> Tuple[Array, Dict[str, Array]]:
  """One head's attention weights for all steps, teacher-forced.

  queries: [T, B, D]. Returns (weights [T, B, S], aux {name: [T, B]}).

  The read-outs (`attention.attention_readouts`: every product with a learned
  array, and the content softmax) depend on the query and t only, so they run
  for all T steps at once (`jax.vmap` over t: batched products). Only the
  location recurrence (`attention.attention_recurrence`: elementwise over
  [B, S], no matrix product) runs step by step in a `lax.scan`, for the variants
  that have one (the pa_t of a content-only variant is never read). The same two
  functions make up `attention.attention_step`, so nothing is copied.
  """
  work = attention.at_least_float32(queries.dtype)   # the read-outs', carry's and aux's
  steps = jnp.arange(queries.shape[0], dtype=jnp.int32)
  readouts = jax.vmap(lambda query, t: attention.attention_readouts(
      variant, params, memory, query, t, min_sigma, work_dtype=work))(queries, steps)
  if variant.location is None:          # no pa_{t-1} is read: the softmax is the answer
    return readouts.content, {}

  def recurrence(carry, step_readouts):
    weights, carry, aux = attention.attention_recurrence(variant, step_readouts, memory,
                                                         carry, work)
    return carry, (weights, aux)

  carry = attention.initial_carry(queries.shape[1], work)
  _, (weights, aux) = jax.lax.scan(recurrence, carry, readouts)
  return weights, aux


def cross_attention_parallel(variant: Variant, cross: CrossInvariants, queries: Array,
                             min_sigma: float = attention.MIN_SIGMA):
  """A layer's cross-attention for all steps at once (teacher forcing).

  variant: the kernels' variant (`kernel_variant`); queries: [B, T, D] the
  layer's normalised post-self-attention states. Returns (o [B, T, D] summed
  over heads, weights [B, T, H, S] over the (direction-mixed) memory, aux
  {name: [B, T, H]}).
  """
  memory = cross.memory
  per_step = jnp.swapaxes(queries, 0, 1)                                   # [T, B, D]

  def head(params, keys, values):
    return _head_parallel(variant, params, memory._replace(keys=keys, values=values),
                          per_step, min_sigma)
  weights, aux = jax.vmap(head)(cross.params, memory.keys, memory.values)  # [H, T, B, S]
  weights = as_dtype(weights, memory.values.dtype)
  # Eq. 2 for every step and head at once: o_t = sum_h (sum_i a^h_ti v^h_i) W_o^h.
  context = jnp.einsum('htbs,hbsk->bthk', weights, memory.values)
  out = jnp.einsum('bthk,hkd->btd', context, cross.params.out)
  return (out, jnp.transpose(weights, (2, 1, 0, 3)),
          {k: jnp.transpose(v, (2, 1, 0)) for k, v in aux.items()})


def cross_attention_step(variant: Variant, cross: CrossInvariants, query: Array,
                         carry: AttentionCarry, min_sigma: float = attention.MIN_SIGMA):
  """A layer's cross-attention for one step: `attention.attention_step` per head.

  query: [B, D]; carry: pa_{t-1} [H, B] per head and the step index [].
  Returns (o [B, D], weights [B, H, S], new carry, aux {name: [B, H]}).
  """
  memory = cross.memory

  def head(params, keys, values, pa_prev):
    o, weights, new, aux = attention.attention_step(
        variant, params, memory._replace(keys=keys, values=values), query,
        AttentionCarry(pa_prev, carry.t), min_sigma)
    return o, weights, new.pa_prev, aux
  o, weights, pa, aux = jax.vmap(head)(cross.params, memory.keys, memory.values,
                                       carry.pa_prev)
  return (jnp.sum(o, axis=0), jnp.swapaxes(weights, 0, 1), AttentionCarry(pa, carry.t + 1),
          {k: v.T for k, v in aux.items()})


def _per_head(init: Callable[..., Array], heads: int) -> Callable[..., Array]:
  """An initialiser of [heads, *shape]: `init` drawn independently per head."""
  def stacked(key, shape, dtype=jnp.float32):
    return jnp.stack([init(k, tuple(shape[1:]), dtype) for k in jax.random.split(key, heads)])
  return stacked


class LocationCrossAttention(nn.Module):
  """The parameters of one decoder layer's cross-attention (any variant, H heads),
  and its encoder side. Calling it returns the layer's `CrossInvariants`."""
  variant: Variant
  dim: int
  num_heads: int
  head_dim: int
  qk_dim: int
  init_scheme: str = 'library'
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self, encoded: Array, encoded_cls: Array, lengths: Array) -> CrossInvariants:
    """encoded: [B, S, D]; encoded_cls: [B, D] (e at START); lengths: [B] valid positions."""
    variant, scheme, heads, pd = self.variant, self.init_scheme, self.num_heads, self.param_dtype
    encoded = as_dtype(jnp.asarray(encoded), self.dtype)
    gate_dtype = attention.at_least_float32(self.dtype)
    if variant.direction_mixing:                                           # Eq. 17-18
      # f_dir starts at 0 (alpha_dir = 1/2 for every input): e_cls here is a
      # LayerNorm output (unit-variance entries), so a Glorot f_dir gives
      # 5 f_dir(e_cls) a standard deviation of about 7 and alpha_dir saturates at 0
      # or 1 (reading backwards or forwards) before training starts.
      gate = nn.Dense(1, dtype=self.dtype, param_dtype=pd, name='direction',
                      kernel_init=nn.initializers.zeros_init(),
                      bias_init=nn.initializers.zeros_init())
      alpha = attention.direction_gate(as_dtype(gate(encoded_cls)[:, 0], gate_dtype))
      encoded = attention.direction_mixing(encoded, lengths, alpha)
    else:
      alpha = jnp.ones(encoded.shape[:1], gate_dtype)
    dims = attention.Dims(model=self.dim, qk=self.qk_dim, encoded=encoded.shape[-1])
    raw = {p.name: self.param(p.name, _per_head(attention.initializer(p, scheme, dims), heads),
                              (heads,) + tuple(p.shape(dims)), pd)
           for p in variant.param_defs() if p.name != 'out'}
    # f_o (Eq. 2) of head h: its slice W_o^h [K, D] of the multi-head output projection.
    raw['out'] = self.param('out', nn.initializers.glorot_uniform(in_axis=(0, 1), out_axis=2),
                            (heads, self.head_dim, self.dim), pd)
    value_kernel = self.param('value', nn.initializers.glorot_uniform(in_axis=0,
                                                                      out_axis=(1, 2)),
                              (encoded.shape[-1], heads, self.head_dim), pd)
    values = jnp.einsum('bsd,dhk->hbsk', encoded, as_dtype(value_kernel, self.dtype))
    kernels = kernel_variant(variant)
    params = jax.vmap(functools.partial(attention.fold_params, kernels, dtype=self.dtype))(raw)
    memory = jax.vmap(lambda p, v: attention.make_memory(kernels, p, encoded, v, lengths),
                      out_axes=AttentionMemory(0, 0, None, None, None))(params, values)
    return CrossInvariants(params, memory, alpha)


# --------------------------------------------------------------------------
# Parameter holders (arrays only; the computation is the pure functions above).
# --------------------------------------------------------------------------
class LayerNormParams(nn.Module):
  dim: int
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self) -> Tuple[Array, Array]:
    return (self.param('scale', nn.initializers.ones_init(), (self.dim,), self.param_dtype),
            self.param('bias', nn.initializers.zeros_init(), (self.dim,), self.param_dtype))


class SelfAttentionParams(nn.Module):
  dim: int
  num_heads: int
  head_dim: int
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self) -> SelfAttentionArrays:
    shape = (self.dim, self.num_heads, self.head_dim)
    qkv = nn.initializers.glorot_uniform(in_axis=0, out_axis=(1, 2))
    out = nn.initializers.glorot_uniform(in_axis=(0, 1), out_axis=2)
    return SelfAttentionArrays(
        self.param('query', qkv, shape, self.param_dtype),
        self.param('key', qkv, shape, self.param_dtype),
        self.param('value', qkv, shape, self.param_dtype),
        self.param('out', out, (self.num_heads, self.head_dim, self.dim), self.param_dtype))


class MLPParams(nn.Module):
  dim: int
  mlp_dim: int
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self) -> MLPArrays:
    glorot, zeros, pd = nn.initializers.glorot_uniform(), nn.initializers.zeros_init(), \
        self.param_dtype
    return MLPArrays(self.param('w_in', glorot, (self.dim, self.mlp_dim), pd),
                     self.param('b_in', zeros, (self.mlp_dim,), pd),
                     self.param('w_out', glorot, (self.mlp_dim, self.dim), pd),
                     self.param('b_out', zeros, (self.dim,), pd))


class DecodeCache(NamedTuple):
  """The step-by-step decoder's state.

  keys, values: per decoder layer, the self-attention cache: keys [B, H, K, T_max],
    values [B, H, T_max, K] (`self_attention_step`);
  location: per decoder layer, `attention.AttentionCarry` with pa_{t-1} [H, B]
    per head and the step index [];
  t: [] int, the 0-based index of the next step.
  """
  keys: Tuple[Array, ...]
  values: Tuple[Array, ...]
  location: Tuple[AttentionCarry, ...]
  t: Array


class _Decoder(NamedTuple):
  """Everything the decoder reads, as arrays (closed over by the loops)."""
  embedding: Array          # [V, D], computation dtype
  vocab_bias: Array         # [V], logits dtype
  layers: Tuple[DecoderLayerArrays, ...]
  cross: Tuple[CrossInvariants, ...]
  final_norm: Tuple[Array, Array]
  positions: StackPositions  # the decoder's, for all its steps


class Transformer(nn.Module):
  """Pre-LN Transformer encoder-decoder with one cross-attention variant.

  The interface mirrors `gru.Seq2Seq` (vocab_size, variant, pad/sos/eos ids,
  dropout_rate, min_sigma, init_scheme, dtype, param_dtype; `__call__` and
  `greedy` return `decoding.DecodeOutput`). Sizes: num_layers decoder layers
  (and encoder layers unless num_encoder_layers), num_heads heads of width
  model_dim / num_heads, mlp_dim MLP units; qk_dim: the cross-attention's
  per-head query/key width Q (None: the head width). positions: a name of
  `POSITIONS` (`positions.SCHEMES`); max_positions: the learned scheme's table rows M;
  randomized_max_length: the randomized schemes' range L.

  DecodeOutput.attention [B, T, S]: the last decoder layer's weights averaged
  over its heads, mapped to input positions for direction-mixing variants
  (`attention.input_attention`). aux: 'mu', 'sigma', 'step', 'mix' [B, T, L, H]
  where the variant has them (e_dir units), 'direction' [B] (the last layer's
  alpha_dir), 'layer_direction' [B, L], 'layer_attention' [B, T, L, H, S] (every
  layer's and head's weights over the memory, e_dir positions).
  """
  vocab_size: int
  variant: Variant
  # The sizes have no defaults here: the one default size is `config_defaults` (and
  # the shared config.hidden_dim), built by `build`.
  num_layers: int
  num_heads: int
  model_dim: int
  mlp_dim: int
  num_encoder_layers: Optional[int] = None    # None: num_layers
  qk_dim: Optional[int] = None                 # None: model_dim // num_heads
  positions: str = 'sinusoidal'                # a member of POSITIONS
  max_positions: int = position_schemes.MAX_POSITIONS
  randomized_max_length: int = position_schemes.RANDOMIZED_MAX_LENGTH
  dropout_rate: float = 0.1
  min_sigma: float = attention.MIN_SIGMA
  pad_id: int = 0
  sos_id: int = 1
  eos_id: int = 2
  init_scheme: str = 'library'                 # for the cross-attention's arrays
  dtype: Optional[DType] = None                # computation dtype; None: the parameters'
  param_dtype: DType = jnp.float32

  def setup(self):
    d, pd = self.model_dim, self.param_dtype
    if d % self.num_heads:
      raise errors.MonolocError(f'Transformer: model_dim={d} is not a multiple of '
                                f'num_heads={self.num_heads}')
    self.scheme = position_schemes.scheme(self.positions)
    head_dim = d // self.num_heads
    embed_init = nn.initializers.normal(stddev=d ** -0.5)
    self.embedding = self.param('embedding', embed_init, (self.vocab_size, d), pd)
    self.compute_dtype = jnp.dtype(self.embedding.dtype if self.dtype is None else self.dtype)
    self.start = self.param('start', embed_init, (d,), pd)
    self.end = self.param('end', embed_init, (d,), pd)
    self.vocab_bias = self.param('vocab_bias', nn.initializers.zeros_init(),
                                 (self.vocab_size,), pd)
    n_enc = self.num_layers if self.num_encoder_layers is None else self.num_encoder_layers
    attn = lambda: SelfAttentionParams(d, self.num_heads, head_dim, pd)
    self.encoder_layers = [
        dict(ln_attn=LayerNormParams(d, pd), attn=attn(), ln_mlp=LayerNormParams(d, pd),
             mlp=MLPParams(d, self.mlp_dim, pd)) for _ in range(n_enc)]
    self.encoder_norm = LayerNormParams(d, pd)
    self.decoder_layers = [
        dict(ln_self=LayerNormParams(d, pd), attn=attn(), ln_cross=LayerNormParams(d, pd),
             ln_mlp=LayerNormParams(d, pd), mlp=MLPParams(d, self.mlp_dim, pd))
        for _ in range(self.num_layers)]
    self.cross_attention = [
        LocationCrossAttention(self.variant, d, self.num_heads, head_dim,
                               self.qk_dim or head_dim, self.init_scheme, self.compute_dtype, pd)
        for _ in range(self.num_layers)]
    self.decoder_norm = LayerNormParams(d, pd)
    self.dropout = nn.Dropout(self.dropout_rate)
    # The scheme's learned tables, one per stack ('encoder_positions',
    # 'decoder_positions'; none for most schemes). Created last: the arrays above draw
    # their initial values as they did before these schemes existed.
    sizes = position_schemes.Sizes(d, self.num_heads, self.max_positions)
    self.position_tables = tuple(
        None if self.scheme.table_shape is None else
        self.param(f'{stack}_positions', self.scheme.table_init,
                   self.scheme.table_shape(sizes), pd)
        for stack in ('encoder', 'decoder'))

  @property
  def location_dtype(self) -> DType:
    """The dtype of the location recurrence, the softmaxes and the logits."""
    return attention.at_least_float32(self.compute_dtype)

  def _cast(self, tree):
    """Float arrays of `tree` in the computation dtype (LayerNorm arrays excepted by callers)."""
    return jax.tree_util.tree_map(lambda a: as_dtype(jnp.asarray(a), self.compute_dtype), tree)

  def _embed(self, tokens: Array) -> Array:
    """tokens [...] -> E[tokens] sqrt(D) [..., D]."""
    table = as_dtype(self.embedding, self.compute_dtype)
    return jnp.take(table, tokens, axis=0) * math.sqrt(self.model_dim)

  def _draw_key(self, stack: int, train: bool) -> Array:
    """The key of a randomized scheme's draw for `stack` (0 the encoder, 1 the decoder):
    the 'positions' rng stream when the caller gives one; else, in training, the
    'dropout' stream (train.py gives only that one: a new draw at every update);
    else (evaluation) the fixed fold_in(PRNGKey(EVAL_POSITIONS_SEED), stack), so an
    evaluation is deterministic (each row still draws its own positions)."""
    if self.has_rng('positions'):
      return self.make_rng('positions')
    if train and self.has_rng('dropout'):
      return self.make_rng('dropout')
    return jax.random.fold_in(jax.random.PRNGKey(EVAL_POSITIONS_SEED), stack)

  def _stack_positions(self, stack: int, batch: int, length: int,
                       train: bool) -> StackPositions:
    """The positions of self-attention stack `stack` (0 the encoder, 1 the causal
    decoder) over `length` slots, for a batch of `batch` rows: one draw per sequence
    (randomized schemes), made before any loop over the slots."""
    key = self._draw_key(stack, train) if self.scheme.randomized else None
    index = position_schemes.stack_index(self.scheme, batch, length, key,
                                         self.randomized_max_length)
    return position_schemes.prepare(self.scheme, index, self.position_tables[stack],
                                    causal=stack == 1, dim=self.model_dim,
                                    heads=self.num_heads, dtype=self.compute_dtype)

  # ------------------------------------------------------------------ encoder
  def encode(self, src: Array, src_lengths: Array, train: bool = False):
    """src [B, N] ids, src_lengths [B] -> (e [B, S, D], lengths [B] = src_lengths + 2,
    per decoder layer its `CrossInvariants`)."""
    batch, n = src.shape
    dtype = self.compute_dtype
    scale = math.sqrt(self.model_dim)
    pos = jnp.arange(n + 2)[None, :, None]
    start = jnp.broadcast_to(as_dtype(self.start, dtype) * scale, (batch, 1, self.model_dim))
    x = jnp.concatenate([start, self._embed(src), jnp.zeros((batch, 1, self.model_dim), dtype)],
                        axis=1)
    end_pos = (src_lengths + 1)[:, None, None]
    x = jnp.where(pos == end_pos, as_dtype(self.end, dtype) * scale,
                  jnp.where(pos > end_pos, jnp.zeros((), dtype), x))
    lengths = src_lengths + 2                                              # s
    pos = self._stack_positions(0, batch, n + 2, train)
    if pos.absolute is not None:
      x = x + pos.absolute
    x = self.dropout(x, deterministic=not train)
    valid = jnp.arange(n + 2)[None, :] < lengths[:, None]                  # [B, S]
    mask = jnp.broadcast_to(valid[:, None, :], (batch, n + 2, n + 2))     # query i reads key j
    for layer in self.encoder_layers:
      h = layer_norm(x, *layer['ln_attn']())
      x = x + self.dropout(self_attention(self._cast(layer['attn']()), h, mask, pos),
                           deterministic=not train)
      h = layer_norm(x, *layer['ln_mlp']())
      x = x + self.dropout(mlp(self._cast(layer['mlp']()), h), deterministic=not train)
    encoded = layer_norm(x, *self.encoder_norm())
    cls = encoded[:, 0]                                                    # e at START
    cross = tuple(c(encoded, cls, lengths) for c in self.cross_attention)
    return encoded, lengths, cross

  def build(self, src: Array, src_lengths: Array) -> None:
    """Creates every parameter without running the decoder: `model.init(key, src,
    src_lengths, method=model.build)` gives the parameters that initialising through
    `__call__` gives (Flax draws each from its own path), for a fraction of the
    tracing and compilation."""
    _, _, cross = self.encode(src, src_lengths, False)
    self._decoder(cross, src.shape[0], 1, False)

  def _decoder(self, cross: Sequence[CrossInvariants], batch: int, steps: int,
               train: bool) -> _Decoder:
    """The decoder's arrays, its positions for `steps` steps of `batch` rows included."""
    layers = tuple(DecoderLayerArrays(layer['ln_self'](), self._cast(layer['attn']()),
                                      layer['ln_cross'](), layer['ln_mlp'](),
                                      self._cast(layer['mlp']()))
                   for layer in self.decoder_layers)
    return _Decoder(as_dtype(self.embedding, self.compute_dtype),
                    as_dtype(self.vocab_bias, self.location_dtype), layers, tuple(cross),
                    self.decoder_norm(), self._stack_positions(1, batch, steps, train))

  def _logits(self, dec: _Decoder, x: Array) -> Array:
    """x [..., D] -> logits [..., V] (tied output layer) in `location_dtype`."""
    h = layer_norm(x, *dec.final_norm)
    return jnp.einsum('...d,vd->...v', h, dec.embedding,
                      preferred_element_type=self.location_dtype) + dec.vocab_bias

  def _output(self, logits, tokens, weights: Array, aux: Dict[str, Array],
              cross: Sequence[CrossInvariants], lengths: Array) -> DecodeOutput:
    """weights [B, T, L, H, S], aux {name: [B, T, L, H]} -> DecodeOutput."""
    weights = as_dtype(weights, self.location_dtype)
    last = jnp.mean(weights[:, :, -1], axis=2)                             # [B, T, S]
    alphas = jnp.stack([c.alpha for c in cross], axis=1)                   # [B, L]
    if self.variant.direction_mixing:
      last = attention.input_attention(last, alphas[:, -1], lengths)
    aux = dict(aux)
    aux.update(direction=alphas[:, -1], layer_direction=alphas, layer_attention=weights)
    return DecodeOutput(logits, tokens, last, aux)

  # ------------------------------------------------------------------ parallel
  def __call__(self, src: Array, src_lengths: Array, tgt_in: Array,
               train: bool = False) -> DecodeOutput:
    """Teacher-forced pass, all steps at once. tgt_in [B, T] = `<sos> y_1 .. y_{T-1}`;
    returns logits [B, T, V] and the attention of every layer and head."""
    _, lengths, cross = self.encode(src, src_lengths, train)
    steps = tgt_in.shape[1]
    dec = self._decoder(cross, tgt_in.shape[0], steps, train)
    variant = kernel_variant(self.variant)
    x = jnp.take(dec.embedding, tgt_in, axis=0) * math.sqrt(self.model_dim)
    if dec.positions.absolute is not None:
      x = x + dec.positions.absolute
    x = self.dropout(x, deterministic=not train)
    causal = jnp.tril(jnp.ones((steps, steps), bool))[None]
    weights, aux = [], []
    for layer, cross_l in zip(dec.layers, dec.cross):
      h = layer_norm(x, *layer.ln_self)
      x = x + self.dropout(self_attention(layer.attn, h, causal, dec.positions),
                           deterministic=not train)
      query = layer_norm(x, *layer.ln_cross)
      o, w, a = cross_attention_parallel(variant, cross_l, query, self.min_sigma)
      x = x + self.dropout(o, deterministic=not train)
      h = layer_norm(x, *layer.ln_mlp)
      x = x + self.dropout(mlp(layer.mlp, h), deterministic=not train)
      weights.append(w)
      aux.append(a)
    aux = {k: jnp.stack([a[k] for a in aux], axis=2) for k in aux[0]}
    return self._output(self._logits(dec, x), None, jnp.stack(weights, axis=2), aux, cross,
                        lengths)

  # ------------------------------------------------------------------ step by step
  def init_cache(self, batch: int, max_steps: int) -> DecodeCache:
    """An empty `DecodeCache` for `max_steps` steps."""
    head_dim = self.model_dim // self.num_heads
    keys = jnp.zeros((batch, self.num_heads, head_dim, max_steps), self.compute_dtype)
    values = jnp.zeros((batch, self.num_heads, max_steps, head_dim), self.compute_dtype)
    carry = attention.initial_carry(batch, self.location_dtype)
    location = AttentionCarry(jnp.broadcast_to(carry.pa_prev, (self.num_heads, batch)),
                              carry.t)
    return DecodeCache((keys,) * self.num_layers, (values,) * self.num_layers,
                       (location,) * self.num_layers, jnp.zeros((), jnp.int32))

  def _step(self, dec: _Decoder, cache: DecodeCache, token: Array):
    """One decoder step (pure in its arrays). token [B] the previous token.
    Returns (cache, (logits [B, V], weights [B, L, H, S], aux {name: [B, L, H]}))."""
    variant = kernel_variant(self.variant)
    t = cache.t
    x = jnp.take(dec.embedding, token, axis=0) * math.sqrt(self.model_dim)
    if dec.positions.absolute is not None:
      x = x + position_schemes.absolute_at(self.scheme, dec.positions, t,
                                           self.position_tables[1], self.model_dim, x.dtype)
    keys, values, location, weights, aux = [], [], [], [], []
    for i, (layer, cross_l) in enumerate(zip(dec.layers, dec.cross)):
      h = layer_norm(x, *layer.ln_self)
      o, k, v = self_attention_step(layer.attn, h, cache.keys[i], cache.values[i], t,
                                    dec.positions)
      x = x + o
      query = layer_norm(x, *layer.ln_cross)
      o, w, carry, a = cross_attention_step(variant, cross_l, query, cache.location[i],
                                            self.min_sigma)
      x = x + o
      x = x + mlp(layer.mlp, layer_norm(x, *layer.ln_mlp))
      keys.append(k)
      values.append(v)
      location.append(carry)
      weights.append(w)
      aux.append(a)
    aux = {k: jnp.stack([a[k] for a in aux], axis=1) for k in aux[0]}
    cache = DecodeCache(tuple(keys), tuple(values), tuple(location), t + 1)
    return cache, (self._logits(dec, x), jnp.stack(weights, axis=1), aux)

  def decode_step(self, cross: Sequence[CrossInvariants], cache: DecodeCache,
                  token: Array):
    """One cached decoder step for external loops: cross from `encode`, cache from
    `init_cache`, token [B]. Returns (cache, (logits [B, V], weights [B, L, H, S],
    aux {name: [B, L, H]})). The decoder's positions are those of the cache's T_max
    steps; a randomized scheme's draw is the same at every call while the rngs passed
    are (none, or the same 'positions' key)."""
    batch, _, _, steps = cache.keys[0].shape
    return self._step(self._decoder(cross, batch, steps, False), cache, token)

  def teacher_forced_steps(self, src: Array, src_lengths: Array,
                           tgt_in: Array) -> DecodeOutput:
    """The teacher-forced pass run step by step (the gold tokens fed through the
    cached step, `lax.scan`): the same function as `__call__` (train=False)."""
    _, lengths, cross = self.encode(src, src_lengths, False)
    dec = self._decoder(cross, src.shape[0], tgt_in.shape[1], False)
    cache = self.init_cache(src.shape[0], tgt_in.shape[1])
    _, (logits, weights, aux) = jax.lax.scan(functools.partial(self._step, dec), cache,
                                             tgt_in.T)
    swap = lambda a: jnp.swapaxes(a, 0, 1)
    return self._output(swap(logits), None, swap(weights),
                        {k: swap(v) for k, v in aux.items()}, cross, lengths)

  def greedy(self, src: Array, src_lengths: Array, max_steps: int) -> DecodeOutput:
    """Greedy decoding, argmax fed back, for at most `max_steps` steps
    (`decoding.greedy_loop` over the cached step, as `gru.Seq2Seq.greedy`: it
    stops once every row has emitted `<eos>`; finished rows output `<pad>`).
    Returns tokens [B, max_steps] and the attention/aux of every step (zeros after
    the loop stopped)."""
    _, lengths, cross = self.encode(src, src_lengths, False)
    # The decoder's positions for all max_steps steps, drawn once before the loop:
    # step t reads slot t of the draw that teacher forcing over max_steps reads.
    step = functools.partial(self._step, self._decoder(cross, src.shape[0], max_steps, False))
    cache0 = self.init_cache(src.shape[0], max_steps)
    tokens, weights, aux = greedy_loop(step, cache0, src.shape[0], max_steps, self.sos_id,
                                       self.pad_id, self.eos_id)
    swap = lambda a: jnp.swapaxes(a, 0, 1)
    return self._output(None, tokens.T, swap(weights), {k: swap(v) for k, v in aux.items()},
                        cross, lengths)


# ---------------------------------------------------------------------------
# The backbone's entry in `backbones.BACKBONES`: its config group, its checks,
# its builder and its FLOP count.
# ---------------------------------------------------------------------------
def config_defaults() -> ml_collections.ConfigDict:
  """`config.transformer`: the Transformer backbone's own fields (its width is the shared
  config.hidden_dim, its dropout config.dropout; qk_dim 0 = the head width)."""
  c = ml_collections.ConfigDict()
  c.layers = 2               # encoder and decoder layers
  c.heads = 4                # attention heads (must divide hidden_dim)
  c.mlp_dim = 512            # MLP hidden units
  c.positions = 'sinusoidal'  # self-attention positions (backbones/positions.py POSITIONS)
  c.max_positions = position_schemes.MAX_POSITIONS    # 'learned': table rows (clipped past)
  c.randomized_max_length = position_schemes.RANDOMIZED_MAX_LENGTH  # randomized: range L
  return c


def validate(config) -> None:
  """Checks `config.transformer` (heads must divide config.hidden_dim when the
  Transformer is the backbone); raises a one-line MonolocError."""
  t = config.transformer
  divides = config.backbone != 'transformer' or config.hidden_dim % t.heads == 0
  for name, ok, want in (
      ('layers', t.layers >= 1, 'an integer >= 1'),
      ('heads', t.heads >= 1 and divides,
       f'an integer >= 1 that divides hidden_dim={config.hidden_dim}'),
      ('mlp_dim', t.mlp_dim >= 1, 'an integer >= 1'),
      ('max_positions', t.max_positions >= 1, 'an integer >= 1'),
      ('randomized_max_length', t.randomized_max_length >= 1, 'an integer >= 1')):
    if not ok:
      raise errors.MonolocError(f'bad value for config.transformer.{name}: {t[name]!r}; '
                                f'it must be {want}')
  if t.positions not in POSITIONS:
    raise errors.MonolocError(f'bad value for config.transformer.positions: {t.positions!r}; '
                              f"valid: {', '.join(POSITIONS)}")


def build(config, vocab, variant: Variant, dtype: DType) -> Transformer:
  """The pre-LN Transformer of `config`: width config.hidden_dim, config.transformer's
  layers / heads / mlp_dim / positions (max_positions, randomized_max_length); qk_dim 0 =
  the head width."""
  t = config.transformer
  return Transformer(
      dtype=dtype, param_dtype=attention.at_least_float32(dtype),
      vocab_size=len(vocab), variant=variant, init_scheme=config.init_scheme,
      num_layers=t.layers, num_heads=t.heads, model_dim=config.hidden_dim, mlp_dim=t.mlp_dim,
      qk_dim=config.qk_dim or None, positions=t.positions, max_positions=t.max_positions,
      randomized_max_length=t.randomized_max_length, dropout_rate=config.dropout,
      min_sigma=config.min_sigma, pad_id=vocab.pad_id, sos_id=vocab.sos_id,
      eos_id=vocab.eos_id)


def flops_per_sample(n_src: int, n_tgt: int, vocab: int, d: int = 128, heads: int = 4,
                     layers: int = 2, mlp_dim: int = 512, qk_dim: int = 0,
                     spec: Optional[Variant] = None) -> float:
  """Forward FLOPs (2 per multiply-add) of one sample of the Transformer backbone
  (`Transformer`) with n_src tokens and n_tgt decoder steps (incl. `<eos>`).

  With S = n_src + 2 encoder positions, T = n_tgt, D = d, H heads of width
  K = D / H, Q = qk_dim or K (the cross-attention's query/key width per head),
  F = mlp_dim, L = layers (encoder and decoder each), V = vocab:
    encoder layer:  8 S D^2 (q, k, v, out) + 4 S^2 D (scores, weighted sum) + 4 S D F (MLP);
    decoder layer:  8 T D^2 + 4 T^2 D (causal self-attention, all T x T scores as the
                    parallel form computes them) + 4 T D F (MLP)
                    + cross-attention: 2 S D^2 (values) + 2 T D^2 (out)
                    + 2 T S D (weighted sum of the values)
                    + with a score branch: 2 S D H Q (keys)
                      + T H scores.step_flops(Dims(D, Q, D), S) (query and scores, per head)
                    + with a location rule: T H (2 D Q + 8 Q + 10 S) (l_t, sigma / rho / mix
                      read-outs, the Gaussian, per head: the GRU count's terms per head);
    output layer:   2 T D V (tied).
  Total: L (encoder layer + decoder layer) + output layer. LayerNorms, softmaxes,
  biases and the embedding gather are left out, as in the GRU count.
  """
  s, t, k = n_src + 2, n_tgt, d // heads
  q = qk_dim or k
  enc = 8 * s * d * d + 4 * s * s * d + 4 * s * d * mlp_dim
  dec = 8 * t * d * d + 4 * t * t * d + 4 * t * d * mlp_dim
  dec += 2 * s * d * d + 2 * t * d * d + 2 * t * s * d
  if spec is not None and spec.scores is not None:
    dec += 2 * s * d * heads * q
    dec += t * heads * spec.scores.step_flops(attention.Dims(d, q, d), s)
  if spec is not None and spec.location is not None:
    dec += t * heads * (2 * d * q + 8 * q + 10 * s)
  return float(layers * (enc + dec) + 2 * t * d * vocab)


def config_flops(n_src: int, n_tgt: int, vocab: int, config, spec: Optional[Variant]) -> float:
  """`flops_per_sample` at config's size."""
  t = config.transformer
  return flops_per_sample(n_src, n_tgt, vocab, config.hidden_dim, t.heads, t.layers,
                          t.mlp_dim, config.qk_dim, spec)
