"""Tests of `tapped_scan`, the decoder scan's hand-written backward pass.

* A toy loop that uses every feature (integer carry and inputs, float inputs,
  an invariant read twice, one never read, a tapped op without its own stacked
  cotangent, a tap whose x is another tap's output) against `jax.grad` of the
  plain scan, also under `vmap`.
* Reading an invariant without the tap fails loudly instead of losing its gradient.
* The decoder loops of variants covering every score branch, location rule and
  switch, in float64 (a subprocess with x64 on), vmapped over two parameter
  sets, against `jax.grad` of the plain scan to 1e-10. The float32 comparison of full models, with dropout on, is
  tests/models_test.py::test_custom_decoder_backward_equals_autodiff.
"""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import compile_options
from monoloc_jax import attention
from monoloc_jax import tapped_scan
from monoloc_jax import variants

FAST = compile_options.fast()
B, D, V, T = 3, 4, 5, 6


def toy_step(tap, inv, consts, carry, x):
  """carry (h [B, D], i []); x (u [B, D], token [B]) -> (carry, (y [B], i))."""
  h, i = carry
  u, token = x
  a = tap(tapped_scan.affine, h, (inv['w'], inv['b']))                       # [B, D]
  e = tap(tapped_scan.take_rows, token, inv['table'])                        # [B, D]
  g = tap(lambda x, w: jnp.tanh(x * w), a, inv['gain'])     # vmap-VJP path; x = tap output
  h = jnp.tanh(g + e + u) * consts['mask']
  h = tap(tapped_scan.matmul, h, inv['w'])                                   # w read twice
  return (h, i + 1), (jnp.sum(h * h, axis=-1), i)


def toy_inputs(seed):
  rng = np.random.default_rng(seed)
  normal = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)
  inv = {'w': normal(D, D) / 2, 'b': normal(D), 'table': normal(V, D), 'gain': normal(),
         'unused': normal(3)}
  consts = {'mask': jnp.asarray(rng.random((B, D)) > 0.2, jnp.float32)}
  init = (normal(B, D), jnp.zeros((), jnp.int32))
  xs = (normal(T, B, D), jnp.asarray(rng.integers(0, V, (T, B)), jnp.int32))
  return inv, consts, init, xs


def toy_loss(scan, inv, consts, h0, u, tokens):
  (h, _), (y, _) = scan(toy_step, inv, consts, (h0, jnp.zeros((), jnp.int32)), (u, tokens))
  return jnp.sum(y * jnp.arange(1.0, T + 1)[:, None]) + jnp.sum(jnp.sin(h))


def grads_of(scan):
  return jax.grad(lambda *a: toy_loss(scan, *a), argnums=(0, 2, 3))


def assert_trees_close(got, want, rtol):
  for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(got),
                          jax.tree_util.tree_leaves(want)):
    g, w = np.asarray(g), np.asarray(w)
    scale = max(np.max(np.abs(w)), 1e-30)
    assert np.max(np.abs(g - w)) / scale < rtol, jax.tree_util.keystr(path)


def test_toy_scan_forward_is_the_plain_scan():
  inv, consts, init, xs = toy_inputs(0)
  plain = tapped_scan.plain_scan(toy_step, inv, consts, init, xs)
  tapped = tapped_scan.tapped_scan(toy_step, inv, consts, init, xs)
  for a, b in zip(jax.tree_util.tree_leaves(plain), jax.tree_util.tree_leaves(tapped)):
    np.testing.assert_array_equal(a, b)


def test_toy_scan_gradients_equal_autodiff_also_under_vmap():
  inv, consts, (h0, _), (u, tokens) = toy_inputs(1)
  custom, autodiff = grads_of(tapped_scan.tapped_scan), grads_of(tapped_scan.plain_scan)
  got, want = jax.jit(lambda *a: (custom(*a), autodiff(*a)), compiler_options=FAST)(
      inv, consts, h0, u, tokens)
  assert_trees_close(got, want, 1e-5)
  assert np.all(np.asarray(got[0]['unused']) == 0.0)
  assert np.any(np.asarray(got[0]['table']) != 0.0) and np.any(np.asarray(got[0]['gain']) != 0)
  # Two "seeds": different invariants and initial states, one vmapped program.
  inv2 = jax.tree_util.tree_map(lambda a: jnp.stack([a, 0.7 * a]), inv)
  h02 = jnp.stack([h0, -h0])
  vm = jax.jit(lambda *a: (jax.vmap(custom, (0, None, 0, None, None))(*a),
                           jax.vmap(autodiff, (0, None, 0, None, None))(*a)),
               compiler_options=FAST)
  got, want = vm(inv2, consts, h02, u, tokens)
  assert_trees_close(got, want, 1e-5)


