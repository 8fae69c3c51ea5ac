"""Orbax checkpoints of a run: the latest train state, the best parameters and
the host-side schedule, saved together after every epoch, each with a manifest.

  checkpoints/<epoch>/                    orbax's files (items state, best_params, tracker)
  checkpoints/<epoch>/monoloc_manifest.json
      the sha256 of every file of the step, the sha256 of vocab.json, the
      training history (metrics.jsonl's records) up to that epoch, and the layout
      of the saved train state (`layout`).

A step saved in an older layout is restored through a `Migration` the caller
supplies (the older target tree and a conversion to the current one), or refused
with one line that names the layouts this version reads.

A step is complete once its manifest exists; the manifest is written (atomically)
after orbax has finished the step, and older steps are deleted only after that.
So a kill at any moment leaves at least the previous complete step. Before a
restore every file is checked against the manifest: a flipped byte, a truncated
or zero-filled file is a one-line `MonolocError`, never a silent restart or wrong
numbers. Saving is synchronous: no background thread can fail after the fact.

A save that fails (a full disk) is one line and nothing else: orbax's writes of a
step all finish before the failure is raised (`_SettlingNumpyHandler`), and what
orbax's worker threads log about it is held back, since the same failure is raised
in the caller (`_quiet_orbax_workers`).
"""

import contextlib
import contextvars
import hashlib
import logging as std_logging
import pathlib
import shutil
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional

from absl import logging
import jax
import numpy as np
import orbax.checkpoint as ocp

from monoloc_jax import errors
from monoloc_jax import rundir
from monoloc_jax import sharding

ITEMS = ('state', 'best_params', 'tracker')
MANIFEST = 'monoloc_manifest.json'
# The layout of every step written before manifests recorded one (and of steps
# without a manifest): the optimizer state with one array per parameter.
UNRECORDED_LAYOUT = 'per_leaf_opt_state'


class Migration(NamedTuple):
  """How to read a step saved in an older layout.

  target: a tree in the older layout (only its structure, shapes and dtypes are used).
  convert: maps the restored older tree to the current layout.
  """
  target: Dict[str, Any]
  convert: Callable[[Dict[str, Any]], Dict[str, Any]]
_FORMAT = 'monoloc_jax.checkpoint'
_ORBAX_DIR = str(pathlib.Path(ocp.__file__).parent)
# How long a failed save waits for orbax's worker threads to end (they end at once).
_WORKER_JOIN_S = 30.0


# ------------------------------------------------------ a failed save ---
# orbax writes the arrays of a step with `asyncio.gather` in an event loop of a
# worker thread, and closes that loop as soon as the first write fails (a full
# disk). The other writes are then still in flight in tensorstore: each completes
# into the closed loop, and tensorstore prints `RuntimeError: Event loop is closed`
# (31 of them for a checkpoint on a 3 MiB disk), possibly after the caller has
# reported the failure and removed the step. Each worker thread also logs the
# failure with its traceback before the caller sees it raised.
_FAILED_WRITES: contextvars.ContextVar[Optional[List[BaseException]]] = (
    contextvars.ContextVar('monoloc_failed_writes', default=None))


class _SettlingNumpyHandler(ocp.type_handlers.NumpyHandler):
  """orbax's handler of numpy arrays (the format is unchanged), except that a failed
  write is raised only once every other write of the same save has finished."""

  async def _open_and_write(self, *args, **kwargs):
    failed = _FAILED_WRITES.get()
    try:
      return await super()._open_and_write(*args, **kwargs)
    except Exception as e:  # pylint: disable=broad-except
      if failed is None:         # not inside _background_serialize
        raise
      failed.append(e)           # raised by _background_serialize, after the others
      return None

  async def _background_serialize(self, *args, **kwargs):
    failed = []
    # The writes are tasks created below this call: they see this list.
    token = _FAILED_WRITES.set(failed)
    try:
      await super()._background_serialize(*args, **kwargs)
    finally:
      _FAILED_WRITES.reset(token)
    if failed:
      raise failed[0]


def _install_settling_handler() -> None:
  """Makes `_SettlingNumpyHandler` orbax's handler of numpy arrays (every leaf we
  save is one), unless another handler than orbax's own was registered."""
  current = ocp.type_handlers.get_type_handler(np.ndarray)
  if type(current) is not ocp.type_handlers.NumpyHandler:  # pylint: disable=unidiomatic-typecheck
    return
  logger = std_logging.getLogger('absl')
  # register_type_handler warns that it overrides np.ndarray: not for the user.
  quiet = lambda record: not record.getMessage().startswith('Type handler registry')
  logger.addFilter(quiet)
  try:
    ocp.type_handlers.register_type_handler(np.ndarray, _SettlingNumpyHandler(),
                                            override=True)
  finally:
    logger.removeFilter(quiet)


