"""Seeds and batch rows over several devices (issue 13): 8 CPU devices forced in a subprocess."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from monoloc_jax import errors
from monoloc_jax import sharding

REPO = pathlib.Path(__file__).resolve().parent.parent

# Runs in a fresh interpreter with 8 forced CPU devices: one unsharded vmapped
# run of seeds 0-7 on one device, the same 8 seeds one per device, and seeds 0-1
# on all 8 (mesh 2 x 4: batch rows split over 'data'). Prints a JSON summary.
_CHILD = r'''
import json, pathlib, sys, time
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from monoloc_jax import backbones, input_pipeline as ip, sharding, train
from monoloc_jax.configs import default
from monoloc_jax.vocab import Vocabulary

def config(seeds):
  c = default.get_config()
  c.update(task='copy', variant='content', train_size=200, eval_size=64, eval_batch_size=64,
           max_epochs=1, seeds=seeds, test_splits='test_15', progress=False,
           hidden_dim=32, bucket_batches=False, dev_metric='teacher_forced')
  c.gru.update(embed_dim=16, value_dim=32)
  return c

root = pathlib.Path(sys.argv[1])
jax.config.update('jax_compilation_cache_dir', str(root / 'xla'))   # the layout checks reuse
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)  # the runs' programs
out = {'devices': jax.device_count()}
for name, seeds, devices in (('one_device', 8, jax.devices()[:1]), ('seeds8', 8, None),
                             ('seeds2', 2, None)):
  t0 = time.time()
  r = train.train_and_evaluate(config(seeds), str(root / name), devices=devices)
  print(f'{name}: {time.time() - t0:.1f}s', file=sys.stderr)
  hist = [json.loads(l) for l in (root / name / 'metrics.jsonl').read_text().splitlines()]
  out[name] = {'loss': hist[-1]['loss'], 'dev': hist[-1]['dev_accuracy'],
               'test': [s['accuracy'] for s in r['test']['test_15']['per_seed']],
               'edit': [s['edit_distance'] for s in r['test']['test_15']['per_seed']]}

# The layout itself: state after one sharded step, and a batch of the 2-seed mesh.
t0 = time.time()
for seeds in (8, 2):
  c = config(seeds)
  data = ip.load_data(c)
  model = backbones.from_config(c, data.vocab)
  programs = train.make_train_programs(model, train.make_optimizer(c))
  placement = sharding.plan(seeds, c.batch_size)
  batch = next(ip.train_batches(data.train, c.batch_size, list(range(seeds)), 0, c.data_seed,
                                data.vocab.sos_id, False))
  state = placement.put_state(train.create_train_state(programs, list(range(seeds)), batch))
  stats = placement.put_state(train.EpochStats.zeros(seeds))
  placed = placement.put_batch(batch)
  state, stats = programs.train_step(state, placed, stats)
  want = NamedSharding(placement.mesh, P('seed'))
  leaves = jax.tree_util.tree_leaves(state) + list(stats)
  src, = sharding.put_like(state.params, np.zeros((c.eval_batch_size, 8), np.int32))
  out[f'layout{seeds}'] = {
      'mesh': dict(placement.mesh.shape),
      'state_sharded_by_seed': all(x.sharding.is_equivalent_to(want, x.ndim) for x in leaves),
      'param_shard_rows': sorted({s.data.shape[0] for s in
                                  jax.tree_util.tree_leaves(state.params)[0].addressable_shards}),
      'batch_shard_shape': list(placed.src.addressable_shards[0].data.shape),
      'batch_shape': list(batch.src.shape),
      'eval_src_shard_shape': list(src.addressable_shards[0].data.shape),
  }
print(f'layout checks: {time.time() - t0:.1f}s', file=sys.stderr)
c = config(2)
c.seed_strategy = 'threads'          # host threads over seeds: one CPU device only
try:
  train.train_and_evaluate(c, str(root / 'threads'))
  out['threads_error'] = None
except Exception as e:               # pylint: disable=broad-except
  out['threads_error'] = [type(e).__name__, str(e)]
print('RESULT ' + json.dumps(out))
'''


def _env(devices: int):
  return dict(os.environ, XLA_FLAGS=f'--xla_force_host_platform_device_count={devices}',
              PYTHONPATH=str(REPO) + os.pathsep + os.environ.get('PYTHONPATH', ''),
              JAX_PLATFORMS='cpu')


@pytest.fixture(scope='module')
def eight_devices(tmp_path_factory):
  """The child's summary (one subprocess for every test of the module)."""
  root = tmp_path_factory.mktemp('sharded')
  proc = subprocess.run([sys.executable, '-c', _CHILD, str(root)], capture_output=True,
                        text=True, env=_env(8), cwd=REPO, timeout=900, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  line = [l for l in proc.stdout.splitlines() if l.startswith('RESULT ')][-1]
  return json.loads(line[len('RESULT '):]) | {'stderr': proc.stderr}


def test_threads_with_a_mesh_is_a_one_line_error(eight_devices):
  """seed_strategy='threads' steps seeds from host threads on one CPU device; a run whose
  seeds are laid over a mesh gets one line naming the valid choices."""
  kind, message = eight_devices['threads_error']
  assert kind == 'MonolocError' and '\n' not in message, message
  assert "seed_strategy='threads' runs on one CPU device" in message
  assert "8 devices; use 'auto', 'vmap' or 'map'" in message


def test_eight_seeds_one_per_device_match_the_unsharded_run(eight_devices):
  r = eight_devices
  assert r['devices'] == 8
  layout = r['layout8']
  assert layout['mesh'] == {'seed': 8, 'data': 1}
  assert layout['state_sharded_by_seed'], 'the train state is not laid out P("seed")'
  assert layout['param_shard_rows'] == [1]                  # one seed per device
  assert layout['eval_src_shard_shape'] == [64, 8]            # evaluation rows not split
  ref, got = r['one_device'], r['seeds8']
  np.testing.assert_allclose(got['loss'], ref['loss'], rtol=1e-4)
  np.testing.assert_allclose(got['dev'], ref['dev'], atol=100 / 64 + 1e-6)
  np.testing.assert_allclose(got['test'], ref['test'], atol=100 / 64 + 1e-6)
  np.testing.assert_allclose(got['edit'], ref['edit'], atol=0.05)
  assert len(set(ref['loss'])) == 8                          # eight different runs


def test_two_seeds_on_eight_devices_split_the_batch(eight_devices):
  r = eight_devices
  layout = r['layout2']
  assert layout['mesh'] == {'seed': 2, 'data': 4}
  assert layout['state_sharded_by_seed']
  n, b, width = layout['batch_shape']
  assert layout['batch_shard_shape'] == [n // 2, b // 4, width]   # rows over 'data'
  assert layout['eval_src_shard_shape'] == [64 // 4, 8]            # evaluation rows too
  ref, got = r['one_device'], r['seeds2']
  np.testing.assert_allclose(got['loss'], ref['loss'][:2], rtol=1e-4)
  np.testing.assert_allclose(got['dev'], ref['dev'][:2], atol=100 / 64 + 1e-6)
  np.testing.assert_allclose(got['test'], ref['test'][:2], atol=100 / 64 + 1e-6)
  np.testing.assert_allclose(got['edit'], ref['edit'][:2], atol=0.05)


def test_distributed_flag_initializes_one_process():
  """--distributed=HOST:PORT,1,0 runs jax.distributed.initialize() (a one-process 'cluster')."""
  with socket.socket() as sock:                 # a free port for the coordinator
    sock.bind(('localhost', 0))
    port = sock.getsockname()[1]
  code = ('import sys, jax; from monoloc_jax import sharding; '
          'print(sharding.initialize_distributed(sys.argv[1])); print(jax.process_count())')
  proc = subprocess.run([sys.executable, '-c', code, f'localhost:{port},1,0'], capture_output=True,
                        text=True, env=_env(2), cwd=REPO, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.split('\n')[:2] == ['process 0 of 1: 2 local and 2 global devices', '1']


@pytest.mark.parametrize('seeds, devices, batch, shape', [
    (8, 8, 32, (8, 1)), (2, 8, 32, (2, 4)), (3, 8, 32, (1, 8)), (12, 8, 32, (4, 2)),
    (1, 1, 32, (1, 1)), (5, 8, 30, (1, 2)), (3, 8, 7, (1, 1)), (16, 8, 1, (8, 1))])
def test_mesh_shape(seeds, devices, batch, shape):
  assert sharding.mesh_shape(seeds, devices, batch) == shape


def test_one_device_is_the_unsharded_program():
  placement = sharding.plan(3, 32, jax.devices()[:1])
  assert placement.mesh is None and placement.shape == (1, 1)
  tree = {'a': np.zeros((3, 2))}
  assert placement.put_state(tree) is tree and placement.put_batch(tree) is tree
  assert sharding.put_like(tree, tree['a'])[0] is tree['a']


@pytest.mark.parametrize('spec', ['yes', 'host,2,0', 'host:1,2', 'host:1,2,2', 'host:1,x,0'])
def test_bad_distributed_values_are_one_line_errors(spec):
  with pytest.raises(errors.MonolocError, match=r"bad --distributed .*valid values: '' \(one"):
    sharding.distributed_args(spec)


def test_distributed_values():
  assert sharding.distributed_args('') is None and sharding.distributed_args('auto') == {}
  assert sharding.distributed_args('10.0.0.1:1234,4,3') == {
      'coordinator_address': '10.0.0.1:1234', 'num_processes': 4, 'process_id': 3}