def test_reading_an_invariant_without_the_tap_fails_loudly():
  def leaky_step(tap, inv, consts, carry, x):
    del tap, consts
    return jnp.tanh(carry @ inv['w'] + x), jnp.sum(carry)
  inv = {'w': jnp.eye(D)}
  loss = lambda inv: jnp.sum(tapped_scan.tapped_scan(leaky_step, inv, {}, jnp.ones((B, D)),
                                                     jnp.ones((T, B, D)))[1])
  with pytest.raises(TypeError):
    jax.grad(loss)(inv)


X64_SCRIPT = textwrap.dedent('''
    import functools, sys
    import jax, jax.numpy as jnp, numpy as np
    from monoloc_jax import attention, tapped_scan, variants
    from monoloc_jax.backbones import gru
    FAST = ({'xla_backend_optimization_level': 0, 'xla_llvm_disable_expensive_passes': True,
             'xla_cpu_use_fusion_emitters': False} if jax.default_backend() == 'cpu' else {})
    rng = np.random.default_rng(0)
    batch, n, steps, vocab = 3, 5, 4, 9
    lens = np.array([5, 2, 4], np.int32)
    src = rng.integers(3, vocab, (batch, n)).astype(np.int32)
    src[np.arange(n)[None] >= lens[:, None]] = 0
    tokens = jnp.asarray(rng.integers(0, vocab, (steps, batch)), jnp.int32)
    worst, models_and_params = {}, {}
    for i, name in enumerate(sys.argv[1].split(',')):  # float32 initialisation, then x64 on
      model = gru.Seq2Seq(vocab_size=vocab, variant=variants.get(name), embed_dim=6,
                             hidden_dim=8, value_dim=6, dropout_rate=0.0)
      models_and_params[name] = model, model.init(jax.random.PRNGKey(i), src, lens,
                                                  tokens.T)['params']
    jax.config.update('jax_enable_x64', True)
    for name, (model, params) in models_and_params.items():
      params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), params)
      memory, att, h0, _ = model.apply({'params': params}, src, lens, False,
                                       method=gru.Seq2Seq.encode)
      step, inv, consts, _, _ = model.apply({'params': params}, memory, att,
                                            method=gru.Seq2Seq._decoder_step_fn)
      consts = consts._replace(positions=consts.positions.astype(jnp.float64))
      weights = [jnp.asarray(rng.normal(size=s), jnp.float64) for s in
                 [(steps, batch, 8), (steps, batch, n + 2)]]

      def loss(inv, h0, scan):
        init = (h0, attention.AttentionCarry(jnp.zeros((batch,), jnp.float64),
                                             jnp.zeros((), jnp.int32)))
        _, (h, a, aux) = scan(step, inv, consts, init, tokens)
        return (jnp.sum(h * weights[0]) + jnp.sum(a * weights[1])
                + sum(jnp.sum(jnp.sin(v)) for v in aux.values()))

      def both(inv, h0):
        return [jax.grad(loss, argnums=(0, 1))(inv, h0, scan)
                for scan in (tapped_scan.tapped_scan, tapped_scan.plain_scan)]
      # Two parameter sets ("seeds") in one vmapped program.
      inv2 = jax.tree_util.tree_map(lambda a: jnp.stack([a, 0.8 * a]), inv)
      h02 = jax.tree_util.tree_map(lambda a: jnp.stack([a, -a]), h0)
      custom, autodiff = jax.jit(jax.vmap(both), compiler_options=FAST)(inv2, h02)
      err = 0.0
      for g, w in zip(jax.tree_util.tree_leaves(custom), jax.tree_util.tree_leaves(autodiff)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == np.float64, g.dtype
        err = max(err, float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-300)))
      worst[name] = err
      print(f'{name} {err:.3e}', flush=True)
    bad = {k: v for k, v in worst.items() if not v < 1e-10}
    print('WORST', max(worst.values()))
    sys.exit(1 if bad else 0)
''')


# Together these cover every score branch (content, relative, rope), every location
# rule, direction mixing, content mixing and PR; all 21 are compared in float32 by
# tests/models_test.py, and all 21 passed this float64 check (MEASUREMENTS.md §3).
X64_VARIANTS = ('bi_rope', 'relative', 'mix_locattn', 'locattn_s', 'mix_mono_pr', 'rmono',
                'onestep', 'onestep_minus_step2', 'onestep_minus_step3',
                'onestep_minus_sigmoid')


def test_variants_float64_vmapped_equal_autodiff():
  covered = {variants.get(n).location.name for n in X64_VARIANTS
             if variants.get(n).location is not None}
  assert covered == set(attention.LOCATION_RULES)
  assert {variants.get(n).scores.name for n in X64_VARIANTS
          if variants.get(n).scores is not None} == set(attention.SCORE_BRANCHES)
  proc = subprocess.run([sys.executable, '-c', X64_SCRIPT, ','.join(X64_VARIANTS)],
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert proc.stdout.count('e-') >= len(X64_VARIANTS), proc.stdout