@contextlib.contextmanager
def _quiet_orbax_workers() -> Iterator[None]:
  """Holds back what orbax logs from its worker threads during a save, and on a
  failure waits for those threads to end: a save is synchronous, so their failure is
  raised again in this thread, which reports it once."""
  caller = threading.get_ident()
  before = set(threading.enumerate())

  def keep(record: std_logging.LogRecord) -> bool:
    return record.thread == caller or not record.pathname.startswith(_ORBAX_DIR)

  logger = std_logging.getLogger('absl')
  logger.addFilter(keep)
  try:
    yield
  except BaseException:
    _join_new_threads(before, caller, time.monotonic() + _WORKER_JOIN_S)
    raise
  finally:
    logger.removeFilter(keep)


def _join_new_threads(before: set, caller: int, deadline: float) -> None:
  """Waits (until `deadline`, a `time.monotonic()`) for every thread started since
  `before`, and for those they start in turn. `threading.Thread.join` itself is
  called: orbax's threads override `join` to raise their failure, which would end
  the wait at the first one and leave the others to log after the filter is gone."""
  while True:
    workers = [t for t in threading.enumerate()
               if t not in before and t.ident != caller
               and not isinstance(t, threading._DummyThread)]  # pylint: disable=protected-access
    if not workers or time.monotonic() >= deadline:
      return
    for thread in workers:
      threading.Thread.join(thread, max(0.0, deadline - time.monotonic()))


def _host_copy(tree):
  """Host copies, so that buffers donated to the next train step stay untouched
  (gathered from every process when a multi-host mesh spreads the seeds)."""
  return jax.tree_util.tree_map(lambda x: np.array(sharding.to_host(x), copy=True), tree)


def _abstract(tree):
  return jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype
                                     if not hasattr(x, 'dtype') else x.dtype), tree)


def file_sha256(path: pathlib.Path) -> str:
  """The hex sha256 of a file, read in 1 MiB blocks."""
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def _step_files(step_dir: pathlib.Path) -> Dict[str, str]:
  """{relative path: sha256} of every file of a step, the manifest excepted."""
  return {str(p.relative_to(step_dir)): file_sha256(p)
          for p in sorted(step_dir.rglob('*')) if p.is_file() and p.name != MANIFEST}


