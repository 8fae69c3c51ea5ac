"""Dtypes ("Library users II", items 1 and 2): bfloat16 and float64.

* Every kernel returns the dtype of its float inputs (bfloat16 in, bfloat16 out),
  and `attention_step` hands back the carry in the carry's dtype, so a user's
  bfloat16 `lax.scan` runs.
* Under bfloat16 the location recurrence stays float32: pa_t still tells
  neighbouring positions of a 300-position input apart.
* `Seq2Seq(dtype=jnp.bfloat16)` (float32 parameters) gives float32 logits within
  a few percent of the float32 model's, greedy decodes, gradients are float32
  and finite; bfloat16 parameters work too.
* A short bfloat16 training run on Copy still extrapolates to length 30.
* With jax_enable_x64 on, every variant initialises, teacher-forces and decodes
  in float64 (a subprocess: x64 is process-wide), and the default float32 model
  still initialises.
"""

import functools
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import compile_options
from monoloc_jax import attention
from monoloc_jax import backbones
from monoloc_jax import errors
from monoloc_jax import train
from monoloc_jax import validation
from monoloc_jax import variants
from monoloc_jax.backbones import gru
from monoloc_jax.configs import default

FAST = compile_options.fast()
BF16 = jnp.bfloat16
LENGTHS = np.array([6, 3, 5], np.int32)
B, S, D = 3, 6, 8


def _rng(seed=0):
  return np.random.default_rng(seed)


def _bf(rng, *shape, low=-1.0, high=1.0):
  return jnp.asarray(rng.uniform(low, high, shape), BF16)


def _mask():
  return jnp.arange(S)[None, :] < jnp.asarray(LENGTHS)[:, None]


# name -> fn(rng) -> (outputs, expected dtype of each float output).
def _positions():
  return attention.normalized_positions(LENGTHS, S, BF16)


def _float_kernels():
  gate = jnp.float32(0.3)                      # a float32 parameter, as in the model
  cases = {
      'softstair': lambda r: attention.softstair(_bf(r, B, low=-3, high=3)),
      'leaky_clamp': lambda r: attention.leaky_clamp(_bf(r, B, low=-1, high=2)),
      'location_sigma': lambda r: attention.location_sigma(_bf(r, B), LENGTHS),
      'gaussian_location_attention': lambda r: attention.gaussian_location_attention(
          _bf(r, B, low=0, high=1), _bf(r, B, low=0.05, high=0.2), _positions(), _mask()),
      'gaussian_float32_positions': lambda r: attention.gaussian_location_attention(
          _bf(r, B, low=0, high=1), _bf(r, B, low=0.05, high=0.2),
          attention.normalized_positions(LENGTHS, S), _mask()),
      'attended_position': lambda r: attention.attended_position(_bf(r, B, S), _positions()),
      'masked_softmax': lambda r: attention.masked_softmax(_bf(r, B, S), _mask()),
      'content_scores': lambda r: attention.content_scores(_bf(r, B, D), _bf(r, B, S, D)),
      'relative_scores': lambda r: attention.relative_scores(
          _bf(r, B, D), _bf(r, B, S, D), attention.sinusoidal_embedding(jnp.arange(S), 16),
          _bf(r, 16, D), jnp.zeros(D), jnp.zeros(D)),
      'rotary_embedding': lambda r: attention.rotary_embedding(_bf(r, B, S, D),
                                                               jnp.arange(S)[None]),
      'reverse_valid': lambda r: attention.reverse_valid(_bf(r, B, S, D), LENGTHS),
      'direction_gate': lambda r: attention.direction_gate(_bf(r, B)),
      'direction_mixing': lambda r: attention.direction_mixing(
          _bf(r, B, S, D), LENGTHS, jnp.asarray(r.uniform(0, 1, B), jnp.float32)),
      'input_attention': lambda r: attention.input_attention(
          _bf(r, B, 2, S), jnp.asarray(r.uniform(0, 1, B), jnp.float32), LENGTHS),
      'content_mixing': lambda r: attention.content_mixing(
          _bf(r, B, S), _bf(r, B, S), jnp.asarray(r.uniform(0, 1, B), jnp.float32)),
      'sigmoid_step': lambda r: attention.sigmoid_step(_bf(r, B)),
      'softstair_step': lambda r: attention.softstair_step(_bf(r, B)),
      'relu_step': lambda r: attention.relu_step(_bf(r, B)),
      'free_step': lambda r: attention.free_step(_bf(r, B)),
      'mono_step': lambda r: attention.mono_step(_bf(r, B), gate),
      'monotonic_mu': lambda r: attention.monotonic_mu(
          _bf(r, B), _bf(r, B, low=0, high=1), attention.stepsize(LENGTHS)),
      'dubois_mu': lambda r: attention.dubois_mu(
          _bf(r, B), _bf(r, B), _bf(r, B), _bf(r, B, low=0, high=1),
          attention.stepsize(LENGTHS)),
      'dubois_s_mu': lambda r: attention.dubois_s_mu(
          _bf(r, B), _bf(r, B), _bf(r, B, low=0, high=1), attention.stepsize(LENGTHS),
          jnp.bool_(False)),
  }
  for name, rule in attention.LOCATION_RULES.items():
    cases[f'location_mu_{name}'] = functools.partial(
        lambda rule, r: attention.location_mu(
            rule, _bf(r, B, rule.num_rho), _bf(r, B, low=0, high=1),
            attention.stepsize(LENGTHS), jnp.bool_(True),
            {'gate_logit': gate} if rule.params else None), rule)
  return cases


