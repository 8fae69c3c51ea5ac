"""Tests of the Transformer backbone (`monoloc_jax.transformer`) with each of the 21
cross-attention variants.

The parallel teacher-forced form (`Transformer.__call__`: read-outs for all steps at
once, only the location recurrence in a scan) must be the same function as the
step-by-step form (`teacher_forced_steps`: a KV cache, `attention.attention_step`
called plainly per head and layer at every step), on the same weights: logits,
every layer's and head's attention weights and aux values, and the gradients.

As in models_test.py, everything a variant needs is computed by ONE jitted function
per variant (in float64, see RTOL), compiled with XLA's cheap options and cached;
the tests only read its results. Then: the parallel form's only loops hold no
matrix product (jaxpr), options, and a small learning test (Copy, lengths 3-8 ->
12). Whole file: about 100 s on a loaded 2-core CPU.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.extend import core as jax_core

import compile_options
from monoloc_jax import variants
from monoloc_jax.backbones import transformer

# Cheap XLA compilation on CPU, where these tests are compile-bound, not run-bound.
FAST = compile_options.fast()
# The per-variant checks run in float64 (`results`): the two forms sum the same
# products in different orders (one batched product against one per step), and in
# float32 the location kernels amplify that rounding (a Gaussian with sigma =
# 0.27 / s turns a 1e-7 change of mu into a 1e-5 change of the weights; observed:
# up to 1.6e-5 relative on the logits for MonoAttn). In float64 the forms agree
# to about 1e-14, so a tolerance of 1e-9 leaves no room for a real difference.
RTOL = 1e-9
# float32 comparisons (test_options_..., the learning test): relative tolerance.
RTOL32 = 1e-5

PAD, SOS, EOS = 0, 1, 2
VOCAB = 11
SRC_LENGTHS = np.array([3, 6, 4], np.int32)      # real source tokens, N = 6
TGT_LENGTHS = np.array([5, 2, 4], np.int32)      # real decoder steps of the gold targets
N, T = 6, 8                                      # T: decoder steps, greedy's included
EXTRA_SRC = 3
NUM_LAYERS, NUM_HEADS = 2, 2
LOCATION_AUX = ('mu', 'sigma', 'step', 'mix')
B = len(SRC_LENGTHS)
S = N + 2


def tiny_model(variant, **kwargs):
  """A 16-wide model: 2 heads, 1 encoder and NUM_LAYERS decoder layers."""
  sizes = dict(num_layers=NUM_LAYERS, num_encoder_layers=1, num_heads=NUM_HEADS,
               model_dim=16, mlp_dim=32, dropout_rate=0.1)
  sizes.update(kwargs)
  return transformer.Transformer(vocab_size=VOCAB, variant=variant, pad_id=PAD, sos_id=SOS,
                                 eos_id=EOS, **sizes)


def make_batch(seed=0):
  """Ragged source ids with pad 0 (src [B, N]); the same sources EXTRA_SRC columns
  wider (src_wide) and, wider too, with garbage (non-pad) tokens in every padded
  position (src_garbage); gold decoder inputs tgt_in [B, T] with junk (not <pad>)
  after each row's real steps, and tgt_out with <pad> there."""
  rng = np.random.default_rng(seed)
  src = rng.integers(3, VOCAB, (B, N)).astype(np.int32)
  src[np.arange(N)[None, :] >= SRC_LENGTHS[:, None]] = PAD
  tgt_out = rng.integers(3, VOCAB, (B, T)).astype(np.int32)
  tgt_out[np.arange(B), TGT_LENGTHS - 1] = EOS
  tgt_out[np.arange(T)[None, :] >= TGT_LENGTHS[:, None]] = PAD
  tgt_in = np.concatenate([np.full((B, 1), SOS, np.int32), tgt_out[:, :-1]], 1)
  tgt_in[np.arange(T)[None, :] >= TGT_LENGTHS[:, None]] = 7
  src_wide = np.pad(src, ((0, 0), (0, EXTRA_SRC)))
  src_garbage = src_wide.copy()
  padded = np.arange(N + EXTRA_SRC)[None, :] >= SRC_LENGTHS[:, None]
  src_garbage[padded] = rng.integers(3, VOCAB, int(padded.sum()))
  return src, src_wide, src_garbage, tgt_in, tgt_out


