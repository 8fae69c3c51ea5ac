"""One training step of this library against the authors' PyTorch code.

tests/data/authors_step_<variant>.npz holds one step of the authors' code
(`experiments/authors_code/model_step.py`): their parameters before the step, a
ragged batch, their loss, their gradients, and their parameters and AdamW
moments after `clip_grad_norm_(5)` + `AdamW(lr=1e-3, weight_decay=0)`, at a tiny
size with dropout off. Here their parameters are mapped into this library's raw
(unfolded) parameter tree, the batch is encoded in this library's vocabulary,
and one step of the real `train.make_train_programs` train step is run: the
loss, the gradient's global norm, every gradient, every parameter after the step
and Adam's moments (which see the clip: one Adam step alone is nearly blind to a
gradient's scale) must equal theirs mapped the same way, within float32 rounding.

Seven variants: Content, OneStepAttn, MonoAttn, LocAttn, LocAttn S, Mix LocAttn and
RMonoAttn (each costs one XLA compile of the train step, ~5 s on CPU).

The mapping of their parameters into ours is experiments/authors_code/weights.py's;
our sigma read-out bias is off (`sigma_bias=False`, theirs has none) and Eq. 9's
normaliser is theirs (`location_normaliser='authors_code'`).
"""

import pathlib
import sys
import types

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
import numpy as np
import optax
import pytest

import compile_options
from monoloc_jax import backbones
from monoloc_jax import input_pipeline as ip
from monoloc_jax import train
from monoloc_jax.configs import default
from monoloc_jax.vocab import Vocabulary

AUTHORS_CODE = pathlib.Path(__file__).resolve().parents[1] / 'experiments' / 'authors_code'
sys.path.insert(0, str(AUTHORS_CODE))
import weights  # pylint: disable=g-import-not-at-top,wrong-import-position

DATA = pathlib.Path(__file__).parent / 'data'
ALL_VARIANTS = ('content', 'onestep', 'mono', 'locattn', 'locattn_s', 'mix_locattn', 'rmono')

FAST = compile_options.fast()


def load(variant):
  """The fixture: its scalars and batch, and {before, grad, after, exp_avg, exp_avg_sq}:
  {their name: array}."""
  d = dict(np.load(DATA / f'authors_step_{variant}.npz'))
  arrays = {which: weights.unflatten(d[which], d['names'], d['shapes'])
            for which in ('before', 'grad', 'after', 'exp_avg', 'exp_avg_sq')}
  return d, arrays


def unused(arrays):
  """Their arrays that have no gradient (never read by their forward pass)."""
  return sorted(k for k, g in arrays['grad'].items() if np.isnan(g).all())