FLOAT_KERNELS = _float_kernels()


@pytest.mark.parametrize('name', sorted(FLOAT_KERNELS))
def test_every_kernel_returns_its_input_dtype(name):
  """bfloat16 activations in, bfloat16 out (float32 parameters and float32
  positions from `stepsize` / `normalized_positions` do not promote the result)."""
  out = FLOAT_KERNELS[name](_rng())
  for leaf in jax.tree_util.tree_leaves(out):
    assert leaf.dtype == BF16, (name, leaf.dtype)
    assert np.all(np.isfinite(np.asarray(leaf, np.float32))), name


@pytest.mark.parametrize('kernel, args', [
    (attention.stepsize, (LENGTHS,)),
    (attention.normalized_positions, (LENGTHS, S)),
    (attention.sinusoidal_embedding, (jnp.arange(-3, 4), 8)),
])
def test_integer_input_kernels_take_a_dtype(kernel, args):
  assert kernel(*args).dtype == jnp.float32
  assert kernel(*args, dtype=BF16).dtype == BF16
  np.testing.assert_allclose(np.asarray(kernel(*args, dtype=BF16), np.float32),
                             np.asarray(kernel(*args)), rtol=1e-2, atol=1e-2)


def _step_inputs(name, dtype, n_pos=S, lengths=LENGTHS, seed=0, dim=D):
  """Raw params in `dtype` (folded in their own dtype), a memory and a query in `dtype`."""
  rng = _rng(seed)
  variant = variants.get(name)
  dims = attention.Dims(model=dim, qk=dim, encoded=dim)
  raw = {p.name: jnp.asarray(rng.normal(size=p.shape(dims)) * dim ** -0.5, dtype)
         for p in variant.param_defs()}
  params = attention.fold_params(variant, raw)
  encoded = jnp.asarray(rng.normal(size=(len(lengths), n_pos, dim)), dtype)
  values = jnp.asarray(rng.normal(size=(len(lengths), n_pos, dim)), dtype)
  memory = attention.make_memory(variant, params, encoded, values, jnp.asarray(lengths))
  query = jnp.asarray(rng.normal(size=(len(lengths), dim)), dtype)
  return variant, params, memory, query


@pytest.mark.parametrize('name', ['mix_mono_pr', 'relative', 'bi_rope', 'locattn_s'])
def test_a_bfloat16_scan_carry_keeps_its_type(name):
  """A user's own decoder loop in bfloat16: `lax.scan` over `attention_step` with a
  bfloat16 carry (before: the step returned pa_t in float32 and the scan refused)."""
  variant, params, memory, query = _step_inputs(name, BF16)

  def body(carry, _):
    out, weights, carry, aux = attention.attention_step(variant, params, memory, query, carry)
    return carry, (out, weights, aux)
  carry0 = attention.AttentionCarry(jnp.zeros((B,), BF16), jnp.zeros((), jnp.int32))
  carry, (out, weights, aux) = jax.lax.scan(body, carry0, None, length=3)
  assert carry.pa_prev.dtype == BF16 and out.dtype == BF16 and weights.dtype == BF16
  assert all(v.dtype == BF16 for v in aux.values())
  assert np.all(np.isfinite(np.asarray(out, np.float32)))


