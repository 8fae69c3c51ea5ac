"""Pure GRU kernels with the input projection hoisted out of the time loop.

The cell follows PyTorch's `nn.GRU` (the reference code's framework):

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


def gru_cell(x_proj: Array, h: Array, w_h: Array, b_h: Array) -> Array:
  """One GRU step. x_proj: [B, 3H] (input already projected), h: [B, H], w_h: [H, 3H].

  The product runs in w_h's dtype; the state keeps h's (see `gru_gates`)."""
  return gru_gates(x_proj, h.astype(w_h.dtype) @ w_h + b_h, h)


def gru_gates(x_proj: Array, h_proj: Array, h: Array) -> Array:
  """The GRU step after both projections: x_proj, h_proj = W_h h + b_h: [B, 3H]; h: [B, H].

  The gates run in h's dtype (a float32 state with bfloat16 projections: float32
  gates), and the new state [B, H] has it, so a scan carry keeps its type."""
  x_proj, h_proj = x_proj.astype(h.dtype), h_proj.astype(h.dtype)
  hidden = h.shape[-1]
  x_r, x_z, x_n = x_proj[..., :hidden], x_proj[..., hidden:2 * hidden], x_proj[..., 2 * hidden:]
  h_r, h_z, h_n = h_proj[..., :hidden], h_proj[..., hidden:2 * hidden], h_proj[..., 2 * hidden:]
  r = jax.nn.sigmoid(x_r + h_r)
  z = jax.nn.sigmoid(x_z + h_z)
  n = jnp.tanh(x_n + r * h_n)
  return (1.0 - z) * n + z * h


def gru_scan(x_proj: Array, h0: Array, w_h: Array, b_h: Array) -> Array:
  """Runs the GRU over time. x_proj: [B, S, 3H], h0: [B, H] -> outputs [B, S, H]."""
  def step(h, x):
    h = gru_cell(x, h, w_h, b_h)
    return h, h
  _, outputs = jax.lax.scan(step, h0, jnp.swapaxes(x_proj, 0, 1))
  return jnp.swapaxes(outputs, 0, 1)


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
  batch = x_proj_fwd.shape[0]
  hidden = fwd[0].shape[0]
  h0 = jnp.zeros((batch, hidden), x_proj_fwd.dtype)
  out_f = gru_scan(x_proj_fwd, h0, *fwd)
  out_b = reverse_valid(gru_scan(reverse_valid(x_proj_bwd, lengths), h0, *bwd), lengths)
  last = jnp.take_along_axis(out_f, (lengths - 1)[:, None, None], axis=1)[:, 0]
  final = jnp.concatenate([last, out_b[:, 0]], axis=-1)
  return jnp.concatenate([out_f, out_b], axis=-1), final
