"""XLA's persistent compilation cache, on by default for the command-line tools."""

import os
import pathlib

CACHE_ENV = 'MONOLOC_XLA_CACHE'


def enable_compilation_cache() -> None:
  """Later runs of the same programs skip most compile time.

  The cache lives in `$MONOLOC_XLA_CACHE`, default ~/.cache/monoloc_jax/xla;
  setting the variable to the empty string turns the cache off.
  """
  import jax  # pylint: disable=g-import-not-at-top
  cache = os.environ.get(CACHE_ENV, str(pathlib.Path.home() / '.cache' / 'monoloc_jax' / 'xla'))
  if cache:
    jax.config.update('jax_compilation_cache_dir', cache)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)