def loss_of(logits, tgt_out):
  mask = tgt_out != PAD
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, tgt_out)
  return jnp.sum(ce * mask) / jnp.sum(mask)


def _rows(out, rows):
  """DecodeOutput restricted to batch rows `rows` (a slice)."""
  return jax.tree_util.tree_map(lambda a: a[rows], out)


def init_params(model, key, src):
  """The model's parameters, created without running the decoder (`Transformer.build`;
  the source lengths do not matter)."""
  return model.init(key, src, np.full(src.shape[:1], src.shape[1], np.int32),
                    method=model.build)


def float64_model(name):
  return tiny_model(variants.get(name), dtype=jnp.float64, param_dtype=jnp.float64)


# The variants whose gradients are also taken through the step-by-step form: one per
# path through the replayed read-outs: the step index in the scores and a W_q read
# (relative), RoPE keys and direction mixing (bi_rope), three rho and the clamp
# (locattn), content + mix + position reference + the first-step rule
# (mix_locattn_s_pr), the rule's own array through the tap (mix_mono), OneStepAttn.
GRADIENT_VARIANTS = ('relative', 'bi_rope', 'locattn', 'mix_locattn_s_pr', 'mix_mono',
                     'onestep')


@functools.lru_cache(maxsize=None)
def results(name):
  """Everything the tests read for variant `name`, in float64 (`jax.enable_x64`, a
  float64 model), from one compiled program:

  greedy: greedy decoding of src_wide;
  steps: the step-by-step form on src_wide, rows [:B] fed the gold tgt_in, rows
    [B:] fed greedy's own tokens (and, for GRADIENT_VARIANTS, grad_steps: the
    gradient of the gold rows' loss through it);
  parallel: the parallel form on src_wide (rows [:B], gold tgt_in), src_garbage
    (rows [B:2B], gold) and src_wide (rows [2B:], greedy's own tokens), with
    grad_parallel, the gradient of the gold rows' loss;
  narrow: the parallel form on src, EXTRA_SRC columns narrower (gold tgt_in).
  The parameters are initialised eagerly, outside the program: op by op, each op
  compiled once for all variants (inside it, their initialisation doubled the
  compile time).
  """
  model = float64_model(name)
  src, src_wide, src_garbage, tgt_in, tgt_out = make_batch()
  lengths = SRC_LENGTHS

  def run(params):
    greedy = model.apply(params, src_wide, lengths, T, method=model.greedy)
    own_in = jnp.concatenate([jnp.full((B, 1), SOS, jnp.int32), greedy.tokens[:, :-1]], 1)

    def steps_loss(p):
      out = model.apply(p, jnp.concatenate([src_wide, src_wide]),
                        jnp.concatenate([lengths, lengths]),
                        jnp.concatenate([tgt_in, own_in]), method=model.teacher_forced_steps)
      return loss_of(out.logits[:B], tgt_out), out

    def parallel_loss(p):
      out = model.apply(p, jnp.concatenate([src_wide, src_garbage, src_wide]),
                        jnp.concatenate([lengths] * 3),
                        jnp.concatenate([tgt_in, tgt_in, own_in]))
      return loss_of(out.logits[:B], tgt_out), out
    (_, parallel), grad_parallel = jax.value_and_grad(parallel_loss, has_aux=True)(params)
    out = dict(greedy=greedy, parallel=parallel, grad_parallel=grad_parallel,
               narrow=model.apply(params, src, lengths, tgt_in))
    if name in GRADIENT_VARIANTS:
      (_, out['steps']), out['grad_steps'] = jax.value_and_grad(steps_loss,
                                                                has_aux=True)(params)
    else:
      out['steps'] = steps_loss(params)[1]
    return out
  with jax.enable_x64(True):
    params = init_params(model, jax.random.PRNGKey(0), src)
    out = jax.device_get(jax.jit(run, compiler_options=FAST)(params))
  assert out['parallel'].logits.dtype == np.float64
  out['params'] = jax.device_get(params)
  return out


def assert_rel_close(actual, expected, what, rtol=RTOL):
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
  scale = max(1.0, float(np.max(np.abs(expected))))
  err = float(np.max(np.abs(actual - expected)))
  assert err <= rtol * scale, f'{what}: max abs diff {err:.3g} > {rtol:g} x {scale:.3g}'


