"""compile_ahead: the trainer's programs compile in the background thread, not at their call."""

import logging as py_logging
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from monoloc_jax import compile_ahead
from monoloc_jax import train
from monoloc_jax.configs import default


class _Compiles(py_logging.Handler):
  """Records (thread name, program name) of every XLA compilation JAX logs."""

  def __init__(self):
    super().__init__(py_logging.WARNING)
    self.seen = []

  def emit(self, record):
    message = record.getMessage()
    if message.startswith('Finished XLA compilation of jit('):
      self.seen.append((record.threadName, message.split('jit(')[1].split(')')[0]))


@pytest.fixture
def compiles():
  """The compilations of the test (JAX's in-memory caches emptied first: a program an
  earlier test of the same process compiled would otherwise not compile again)."""
  jax.clear_caches()
  handler = _Compiles()
  logger = py_logging.getLogger('jax._src.dispatch')
  logger.addHandler(handler)
  jax.config.update('jax_log_compiles', True)
  try:
    yield handler.seen
  finally:
    jax.config.update('jax_log_compiles', False)
    logger.removeHandler(handler)


def test_a_program_compiled_ahead_is_not_compiled_again_at_its_call(compiles):
  f = jax.jit(lambda x, n: jnp.cumsum(x) * n, static_argnums=(1,))
  with compile_ahead.Ahead() as ahead:
    ahead.wait([ahead.compile(f, jax.ShapeDtypeStruct((5,), jnp.float32), 3)])
  ahead_compiles = [c for c in compiles if c[1] == '<lambda>']
  np.testing.assert_allclose(f(jnp.ones(5), 3), 3 * np.arange(1, 6))
  assert [c for c in compiles if c[1] == '<lambda>'] == ahead_compiles
  assert len(ahead_compiles) == 1 and ahead_compiles[0][0].startswith('monoloc-compile-ahead')
  f(jnp.ones(6), 3)                        # another shape: compiled at its call, as before
  assert len([c for c in compiles if c[1] == '<lambda>']) == 2


def test_a_failed_job_is_left_to_the_call(caplog):
  bad = jax.jit(lambda x: x.reshape(7))
  with compile_ahead.Ahead() as ahead:
    ahead.wait([ahead.compile(bad, jax.ShapeDtypeStruct((5,), jnp.float32))])
  assert 'compiling ahead failed' in caplog.text
  with pytest.raises(TypeError):
    bad(jnp.ones(5))


@pytest.mark.parametrize('dev_metric,strategy', [('greedy', 'map'), ('teacher_forced', 'map'),
                                                 ('greedy', 'threads')])
def test_training_compiles_its_train_step_and_evaluation_programs_ahead(tmp_path, compiles,
                                                                        dev_metric, strategy):
  """Of the seed-mapped programs (`multiseed`: 'mapped'), no thread but the background one
  compiles any but init: the train step, dev's program and every test split's greedy
  programs were compiled ahead, so each call found its program compiled. Under 'threads'
  the train step is the one-seed program, and the programs that split the state into
  seeds and join it again are compiled ahead too."""
  config = default.get_config()
  config.update(task='copy', variant='onestep', train_size=300, eval_size=60, max_epochs=1,
                seeds=2, seed_strategy=strategy, test_splits='test_iid,test_15,test_30',
                progress=False, dev_metric=dev_metric, train_widths='widest')
  train.train_and_evaluate(config, str(tmp_path))
  ahead = lambda thread: thread.startswith('monoloc-compile-ahead')
  programs = {'mapped', 'split_seeds', 'join_seeds'}
  elsewhere = [name for thread, name in compiles if not ahead(thread) and name in programs]
  background = [name for thread, name in compiles if ahead(thread) and name in programs]
  assert elsewhere == ['mapped'], compiles            # init
  # train step, dev's program(s), test_30's greedy program (test_iid and test_15 decode
  # in dev's shape when dev is decoded greedily).
  assert background.count('mapped') >= 3, compiles
  expected = {'split_seeds': 1, 'join_seeds': 1} if strategy == 'threads' else {}
  assert {k: background.count(k) for k in expected} == expected, compiles
  assert all(background.count(k) == 0 for k in programs - {'mapped'} - set(expected)), compiles
