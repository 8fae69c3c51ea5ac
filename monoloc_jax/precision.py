"""How float32 matrix products run: `config.matmul_precision`.

JAX runs a float32 `dot` at the backend's default precision unless told otherwise:
full float32 on CPU, but TensorFloat-32 (inputs rounded to a 10-bit mantissa,
relative error about 1e-3) on NVIDIA GPUs since Ampere, and one bfloat16 pass on a
TPU. The library's numerics are checked against float64 references and the
authors' float32 PyTorch code, so its programs run their products at 'highest'
by default: on an H100 the float64-reference tests fail at the backend default
and pass at 'highest', and a train step of the paper's model costs about 7% more
(MEASUREMENTS.md §7). The models are latency-bound (many tiny products per decoder
step), so the faster product modes buy little here.

A program traced under `traced_under(fn, p)` runs every product it holds at p,
the backward passes included: autodiff's transposed products keep their forward's
precision, and a custom VJP's backward (`tapped_scan`) is traced inside the same
context. A kernel imported on its own (`monoloc_jax.attention`) runs at whatever
precision its caller sets: wrap the call in `jax.default_matmul_precision('highest')`
for the float64-equal numbers.
"""

import functools
from typing import Callable

import jax

from monoloc_jax import errors
from monoloc_jax.configs import default

# config.matmul_precision -> what it means (the names are jax.default_matmul_precision's).
MATMUL_PRECISIONS = {
    'highest': 'full float32 products on every backend (the default)',
    'high': 'TensorFloat-32 on an NVIDIA GPU, three bfloat16 passes on a TPU',
    'default': "the backend's default: TensorFloat-32 on an NVIDIA GPU since Ampere, "
               'one bfloat16 pass on a TPU, float32 on CPU',
}
DEFAULT = default.get_config().matmul_precision   # 'highest', written in configs/default.py

__all__ = ['MATMUL_PRECISIONS', 'DEFAULT', 'of', 'traced_under']


def of(config) -> str:
  """config.matmul_precision; a one-line MonolocError naming the choices for an
  unknown name. (A run written before the field existed gets DEFAULT from
  `rundir.load_config`, which fills missing fields from configs/default.py.)"""
  return _checked(config.matmul_precision)


def _checked(name: str) -> str:
  if name not in MATMUL_PRECISIONS:
    raise errors.unknown_name('matmul_precision', name, MATMUL_PRECISIONS)
  return name


def traced_under(fn: Callable, precision: str = DEFAULT) -> Callable:
  """fn, traced under `jax.default_matmul_precision(precision)`: wrap a function
  before `jax.jit` (or vmap) so every product of the program runs at `precision`."""
  _checked(precision)

  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    with jax.default_matmul_precision(precision):
      return fn(*args, **kwargs)
  return wrapped