class Checkpointer:
  """The checkpoints of one run directory.

  read_only: for evaluation; nothing is created or deleted.
  """

  def __init__(self, directory, read_only: bool = False):
    self.directory = pathlib.Path(directory).absolute()
    self.read_only = read_only
    self._manager = None

  # ------------------------------------------------------------- helpers ---
  def _orbax(self) -> ocp.CheckpointManager:
    if self._manager is None:
      if not self.read_only:
        _install_settling_handler()
      # In read-only use this class never saves or deletes, and orbax is not told
      # `read_only`: its read-only mode logs two warnings on every use, which would
      # break the CLI's one-line messages (--mode=evaluate/predict).
      self._manager = ocp.CheckpointManager(
          self.directory, item_names=ITEMS,
          options=ocp.CheckpointManagerOptions(
              max_to_keep=None, create=not self.read_only,
              enable_async_checkpointing=False, cleanup_tmp_directories=not self.read_only))
    return self._manager

  def steps(self) -> List[int]:
    """Epochs that have a step directory (complete or not), ascending."""
    if not self.directory.is_dir():
      return []
    return sorted(int(p.name) for p in self.directory.iterdir()
                  if p.is_dir() and p.name.isdigit())

  def _manifest_path(self, epoch: int) -> pathlib.Path:
    return self.directory / str(epoch) / MANIFEST

  def is_complete(self, epoch: int) -> bool:
    return self._manifest_path(epoch).is_file()

  def latest_epoch(self) -> Optional[int]:
    """The newest complete step."""
    complete = [e for e in self.steps() if self.is_complete(e)]
    return complete[-1] if complete else None

  def legacy_epoch(self) -> Optional[int]:
    """The newest step of a workdir written before manifests existed (no step has one)."""
    steps = self.steps()
    if steps and not any(self.is_complete(e) for e in steps):
      return steps[-1]
    return None

  def _warn_legacy(self, epoch: int) -> None:
    logging.warning('%s has no %s (written by an older monoloc_jax): restored unverified; '
                    'the next checkpoint will have one', self.directory / str(epoch), MANIFEST)

  def _corrupt(self, epoch: int, why: str) -> errors.MonolocError:
    return errors.MonolocError(
        f'the checkpoint {self.directory / str(epoch)} is corrupt or does not match '
        f'this configuration ({why}); the run cannot continue from it: move the workdir '
        f'away and start over with a fresh --workdir')

  def manifest(self, epoch: int, vocab_path: Optional[pathlib.Path] = None) -> Dict[str, Any]:
    """The verified manifest of step `epoch`: every file's sha256 (and vocab.json's,
    if given) must match, else MonolocError."""
    path = self._manifest_path(epoch)
    manifest = rundir.read_json(path, 'checkpoint manifest')
    if (not isinstance(manifest, dict) or manifest.get('format') != _FORMAT
        or manifest.get('epoch') != epoch or not isinstance(manifest.get('files'), dict)
        or not isinstance(manifest.get('history'), list)
        or not isinstance(manifest.get('layout', UNRECORDED_LAYOUT), str)):
      raise self._corrupt(epoch, f'{MANIFEST} is not a valid manifest')
    actual = _step_files(self.directory / str(epoch))
    for name in sorted(set(actual) | set(manifest['files'])):
      if name not in actual:
        raise self._corrupt(epoch, f'{name} is missing')
      if name not in manifest['files']:
        raise self._corrupt(epoch, f'{name} is not in its manifest')
      if actual[name] != manifest['files'][name]:
        raise self._corrupt(epoch, f'the sha256 of {name} differs from its manifest')
    if vocab_path is not None and manifest.get('vocab_sha256') != file_sha256(vocab_path):
      raise errors.MonolocError(
          f'{vocab_path} is not the vocabulary the checkpoint {self.directory / str(epoch)} '
          f'was trained with (its sha256 differs); restore the original file')
    return manifest

  # ---------------------------------------------------------------- save ---
  def save(self, epoch: int, tree: Dict[str, Any], history: List[Dict[str, Any]],
           vocab_path: pathlib.Path, hook: Callable[[str], None] = lambda phase: None,
           layout: str = UNRECORDED_LAYOUT) -> None:
    """Saves {'state', 'best_params', 'tracker'} as step `epoch` and then its manifest.

    history: metrics.jsonl's records up to this epoch (kept in the manifest).
    layout: the name of the tree's layout, recorded in the manifest.
    hook: called with 'save' between orbax's files and the manifest (`faults`).
    A failure (a full disk) removes the incomplete step and is a one-line MonolocError;
    the previous complete step is untouched.
    """
    step_dir = self.directory / str(epoch)
    try:
      if step_dir.exists():          # an incomplete leftover of an interrupted save
        shutil.rmtree(step_dir)
      with _quiet_orbax_workers():
        try:
          self._orbax().save(epoch, args=ocp.args.Composite(
              **{k: ocp.args.StandardSave(_host_copy(tree[k])) for k in ITEMS}), force=True)
          self._orbax().wait_until_finished()
        except BaseException:
          self._close_orbax()
          raise
      hook('save')
      rundir.write_json(self._manifest_path(epoch), {
          'format': _FORMAT, 'epoch': epoch, 'files': _step_files(step_dir),
          'vocab_sha256': file_sha256(vocab_path), 'history': history, 'layout': layout})
    except Exception as e:  # pylint: disable=broad-except
      # orbax and tensorstore raise many types (OSError, ValueError('RESOURCE_EXHAUSTED...')).
      for partial in [step_dir, *self.directory.glob(f'{epoch}.orbax-checkpoint-tmp*')]:
        shutil.rmtree(partial, ignore_errors=True)
      reason = (errors.os_error_message(e) if isinstance(e, OSError)
                else (str(e).strip().splitlines() or [type(e).__name__])[0][:200])
      if 'No space left on device' in str(e) and 'No space left on device' not in reason:
        reason = f'No space left on device: {reason}'   # tensorstore says it at the end
      kept = [s for s in self.steps() if s != epoch and self.is_complete(s)]
      last = (f'the last good checkpoint (epoch {kept[-1]}) is intact' if kept
              else 'no earlier checkpoint exists')
      raise errors.MonolocError(f'could not save the checkpoint of epoch {epoch} in '
                                f'{self.directory} ({reason}); {last}') from None

  def _close_orbax(self) -> None:
    """Closes orbax's manager after a failed save; the next use opens a new one."""
    manager, self._manager = self._manager, None
    if manager is not None:
      try:
        manager.close()
      except Exception:  # pylint: disable=broad-except  (the save's failure is reported)
        pass

  def prune(self, keep: int) -> None:
    """Deletes every step but `keep` (called once `keep` is complete and recorded)."""
    for epoch in self.steps():
      if epoch != keep:
        shutil.rmtree(self.directory / str(epoch), ignore_errors=True)
    if self._manager is not None:
      self._manager.reload()

  # ------------------------------------------------------------- restore ---
  def _restore(self, epoch: int, targets: Dict[str, Any]) -> Dict[str, Any]:
    try:
      restored = self._orbax().restore(epoch, args=ocp.args.Composite(
          **{k: ocp.args.StandardRestore(_abstract(v)) for k, v in targets.items()}))
      out = {k: restored[k] for k in targets}
    except Exception as e:  # pylint: disable=broad-except  (orbax raises many types)
      first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ''
      raise self._corrupt(epoch, f'{type(e).__name__}: {first}') from None
    for k in targets:
      got = jax.tree_util.tree_map(np.shape, out[k])
      want = jax.tree_util.tree_map(np.shape, targets[k])
      if got != want:
        raise self._corrupt(epoch, f'the shapes of {k} differ from this model\'s')
    return out

  def _restore_layout(self, epoch: int, saved: str, target: Dict[str, Any], layout: str,
                      migrations: Mapping[str, Migration]) -> Dict[str, Any]:
    """Step `epoch`, saved in layout `saved`, in the structure of `target` (`layout`)."""
    if saved == layout:
      return self._restore(epoch, target)
    if saved not in migrations:
      readable = ', '.join(sorted({layout, *migrations}))
      raise errors.MonolocError(
          f'the checkpoint {self.directory / str(epoch)} holds the train state in layout '
          f'{saved!r}, which this version of monoloc_jax cannot read (it reads: {readable}); '
          f'resume it with the version that wrote it, or start over with a fresh --workdir')
    older = self._restore(epoch, migrations[saved].target)
    out = migrations[saved].convert(older)
    logging.info('converted the checkpoint of epoch %d from layout %r to %r', epoch, saved,
                 layout)
    return out

  def restore_for_resume(self, target: Dict[str, Any], history: List[Dict[str, Any]],
                         vocab_path: pathlib.Path, claims_training: bool,
                         layout: str = UNRECORDED_LAYOUT,
                         migrations: Optional[Mapping[str, Migration]] = None
                         ) -> Optional[Dict[str, Any]]:
    """The newest complete checkpoint, verified, in the structure of `target`, with its
    'history'; None for a run that has not finished an epoch.

    history: the records metrics.jsonl holds. A step directory without a manifest and
      newer than its last epoch is an interrupted save and is removed; one that the
      history already records is damage (an error), unless no step has a manifest: a
      workdir written by an older version, restored unverified, its history cut back
      from metrics.jsonl.
    claims_training: the workdir says epochs were done (metrics.jsonl, results.json):
      without a checkpoint this is an error, not a restart from scratch.
    layout: the name of `target`'s layout. A step saved in another one is read through
      `migrations[its layout]`, or refused with one line.
    """
    migrations = migrations or {}
    history_epochs = max((r['epoch'] for r in history), default=0)
    legacy = self.legacy_epoch()
    if legacy is not None and legacy <= history_epochs:
      self._warn_legacy(legacy)
      out = self._restore_layout(legacy, UNRECORDED_LAYOUT, target, layout, migrations)
      by_epoch = {r['epoch']: r for r in history}
      out['history'] = [by_epoch[e] for e in sorted(by_epoch) if e <= legacy]
      out['epoch'] = legacy
      self.prune(keep=legacy)
      return out
    for epoch in reversed(self.steps()):
      if self.is_complete(epoch):
        break
      if epoch <= history_epochs:
        raise self._corrupt(epoch, f'{MANIFEST} is missing but metrics.jsonl records '
                                   f'epoch {epoch}')
      shutil.rmtree(self.directory / str(epoch))
    epoch = self.latest_epoch()
    if epoch is None:
      if claims_training:
        raise errors.MonolocError(
            f'{self.directory.parent} records finished epochs (metrics.jsonl or '
            f'results.json) but {self.directory} holds no checkpoint; the run cannot resume '
            'and is not restarted over its results: move the workdir away or use a fresh '
            '--workdir')
      return None
    manifest = self.manifest(epoch, vocab_path)
    out = self._restore_layout(epoch, manifest.get('layout', UNRECORDED_LAYOUT), target, layout,
                               migrations)
    out['history'] = manifest['history']
    out['epoch'] = epoch
    self.prune(keep=epoch)
    return out

  def restore_best_params(self, params_target, vocab_path: pathlib.Path) -> Optional[Any]:
    """Only the (verified) best parameters of the newest complete checkpoint."""
    epoch = self.latest_epoch()
    if epoch is None:
      epoch = self.legacy_epoch()
      if epoch is None:
        return None
      self._warn_legacy(epoch)
    else:
      self.manifest(epoch, vocab_path)
    return self._restore(epoch, {'best_params': params_target})['best_params']
