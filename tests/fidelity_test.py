"""The choices that differ between the paper's equations and the authors' code.

Each test pins one documented option (BUILD_NOTES.md §2): the authors' code's
non-mixing form of the Mix OneStep/Mono/RMono models, the CFQ size's query/key
width and decoder start state, and Eq. 9's normaliser far past the input.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import compile_options
from monoloc_jax import attention
from monoloc_jax import backbones
from monoloc_jax import errors
from monoloc_jax import variants
from monoloc_jax.backbones import gru
from monoloc_jax.configs import default

VOCAB = 11
FAST = compile_options.fast()
NOT_MIXING_IN_REFERENCE = ('mix_onestep', 'mix_onestep_pr', 'mix_mono', 'mix_mono_pr',
                           'mix_rmono', 'mix_rmono_pr')


def config(**fields):
  c = default.get_config()
  c.update(fields)
  return c


def batch(seed=0, n=6, t=5):
  rng = np.random.default_rng(seed)
  lengths = np.array([3, 6, 5], np.int32)
  src = rng.integers(4, VOCAB, (3, n)).astype(np.int32)
  src[np.arange(n)[None, :] >= lengths[:, None]] = 0
  tgt = rng.integers(4, VOCAB, (3, t)).astype(np.int32)
  return src, lengths, tgt


# ---------------------------------------------------------------------------
# 1. Mix variants as the authors' code ran them.
# ---------------------------------------------------------------------------
def test_authors_code_form_applies_to_exactly_six_variants():
  changed = [name for name in variants.NAMES
             if variants.from_config(config(variant=name, mix_mode='authors_code')).scores
             is not variants.from_config(config(variant=name)).scores]
  assert tuple(changed) == NOT_MIXING_IN_REFERENCE


def test_paper_mode_mixes():
  for name in NOT_MIXING_IN_REFERENCE:
    variant = variants.from_config(config(variant=name))
    assert variant.mixes and variant.scores is attention.CONTENT


def test_unknown_mix_mode_is_a_one_line_error():
  with pytest.raises(errors.MonolocError, match="unknown mix_mode 'both'; valid mix_modes: "
                     'authors_code, paper'):
    variants.from_config(config(variant='mix_onestep', mix_mode='both'))


@pytest.mark.parametrize('name, location_only', [('mix_onestep', 'onestep'),
                                                 ('mix_mono_pr', 'mono'),
                                                 ('mix_rmono', 'rmono')])
def test_authors_code_form_has_no_query_key_and_attends_with_lambda(name, location_only):
  ref = variants.from_config(config(variant=name, mix_mode='authors_code'))
  assert ref.scores is None and not ref.mixes and not ref.position_reference
  assert ref.direction_mixing and ref.location is variants.get(name).location
  assert "(authors' code)" in ref.display_name
  src, lengths, tgt = batch()
  model = gru.Seq2Seq(vocab_size=VOCAB, variant=ref)
  other = gru.Seq2Seq(vocab_size=VOCAB, variant=variants.get(location_only))

  def run(m):
    p = m.init(jax.random.PRNGKey(3), src, lengths, tgt)
    return p, m.apply(p, src, lengths, tgt)
  params, out = jax.jit(lambda: run(model), compiler_options=FAST)()
  other_params, other_out = jax.jit(lambda: run(other), compiler_options=FAST)()
  names = set(params['params']['cross_attention'])
  assert not {'query', 'key', 'mix_kernel', 'mix_bias'} & names
  assert 'mix' not in out.aux
  # The same parameters as the location-only variant, so the same model.
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, other_params)
  np.testing.assert_array_equal(out.logits, other_out.logits)
  # The attention is exactly the Gaussian location weights lambda' of (mu, sigma).
  alpha = np.asarray(out.aux['direction'], np.float64)
  for b in range(3):
    s = int(lengths[b]) + 2
    pos = np.arange(s) / (s - 1)
    for t in range(tgt.shape[1]):
      mu, sigma = float(out.aux['mu'][b, t]), float(out.aux['sigma'][b, t])
      lam = np.exp(-0.5 * ((pos - mu) / sigma) ** 2)
      lam = lam / (lam.sum() + 1e-20)
      expected = alpha[b] * lam + (1 - alpha[b]) * lam[::-1]     # mapped back to the input
      np.testing.assert_allclose(out.attention[b, t, :s], expected, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------
# 2. The CFQ size: query/key width and decoder start state.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('name', ['content', 'relative', 'bi_rope', 'mix_onestep'])
def test_query_key_width_is_qk_dim(name):
  src, lengths, tgt = batch()
  model = gru.Seq2Seq(vocab_size=VOCAB, variant=variants.get(name), hidden_dim=16,
                         embed_dim=8, value_dim=12, qk_dim=6)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), src, lengths, tgt)['params']
  cross = params['cross_attention']
  assert cross['key'].shape == (16, 6) and cross['query'].shape == (16, 6)
  assert cross['out'].shape == (16, 16)
  if 'rel_kernel' in cross:      # W_r projects D-wide sinusoids to Q, as the authors' code
    assert cross['rel_kernel'].shape == (16, 6)
    assert cross['content_bias'].shape == cross['position_bias'].shape == (6,)
  if 'loc_kernel' in cross:      # W_l: [D, Q], so sigma and rho read a Q-wide l_t
    assert cross['loc_kernel'].shape == (16, 6) and cross['loc_bias'].shape == (6,)
    assert cross['sigma_kernel'].shape == (6, 1) and cross['rho_kernel'].shape == (6, 1)


def test_content_scores_are_scaled_by_the_qk_width():
  """c_ti = q.k_i / sqrt(qk) with qk = 4 != D = 8 (Eq. 1), against NumPy."""
  rng = np.random.default_rng(0)
  d, qk, s = 8, 4, 5
  variant = variants.get('content')
  raw = {'out': rng.normal(size=(d, d)), 'key': rng.normal(size=(d, qk)),
         'query': rng.normal(size=(d, qk))}
  raw = {k: v.astype(np.float32) for k, v in raw.items()}
  encoded = rng.normal(size=(1, s, d)).astype(np.float32)
  values = rng.normal(size=(1, s, d)).astype(np.float32)
  h = rng.normal(size=(1, d)).astype(np.float32)
  lengths = np.array([s], np.int32)
  params = attention.fold_params(variant, raw)
  memory = attention.make_memory(variant, params, encoded, values, lengths)
  _, weights, _, _ = attention.attention_step(variant, params, memory, h,
                                              attention.initial_carry(1))
  q = h[0].astype(np.float64) @ raw['query']
  keys = encoded[0].astype(np.float64) @ raw['key']
  c = keys @ q / math.sqrt(qk)
  expected = np.exp(c - c.max()) / np.exp(c - c.max()).sum()
  np.testing.assert_allclose(weights[0], expected, atol=1e-5, rtol=1e-5)


def test_backward_states_init():
  rng = np.random.default_rng(0)
  f0, f1 = (jnp.asarray(rng.normal(size=(3, 8)), jnp.float32) for _ in range(2))
  h0 = gru.backward_states_init([f0, f1], 2)
  expected = np.concatenate([f0[:, 4:], f1[:, 4:]], axis=-1)
  assert len(h0) == 2
  for h in h0:
    np.testing.assert_array_equal(h, expected)
  assert gru.final_states_init([f0, f1], 2) == (f0, f1)
  with pytest.raises(ValueError, match='needs 2 layers'):
    gru.backward_states_init([f0], 1)


def test_two_layer_model_with_backward_states_ignores_forward_final_states():
  """With the reference's start state, the decoder and the direction gate see only
  the encoders' backward states: the logits match a manual run that starts every
  decoder layer from [bwd_0; bwd_1] (checked through `encode`)."""
  src, lengths, tgt = batch()
  kw = dict(vocab_size=VOCAB, variant=variants.get('mix_onestep'), num_layers=2,
            embed_dim=8, hidden_dim=16, value_dim=12, qk_dim=8)
  ref = gru.Seq2Seq(decoder_init='backward_states', **kw)
  ours = gru.Seq2Seq(decoder_init='final_states', **kw)
  params = ref.init(jax.random.PRNGKey(0), src, lengths, tgt)

  def encoder_finals(module, src, lengths):
    n = src.shape[1]
    x = jnp.take(module.embedding, src, axis=0)
    x = jnp.concatenate([jnp.broadcast_to(module.start, (3, 1, 8)), x, jnp.zeros((3, 1, 8))], 1)
    pos = jnp.arange(n + 2)[None, :, None]
    end = (lengths + 1)[:, None, None]
    x = jnp.where(pos == end, module.end, jnp.where(pos > end, 0.0, x))
    return module.encoder(x, lengths + 2)[1]
  finals = ref.apply(params, src, lengths, method=encoder_finals)
  _, _, h0, alpha = ref.apply(params, src, lengths, False, method=ref.encode)
  expected = np.concatenate([finals[0][:, 8:], finals[1][:, 8:]], axis=-1)
  for h in h0:
    np.testing.assert_allclose(h, expected, atol=1e-6)
  _, _, h0_ours, _ = ours.apply(params, src, lengths, False, method=ours.encode)
  assert not np.allclose(h0_ours[0], expected)
  out = ref.apply(params, src, lengths, tgt)
  assert np.all(np.isfinite(out.logits))


def test_cfq_config_uses_the_reference_structure():
  from monoloc_jax.configs import cfq  # pylint: disable=g-import-not-at-top
  c = cfq.get_config()
  assert (c.gru.num_layers, c.hidden_dim, c.qk_dim, c.gru.decoder_init) == (2, 256, 128,
                                                                    'backward_states')


def test_unknown_decoder_init_is_a_one_line_error():
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  from monoloc_jax.vocab import Vocabulary  # pylint: disable=g-import-not-at-top
  c = default.get_config()
  c.gru.decoder_init = 'forward'
  vocab = Vocabulary.from_examples([(('1',), ('1',))])
  with pytest.raises(errors.MonolocError, match="unknown decoder_init 'forward'; valid "
                     'decoder_inits: backward_states, final_states'):
    backbones.from_config(c, vocab)


# ---------------------------------------------------------------------------
# 3. Eq. 9's normaliser far past the end of the input.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('sigmas_past_end', [6.0, 8.0, 9.0, 10.0])
def test_gaussian_tail_is_padding_independent_and_matches_the_direct_form(sigmas_past_end):
  """lambda'_i = lambda_i / (sum_j lambda_j + 1e-20), independent of padding.

  The authors' code divides by sum_j lambda_j + S * 1e-20 with S the padded
  batch width, so its weights there depend on how much padding the batch has;
  ours do not. 8-10 sigma past the last position is where the two differ."""
  s = 30
  sigma = 0.27 / s
  mu = 1.0 + sigmas_past_end * sigma
  got = []
  for pad in (0, 5, 200):
    positions = np.arange(s + pad) / (s - 1)
    mask = np.arange(s + pad) < s
    lam = attention.gaussian_location_attention(
        jnp.float32(mu), jnp.float32(sigma), jnp.asarray(positions, jnp.float32),
        jnp.asarray(mask))
    lam = np.asarray(lam, np.float64)
    assert np.all(lam[s:] == 0.0)
    got.append(lam[:s])
  np.testing.assert_allclose(got[1], got[0], rtol=1e-6, atol=0)
  np.testing.assert_allclose(got[2], got[0], rtol=1e-6, atol=0)
  pos = np.arange(s) / (s - 1)
  direct = np.exp(-0.5 * ((pos - np.float32(mu)) / np.float32(sigma)) ** 2)
  np.testing.assert_allclose(got[0], direct / (direct.sum() + 1e-20), rtol=1e-4, atol=1e-7)
  reference_200 = direct / (direct.sum() + (s + 200) * 1e-20)
  if sigmas_past_end >= 9.0:      # the reference's weights lose mass to the padding term
    assert reference_200.sum() < 0.95 * got[0].sum()


# ---------------------------------------------------------------------------
# 4. MonoAttn's gate: frozen in effect by default, trainable on request.
# ---------------------------------------------------------------------------
def _gate_gradient(mono_gate_init):
  src, lengths, tgt = batch()
  variant = variants.from_config(config(variant='mono', mono_gate_init=mono_gate_init))
  model = gru.Seq2Seq(vocab_size=VOCAB, variant=variant)
  params = model.init(jax.random.PRNGKey(0), src, lengths, tgt)

  def loss(p):
    return jnp.sum(jax.nn.log_softmax(model.apply(p, src, lengths, tgt).logits)[..., 4])
  grads = jax.jit(jax.grad(loss), compiler_options=FAST)(params)
  cross = params['params']['cross_attention']
  return float(cross['gate_logit']), float(grads['params']['cross_attention']['gate_logit'])


def test_mono_gate_default_is_the_reference_init_and_effectively_frozen():
  p, grad = _gate_gradient(-20.0)
  assert p == -20.0
  # sigmoid(-20) ~ 2e-9 weights the sigmoid branch: the gate's gradient is ~1e-11
  # (exactly 0 in the authors' code, whose float32 sigmoid(20) is exactly 1.0).
  assert 0.0 <= abs(grad) < 1e-8


def test_mono_gate_init_zero_makes_the_gate_trainable():
  p, grad = _gate_gradient(0.0)
  assert p == 0.0
  assert abs(grad) > 1e-4
