"""The paper's backbone (§3 and App. E): BiGRU encoder, GRU decoder with cross-attention
(`Seq2Seq`, config.backbone = 'gru'; its config group: `config.gru`, `config_defaults`).

Modules only declare parameters and precompute sequence-level projections; the
per-step work is the pure `attention.attention_step` and `rnn.gru_cell`, run
inside `jax.lax.scan`. Two matrix products are hoisted out of the decoder loop:
  * the embedding half of the decoder GRU's input projection becomes a
    [V, 3D] table (E W_ie + b_i) indexed by the previous token;
  * the tied output layer E (W_out h + b_out) + b_vocab becomes one [D, V]
    matrix W_out E^T and a [V] bias.
Both are exact rewrites. `attention.fold_params` does the attention's own folds.

Shapes: B batch, N source tokens, S = N + 2 encoder positions (START and END
added), T decoder steps, V vocabulary, E embedding width, D model width.

Dtypes (Flax's convention): `param_dtype` is the parameters' dtype, `dtype` the
computation's. The products, the encoder, the values and the attention output
run in `dtype`; the decoder's recurrent state h_t and its GRU gates, the location
recurrence (pa_t, mu, sigma, the Gaussian), the softmaxes, the direction and mix
gates and the logits run in at least float32 (`attention.at_least_float32(dtype)`):
a bfloat16 model has a float32 decoder state and float32 logits (the policy and
the measured bfloat16-against-float32 figures: BUILD_NOTES §1.3, "Dtypes").
"""

import functools
import math
from typing import Any, NamedTuple, Optional, Sequence, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from monoloc_jax import attention
from monoloc_jax import errors
from monoloc_jax import rnn
from monoloc_jax import tapped_scan
from monoloc_jax.backbones.decoding import DecodeOutput, as_dtype, greedy_loop

Array = jax.Array

__all__ = ['Seq2Seq', 'CrossAttention', 'DecoderInvariants', 'DecoderConstants', 'decoder_step',
           'DECODER_INITS', 'DECODER_BACKWARDS', 'config_defaults', 'validate', 'build',
           'flops_per_sample']

DType = Any

glorot = nn.initializers.glorot_uniform()
zeros = nn.initializers.zeros_init()
# PyTorch's Embedding under Kaiming-normal (fan-out = vocabulary axis).
embedding_init = nn.initializers.variance_scaling(2.0, 'fan_in', 'normal', in_axis=-2,
                                                  out_axis=-1)

# config.init_scheme: 'library' (this library's initialisers) or 'authors_code'
# (every array drawn as the authors' code draws its counterpart). The attention's
# arrays carry both in their `attention.ParamDef`s; the model's own arrays whose
# init differs are below, as {array: {scheme: fn(fan_in) -> initialiser}}. Every
# other array is drawn alike under both (BUILD_NOTES §2): the embedding (their
# kaiming_normal_(mode='fan_out'): N(0, 2/V)), START/END (zeros), the GRUs (torch's
# U(+-1/sqrt(H))), out_kernel (their out_linear1 weight, xavier), the value path's
# kernels (xavier) and the vocabulary bias (zeros).
_MODEL_INITS = {
    # out_linear1 = nn.Linear(D, E): its bias keeps torch's default U(+-1/sqrt(D)).
    'out_bias': {'library': lambda fan_in: zeros,
                 'authors_code': attention.torch_linear_init},
    # dir_gater = nn.Linear(D, 1) with torch's defaults, weight and bias alike.
    'direction_kernel': {'library': lambda fan_in: glorot,
                         'authors_code': attention.torch_linear_init},
    'direction_bias': {'library': lambda fan_in: zeros,
                       'authors_code': attention.torch_linear_init},
    # value_transform = nn.Linear(D_enc, value_dim): xavier weight (as ours), default bias.
    'inter_value_bias': {'library': lambda fan_in: zeros,
                         'authors_code': attention.torch_linear_init},
}


def model_init(name: str, scheme: str, fan_in: int):
  """The initialiser of the model's array `name` (a key of `_MODEL_INITS`) under `scheme`."""
  return _MODEL_INITS[name][scheme](fan_in)