@pytest.mark.parametrize('name', variants.NAMES)
def test_parallel_equals_step_by_step(name):
  """Logits, every layer's and head's weights and the aux values (mu, sigma, step,
  mix per layer and head; alpha_dir per layer) agree between the two forms, on the
  gold tokens and on greedy's own."""
  r = results(name)
  for what, par_rows, seq_rows in (('gold', slice(0, B), slice(0, B)),
                                   ('own', slice(2 * B, 3 * B), slice(B, 2 * B))):
    par, seq = _rows(r['parallel'], par_rows), _rows(r['steps'], seq_rows)
    assert_rel_close(par.logits, seq.logits, f'{what} logits')
    assert_rel_close(par.attention, seq.attention, f'{what} attention')
    assert set(par.aux) == set(seq.aux)
    for key in par.aux:
      assert_rel_close(par.aux[key], seq.aux[key], f'{what} {key}')
  variant = variants.get(name)
  expected = set()
  if variant.location is not None:
    expected |= {'mu', 'sigma', 'step'}
  if variant.mixes:
    expected.add('mix')
  assert set(r['steps'].aux) & set(LOCATION_AUX) == expected
  # The location recurrence really moves: mu_t differs between steps.
  if variant.location is not None:
    assert np.ptp(np.asarray(r['steps'].aux['mu'])[0, :, :, 0]) > 1e-3


@pytest.mark.parametrize('name', variants.NAMES)
def test_gradients_finite(name):
  """d loss / d params through the parallel form is finite, and every
  cross-attention array of every layer gets a gradient (nonzero somewhere)."""
  r = results(name)
  for path, g in jax.tree_util.tree_flatten_with_path(r['grad_parallel'])[0]:
    assert np.all(np.isfinite(g)), jax.tree_util.keystr(path)
  for layer in range(NUM_LAYERS):
    cross = r['grad_parallel']['params'][f'cross_attention_{layer}']
    for array, g in jax.tree_util.tree_flatten_with_path(cross)[0]:
      label = jax.tree_util.keystr(array)
      if 'gate_logit' in label:          # MonoAttn's gate starts saturated (sigmoid(-20))
        continue
      assert np.max(np.abs(g)) > 0, (layer, label)


@pytest.mark.parametrize('name', GRADIENT_VARIANTS)
def test_gradients_equal_in_both_forms(name):
  """The replayed read-outs carry their gradients: d loss / d params through the
  parallel form equals the one through the step-by-step form, array by array."""
  r = results(name)
  flat_par = jax.tree_util.tree_flatten_with_path(r['grad_parallel'])[0]
  flat_seq = dict(jax.tree_util.tree_flatten_with_path(r['grad_steps'])[0])
  assert len(flat_par) == len(flat_seq)
  for path, g in flat_par:
    assert_rel_close(g, flat_seq[path], f'grad {jax.tree_util.keystr(path)}')


@pytest.mark.parametrize('name', variants.NAMES)
def test_greedy_is_the_argmax_path_of_the_step_form(name):
  """Greedy tokens are the argmax of the step form (and of the parallel form) fed
  greedy's own tokens, up to the first <eos>; <pad> after it; up to there, greedy's
  attention is that pass's attention. (After a row's <eos> greedy keeps feeding
  that row its argmax, which nothing reads, while the pass is fed <pad>.)"""
  r = results(name)
  tokens = np.asarray(r['greedy'].tokens)
  assert tokens.shape == (B, T) and r['greedy'].logits is None
  own = _rows(r['steps'], slice(B, 2 * B))
  for form, rows in (('steps', slice(B, 2 * B)), ('parallel', slice(2 * B, 3 * B))):
    argmax = np.asarray(r[form].logits[rows]).argmax(-1)
    for row in range(B):
      eos = np.flatnonzero(argmax[row] == EOS)
      stop = eos[0] + 1 if len(eos) else T
      np.testing.assert_array_equal(tokens[row, :stop], argmax[row, :stop], err_msg=form)
      assert np.all(tokens[row, stop:] == PAD)
      if form == 'steps':
        assert_rel_close(r['greedy'].aux['layer_attention'][row, :stop],
                         own.aux['layer_attention'][row, :stop], 'greedy layer_attention')
        assert_rel_close(r['greedy'].attention[row, :stop], own.attention[row, :stop],
                         'greedy attention')


