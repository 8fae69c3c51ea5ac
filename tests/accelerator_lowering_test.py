"""The accelerator path, lowered for GPU and TPU on this CPU (issue #58 item 3).

What is lowered: the programs a GPU or TPU run compiles, built through the
library's own functions (`backbones.from_config`, `train.make_train_programs`,
`train.create_train_state`, `inference.make_eval_programs`) from the
configuration such a run picks by default: config.seed_strategy 'auto' resolves
to 'vmap' on an accelerator (`multiseed.resolve`), so the train step is the
vmapped-seed step (2 seeds here); float32 (config.dtype) with every product at
config.matmul_precision 'highest'; the paper's model sizes; inputs from the
library's own input pipeline (a Copy batch, `ip.train_batches` / `ip.eval_batches`).

  * both backbones (config.backbone 'gru' and 'transformer'), each with two
    location variants (OneStepAttn, MonoAttn: the location recurrence is a
    `lax.scan`, greedy decoding a `lax.while_loop`);
  * the train step and greedy decoding; for OneStepAttn also the teacher-forced
    dev metric and the initialiser;
  * the options an accelerator run may choose: config.dtype 'bfloat16' (TPU) and
    config.gru.decoder_backward 'custom' (the hand-written backward, `tapped_scan`);
  * the train step and greedy decoding over 8 devices laid out by `sharding.plan`
    (2 seeds x 4 data shards; a subprocess with 8 forced CPU devices), their inputs
    placed by `Placement.put_state` / `put_batch` / `sharding.put_like`.

Each program is exported with `jax.export` once per platform ('cuda', 'tpu'), so a
failure names its platform. No accelerator is needed: lowering stops before the
backend's compiler. A program fails here on
  * a lowering error: e.g. a host callback (jax.debug.print, pure_callback,
    io_callback) cannot lower for a platform other than the host's, and
    `jax.export` refuses a custom call without a compatibility guarantee;
  * a custom call outside ALLOWED_CUSTOM_CALLS[platform]: stricter than
    `jax.export`'s own list, which lets vendor and Pallas kernels through;
  * an element type outside the configuration's (e.g. a float64 creeping in);
  * a matrix product not at the configured precision (the tests run with a
    global 'highest' (conftest.py), so the programs are exported under the
    backend default: the precision must come from the program itself);
  * inputs or outputs other than the library passes and documents (shapes,
    dtypes; the train step's state comes back as it went in, so donation holds;
    over 8 devices, each input laid out as the library placed it).
"""

import functools
import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any, Callable, Dict, FrozenSet, List, NamedTuple, Optional, Tuple

import jax
from jax import export
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from monoloc_jax import backbones
from monoloc_jax import config_paths
from monoloc_jax import inference
from monoloc_jax import input_pipeline as ip
from monoloc_jax import multiseed
from monoloc_jax import precision
from monoloc_jax import rundir
from monoloc_jax import sharding
from monoloc_jax import train
from monoloc_jax.configs import default

REPO = pathlib.Path(__file__).resolve().parent.parent
PLATFORMS = ('cuda', 'tpu')
# The jax.default_backend() names of the platforms, for `multiseed.resolve`.
BACKENDS = {'cuda': 'gpu', 'tpu': 'tpu'}

# Custom-call targets a lowered program may hold, per platform, each with its reason.
# None appears today: the programs are plain StableHLO on both platforms (the
# single-device and the 8-device ones: shardings lower to `sdy` attributes, not to
# Sharding / SPMDFullToShardShape custom calls; jax.random's threefry lowers to
# plain integer ops, not to cu_threefry2x32). A new entry needs its reason here.
ALLOWED_CUSTOM_CALLS: Dict[str, FrozenSet[str]] = {'cuda': frozenset(), 'tpu': frozenset()}

# The element types (MLIR names) a program of each config.dtype may hold: the float
# type, int32 token ids / lengths / counters, uint32 PRNG keys, i1 masks, and ui64:
# jax.random's partitionable threefry numbers the random bits of dropout with a 64-bit
# counter (`iota_2x32_shape`, split into two uint32 halves), also without x64. A
# bfloat16 model keeps float32 parameters, location recurrence, softmaxes and logits.
_INTEGERS = frozenset({'i32', 'ui32', 'ui64', 'i1'})
ELEMENT_TYPES: Dict[str, FrozenSet[str]] = {
    'float32': _INTEGERS | {'f32'},
    'bfloat16': _INTEGERS | {'bf16', 'f32'},
}
# config.matmul_precision -> the `precision` every dot_general of the program carries.
DOT_PRECISION = {'highest': 'HIGHEST', 'high': 'HIGH'}

