"""config.matmul_precision reaches every product of the train and decode programs."""

import jax
from jax.extend import core as jax_core
import pytest

from monoloc_jax import backbones
from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import input_pipeline as ip
from monoloc_jax import precision
from monoloc_jax import rundir
from monoloc_jax import train
from monoloc_jax.backbones import gru
from monoloc_jax.configs import default


def _dot_precisions(jaxpr) -> list:
  """The `precision` of every dot_general in a closed jaxpr and all its sub-jaxprs
  (pjit, scan, while, cond, custom_vjp bodies)."""
  found = []

  def walk(jp):
    for eqn in jp.eqns:
      if eqn.primitive.name == 'dot_general':
        found.append(eqn.params['precision'])
      for v in eqn.params.values():
        for sub in (v if isinstance(v, (tuple, list)) else (v,)):
          if isinstance(sub, jax_core.ClosedJaxpr):
            walk(sub.jaxpr)
          elif isinstance(sub, jax_core.Jaxpr):
            walk(sub)
  walk(jaxpr.jaxpr)
  return found


def _programs(backward: str, matmul_precision: str):
  config = default.get_config()
  config.update(task='copy', variant='onestep', train_size=32, eval_size=8,
                hidden_dim=8)
  config.gru.update(embed_dim=4, value_dim=8, decoder_backward=backward)
  data = ip.load_data(config)
  model = backbones.from_config(config, data.vocab)
  programs = train.make_train_programs(model, train.make_optimizer(config), 'auto',
                                       matmul_precision)
  batch = next(ip.train_batches(data.train, 8, [0], 0, 0, data.vocab.sos_id))
  state = train.create_train_state(programs, [0], batch)
  return model, programs, state, batch


@pytest.mark.parametrize('backward', sorted(gru.DECODER_BACKWARDS))
@pytest.mark.parametrize('name, expected', [('highest', jax.lax.Precision.HIGHEST),
                                            ('default', jax.lax.Precision.DEFAULT)])
def test_every_product_of_the_train_step_runs_at_the_configured_precision(
    backward, name, expected):
  """Forward, autodiff backward and the custom VJP's backward (traced while the
  gradient is taken) all carry the precision: on a GPU 'default' is TensorFloat-32,
  which fails the float64-reference tests (MEASUREMENTS.md §7)."""
  _, programs, state, batch = _programs(backward, name)
  stats = train.EpochStats.zeros(1)
  dots = _dot_precisions(jax.make_jaxpr(programs.train_step)(state, batch, stats))
  assert len(dots) > 20, len(dots)        # encoder, decoder step, their transposes, output
  assert set(dots) == {(expected, expected)}, set(dots)


def test_decoding_runs_at_the_configured_precision():
  model, programs, state, batch = _programs('autodiff', 'highest')
  evals = inference.make_eval_programs(model, 'auto', 'highest')
  dots = _dot_precisions(jax.make_jaxpr(evals.greedy, static_argnums=(3,))(
      state.params, batch.src[0], batch.src_len[0], 5))
  assert dots and set(dots) == {(jax.lax.Precision.HIGHEST,) * 2}


def test_config_precision_names_and_errors():
  config = default.get_config()
  assert config.matmul_precision == precision.DEFAULT == 'highest'
  stored = config.to_dict()
  del stored['matmul_precision']            # a run written before the field existed
  assert precision.of(rundir.with_defaults(stored)) == 'highest'
  config = default.get_config()
  config.matmul_precision = 'tf32'
  with pytest.raises(errors.MonolocError, match='unknown matmul_precision .* default, high, highest'):
    precision.of(config)
  with pytest.raises(errors.MonolocError, match='valid matmul_precisions'):
    precision.traced_under(lambda: None, 'fast')