def _torch_gru_init(hidden: int):
  """PyTorch's GRU default: U(-1/sqrt(H), 1/sqrt(H)) for weights and biases."""
  bound = 1.0 / math.sqrt(hidden)

  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)
  return init


class GRUParams(nn.Module):
  """Parameters of one GRU direction/layer: input [in, 3H] + [3H], hidden [H, 3H] + [3H],
  in `param_dtype` (callers cast them to the computation dtype)."""
  features_in: int
  hidden: int
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self):
    init = _torch_gru_init(self.hidden)
    w_i = self.param('w_i', init, (self.features_in, 3 * self.hidden), self.param_dtype)
    b_i = self.param('b_i', init, (3 * self.hidden,), self.param_dtype)
    w_h = self.param('w_h', init, (self.hidden, 3 * self.hidden), self.param_dtype)
    b_h = self.param('b_h', init, (3 * self.hidden,), self.param_dtype)
    return w_i, b_i, w_h, b_h


def _cast_all(arrays, dtype: DType):
  return tuple(jnp.asarray(a, dtype) for a in arrays)


class Encoder(nn.Module):
  """Stacked bidirectional GRU over `START x_1..x_n END` (§3 of the paper).

  Returns the top layer's outputs e [B, S, D] and, per layer, the final state
  [B, D] (forward after the last valid position ++ backward after position 0).
  """
  hidden: int            # D; each direction has D / 2 units
  num_layers: int = 1
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self, x: Array, lengths: Array,
               ids: Optional[Array] = None) -> Tuple[Array, Tuple[Array, ...]]:
    """x: [B, S, E]; lengths: [B]. Outputs in `dtype`.

    Or x: a table [R, E] of input rows and ids: [B, S] row indices; the first
    layer then projects the R rows once and gathers, (x W + b)[ids] =
    x[ids] W + b (the decoder's token table does the same).
    """
    finals = []
    per_dir = self.hidden // 2
    x = jnp.asarray(x, self.dtype)
    for layer in range(self.num_layers):
      fw_i, fb_i, fw_h, fb_h = _cast_all(GRUParams(
          x.shape[-1], per_dir, self.param_dtype, name=f'fwd_{layer}')(), self.dtype)
      bw_i, bb_i, bw_h, bb_h = _cast_all(GRUParams(
          x.shape[-1], per_dir, self.param_dtype, name=f'bwd_{layer}')(), self.dtype)
      x_f, x_b = x @ fw_i + fb_i, x @ bw_i + bb_i
      if layer == 0 and ids is not None:
        # Gather straight into the scan's layout: per gate, time-major [S, B, H],
        # the backward direction's rows already reversed.
        ids_rev = attention.reverse_valid(ids, lengths)
        gather = lambda table, rows: tuple(jnp.take(t, rows.T, axis=0)
                                           for t in rnn.split_gates(table, per_dir))
        x, final = rnn.bidirectional_gru_time_major(
            gather(x_f, ids), gather(x_b, ids_rev), lengths, (fw_h, fb_h), (bw_h, bb_h))
      else:
        x, final = rnn.bidirectional_gru(x_f, x_b, lengths, (fw_h, fb_h), (bw_h, bb_h))
      finals.append(final)
    return x, tuple(finals)


def input_row_ids(src: Array, src_lengths: Array, vocab_size: int) -> Array:
  """The encoder input START x_1..x_n END 0.. as row ids [B, N + 2] of the table
  [embeddings (V); START; END; zeros]: position 0 -> V, 1..n -> the tokens,
  n + 1 -> V + 1, after it -> V + 2 (src's own padding is never read)."""
  batch, n = src.shape
  pos = jnp.arange(n + 2)[None, :]
  shifted = jnp.concatenate([jnp.zeros((batch, 1), src.dtype), src,
                             jnp.zeros((batch, 1), src.dtype)], 1)
  end = (src_lengths + 1)[:, None]
  return jnp.where(pos == 0, vocab_size,
                   jnp.where(pos < end, shifted,
                             jnp.where(pos == end, vocab_size + 1, vocab_size + 2)))