# The run: the default config (the paper's sizes) on a short Copy split, 2 seeds.
BASE = {'task': 'copy', 'train_size': 64, 'eval_size': 16, 'test_splits': 'test_15',
        'seeds': 2, 'progress': False}

ALL_PROGRAMS = ('train_step', 'greedy', 'teacher_forced', 'init')


class Case(NamedTuple):
  """One configuration: its test id, its config fields (by path) over BASE and the
  programs of it that are lowered."""
  name: str
  overrides: Dict[str, Any]
  programs: Tuple[str, ...]


CASES = (
    Case('gru-onestep', {'backbone': 'gru', 'variant': 'onestep'}, ALL_PROGRAMS),
    Case('gru-mono', {'backbone': 'gru', 'variant': 'mono'}, ('train_step', 'greedy')),
    Case('transformer-onestep', {'backbone': 'transformer', 'variant': 'onestep'},
         ALL_PROGRAMS),
    Case('transformer-mono', {'backbone': 'transformer', 'variant': 'mono'},
         ('train_step', 'greedy')),
    Case('gru-onestep-bf16', {'backbone': 'gru', 'variant': 'onestep', 'dtype': 'bfloat16'},
         ('train_step', 'greedy')),
    Case('transformer-onestep-bf16', {'backbone': 'transformer', 'variant': 'onestep',
                                      'dtype': 'bfloat16'}, ('train_step', 'greedy')),
    Case('gru-onestep-custom_backward', {'backbone': 'gru', 'variant': 'onestep',
                                         'gru.decoder_backward': 'custom'}, ('train_step',)),
)
CASES_BY_NAME = {c.name: c for c in CASES}


def config_of(case: Case) -> ml_collections.ConfigDict:
  """The default config, with BASE and then the case's fields."""
  return config_paths.overridden(config_paths.overridden(default.get_config(), BASE),
                                 case.overrides)


@functools.lru_cache(maxsize=None)
def task_data() -> ip.TaskData:
  """The Copy data of BASE (the same for every case)."""
  return ip.load_data(config_paths.overridden(default.get_config(), BASE))


class Program(NamedTuple):
  """A jitted program, the arguments the library calls it with, and what it returns."""
  fn: Callable
  args: tuple
  out: Any        # a pytree of jax.ShapeDtypeStruct: the documented outputs
  products: bool = True   # it holds matrix products (the initialiser only draws numbers)


def abstract(tree: Any) -> Any:
  """Shapes and dtypes of a tree of arrays, with the shardings of placed jax.Arrays."""
  def spec(a) -> jax.ShapeDtypeStruct:
    placed = a.sharding if isinstance(a, jax.Array) else None
    return jax.ShapeDtypeStruct(np.shape(a), a.dtype, sharding=placed)
  return jax.tree_util.tree_map(spec, tree)


def strategy_on(case: Case, platform: str) -> str:
  """The seed strategy a run of `case` picks on `platform` (`multiseed.resolve`)."""
  return multiseed.resolve(config_of(case).seed_strategy, BACKENDS[platform])


def build_programs(case: Case, strategy: str,
                   placement: Optional[sharding.Placement] = None) -> Dict[str, Program]:
  """The programs of `case` as a run with seed strategy `strategy` builds and calls them.

  placement: the run's `sharding.plan`; its inputs are placed as the trainer and
  `inference.decode_split` place them (default: one device, unplaced).
  """
  config = config_of(case)
  data = task_data()
  model = backbones.from_config(config, data.vocab)
  programs = train.make_train_programs(model, train.make_optimizer(config), strategy,
                                       precision.of(config))
  eval_programs = inference.make_eval_programs(model, strategy, precision.of(config))
  seeds = rundir.seeds_of(config)
  n = len(seeds)
  batch = next(ip.train_batches(data.train, config.batch_size, seeds, 0, config.data_seed,
                                data.vocab.sos_id, config.bucket_batches))
  probe = ip.Batch(*(x[:1] for x in batch))
  state = jax.eval_shape(lambda p: train.create_train_state(programs, seeds, p), probe)
  stats = jax.eval_shape(lambda: train.EpochStats.zeros(n))
  _, dev, steps = ip.eval_batches(data.dev, config.eval_batch_size, data.vocab.sos_id)[0]
  if placement is not None:        # real (zero) arrays, placed by the library's functions
    zeros = lambda tree: jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), tree)
    state, stats = placement.put_state((zeros(state), zeros(stats)))
    batch = placement.put_batch(batch)
    dev = ip.Batch(*sharding.put_like(state.params, *dev))
  state, stats, batch, dev, probe = abstract((state, stats, batch, dev, probe))
  params = state.params
  b, length = dev.src.shape
  out = {
      'train_step': Program(programs.train_step, (state, batch, stats), (state, stats)),
      'greedy': Program(eval_programs.greedy, (params, dev.src, dev.src_len, steps),
                        (jax.ShapeDtypeStruct((n, b, steps), jnp.int32),
                         jax.ShapeDtypeStruct((n, b, steps, length + 2), jnp.float32))),
      'teacher_forced': Program(eval_programs.teacher_forced_accuracy, (params, dev),
                                jax.ShapeDtypeStruct((n, b), jnp.bool_)),
      # As `create_train_state` calls it: init keys [N, 2] (shaped as the dropout keys)
      # and the first seed's rows of a training batch.
      'init': Program(programs.init, (state.key,) + tuple(
          jax.ShapeDtypeStruct(x.shape[1:], x.dtype) for x in probe[:2]),
                      (params, state.opt_state), products=False),
  }
  return {name: out[name] for name in case.programs}


