"""Tests of the pure attention kernels against NumPy transcriptions (GRU: rnn_test.py).

Every reference below is written straight from the paper's equations (Ray
Chowdhury & Caragea 2023, Eq. 1-19; Dubois et al. 2020), independently of `monoloc_jax.attention`: float64, explicit loops
over batch and positions, `math` scalars. Inputs are float32 (what the library
computes in); everything is compared to within 1e-5 (absolute and relative).
"""

import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from monoloc_jax import attention
from monoloc_jax import errors
from monoloc_jax import variants

from kernel_checks import assert_close
from kernel_checks import check_jit_vmap_grad
from kernel_checks import f64
from kernel_checks import normal
from kernel_checks import random_lengths
from kernel_checks import uniform


# ===========================================================================
# NumPy references (float64), one per equation of the paper (Eq. 1-19).
# ===========================================================================
def sig(v):
  """Scalar logistic sigmoid, overflow-safe."""
  if v >= 0:
    return 1.0 / (1.0 + math.exp(-v))
  e = math.exp(v)
  return e / (1.0 + e)


def relu(v):
  return v if v > 0 else 0.0


def elementwise(fn, *arrays):
  arrays = np.broadcast_arrays(*[f64(a) for a in arrays])
  out = np.empty(arrays[0].shape, np.float64)
  for idx in np.ndindex(out.shape):
    out[idx] = fn(*[float(a[idx]) for a in arrays])
  return out


def ref_softstair(x, tau=20.0):
  """Eq. 14."""
  def one(v):
    fl = math.floor(v)
    return fl + sig(tau * (v - fl - 0.5))
  return elementwise(one, x)


def ref_leaky_clamp(x, lower=0.0, upper=1.0, m=0.01):
  """Eq. 8: max(lower + m x, min(upper + m x, x))."""
  return elementwise(lambda v: max(lower + m * v, min(upper + m * v, v)), x)


def ref_stepsize(s):
  """Eq. 7: 1 / max(1, s - 1)."""
  return 1.0 / max(1, int(s) - 1)


def ref_positions(lengths, max_len):
  """Eq. 7: norm(i) = i * stepsize, per example."""
  out = np.zeros((len(lengths), max_len))
  for b, s in enumerate(lengths):
    for i in range(max_len):
      out[b, i] = i * ref_stepsize(s)
  return out


def ref_sigma(raw, s, min_sigma=0.27):
  """Eq. 10: (ReLU(raw) + min_sigma) / s."""
  return (relu(float(raw)) + min_sigma) / float(s)


def ref_gaussian(mu, sigma, positions, mask, eps=1e-20):
  """Eq. 5-6, 9 for one row: masked Gaussian, normalised over valid positions."""
  lam = np.zeros(len(positions))
  for i, (p, valid) in enumerate(zip(positions, mask)):
    if valid:
      lam[i] = math.exp(-(float(p) - float(mu)) ** 2 / (2.0 * float(sigma) ** 2))
  return lam / (lam.sum() + eps)


def ref_masked_softmax(scores, mask):
  """Softmax over the valid entries of one row; 0 elsewhere."""
  valid = [i for i, m in enumerate(mask) if m]
  top = max(float(scores[i]) for i in valid)
  out = np.zeros(len(scores))
  for i in valid:
    out[i] = math.exp(float(scores[i]) - top)
  return out / out.sum()


def dot(u, v):
  return sum(float(a) * float(b) for a, b in zip(u, v))


def ref_content_scores(q, keys):
  """Eq. 1 for one query: c_i = q . k_i / sqrt(D)."""
  return np.array([dot(q, k) / math.sqrt(len(q)) for k in keys])


def ref_sinusoid(p, dim):
  """pe(p) = [sin(p w_0) .. sin(p w_{D/2-1}), cos(p w_0) .. cos(p w_{D/2-1})]."""
  half = dim // 2
  out = np.zeros(dim)
  for j in range(half):
    w = 10000.0 ** (-2.0 * j / dim)
    out[j] = math.sin(float(p) * w)
    out[half + j] = math.cos(float(p) * w)
  return out


def ref_relative_row(q, keys, pe, w_r, b1, b2):
  """Eq. 3-4 for one query: (q+b1).k_i/sqrt(Q) + (q+b2).(pe_i W_r)/sqrt(Q), with
  q, k_i, b1, b2 Q wide, pe_i P wide (the model width) and W_r [P, Q]."""
  d = len(q)
  out = np.zeros(len(keys))
  for i in range(len(keys)):
    r = np.zeros(d)
    for a in range(len(pe[i])):            # r = pe_i @ W_r, written out
      r += float(pe[i][a]) * f64(w_r[a])
    out[i] = (dot(f64(q) + f64(b1), keys[i]) + dot(f64(q) + f64(b2), r)) / math.sqrt(d)
  return out


def ref_rotary_vector(x, p, base=10000.0):
  """Rotates the pairs (x_j, x_{j+D/2}) by p * base^(-2j/D)."""
  d = len(x)
  half = d // 2
  out = np.zeros(d)
  for j in range(half):
    theta = float(p) * base ** (-2.0 * j / d)
    c, s = math.cos(theta), math.sin(theta)
    out[j] = float(x[j]) * c - float(x[j + half]) * s
    out[j + half] = float(x[j]) * s + float(x[j + half]) * c
  return out


def ref_reverse_valid(x, lengths):
  """Reverses each row's first length entries; padding keeps its place."""
  out = f64(x).copy()
  for b, n in enumerate(lengths):
    for i in range(int(n)):
      out[b, i] = x[b, int(n) - 1 - i]
  return out


def ref_direction_mixing(e, lengths, alpha):
  """Eq. 18: alpha e + (1 - alpha) e_rev."""
  rev = ref_reverse_valid(e, lengths)
  out = np.zeros(e.shape)
  for b in range(e.shape[0]):
    out[b] = float(alpha[b]) * f64(e[b]) + (1.0 - float(alpha[b])) * rev[b]
  return out


# Step activations of the location variants (Eq. 11, 14, 19; App. B; Table 4), on scalars; g is the Mono gate.
REF_STEPS = {
    'sigmoid': lambda r, g: sig(5.0 * r),
    'softstair': lambda r, g: float(ref_softstair(r)),
    'relu': lambda r, g: relu(r),
    'free': lambda r, g: r,
    'mono': lambda r, g: g * sig(5.0 * r) + (1.0 - g) * relu(r),
}