class CrossAttention(nn.Module):
  """Holds the parameters of one attention variant and prepares its encoder side.

  Calling it returns (memory, params, alpha_dir): the per-sequence
  `attention.AttentionMemory`, the folded `attention.AttentionParams` that
  `attention.attention_step` reads at every decoder step, and the direction
  gate alpha_dir [B] (ones when the variant has no direction mixing).
  """
  variant: attention.Variant
  dim: int = 128
  value_dim: int = 128
  qk_dim: Optional[int] = None      # query/key width; None = dim
  init_scheme: str = 'library'      # a key of attention.INIT_SCHEMES
  dtype: DType = jnp.float32        # computation dtype
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self, encoded: Array, encoded_cls: Array, lengths: Array,
               out_next: Optional[Array] = None):
    """encoded: [B, S, D]; encoded_cls: [B, D]; lengths: [B]; out_next: [D, M], a
    linear map the caller applies to o_t (folded into f_o, see `attention.fold_params`).

    Direction mixing happens here, once per sequence: keys and values are computed
    from e_dir (`attention.attention_step` does not mix directions)."""
    variant, scheme = self.variant, self.init_scheme
    dense = functools.partial(nn.Dense, dtype=self.dtype, param_dtype=self.param_dtype)
    encoded = jnp.asarray(encoded, self.dtype)
    batch = encoded.shape[0]
    gate_dtype = attention.at_least_float32(self.dtype)
    if variant.direction_mixing:                                           # Eq. 17-18
      fan_in = encoded_cls.shape[-1]
      gate = dense(1, kernel_init=model_init('direction_kernel', scheme, fan_in),
                   bias_init=model_init('direction_bias', scheme, fan_in), name='direction')
      alpha = attention.direction_gate(gate(encoded_cls)[:, 0].astype(gate_dtype))
      encoded = attention.direction_mixing(encoded, lengths, alpha)
    else:
      alpha = jnp.ones((batch,), gate_dtype)

    inter = nn.leaky_relu(dense(
        self.value_dim, kernel_init=glorot,
        bias_init=model_init('inter_value_bias', scheme, encoded.shape[-1]),
        name='inter_value')(encoded))
    values = dense(self.dim, use_bias=False, kernel_init=glorot, name='value')(inter)

    dims = attention.Dims(model=self.dim, qk=self.qk_dim or self.dim,
                          encoded=encoded.shape[-1])
    raw = {p.name: self.param(p.name, attention.initializer(p, scheme, dims), p.shape(dims),
                              self.param_dtype)
           for p in variant.param_defs()}
    params = attention.fold_params(variant, raw, out_next, dtype=self.dtype)
    memory = attention.make_memory(variant, params, encoded, values, lengths)
    return memory, params, alpha


def final_states_init(finals: Sequence[Array], num_layers: int) -> Tuple[Array, ...]:
  """Decoder layer i starts from encoder layer i's final state [forward last;
  backward first] (for one layer: e_cls of the paper's §3)."""
  del num_layers
  return tuple(finals)


def backward_states_init(finals: Sequence[Array], num_layers: int) -> Tuple[Array, ...]:
  """The authors' code at the 2-layer CFQ size (`GRUEncoderDecoder2`): every
  decoder layer starts from [backward final state of encoder layer 0; ... of
  layer L-1], each backward state taken after reading back to position 0.
  Defined when that has the decoder's width, i.e. for 2 layers."""
  half = finals[0].shape[-1] // 2
  if len(finals) * half != finals[0].shape[-1]:
    raise ValueError(f"decoder_init 'backward_states' needs 2 layers (got {len(finals)})")
  h0 = jnp.concatenate([f[:, half:] for f in finals], axis=-1)
  return (h0,) * num_layers


# config.decoder_init -> fn(encoder final states per layer, num_layers) -> decoder h0 per layer.
DECODER_INITS = {
    'final_states': final_states_init,
    'backward_states': backward_states_init,
}


class DecoderInvariants(NamedTuple):
  """The decoder loop's differentiated loop invariants (read through the tap).

  keys: [B, S, qk] or None; values: [B, S, D_v]; params: the folded
  `attention.AttentionParams`; layers: per decoder layer (w_i, b_i, w_h, b_h)
  (layer 0 reads its input through `token_table` and params.out instead of
  w_i, b_i); token_table: [V, 3D] = E W_ie + b_i of layer 0.
  """
  keys: Optional[Array]
  values: Array
  params: attention.AttentionParams
  layers: Tuple[Tuple[Array, Array, Array, Array], ...]
  token_table: Array