def test_fold_params_keeps_the_location_path_in_float32():
  """float32 parameters folded for a bfloat16 computation (as `gru.CrossAttention`)."""
  variant = variants.get('mix_mono_pr')
  dims = attention.Dims(model=D, qk=D, encoded=D)
  raw = {p.name: jnp.full(p.shape(dims), 0.1, jnp.float32) for p in variant.param_defs()}
  params = attention.fold_params(variant, raw, dtype=BF16)
  assert params.key.dtype == params.out.dtype == BF16
  assert params.readout_kernel.dtype == params.readout_bias.dtype == jnp.float32
  assert params.mix_kernel.dtype == params.rule['gate_logit'].dtype == jnp.float32
  memory = attention.make_memory(variant, params, jnp.ones((B, S, D), BF16),
                                 jnp.ones((B, S, D), BF16), LENGTHS)
  assert memory.keys.dtype == BF16 and memory.positions.dtype == jnp.float32


def test_the_location_recurrence_stays_float32_under_bfloat16():
  """OneStepAttn walking a 301-position input for 300 steps with bfloat16
  activations (query, keys, values, f_o) and the model's float32 carry: pa_t
  stays within a fifth of a position of the float32 run's. In bfloat16 (8 bits)
  pa_t near 1 has a resolution of 1/256, more than one position of 1/300."""
  n_pos, steps = 301, 300
  lengths = np.array([n_pos], np.int32)

  def walk(dtype):
    variant, params, memory, query = _step_inputs('onestep', dtype, n_pos, lengths, seed=3)
    # A large step read-out: sigmoid(5 rho) = 1, mu advances one position per step.
    params = params.replace(readout_kernel=params.readout_kernel * 0,
                            readout_bias=params.readout_bias.at[1].set(4.0))

    def body(carry, _):
      _, _, carry, aux = attention.attention_step(variant, params, memory, query, carry)
      return carry, aux['mu']
    carry0 = attention.initial_carry(1, attention.at_least_float32(dtype))
    return jax.jit(lambda c: jax.lax.scan(body, c, None, length=steps))(carry0)
  (carry16, mu16), (carry32, mu32) = walk(BF16), walk(jnp.float32)
  assert mu16.dtype == jnp.float32 and carry16.pa_prev.dtype == jnp.float32
  gap = np.max(np.abs(np.asarray(mu16) - np.asarray(mu32))) * (n_pos - 1)
  assert gap < 0.2, gap
  assert float(carry32.pa_prev[0]) > 0.9     # it did walk to the end


# ---------------------------------------------------------------------------
# The model.
# ---------------------------------------------------------------------------
VOCAB = 12
SRC_LENGTHS = np.array([9, 4, 12, 7], np.int32)


def _batch():
  rng = _rng(1)
  n, t = 12, 10
  src = rng.integers(4, VOCAB, (len(SRC_LENGTHS), n)).astype(np.int32)
  src[np.arange(n)[None] >= SRC_LENGTHS[:, None]] = 0
  tgt = rng.integers(4, VOCAB, (len(SRC_LENGTHS), t)).astype(np.int32)
  return src, tgt


