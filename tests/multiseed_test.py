"""Tests of `multiseed`: the 'threads' strategy gives the results of 'map', to the bit."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from monoloc_jax import input_pipeline as ip
from monoloc_jax import inference, multiseed, variants
from monoloc_jax.backbones import gru
from monoloc_jax.tasks import Example
from monoloc_jax.vocab import Vocabulary


def test_split_and_join_seeds_are_inverse():
  tree = {'a': jnp.arange(12.).reshape(3, 4), 'b': (jnp.arange(3), jnp.ones((3, 2, 2)))}
  parts = multiseed.split_seeds(tree, 3)
  assert len(parts) == 3 and parts[1]['a'].shape == (1, 4)
  np.testing.assert_array_equal(parts[2]['b'][0], [2])
  joined = multiseed.join_seeds(parts)
  for a, b in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(joined)):
    np.testing.assert_array_equal(a, b)


def test_run_steps_calls_its_hooks_once_per_step_under_threads(monkeypatch):
  """Under 'threads' each seed steps in its own thread; the progress wrapper and on_step
  follow one loop only (the bar and the kill hook see one epoch, not one per seed), and
  each seed's state is the fold of its own slices of the batches."""
  monkeypatch.setattr(multiseed, 'host_cores', lambda: 2)
  step = jax.jit(lambda state, batch, stats: (state + batch, stats + 1))
  batches = [np.arange(3.) * (k + 1) for k in range(4)]          # [N=3] each
  seen, wrapped = [], []
  def progress(it):
    wrapped.append(1)
    return it
  state, stats = multiseed.run_steps(step, jnp.zeros(3), jnp.zeros(3), batches, 'threads',
                                     progress=progress, on_step=seen.append)
  np.testing.assert_array_equal(state, np.arange(3.) * 10)       # 1 + 2 + 3 + 4 = 10
  np.testing.assert_array_equal(stats, [4, 4, 4])
  assert seen == [0, 1, 2, 3] and wrapped == [1]


def test_threads_decode_and_score_dev_exactly_as_map(monkeypatch):
  """A split of several batches decoded under 'threads' (batches side by side from host
  threads) gives the tokens and attention of 'map', and teacher-forced dev the same marks."""
  monkeypatch.setattr(multiseed, 'host_cores', lambda: 2)
  rng = np.random.default_rng(5)
  examples = [Example(tuple(str(t) for t in rng.choice(list('abcdef'), n)),
                      tuple(str(t) for t in rng.choice(list('abcdef'), n)))
              for n in rng.integers(3, 12, 80)]
  vocab = Vocabulary.from_examples(examples)
  split = ip.encode_split(examples, vocab)
  model = gru.Seq2Seq(vocab_size=len(vocab), variant=variants.get('mono'), hidden_dim=16,
                      embed_dim=8, value_dim=16)
  keys = jax.random.split(jax.random.PRNGKey(1), 2)
  params = jax.vmap(lambda k: model.init({'params': k}, split.src[:2], split.src_len[:2],
                                         method='build')['params'])(keys)
  mapped, threaded = (inference.make_eval_programs(model, s) for s in ('map', 'threads'))
  assert (mapped.threads, threaded.threads) == (1, 2)
  assert len(ip.eval_batches(split, 16, vocab.sos_id)) > 2
  tok_m, att_m = inference.decode_split(mapped, params, split, 16, vocab, keep_attention=True)
  tok_t, att_t = inference.decode_split(threaded, params, split, 16, vocab,
                                        keep_attention=True)
  np.testing.assert_array_equal(tok_m, tok_t)
  np.testing.assert_array_equal(att_m, att_t)
  data = ip.TaskData(train=split, dev=split, tests={}, vocab=vocab)
  config = ml_collections.ConfigDict({'dev_metric': 'teacher_forced', 'eval_batch_size': 16})
  np.testing.assert_array_equal(inference.dev_accuracy(mapped, params, data, config),
                                inference.dev_accuracy(threaded, params, data, config))