def ref_mu(variant, rho, pa, ss, first, gate_logit=None, raw=False):
  """The mu table of the location variants (Eq. 11-13, §5.3-5.4, App. B,
  Table 4), row by row. Returns (mu, step) as floats.

  raw=True skips the leaky clamp (to see which rows it changed).
  """
  def clamp(v):
    return v if raw else float(ref_leaky_clamp(v))
  r = [float(v) for v in rho]
  pa, ss = float(pa), float(ss)
  if variant == 'locattn':
    step = float(ref_softstair(r[0]))
    return clamp(step * ss + sig(r[1]) * pa + sig(r[2])), step
  if variant == 'locattn_s':
    step = float(ref_softstair(r[0]))
    return clamp(step * ss + (sig(r[1]) if first else pa)), step
  if variant == 'onestep':
    step = sig(5.0 * r[0])
    return pa + step * ss, step
  if variant == 'mono':
    g = sig(float(gate_logit))
    step = g * sig(5.0 * r[0]) + (1.0 - g) * relu(r[0])
    return pa + step * ss, step
  if variant == 'rmono':
    step = relu(r[0])
    return pa + step * ss, step
  if variant == 'onestep_minus_step2':
    step = sig(5.0 * r[0])
    return clamp(step * ss + sig(r[1]) * pa + sig(r[2])), step
  if variant == 'onestep_minus_step3':
    step = float(ref_softstair(r[0]))
    return pa + step * ss, step
  if variant == 'onestep_minus_sigmoid':
    step = r[0]
    return pa + step * ss, step
  raise AssertionError(variant)


# rho outputs each location variant reads (rho_1, rho_2, rho_3 of the table).
NUM_RHO = {'locattn': 3, 'locattn_s': 2, 'onestep': 1, 'mono': 1, 'rmono': 1,
           'onestep_minus_step2': 3, 'onestep_minus_step3': 1,
           'onestep_minus_sigmoid': 1}
CLAMPED = {'locattn', 'locattn_s', 'onestep_minus_step2'}


def ref_attention_step(spec, params, encoded, values, lengths, h, pa_prev, t):
  """One decoder step (Eq. 1-19), composed from the references above.

  encoded are the encoder outputs e_i (keys k_i = W_k e_i); t is the 0-based step t-1.
  Returns (o [B, D], a [B, S], pa [B], aux dict of [B]).
  """
  p = {k: f64(v) for k, v in params.items()}
  batch, n_pos, d = values.shape
  out = np.zeros((batch, d))
  weights = np.zeros((batch, n_pos))
  pa_new = np.zeros(batch)
  aux = {k: np.zeros(batch) for k in ('mu', 'sigma', 'step', 'mix')}
  for b in range(batch):
    s = int(lengths[b])
    mask = [i < s for i in range(n_pos)]
    ss = ref_stepsize(s)
    norm = [i * ss for i in range(n_pos)]
    hb = f64(h[b])
    soft = None
    if spec.scores is not None:
      q = hb @ p['query']
      keys = f64(encoded[b]) @ p['key']
      if spec.scores is attention.CONTENT:
        c = ref_content_scores(q, keys)
      elif spec.scores is attention.RELATIVE:
        pe = [ref_sinusoid(i - t, d) for i in range(n_pos)]
        c = ref_relative_row(q, keys, pe, p['rel_kernel'], p['content_bias'],
                             p['position_bias'])
      else:  # rope: q rotated by its step, k_i by i
        assert spec.scores is attention.ROPE
        qr = ref_rotary_vector(q, t)
        c = np.array([dot(qr, ref_rotary_vector(keys[i], i)) / math.sqrt(len(q))
                      for i in range(n_pos)])
      soft = ref_masked_softmax(c, mask)
    a = pa_w = soft
    if spec.location is not None:
      loc = hb @ p['loc_kernel'] + p['loc_bias']
      sigma = ref_sigma(dot(loc, p['sigma_kernel'][:, 0]) + float(p['sigma_bias']), s)
      rho = loc @ p['rho_kernel']
      mu, step = ref_mu(spec.location.name, rho, pa_prev[b], ss, t == 0,
                        p.get('gate_logit'))
      lam = ref_gaussian(mu, sigma, norm, mask)
      aux['mu'][b], aux['sigma'][b], aux['step'][b] = mu, sigma, step
      a = pa_w = lam
      if spec.scores is not None:                     # Eq. 15-16
        m = sig(dot(hb, p['mix_kernel'][:, 0]) + float(p['mix_bias']))
        aux['mix'][b] = m
        a = m * lam + (1.0 - m) * soft
        pa_w = lam if spec.position_reference else a
    weights[b] = a
    pa_new[b] = sum(pa_w[i] * norm[i] for i in range(n_pos))
    context = np.zeros(d)
    for i in range(n_pos):
      context += a[i] * f64(values[b, i])
    out[b] = context @ p['out']                       # Eq. 2
  return out, weights, pa_new, aux


# ===========================================================================
# Elementary kernels.
# ===========================================================================
SEEDS = [0, 1, 2]


@pytest.mark.parametrize('seed', SEEDS)
def test_softstair(seed):
  rng = np.random.default_rng(seed)
  x = uniform(rng, 5, 7, low=-3.0, high=3.0)
  assert_close(attention.softstair(x), ref_softstair(x))
  assert_close(attention.softstair(x, temperature=3.0), ref_softstair(x, tau=3.0))
  # Near-integer valued away from the half-integers.
  ints = np.array([-2.0, -1.0, 0.0, 1.0, 2.0], np.float32) + 0.1
  assert np.all(np.abs(np.asarray(attention.softstair(ints)) - np.floor(ints)) < 1e-3)


@pytest.mark.parametrize('seed', SEEDS)
def test_leaky_clamp(seed):
  rng = np.random.default_rng(seed)
  x = uniform(rng, 4, 9, low=-3.0, high=4.0)
  assert_close(attention.leaky_clamp(x), ref_leaky_clamp(x))
  assert_close(attention.leaky_clamp(x, lower=-0.5, upper=2.0, slope=0.1),
               ref_leaky_clamp(x, lower=-0.5, upper=2.0, m=0.1))
  inside = uniform(rng, 10, low=0.0, high=1.0)
  assert_close(attention.leaky_clamp(inside), inside)            # identity on [0, 1]


@pytest.mark.parametrize('lengths,max_len', [
    ([1, 2, 3, 7], 7), ([5, 1, 9], 12), ([2], 2), ([4, 4, 6, 1, 3], 8)])