def relative_difference(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@functools.lru_cache(maxsize=None)
def bf16_against_f32(name: str):
  """Float32 and bfloat16 (float32 parameters) passes of one variant, one program."""
  f32 = gru.Seq2Seq(vocab_size=VOCAB, variant=variants.get(name), hidden_dim=32,
                       embed_dim=16, value_dim=32, dropout_rate=0.0)
  bf16 = f32.clone(dtype=BF16)
  src, tgt = _batch()

  def run(key):
    params = f32.init(key, src, SRC_LENGTHS, tgt)
    loss = lambda p: jnp.mean(jax.nn.log_softmax(
        bf16.apply(p, src, SRC_LENGTHS, tgt).logits)[..., 5])
    return (params, f32.apply(params, src, SRC_LENGTHS, tgt),
            bf16.apply(params, src, SRC_LENGTHS, tgt),
            bf16.apply(params, src, SRC_LENGTHS, 10, method=bf16.greedy),
            jax.grad(loss)(params))
  return jax.device_get(jax.jit(run, compiler_options=FAST)(
      jax.random.PRNGKey(variants.NAMES.index(name))))


# Three variants cover every score branch, location rule kind (mixed, PR, clamped
# Dubois, monotonic) and direction mixing; experiments/bf16_logits.py (MEASUREMENTS.md §8; removed, at 74fd721) measured all 21.
BF16_VARIANTS = ('relative', 'bi_rope', 'mix_locattn_s', 'mix_mono_pr', 'onestep')


@pytest.mark.parametrize('name', BF16_VARIANTS)
def test_bfloat16_model_is_close_to_float32(name):
  params, out32, out16, greedy16, grads = bf16_against_f32(name)
  assert out16.logits.dtype == jnp.float32              # logits in float32
  assert out16.attention.dtype == greedy16.attention.dtype == jnp.float32
  assert relative_difference(out16.logits, out32.logits) < 0.03
  assert np.max(np.abs(out16.attention - out32.attention)) < 0.05
  assert greedy16.tokens.shape == (len(SRC_LENGTHS), 10)
  for (path, g), p in zip(jax.tree_util.tree_leaves_with_path(grads),
                          jax.tree_util.tree_leaves(params)):
    assert g.dtype == p.dtype == jnp.float32, jax.tree_util.keystr(path)
    assert np.all(np.isfinite(g)), jax.tree_util.keystr(path)


def test_bfloat16_parameters_work_too():
  """param_dtype=bfloat16, and the default model (dtype=None: the parameters'
  dtype, Flax's convention) applied to parameters cast to bfloat16 (before:
  `apply` and `greedy` failed with dtype errors)."""
  kw = dict(vocab_size=VOCAB, variant=variants.get('mix_onestep'), hidden_dim=16, embed_dim=8,
            value_dim=16)
  model = gru.Seq2Seq(dtype=BF16, param_dtype=BF16, **kw)
  plain = gru.Seq2Seq(**kw)
  src, tgt = _batch()

  def run(key):
    params = model.init(key, src, SRC_LENGTHS, tgt)
    cast = jax.tree_util.tree_map(lambda a: a.astype(BF16), plain.init(key, src, SRC_LENGTHS, tgt))
    return (params, model.apply(params, src, SRC_LENGTHS, tgt),
            model.apply(params, src, SRC_LENGTHS, 6, method=model.greedy),
            plain.apply(cast, src, SRC_LENGTHS, tgt),
            plain.apply(cast, src, SRC_LENGTHS, 6, method=plain.greedy))
  params, out, greedy, plain_out, plain_greedy = jax.jit(run, compiler_options=FAST)(
      jax.random.PRNGKey(0))
  assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(params)} == {jnp.dtype(BF16)}
  for o in (out, plain_out):
    assert o.logits.dtype == jnp.float32 and np.all(np.isfinite(o.logits))
    assert o.attention.dtype == jnp.float32
  assert greedy.tokens.shape == plain_greedy.tokens.shape == (len(SRC_LENGTHS), 6)


class Vocab:
  """What `backbones.from_config` reads of a vocabulary."""
  pad_id, sos_id, eos_id = 0, 1, 2

  def __len__(self):
    return VOCAB


def test_config_dtype():
  c = default.get_config()
  assert c.dtype == 'float32'
  model = backbones.from_config(c, Vocab())
  assert (model.dtype, model.param_dtype) == (jnp.float32, jnp.float32)
  c.dtype = 'bfloat16'
  model = backbones.from_config(c, Vocab())
  assert (model.dtype, model.param_dtype) == (BF16, jnp.float32)
  c.dtype = 'float16'
  for check in (lambda: backbones.from_config(c, Vocab()), lambda: validation.validate(c)):
    with pytest.raises(errors.MonolocError, match="unknown dtype 'float16'; valid dtypes: "
                       'bfloat16, float32, float64'):
      check()
  if not jax.config.jax_enable_x64:
    c.dtype = 'float64'
    for check in (lambda: backbones.from_config(c, Vocab()), lambda: validation.validate(c)):
      with pytest.raises(errors.MonolocError, match='jax_enable_x64'):
        check()


