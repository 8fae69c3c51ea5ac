"""Seeds, and when seeds are few the batch rows, laid over every local device.

The trainer keeps a leading seed axis [N] on every array of its state and
vmaps one jitted step over it. With more than one device, `plan` builds a
`jax.sharding.Mesh` with axes ('seed', 'data'):

  seed groups  s = gcd(N, D)       seeds are split over s groups of devices
  data shards  d = largest divisor of D // s that divides the batch size

so 8 seeds on 8 devices are one seed per device (s=8, d=1), 2 seeds on 8
devices are 2 seed groups of 4 devices that each take a quarter of every
batch (s=2, d=4; data parallel), and 3 seeds on 8 devices are one group whose
8 devices split the batch (s=1, d=8). No seed is padded and no count is
refused: when the batch size does not split, fewer devices are used and
`Placement.describe` says so.

State leaves are placed with `NamedSharding(mesh, P('seed'))` (replicated over
'data'), training batches [N, B, ...] with `P('seed', 'data')`, evaluation
sources [B, ...] with `P('data')`; `jax.jit` propagates the layout through the
vmapped programs, so the programs themselves do not change. The loss of a
seed is a sum over its tokens divided by their count, so a batch split over
'data' gives the same per-seed numbers up to float rounding (XLA adds the
cross-device sums).

With one device, `Placement.mesh` is None and every method returns its input:
a single-device run is exactly the unsharded program.
"""

import dataclasses
import math
from typing import Any, Dict, Optional, Sequence, Tuple

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import numpy as np

from monoloc_jax import errors

SEED_AXIS = 'seed'
DATA_AXIS = 'data'


@dataclasses.dataclass(frozen=True)
class Placement:
  """Where the arrays of one multi-seed run live.

  mesh: a ('seed', 'data') mesh over the devices used, or None for one device.
  n_devices: the devices that were available (the mesh may use fewer).
  """
  mesh: Optional[Mesh]
  n_seeds: int
  n_devices: int

  @property
  def shape(self) -> tuple:
    """(seed groups, data shards); (1, 1) without a mesh."""
    if self.mesh is None:
      return (1, 1)
    return (self.mesh.shape[SEED_AXIS], self.mesh.shape[DATA_AXIS])

  @property
  def devices_used(self) -> int:
    return self.shape[0] * self.shape[1]

  def put_state(self, tree: Any) -> Any:
    """Places a tree whose leaves all have a leading seed axis [N] (train state,
    best parameters, epoch statistics): the seed axis over 'seed'."""
    if self.mesh is None:
      return tree
    return jax.device_put(tree, NamedSharding(self.mesh, P(SEED_AXIS)))

  def put_batch(self, batch: Any) -> Any:
    """Places a training batch (leaves [N, B, ...]): seeds over 'seed', rows over 'data'."""
    if self.mesh is None:
      return batch
    return jax.device_put(batch, NamedSharding(self.mesh, P(SEED_AXIS, DATA_AXIS)))

  def describe(self) -> str:
    """One line: how many seeds run at once on how many devices."""
    s, d = self.shape
    if self.mesh is None:
      return f'{self.n_seeds} seed(s) on 1 device'
    line = (f'{self.n_seeds} seed(s) on {self.devices_used} of {self.n_devices} devices: '
            f'mesh seed={s} x data={d} ({self.n_seeds // s} seed(s) per device group, '
            f'each batch split {d} way(s))')
    if self.devices_used < self.n_devices:
      line += (f'; to use all {self.n_devices}, train a seed count that divides '
               f'{self.n_devices} or a batch size divisible by {self.n_devices // s}')
    return line


