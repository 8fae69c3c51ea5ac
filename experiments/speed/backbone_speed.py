"""Training samples/s of the Transformer backbone against the GRU backbone, at equal
parameter counts, in one process (beyond the paper).

  python experiments/speed/backbone_speed.py                          # ReCopy, batch 32
  python experiments/speed/backbone_speed.py --rounds=3 --steps=10 --train_size=640  # smoke

The GRU is the default config's model (the paper's small BiGRU -> GRU). The
Transformer has the GRU's width (hidden_dim) and the grid's Transformer settings
(experiments/grid.py OPTION_TAGS['transformer']); its layers, heads and MLP width
are the first size of `SIZE_PREFERENCE` whose parameter count lies within
--tolerance of the GRU's (`match_transformer_size`). Both models train the same
--steps batches of --task (one seed, the library's train step:
`train.make_train_programs`); every batch shape is compiled before timing. Then
--rounds rounds each time both models (the order alternates between rounds, so
load from other processes hits both alike), and the script prints samples/s per
round, their median / min / max per model, and the Transformer / GRU ratio.
"""

import dataclasses
import pathlib
import statistics
import sys
import time
from typing import Dict, List, Sequence, Tuple

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import ml_collections

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(EXPERIMENTS.parent))     # this checkout's package
sys.path.insert(0, str(EXPERIMENTS))
# pylint: disable=g-import-not-at-top,wrong-import-position
import grid as grids_lib  # experiments/grid.py

from monoloc_jax import backbones
from monoloc_jax import config_paths
from monoloc_jax import errors
from monoloc_jax import input_pipeline as ip
from monoloc_jax import train
from monoloc_jax import validation
from monoloc_jax.configs import default
# pylint: enable=g-import-not-at-top,wrong-import-position

# The Transformer sizes tried, best first: the default shape (2 layers, 4 heads) before
# shallower, deeper, then other head counts; for each, the MLP width is searched.
SIZE_PREFERENCE: Tuple[Tuple[int, int], ...] = ((2, 4), (1, 4), (3, 4), (2, 2), (2, 8),
                                                 (1, 2), (1, 8), (3, 2), (3, 8))
MLP_WIDTHS = tuple(range(32, 2049, 32))     # the MLP widths searched


@dataclasses.dataclass(frozen=True)
class Size:
  """A Transformer size: layers (encoder and decoder each), heads, MLP width."""
  layers: int
  heads: int
  mlp_dim: int


def parameter_count(config: ml_collections.ConfigDict, vocab) -> int:
  """Parameters of the model `config` describes, from shapes only (nothing runs)."""
  model = backbones.from_config(config, vocab)
  src = jnp.ones((1, 3), jnp.int32)
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), src, jnp.array([3], jnp.int32), src)
  return backbones.count_params(shapes['params'])


def with_size(config: ml_collections.ConfigDict, size: Size) -> ml_collections.ConfigDict:
  """A copy of `config` with the Transformer size `size`."""
  out = ml_collections.ConfigDict(config.to_dict())
  out.transformer.update(layers=size.layers, heads=size.heads, mlp_dim=size.mlp_dim)
  return out


def closest_mlp_width(config: ml_collections.ConfigDict, vocab, layers: int, heads: int,
                      target: int) -> int:
  """The width of MLP_WIDTHS that brings a Transformer of `layers` and `heads` closest to
  `target` parameters. The count is affine in the MLP width F (each layer's MLP holds
  2 D F + F + D parameters), so two counts give it for every F."""
  low, high = MLP_WIDTHS[0], MLP_WIDTHS[1]
  c_low, c_high = (parameter_count(with_size(config, Size(layers, heads, f)), vocab)
                   for f in (low, high))
  per_unit = (c_high - c_low) / (high - low)
  return min(MLP_WIDTHS, key=lambda f: abs(c_low + per_unit * (f - low) - target))


def match_transformer_size(transformer_config: ml_collections.ConfigDict, vocab, target: int,
                           tolerance: float) -> Tuple[Size, int]:
  """The first (layers, heads) of SIZE_PREFERENCE (heads dividing the width) that some MLP
  width brings within `tolerance` of `target` parameters, with the MLP width closest to
  it; and its parameter count."""
  for layers, heads in SIZE_PREFERENCE:
    if transformer_config.hidden_dim % heads:
      continue
    size = Size(layers, heads, closest_mlp_width(transformer_config, vocab, layers, heads,
                                                 target))
    count = parameter_count(with_size(transformer_config, size), vocab)
    if abs(count - target) <= tolerance * target:
      return size, count
  raise errors.MonolocError(
      f'no Transformer of width {transformer_config.hidden_dim} (layers and heads of '
      f'{SIZE_PREFERENCE}, MLP {MLP_WIDTHS[0]}-{MLP_WIDTHS[-1]}) has {target:,} parameters '
      f'within {tolerance:.0%}; raise --tolerance')


@dataclasses.dataclass
class Setup:
  """One model's compiled train step, its state and the batches it trains on."""
  name: str
  programs: train.TrainPrograms
  state: train.TrainState
  batches: List[ip.Batch]
  samples: int            # real (non-filler) training rows in `batches`