# ---------------------------------------------------------------------------
# Reading an exported module.
# ---------------------------------------------------------------------------
_CUSTOM_CALL = re.compile(r'stablehlo\.custom_call @([^\s(]+)|call_target_name = "([^"]+)"')
_ELEMENT_TYPE = re.compile(r'tensor<(?:[0-9?]+x)*([a-z][a-z0-9]*)')
_DOT = re.compile(r'stablehlo\.dot(?:_general)? [^\n]*')


def custom_calls(module: str) -> FrozenSet[str]:
  """The targets of every custom call of a module's text (pretty and generic forms)."""
  return frozenset(a or b for a, b in _CUSTOM_CALL.findall(module))


def element_types(module: str) -> FrozenSet[str]:
  """Every tensor element type of a module's text ('f32', 'i1', ...)."""
  return frozenset(_ELEMENT_TYPE.findall(module))


def dots_not_at(module: str, want: str) -> List[str]:
  """The dot / dot_general ops of a module whose precision is not [want, want]."""
  return [d for d in _DOT.findall(module) if f'precision = [{want}, {want}]' not in d]


def avals(tree: Any) -> List[Tuple[tuple, np.dtype]]:
  """(shape, dtype) of every leaf, in tree order."""
  return [(tuple(x.shape), np.dtype(x.dtype)) for x in jax.tree_util.tree_leaves(tree)]


def export_for(where: str, fn: Callable, args: tuple, platform: str) -> export.Exported:
  """`fn` exported for `platform` under the backend-default matmul precision; a lowering
  error is an AssertionError naming `where` and the platform."""
  try:
    with jax.default_matmul_precision('default'):
      return export.export(fn, platforms=(platform,))(*args)
  except Exception as e:  # pylint: disable=broad-except
    raise AssertionError(f'{where} does not lower for {platform}: '
                         f'{type(e).__name__}: {e}') from e


def check_module(where: str, exported: export.Exported, platform: str,
                 types: FrozenSet[str], dot_precision: str, products: bool = True) -> None:
  """The custom calls, element types and product precision of an exported program
  (products: whether it must hold a product, so that the regex is seen to match)."""
  module = exported.mlir_module()
  unexpected = custom_calls(module) - ALLOWED_CUSTOM_CALLS[platform]
  assert not unexpected, (f'{where} on {platform}: unexpected custom call(s) '
                          f'{sorted(unexpected)}; allowed: {sorted(ALLOWED_CUSTOM_CALLS[platform])}')
  found = element_types(module)
  assert 'f32' in found, f'{where} on {platform}: no f32 tensor read in the module text'
  extra = found - types
  assert not extra, f'{where} on {platform}: element types {sorted(extra)} outside {sorted(types)}'
  assert _DOT.search(module) or not products, (
      f'{where} on {platform}: no product read in the module text')
  wrong = dots_not_at(module, dot_precision)
  assert not wrong, (f'{where} on {platform}: {len(wrong)} product(s) not at precision '
                     f'{dot_precision}, e.g. {wrong[0][:200]}')