@pytest.mark.parametrize('name', variants.NAMES)
def test_shapes_and_padding_invariance(name):
  """Output shapes; attention weights are 0 on padding and sum to at most 1; neither
  garbage tokens in the padded source positions nor extra padding columns change
  anything."""
  r = results(name)
  par = r['parallel']
  wide = S + EXTRA_SRC
  assert par.logits.shape == (3 * B, T, VOCAB) and par.tokens is None
  assert par.attention.shape == (3 * B, T, wide)
  assert par.aux['layer_attention'].shape == (3 * B, T, NUM_LAYERS, NUM_HEADS, wide)
  assert par.aux['direction'].shape == (3 * B,)
  assert par.aux['layer_direction'].shape == (3 * B, NUM_LAYERS)
  for key in set(par.aux) & set(LOCATION_AUX):
    assert par.aux[key].shape == (3 * B, T, NUM_LAYERS, NUM_HEADS), key
  assert r['greedy'].attention.shape == (B, T, wide)
  assert r['narrow'].attention.shape == (B, T, S)
  attn = np.asarray(par.attention)
  valid = np.arange(wide)[None, None, :] < (np.tile(SRC_LENGTHS, 3) + 2)[:, None, None]
  # Softmax weights sum to 1; Gaussian ones too, unless mu has run so far off the
  # input that every weight underflows (Eq. 9 then gives 0, as the authors' code).
  if variants.get(name).location is None:
    np.testing.assert_allclose(attn.sum(-1), 1.0, atol=1e-12)
  assert np.all(attn >= 0) and np.all(attn.sum(-1) <= 1 + 1e-12)
  assert np.all(attn[~np.broadcast_to(valid, attn.shape)] == 0)
  if not variants.get(name).direction_mixing:
    np.testing.assert_array_equal(par.aux['layer_direction'], 1.0)
  clean, garbage = _rows(par, slice(0, B)), _rows(par, slice(B, 2 * B))
  assert_rel_close(garbage.logits, clean.logits, 'garbage logits')
  assert_rel_close(garbage.attention, clean.attention, 'garbage attention')
  for key in par.aux:
    assert_rel_close(garbage.aux[key], clean.aux[key], f'garbage {key}')
  # EXTRA_SRC fewer padding columns: the same outputs, the same weights on the
  # first S positions (and exactly 0 on the extra ones, checked above).
  narrow = r['narrow']
  assert_rel_close(narrow.logits, clean.logits, 'narrow logits')
  assert_rel_close(narrow.attention, clean.attention[..., :S], 'narrow attention')
  for key in par.aux:
    wide = clean.aux[key][..., :S] if key == 'layer_attention' else clean.aux[key]
    assert_rel_close(narrow.aux[key], wide, f'narrow {key}')


def _primitives(jaxpr):
  """Every primitive name in a jaxpr, sub-jaxprs included."""
  names = []
  for eqn in jaxpr.eqns:
    names.append(eqn.primitive.name)
    for sub in jax_core.jaxprs_in_params(eqn.params):
      names += _primitives(sub)
  return names


def _scans(jaxpr):
  """The bodies of every scan in a jaxpr (nested ones included)."""
  bodies = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'scan':
      bodies.append(eqn.params['jaxpr'].jaxpr)
    for sub in jax_core.jaxprs_in_params(eqn.params):
      bodies += _scans(sub)
  return bodies


@pytest.mark.parametrize('name', ['content', 'bi_relative', 'locattn', 'mix_locattn_s_pr',
                                  'mix_mono', 'onestep'])
def test_parallel_loop_has_no_matrix_product(name):
  """The point of the parallel form: its only loops are the location recurrences, one
  per decoder layer, and they contain no matrix product (dot_general); variants
  without a location rule have no loop at all. The step-by-step form, for contrast,
  does its products inside its loop."""
  model = tiny_model(variants.get(name))
  src, _, _, tgt_in, _ = make_batch()
  params = jax.eval_shape(functools.partial(init_params, model), jax.random.PRNGKey(0), src)
  parallel = jax.make_jaxpr(lambda p: model.apply(p, src, SRC_LENGTHS, tgt_in))(params)
  scans = _scans(parallel.jaxpr)
  assert len(scans) == (NUM_LAYERS if variants.get(name).location is not None else 0)
  for body in scans:
    assert 'dot_general' not in _primitives(body)
  assert 'dot_general' in _primitives(parallel.jaxpr)
  steps = jax.make_jaxpr(lambda p: model.apply(
      p, src, SRC_LENGTHS, tgt_in, method=model.teacher_forced_steps))(params)
  assert any('dot_general' in _primitives(body) for body in _scans(steps.jaxpr))