def make_setup(name: str, config: ml_collections.ConfigDict, data, batches: List[ip.Batch],
               samples: int) -> Setup:
  """Builds `config`'s model and train step (one seed) and compiles every batch shape."""
  model = backbones.from_config(config, data.vocab)
  programs = train.make_train_programs(model, train.make_optimizer(config))
  state = train.create_train_state(programs, [0], batches[0])
  seen = set()
  for b in batches:
    shape = (b.src.shape, b.tgt_in.shape)
    if shape not in seen:
      seen.add(shape)
      state, stats = programs.train_step(state, b, train.EpochStats.zeros(1))
      jax.block_until_ready(stats)
  return Setup(name, programs, state, batches, samples)


def time_round(setup: Setup) -> float:
  """Trains setup's batches once; returns training samples/s (updates setup.state)."""
  stats = train.EpochStats.zeros(1)
  state = setup.state
  t0 = time.perf_counter()
  for b in setup.batches:
    state, stats = setup.programs.train_step(state, b, stats)
  jax.block_until_ready(stats)
  setup.state = state
  return setup.samples / (time.perf_counter() - t0)


def summary(values: Sequence[float], fmt: str = '8.1f') -> str:
  """'median .. min .. max ..' of `values`, each formatted with `fmt`."""
  return (f'median {statistics.median(values):{fmt}}  min {min(values):{fmt}}  '
          f'max {max(values):{fmt}}')


def main(argv) -> None:
  del argv
  f = flags.FLAGS
  base = default.get_config()
  base.update(task=f.task, variant=f.variant, batch_size=f.batch_size,
              train_size=f.train_size, eval_size=16, progress=False)
  validation.validate(base)
  data = ip.load_data(base)
  gru = ml_collections.ConfigDict(base.to_dict())
  gru.backbone = 'gru'
  transformer = ml_collections.ConfigDict(base.to_dict())
  config_paths.overridden(transformer, grids_lib.OPTION_TAGS['transformer'])
  gru_count = parameter_count(gru, data.vocab)
  size, count = match_transformer_size(transformer, data.vocab, gru_count, f.tolerance)
  transformer = with_size(transformer, size)
  validation.validate(transformer)
  print(f'GRU: {gru_count:,} parameters (embed {gru.gru.embed_dim}, hidden {gru.hidden_dim}, '
        f'{gru.gru.num_layers} layer(s))')
  print(f'Transformer: {count:,} parameters ({count / gru_count - 1:+.1%}; width '
        f'{transformer.hidden_dim}, {size.layers} + {size.layers} layers, {size.heads} heads, '
        f'MLP {size.mlp_dim}, positions {transformer.transformer.positions})', flush=True)

  batches = list(ip.train_batches(data.train, f.batch_size, [0], 0, base.data_seed,
                                  data.vocab.sos_id, base.bucket_batches))[:f.steps]
  samples = sum(int((b.tgt_out[0] != data.vocab.pad_id).any(axis=-1).sum()) for b in batches)
  setups = []
  for name, config in (('gru', gru), ('transformer', transformer)):
    t0 = time.perf_counter()
    setups.append(make_setup(name, config, data, batches, samples))
    print(f'{name}: compiled in {time.perf_counter() - t0:.1f} s', flush=True)
  print(f'{f.task} / {f.variant}, batch {f.batch_size}, {len(batches)} steps '
        f'({samples} samples) per model per round, {jax.devices()[0]}', flush=True)

  rates: Dict[str, List[float]] = {s.name: [] for s in setups}
  for r in range(f.rounds):
    order = setups if r % 2 == 0 else setups[::-1]
    for setup in order:
      rates[setup.name].append(time_round(setup))
    print(f"round {r + 1}: gru {rates['gru'][-1]:8.1f} samples/s  transformer "
          f"{rates['transformer'][-1]:8.1f} samples/s  ratio "
          f"{rates['transformer'][-1] / rates['gru'][-1]:.3f}", flush=True)
  for name, values in rates.items():
    print(f'{name:<12} samples/s  {summary(values)}')
  ratios = [t / g for t, g in zip(rates['transformer'], rates['gru'])]
  of_medians = statistics.median(rates['transformer']) / statistics.median(rates['gru'])
  print(f'transformer / gru: {of_medians:.3f} (ratio of medians); per round '
        f"{summary(ratios, '.3f')}")


def _define_flags() -> None:
  """The script's flags (defined only when it runs, so tests can import its functions
  beside other modules' flags)."""
  flags.DEFINE_string('task', 'recopy', 'Task whose batches both models train on.')
  flags.DEFINE_string('variant', 'onestep', 'Cross-attention variant of both models.')
  flags.DEFINE_integer('batch_size', 32, 'Training batch size.', lower_bound=1)
  flags.DEFINE_integer('steps', 50, 'Train steps timed per model per round.', lower_bound=1)
  flags.DEFINE_integer('rounds', 5, 'Rounds (each times both models).', lower_bound=1)
  flags.DEFINE_integer('train_size', 0, 'Training samples loaded (0 = the whole split); the '
                       'first --steps batches are timed.', lower_bound=0)
  flags.DEFINE_float('tolerance', 0.10, "The Transformer's parameter count must lie within "
                     "this fraction of the GRU's.", lower_bound=0.0)


if __name__ == '__main__':
  _define_flags()
  app.run(errors.one_line_errors(main))
