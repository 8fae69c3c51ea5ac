"""What every backbone's decoder shares: its output (`DecodeOutput`), the greedy
decoding loop (`greedy_loop`) and the dtype helper `as_dtype`.

A backbone supplies one pure decoder step,
  step(carry, token [B]) -> (carry, (logits [B, V], weights [B, ...], aux {name: [B, ...]})),
and `greedy_loop` feeds its argmax back. This module imports no backbone.
"""

from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

Array = jax.Array
DType = Any

__all__ = ['DecodeOutput', 'greedy_loop', 'as_dtype']


def as_dtype(x: Array, dtype: DType) -> Array:
  """x in `dtype`; x itself when it already is (`tapped_scan` tracks arrays by identity)."""
  return x if x.dtype == dtype else x.astype(dtype)


class DecodeOutput(NamedTuple):
  """What a decoder pass returns.

  logits: [B, T, V] (teacher forcing) or None (greedy).
  tokens: [B, T] greedy tokens (pad after `<eos>`), or None (teacher forcing).
  attention: [B, T, S] attention weights a_t over input positions (START,
    tokens, END), in at least float32. For direction-mixing variants the
    weights over e_dir are mapped back to the input (`attention.input_attention`),
    so a model that reads backwards shows an anti-diagonal; aux['mu'] stays in
    e_dir units.
  aux: per-step interpretable values [B, T] by name ('mu', 'sigma', 'step',
    'mix'), where the variant has them, plus 'direction' [B] (alpha_dir);
    a backbone may add its own (the Transformer's per layer and head).
  """
  logits: Optional[Array]
  tokens: Optional[Array]
  attention: Array
  aux: Dict[str, Array]


Step = Callable[[Any, Array], Tuple[Any, Tuple[Array, Array, Dict[str, Array]]]]


def greedy_loop(step: Step, carry0: Any, batch: int, max_steps: int, sos_id: int,
                pad_id: int, eos_id: int) -> Tuple[Array, Array, Dict[str, Array]]:
  """Greedy decoding: y_0 = `<sos>`, y_t = argmax logits_t, for at most `max_steps` steps.

  step(carry, token [B]) -> (carry, (logits [B, V], weights [B, ...], aux {name: [B, ...]})).
  A `lax.while_loop` stops as soon as every row has emitted `<eos>`, so the work
  follows the longest actual output, not `max_steps`. Finished rows keep running
  until then (their state is never read) but output `<pad>`.

  Returns, time-major, tokens [max_steps, B], weights [max_steps, B, ...] and aux
  {name: [max_steps, B, ...]} of every step (zeros after the loop stopped).
  """
  _, (_, weights_shape, aux_shapes) = jax.eval_shape(step, carry0,
                                                     jnp.zeros((batch,), jnp.int32))

  def body(state):
    t, carry, token, done, tokens, weights_buf, aux_buf = state
    carry, (logits, weights, aux) = step(carry, token)
    next_token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    emitted = jnp.where(done, pad_id, next_token)
    write = lambda buf, x: jax.lax.dynamic_update_index_in_dim(buf, x, t, 0)
    return (t + 1, carry, next_token, done | (next_token == eos_id),
            write(tokens, emitted), write(weights_buf, weights),
            {k: write(aux_buf[k], v) for k, v in aux.items()})

  def cond(state):
    t, _, _, done = state[:4]
    return (t < max_steps) & ~jnp.all(done)

  buffer = lambda s: jnp.zeros((max_steps,) + s.shape, s.dtype)
  state = (jnp.zeros((), jnp.int32), carry0, jnp.full((batch,), sos_id, jnp.int32),
           jnp.zeros((batch,), bool), jnp.full((max_steps, batch), pad_id, jnp.int32),
           buffer(weights_shape), {k: buffer(v) for k, v in aux_shapes.items()})
  *_, tokens, weights, aux = jax.lax.while_loop(cond, body, state)
  return tokens, weights, aux