def check_program(case: Case, name: str, program: Program, platform: str) -> export.Exported:
  """Exports one program of `case` for `platform` and checks it; returns the export."""
  where = f'{case.name} {name}'
  config = config_of(case)
  exported = export_for(where, program.fn, program.args, platform)
  assert exported.platforms == (platform,)
  check_module(where, exported, platform, ELEMENT_TYPES[config.dtype],
               DOT_PRECISION[precision.of(config)], program.products)
  passed = [a for a in program.args if not isinstance(a, int)]   # greedy's steps is static
  assert avals(exported.in_avals) == avals(passed), (
      f'{where} on {platform}: the program takes other inputs than the library passes')
  assert avals(exported.out_avals) == avals(program.out), (
      f'{where} on {platform}: outputs {avals(exported.out_avals)} are not the documented '
      f'{avals(program.out)}')
  return exported


# ---------------------------------------------------------------------------
# One device.
# ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def programs_of(case_name: str, strategy: str) -> Dict[str, Program]:
  """Built once per strategy: both platforms lower the same jitted (traced once) programs."""
  return build_programs(CASES_BY_NAME[case_name], strategy)


def test_an_accelerator_run_takes_the_vmapped_seed_step():
  """The programs below are the accelerator's: 'auto' is 'vmap' on a GPU and a TPU."""
  config = default.get_config()
  assert config.seed_strategy == 'auto'
  assert {multiseed.resolve(config.seed_strategy, b) for b in BACKENDS.values()} == {'vmap'}
  assert config.dtype == 'float32' and precision.of(config) == 'highest'


@pytest.mark.parametrize('case,program,platform', [
    (c.name, p, platform) for c in CASES for p in c.programs for platform in PLATFORMS])
def test_program_lowers_for_the_accelerator(case, program, platform):
  strategy = strategy_on(CASES_BY_NAME[case], platform)
  check_program(CASES_BY_NAME[case], program, programs_of(case, strategy)[program], platform)


# ---------------------------------------------------------------------------
# 8 devices: the mesh of `sharding.plan` (a subprocess with 8 forced CPU devices).
# ---------------------------------------------------------------------------
SHARDED_CASE = CASES_BY_NAME['gru-onestep']
SHARDED_PROGRAMS = ('train_step', 'greedy')
N_DEVICES = 8


def sdy_dims(spec: jax.sharding.PartitionSpec, ndim: int) -> str:
  """A PartitionSpec as the dims of an `sdy.sharding` attribute: [{"seed"}, {}, ...]."""
  dims = list(spec) + [None] * (ndim - len(spec))
  return '[' + ', '.join('{}' if d is None else '{' + ', '.join(
      f'"{a}"' for a in (d if isinstance(d, tuple) else (d,))) + '}' for d in dims) + ']'


def arg_shardings(module: str) -> List[Optional[str]]:
  """The `sdy.sharding` dims of each argument of the module's public main (None: unset)."""
  sig = module[module.index('func.func public @main('):]
  sig = sig[:sig.index(') -> (')]
  out = []
  for arg in re.split(r'%arg\d+: ', sig)[1:]:
    m = re.search(r'sdy\.sharding = #sdy\.sharding<@\w+, (\[[^\]]*\])>', arg)
    out.append(m.group(1) if m else None)
  return out


def sharded_report() -> Dict[str, Optional[str]]:
  """In a process with N_DEVICES devices: '<program> <platform>' -> None when that
  program, built and placed as a run over all devices would, lowers and passes every
  check (its custom calls, types, products, and inputs laid out as placed), else the
  failure."""
  assert jax.device_count() == N_DEVICES, jax.devices()
  config = config_of(SHARDED_CASE)
  placement = sharding.plan(config.seeds, config.batch_size)
  assert placement.shape == (2, 4), placement.describe()
  report = {}
  built = {}
  for platform in PLATFORMS:
    strategy = strategy_on(SHARDED_CASE, platform)
    if strategy not in built:
      built[strategy] = build_programs(SHARDED_CASE, strategy, placement)
    programs = built[strategy]
    for name in SHARDED_PROGRAMS:
      program = programs[name]
      try:
        exported = check_program(SHARDED_CASE, name, program, platform)
        assert exported.nr_devices == N_DEVICES, exported.nr_devices
        module = exported.mlir_module()
        assert '"seed"=2, "data"=4' in module, 'the mesh is not the plan\'s seed=2 x data=4'
        leaves = [a for a in jax.tree_util.tree_leaves(program.args)
                  if isinstance(a, jax.ShapeDtypeStruct)]
        want = [sdy_dims(a.sharding.spec, len(a.shape)) for a in leaves]
        got = arg_shardings(module)
        assert got == want, f'inputs laid out as {got}, placed as {want}'
        report[f'{name} {platform}'] = None
      except AssertionError as e:
        report[f'{name} {platform}'] = str(e)
  return report