def flat_items(tree):
  return {jax.tree_util.keystr(p): np.asarray(x)
          for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def flat_shapes(tree):
  return {jax.tree_util.keystr(p): tuple(x.shape)
          for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def setup(variant, learning_rate=1e-3, grad_clip=5.0):
  d, arrays = load(variant)
  their_vocab = [str(t) for t in d['vocab']]
  vocab = Vocabulary.from_tokens(t for t in their_vocab if not t.startswith('<'))
  assert sorted(vocab.tokens) == sorted(their_vocab)
  perm = weights.vocab_perm(their_vocab, vocab.tokens)

  embed, _, hidden, qk, value = (int(x) for x in d['dims'])
  c = default.get_config()
  c.gru.update(embed_dim=embed, value_dim=value)
  c.update(variant=variant, hidden_dim=hidden, qk_dim=qk,
           dropout=0.0, sigma_bias=False, location_normaliser='authors_code',
           learning_rate=learning_rate, grad_clip=grad_clip, weight_decay=0.0)
  model = backbones.from_config(c, vocab)

  # The batch in our ids, rows in their collated order, padded to their widths.
  srcs = [str(s).split('\x1f') for s in d['src']]
  tgts = [str(t).split('\x1f') for t in d['trg']]         # end with <eos>
  src = np.zeros(d['src_vec'].shape, np.int32)
  tgt_out = np.zeros(d['trg_vec'].shape, np.int32)
  for b, (s, t) in enumerate(zip(srcs, tgts)):
    src[b, :len(s)] = ids_of(vocab, s)
    tgt_out[b, :len(t)] = ids_of(vocab, t)
  # The same batch as theirs, token for token.
  np.testing.assert_array_equal(perm[src] * d['src_mask'], d['src_vec'] * d['src_mask'])
  np.testing.assert_array_equal(perm[tgt_out], d['trg_vec'])
  np.testing.assert_array_equal(d['src_mask'].sum(1), [len(s) for s in srcs])
  tgt_in = np.concatenate([np.full((len(src), 1), vocab.sos_id, np.int32), tgt_out[:, :-1]], 1)
  batch = ip.Batch(src, d['src_mask'].sum(1).astype(np.int32), tgt_in, tgt_out)
  return d, arrays, perm, c, model, batch


def ids_of(vocab, tokens):
  return [vocab.id_of(t) for t in tokens]


def one_step(model, config, params, batch):
  """One step of `train.make_train_programs`'s train step (one seed), with the
  gradient of the same loss alongside, in one program.

  Returns (loss, grads, params after, (Adam's mu, nu) after).
  """
  tx = train.make_optimizer(config)
  programs = train.make_train_programs(model, tx)
  seed_axis = lambda tree: jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], tree)

  def loss_fn(p):
    out = model.apply({'params': p}, batch.src, batch.src_len, batch.tgt_in, train=True,
                      rngs={'dropout': jax.random.PRNGKey(0)})
    total, count = train.token_loss(out.logits, batch.tgt_out, model.pad_id)
    return total / count

  def run(params):
    loss, grads = jax.value_and_grad(loss_fn)(params)
    state = train.TrainState(seed_axis(params), seed_axis(tx.init(params)),
                             jnp.zeros((1,), jnp.int32), jax.random.PRNGKey(0)[None])
    state, stats = programs.train_step(state, seed_axis(batch), train.EpochStats.zeros(1))
    return loss, grads, state, stats

  loss, grads, state, stats = jax.device_get(jax.jit(run, compiler_options=FAST)(params))
  assert int(stats.first_bad_update[0]) == -1 and int(state.num_updates[0]) == 1
  # The train step's own loss (what the epoch logs) is the same.
  assert float(stats.loss_sum[0] / stats.tokens[0]) == pytest.approx(float(loss), rel=1e-6)
  first = lambda tree: jax.tree_util.tree_map(lambda x: x[0], tree)
  # The optimizer runs on one flat vector (train.make_optimizer): mu, nu are [P].
  unravel = ravel_pytree(first(state.params))[1]
  moments = tuple(unravel(first(optax.tree_utils.tree_get(state.opt_state, k)))
                  for k in ('mu', 'nu'))
  return float(loss), grads, first(state.params), moments


def test_every_fixture_is_tested():
  assert sorted(p.name for p in DATA.glob('authors_step_*.npz')) == sorted(
      f'authors_step_{v}.npz' for v in ALL_VARIANTS)