def mesh_shape(n_seeds: int, n_devices: int, batch_size: int) -> Tuple[int, int]:
  """(seed groups, data shards) for `n_seeds` seeds on `n_devices` devices: the
  seed axis takes gcd(n_seeds, n_devices) groups, the data axis the largest
  divisor of the remaining devices per group that splits `batch_size` rows."""
  if min(n_seeds, n_devices, batch_size) < 1:
    raise ValueError(f'seeds, devices and batch size must be >= 1, got '
                     f'{n_seeds}, {n_devices}, {batch_size}')
  s = math.gcd(n_seeds, n_devices)
  per_group = n_devices // s
  d = max(k for k in range(1, per_group + 1) if per_group % k == 0 and batch_size % k == 0)
  return s, d


def plan(n_seeds: int, batch_size: int,
         devices: Optional[Sequence[jax.Device]] = None) -> Placement:
  """The placement of `n_seeds` seeds with training batches of `batch_size` rows.

  devices: the devices to use (default: `jax.devices()`, every device of every
    process once `jax.distributed.initialize()` has run).
  """
  devices = list(jax.devices() if devices is None else devices)
  s, d = mesh_shape(n_seeds, max(len(devices), 1), batch_size)
  if s * d == 1:
    return Placement(None, n_seeds, len(devices))
  grid = np.array(devices[:s * d], dtype=object).reshape(s, d)
  return Placement(Mesh(grid, (SEED_AXIS, DATA_AXIS)), n_seeds, len(devices))


def _mesh_of(tree: Any) -> Optional[Mesh]:
  leaves = jax.tree_util.tree_leaves(tree)
  sharding = getattr(leaves[0], 'sharding', None) if leaves else None
  return sharding.mesh if isinstance(sharding, NamedSharding) else None


def put_like(params: Any, *arrays: np.ndarray) -> tuple:
  """Places evaluation inputs [B, ...] (shared by every seed) next to `params`:
  rows over the mesh's 'data' axis when they split evenly, else replicated.

  With parameters that carry no mesh (one device, a restored run) the arrays
  are returned unchanged.
  """
  mesh = _mesh_of(params)
  if mesh is None:
    return arrays
  d = mesh.shape[DATA_AXIS]
  return tuple(jax.device_put(a, NamedSharding(
      mesh, P(DATA_AXIS) if d > 1 and np.shape(a)[0] % d == 0 else P())) for a in arrays)


def to_host(x: Any) -> np.ndarray:
  """A host copy of `x`, gathered from every process when it spans several
  (a multi-host mesh); np.asarray otherwise."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.asarray(x)


DISTRIBUTED_HELP = ("'' (one process), 'auto' (jax.distributed.initialize() detects a Cloud "
                    "TPU pod slice, SLURM or Open MPI job) or HOST:PORT,NUM_PROCESSES,PROCESS_ID")


def distributed_args(spec: str) -> Optional[Dict[str, Any]]:
  """The keyword arguments of `jax.distributed.initialize` for a --distributed
  value (see DISTRIBUTED_HELP); None for ''."""
  spec = spec.strip()
  if not spec:
    return None
  if spec == 'auto':
    return {}
  parts = spec.split(',')
  try:
    address, num, pid = parts
    if ':' not in address or int(num) < 1 or not 0 <= int(pid) < int(num):
      raise ValueError
  except ValueError:
    raise errors.MonolocError(f'bad --distributed {spec!r}; valid values: {DISTRIBUTED_HELP}'
                              ) from None
  return {'coordinator_address': address, 'num_processes': int(num), 'process_id': int(pid)}


def initialize_distributed(spec: str) -> Optional[str]:
  """Calls `jax.distributed.initialize()` for a --distributed value (a TPU pod
  slice, a multi-node GPU job); must run before JAX touches a device. Returns
  one line describing this process's view, or None when `spec` is ''."""
  kwargs = distributed_args(spec)
  if kwargs is None:
    return None
  jax.distributed.initialize(**kwargs)
  return (f'process {jax.process_index()} of {jax.process_count()}: '
          f'{jax.local_device_count()} local and {jax.device_count()} global devices')