_CHILD = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import accelerator_lowering_test as t
print('REPORT ' + json.dumps(t.sharded_report()))
'''


@pytest.fixture(scope='module')
def sharded():
  env = dict(os.environ, XLA_FLAGS=f'--xla_force_host_platform_device_count={N_DEVICES}',
             JAX_PLATFORMS='cpu',
             PYTHONPATH=str(REPO) + os.pathsep + os.environ.get('PYTHONPATH', ''))
  proc = subprocess.run([sys.executable, '-c', _CHILD, str(REPO / 'tests')],
                        capture_output=True, text=True, env=env, cwd=REPO, timeout=600,
                        check=False)
  lines = [l for l in proc.stdout.splitlines() if l.startswith('REPORT ')]
  assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
  return json.loads(lines[-1][len('REPORT '):])


@pytest.mark.parametrize('program,platform', [
    (p, platform) for p in SHARDED_PROGRAMS for platform in PLATFORMS])
def test_sharded_program_lowers_for_the_accelerator(sharded, program, platform):
  key = f'{program} {platform}'
  assert key in sharded, sorted(sharded)
  assert sharded[key] is None, sharded[key]


# ---------------------------------------------------------------------------
# The checks can fail.
# ---------------------------------------------------------------------------
X = jax.ShapeDtypeStruct((4, 4), jnp.float32)


@pytest.mark.parametrize('callback', ['debug_print', 'pure_callback', 'io_callback'])
def test_a_host_callback_in_a_program_is_a_lowering_error(callback):
  from jax.experimental import io_callback  # pylint: disable=g-import-not-at-top
  calls = {
      'debug_print': lambda x: jax.debug.print('x {}', x),
      'pure_callback': lambda x: jax.pure_callback(np.asarray, X, x),
      'io_callback': lambda x: io_callback(np.asarray, X, x),
  }

  def fn(x):
    y = calls[callback](x)        # used, so that a pure callback is not dropped
    return x @ (x if y is None else y)
  for platform in PLATFORMS:
    with pytest.raises(AssertionError, match=f'does not lower for {platform}'):
      export_for(callback, jax.jit(fn), (X,), platform)


def test_a_custom_call_off_the_allow_list_fails():
  """ApproxTopK is a custom call `jax.export` guarantees (it exports), but none of
  the library's programs holds one: the allow-list refuses it."""
  exported = export_for('approx_max_k', jax.jit(lambda x: jax.lax.approx_max_k(x, 2)),
                        (X,), 'tpu')
  assert custom_calls(exported.mlir_module()) == {'ApproxTopK'}
  with pytest.raises(AssertionError, match=r"unexpected custom call\(s\) \['ApproxTopK'\]"):
    check_module('approx_max_k', exported, 'tpu', ELEMENT_TYPES['float32'], 'HIGHEST')


def test_a_product_at_the_backend_default_fails():
  """A program whose products are not traced under `precision.traced_under` runs them
  at the backend default (TensorFloat-32 on a GPU): the precision check sees it."""
  plain = export_for('plain', jax.jit(lambda x: x @ x), (X,), 'cuda')
  with pytest.raises(AssertionError, match='not at precision HIGHEST'):
    check_module('plain', plain, 'cuda', ELEMENT_TYPES['float32'], 'HIGHEST')
  wrapped = export_for('wrapped', jax.jit(precision.traced_under(lambda x: x @ x)), (X,), 'cuda')
  check_module('wrapped', wrapped, 'cuda', ELEMENT_TYPES['float32'], 'HIGHEST')


def test_a_float64_in_a_program_fails():
  module = 'func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf64>) {'
  assert element_types(module) == {'f32', 'f64'}
  assert custom_calls('%0 = stablehlo.custom_call @xla_ffi_python_gpu_callback(%arg0)\n'
                      '"stablehlo.custom_call"(%1) {call_target_name = "Sharding"}') == {
                          'xla_ffi_python_gpu_callback', 'Sharding'}


def test_sdy_dims_reads_a_partition_spec():
  P = jax.sharding.PartitionSpec
  assert sdy_dims(P('seed'), 3) == '[{"seed"}, {}, {}]'
  assert sdy_dims(P('seed', 'data'), 2) == '[{"seed"}, {"data"}]'
  assert sdy_dims(P(), 1) == '[{}]'
  assert sdy_dims(P(('seed', 'data')), 1) == '[{"seed", "data"}]'