@pytest.mark.parametrize('variant', ALL_VARIANTS)
def test_one_training_step_equals_the_authors_code(variant):
  d, arrays, perm, c, model, batch = setup(variant)
  skip = unused(arrays)
  assert 'h0' in skip and set(skip) <= {'h0', 'attention_layer.step_bias'}, skip
  for name in skip:                        # not updated either
    np.testing.assert_array_equal(arrays['after'][name], arrays['before'][name])
  params = weights.to_ours(arrays['before'], perm, skip)
  # Every array of our model has exactly one counterpart of theirs.
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), batch.src, batch.src_len,
                          batch.tgt_in)['params']
  assert flat_shapes(shapes) == flat_shapes(params)

  loss, grads, after, (mu, nu) = one_step(model, c, params, batch)

  # Their loss is -log(softmax + 1e-9), ours -log softmax: they differ by < 1e-9 / p
  # per token, p >= d['min_target_prob'].
  assert float(d['min_target_prob']) > 1e-5
  assert loss == pytest.approx(float(d['loss']), rel=1e-5)
  norm = float(d['grad_norm'])
  # (In numpy: eager jax ops would each compile a small program.)
  global_norm = np.sqrt(sum(np.sum(np.square(g, dtype=np.float64))
                            for g in flat_items(grads).values()))
  assert global_norm == pytest.approx(norm, rel=1e-4)
  their = {k: flat_items(weights.to_ours(arrays[k], perm, skip))
           for k in ('grad', 'after', 'exp_avg', 'exp_avg_sq')}
  for key, g in flat_items(grads).items():
    np.testing.assert_allclose(g, their['grad'][key], rtol=1e-3, atol=1e-5 * norm,
                               err_msg=key)

  # Adam's moments hold the clipped gradient g_c: mu = 0.1 g_c, nu = 0.001 g_c^2.
  clip = min(1.0, c.grad_clip / (norm + 1e-6))      # torch's clip factor
  for key, m in flat_items(mu).items():
    np.testing.assert_allclose(m, their['exp_avg'][key], rtol=1e-3,
                               atol=1e-6 * norm * clip, err_msg=key)
  for key, v in flat_items(nu).items():
    np.testing.assert_allclose(np.sqrt(v / 1e-3), np.sqrt(their['exp_avg_sq'][key] / 1e-3),
                               rtol=1e-3, atol=1e-5 * norm * clip, err_msg=key)

  before = flat_items(params)
  moved = sensitive = total = 0
  for key, got in flat_items(after).items():
    want = their['after'][key]
    # Adam's first step is lr * g_c / (|g_c| + 1e-8): ~lr * sign(g_c) where
    # |g_c| >> 1e-8, and there float32 rounding of g_c barely changes it; parameters
    # then agree within float32 rounding of the ~1e-3 step (and of the parameter).
    # Where |g_c| < 1e-6 the step amplifies the rounding of g_c (e.g. 8e-8 summed from
    # terms ~1e-3, or MonoAttn's gate logit: 2e-11 here, exactly 0 in float32 torch,
    # whose sigmoid(20) rounds to 1): there it may differ by less than one step.
    # Such elements are few.
    settled = np.abs(their['grad'][key] * clip) >= 1e-6
    np.testing.assert_allclose(got[settled], want[settled], rtol=2e-7, atol=1e-6,
                               err_msg=key)
    assert (np.abs(got - want)[~settled] <= c.learning_rate).all(), key
    # Not vacuous: each of those elements moved by ~lr.
    change = np.abs(got - before[key])
    assert (change[settled] > 5e-4).all(), key
    moved += (change > 5e-4).sum()
    sensitive += (~settled).sum()
    total += change.size
  assert moved > 0.95 * total and sensitive < 0.02 * total, (moved, sensitive, total)


def test_trajectory_script_replays_a_trace_of_the_authors_code(tmp_path):
  """experiments/authors_code/trajectory.py's `ours` side, on a one-update trace made of
  the MonoAttn fixture: it reads the sizes off their arrays, maps the weights, encodes
  their rows in our vocabulary, and its first update's loss is theirs."""
  import json
  import trajectory  # pylint: disable=g-import-not-at-top
  d, arrays = load('mono')
  rows = [dict(src=str(s).split('\x1f'), trg=str(t).split('\x1f'))
          for s, t in zip(d['src'], d['trg'])]
  (tmp_path / 'dev_normal.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
  trace = tmp_path / 'trace.npz'
  np.savez(trace, names=d['names'], shapes=d['shapes'], before=d['before'],
           unused=np.array(unused(arrays)), vocab=d['vocab'], src=d['src'], trg=d['trg'],
           sizes=np.array([len(rows)]), losses=np.array([float(d['loss'])]),
           dev_at=np.array([1]), dev_acc=np.array([0.0]), dropout=np.float64(0.0),
           their_model=d['their_model'], dataset=np.array('copy'), time=np.int64(0))
  assert trajectory.sizes_of(arrays['before']) == dict(zip(
      ('gru.embed_dim', 'hidden_dim', 'gru.value_dim'), (int(x) for x in d['dims'][[0, 2, 4]])))
  out = tmp_path / 'out.json'
  trajectory.run_ours(types.SimpleNamespace(
      data=str(tmp_path), trace=str(trace), variant='mono', seed=0, apart=1e-3,
      eval_every=50, out=str(out)))
  got = json.loads(out.read_text())
  assert got['updates'] == 1 and got['dev_at'] == [1] and len(got['dev_ours']) == 1
  assert got['loss_ours'][0] == pytest.approx(float(d['loss']), rel=1e-5)
  assert got['first_update_apart'] is None
