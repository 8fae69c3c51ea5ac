"""The workdir contract (README, "Workdir contract"): a run survives a kill at every
phase and Ctrl-C, damaged run files are a one-line error that leaves the results
intact, and only `errors.MonolocError` escapes the readers of data and run files.

The subprocess tests share one tiny configuration (200 examples, 2 epochs).
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import pytest

from monoloc_jax import checkpointing
from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import interrupts
from monoloc_jax import rundir
from monoloc_jax import train
from monoloc_jax.configs import default
from monoloc_jax.vocab import Vocabulary

# The model sizes of tests/train_test.py's small_config, so compiled programs are shared.
TINY = dict(task='copy', variant='onestep', train_size=200, eval_size=32, max_epochs=2,
            test_splits='test_15', progress=False)
TINY_FLAGS = ['--task=copy', '--model=onestep'] + [
    f'--config.{k}={v}' for k, v in TINY.items() if k not in ('task', 'variant')]
# Fields of results.json and metrics.jsonl that measure wall time (they differ between runs).
RESULT_TIME_FIELDS = ('wall_time_s', 'train_time_s_this_process', 'eval_time_s')
SPLIT_TIME_FIELDS = ('decode_s',)
HISTORY_TIME_FIELDS = ('train_s', 'epoch_s', 'wall_s')


def tiny_config(**overrides):
  c = default.get_config()
  c.update(TINY)
  c.update(overrides)
  return c


def stripped_results(workdir) -> str:
  """results.json without its wall-time fields, serialized as the file is."""
  results = json.loads((pathlib.Path(workdir) / 'results.json').read_text())
  for k in RESULT_TIME_FIELDS:
    results.pop(k)
  for split in results['test'].values():
    for k in SPLIT_TIME_FIELDS:
      split.pop(k)
  return json.dumps(results, indent=2)


def stripped_history(workdir):
  lines = (pathlib.Path(workdir) / 'metrics.jsonl').read_text().splitlines()
  records = [json.loads(l) for l in lines]
  return [{k: v for k, v in r.items() if k not in HISTORY_TIME_FIELDS} for r in records]


@pytest.fixture(scope='module')
def cli_env(tmp_path_factory):
  env = dict(os.environ)
  # The session's compilation cache (tests/conftest.py), shared with in-process runs.
  env['MONOLOC_XLA_CACHE'] = (jax.config.jax_compilation_cache_dir
                              or str(tmp_path_factory.mktemp('xla')))
  env.pop('MONOLOC_KILL_AT', None)
  return env


def _start(workdir, env, *args, kill_at=None):
  env = dict(env, **({'MONOLOC_KILL_AT': kill_at} if kill_at else {}))
  return subprocess.Popen([sys.executable, '-m', 'monoloc_jax.main', f'--workdir={workdir}',
                           *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _run(workdir, env, *args, kill_at=None):
  proc = _start(workdir, env, *args, kill_at=kill_at)
  out, err = proc.communicate(timeout=600)
  return proc.returncode, out, err


@pytest.fixture(scope='module')
def reference(tmp_path_factory, cli_env):
  """An uninterrupted run, started twice 0.5 s apart on one workdir: one is refused."""
  workdir = tmp_path_factory.mktemp('reference')
  first = _start(workdir, cli_env, *TINY_FLAGS)
  time.sleep(0.5)
  second = _start(workdir, cli_env, *TINY_FLAGS)
  outcomes = sorted((p.returncode, err) for p in (first, second)
                    for _, err in [p.communicate(timeout=600)])
  assert [rc for rc, _ in outcomes] == [0, 2], outcomes
  refused = outcomes[1][1]
  assert 'is in use by another process' in refused and len(refused.splitlines()) == 1, refused
  return workdir


# Each run of the chain is killed at the next phase, resuming what the last one left.
KILL_CHAIN = ('startup', 'mid_epoch', 'dev', 'save', 'manifest', 'history', 'final')


def test_a_run_killed_at_every_phase_ends_identical_to_an_uninterrupted_one(
    tmp_path, cli_env, reference):
  workdir = tmp_path / 'w'
  for phase in KILL_CHAIN:
    rc, _, err = _run(workdir, cli_env, *TINY_FLAGS, kill_at=phase)
    assert rc == -signal.SIGKILL, (phase, rc, err)
    assert not (workdir / 'results.json').exists()
  rc, out, err = _run(workdir, cli_env, *TINY_FLAGS)
  assert rc == 0, err
  assert 'Resuming from the checkpoint of epoch 2' in out
  assert stripped_results(workdir) == stripped_results(reference)
  assert stripped_history(workdir) == stripped_history(reference)
  assert [r['epoch'] for r in stripped_history(workdir)] == [1, 2]
  assert sorted(p.name for p in (workdir / 'checkpoints').iterdir()) == ['2']


def test_ctrl_c_stops_at_once_with_one_line_and_the_run_resumes(tmp_path, cli_env, reference):
  workdir = tmp_path / 'w'
  for moment in ('startup', 'after epoch 1'):
    proc = _start(workdir, cli_env, *TINY_FLAGS)
    deadline = time.time() + 300
    if moment == 'startup':
      time.sleep(1.0)                  # imports, flag parsing
    else:
      while not (workdir / 'metrics.jsonl').exists() and time.time() < deadline:
        time.sleep(0.05)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert time.time() - sent < 5, moment
    assert proc.returncode == 130, (moment, err)
    assert err == interrupts.INTERRUPTED + '\n', (moment, err)
  rc, _, err = _run(workdir, cli_env, *TINY_FLAGS)
  assert rc == 0, err
  assert stripped_results(workdir) == stripped_results(reference)
  assert stripped_history(workdir) == stripped_history(reference)


def test_a_corrupt_checkpoint_under_evaluate_is_one_line_and_results_stay(tmp_path, cli_env,
                                                                          reference):
  workdir = tmp_path / 'w'
  shutil.copytree(reference, workdir)
  before = (workdir / 'results.json').read_bytes()
  data = sorted((workdir / 'checkpoints').rglob('*'), key=lambda p: -p.stat().st_size)[0]
  data.write_bytes(data.read_bytes()[:len(data.read_bytes()) // 2])       # truncated
  rc, _, err = _run(workdir, cli_env, '--mode=evaluate')
  assert rc == 2 and 'Traceback' not in err and len(err.splitlines()) == 1, err
  assert err.startswith('error: the checkpoint') and 'is corrupt' in err, err
  assert (workdir / 'results.json').read_bytes() == before


# ---------------------------------------------------------------------------
# Damaged files, in-process (one trained run, copied for every case).
# ---------------------------------------------------------------------------
@pytest.fixture(scope='module')
def finished(tmp_path_factory):
  """A finished one-epoch run."""
  workdir = tmp_path_factory.mktemp('finished')
  train.train_and_evaluate(tiny_config(max_epochs=1), str(workdir))
  return workdir


@pytest.fixture
def run_copy(tmp_path, finished):
  workdir = tmp_path / 'w'
  shutil.copytree(finished, workdir)
  return workdir


def _snapshot(workdir):
  return {p.name: p.read_bytes() for p in pathlib.Path(workdir).iterdir() if p.is_file()}


def _one_line_error(fn, match):
  with pytest.raises(errors.MonolocError, match=match) as e:
    fn()
  assert '\n' not in str(e.value)
  return str(e.value)


def _best_params_file(workdir):
  files = [p for p in (workdir / 'checkpoints').rglob('*')
           if p.is_file() and 'best_params' in p.parts and p.stat().st_size > 200]
  return max(files, key=lambda p: p.stat().st_size)


def _flip_64_bytes(path):
  data = bytearray(path.read_bytes())
  for i in range(64):
    data[len(data) // 3 + i] ^= 0xFF
  path.write_bytes(bytes(data))


@pytest.mark.parametrize('damage', ['flipped', 'truncated', 'zero_filled'])
def test_a_damaged_checkpoint_is_refused_by_evaluate_and_resume(run_copy, damage):
  target = _best_params_file(run_copy)
  if damage == 'flipped':
    _flip_64_bytes(target)
  elif damage == 'truncated':
    target.write_bytes(target.read_bytes()[:100])
  else:
    target.write_bytes(bytes(target.stat().st_size))
  before = _snapshot(run_copy)
  _one_line_error(lambda: inference.evaluate(str(run_copy)),
                  'checkpoint .*/checkpoints/1 is corrupt.*sha256 of .*best_params')
  _one_line_error(lambda: train.train_and_evaluate(tiny_config(), str(run_copy)),
                  'checkpoint .*/checkpoints/1 is corrupt')
  assert _snapshot(run_copy) == before


def test_a_checkpoint_without_manifest_from_an_older_version_still_resumes(tmp_path,
                                                                           per_leaf_layout):
  """Versions that wrote no manifest also kept one optimizer-state array per
  parameter: such a step restores unverified and converts to the flat layout."""
  run = tmp_path / 'w'
  with per_leaf_layout():
    train.train_and_evaluate(tiny_config(max_epochs=1), str(run))
  reference = json.loads((run / 'results.json').read_text())
  first_epoch = rundir.read_history(run)[0]
  (run / 'checkpoints' / '1' / checkpointing.MANIFEST).unlink()
  with open(run / 'metrics.jsonl', 'a', encoding='utf-8') as f:     # the old writer
    f.write((run / 'metrics.jsonl').read_text())                    # could duplicate
  evaluated = inference.evaluate(str(run))
  assert evaluated['test']['test_15']['per_seed'] == reference['test']['test_15']['per_seed']
  train.train_and_evaluate(tiny_config(max_epochs=2), str(run))
  assert [r['epoch'] for r in rundir.read_history(run)] == [1, 2]
  assert rundir.read_history(run)[0] == first_epoch
  manifest = checkpointing.Checkpointer(run / 'checkpoints').manifest(2, run / 'vocab.json')
  assert manifest['layout'] == train.STATE_LAYOUT


@pytest.mark.parametrize('also_results', [True, False], ids=['finished', 'mid_run'])
def test_a_deleted_checkpoint_is_an_error_not_a_silent_restart(run_copy, also_results):
  shutil.rmtree(run_copy / 'checkpoints' / '1')
  if not also_results:
    (run_copy / 'results.json').unlink()
  before = _snapshot(run_copy)
  _one_line_error(lambda: train.train_and_evaluate(tiny_config(), str(run_copy)),
                  'records finished epochs .* holds no checkpoint; the run cannot resume')
  assert _snapshot(run_copy) == before


@pytest.mark.parametrize('last_line', [b'{"epoch": 1, "loss": [0.', b'\xff\xfe\x00garbage'])
def test_a_damaged_history_line_is_rebuilt_from_the_checkpoint(run_copy, finished, last_line):
  with open(run_copy / 'metrics.jsonl', 'ab') as f:
    f.write(last_line)
  # Resuming with max_epochs=1 trains nothing, re-evaluates and rewrites the history.
  train.train_and_evaluate(tiny_config(max_epochs=1), str(run_copy))
  assert (run_copy / 'metrics.jsonl').read_bytes() == (finished / 'metrics.jsonl').read_bytes()


@pytest.mark.parametrize('name, content, match', [
    ('config.json', b'{"task": "copy", ', 'config.json is not a valid run config: Expecting'),
    ('config.json', b'[1, 2]', 'expected a JSON object, got list'),
    ('config.json', b'{"task": "copy"}', "it has no 'variant'"),
    ('config.json', b'{"task": "copy", "variant": "onestep", "seeds": "x"}',
     'config.json is not a valid run config'),
    ('config.json', b'\xff\xfe{}', 'config.json is not a valid run config: not UTF-8'),
    ('config.json', b'[' * 100_000, 'nested too deeply'),
    ('vocab.json', b'\xff\xfe{}', 'not UTF-8'),
    ('vocab.json', 'extra token', 'is not the vocabulary the checkpoint .* was trained with'),
    ('results.json', b'{"test": ', 'results.json is not a valid results file'),
    ('results.json', b'[]', 'results.json is not a valid results file'),
])
def test_damaged_run_files_under_evaluate_are_one_line_and_change_nothing(
    run_copy, name, content, match):
  if content == 'extra token':
    tokens = Vocabulary.load(run_copy / name).tokens + ('zzz',)
    content = Vocabulary(tokens).to_json().encode()
  (run_copy / name).write_bytes(content)
  before = _snapshot(run_copy)
  _one_line_error(lambda: inference.evaluate(str(run_copy)), match)
  assert _snapshot(run_copy) == before


def test_a_failed_checkpoint_save_keeps_the_last_good_one(run_copy, monkeypatch):
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  real_save = ocp.CheckpointManager.save

  def full_disk(self, step, *args, **kwargs):
    real_save(self, step, *args, **kwargs)    # the files are (partly) there ...
    raise ValueError('RESOURCE_EXHAUSTED: No space left on device [OS error 28]')

  monkeypatch.setattr(ocp.CheckpointManager, 'save', full_disk)
  _one_line_error(lambda: train.train_and_evaluate(tiny_config(), str(run_copy)),
                  r'could not save the checkpoint of epoch 2 in .*/checkpoints '
                  r'\(RESOURCE_EXHAUSTED: No space left on device.*\); the last good '
                  r'checkpoint \(epoch 1\) is intact')
  ckpt = checkpointing.Checkpointer(run_copy / 'checkpoints')
  assert ckpt.steps() == [1]
  ckpt.manifest(1, run_copy / 'vocab.json')       # verifies
  assert [r['epoch'] for r in rundir.read_history(run_copy)] == [1]


def test_a_failed_write_is_raised_after_the_others_and_nothing_else_is_printed(
    tmp_path, monkeypatch, caplog):
  """What makes the full disk below one line, without a small file system: one
  array's write fails at once while the others are still in flight. orbax used to
  close its event loop then (the others completed into a closed loop: `Event loop is
  closed`, printed by tensorstore) and log the failure from its worker threads."""
  import asyncio  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  real_write = ocp.type_handlers.NumpyHandler._open_and_write  # pylint: disable=protected-access
  finished_writes = []

  async def write(self, value, *args, **kwargs):
    if value.shape == (7,):
      raise ValueError('RESOURCE_EXHAUSTED: No space left on device (injected)')
    await asyncio.sleep(0.3)                        # still in flight when the other fails
    await real_write(self, value, *args, **kwargs)
    finished_writes.append(value.shape)

  unraisable = []
  monkeypatch.setattr(ocp.type_handlers.NumpyHandler, '_open_and_write', write)
  monkeypatch.setattr(sys, 'unraisablehook', unraisable.append)
  vocab_path = tmp_path / 'vocab.json'
  Vocabulary.from_tokens('ab').save(vocab_path)
  tree = {'state': {'bad': jax.numpy.zeros(7), **{f'w{i}': jax.numpy.ones((i + 1, 3))
                                                  for i in range(5)}},
          'best_params': {'w': jax.numpy.ones(4)}, 'tracker': {'epoch': jax.numpy.int32(1)}}
  ckpt = checkpointing.Checkpointer(tmp_path / 'checkpoints')
  with caplog.at_level('WARNING'):
    _one_line_error(lambda: ckpt.save(1, tree, [], vocab_path),
                    r'could not save the checkpoint of epoch 1 in .* \(RESOURCE_EXHAUSTED: No '
                    r'space left on device \(injected\)\); no earlier checkpoint exists')
    assert {(i + 1, 3) for i in range(5)} <= set(finished_writes)   # every other one
    import gc  # pylint: disable=g-import-not-at-top
    gc.collect()
  assert unraisable == [] and caplog.records == []
  assert list((tmp_path / 'checkpoints').iterdir()) == []
  ckpt.save(2, tree | {'state': {'ok': jax.numpy.ones(3)}}, [], vocab_path)   # works again
  assert ckpt.steps() == [2]


def test_worker_threads_that_raise_from_join_or_start_late_are_still_held_back(
    monkeypatch):
  """The race behind a full disk printing orbax's tracebacks after the one line:
  orbax's threads raise their failure from `join`, and one worker may start another.
  Here a worker whose `join` raises starts a second worker, which logs after the
  caller has failed; that record is held back too (the caller waits for both)."""
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  import logging as std_logging  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  # Records logged from this file count as orbax's.
  monkeypatch.setattr(checkpointing, '_ORBAX_DIR', str(pathlib.Path(__file__).parent))
  seen = []

  class Capture(std_logging.Handler):
    def emit(self, record):
      seen.append(record.getMessage())

  class RaisingJoin(threading.Thread):       # as orbax's _SignalingThread
    def join(self, timeout=None):
      super().join(timeout)
      raise ValueError('the worker failed')

  def late():
    time.sleep(0.3)
    absl_logging.error('a worker logs the failure again')

  started = []

  def first():
    time.sleep(0.2)
    started.append(threading.Thread(target=late))
    started[0].start()

  handler = Capture()
  std_logging.getLogger('absl').addHandler(handler)
  try:
    with pytest.raises(ValueError, match='the caller failed'):
      with checkpointing._quiet_orbax_workers():  # pylint: disable=protected-access
        RaisingJoin(target=first).start()
        raise ValueError('the caller failed')
    assert started and not started[0].is_alive()     # waited for, not only started
    assert seen == []
    absl_logging.error('after the save, orbax logs as usual')   # the filter is gone
    assert seen == ['after the save, orbax logs as usual']
  finally:
    std_logging.getLogger('absl').removeHandler(handler)


def _disk_kib(path) -> int:
  """What the files under `path` take on a file system of 4 KiB blocks, in KiB."""
  return sum(-(-p.stat().st_size // 4096) * 4 + 4
             for p in pathlib.Path(path).rglob('*'))


@pytest.fixture
def small_filesystem(tmp_path):
  """mount(size_kib) -> the root of a new file system of that size: a tmpfs, or a
  loop-mounted ext4 image where tmpfs cannot be mounted; unmounted at teardown.
  Skips, saying why, where neither can be mounted (not root, no mount rights)."""
  mounted = []

  def mount(size_kib: int) -> pathlib.Path:
    root = tmp_path / f'fs{len(mounted)}'
    root.mkdir()
    tmpfs = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size_kib}k', 'tmpfs',
                            str(root)], capture_output=True, text=True)
    if tmpfs.returncode != 0:
      image = tmp_path / f'fs{len(mounted)}.img'
      loop = subprocess.run(
          f'truncate -s {size_kib}k {image} && mkfs.ext4 -q -F -O ^has_journal -m 0 {image} '
          f'&& mount -o loop {image} {root}', shell=True, capture_output=True, text=True)
      if loop.returncode != 0:
        pytest.skip(f'cannot mount a small file system: tmpfs: {tmpfs.stderr.strip()}; '
                    f'loop-mounted ext4: {loop.stderr.strip()}')
    mounted.append(root)
    return root

  yield mount
  for root in mounted:
    subprocess.run(['umount', str(root)], check=True)


@pytest.mark.parametrize('when', ['first_save', 'later_save'])
def test_a_real_full_disk_is_one_line_and_keeps_the_last_checkpoint(
    small_filesystem, cli_env, finished, tmp_path, when):
  """A real `monoloc-train` whose checkpoint does not fit on the disk: epoch 1's on a
  3 MiB file system, or epoch 2's where epoch 1's fits (copied in). stderr is the one
  line (orbax used to add 30 tracebacks), and epoch 1 still verifies and restores."""
  checkpoint_kib = _disk_kib(finished / 'checkpoints')
  if when == 'first_save':
    fs = small_filesystem(3 * 1024)
    workdir, epoch = fs / 'w', 1
  else:
    fs = small_filesystem(_disk_kib(finished) + checkpoint_kib // 2)
    workdir, epoch = fs / 'w', 2
    shutil.copytree(finished, workdir)
  stat = os.statvfs(fs)
  assert 64 < stat.f_bavail * stat.f_frsize // 1024 < checkpoint_kib   # the premise
  rc, _, err = _run(workdir, cli_env, *TINY_FLAGS)
  last = ('no earlier checkpoint exists' if epoch == 1
          else 'the last good checkpoint (epoch 1) is intact')
  assert rc == 2, err
  assert len(err.splitlines()) == 1, err
  assert err.startswith(f'error: could not save the checkpoint of epoch {epoch} in '
                        f'{workdir}/checkpoints (No space left on device'), err
  assert err.rstrip().endswith(f'); {last}'), err
  kept = sorted(p.name for p in (workdir / 'checkpoints').iterdir())
  assert kept == ([] if epoch == 1 else ['1'])   # no partial step, no orbax temporary
  if epoch == 2:
    assert [r['epoch'] for r in rundir.read_history(workdir)] == [1]
    restored = tmp_path / 'restored'                # evaluate writes results.json
    shutil.copytree(workdir, restored)
    evaluated = inference.evaluate(str(restored))   # verifies the manifest, restores
    reference = json.loads((finished / 'results.json').read_text())
    assert (evaluated['test']['test_15']['per_seed']
            == reference['test']['test_15']['per_seed'])


@pytest.mark.parametrize('where', ['workdir_is_a_file', 'parent_is_a_file', 'read_only'])
def test_an_unusable_workdir_is_one_line(tmp_path, where):
  mounted = False
  if where == 'workdir_is_a_file':
    workdir = tmp_path / 'w'
    workdir.write_text('x')
  elif where == 'parent_is_a_file':
    (tmp_path / 'p').write_text('x')
    workdir = tmp_path / 'p' / 'w'
  else:
    workdir = tmp_path / 'ro'
    workdir.mkdir()
    workdir.chmod(0o555)
    if os.access(workdir, os.W_OK):     # root ignores modes: use a read-only bind mount
      mounted = subprocess.run(['mount', '--bind', '-o', 'ro', str(workdir), str(workdir)],
                               capture_output=True).returncode == 0
      if not mounted:
        pytest.skip('cannot make a read-only directory as root without mount rights')
  try:
    _one_line_error(lambda: train.train_and_evaluate(tiny_config(), str(workdir)),
                    f'cannot use the workdir {workdir}: ')
    assert not any(workdir.iterdir()) if workdir.is_dir() else True
  finally:
    if mounted:
      subprocess.run(['umount', str(workdir)], check=True)


# ---------------------------------------------------------------------------
# Readers under fuzzing: only MonolocError escapes.
# ---------------------------------------------------------------------------
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)
FILE_BYTES = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(lambda t: t.encode('utf-8')),
    st.text(st.characters(codec='utf-8', categories=['Cs', 'Lu', 'Zs', 'Cc']), max_size=50)
    .map(lambda t: t.encode('utf-8', 'surrogatepass')),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(1000, 100_000).map(lambda n: b'[' * n + b']' * (n // 2)),
    st.integers(1000, 100_000).map(lambda n: b'{"a":' * n),
    st.lists(st.text(max_size=20), max_size=6).map(
        lambda xs: '\n'.join(f'IN: {x} OUT: {x[::-1]}' if i % 2 else f'{x}\t{x}'
                             for i, x in enumerate(xs)).encode('utf-8', 'surrogatepass')),
)
CFQ_SPLIT = json.dumps({'trainIdxs': [0], 'devIdxs': [0], 'testIdxs': [0]}).encode()
CFQ_RECORD = json.dumps([{'questionPatternModEntities': 'who is M0',
                          'sparqlPatternModEntities': 'SELECT x0'}]).encode()


def _scan(d, data):
  from monoloc_jax.tasks import scan  # pylint: disable=g-import-not-at-top
  (d / 'tasks_train_length.txt').write_bytes(data)
  scan.read_file(d / 'tasks_train_length.txt')


def _lookup(d, data):
  from monoloc_jax.tasks import lookup  # pylint: disable=g-import-not-at-top
  (d / 'train.tsv').write_bytes(data)
  lookup.read_file(d, 'train', reverse=False)


def _cfq(d, dataset, split):
  from monoloc_jax.tasks import cfq  # pylint: disable=g-import-not-at-top
  (d / 'splits').mkdir()
  (d / 'dataset.json').write_bytes(dataset)
  (d / 'splits' / 'length_split.json').write_bytes(split)
  loaded = cfq.load_splits(('train',), data_dir=str(d))
  Vocabulary.from_examples(loaded['train']).to_json().encode('utf-8')   # what train saves


def _task_cache(d, data):
  # The cache reader returns None for a damaged file (the split is then regenerated:
  # tests/tasks_registry_test.py); generating it here 40 times would take half a minute.
  from monoloc_jax import tasks  # pylint: disable=g-import-not-at-top
  (d / 'dev.json').write_bytes(data)
  assert tasks._read_cache(d / 'dev.json', tasks._header(tasks.get('copy'), 'dev', 7)) is None


def _manifest(d, data):
  (d / 'checkpoints' / '1').mkdir(parents=True)
  (d / 'checkpoints' / '1' / checkpointing.MANIFEST).write_bytes(data)
  (d / 'vocab.json').write_text(Vocabulary.from_tokens(['a']).to_json())
  checkpointing.Checkpointer(d / 'checkpoints', read_only=True).manifest(1, d / 'vocab.json')


def _run_file(name, reader):
  def read(d, data):
    (d / name).write_bytes(data)
    reader(d)
  return read


READERS = {
    'scan': _scan,
    'lookup': _lookup,
    'cfq_dataset': lambda d, data: _cfq(d, data, CFQ_SPLIT),
    'cfq_split': lambda d, data: _cfq(d, CFQ_RECORD, data),
    'cfq_record': lambda d, data: _cfq(
        d, json.dumps([{'questionPatternModEntities': data.decode('latin-1') + ' \ud800',
                        'sparqlPatternModEntities': 'x'}]).encode(), CFQ_SPLIT),
    'vocab.json': lambda d, data: (d.joinpath('v').write_bytes(data), Vocabulary.load(d / 'v')),
    'task_cache': _task_cache,
    'config.json': _run_file('config.json', rundir.load_config),
    'results.json': _run_file('results.json', rundir.load_results),
    'metrics.jsonl': _run_file('metrics.jsonl', rundir.read_history),
    'checkpoint_manifest': _manifest,
}


@pytest.mark.parametrize('reader', sorted(READERS))
def test_only_the_library_error_escapes_a_reader(reader):
  @settings(max_examples=40, deadline=None, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
  @given(data=FILE_BYTES)
  def check(data):
    with tempfile.TemporaryDirectory() as d:
      try:
        READERS[reader](pathlib.Path(d), data)
      except errors.MonolocError as e:
        assert '\n' not in str(e)

  check()


def test_a_config_json_with_the_old_flat_backbone_fields_loads_into_the_groups_and_resumes(
    tmp_path):
  """A workdir written before the backbones' fields were grouped (config.json with
  'embed_dim', 'transformer_layers', ... at the top level) loads into config.gru /
  config.transformer (`config_paths.LEGACY_FIELDS`) and resumes."""
  from monoloc_jax import config_paths  # pylint: disable=g-import-not-at-top
  config = tiny_config(max_epochs=1, hidden_dim=16)
  config.gru.update(embed_dim=8, value_dim=12)
  config.transformer.update(layers=1, mlp_dim=64)
  train.train_and_evaluate(config, str(tmp_path))
  stored = json.loads((tmp_path / rundir.CONFIG).read_text())
  assert stored['gru']['embed_dim'] == 8
  old = {k: v for k, v in stored.items() if k not in ('gru', 'transformer')}
  for flat, path in config_paths.LEGACY_FIELDS.items():
    group, field = path.split('.')
    old[flat] = stored[group][field]
  (tmp_path / rundir.CONFIG).write_text(json.dumps(old))      # as an earlier version wrote it
  loaded = rundir.load_config(tmp_path)
  assert (loaded.gru.embed_dim, loaded.gru.value_dim) == (8, 12)
  assert (loaded.transformer.layers, loaded.transformer.mlp_dim) == (1, 64)
  assert 'embed_dim' not in loaded and 'transformer_layers' not in loaded
  assert rundir.config_changes(loaded, config) == []
  config.max_epochs = 2
  assert train.train_and_evaluate(config, str(tmp_path))['epochs'] == 2   # resumed
  # A changed group field is still the run's identity.
  config.gru.value_dim = 16
  with pytest.raises(errors.MonolocError, match=r'gru\.value_dim: 12 \(stored\) != 16'):
    rundir.check_config(tmp_path, config)


def test_a_config_json_with_an_unknown_group_field_is_one_line(tmp_path):
  stored = default.get_config().to_dict()
  stored['gru']['width'] = 3
  (tmp_path / rundir.CONFIG).write_text(json.dumps(stored))
  with pytest.raises(errors.MonolocError, match=r"unknown field\(s\) 'gru\.width'"):
    rundir.load_config(tmp_path)