def test_a_bad_dtype_flag_is_one_line_and_writes_nothing(tmp_path):
  """monoloc-train with --config.dtype=float16: one error line, exit 2, and no workdir
  files (before the check moved into `validation.validate`, vocab.json was written)."""
  work = tmp_path / 'run'
  proc = subprocess.run([sys.executable, '-m', 'monoloc_jax.main', f'--workdir={work}',
                         '--config.dtype=float16'], capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines() == [
      "error: unknown dtype 'float16'; valid dtypes: bfloat16, float32, float64"]
  assert not work.exists() or not any(work.iterdir())


def test_bfloat16_training_on_copy_still_extrapolates(tmp_path):
  """tests/train_test.py's OneStepAttn Copy run (3000 samples, 2 epochs), in
  bfloat16: it still generalises to length 30."""
  c = default.get_config()
  c.update(task='copy', variant='onestep', train_size=3000, eval_size=200, max_epochs=2,
           test_splits='test_30', progress=False, dtype='bfloat16')
  assert backbones.from_config(c, Vocab()).dtype == BF16     # the run is bfloat16
  results = train.train_and_evaluate(c, str(tmp_path))
  assert results['test']['test_30']['accuracy'] >= 95.0, results['test']


# ---------------------------------------------------------------------------
# float64.
# ---------------------------------------------------------------------------
X64_SCRIPT = textwrap.dedent('''
    import sys
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update('jax_enable_x64', True)
    from monoloc_jax import variants
    from monoloc_jax.backbones import gru
    FAST = ({'xla_backend_optimization_level': 0, 'xla_llvm_disable_expensive_passes': True,
             'xla_cpu_use_fusion_emitters': False} if jax.default_backend() == 'cpu' else {})
    vocab, lens = 9, np.array([5, 2, 4], np.int32)
    rng = np.random.default_rng(0)
    src = rng.integers(3, vocab, (3, 5)).astype(np.int32)
    src[np.arange(5)[None] >= lens[:, None]] = 0
    tgt = rng.integers(3, vocab, (3, 4)).astype(np.int32)
    failed = []
    for name in sys.argv[1].split(','):
      kw = dict(vocab_size=vocab, variant=variants.get(name), embed_dim=6, hidden_dim=8,
                value_dim=6, dropout_rate=0.0)
      try:
        f32 = gru.Seq2Seq(**kw)             # the default model, x64 on
        p32 = jax.jit(f32.init, compiler_options=FAST)(jax.random.PRNGKey(1), src, lens, tgt)
        assert {str(a.dtype) for a in jax.tree_util.tree_leaves(p32)} == {'float32'}
        f64 = gru.Seq2Seq(dtype=jnp.float64, param_dtype=jnp.float64, **kw)

        bf16 = gru.Seq2Seq(dtype=jnp.bfloat16, **kw)   # float32 parameters

        def run(key):
          p64 = f64.init(key, src, lens, tgt)
          p16 = bf16.init(key, src, lens, tgt)
          return (p64, f64.apply(p64, src, lens, tgt),
                  f64.apply(p64, src, lens, 6, method=f64.greedy),
                  f32.apply(jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), p64),
                            src, lens, tgt),
                  p16, bf16.apply(p16, src, lens, tgt),
                  bf16.apply(p16, src, lens, 6, method=bf16.greedy), f32.apply(p16, src, lens, tgt))
        (p64, tf, greedy, tf32, p16, tf16, greedy16,
         tf16_32) = jax.jit(run, compiler_options=FAST)(jax.random.PRNGKey(1))
        assert {str(a.dtype) for a in jax.tree_util.tree_leaves(p16)} == {'float32'}
        assert str(tf16.logits.dtype) == str(greedy16.attention.dtype) == 'float32'
        assert greedy16.tokens.shape == (3, 6)
        err16 = np.max(np.abs(tf16.logits - tf16_32.logits)) / np.max(np.abs(tf16_32.logits))
        assert err16 < 0.05, ('bfloat16', err16)
        dtypes = {str(a.dtype) for a in jax.tree_util.tree_leaves(
            (p64, tf.logits, tf.attention, tf.aux, greedy.attention))}
        assert dtypes == {'float64'}, dtypes
        assert np.all(np.isfinite(tf.logits)) and greedy.tokens.shape == (3, 6)
        err = np.max(np.abs(tf.logits - tf32.logits)) / np.max(np.abs(tf.logits))
        assert err < 1e-5, err
        print(name, 'ok', f'{err:.1e}', f'bf16 {err16:.1e}', flush=True)
      except Exception as e:  # pylint: disable=broad-except
        failed.append(name)
        print(name, 'FAILED', type(e).__name__, str(e).splitlines()[0][:200], flush=True)
    sys.exit(1 if failed else 0)
''')


def test_every_variant_runs_in_float64_and_bfloat16():
  """init, apply and greedy of all 21 variants in float64 (before: `Seq2Seq.init`
  failed for every variant with x64 on: pa_0 was built float32, and the
  initialisers drew float64 arrays) and in bfloat16 with float32 parameters
  (logits within 5% of float32's; before: no dtype)."""
  proc = subprocess.run([sys.executable, '-c', X64_SCRIPT, ','.join(variants.NAMES)],
                        capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
  assert proc.stdout.count(' ok ') == len(variants.NAMES), proc.stdout
