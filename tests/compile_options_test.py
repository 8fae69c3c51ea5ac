"""The tests' cheap-compilation options go only to the compiler that knows them."""

import jax
import jax.numpy as jnp

import compile_options


def test_cpu_gets_the_cheap_options_and_accelerators_none():
  assert compile_options.fast('cpu') == compile_options.CPU_FAST
  assert compile_options.fast('cpu') is not compile_options.CPU_FAST   # a copy per caller
  assert compile_options.fast('gpu') == {}
  assert compile_options.fast('tpu') == {}


def test_the_options_compile_on_this_backend():
  f = jax.jit(lambda x: jnp.tanh(x) @ x.T, compiler_options=compile_options.fast())
  x = jnp.arange(6.0).reshape(2, 3)
  assert jnp.allclose(f(x), jnp.tanh(x) @ x.T)