def test_stepsize_and_normalized_positions(lengths, max_len):
  lengths = np.array(lengths, np.int32)
  assert_close(attention.stepsize(lengths), [ref_stepsize(s) for s in lengths])
  pos = np.asarray(attention.normalized_positions(lengths, max_len))
  assert pos.shape == (len(lengths), max_len)
  assert_close(pos, ref_positions(lengths, max_len))
  for b, s in enumerate(lengths):                  # 0 ... 1 over the valid span
    assert pos[b, 0] == 0.0
    if s > 1:
      assert_close(pos[b, s - 1], 1.0)
  assert float(attention.stepsize(np.int32(1))) == 1.0


@pytest.mark.parametrize('seed', SEEDS)
def test_location_sigma(seed):
  rng = np.random.default_rng(seed)
  raw = normal(rng, 6)
  lengths = rng.integers(1, 12, 6).astype(np.int32)
  expected = [ref_sigma(r, s) for r, s in zip(raw, lengths)]
  assert_close(attention.location_sigma(raw, lengths), expected)
  expected = [ref_sigma(r, s, min_sigma=0.1) for r, s in zip(raw, lengths)]
  assert_close(attention.location_sigma(raw, lengths, min_sigma=0.1), expected)


def ragged_location_inputs(rng, lengths, max_len):
  lengths = np.array(lengths, np.int32)
  positions = ref_positions(lengths, max_len).astype(np.float32)
  mask = np.arange(max_len)[None, :] < lengths[:, None]
  mu = uniform(rng, len(lengths), low=-0.1, high=1.1)
  sigma = np.array([ref_sigma(r, s) for r, s in
                    zip(normal(rng, len(lengths)), lengths)], np.float32)
  return mu, sigma, positions, mask


@pytest.mark.parametrize('seed,lengths,max_len', [
    (0, [7, 3, 1, 5], 7), (1, [2, 10, 6], 11), (2, [4], 4), (3, [9, 9, 2, 5, 3], 10)])
def test_gaussian_location_attention(seed, lengths, max_len):
  rng = np.random.default_rng(seed)
  mu, sigma, positions, mask = ragged_location_inputs(rng, lengths, max_len)
  got = np.asarray(attention.gaussian_location_attention(mu, sigma, positions, mask))
  expected = np.stack([ref_gaussian(m, s, p, k)
                       for m, s, p, k in zip(mu, sigma, positions, mask)])
  assert_close(got, expected)
  assert np.all(got[~mask] == 0.0)
  assert_close(got.sum(-1), np.ones(len(lengths)))
  # An arbitrary (non-prefix) mask.
  holes = rng.random(positions.shape) < 0.6
  holes[:, 0] = True
  got = np.asarray(attention.gaussian_location_attention(mu, sigma, positions, holes))
  expected = np.stack([ref_gaussian(m, s, p, k)
                       for m, s, p, k in zip(mu, sigma, positions, holes)])
  assert_close(got, expected)
  assert np.all(got[~holes] == 0.0)


def test_gaussian_underflow_is_all_zero_not_nan():
  positions = np.linspace(0, 1, 5, dtype=np.float32)[None]
  got = np.asarray(attention.gaussian_location_attention(
      np.array([60.0], np.float32), np.array([0.01], np.float32), positions,
      np.ones((1, 5), bool)))
  assert np.all(np.isfinite(got)) and np.all(got == 0.0)


@pytest.mark.parametrize('seed', SEEDS)
def test_attended_position(seed):
  rng = np.random.default_rng(seed)
  w = uniform(rng, 4, 6)
  pos = uniform(rng, 4, 6)
  expected = [sum(float(a) * float(p) for a, p in zip(wr, pr)) for wr, pr in zip(w, pos)]
  assert_close(attention.attended_position(w, pos), expected)


@pytest.mark.parametrize('seed', SEEDS)
def test_masked_softmax(seed):
  rng = np.random.default_rng(seed)
  scores = normal(rng, 5, 8, scale=3.0)
  mask = rng.random((5, 8)) < 0.5
  mask[:, 2] = True
  mask[0] = False
  mask[0, 5] = True                              # a single valid position
  got = np.asarray(attention.masked_softmax(scores, mask))
  assert_close(got, np.stack([ref_masked_softmax(s, m) for s, m in zip(scores, mask)]))
  assert np.all(got[~mask] == 0.0)
  assert got[0, 5] == 1.0


@pytest.mark.parametrize('seed,dim', [(0, 8), (1, 16), (2, 128)])
def test_content_scores(seed, dim):
  rng = np.random.default_rng(seed)
  q, k = normal(rng, 3, dim), normal(rng, 3, 5, dim)
  expected = np.stack([ref_content_scores(q[b], k[b]) for b in range(3)])
  assert_close(attention.content_scores(q, k), expected)


