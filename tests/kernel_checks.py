"""Shared checks of the pure kernels (attention, rnn): random inputs, float64
comparison, and one check that a kernel means the same under jit, vmap and grad.

The kernel tests compare float32 kernels to float64 references, so every
comparison casts both sides to float64 and uses one tolerance, `TOL`.
"""

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

TOL = dict(atol=1e-5, rtol=1e-5)


def assert_close(actual, expected):
  np.testing.assert_allclose(np.asarray(actual, np.float64),
                             np.asarray(expected, np.float64), **TOL)


def normal(rng: np.random.Generator, *shape, scale=1.0) -> np.ndarray:
  return (rng.standard_normal(shape) * scale).astype(np.float32)


def uniform(rng: np.random.Generator, *shape, low=0.0, high=1.0) -> np.ndarray:
  return rng.uniform(low, high, shape).astype(np.float32)


def f64(x) -> np.ndarray:
  return np.asarray(x, np.float64)


def random_lengths(rng: np.random.Generator, batch=3, max_len=6) -> np.ndarray:
  """[B] int32 valid lengths in 1..max_len, the first one full (so max_len is used)."""
  out = rng.integers(1, max_len + 1, batch).astype(np.int32)
  out[0] = max_len
  return out


def tree_close(actual, expected):
  a_leaves, a_def = jax.tree_util.tree_flatten(actual)
  e_leaves, e_def = jax.tree_util.tree_flatten(expected)
  assert a_def == e_def
  for a, e in zip(a_leaves, e_leaves):
    assert_close(a, e)


def _is_float(x) -> bool:
  return jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)


def check_jit_vmap_grad(fn: Callable, make: Callable[[np.random.Generator], Any]):
  """fn(*make(rng)) is the same eagerly and under jax.jit; jax.vmap over three
  stacked argument sets equals three calls; and jax.grad of a scalar of its float
  outputs is finite everywhere and, if fn has float arguments, nonzero somewhere."""
  args = make(np.random.default_rng(0))
  eager = fn(*args)
  tree_close(jax.jit(fn)(*args), eager)

  batch = [make(np.random.default_rng(seed)) for seed in (1, 2, 3)]
  stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *batch)
  mapped = jax.jit(jax.vmap(fn))(*stacked)
  for k, one in enumerate(batch):
    tree_close(jax.tree_util.tree_map(lambda v: v[k], mapped), fn(*one))

  def scalar(*a):
    leaves = jax.tree_util.tree_leaves(fn(*a))
    return sum(jnp.sum(jnp.sin(leaf)) for leaf in leaves if _is_float(leaf))
  grads = jax.jit(jax.grad(scalar, argnums=tuple(range(len(args))), allow_int=True))(*args)
  float_grads = [g for g, a in zip(jax.tree_util.tree_leaves(grads),
                                   jax.tree_util.tree_leaves(args)) if _is_float(a)]
  for g in float_grads:
    assert np.all(np.isfinite(np.asarray(g)))
  if float_grads:
    assert any(np.any(np.asarray(g) != 0) for g in float_grads)