class DecoderConstants(NamedTuple):
  """Loop invariants without a gradient: mask [B, S] bool, positions [B, S]
  (Eq. 7, from the integer lengths), lengths [B] int."""
  mask: Array
  positions: Array
  lengths: Array


def decoder_step(variant: attention.Variant, min_sigma: float, tap: tapped_scan.Tap,
                 inv: DecoderInvariants, consts: DecoderConstants, state, token: Array):
  """One teacher-forced or greedy decoder step (attention, then the GRU stack).

  state: (hs, carry) with hs one [B, D] state per layer (in at least float32) and
  carry the `attention.AttentionCarry`; token: [B] the previous token.
  Returns (new state, (h [B, D], a [B, S], aux)). Every loop invariant is read
  through `tap` (see `tapped_scan`); the products run in the invariants' dtype
  (the token table's), the states are cast to it for them.
  """
  hs, carry = state
  dtype = inv.token_table.dtype
  memory = attention.AttentionMemory(inv.keys, inv.values, *consts)
  gru_context, weights, carry, aux = attention.attention_step(
      variant, inv.params, memory, hs[-1], carry, min_sigma, tap)
  x_proj = tap(tapped_scan.take_rows, token, inv.token_table) + gru_context
  new_hs = []
  for i, (w_i, b_i, w_h, b_h) in enumerate(inv.layers):
    if i > 0:
      x_proj = tap(attention.affine, as_dtype(new_hs[-1], dtype), (w_i, b_i))
    h_proj = tap(attention.affine, as_dtype(hs[i], dtype), (w_h, b_h))
    new_hs.append(rnn.gru_gates(x_proj, h_proj, hs[i]))
  return (tuple(new_hs), carry), (new_hs[-1], weights, aux)


# config.decoder_backward -> the scan of the teacher-forced decoder, (step, invariants,
# constants, init, xs, unroll) -> (final, ys). Same forward; 'custom' has the
# hand-written backward pass of `tapped_scan`, 'autodiff' is XLA's transpose of the loop.
DECODER_BACKWARDS = {
    'autodiff': tapped_scan.plain_scan,
    'custom': tapped_scan.tapped_scan,
}


