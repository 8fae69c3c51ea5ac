"""Compiling a run's programs before their first call, in one background thread.

`jax.jit` keeps each program it compiled, keyed by the traced function and the
shapes and dtypes of its arguments, whichever thread compiled it: once
`f.lower(*args).compile()` has run in another thread, the call `f(*args)` on
arguments of the same shapes runs without tracing or compiling again
(tests/compile_ahead_test.py checks this on the trainer's programs). XLA:CPU compiles
a program on about two threads, so on a 2-core CPU what this hides is the part of a
core that init or a training epoch leaves idle (MEASUREMENTS.md §4): the first epoch
no longer waits for the evaluation programs, and the job's wall time falls by a few
seconds.

The trainer queues its train step (compiled while the parameters are initialised)
and then the greedy programs of the dev and test splits (compiled while the first
epoch trains); `wait` blocks until the programs a call is about to need are ready,
so that the foreground never compiles a program the thread is still compiling.
"""

import concurrent.futures
from typing import Any, Callable, Sequence

from absl import logging


def _compile(fn: Callable, args: Sequence[Any]) -> None:
  fn.lower(*args).compile()


class Ahead:
  """Compiles `jax.jit` functions for given arguments, one after another, in order.

  compile(fn, *args) queues fn's program for args (arrays, or `jax.ShapeDtypeStruct`s;
  static arguments as the call passes them) and returns its future. A job that fails
  is logged and otherwise ignored: the foreground call then compiles the program
  itself and raises the error where it belongs.
  """

  def __init__(self) -> None:
    self._pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=1, thread_name_prefix='monoloc-compile-ahead')
    self._reported = set()

  def compile(self, fn: Callable, *args: Any) -> concurrent.futures.Future:
    return self._pool.submit(_compile, fn, args)

  def wait(self, futures: Sequence[concurrent.futures.Future]) -> None:
    """Blocks until every job of `futures` has finished (a failed job is logged once)."""
    for future in futures:
      error = future.exception()
      if error is not None and future not in self._reported:
        self._reported.add(future)
        logging.warning('compiling ahead failed (the program compiles at its first '
                        'call instead): %s', error)

  def close(self) -> None:
    """Drops the jobs not started, waits for the one running, and ends the thread."""
    self._pool.shutdown(wait=True, cancel_futures=True)

  def __enter__(self) -> 'Ahead':
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