@pytest.mark.parametrize('dim', [8, 16, 128])
def test_sinusoidal_embedding(dim):
  positions = np.array([-12, -3, -1, 0, 1, 2, 7, 20], np.int32)
  got = np.asarray(attention.sinusoidal_embedding(positions, dim))
  assert got.shape == (len(positions), dim)
  assert_close(got, np.stack([ref_sinusoid(p, dim) for p in positions]))
  # Layout [sin ..., cos ...]: position 0 gives zeros then ones.
  assert_close(got[3], np.r_[np.zeros(dim // 2), np.ones(dim // 2)])
  grid = np.array([[0, -1], [5, 3]], np.int32)            # any leading shape
  assert np.asarray(attention.sinusoidal_embedding(grid, dim)).shape == (2, 2, dim)


@pytest.mark.parametrize('seed,dim,step,shared', [
    (0, 8, 0, True), (1, 16, 3, False), (2, 32, 6, True)])
def test_relative_scores(seed, dim, step, shared):
  rng = np.random.default_rng(seed)
  batch, n_pos = 3, 7
  q, k = normal(rng, batch, dim), normal(rng, batch, n_pos, dim)
  w_r = normal(rng, dim, dim, scale=dim ** -0.5)
  b1, b2 = normal(rng, dim), normal(rng, dim)
  pe = np.stack([ref_sinusoid(i - step, dim) for i in range(n_pos)]).astype(np.float32)
  rel = pe if shared else np.broadcast_to(pe, (batch, n_pos, dim))
  got = attention.relative_scores(q, k, rel, w_r, b1, b2)
  expected = np.stack([ref_relative_row(q[b], k[b], pe, w_r, b1, b2)
                       for b in range(batch)])
  assert_close(got, expected)


@pytest.mark.parametrize('seed,dim', [(0, 8), (1, 16), (2, 128)])
def test_rotary_embedding(seed, dim):
  rng = np.random.default_rng(seed)
  x = normal(rng, 2, 5, dim)
  positions = np.arange(5)[None, :] * 3 - 4                # includes negatives
  got = np.asarray(attention.rotary_embedding(x, positions))
  expected = np.zeros(x.shape)
  for b in range(2):
    for i in range(5):
      expected[b, i] = ref_rotary_vector(x[b, i], positions[0, i])
  assert_close(got, expected)
  assert_close(attention.rotary_embedding(x[0, 0], 7), ref_rotary_vector(x[0, 0], 7))
  assert_close(attention.rotary_embedding(x, positions, base=100.0)[1, 2],
               ref_rotary_vector(x[1, 2], positions[0, 2], base=100.0))
  # Norm preserving; scores depend only on the offset m - n.
  assert_close(np.linalg.norm(got, axis=-1), np.linalg.norm(f64(x), axis=-1))
  q, k = x[0, 0], x[1, 1]
  scores = [float(jnp.dot(attention.rotary_embedding(q, m), attention.rotary_embedding(k, n)))
            for m, n in [(2, 0), (5, 3), (11, 9), (0, -2)]]
  assert_close(scores, np.full(4, scores[0]))
  assert abs(scores[0] - float(jnp.dot(attention.rotary_embedding(q, 3),
                                       attention.rotary_embedding(k, 0)))) > 1e-4


@pytest.mark.parametrize('seed,lengths,n_pos', [
    (0, [5, 2, 1, 4], 5), (1, [3, 7, 7], 9)])
def test_reverse_valid(seed, lengths, n_pos):
  rng = np.random.default_rng(seed)
  lengths = np.array(lengths, np.int32)
  for x in (normal(rng, len(lengths), n_pos), normal(rng, len(lengths), n_pos, 3)):
    got = np.asarray(attention.reverse_valid(x, lengths))
    assert_close(got, ref_reverse_valid(x, lengths))
    for b, n in enumerate(lengths):
      np.testing.assert_array_equal(got[b, n:], x[b, n:])   # padding stays
    np.testing.assert_array_equal(attention.reverse_valid(got, lengths), x)


@pytest.mark.parametrize('seed', SEEDS)
def test_direction_gate_and_mixing(seed):
  rng = np.random.default_rng(seed)
  lengths = np.array([6, 2, 4], np.int32)
  e = normal(rng, 3, 6, 5)
  logit = normal(rng, 3)
  alpha = np.asarray(attention.direction_gate(logit))
  assert_close(alpha, [sig(5.0 * float(v)) for v in logit])            # Eq. 17
  assert_close(attention.direction_gate(logit, scale=2.0), [sig(2.0 * float(v)) for v in logit])
  assert_close(attention.direction_mixing(e, lengths, alpha),
               ref_direction_mixing(e, lengths, alpha))                # Eq. 18
  assert_close(attention.direction_mixing(e, lengths, np.ones(3, np.float32)), e)
  assert_close(attention.direction_mixing(e, lengths, np.zeros(3, np.float32)),
               ref_reverse_valid(e, lengths))


@pytest.mark.parametrize('seed', SEEDS)
def test_content_mixing(seed):
  rng = np.random.default_rng(seed)
  loc, cont, m = uniform(rng, 4, 6), uniform(rng, 4, 6), uniform(rng, 4)
  expected = np.zeros((4, 6))
  for b in range(4):
    for i in range(6):
      expected[b, i] = float(m[b]) * float(loc[b, i]) + (1 - float(m[b])) * float(cont[b, i])
  assert_close(attention.content_mixing(loc, cont, m), expected)


# ===========================================================================
# Step activations, location rules and the mu table.
# ===========================================================================
STEP_FUNCTIONS = {
    'sigmoid': lambda rho, g: attention.sigmoid_step(rho),
    'softstair': lambda rho, g: attention.softstair_step(rho),
    'relu': lambda rho, g: attention.relu_step(rho),
    'free': lambda rho, g: attention.free_step(rho),
    'mono': attention.mono_step,
}


@pytest.mark.parametrize('name', sorted(REF_STEPS))
@pytest.mark.parametrize('gate_logit', [0.4, -20.0, 3.0])
def test_step_activations(name, gate_logit):
  rho = np.linspace(-3.0, 3.0, 41).astype(np.float32)
  g = np.float32(gate_logit)
  got = STEP_FUNCTIONS[name](rho, g)
  expected = [REF_STEPS[name](float(r), sig(float(g))) for r in rho]
  assert_close(got, expected)


def test_named_step_functions():
  rho = np.linspace(-2.0, 2.0, 9).astype(np.float32)
  assert_close(attention.sigmoid_step(rho), [sig(5 * float(r)) for r in rho])
  assert_close(attention.softstair_step(rho), ref_softstair(rho))
  assert_close(attention.relu_step(rho), [relu(float(r)) for r in rho])
  assert_close(attention.free_step(rho), rho)
  assert_close(attention.mono_step(rho, np.float32(0.0)),
               [0.5 * sig(5 * float(r)) + 0.5 * relu(float(r)) for r in rho])


def test_location_rules_registry():
  assert set(attention.LOCATION_RULES) == set(NUM_RHO)
  for name, rule in attention.LOCATION_RULES.items():
    assert rule.num_rho == NUM_RHO[name], name
    assert rule.clamp == (name in CLAMPED), name
    assert rule.name == name
    assert [p.name for p in rule.params] == (['gate_logit'] if name == 'mono' else []), name


@pytest.mark.parametrize('name', sorted(NUM_RHO))
@pytest.mark.parametrize('first', [True, False])
@pytest.mark.parametrize('seed', [0, 1])
def test_location_mu_matches_table(name, first, seed):
  rng = np.random.default_rng(seed)
  batch = 64
  rule = attention.LOCATION_RULES[name]
  rho = normal(rng, batch, rule.num_rho, scale=2.0)
  pa = uniform(rng, batch)
  ss = np.float32(1.0) / rng.integers(1, 10, batch).astype(np.float32)
  gate = np.float32(rng.normal()) if rule.params else None
  mu, step = attention.location_mu(rule, rho, pa, ss, np.bool_(first),
                           {'gate_logit': gate} if rule.params else None)
  expected = [ref_mu(name, rho[b], pa[b], ss[b], first, gate) for b in range(batch)]
  assert_close(mu, [e[0] for e in expected])
  assert_close(step, [e[1] for e in expected])
  if name in CLAMPED:   # the leaky clamp must have been exercised at both ends
    raw = np.array([ref_mu(name, rho[b], pa[b], ss[b], first, gate, raw=True)[0]
                    for b in range(batch)])
    assert np.any(raw > 1.1) and np.any((raw > 0.0) & (raw < 1.0))
    if name != 'onestep_minus_step2':     # its raw mu is a sum of positives
      assert np.any(raw < 0.0)


def test_location_mu_clamp_regions():
  rule = attention.LOCATION_RULES['locattn']
  # rho chosen so that the raw mu lands below 0, inside, and above 1.
  rho = np.array([[-3.0, -9.0, -9.0], [0.0, -9.0, 0.0], [6.0, 9.0, 9.0]], np.float32)
  pa = np.array([0.5, 0.5, 1.0], np.float32)
  ss = np.array([0.2, 0.2, 0.2], np.float32)
  mu, _ = attention.location_mu(rule, rho, pa, ss, np.bool_(False))
  expected = [ref_mu('locattn', r, p, s, False) for r, p, s in zip(rho, pa, ss)]
  assert_close(mu, [e[0] for e in expected])
  mu = np.asarray(mu)
  assert mu[0] < 0.0 and 0.0 < mu[1] < 1.0 and mu[2] > 1.0


# ===========================================================================
# attention_step against the composed references.
# ===========================================================================
def random_step_params(rng, spec, dim, qk=None):
  """Random raw arrays of every `spec.param_defs()` entry (names and shapes as declared)."""
  dims = attention.Dims(model=dim, qk=qk or dim, encoded=dim)
  scale = {'content_bias': 0.3, 'position_bias': 0.3, 'loc_bias': 0.1}
  params = {}
  for p in spec.param_defs():
    shape = p.shape(dims)
    if p.name == 'rho_kernel':
      params[p.name] = normal(rng, *shape, scale=0.5 * dim ** -0.5)
    elif p.name in scale:
      params[p.name] = normal(rng, *shape, scale=scale[p.name])
    elif not shape:                                   # sigma_bias, mix_bias, gate_logit
      params[p.name] = np.float32(rng.uniform(-0.3, 0.3))
    else:
      params[p.name] = normal(rng, *shape, scale=dim ** -0.5)
  return params


def make_step_inputs(seed, name, t, dim=16, qk=None, lengths=(7, 3, 2, 5)):
  """Random raw params, encoder outputs, values and carry for variant `name`
  (query/key width qk, default dim)."""
  rng = np.random.default_rng(seed)
  spec = variants.get(name)
  lengths = np.array(lengths, np.int32)
  batch, n_pos = len(lengths), 7
  params = random_step_params(rng, spec, dim, qk)
  encoded = normal(rng, batch, n_pos, dim)
  values = normal(rng, batch, n_pos, dim)
  h = normal(rng, batch, dim)
  pa_prev = (uniform(rng, batch) if t > 0 else np.zeros(batch, np.float32))
  return spec, params, encoded, values, lengths, h, pa_prev


def run_step(spec, params, encoded, values, lengths, h, pa_prev, t, out_next=None):
  folded = attention.fold_params(spec, params, out_next)
  memory = attention.make_memory(spec, folded, encoded, values, lengths)
  carry = attention.AttentionCarry(pa_prev, jnp.asarray(t, jnp.int32))
  return attention.attention_step(spec, folded, memory, h, carry)


STEP_VARIANTS = ['content', 'relative', 'bi_rope', 'onestep', 'mix_onestep',
                 'mix_onestep_pr', 'locattn', 'locattn_s', 'mix_locattn_s_pr',
                 'mono', 'mix_rmono', 'onestep_minus_step2']


@pytest.mark.parametrize('name', STEP_VARIANTS)
@pytest.mark.parametrize('t', [0, 3])
def test_attention_step_matches_reference(name, t):
  inputs = make_step_inputs(10 + t, name, t)
  spec, params, keys, values, lengths, h, pa_prev = inputs
  out, weights, carry, aux = run_step(*inputs, t)
  e_out, e_weights, e_pa, e_aux = ref_attention_step(*inputs, t)
  assert_close(weights, e_weights)
  assert_close(out, e_out)
  assert_close(carry.pa_prev, e_pa)
  assert int(carry.t) == t + 1
  mask = np.arange(values.shape[1])[None, :] < lengths[:, None]
  assert np.all(np.asarray(weights)[~mask] == 0.0)
  assert_close(np.asarray(weights).sum(-1), np.ones(len(lengths)))
  expected_aux = set()
  if spec.location is not None:
    expected_aux |= {'mu', 'sigma', 'step'}
  if spec.mixes:
    expected_aux.add('mix')
  assert set(aux) == expected_aux
  for key in aux:
    assert_close(aux[key], e_aux[key])


@pytest.mark.parametrize('name', ['content', 'mix_onestep_pr', 'locattn_s', 'mix_locattn'])
@pytest.mark.parametrize('t', [0, 2])
def test_fold_params(name, t):
  """`fold_params`' exact folds: W_q into the content keys, W_l into the
  sigma/rho read-outs, and a following linear map (out_next) into f_o."""
  inputs = make_step_inputs(20 + t, name, t)
  spec, params, encoded, values, lengths, h, pa_prev = inputs
  out_next = normal(np.random.default_rng(t), 16, 5)
  e_out, e_weights, e_pa, e_aux = ref_attention_step(*inputs, t)
  folded = attention.fold_params(spec, params, out_next)
  assert (folded.query is None) == (spec.scores is attention.CONTENT or spec.scores is None)
  if spec.location is not None:
    assert folded.readout_kernel.shape == (16, 1 + spec.location.num_rho)
  out, weights, carry, aux = run_step(*inputs, t, out_next=out_next)
  assert_close(weights, e_weights)
  assert_close(out, e_out @ f64(out_next))
  assert_close(carry.pa_prev, e_pa)
  for key in aux:
    assert_close(aux[key], e_aux[key])


def test_locattn_s_first_step_uses_bias_not_pa():
  """LocAttn S at t = 1 ignores pa_0; at t > 1 it ignores the sigmoid bias."""
  spec, params, keys, values, lengths, h, _ = make_step_inputs(5, 'locattn_s', 1)
  pa_a = np.full(4, 0.1, np.float32)
  pa_b = np.full(4, 0.9, np.float32)
  first_a = run_step(spec, params, keys, values, lengths, h, pa_a, 0)[3]['mu']
  first_b = run_step(spec, params, keys, values, lengths, h, pa_b, 0)[3]['mu']
  assert_close(first_a, first_b)
  later_a = run_step(spec, params, keys, values, lengths, h, pa_a, 2)[3]['mu']
  later_b = run_step(spec, params, keys, values, lengths, h, pa_b, 2)[3]['mu']
  assert np.all(np.abs(np.asarray(later_a) - np.asarray(later_b)) > 1e-3)


# ===========================================================================
# Every kernel under jax.jit, jax.vmap and jax.grad.
# ===========================================================================
def _step_case(name, t):
  def make(rng):
    seed = int(rng.integers(1 << 30))
    spec, params, encoded, values, lengths, h, pa = make_step_inputs(seed, name, t, dim=8)
    return params, encoded, values, lengths, h, pa, np.int32(t)

  def fn(params, encoded, values, lengths, h, pa, t):
    spec = variants.get(name)
    out, weights, carry, aux = run_step(spec, params, encoded, values, lengths, h, pa, t)
    return out, weights, carry.pa_prev, aux
  return fn, make


TRANSFORM_CASES = {
    'softstair': (attention.softstair, lambda r: (uniform(r, 4, 5, low=-2, high=2),)),
    'leaky_clamp': (attention.leaky_clamp, lambda r: (uniform(r, 7, low=-2, high=3),)),
    'leaky_clamp_custom': (lambda x: attention.leaky_clamp(x, -1.0, 2.0, 0.05),
                           lambda r: (uniform(r, 7, low=-3, high=4),)),
    'stepsize': (attention.stepsize, lambda r: (random_lengths(r),)),
    'normalized_positions': (lambda n: attention.normalized_positions(n, 6),
                             lambda r: (random_lengths(r),)),
    'location_sigma': (attention.location_sigma, lambda r: (normal(r, 3), random_lengths(r))),
    'gaussian_location_attention': (
        attention.gaussian_location_attention,
        lambda r: ragged_location_inputs(r, random_lengths(r), 6)),
    'attended_position': (attention.attended_position,
                          lambda r: (uniform(r, 3, 6), uniform(r, 3, 6))),
    'masked_softmax': (attention.masked_softmax,
                       lambda r: (normal(r, 3, 6), np.arange(6) < random_lengths(r)[:, None])),
    'content_scores': (attention.content_scores, lambda r: (normal(r, 3, 8), normal(r, 3, 6, 8))),
    'sinusoidal_embedding': (lambda p: attention.sinusoidal_embedding(p, 8),
                             lambda r: (r.integers(-9, 9, 5).astype(np.int32),)),
    'relative_scores': (attention.relative_scores, lambda r: (
        normal(r, 3, 8), normal(r, 3, 6, 8), normal(r, 6, 8), normal(r, 8, 8),
        normal(r, 8), normal(r, 8))),
    'rotary_embedding': (attention.rotary_embedding, lambda r: (
        normal(r, 3, 6, 8), r.integers(-5, 9, (1, 6)).astype(np.int32))),
    'reverse_valid': (attention.reverse_valid, lambda r: (normal(r, 3, 6, 2), random_lengths(r))),
    'direction_gate': (attention.direction_gate, lambda r: (normal(r, 3),)),
    'direction_mixing': (attention.direction_mixing, lambda r: (
        normal(r, 3, 6, 4), random_lengths(r), uniform(r, 3))),
    'content_mixing': (attention.content_mixing, lambda r: (
        uniform(r, 3, 6), uniform(r, 3, 6), uniform(r, 3))),
    **{f'step_{k}': ((lambda fn: lambda rho, g: fn(rho, g))(fn),
                     lambda r: (normal(r, 5, scale=2.0), normal(r)))
       for k, fn in STEP_FUNCTIONS.items()},
    **{f'location_mu_{k}': (
        (lambda rule: lambda rho, pa, ss, first, g: attention.location_mu(
            rule, rho, pa, ss, first, {'gate_logit': g} if rule.params else None))(rule),
        (lambda rule: lambda r: (normal(r, 4, rule.num_rho, scale=2.0), uniform(r, 4),
                                 uniform(r, 4, low=0.1, high=1.0), np.bool_(r.random() < 0.5),
                                 normal(r)))(rule))
       for k, rule in attention.LOCATION_RULES.items()},
    'attention_step_relative_t2': _step_case('relative', 2),
    'attention_step_bi_rope_t1': _step_case('bi_rope', 1),
    'attention_step_mix_mono_pr_t0': _step_case('mix_mono_pr', 0),
    'attention_step_mix_locattn_s_t3': _step_case('mix_locattn_s', 3),
}


@pytest.mark.parametrize('name', sorted(TRANSFORM_CASES))
def test_kernel_under_jit_vmap_grad(name):
  fn, make = TRANSFORM_CASES[name]
  check_jit_vmap_grad(fn, make)


@pytest.mark.parametrize('mu', [0.5, 1.0, 1.3, 2.0, 1e3, -5.0])
def test_gaussian_gradient_is_finite_when_mu_leaves_the_input(mu):
  """Regression: the direct λ/(Σλ+ε) form had NaN gradients once every weight
  underflowed (XLA:CPU flushes the ~1e-40 denominator to 0); MonoAttn on Inv
  ReCopy hit a NaN loss at epoch 1. Values must still equal the direct form."""
  length, sigma = 40, 0.27 / 40
  positions = np.arange(length) / (length - 1)
  mask = np.arange(length) < 35

  def weighted(m, s):
    lam = attention.gaussian_location_attention(m, s, jnp.asarray(positions, jnp.float32),
                                        jnp.asarray(mask))
    return jnp.sum(lam * jnp.arange(length))

  grads = jax.grad(weighted, argnums=(0, 1))(jnp.float32(mu), jnp.float32(sigma))
  assert all(np.isfinite(np.asarray(g)) for g in grads)
  z = (positions - mu) / sigma
  lam = np.exp(-0.5 * z * z) * mask
  expected = (lam / (lam.sum() + 1e-20) * np.arange(length)).sum()
  np.testing.assert_allclose(float(weighted(jnp.float32(mu), jnp.float32(sigma))), expected,
                             rtol=1e-5, atol=1e-5)


# ===========================================================================
# The location read-out and the relative sinusoids follow the query/key width.
# ===========================================================================
def test_location_readout_and_relative_kernel_follow_qk_dim():
  """W_l is [D, Q] (the authors' position_state_linear [Q, D]), so w_sigma, W_rho
  read a Q-wide l_t; W_r is [D, Q] (their forward_position_linear projects D-wide
  sinusoids to Q)."""
  dims = attention.Dims(model=16, qk=6, encoded=16)
  shapes = {p.name: p.shape(dims) for name in ('mix_locattn', 'relative')
            for p in variants.get(name).param_defs()}
  assert shapes['loc_kernel'] == (16, 6) and shapes['loc_bias'] == (6,)
  assert shapes['sigma_kernel'] == (6, 1) and shapes['rho_kernel'] == (6, 3)
  assert shapes['rel_kernel'] == (16, 6)
  assert shapes['content_bias'] == shapes['position_bias'] == (6,)


@pytest.mark.parametrize('name', ['relative', 'bi_rope', 'mix_locattn', 'mix_onestep_pr',
                                  'content'])
@pytest.mark.parametrize('t', [0, 3])
def test_attention_step_with_a_narrower_query_key_width(name, t):
  """Q = 6 < D = 16 (the CFQ size has Q = 128 < D = 256): every score branch and
  location read-out against the references (relative sinusoids D wide)."""
  inputs = make_step_inputs(30 + t, name, t, qk=6)
  out, weights, carry, aux = run_step(*inputs, t)
  e_out, e_weights, e_pa, e_aux = ref_attention_step(*inputs, t)
  assert_close(weights, e_weights)
  assert_close(out, e_out)
  assert_close(carry.pa_prev, e_pa)
  for key in aux:
    assert_close(aux[key], e_aux[key])


# ===========================================================================
# Rows without valid positions (a batch padded to a fixed shape).
# ===========================================================================
# The eight location rules, each alone, and two mixed variants (softmax branch too).
ZERO_LENGTH_VARIANTS = ('locattn', 'locattn_s', 'onestep', 'mono', 'rmono',
                        'onestep_minus_step2', 'onestep_minus_step3', 'onestep_minus_sigmoid',
                        'mix_locattn', 'mix_mono_pr')


def _step_loss(spec, params, encoded, values, lengths, h, pa, t, with_aux):
  out, weights, carry, aux = run_step(spec, params, encoded, values, lengths, h, pa, t)
  loss = jnp.sum(jnp.sin(out)) + jnp.sum(jnp.sin(weights)) + jnp.sum(jnp.sin(carry.pa_prev))
  if with_aux:
    loss = loss + sum(jnp.sum(jnp.sin(v)) for v in aux.values())
  return loss


def test_zero_length_rule_coverage():
  assert {variants.get(n).location.name for n in ZERO_LENGTH_VARIANTS} == set(
      attention.LOCATION_RULES)


@pytest.mark.parametrize('name', ZERO_LENGTH_VARIANTS)
@pytest.mark.parametrize('t', [0, 2])
def test_a_zero_length_row_has_finite_gradients_and_changes_no_other_row(name, t):
  """Row 1 has s = 0 (no valid position). Every gradient is finite (before:
  sigma = inf gave NaN everywhere), the row attends nowhere, and rows 0 and 2 get
  the gradients they get in a batch without row 1."""
  spec, params, encoded, values, lengths, h, pa, = make_step_inputs(
      40 + t, name, t, lengths=(7, 0, 3))
  pa = np.where(lengths > 0, pa, 0.0).astype(np.float32)
  args = (params, encoded, values, h, pa)

  def grads(with_aux, params, encoded, values, h, pa, lengths):
    return jax.grad(lambda *a: _step_loss(spec, a[0], a[1], a[2], lengths, a[3], a[4], t,
                                          with_aux), argnums=(0, 1, 2, 3, 4))(
                                              params, encoded, values, h, pa)
  full = jax.jit(grads, static_argnums=0)(True, *args, lengths)
  for g in jax.tree_util.tree_leaves(full):
    assert np.all(np.isfinite(np.asarray(g))), name
  out, weights, carry, aux = run_step(spec, params, encoded, values, lengths, h, pa, t)
  assert np.all(np.asarray(weights)[1] == 0.0) and float(carry.pa_prev[1]) == 0.0
  assert all(np.all(np.isfinite(np.asarray(v))) for v in aux.values())

  keep = np.array([0, 2])
  without = jax.jit(grads, static_argnums=0)(False, params, encoded[keep], values[keep],
                                             h[keep], pa[keep], lengths[keep])
  with_row = jax.jit(grads, static_argnums=0)(False, *args, lengths)
  # Shared parameters: the empty row adds nothing (its outputs are constant zeros).
  for key in params:
    assert_close(with_row[0][key], without[0][key])
  # Per-row inputs of the other rows: unchanged.
  for got, want in zip(with_row[1:], without[1:]):
    assert_close(np.asarray(got)[keep], want)


def test_location_sigma_of_a_zero_length_row_is_finite():
  raw = jnp.array([0.5, 0.5, -1.0], jnp.float32)
  lengths = jnp.array([4, 0, 0], jnp.int32)
  sigma = attention.location_sigma(raw, lengths)
  grad = jax.grad(lambda r: jnp.sum(attention.location_sigma(r, lengths)))(raw)
  assert np.all(np.isfinite(np.asarray(sigma))) and np.all(np.isfinite(np.asarray(grad)))
  assert_close(sigma[0], ref_sigma(0.5, 4))


# ===========================================================================
# Wrong shapes and masks are one-line errors, not silent broadcasts.
# ===========================================================================
def _b(*shape):
  return jnp.full(shape, 0.5, jnp.float32)


_L = jnp.array([4, 3, 5], jnp.int32)
_POS = attention.normalized_positions(_L, 5)
_MASK = jnp.arange(5)[None, :] < _L[:, None]
_ADDITIVE = jnp.where(_MASK, 0.0, -jnp.inf)      # the 0 / -inf convention


def _step_with(**changes):
  spec, params, encoded, values, lengths, h, pa = make_step_inputs(0, 'mix_onestep', 1)
  folded = attention.fold_params(spec, params)
  memory = attention.make_memory(spec, folded, encoded, values, lengths)
  carry = attention.AttentionCarry(jnp.asarray(pa), jnp.asarray(1, jnp.int32))
  memory = memory._replace(**{k: v for k, v in changes.items() if k in memory._fields})
  carry = carry._replace(**{k: v for k, v in changes.items() if k in carry._fields})
  query = changes.get('query', h)
  return attention.attention_step(spec, folded, memory, query, carry)


WRONG_INPUTS = {
    # kernel call -> the start of its message
    'sigma_column': (lambda: attention.location_sigma(_b(3, 1), _L),
                     'location_sigma: raw must have shape [3] (the shape of lengths), got [3, 1]'),
    'gaussian_mu_column': (lambda: attention.gaussian_location_attention(
        _b(3, 1), _b(3), _POS, _MASK), 'gaussian_location_attention: mu must have shape [3]'),
    'gaussian_sigma_scalar': (lambda: attention.gaussian_location_attention(
        _b(3), _b(), _POS, _MASK), 'gaussian_location_attention: sigma must have shape [3]'),
    'gaussian_additive_mask': (lambda: attention.gaussian_location_attention(
        _b(3), _b(3), _POS, _ADDITIVE), 'gaussian_location_attention: mask must be a boolean'),
    'softmax_additive_mask': (lambda: attention.masked_softmax(_b(3, 5), _ADDITIVE),
                              'masked_softmax: mask must be a boolean'),
    'softmax_mask_row': (lambda: attention.masked_softmax(_b(3, 5), _MASK[:1]),
                         'masked_softmax: mask must have shape [3, 5]'),
    'rho_without_its_axis': (lambda: attention.location_mu(
        attention.LOCATION_RULES['onestep'], _b(3), _b(3), _b(3), jnp.bool_(True)),
        "location_mu: rho must have shape [3, 1] ([B, num_rho] for pa_prev [B]; rule "
        "'onestep' reads 1 rho), got [3]"),
    'rho_too_few': (lambda: attention.location_mu(
        attention.LOCATION_RULES['locattn'], _b(3, 1), _b(3), _b(3), jnp.bool_(True)),
        'location_mu: rho must have shape [3, 3]'),
    'mu_update_column': (lambda: attention.monotonic_mu(_b(3, 1), _b(3), _b(3)),
                         'monotonic_mu: step must have shape [3]'),
    'mixing_column': (lambda: attention.content_mixing(_b(3, 5), _b(3, 5), _b(3, 1)),
                      'content_mixing: mix must have shape [3]'),
    'attended_position': (lambda: attention.attended_position(_b(3, 5), _POS[:1]),
                          'attended_position: positions must have shape [3, 5]'),
    'direction_alpha_scalar': (lambda: attention.direction_mixing(_b(3, 5, 2), _L, _b()),
                               'direction_mixing: alpha must have shape [3]'),
    'reverse_lengths': (lambda: attention.reverse_valid(_b(3, 5, 2), _L[:, None]),
                        'reverse_valid: lengths must have shape [3]'),
    'content_keys': (lambda: attention.content_scores(_b(3, 4), _b(3, 4)),
                     'content_scores: keys must be [B, S, Q] for a query [B, Q]'),
    'relative_kernel': (lambda: attention.relative_scores(
        _b(3, 4), _b(3, 5, 4), _b(5, 8), _b(4, 4), _b(4), _b(4)),
        'relative_scores: rel_embedding must be [S, P] or [B, S, P] with P = 4'),
    'memory_lengths': (lambda: attention.make_memory(
        variants.get('onestep'), None, _b(3, 5, 2), _b(3, 5, 2), _L[:, None]),
        'make_memory: lengths must have shape [3]'),
    'step_carry_column': (lambda: _step_with(pa_prev=_b(4, 1)),
                          'attention_step: carry.pa_prev must have shape [4]'),
    'step_query_vector': (lambda: _step_with(query=_b(16)),
                          'attention_step: query (h_(t-1)) must be [B, D], got [16]'),
    'step_float_mask': (lambda: _step_with(mask=jnp.ones((4, 7), jnp.float32)),
                        'attention_step: mask must be a boolean'),
}


@pytest.mark.parametrize('case', sorted(WRONG_INPUTS))
def test_wrong_shapes_and_masks_are_one_line_errors(case):
  call, message = WRONG_INPUTS[case]
  with pytest.raises(errors.MonolocError) as info:
    call()
  assert str(info.value).startswith(message), str(info.value)
  assert '\n' not in str(info.value)


def test_the_checks_cost_nothing_under_jit():
  """They are static: a jitted kernel traces once and raises while tracing."""
  fn = jax.jit(attention.location_sigma)
  assert fn(_b(3), _L).shape == (3,)
  with pytest.raises(errors.MonolocError):
    fn(_b(3, 1), _L)


# ===========================================================================
# The module's surface, and where direction mixing happens.
# ===========================================================================
# Module-level names that are not public kernels or types.
_NOT_EXPORTED = {'Array', 'DType', 'Initializer', 'Tap', 'apply_tap', 'glorot', 'zeros',
                 'matmul', 'affine', 'weighted_sum'}


def test_all_lists_the_public_kernels():
  exported = set(attention.__all__)
  assert len(exported) == len(attention.__all__)
  for name in exported:
    assert hasattr(attention, name), name
  public = {name for name, value in vars(attention).items()
            if not name.startswith('_') and not inspect.ismodule(value)
            and getattr(value, '__module__', 'monoloc_jax.attention') == 'monoloc_jax.attention'
            and name not in _NOT_EXPORTED}
  assert public <= exported, sorted(public - exported)
  for kernel in ('attention_step', 'gaussian_location_attention', 'location_sigma',
                 'masked_softmax', 'direction_mixing', 'make_memory', 'fold_params',
                 'initial_carry', 'Variant', 'LOCATION_RULES'):
    assert kernel in exported


def test_attention_step_documents_that_direction_mixing_is_the_callers():
  doc = ' '.join(attention.attention_step.__doc__.split())
  assert 'Direction mixing (Eq. 17-18;' in doc and 'is NOT applied here' in doc
  assert 'once per sequence, before the steps' in doc
  assert '`direction_mixing`' in doc and 'keys AND the values' in doc
  memory_doc = ' '.join(attention.make_memory.__doc__.split())
  assert '`direction_mixing`' in memory_doc and 'does not mix directions' in memory_doc


def test_direction_mixing_as_documented_and_what_happens_without_it():
  """For a Bi- variant, memory from e_dir (keys and values) gives the reference step
  on e_dir; memory from e is the same variant at alpha_dir = 1, as documented."""
  spec, params, encoded, values, lengths, h, pa = make_step_inputs(7, 'onestep', 2)
  assert spec.direction_mixing
  alpha = np.array([0.3, 0.9, 0.5, 0.1], np.float32)
  e_dir = np.asarray(attention.direction_mixing(encoded, lengths, alpha))
  v_dir = np.asarray(attention.direction_mixing(values, lengths, alpha))  # values from e_dir
  out, weights, _, _ = run_step(spec, params, e_dir, v_dir, lengths, h, pa, 2)
  e_out, e_weights, _, _ = ref_attention_step(spec, params, e_dir, v_dir, lengths, h, pa, 2)
  assert_close(out, e_out)
  assert_close(weights, e_weights)
  unmixed = run_step(spec, params, encoded, values, lengths, h, pa, 2)[0]
  ones = np.ones(4, np.float32)
  forward_only = run_step(spec, params, np.asarray(attention.direction_mixing(
      encoded, lengths, ones)), np.asarray(attention.direction_mixing(values, lengths, ones)),
      lengths, h, pa, 2)[0]
  assert_close(unmixed, forward_only)
  assert np.max(np.abs(np.asarray(unmixed) - np.asarray(out))) > 1e-3