class Seq2Seq(nn.Module):
  """BiGRU encoder + GRU decoder with one cross-attention variant.

  Defaults are the paper's small size (App. E: d_e 64, 128 units, 128 value
  units, dropout 0.5). Its CFQ size: num_layers=2, embed_dim=128,
  hidden_dim=256, value_dim=512, qk_dim=128, dropout_rate=0.4.
  init_scheme: how parameters are drawn (a key of attention.INIT_SCHEMES); the sigma bias
  and Eq. 9's normaliser are options of `variant`.
  dtype: the computation dtype (e.g. jnp.bfloat16 on TPU; None, the default:
  the dtype of the parameters applied, as Flax's layers); param_dtype: the
  parameters' (keep float32 for bfloat16 training; float64 for a float64 model,
  which needs jax_enable_x64). The decoder state, the location recurrence, the
  softmaxes and the logits run in at least float32 (see the module docstring).
  """
  vocab_size: int
  variant: attention.Variant
  embed_dim: int = 64
  hidden_dim: int = 128
  value_dim: int = 128
  qk_dim: Optional[int] = None     # query/key width (the paper's head dimension); None = hidden_dim
  num_layers: int = 1
  decoder_init: str = 'final_states'   # a key of DECODER_INITS
  dropout_rate: float = 0.5
  min_sigma: float = attention.MIN_SIGMA
  pad_id: int = 0
  sos_id: int = 1
  eos_id: int = 2
  scan_unroll: int = 1     # decoder time steps per loop iteration (speed only)
  decoder_backward: str = 'autodiff'   # a key of DECODER_BACKWARDS (speed only)
  init_scheme: str = 'library'         # a key of attention.INIT_SCHEMES
  dtype: Optional[DType] = None        # computation dtype; None: the parameters' dtype
  param_dtype: DType = jnp.float32     # parameters' dtype

  def setup(self):
    d, e, pd = self.hidden_dim, self.embed_dim, self.param_dtype
    self.embedding = self.param('embedding', embedding_init, (self.vocab_size, e), pd)
    # Flax's convention: dtype None computes in the dtype of the parameters applied.
    self.compute_dtype = jnp.dtype(self.embedding.dtype if self.dtype is None else self.dtype)
    self.start = self.param('start', zeros, (e,), pd)
    self.end = self.param('end', zeros, (e,), pd)
    self.encoder = Encoder(d, self.num_layers, self.compute_dtype, pd)
    self.dropout = nn.Dropout(self.dropout_rate)
    self.cross_attention = CrossAttention(self.variant, d, self.value_dim, self.qk_dim,
                                          self.init_scheme, self.compute_dtype, pd)
    self.decoder_layers = [GRUParams(e + d if i == 0 else d, d, pd, name=f'decoder_{i}')
                           for i in range(self.num_layers)]
    self.out_kernel = self.param('out_kernel', glorot, (d, e), pd)
    self.out_bias = self.param('out_bias', model_init('out_bias', self.init_scheme, d), (e,),
                               pd)
    self.vocab_bias = self.param('vocab_bias', zeros, (self.vocab_size,), pd)

  @property
  def location_dtype(self) -> DType:
    """The dtype of the location recurrence, the softmaxes and the logits."""
    return attention.at_least_float32(self.compute_dtype)

  # ------------------------------------------------------------------ encoder
  def encode(self, src: Array, src_lengths: Array, train: bool):
    """src [B, N] ids, src_lengths [B] -> (memory, attention params, h0 tuple, alpha).

    f_o (Eq. 2) and the context half W_ic of the first decoder GRU's input
    projection are two linear maps in a row, so the attention params carry
    their product W_o W_ic [D, 3D] (exact). (Folding them into the values
    instead makes the values 3D wide: the per-step weighted sum and, in the
    backward pass, the per-step gradient accumulation of the values get 3x
    larger; see BUILD_NOTES.md.)
    """
    dtype = self.compute_dtype
    # The encoder input START x_1..x_n END 0.. as rows of one table [V + 3, E]
    # (the embeddings, START, END, a zero row), so that the first layer projects
    # the table once and gathers (`Encoder`).
    rows = jnp.concatenate([self.embedding, self.start[None], self.end[None],
                            jnp.zeros((1, self.embed_dim), self.embedding.dtype)], 0)
    ids = input_row_ids(src, src_lengths, self.vocab_size)                 # [B, N + 2]
    lengths = src_lengths + 2                                              # s
    encoded, finals = self.encoder(jnp.asarray(rows, dtype), lengths, ids)
    encoded = self.dropout(encoded, deterministic=not train)
    h0 = tuple(as_dtype(h, self.location_dtype)                               # float32 state
               for h in DECODER_INITS[self.decoder_init](finals, self.num_layers))
    context_kernel = self.decoder_layers[0]()[0][self.embed_dim:]          # W_ic [D, 3D]
    # The direction gate reads the top decoder layer's start state (e_cls).
    memory, params, alpha = self.cross_attention(encoded, h0[-1], lengths,
                                                 out_next=context_kernel)
    return memory, params, h0, alpha

  # ------------------------------------------------------------------ decoder
  def _decoder_arrays(self):
    """Decoder weights with the embedding-side and output products hoisted (the
    products in the parameters' precision, then cast: the output bias to the
    logits' dtype, everything else to `dtype`)."""
    raw_layers = [layer() for layer in self.decoder_layers]
    w_i0, b_i0 = raw_layers[0][0], raw_layers[0][1]
    token_table = self.embedding @ w_i0[:self.embed_dim] + b_i0           # [V, 3D]
    out_matrix = self.out_kernel @ self.embedding.T                        # [D, V]
    out_bias = self.out_bias @ self.embedding.T + self.vocab_bias          # [V]
    dtype = self.compute_dtype
    layers = [_cast_all(layer, dtype) for layer in raw_layers]
    return (layers, jnp.asarray(token_table, dtype), jnp.asarray(out_matrix, dtype),
            jnp.asarray(out_bias, self.location_dtype))

  def _logits(self, h: Array, out_matrix: Array, out_bias: Array) -> Array:
    """h [..., D] -> logits [..., V] in `location_dtype` (accumulated there too)."""
    return jnp.matmul(as_dtype(h, out_matrix.dtype), out_matrix,
                      preferred_element_type=self.location_dtype) + out_bias

  def _decoder_step_fn(self, memory, params):
    """The pure decoder step, its loop invariants and the hoisted output layer.

    Returns (step, invariants, constants, out_matrix [D, V], out_bias [V]), where
    step(tap, invariants, constants, (hs, carry), token [B]) is `decoder_step`.
    """
    layers, token_table, out_matrix, out_bias = self._decoder_arrays()
    inv = DecoderInvariants(memory.keys, memory.values, params, tuple(layers), token_table)
    consts = DecoderConstants(memory.mask, jax.lax.stop_gradient(memory.positions),
                              memory.lengths)
    step = functools.partial(decoder_step, self.variant, self.min_sigma)
    return step, inv, consts, out_matrix, out_bias

  def _input_attention(self, weights: Array, alpha: Array, memory) -> Array:
    """[T, B, S] weights over memory positions -> [B, T, S] over input positions, in
    `location_dtype` (float32 for a bfloat16 model: NumPy and matplotlib read it)."""
    weights = jnp.swapaxes(weights, 0, 1).astype(self.location_dtype)
    if self.variant.direction_mixing:
      weights = attention.input_attention(weights, alpha, memory.lengths)
    return weights

  def __call__(self, src: Array, src_lengths: Array, tgt_in: Array,
               train: bool = False) -> DecodeOutput:
    """Teacher-forced pass. tgt_in [B, T] = `<sos> y_1 .. y_{T-1}`; returns logits [B, T, V]."""
    memory, params, h0, alpha = self.encode(src, src_lengths, train)
    step, inv, consts, out_matrix, out_bias = self._decoder_step_fn(memory, params)
    carry = (h0, attention.initial_carry(src.shape[0], self.location_dtype))
    scan = DECODER_BACKWARDS[self.decoder_backward]
    _, (hs, weights, aux) = scan(step, inv, consts, carry, tgt_in.T, unroll=self.scan_unroll)
    logits = self._logits(jnp.swapaxes(hs, 0, 1), out_matrix, out_bias)
    aux = {k: v.T for k, v in aux.items()}
    aux['direction'] = alpha
    return DecodeOutput(logits, None, self._input_attention(weights, alpha, memory), aux)

  def build(self, src: Array, src_lengths: Array) -> None:
    """Creates every parameter without running the decoder: `model.init(key, src,
    src_lengths, method=model.build)` gives the parameters that initialising through
    `__call__` gives (Flax draws each from its own path), for a fraction of the
    tracing and compilation (the decoder's scan and its attention step are not traced)."""
    self.encode(src, src_lengths, False)
    self._decoder_arrays()

  def greedy(self, src: Array, src_lengths: Array, max_steps: int) -> DecodeOutput:
    """Greedy decoding, argmax fed back, for at most `max_steps` steps.

    A `lax.while_loop` stops as soon as every row has emitted `<eos>`, so the
    work follows the longest actual output, not `max_steps`. Finished rows
    keep running until then (their state is never read) but output `<pad>`.
    Returns tokens [B, max_steps] and the attention/aux of every step (zeros
    after the loop stopped).
    """
    memory, params, h0, alpha = self.encode(src, src_lengths, False)
    step, inv, consts, out_matrix, out_bias = self._decoder_step_fn(memory, params)

    def greedy_step(carry, token):
      carry, (h, weights, aux) = step(tapped_scan.apply, inv, consts, carry, token)
      return carry, (self._logits(h, out_matrix, out_bias), weights, aux)

    carry0 = (h0, attention.initial_carry(src.shape[0], self.location_dtype))
    tokens, weights, aux = greedy_loop(greedy_step, carry0, src.shape[0], max_steps,
                                       self.sos_id, self.pad_id, self.eos_id)
    aux = {k: v.T for k, v in aux.items()}
    aux['direction'] = alpha
    return DecodeOutput(None, tokens.T, self._input_attention(weights, alpha, memory), aux)


