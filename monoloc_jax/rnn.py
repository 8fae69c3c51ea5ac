"""Pure GRU kernels with the input projection hoisted out of the time loop.

The cell follows PyTorch's `nn.GRU` (the authors' code's framework):

  r  = sigmoid(x_r + W_hr h + b_hr)
  z  = sigmoid(x_z + W_hz h + b_hz)
  n  = tanh(x_n + r * (W_hn h + b_hn))
  h' = (1 - z) * n + z * h

where x_{r,z,n} = W_i{r,z,n} x + b_i{r,z,n} is computed for all timesteps at
once, before the scan, as one large matrix product.
"""

import jax
import jax.numpy as jnp

from monoloc_jax.attention import reverse_valid

Array = jax.Array


def gru_cell(x_proj, h: Array, w_h: Array, b_h: Array) -> Array:
  """One GRU step. x_proj: [B, 3H] (input already projected) or its three gate
  blocks (see `gru_gates`), h: [B, H], w_h: [H, 3H].

  The product runs in w_h's dtype; the state keeps h's (see `gru_gates`)."""
  return gru_gates(x_proj, h.astype(w_h.dtype) @ w_h + b_h, h)


def gru_gates(x_proj, h_proj: Array, h: Array) -> Array:
  """The GRU step after both projections: x_proj, h_proj = W_h h + b_h: [B, 3H]; h: [B, H].

  x_proj may also be the three gates' inputs (x_r, x_z, x_n), each [B, H], as
  `gru_scan_time_major` passes them.
  The gates run in h's dtype (a float32 state with bfloat16 projections: float32
  gates), and the new state [B, H] has it, so a scan carry keeps its type."""
  hidden = h.shape[-1]
  x_r, x_z, x_n = (x_proj if isinstance(x_proj, (tuple, list))
                   else split_gates(jnp.asarray(x_proj), hidden))
  x_r, x_z, x_n = (jnp.asarray(x).astype(h.dtype) for x in (x_r, x_z, x_n))
  h_r, h_z, h_n = split_gates(jnp.asarray(h_proj).astype(h.dtype), hidden)
  r = jax.nn.sigmoid(x_r + h_r)
  z = jax.nn.sigmoid(x_z + h_z)
  n = jnp.tanh(x_n + r * h_n)
  return (1.0 - z) * n + z * h


def split_gates(proj: Array, hidden: int):
  """[..., 3H] -> the (r, z, n) blocks, each [..., H].

  Its backward pass is one concatenate of the three blocks' cotangents, where autodiff
  of three slices pads each cotangent to [..., 3H] and adds them: the same values (the
  blocks are disjoint), fewer ops per recurrence step on XLA:CPU (MEASUREMENTS.md §3).
  """
  if proj.shape[-1] != 3 * hidden:
    raise ValueError(f'split_gates: last axis {proj.shape[-1]} is not 3 x {hidden}')
  return _split_in_three(proj)


@jax.custom_vjp
def _split_in_three(proj: Array):
  """[..., 3H] -> three [..., H] blocks; backward: concatenate (see `split_gates`)."""
  h = proj.shape[-1] // 3
  return proj[..., :h], proj[..., h:2 * h], proj[..., 2 * h:]


def _split_in_three_fwd(proj: Array):
  return _split_in_three(proj), None


def _split_in_three_bwd(_, cotangents):
  return (jnp.concatenate(cotangents, axis=-1),)


_split_in_three.defvjp(_split_in_three_fwd, _split_in_three_bwd)


def gru_scan(x_proj: Array, h0: Array, w_h: Array, b_h: Array) -> Array:
  """Runs the GRU over time. x_proj: [B, S, 3H], h0: [B, H] -> outputs [B, S, H]."""
  xs = time_major_gates(x_proj, h0.shape[-1])
  return jnp.swapaxes(gru_scan_time_major(xs, h0, w_h, b_h), 0, 1)


def time_major_gates(x_proj: Array, hidden: int):
  """[B, S, 3H] -> the three gates' inputs (x_r, x_z, x_n), each time-major [S, B, H]."""
  return tuple(jnp.swapaxes(x, 0, 1) for x in split_gates(x_proj, hidden))


def gru_scan_time_major(xs, h0: Array, w_h: Array, b_h: Array) -> Array:
  """Runs the GRU over time on per-gate time-major inputs.

  xs: (x_r, x_z, x_n), each [S, B, H]; h0: [B, H] -> outputs [S, B, H].
  Each step reads three contiguous [B, H] slices: XLA:CPU vectorises the gate
  fusion only then, not on column slices of a dynamically sliced [B, 3H] row
  (the same arithmetic, 2-3x less time per step; MEASUREMENTS.md §3).
  """
  def step(h, x):
    h = gru_cell(x, h, w_h, b_h)
    return h, h
  return jax.lax.scan(step, h0, tuple(xs))[1]


def bidirectional_gru(x_proj_fwd: Array, x_proj_bwd: Array, lengths: Array,
                      fwd: tuple, bwd: tuple):
  """A bidirectional GRU layer that respects per-example lengths.

  x_proj_*: [B, S, 3H] projected inputs of each direction; lengths: [B] valid
  positions; fwd/bwd: (w_h, b_h) of each direction. The backward direction
  reads each row's valid positions in reverse (padding stays at the end), so
  padding changes no output at a valid position.

  Returns (outputs [B, S, 2H], final [B, 2H]) where final concatenates the
  forward state after the last valid position and the backward state after
  reading back to position 0.
  """
  hidden = fwd[0].shape[0]
  return bidirectional_gru_time_major(
      time_major_gates(x_proj_fwd, hidden),
      time_major_gates(reverse_valid(x_proj_bwd, lengths), hidden), lengths, fwd, bwd)


def bidirectional_gru_time_major(xs_fwd, xs_bwd_reversed, lengths: Array,
                                 fwd: tuple, bwd: tuple):
  """`bidirectional_gru` on inputs already in the scan's layout.

  xs_fwd: the forward direction's gate inputs (x_r, x_z, x_n), each [S, B, H];
  xs_bwd_reversed: the backward direction's, each row's valid positions
  already reversed (`reverse_valid` along S). Returns what `bidirectional_gru`
  returns.
  """
  batch, hidden = xs_fwd[0].shape[1], fwd[0].shape[0]
  h0 = jnp.zeros((batch, hidden), xs_fwd[0].dtype)
  out_f = jnp.swapaxes(gru_scan_time_major(xs_fwd, h0, *fwd), 0, 1)
  out_b = reverse_valid(jnp.swapaxes(gru_scan_time_major(xs_bwd_reversed, h0, *bwd), 0, 1),
                        lengths)
  last = jnp.take_along_axis(out_f, (lengths - 1)[:, None, None], axis=1)[:, 0]
  final = jnp.concatenate([last, out_b[:, 0]], axis=-1)
  return jnp.concatenate([out_f, out_b], axis=-1), final
