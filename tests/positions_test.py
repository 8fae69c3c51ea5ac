"""Tests of the Transformer's self-attention position schemes (`backbones.positions`):
the defining property of each, checked by hand, and, for every scheme, the cached
decoder step equal to the parallel pass (greedy decoding and teacher forcing agree).

  none        no position input: the encoder is permutation-equivariant;
  sinusoidal  the vectors are the formula; randomized_* at L = T are the plain ones;
  learned     the table is a parameter and its rows are what is added (clipped past it);
  relative    T5 bucket indices by hand (both directions, the log buckets), the bias;
  alibi       Press et al.'s slopes for H = 8 and H = 6, 3x3 biases by hand;
  rope        scores depend on offsets only (shift every position: the same output);
  randomized  sorted, distinct, within [0, L), per key and per row; fresh in training,
              fixed at evaluation.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import compile_options
from monoloc_jax import errors
from monoloc_jax import rundir
from monoloc_jax import variants
from monoloc_jax.backbones import positions
from monoloc_jax.backbones import transformer
from monoloc_jax.configs import default

FAST = compile_options.fast()
PAD, SOS, EOS = 0, 1, 2
VOCAB = 11
D, H = 16, 2
SRC = np.array([[5, 6, 7, 8, 0, 0], [9, 3, 4, 0, 0, 0], [3, 10, 5, 6, 7, 8]], np.int32)
SRC_LENGTHS = np.array([4, 3, 6], np.int32)
N = SRC.shape[1]
T = N + 2                    # decoder steps: S = T, so a randomized draw at L = T is 0..T-1
B = len(SRC)


def tiny_model(positions_name, variant='onestep', **kwargs):
  sizes = dict(num_layers=2, num_encoder_layers=2, num_heads=H, model_dim=D, mlp_dim=32,
               dropout_rate=0.0, randomized_max_length=64)
  sizes.update(kwargs)
  return transformer.Transformer(vocab_size=VOCAB, variant=variants.get(variant),
                                 positions=positions_name, pad_id=PAD, sos_id=SOS,
                                 eos_id=EOS, **sizes)


def init(model, key=0):
  return model.init(jax.random.PRNGKey(key), SRC, SRC_LENGTHS, method=model.build)


def gold_tgt_in(seed=0):
  rng = np.random.default_rng(seed)
  tgt = rng.integers(3, VOCAB, (B, T)).astype(np.int32)
  return np.concatenate([np.full((B, 1), SOS, np.int32), tgt[:, :-1]], 1)


def assert_rel_close(actual, expected, what, rtol):
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
  scale = max(1.0, float(np.max(np.abs(expected))))
  err = float(np.max(np.abs(actual - expected)))
  assert err <= rtol * scale, f'{what}: max abs diff {err:.3g} > {rtol:g} x {scale:.3g}'


# --------------------------------------------------------------------------
# The table.
# --------------------------------------------------------------------------
def test_the_table_names_every_scheme_once():
  assert positions.POSITIONS == ('none', 'sinusoidal', 'learned', 'relative', 'alibi', 'rope',
                                 'randomized_sinusoidal', 'randomized_rope')
  assert transformer.POSITIONS == positions.POSITIONS
  assert default.get_config().transformer.positions == 'sinusoidal'
  with pytest.raises(errors.MonolocError, match='unknown positions .*valid positionss: alibi'):
    positions.scheme('absolute')


def test_old_config_gets_the_new_fields_defaults():
  """A config.json written before these fields (the flat name of an earlier version
  too) loads with their defaults; bad values are one-line errors."""
  config = rundir.with_defaults({'task': 'copy', 'variant': 'content',
                                 'backbone': 'transformer', 'transformer_positions': 'rope'})
  assert config.transformer.positions == 'rope'
  assert config.transformer.max_positions == positions.MAX_POSITIONS == 512
  assert config.transformer.randomized_max_length == positions.RANDOMIZED_MAX_LENGTH == 2048
  config.transformer.max_positions = 0
  with pytest.raises(errors.MonolocError, match='config.transformer.max_positions: 0'):
    transformer.validate(config)


# --------------------------------------------------------------------------
# Each scheme's defining property.
# --------------------------------------------------------------------------
def _stack(name, index, causal=False, table=None, heads=H, dim=D):
  return positions.prepare(positions.scheme(name), jnp.asarray(index, jnp.int32), table,
                           causal, dim, heads, jnp.float32)


def test_none_has_no_position_input():
  pos = _stack('none', np.arange(5)[None])
  assert pos.absolute is None and pos.rotary is None and pos.bias is None
  assert not any(init(tiny_model('none'))['params'].get(f'{s}_positions') is not None
                 for s in ('encoder', 'decoder'))


@pytest.mark.parametrize('name, equivariant', [('none', True), ('sinusoidal', False),
                                                ('alibi', False), ('rope', False)])
def test_nope_encoder_is_permutation_equivariant(name, equivariant):
  """NoPE: permuting the source tokens permutes the encoder states the same way (START
  and END stay put); any scheme with a position input breaks that."""
  model = tiny_model(name)
  params = init(model)
  perm = np.array([0, 3, 1, 4, 2, 5, 6, 7])     # slots 1..4 (row 0's tokens) permuted
  src = SRC[:1]
  permuted = np.concatenate([[0], src[0]])[perm[:N + 1]][1:][None]
  encode = lambda s: model.apply(params, s, SRC_LENGTHS[:1], method=model.encode)[0]
  got, want = encode(permuted), encode(src)[:, perm]
  if equivariant:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  else:
    assert not np.allclose(got, want, rtol=1e-3, atol=1e-3)


def test_sinusoidal_is_the_formula():
  index = np.array([[0, 1, 2, 7, 40]])
  got = np.asarray(_stack('sinusoidal', index).absolute)[0]
  w = 10000.0 ** (-np.arange(0, D, 2) / D)
  want = np.concatenate([np.sin(index[0, :, None] * w), np.cos(index[0, :, None] * w)], -1)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_learned_rows_are_what_is_added():
  """The tables are parameters ([M, D] per stack); a model whose tables hold the
  sinusoids is the sinusoidal model (so the rows are what is added, in encoder and
  decoder); gradients reach the rows used only; positions past the table reuse its
  last row."""
  learned, sinusoidal = tiny_model('learned', max_positions=20), tiny_model('sinusoidal')
  params = init(learned)
  p = params['params']
  assert p['encoder_positions'].shape == p['decoder_positions'].shape == (20, D)
  sinusoids = np.asarray(positions.sinusoidal_vectors(jnp.arange(20), None, D, jnp.float32))
  with_sinusoids = {'params': dict(p, encoder_positions=sinusoids,
                                   decoder_positions=sinusoids)}
  plain = {'params': {k: v for k, v in p.items() if not k.endswith('_positions')}}
  tgt_in = gold_tgt_in()
  np.testing.assert_allclose(learned.apply(with_sinusoids, SRC, SRC_LENGTHS, tgt_in).logits,
                             sinusoidal.apply(plain, SRC, SRC_LENGTHS, tgt_in).logits,
                             rtol=1e-5, atol=1e-5)
  assert not np.allclose(learned.apply(params, SRC, SRC_LENGTHS, tgt_in).logits,
                         sinusoidal.apply(plain, SRC, SRC_LENGTHS, tgt_in).logits, atol=1e-3)
  grads = jax.grad(lambda q: jnp.sum(learned.apply(q, SRC, SRC_LENGTHS, tgt_in).logits ** 2))(
      params)['params']
  for stack, used in (('encoder', N + 2), ('decoder', T)):
    g = np.abs(np.asarray(grads[f'{stack}_positions'])).sum(-1)
    assert np.all(g[:used] > 0) and np.all(g[used:] == 0), stack
  table = jnp.arange(4 * 3, dtype=jnp.float32).reshape(4, 3)
  got = positions.learned_vectors(jnp.array([[0, 2, 3, 4, 9]]), table, 3, jnp.float32)
  np.testing.assert_array_equal(got[0], np.asarray(table)[[0, 2, 3, 3, 3]])


# relative = key position - query position -> T5's bucket.
T5_ENCODER = {0: 0, -1: 1, -7: 7, -8: 8, -16: 10, -32: 12, -50: 13, -100: 15, -128: 15,
              -1000: 15, 1: 17, 7: 23, 8: 24, 16: 26, 50: 29, 200: 31}
T5_DECODER = {0: 0, -1: 1, -15: 15, -16: 16, -32: 21, -64: 26, -100: 30, -128: 31,
              -1000: 31, 1: 0, 5: 0}


@pytest.mark.parametrize('causal, expected', [(False, T5_ENCODER), (True, T5_DECODER)])
def test_t5_buckets_by_hand(causal, expected):
  """32 buckets, max distance 128. Encoder (bidirectional): 16 per direction, exact
  below 8, then 8 + floor(log(n/8) / log(16) * 8), keys after the query from 16 on.
  Decoder (causal): exact below 16, then 16 + floor(log(n/16) / log(8) * 16); keys after
  the query share bucket 0."""
  rel = np.array(list(expected))
  got = np.asarray(positions.t5_bucket(jnp.asarray(rel), causal))
  np.testing.assert_array_equal(got, np.array(list(expected.values())))


def test_relative_bias_reads_the_table():
  table = jnp.asarray(np.random.default_rng(0).normal(size=(32, 3)), jnp.float32)
  index = np.arange(4)[None]
  for causal in (False, True):
    bias = np.asarray(_stack('relative', index, causal, table, heads=3).bias)
    assert bias.shape == (1, 3, 4, 4)
    for i in range(4):
      for j in range(4):
        bucket = int(positions.t5_bucket(jnp.asarray(j - i), causal))
        np.testing.assert_array_equal(bias[0, :, i, j], np.asarray(table)[bucket])
  params = init(tiny_model('relative'))['params']
  assert params['encoder_positions'].shape == params['decoder_positions'].shape == (32, H)


def test_alibi_slopes_and_biases_by_hand():
  np.testing.assert_array_equal(positions.alibi_slopes(8),
                                [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])
  # H = 6: the 4 slopes of H = 4, then every other slope of H = 8 (Press et al.).
  np.testing.assert_array_equal(positions.alibi_slopes(6),
                                [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8])
  m = np.array([1 / 16, 1 / 256])                                          # H = 2
  encoder = np.asarray(_stack('alibi', np.arange(3)[None]).bias)[0]
  decoder = np.asarray(_stack('alibi', np.arange(3)[None], causal=True).bias)[0]
  distance = np.array([[0, 1, 2], [1, 0, 1], [2, 1, 0]])
  past = np.array([[0, 0, 0], [1, 0, 0], [2, 1, 0]])
  np.testing.assert_allclose(encoder, -m[:, None, None] * distance, rtol=1e-7)
  np.testing.assert_allclose(decoder, -m[:, None, None] * past, rtol=1e-7)
  assert np.array_equal(encoder, np.swapaxes(encoder, 1, 2))               # symmetric
  assert np.all(np.triu(decoder[0], 1) == 0)                                # causal
  assert not init(tiny_model('alibi'))['params'].get('encoder_positions')


def test_rope_scores_depend_only_on_offsets():
  """Rotating queries and keys by positions p + k (every k) leaves q_i . k_j unchanged;
  so a whole self-attention pass at shifted positions gives the same output."""
  rng = np.random.default_rng(0)
  q, k = (jnp.asarray(rng.normal(size=(2, 5, H, 8)), jnp.float32) for _ in range(2))
  index = jnp.asarray([[0, 1, 2, 3, 4]])
  scores = lambda shift: jnp.einsum('bthk,bshk->bhts', positions.rotate(q, index + shift),
                                    positions.rotate(k, index + shift))
  for shift in (1, 7, 100):
    np.testing.assert_allclose(scores(shift), scores(0), rtol=1e-4, atol=1e-4)
  assert not np.allclose(scores(0), jnp.einsum('bthk,bshk->bhts', q, k), atol=1e-3)
  arrays = transformer.SelfAttentionArrays(*(jnp.asarray(rng.normal(size=s), jnp.float32)
                                             for s in [(D, H, 8)] * 3 + [(H, 8, D)]))
  x = jnp.asarray(rng.normal(size=(2, 5, D)), jnp.float32)
  mask = jnp.ones((1, 5, 5), bool)
  run = lambda shift: transformer.self_attention(arrays, x, mask,
                                                 _stack('rope', index + shift))
  np.testing.assert_allclose(run(13), run(0), rtol=1e-4, atol=1e-4)
  assert not np.allclose(run(0), transformer.self_attention(arrays, x, mask, _stack(
      'none', index)), atol=1e-3)


def test_randomized_positions_sorted_distinct_in_range_and_keyed():
  key = jax.random.PRNGKey(3)
  draw = np.asarray(positions.random_index(key, 4, 10, 50))
  assert draw.shape == (4, 10) and draw.dtype == np.int32
  assert np.all(np.diff(draw, axis=1) > 0)                                 # sorted, distinct
  assert draw.min() >= 0 and draw.max() < 50
  assert len({tuple(r) for r in draw}) == 4                                 # rows differ
  np.testing.assert_array_equal(draw, positions.random_index(key, 4, 10, 50))
  assert not np.array_equal(draw, positions.random_index(jax.random.PRNGKey(4), 4, 10, 50))
  # Row b's draw depends on the key and b only, not on the batch size.
  np.testing.assert_array_equal(draw[:2], positions.random_index(key, 2, 10, 50))
  # Spread over the whole range, not 0..T-1.
  assert np.asarray(positions.random_index(key, 64, 10, 50)).max() > 40
  np.testing.assert_array_equal(positions.random_index(key, 2, 10, 10),
                                np.tile(np.arange(10), (2, 1)))
  with pytest.raises(errors.MonolocError, match='randomized_max_length=10 is smaller'):
    positions.random_index(key, 2, 11, 10)


@pytest.mark.parametrize('name, plain', [('randomized_sinusoidal', 'sinusoidal'),
                                         ('randomized_rope', 'rope')])
def test_randomized_schemes_draw_at_training_and_test(name, plain):
  """At L = T (every stack's slots are the whole range) a randomized scheme is its
  plain one; at a larger L its positions are drawn: a new draw per training key, the
  same fixed draw at every evaluation, a 'positions' rng overriding both."""
  tgt_in = gold_tgt_in()
  params = init(tiny_model(name))
  apply = lambda m, **kw: np.asarray(m.apply(params, SRC, SRC_LENGTHS, tgt_in, **kw).logits)
  np.testing.assert_allclose(apply(tiny_model(name, randomized_max_length=T)),
                             apply(tiny_model(plain)), rtol=1e-5, atol=1e-5)
  model = tiny_model(name)
  evaluation = apply(model)
  np.testing.assert_array_equal(evaluation, apply(model))
  assert not np.allclose(evaluation, apply(tiny_model(plain)), atol=1e-3)
  train = [apply(model, train=True, rngs={'dropout': jax.random.PRNGKey(k)}) for k in (0, 1)]
  assert not np.allclose(train[0], train[1], atol=1e-3)
  keyed = [apply(model, rngs={'positions': jax.random.PRNGKey(k)}) for k in (0, 0, 1)]
  np.testing.assert_array_equal(keyed[0], keyed[1])
  assert not np.allclose(keyed[0], keyed[2], atol=1e-3)


# --------------------------------------------------------------------------
# Every scheme: the cached decoder step is the parallel pass; greedy is its argmax path.
# --------------------------------------------------------------------------
EXTRA_SRC = 2


@functools.lru_cache(maxsize=None)
def forms(name):
  """In float64: the parallel pass and the cached step on the gold inputs, greedy
  decoding, the parallel pass on greedy's own tokens, and (for the schemes whose
  positions are not drawn) the parallel pass EXTRA_SRC padding columns wider."""
  model = tiny_model(name, dtype=jnp.float64, param_dtype=jnp.float64)
  tgt_in = gold_tgt_in()
  wide = np.pad(SRC, ((0, 0), (0, EXTRA_SRC)))

  def run(params):
    greedy = model.apply(params, SRC, SRC_LENGTHS, T, method=model.greedy)
    own = jnp.concatenate([jnp.full((B, 1), SOS, jnp.int32), greedy.tokens[:, :-1]], 1)
    return dict(parallel=model.apply(params, SRC, SRC_LENGTHS, tgt_in),
                steps=model.apply(params, SRC, SRC_LENGTHS, tgt_in,
                                  method=model.teacher_forced_steps),
                greedy=greedy, own=model.apply(params, SRC, SRC_LENGTHS, own),
                wide=model.apply(params, wide, SRC_LENGTHS, tgt_in))
  with jax.enable_x64(True):
    params = init(model)
    return jax.device_get(jax.jit(run, compiler_options=FAST)(params))


@pytest.mark.parametrize('name', positions.POSITIONS)
def test_cached_step_equals_parallel_pass(name):
  r = forms(name)
  assert_rel_close(r['steps'].logits, r['parallel'].logits, 'logits', 1e-9)
  assert_rel_close(r['steps'].aux['layer_attention'], r['parallel'].aux['layer_attention'],
                   'layer_attention', 1e-9)
  tokens = np.asarray(r['greedy'].tokens)
  argmax = np.asarray(r['own'].logits).argmax(-1)
  for row in range(B):
    eos = np.flatnonzero(argmax[row] == EOS)
    stop = eos[0] + 1 if len(eos) else T
    np.testing.assert_array_equal(tokens[row, :stop], argmax[row, :stop])
    assert_rel_close(r['greedy'].attention[row, :stop], r['own'].attention[row, :stop],
                     'greedy attention', 1e-9)
  if not positions.scheme(name).randomized:        # a draw depends on the padded width
    assert_rel_close(r['wide'].logits, r['parallel'].logits, 'padding columns', 1e-9)
