"""Tests of the Flax seq2seq model (the paper's §3) with each of the 21 variants.

To keep CPU compile time low, everything a variant needs (init, teacher forcing
and greedy decoding on a batch and on the same batch with extra padding,
teacher forcing on greedy's own tokens, a dropout pass and the gradient of the
loss) is computed by ONE jitted function per variant, compiled with XLA's cheap
optimisation level and cached; the tests below only read its results.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ml_collections

from monoloc_jax import attention
from monoloc_jax import backbones
from monoloc_jax import variants
from monoloc_jax.backbones import gru

# Cheap XLA compilation: these tests are compile-bound on CPU, not run-bound.
FAST = {'xla_backend_optimization_level': 0, 'xla_llvm_disable_expensive_passes': True}
TOL = dict(atol=1e-5, rtol=1e-5)

PAD, SOS, EOS = 0, 1, 2
VOCAB = 11
SRC_LENGTHS = np.array([3, 6, 5], np.int32)      # real source tokens, N = 6
TGT_LENGTHS = np.array([5, 2, 4], np.int32)      # real decoder steps, T = 5
N, T = 6, 5
EXTRA_SRC, EXTRA_TGT = 4, 3
GREEDY_STEPS = 8
LOCATION_AUX = ('mu', 'sigma', 'step', 'mix')

# The paper's models, in the registry's order.
SLUGS = (
    'content', 'relative', 'bi_relative', 'bi_rope', 'locattn', 'locattn_s',
    'mix_locattn', 'mix_locattn_s', 'mix_locattn_s_pr', 'onestep', 'mix_onestep',
    'mix_onestep_pr', 'mono', 'mix_mono', 'mix_mono_pr', 'rmono', 'mix_rmono',
    'mix_rmono_pr', 'onestep_minus_step2', 'onestep_minus_step3',
    'onestep_minus_sigmoid')


def assert_close(actual, expected):
  np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), **TOL)


def make_batch(seed=0):
  """Ragged source/target ids with pad 0, and the same batch with extra padding."""
  rng = np.random.default_rng(seed)
  batch = len(SRC_LENGTHS)
  src = rng.integers(4, VOCAB, (batch, N)).astype(np.int32)
  src[np.arange(N)[None, :] >= SRC_LENGTHS[:, None]] = PAD
  tgt_out = rng.integers(4, VOCAB, (batch, T)).astype(np.int32)
  tgt_out[np.arange(batch), TGT_LENGTHS - 1] = EOS
  tgt_out[np.arange(T)[None, :] >= TGT_LENGTHS[:, None]] = PAD
  tgt_in = np.concatenate([np.full((batch, 1), SOS, np.int32), tgt_out[:, :-1]], 1)
  tgt_in[np.arange(T)[None, :] >= TGT_LENGTHS[:, None]] = PAD
  src_pad = np.pad(src, ((0, 0), (0, EXTRA_SRC)))
  tgt_pad = np.pad(tgt_in, ((0, 0), (0, EXTRA_TGT)))
  return src, tgt_in, tgt_out, src_pad, tgt_pad


def masked_xent(logits, targets):
  """Mean token cross-entropy over non-pad targets."""
  logp = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  mask = (targets != PAD).astype(logits.dtype)
  return jnp.sum(nll * mask) / jnp.sum(mask)


@functools.lru_cache(maxsize=None)
def run_variant(name):
  """All the passes the tests need for variant `name`, from one compiled function."""
  model = gru.Seq2Seq(vocab_size=VOCAB, variant=variants.get(name))
  src, tgt_in, tgt_out, src_pad, tgt_pad = make_batch()
  lens = SRC_LENGTHS

  def everything(key, src, tgt_in, tgt_out, src_pad, tgt_pad):
    init_key, dropout_key = jax.random.split(key)
    params = model.init(init_key, src, lens, tgt_in)
    greedy = model.apply(params, src, lens, GREEDY_STEPS, method=model.greedy)
    fed = jnp.concatenate([jnp.full((src.shape[0], 1), SOS, jnp.int32),
                           greedy.tokens[:, :-1]], axis=1)

    def loss(p):
      out = model.apply(p, src, lens, tgt_in, train=True, rngs={'dropout': dropout_key})
      return masked_xent(out.logits, tgt_out), out.logits
    (loss_value, train_logits), grads = jax.value_and_grad(loss, has_aux=True)(params)

    # The same loss through the hand-written decoder backward (`tapped_scan`).
    custom = model.clone(decoder_backward='custom')
    custom_grads = jax.grad(lambda p: masked_xent(custom.apply(
        p, src, lens, tgt_in, train=True, rngs={'dropout': dropout_key}).logits, tgt_out))(params)
    return dict(
        params=params,
        tf=model.apply(params, src, lens, tgt_in),
        tf_pad=model.apply(params, src_pad, lens, tgt_pad),
        greedy=greedy,
        greedy_pad=model.apply(params, src_pad, lens, GREEDY_STEPS, method=model.greedy),
        tf_fed=model.apply(params, src, lens, fed),
        loss=loss_value, train_logits=train_logits, grads=grads,
        custom_grads=custom_grads,
        built=(backbones.init_params(model, init_key, src_pad, lens)
               if name in BUILD_CHECKED else None))

  fn = jax.jit(everything, compiler_options=FAST)
  # One init key per variant: untrained greedy decoding then stops early in
  # some rows and never in others (test_greedy_cases_cover_early_eos_and_no_eos).
  key = jax.random.PRNGKey(variants.NAMES.index(name))
  return jax.device_get(fn(key, src, tgt_in, tgt_out, src_pad, tgt_pad))


def expected_aux_keys(name):
  spec = variants.get(name)
  keys = {'direction'}
  if spec.location is not None:
    keys |= {'mu', 'sigma', 'step'}
  if spec.mixes:
    keys.add('mix')
  return keys


# One variant of each parameter family: location recurrence, mixing with PR, relative with
# direction mixing (tests/authors_init_test.py checks every variant's parameter tree).
BUILD_CHECKED = ('onestep', 'mix_mono_pr', 'bi_relative')


@pytest.mark.parametrize('name', BUILD_CHECKED)
def test_init_params_equals_init_through_the_decoder(name):
  """`backbones.init_params` (`Seq2Seq.build`, the decoder not run; another batch width)
  draws every parameter `init` through the teacher-forced pass draws, bit for bit."""
  r = run_variant(name)
  full, built = r['params']['params'], r['built']
  assert jax.tree_util.tree_structure(full) == jax.tree_util.tree_structure(built)
  for a, b in zip(jax.tree_util.tree_leaves(full), jax.tree_util.tree_leaves(built)):
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------
# 1. Padding invariance, every variant.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('name', variants.NAMES)
def test_padding_invariance(name):
  r = run_variant(name)
  tf, tf_pad = r['tf'], r['tf_pad']
  s = SRC_LENGTHS + 2                               # START ... END
  assert tf.logits.shape == (3, T, VOCAB)
  assert tf_pad.logits.shape == (3, T + EXTRA_TGT, VOCAB)
  assert tf.attention.shape == (3, T, N + 2)
  assert tf_pad.attention.shape == (3, T + EXTRA_TGT, N + 2 + EXTRA_SRC)
  assert set(tf.aux) == set(tf_pad.aux) == expected_aux_keys(name)
  assert np.all(np.isfinite(tf.logits)) and np.all(np.isfinite(tf_pad.logits))
  assert_close(tf_pad.aux['direction'], tf.aux['direction'])
  for b in range(3):
    t, n = TGT_LENGTHS[b], s[b]
    assert_close(tf_pad.logits[b, :t], tf.logits[b, :t])
    assert_close(tf_pad.attention[b, :t, :n], tf.attention[b, :t, :n])
    assert_close(tf.attention[b, :t, :n].sum(-1), np.ones(t))
    assert np.all(tf.attention[b, :, n:] == 0.0)
    assert np.all(tf_pad.attention[b, :, n:] == 0.0)
    for key in LOCATION_AUX:
      if key in tf.aux:
        assert tf_pad.aux[key].shape == (3, T + EXTRA_TGT)
        assert_close(tf_pad.aux[key][b, :t], tf.aux[key][b, :t])

  greedy, greedy_pad = r['greedy'], r['greedy_pad']
  assert greedy.tokens.shape == greedy_pad.tokens.shape == (3, GREEDY_STEPS)
  np.testing.assert_array_equal(greedy_pad.tokens, greedy.tokens)
  for b in range(3):
    n = s[b]
    assert_close(greedy_pad.attention[b, :, :n], greedy.attention[b, :, :n])
    assert np.all(greedy_pad.attention[b, :, n:] == 0.0)
  for key in LOCATION_AUX:
    if key in greedy.aux:
      assert_close(greedy_pad.aux[key], greedy.aux[key])


# ---------------------------------------------------------------------------
# 2. Greedy decoding == teacher forcing on greedy's own tokens.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('name', variants.NAMES)
def test_greedy_matches_teacher_forcing(name):
  r = run_variant(name)
  greedy, tf = r['greedy'], r['tf_fed']
  predicted = np.argmax(tf.logits, axis=-1)
  for b in range(3):
    tokens = greedy.tokens[b]
    eos = np.flatnonzero(tokens == EOS)
    stop = eos[0] + 1 if eos.size else GREEDY_STEPS   # up to and including <eos>
    np.testing.assert_array_equal(predicted[b, :stop], tokens[:stop])
    assert np.all(tokens[stop:] == PAD)               # <pad> after <eos>
    assert_close(tf.attention[b, :stop], greedy.attention[b, :stop])
    for key in LOCATION_AUX:
      if key in greedy.aux:
        assert_close(tf.aux[key][b, :stop], greedy.aux[key][b, :stop])


def test_greedy_cases_cover_early_eos_and_no_eos():
  """The comparisons above saw rows that stop early and rows that never stop."""
  stops = [np.flatnonzero(run_variant(name)['greedy'].tokens[b] == EOS).size
           for name in variants.NAMES for b in range(3)]
  assert any(n > 0 for n in stops) and any(n == 0 for n in stops)
  first = [np.flatnonzero(run_variant(name)['greedy'].tokens[b] == EOS)[0]
           for name in variants.NAMES for b in range(3)
           if np.any(run_variant(name)['greedy'].tokens[b] == EOS)]
  assert any(0 < i < GREEDY_STEPS - 1 for i in first)


def test_greedy_stops_at_eos():
  """With <eos> made the argmax, greedy emits it once, then only <pad>."""
  model = gru.Seq2Seq(vocab_size=VOCAB, variant=variants.get('content'))
  src = make_batch()[0]
  params = run_variant('content')['params']
  params = jax.tree_util.tree_map(lambda x: x, params)     # a mutable copy
  bias = np.array(params['params']['vocab_bias'])
  bias[EOS] = 1e3
  params['params']['vocab_bias'] = bias
  out = jax.jit(lambda p, s: model.apply(p, s, SRC_LENGTHS, 4, method=model.greedy),
                compiler_options=FAST)(params, src)
  np.testing.assert_array_equal(out.tokens[:, 0], EOS)
  np.testing.assert_array_equal(out.tokens[:, 1:], PAD)


# ---------------------------------------------------------------------------
# 3. Gradients with dropout on.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('name', variants.NAMES)
def test_gradients_finite_and_reach_attention(name):
  r = run_variant(name)
  assert np.isfinite(r['loss'])
  # Dropout was really on in the training pass.
  assert np.max(np.abs(r['train_logits'] - r['tf'].logits)) > 1e-4
  for path, grad in jax.tree_util.tree_leaves_with_path(r['grads']):
    assert np.all(np.isfinite(grad)), jax.tree_util.keystr(path)
  attention_grads = r['grads']['params']['cross_attention']
  spec = variants.get(name)
  names = set(attention_grads)
  # Each branch of the variant receives gradient. (Not every leaf: a leaf
  # behind a ReLU, e.g. sigma's or RMono's step, can be legitimately dead on
  # a small random batch.)
  reached = ['out', 'value', 'inter_value']
  if spec.scores is not None:
    reached.append('query')
  if spec.scores is attention.RELATIVE:
    reached += ['rel_kernel', 'content_bias', 'position_bias']
  if spec.location is not None:
    reached.append('loc_kernel')
  if spec.mixes:
    reached.append('mix_kernel')
  if spec.direction_mixing:
    reached.append('direction')
  for key in reached:
    leaves = jax.tree_util.tree_leaves(attention_grads[key])
    assert any(np.any(g != 0.0) for g in leaves), f'{name}: zero gradient for {key}'
  assert ('query' in names) == (spec.scores is not None)
  assert ('rho_kernel' in names) == (spec.location is not None)
  assert ('mix_kernel' in names) == spec.mixes
  assert ('direction' in names) == spec.direction_mixing
  assert ('rel_kernel' in names) == (spec.scores is attention.RELATIVE)
  assert ('gate_logit' in names) == (spec.location is attention.LOCATION_RULES['mono'])


def relative_error(actual, expected) -> float:
  """max |actual - expected| / max |expected| (0 when both are 0)."""
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  scale = np.max(np.abs(expected))
  return float(np.max(np.abs(actual - expected)) / scale) if scale > 0 else float(
      np.max(np.abs(actual)))


@pytest.mark.parametrize('name', variants.NAMES)
def test_custom_decoder_backward_equals_autodiff(name):
  """The hand-written backward of the decoder scan (`tapped_scan`) gives jax.grad's
  gradients of the training loss: every parameter, ragged batch, dropout on
  (float32; cotangents of the attention and aux outputs, float64 and vmap in
  tests/tapped_scan_test.py)."""
  r = run_variant(name)
  assert r['grads'] is not r['custom_grads']
  custom = jax.tree_util.tree_leaves_with_path(r['custom_grads'])
  autodiff = jax.tree_util.tree_leaves(r['grads'])
  assert len(custom) == len(autodiff)
  # XLA:CPU sums in one fixed order; a GPU's reductions over batch and time take others.
  # On an H100 (2026-11-27) the worst leaf was RMonoAttn's direction-gate bias: 1.6e-5 of
  # its own magnitude, a gradient of 1.7e-3 summed from cancelling terms.
  tolerance = 1e-5 if jax.default_backend() == 'cpu' else 5e-5
  nonzero = 0
  for (path, got), want in zip(custom, autodiff):
    assert relative_error(got, want) < tolerance, (jax.tree_util.keystr(path),
                                                   relative_error(got, want))
    nonzero += bool(np.any(want != 0))
  assert nonzero > len(custom) // 2


# ---------------------------------------------------------------------------
# 4. The registry and its errors.
# ---------------------------------------------------------------------------
def test_registry_has_exactly_the_paper_slugs():
  assert len(variants.VARIANTS) == 21
  assert tuple(variants.NAMES) == SLUGS
  for slug in SLUGS:
    variant = variants.get(slug)
    assert variant is variants.VARIANTS[slug]
    assert variant.name == slug
    assert variant.display_name and variant.display_name != slug
  assert len({v.display_name for v in variants.VARIANTS.values()}) == 21


def _assert_lists_all_names(message):
  for slug in SLUGS:
    assert slug in message, slug


def test_unknown_variant_errors():
  with pytest.raises(ValueError, match='nope') as info:
    variants.get('nope')
  _assert_lists_all_names(str(info.value))
  config = ml_collections.ConfigDict({'variant': 'nope', 'mono_gate_init': -20.0})
  with pytest.raises(ValueError, match='nope') as info:
    variants.from_config(config)
  _assert_lists_all_names(str(info.value))


# ---------------------------------------------------------------------------
# 5. The CFQ size.
# ---------------------------------------------------------------------------
def test_cfq_size_runs_and_is_larger():
  cfq = gru.Seq2Seq(vocab_size=VOCAB, variant=variants.get('mix_mono_pr'), num_layers=2,
                       embed_dim=128, hidden_dim=256, value_dim=512, dropout_rate=0.4)
  src, tgt_in, _, src_pad, _ = make_batch()

  def run(key, src, tgt_in, src_pad):
    params = cfq.init(key, src, SRC_LENGTHS, tgt_in)
    return (params, cfq.apply(params, src, SRC_LENGTHS, tgt_in),
            cfq.apply(params, src, SRC_LENGTHS, GREEDY_STEPS, method=cfq.greedy),
            cfq.apply(params, src_pad, SRC_LENGTHS, GREEDY_STEPS, method=cfq.greedy))
  params, tf, greedy, greedy_pad = jax.device_get(jax.jit(run, compiler_options=FAST)(
      jax.random.PRNGKey(1), src, tgt_in, src_pad))

  assert tf.logits.shape == (3, T, VOCAB) and np.all(np.isfinite(tf.logits))
  assert greedy.tokens.shape == (3, GREEDY_STEPS)
  np.testing.assert_array_equal(greedy_pad.tokens, greedy.tokens)
  s = SRC_LENGTHS + 2
  for b in range(3):
    assert_close(tf.attention[b, :TGT_LENGTHS[b], :s[b]].sum(-1), np.ones(TGT_LENGTHS[b]))
    assert np.all(greedy_pad.attention[b, :, s[b]:] == 0.0)
  p = params['params']
  assert {'fwd_0', 'fwd_1', 'bwd_0', 'bwd_1'} <= set(p['encoder'])
  assert {'decoder_0', 'decoder_1'} <= set(p)
  assert p['embedding'].shape == (VOCAB, 128)
  assert p['cross_attention']['inter_value']['kernel'].shape == (256, 512)

  default_params = run_variant('mix_mono_pr')['params']
  assert backbones.count_params(params) > backbones.count_params(default_params)
  assert default_params['params']['embedding'].shape == (VOCAB, 64)


def test_encoder_input_rows():
  """`input_row_ids` spells START x_1..x_n END 0.. as rows of [embeddings; START;
  END; zeros] (src's own padding is never read), and the encoder given that table
  and the ids equals the encoder given the gathered inputs (layer 0 projects the
  table once and gathers; both layers of a 2-layer encoder are checked)."""
  src = jnp.array([[5, 6, 7], [8, 9, 4]], jnp.int32)
  ids = gru.input_row_ids(src, jnp.array([3, 1]), vocab_size=10)
  np.testing.assert_array_equal(ids, [[10, 5, 6, 7, 11], [10, 8, 11, 12, 12]])
  rng = np.random.default_rng(0)
  table = jnp.asarray(rng.standard_normal((13, 6)), jnp.float32)
  lengths = jnp.array([5, 3])
  encoder = gru.Encoder(hidden=8, num_layers=2)
  params = encoder.init(jax.random.PRNGKey(0), table[ids], lengths)
  gathered = encoder.apply(params, table[ids], lengths)
  via_ids = encoder.apply(params, table, lengths, ids)
  for g, v in zip(jax.tree_util.tree_leaves(gathered), jax.tree_util.tree_leaves(via_ids)):
    np.testing.assert_allclose(v, g, rtol=1e-6, atol=1e-6)
