"""Shared test setup: a per-session task cache and XLA compilation cache."""

import contextlib
import os
import pathlib

import jax
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO.parent / 'shared'


@pytest.fixture(scope='session', autouse=True)
def _isolated_caches(tmp_path_factory):
  """Generated data and compiled programs are cached in a session directory,
  so tests never touch ~/.cache and identical programs compile once."""
  root = tmp_path_factory.mktemp('caches')
  os.environ['MONOLOC_CACHE_DIR'] = str(root / 'data')
  jax.config.update('jax_compilation_cache_dir', str(root / 'xla'))
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.5)
  # Full float32 products for the kernels the tests call directly (the library's own
  # programs set config.matmul_precision): on a GPU the backend default is TensorFloat-32,
  # and the float64-reference comparisons fail under it (MEASUREMENTS.md §7). No effect on CPU.
  jax.config.update('jax_default_matmul_precision', 'highest')
  yield


# The smallest finished run (one epoch of OneStepAttn on Copy), trained once per test
# session and shared by the tests that only evaluate or decode it.
TINY_RUN = dict(task='copy', variant='onestep', train_size=200, eval_size=32, max_epochs=1,
                test_splits='test_15', progress=False)


@pytest.fixture(scope='session')
def tiny_run(tmp_path_factory):
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  workdir = tmp_path_factory.mktemp('tiny_run')
  config = default.get_config()
  config.update(TINY_RUN)
  train.train_and_evaluate(config, str(workdir))
  return workdir


@pytest.fixture
def per_leaf_layout(monkeypatch):
  """A context manager under which `train` writes checkpoints as versions before
  2026-11-25 did: one optimizer-state array per parameter (`per_leaf_opt_state`)."""
  from monoloc_jax import checkpointing  # pylint: disable=g-import-not-at-top
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top

  @contextlib.contextmanager
  def layout():
    with monkeypatch.context() as m:
      m.setattr(train, 'make_optimizer', train.per_leaf_optimizer)
      m.setattr(train, 'STATE_LAYOUT', checkpointing.UNRECORDED_LAYOUT)
      yield
  return layout
