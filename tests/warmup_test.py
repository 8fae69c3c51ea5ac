"""config.warmup_steps: the optimizer's linear lr warmup (train.make_optimizer)."""

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
import numpy as np
import optax
import pytest

from monoloc_jax import errors
from monoloc_jax import train
from monoloc_jax import validation
from monoloc_jax.configs import default


def _config(**overrides):
  config = default.get_config()
  config.update(overrides)
  return config


def _params():
  """A small parameter tree of two leaves."""
  return {'w': jnp.ones((3, 4)), 'b': jnp.zeros((4,))}


def _grads(step: int):
  """Deterministic gradients of `step`, different every step and well under the clip."""
  key = jax.random.PRNGKey(step)
  kw, kb = jax.random.split(key)
  return {'w': 0.1 * jax.random.normal(kw, (3, 4)), 'b': 0.1 * jax.random.normal(kb, (4,))}


def _updates(config, steps: int, lr=None):
  """The updates of `steps` optimizer steps on `_grads`; lr replaces the config's."""
  tx = train.make_optimizer(config)
  params = _params()
  state = tx.init(params)
  if lr is not None:
    state = train.set_learning_rate(state, lr)
  out = []
  for k in range(steps):
    updates, state = tx.update(_grads(k), state, params)
    params = optax.apply_updates(params, updates)
    out.append(updates)
  return out


def test_first_updates_are_scaled_linearly_then_not_at_all():
  """Update k (0-based) under warmup W is the no-warmup update times min(1, (k + 1) / W):
  both optimizers see the same gradients (fixed per step, weight decay 0), so Adam's
  moments agree and only the step differs."""
  warmup = 4
  plain = _updates(_config(warmup_steps=0), 7)
  warm = _updates(_config(warmup_steps=warmup), 7)
  for k, (u0, uw) in enumerate(zip(plain, warm)):
    factor = min(1.0, (k + 1) / warmup)
    for name in ('w', 'b'):
      np.testing.assert_allclose(uw[name], factor * u0[name], rtol=1e-6, atol=0,
                                 err_msg=f'update {k}, leaf {name}')
  # The first update is a quarter of the plain one, not the plain one.
  assert not np.allclose(warm[0]['w'], plain[0]['w'])


def test_per_seed_learning_rate_still_sets_the_step_under_warmup():
  """set_learning_rate (the plateau rules' halving) still reaches AdamW's lr."""
  full = _updates(_config(warmup_steps=3), 4, lr=jnp.asarray(1e-3))
  half = _updates(_config(warmup_steps=3), 4, lr=jnp.asarray(5e-4))
  for u_full, u_half in zip(full, half):
    np.testing.assert_allclose(u_half['w'], 0.5 * u_full['w'], rtol=1e-6, atol=0)


def test_no_warmup_keeps_the_optimizer_state_of_before():
  """warmup_steps=0 gives the very opt_state tree of the optimizer without the field
  (clip, then AdamW with an injected lr), so checkpoints written before convert
  (train.state_migrations)."""
  params = _params()
  before = optax.chain(optax.clip_by_global_norm(5.0),
                       optax.inject_hyperparams(optax.adamw)(learning_rate=1e-3,
                                                             weight_decay=0.0))
  structure = lambda tx, p=params: jax.tree_util.tree_structure(tx.init(p))
  assert structure(train.per_leaf_optimizer(_config(warmup_steps=0))) == structure(before)
  assert structure(train.per_leaf_optimizer(_config(warmup_steps=5))) != structure(before)
  flat = ravel_pytree(params)[0]
  assert structure(train.make_optimizer(_config(warmup_steps=0))) == structure(before, flat)


def test_warmup_factor_values():
  factor = train.warmup_factor(4)
  np.testing.assert_allclose([float(factor(jnp.asarray(k))) for k in range(6)],
                             [0.25, 0.5, 0.75, 1.0, 1.0, 1.0], rtol=0, atol=0)


@pytest.mark.parametrize('value', [-1, -100])
def test_negative_warmup_is_a_one_line_error(value):
  with pytest.raises(errors.MonolocError,
                     match=rf'^bad value for config.warmup_steps: {value}; it must be an '
                           r'integer >= 0 \(0 = no warmup\)$'):
    validation.validate(_config(warmup_steps=value))
