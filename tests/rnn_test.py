"""Tests of the pure GRU kernels against a NumPy transcription of PyTorch's nn.GRU.

The reference is written from PyTorch's GRU equations (gates r, z, n; weights
in PyTorch's [3H, in] layout), independently of `monoloc_jax.rnn`: float64,
explicit loops, `math` scalars. Inputs are float32 (what the library computes
in); everything is compared to within 1e-5 (absolute and relative).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from monoloc_jax import attention
from monoloc_jax import rnn

from kernel_checks import assert_close
from kernel_checks import check_jit_vmap_grad
from kernel_checks import f64
from kernel_checks import normal
from kernel_checks import random_lengths


def sig(v):
  """Scalar logistic sigmoid, overflow-safe."""
  if v >= 0:
    return 1.0 / (1.0 + math.exp(-v))
  e = math.exp(v)
  return e / (1.0 + e)


# ===========================================================================
# NumPy reference (float64).
# ===========================================================================
def ref_gru_cell(x, h, w_ih, w_hh, b_ih, b_hh):
  """PyTorch nn.GRU cell; weights in PyTorch layout ([3H, in], gates r, z, n)."""
  hid = len(h)
  gi = f64(w_ih) @ f64(x) + f64(b_ih)
  gh = f64(w_hh) @ f64(h) + f64(b_hh)
  out = np.zeros(hid)
  for j in range(hid):
    r = sig(gi[j] + gh[j])
    z = sig(gi[hid + j] + gh[hid + j])
    n = math.tanh(gi[2 * hid + j] + r * gh[2 * hid + j])
    out[j] = (1.0 - z) * n + z * float(h[j])
  return out


def ref_gru_run(xs, w_ih, w_hh, b_ih, b_hh, hidden):
  """Runs the reference cell over a list of inputs; returns the states."""
  h = np.zeros(hidden)
  out = []
  for x in xs:
    h = ref_gru_cell(x, h, w_ih, w_hh, b_ih, b_hh)
    out.append(h)
  return out


def torch_gru_weights(rng, features, hidden):
  bound = hidden ** -0.5
  def u(*shape):
    return rng.uniform(-bound, bound, shape).astype(np.float32)
  return u(3 * hidden, features), u(3 * hidden, hidden), u(3 * hidden), u(3 * hidden)


# ===========================================================================
# GRU kernels against PyTorch's equations.
# ===========================================================================
@pytest.mark.parametrize('seed,features,hidden', [(0, 5, 4), (1, 8, 16), (2, 3, 7)])
def test_gru_cell(seed, features, hidden):
  rng = np.random.default_rng(seed)
  w_ih, w_hh, b_ih, b_hh = torch_gru_weights(rng, features, hidden)
  x, h = normal(rng, 3, features), normal(rng, 3, hidden)
  x_proj = x @ w_ih.T + b_ih
  got = rnn.gru_cell(x_proj, h, w_hh.T, b_hh)
  expected = np.stack([ref_gru_cell(x[b], h[b], w_ih, w_hh, b_ih, b_hh)
                       for b in range(3)])
  assert_close(got, expected)


@pytest.mark.parametrize('seed,lengths,n_pos', [
    (0, [5, 2, 1, 4], 5), (1, [3, 8, 6], 9)])
def test_gru_scan_and_bidirectional(seed, lengths, n_pos):
  rng = np.random.default_rng(seed)
  features, hidden = 4, 6
  lengths = np.array(lengths, np.int32)
  batch = len(lengths)
  fwd = torch_gru_weights(rng, features, hidden)
  bwd = torch_gru_weights(rng, features, hidden)
  x = normal(rng, batch, n_pos, features)
  for b, n in enumerate(lengths):              # junk in the padding must not matter
    x[b, n:] = 100.0 * rng.standard_normal((n_pos - n, features))
  xf = x @ fwd[0].T + fwd[2]
  xb = x @ bwd[0].T + bwd[2]

  scan = np.asarray(rnn.gru_scan(xf, np.zeros((batch, hidden), np.float32),
                                 fwd[1].T, fwd[3]))
  for b in range(batch):
    assert_close(scan[b], ref_gru_run(x[b], fwd[0], fwd[1], fwd[2], fwd[3], hidden))

  outputs, final = rnn.bidirectional_gru(xf, xb, lengths, (fwd[1].T, fwd[3]),
                                         (bwd[1].T, bwd[3]))
  outputs, final = np.asarray(outputs), np.asarray(final)
  assert outputs.shape == (batch, n_pos, 2 * hidden)
  for b, n in enumerate(lengths):
    f_states = ref_gru_run(x[b, :n], *fwd, hidden)
    b_states = ref_gru_run(x[b, :n][::-1], *bwd, hidden)[::-1]
    assert_close(outputs[b, :n, :hidden], f_states)
    assert_close(outputs[b, :n, hidden:], b_states)
    # Final state: forward after the last valid position, backward after position 0.
    assert_close(final[b], np.r_[f_states[-1], b_states[0]])


@pytest.mark.parametrize('extra', [1, 7])
def test_bidirectional_gru_unchanged_by_extra_padding(extra):
  """Widening the batch with more (junk) padding changes no valid output and no
  final state."""
  rng = np.random.default_rng(extra)
  features, hidden = 3, 5
  lengths = np.array([4, 1, 6, 3], np.int32)
  n_pos = int(lengths.max())
  fwd = torch_gru_weights(rng, features, hidden)
  bwd = torch_gru_weights(rng, features, hidden)
  x = normal(rng, len(lengths), n_pos, features)
  wide = np.concatenate([x, normal(rng, len(lengths), extra, features, scale=50.0)], 1)

  def run(inputs):
    return rnn.bidirectional_gru(inputs @ fwd[0].T + fwd[2], inputs @ bwd[0].T + bwd[2],
                                 lengths, (fwd[1].T, fwd[3]), (bwd[1].T, bwd[3]))
  out, final = run(x)
  out_wide, final_wide = run(wide)
  assert out_wide.shape == (len(lengths), n_pos + extra, 2 * hidden)
  assert_close(final_wide, final)
  for b, n in enumerate(lengths):
    assert_close(out_wide[b, :n], out[b, :n])


# ===========================================================================
# The kernels under jax.jit, jax.vmap and jax.grad.
# ===========================================================================
def _bigru_case():
  def make(rng):
    fw, bw = torch_gru_weights(rng, 3, 4), torch_gru_weights(rng, 3, 4)
    return (normal(rng, 3, 6, 12), normal(rng, 3, 6, 12), random_lengths(rng),
            (fw[1].T, fw[3]), (bw[1].T, bw[3]))
  return rnn.bidirectional_gru, make


TRANSFORM_CASES = {
    'gru_cell': (rnn.gru_cell, lambda r: (normal(r, 3, 12), normal(r, 3, 4),
                                          normal(r, 4, 12), normal(r, 12))),
    'bidirectional_gru': _bigru_case(),
}


@pytest.mark.parametrize('name', sorted(TRANSFORM_CASES))
def test_kernel_under_jit_vmap_grad(name):
  fn, make = TRANSFORM_CASES[name]
  check_jit_vmap_grad(fn, make)


def test_time_major_bidirectional_gru_equals_batch_major():
  """The encoder's first layer feeds `bidirectional_gru_time_major` per-gate,
  time-major inputs with the backward rows already reversed; it must equal
  `bidirectional_gru` on the same projections (outputs and final states)."""
  rng = np.random.default_rng(3)
  batch, n_pos, hidden = 3, 6, 5
  lengths = np.array([6, 2, 4], np.int32)
  fwd = torch_gru_weights(rng, 4, hidden)
  bwd = torch_gru_weights(rng, 4, hidden)
  xf, xb = normal(rng, batch, n_pos, 3 * hidden), normal(rng, batch, n_pos, 3 * hidden)
  expected = rnn.bidirectional_gru(xf, xb, lengths, (fwd[1].T, fwd[3]), (bwd[1].T, bwd[3]))
  xs_f = rnn.time_major_gates(jnp.asarray(xf), hidden)
  xs_b = rnn.time_major_gates(attention.reverse_valid(xb, lengths), hidden)
  assert [x.shape for x in xs_f] == [(n_pos, batch, hidden)] * 3
  got = rnn.bidirectional_gru_time_major(xs_f, xs_b, lengths, (fwd[1].T, fwd[3]),
                                         (bwd[1].T, bwd[3]))
  for g, e in zip(got, expected):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(e))


def test_split_gates_backward_is_the_slices_backward_exactly():
  """split_gates' hand-written backward (one concatenate) gives autodiff's of three
  slices bit for bit, under jit and vmap, and refuses a width that is not 3 x hidden."""
  rng = np.random.default_rng(3)
  proj = jnp.asarray(rng.normal(size=(2, 5, 12)), jnp.float32)
  cot = tuple(jnp.asarray(rng.normal(size=(2, 5, 4)), jnp.float32) for _ in range(3))

  def slices(p):
    return p[..., :4], p[..., 4:8], p[..., 8:]

  out, vjp = jax.vjp(lambda p: rnn.split_gates(p, 4), proj)
  ref_out, ref_vjp = jax.vjp(slices, proj)
  for a, b in zip(out, ref_out):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(vjp(cot)[0], ref_vjp(cot)[0])
  # One block's cotangent reaches only its own columns.
  only_z = jax.grad(lambda p: jnp.sum(rnn.split_gates(p, 4)[1] * 2.0))(proj)
  np.testing.assert_array_equal(only_z[..., 4:8], 2.0)
  np.testing.assert_array_equal(only_z[..., :4], 0.0)
  np.testing.assert_array_equal(only_z[..., 8:], 0.0)
  batched = jax.jit(jax.vmap(jax.grad(lambda p: jnp.sum(rnn.split_gates(p, 4)[2] ** 2))))(proj)
  np.testing.assert_array_equal(batched[..., 8:], 2 * proj[..., 8:])
  with pytest.raises(ValueError, match='last axis 12 is not 3 x 5'):
    rnn.split_gates(proj, 5)
