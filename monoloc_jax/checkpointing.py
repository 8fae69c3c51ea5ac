"""Orbax checkpoints of a run: the latest train state, the best parameters and
the host-side schedule, saved together after every epoch.

A run restarted with the same workdir resumes from the latest checkpoint; a
checkpoint that cannot be read is an error, never a silent restart.
"""

import pathlib
from typing import Any, Dict, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

from monoloc_jax import errors
from monoloc_jax import sharding

ITEMS = ('state', 'best_params', 'tracker')


def _host_copy(tree):
  """Host copies, so that buffers donated to the next train step stay untouched
  (gathered from every process when a multi-host mesh spreads the seeds)."""
  return jax.tree_util.tree_map(lambda x: np.array(sharding.to_host(x), copy=True), tree)


def _abstract(tree):
  return jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype
                                     if not hasattr(x, 'dtype') else x.dtype), tree)


class Checkpointer:
  """Keeps the newest `max_to_keep` epochs under `directory`."""

  def __init__(self, directory, max_to_keep: int = 1):
    self.directory = pathlib.Path(directory).absolute()
    self._manager = ocp.CheckpointManager(
        self.directory, item_names=ITEMS,
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True))

  def save(self, epoch: int, tree: Dict[str, Any]) -> None:
    """Saves {'state', 'best_params', 'tracker'} as epoch `epoch` (asynchronously)."""
    self._manager.save(epoch, args=ocp.args.Composite(
        **{k: ocp.args.StandardSave(_host_copy(tree[k])) for k in ITEMS}))

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def latest_epoch(self) -> Optional[int]:
    return self._manager.latest_step()

  def _restore(self, targets: Dict[str, Any]):
    epoch = self.latest_epoch()
    if epoch is None:
      return None
    try:
      restored = self._manager.restore(epoch, args=ocp.args.Composite(
          **{k: ocp.args.StandardRestore(_abstract(v)) for k, v in targets.items()}))
    except Exception as e:  # orbax raises many types for unreadable files
      first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ''
      raise errors.MonolocError(
          f'the checkpoint {self.directory / str(epoch)} is corrupt or does not match '
          f'this configuration ({type(e).__name__}: {first}); delete it to start over '
          f'or use another --workdir') from None
    return {k: restored[k] for k in targets}

  def restore_latest(self, target: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The newest checkpoint in the structure of `target`, or None if there is none."""
    return self._restore(target)

  def restore_best_params(self, params_target) -> Optional[Any]:
    """Only the best parameters of the newest checkpoint."""
    out = self._restore({'best_params': params_target})
    return None if out is None else out['best_params']