def test_heads_have_their_own_arrays_and_recurrences():
  """Each head of each layer has its own raw arrays (leading head axis) and its own
  pa_t: the heads' mu trajectories differ; the content branch is run unfolded, so
  the keys are Q = model_dim / num_heads wide, not model_dim."""
  r = results('mix_onestep')
  cross = r['params']['params']['cross_attention_1']
  d, h = 16, NUM_HEADS
  assert cross['loc_kernel'].shape == (h, d, d // h)
  assert cross['query'].shape == (h, d, d // h)
  assert cross['out'].shape == (h, d // h, d)
  assert cross['value'].shape == (d, h, d // h)
  assert cross['direction']['kernel'].shape == (d, 1)
  mu = np.asarray(r['parallel'].aux['mu'])          # [B, T, L, H]
  assert np.max(np.abs(mu[..., 0] - mu[..., 1])) > 1e-3
  assert np.max(np.abs(mu[:, :, 0] - mu[:, :, 1])) > 1e-3
  folded = transformer.kernel_variant(variants.get('mix_onestep'))
  assert not folded.scores.fold_query and folded.location is variants.get('mix_onestep').location


def test_options_dropout_positions_and_build():
  """Dropout is on only in training; RoPE and no self-attention positions run and keep
  the two forms equal; `build` creates the parameters `init` through `__call__`
  creates; a bad option is a one-line error."""
  src, _, _, tgt_in, _ = make_batch()
  variant = variants.get('onestep')
  models = {p: tiny_model(variant, positions=p, num_layers=1) for p in ('rope', 'none')}

  def run(key):
    out = {}
    for p, model in models.items():
      params = init_params(model, key, src)
      out[p] = (model.apply(params, src, SRC_LENGTHS, tgt_in).logits,
                model.apply(params, src, SRC_LENGTHS, tgt_in,
                            method=model.teacher_forced_steps).logits)
      if p == 'rope':
        out['train'] = model.apply(params, src, SRC_LENGTHS, tgt_in, train=True,
                                   rngs={'dropout': key}).logits
        out['build'] = params
        out['init'] = model.init(key, src, SRC_LENGTHS, tgt_in)
    return out
  out = jax.jit(run, compiler_options=FAST)(jax.random.PRNGKey(1))
  for p in models:
    assert_rel_close(out[p][0], out[p][1], f'{p} logits', rtol=RTOL32)
  assert not np.allclose(out['rope'][0], out['none'][0], atol=1e-3)
  assert np.all(np.isfinite(out['train']))
  assert not np.allclose(out['train'], out['rope'][0], atol=1e-3)
  # Transformer.build creates the same parameters as initialising through __call__.
  jax.tree_util.tree_map(np.testing.assert_array_equal, out['build'], out['init'])
  with pytest.raises(Exception, match='positions'):
    tiny_model(variant, positions='absolute').init(jax.random.PRNGKey(0), src, SRC_LENGTHS,
                                                  tgt_in)


# --------------------------------------------------------------------------
# A small real learning test: Copy, trained on lengths 3-8, tested at 12.
# --------------------------------------------------------------------------
COPY_VOCAB = 13          # pad, sos, eos, unused, digits 3..12


def copy_batch(rng, size, low, high, width):
  """Copy examples: source x (lengths in [low, high]), target x <eos>."""
  lengths = rng.integers(low, high + 1, size).astype(np.int32)
  src = np.zeros((size, width), np.int32)
  tgt_in = np.zeros((size, width + 1), np.int32)
  tgt_out = np.zeros((size, width + 1), np.int32)
  for i, n in enumerate(lengths):
    x = rng.integers(3, COPY_VOCAB, n)
    src[i, :n], tgt_out[i, :n], tgt_out[i, n] = x, x, EOS
    tgt_in[i, 0], tgt_in[i, 1:n + 1] = SOS, x
  return src, lengths, tgt_in, tgt_out


def test_onestep_transformer_learns_copy_and_extrapolates():
  """A 1-layer, 4-head, 32-wide Transformer with OneStepAttn cross-attention, trained
  600 steps (batch 4, AdamW, 50 warmup steps then cosine decay from 3e-3) on Copy of
  lengths 3-8, copies length-12 inputs (never seen: 4 more tokens and 4 more decoder
  positions) by greedy decoding.

  Observed on CPU with this very code, seeds 0-29 (32 test inputs each): 29 seeds
  learn the task (in-distribution accuracy 1.0) and the 30th stays at a loss of 0.9;
  at length 12, 27 seeds reach >= 0.90 (21 of them 1.0), the others 0.81, 0.44 and
  0. (Such failures: the direction gate settles on reading backwards, or the step
  activation saturates at 0.) So two seeds are trained and the better must pass:
  about a 1% chance that both fail. Content attention in a similar set-up reaches
  0.3-0.8 in distribution and 0.0 at length 12 (4 seeds). Without the warmup
  (constant 3e-3) only about 2 seeds in 3 learn at all.
  """
  model = transformer.Transformer(vocab_size=COPY_VOCAB, variant=variants.get('onestep'),
                                  num_layers=1, num_heads=4, model_dim=32, mlp_dim=64,
                                  dropout_rate=0.0, pad_id=PAD, sos_id=SOS, eos_id=EOS)
  steps, batch = 600, 4
  optimizer = optax.chain(optax.clip_by_global_norm(5.0), optax.adamw(
      optax.warmup_cosine_decay_schedule(0.0, 3e-3, 50, steps, 1.5e-4), weight_decay=0.0))
  init = jax.jit(functools.partial(init_params, model), compiler_options=FAST)

  @functools.partial(jax.jit, compiler_options=FAST)
  def train_step(params, opt_state, src, lengths, tgt_in, tgt_out):
    loss, grads = jax.value_and_grad(lambda p: loss_of(
        model.apply({'params': p}, src, lengths, tgt_in).logits, tgt_out))(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  @functools.partial(jax.jit, static_argnums=3, compiler_options=FAST)
  def greedy(params, src, lengths, max_steps):
    return model.apply({'params': params}, src, lengths, max_steps, method=model.greedy)

  def accuracy(params, low, high, examples=32):
    """Exact-match accuracy of greedy decoding, <eos> and the <pad> after it included
    (rows of different lengths stop at different steps)."""
    rng = np.random.default_rng(1000 + high)
    correct = 0
    for _ in range(examples // batch):
      src, lengths, _, tgt_out = copy_batch(rng, batch, low, high, high)
      tokens = np.asarray(greedy(params, src, lengths, high + 3).tokens)
      expected = np.pad(tgt_out, ((0, 0), (0, 2)), constant_values=PAD)
      correct += int(np.sum(np.all(tokens == expected, axis=1)))
    return correct / examples

  runs = []
  for seed in (0, 1):
    rng = np.random.default_rng(seed)
    params = init(jax.random.PRNGKey(seed), copy_batch(rng, batch, 3, 8, 8)[0])['params']
    opt_state = optimizer.init(params)
    for _ in range(steps):
      params, opt_state, loss = train_step(params, opt_state,
                                           *copy_batch(rng, batch, 3, 8, 8))
    runs.append((accuracy(params, 12, 12), accuracy(params, 3, 8), float(loss), params))
  long_accuracy, short_accuracy, loss, params = max(runs, key=lambda run: run[:2])
  assert loss < 0.1 and short_accuracy >= 0.95, [run[:3] for run in runs]
  assert long_accuracy >= 0.85, [run[:3] for run in runs]

  # The two forms agree in float32 too, on trained (sharp) weights at the new length.
  src, lengths, tgt_in, _ = copy_batch(np.random.default_rng(5), batch, 12, 12, 12)
  forms = jax.jit(lambda p: (
      model.apply({'params': p}, src, lengths, tgt_in).logits,
      model.apply({'params': p}, src, lengths, tgt_in, method=model.teacher_forced_steps).logits),
      compiler_options=FAST)(params)
  assert_rel_close(*forms, 'float32 logits, trained', rtol=RTOL32)