# ---------------------------------------------------------------------------
# The backbone's entry in `backbones.BACKBONES`: its config group, its checks,
# its builder and its FLOP count.
# ---------------------------------------------------------------------------
def config_defaults() -> ml_collections.ConfigDict:
  """`config.gru`: the GRU backbone's own fields, with the paper's small size (App. E)."""
  c = ml_collections.ConfigDict()
  c.embed_dim = 64           # token embedding width
  c.value_dim = 128          # attention value width
  c.num_layers = 1           # GRU layers in encoder and decoder
  c.decoder_init = 'final_states'  # or 'backward_states' (the authors' code at 2 layers)
  c.decoder_backward = 'autodiff'  # speed only: or 'custom', the hand-written backward (tapped_scan.py)
  return c


def validate(config) -> None:
  """Checks `config.gru`; raises a one-line MonolocError."""
  g = config.gru
  for name, ok in (('embed_dim', g.embed_dim >= 1), ('value_dim', g.value_dim >= 1),
                   ('num_layers', g.num_layers >= 1)):
    if not ok:
      raise errors.MonolocError(f'bad value for config.gru.{name}: {g[name]!r}; '
                                'it must be an integer >= 1')
  if g.decoder_init not in DECODER_INITS:
    raise errors.unknown_name('decoder_init', g.decoder_init, DECODER_INITS)
  if g.decoder_init == 'backward_states' and g.num_layers != 2:
    raise errors.MonolocError("config.gru.decoder_init='backward_states' needs "
                              f'gru.num_layers=2 (got {g.num_layers})')
  if g.decoder_backward not in DECODER_BACKWARDS:
    raise errors.unknown_name('decoder_backward', g.decoder_backward, DECODER_BACKWARDS)


