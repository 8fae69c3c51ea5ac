"""Extending the library without touching the package: a new attention variant.

The variant below is defined here, in the test file: a new location rule
("TwoStep": mu_t = pa_{t-1} + 2 sigmoid(5 rho) stepsize, able to skip a
position) and a new score branch (scaled cosine similarity). Both train for a
few steps through the public API, and the rule is checked against its equation.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from monoloc_jax import attention
from monoloc_jax import tasks
from monoloc_jax.backbones import gru
from monoloc_jax.input_pipeline import encode_split, train_batches
from monoloc_jax.vocab import Vocabulary


def two_step(rho):
  """step = 2 sigmoid(5 rho), in (0, 2)."""
  return 2.0 * jax.nn.sigmoid(5.0 * rho)


TWO_STEP = attention.LocationRule('two_step', two_step, attention.monotonic_update,
                                  num_rho=1, clamp=False)


def cosine_score(q, memory, carry, params):
  """c_ti = 5 cos(q, k_i)."""
  del carry
  qn = q / (jnp.linalg.norm(q, axis=-1, keepdims=True) + 1e-6)
  kn = memory.keys / (jnp.linalg.norm(memory.keys, axis=-1, keepdims=True) + 1e-6)
  return params.score['temperature'] * jnp.einsum('bd,bsd->bs', qn, kn)


COSINE = attention.ScoreBranch(
    'cosine', cosine_score,
    params=(attention.ParamDef('temperature', lambda dims: (),
                               jax.nn.initializers.constant(5.0)),))

TWO_STEP_ATTN = attention.Variant('two_step', 'TwoStepAttn', location=TWO_STEP,
                                  direction_mixing=True)
MIX_COSINE_TWO_STEP = attention.Variant('mix_cosine_two_step', 'Mix Cosine TwoStepAttn',
                                        scores=COSINE, location=TWO_STEP)


def test_new_rule_follows_its_equation():
  rho = jnp.array([[-1.0], [0.0], [2.0]])
  pa = jnp.array([0.1, 0.2, 0.3])
  ss = jnp.array([0.25, 0.25, 0.25])
  mu, step = attention.location_mu(TWO_STEP, rho, pa, ss, jnp.array(False))
  expected_step = [2.0 / (1.0 + math.exp(-5.0 * r)) for r in (-1.0, 0.0, 2.0)]
  np.testing.assert_allclose(step, expected_step, rtol=1e-6)
  np.testing.assert_allclose(mu, np.array([0.1, 0.2, 0.3]) + 0.25 * np.array(expected_step),
                             rtol=1e-6)


def _train(variant, steps=25):
  """A few Adam steps of `variant` on Copy; returns (losses, final params)."""
  examples = tasks.load_examples('copy', 'train')[:256]
  vocab = Vocabulary.from_examples(examples)
  split = encode_split(examples, vocab)
  model = gru.Seq2Seq(vocab_size=len(vocab), variant=variant, embed_dim=16,
                         hidden_dim=32, value_dim=32, dropout_rate=0.0)
  batch = next(train_batches(split, 64, [0], 0, 0, vocab.sos_id))
  src, src_len, tgt_in, tgt_out = (x[0] for x in (batch.src, batch.src_len, batch.tgt_in,
                                                  batch.tgt_out))
  params = model.init(jax.random.PRNGKey(0), src, src_len, tgt_in)['params']
  tx = optax.adam(3e-3)

  @jax.jit
  def update(params, opt_state):
    def loss_fn(p):
      logits = model.apply({'params': p}, src, src_len, tgt_in).logits
      ce = optax.softmax_cross_entropy_with_integer_labels(logits, tgt_out)
      mask = tgt_out != vocab.pad_id
      return jnp.sum(ce * mask) / jnp.sum(mask)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss

  opt_state, losses = tx.init(params), []
  for _ in range(steps):
    params, opt_state, loss = update(params, opt_state)
    losses.append(float(loss))
  return losses, params


def test_a_variant_defined_outside_the_package_trains():
  losses, params = _train(TWO_STEP_ATTN)
  assert all(np.isfinite(losses))
  assert losses[-1] < 0.8 * losses[0]
  cross = params['cross_attention']
  assert cross['rho_kernel'].shape == (32, 1) and 'direction' in cross and 'query' not in cross


def test_a_score_branch_defined_outside_the_package_trains():
  losses, params = _train(MIX_COSINE_TWO_STEP)
  assert all(np.isfinite(losses))
  assert losses[-1] < 0.8 * losses[0]
  cross = params['cross_attention']
  assert {'query', 'key', 'temperature', 'mix_kernel'} <= set(cross)
  assert float(cross['temperature']) != 5.0       # the branch's own parameter learned


# ---------------------------------------------------------------------------
# A new task, defined here: "Swap" exchanges each pair of neighbouring digits.
# ---------------------------------------------------------------------------
def swap_pairs(source):
  """x1 x2 x3 x4 x5 -> x2 x1 x4 x3 x5."""
  out = list(source)
  for i in range(0, len(out) - 1, 2):
    out[i], out[i + 1] = out[i + 1], out[i]
  return tuple(out)


SWAP = tasks.digit_task('swap_pairs', swap_pairs, task_id=101)


def test_a_task_defined_outside_the_package_has_data_and_facts(tmp_path, monkeypatch):
  monkeypatch.setenv('MONOLOC_CACHE_DIR', str(tmp_path / 'cache'))
  assert tasks.splits(SWAP) == tasks.splits('copy')
  assert SWAP.train_lengths == (5.0, 10.0) and SWAP.split_lengths['test_30'] == 30.0
  data = tasks.load_splits(SWAP, ('train', 'test_15'), seed=0)
  assert len(data['train']) == 10_000 and len(data['test_15']) == 2_000
  for ex in data['train'][:50] + data['test_15'][:50]:
    assert ex.target == swap_pairs(ex.source)
  assert all(len(ex.source) == 15 for ex in data['test_15'])
  assert not {ex.source for ex in data['train']} & {ex.source for ex in data['test_15']}
  # Its own random streams: not Copy's inputs, and the same again for the same seed.
  assert [ex.source for ex in data['train'][:20]] != \
      [ex.source for ex in tasks.load_examples('copy', 'train')[:20]]
  assert tasks.load_examples(SWAP, 'test_15', seed=0) == data['test_15']
  assert (tmp_path / 'cache' / 'swap_pairs').is_dir()


def test_new_task_and_new_variant_train_through_train_and_evaluate(tmp_path, monkeypatch):
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv('MONOLOC_CACHE_DIR', str(tmp_path / 'cache'))
  config = default.get_config()
  config.update(task='swap_pairs', variant='two_step', train_size=300, eval_size=32,
                max_epochs=1, test_splits='test_15', progress=False, hidden_dim=32)
  config.gru.update(embed_dim=16, value_dim=32)
  results = train.train_and_evaluate(config, str(tmp_path / 'run'), task=SWAP,
                                     variant=TWO_STEP_ATTN)
  assert results['task'] == 'swap_pairs' and results['variant'] == 'two_step'
  assert results['epochs'] == 1 and results['test']['test_15']['n'] == 32
  assert 0.0 <= results['test']['test_15']['accuracy'] <= 100.0
