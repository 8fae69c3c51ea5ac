"""Shared test setup: a per-session task cache and XLA compilation cache."""

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
  yield