def build(config, vocab, variant: attention.Variant, dtype: DType) -> Seq2Seq:
  """The paper's BiGRU -> GRU model (`Seq2Seq`) of `config` (shared fields and config.gru)."""
  g = config.gru
  return Seq2Seq(
      dtype=dtype, param_dtype=attention.at_least_float32(dtype),
      vocab_size=len(vocab), variant=variant, init_scheme=config.init_scheme,
      embed_dim=g.embed_dim, hidden_dim=config.hidden_dim, value_dim=g.value_dim,
      qk_dim=config.qk_dim or None, num_layers=g.num_layers, decoder_init=g.decoder_init,
      decoder_backward=g.decoder_backward, dropout_rate=config.dropout,
      min_sigma=config.min_sigma, pad_id=vocab.pad_id, sos_id=vocab.sos_id,
      eos_id=vocab.eos_id)


def flops_per_sample(n_src: int, n_tgt: int, vocab: int, embed: int = 64, d: int = 128,
                     value: int = 128, spec: Optional[attention.Variant] = None) -> float:
  """Forward FLOPs (2 per multiply-add) of one sample with n_src tokens and n_tgt
  decoder steps (incl. `<eos>`), counting GRU cells, attention and projections."""
  s = n_src + 2
  h = d // 2
  enc = 2 * s * 2 * (embed * 3 * h + h * 3 * h)            # 2 directions, input + hidden
  mem = s * 2 * (d * value + value * d)                     # inter value + value projection
  if spec is not None and spec.scores is not None:
    mem += s * 2 * d * d                                    # keys
  step = 2 * ((embed + d) * 3 * d + d * 3 * d)              # decoder GRU
  step += 2 * d * d + 2 * s * d                             # f_o, sum_i a_i v_i
  if spec is not None and spec.scores is not None:         # query, scores (+ W_r)
    step += spec.scores.step_flops(attention.Dims(d, d, d), s)
  if spec is not None and spec.location is not None:
    step += 2 * d * d + 2 * d * 4 + 10 * s                  # l_t, sigma/rho/mix, Gaussian
  step += 2 * d * vocab                                     # tied output layer (hoisted form)
  return float(enc + mem + n_tgt * step)


def config_flops(n_src: int, n_tgt: int, vocab: int, config,
                 spec: Optional[attention.Variant]) -> float:
  """`flops_per_sample` at config's size."""
  return flops_per_sample(n_src, n_tgt, vocab, config.gru.embed_dim, config.hidden_dim,
                          config.gru.value_dim, spec)
