"""How the seed-batched programs run over their leading seed axis [N, ...].

Every array of a multi-seed train state has a leading seed axis. A program of
one seed runs over that axis in one of two ways, with the same per-seed result:
  * 'vmap': one batched program (`jax.vmap`); right on an accelerator, where a
    step of 32 rows leaves the device idle and batching seeds fills it;
  * 'map': the seeds one after another inside one program (`jax.lax.map`);
    right on CPU, where the matrix products of one seed already keep the cores
    busy and XLA:CPU runs seed-batched products outside its fast matmul path
    (MEASUREMENTS.md §3: 5 vmapped seeds are slower in total than 5 in a row).
'auto' picks 'map' on a single CPU device and 'vmap' otherwise (accelerators, and
several devices, whose mesh shards the seed axis of the batched program). Both sides
are measured: on 2 CPU cores 5 vmapped seeds are slower in total than 5 in a row
(MEASUREMENTS.md §3); on an H100 5 vmapped seeds train 43,977 samples/s against 9,899 mapped
(MEASUREMENTS.md §7).
"""

from typing import Callable, Optional, Sequence

import jax

STRATEGIES = ('auto', 'vmap', 'map')

__all__ = ["STRATEGIES", "resolve", "over_seeds"]


def resolve(strategy: str, backend: Optional[str] = None) -> str:
  """'auto' -> 'map' on a single CPU device, 'vmap' elsewhere (accelerators, and
  several devices, where `sharding` lays the seed axis of one batched program
  over them); 'vmap' and 'map' stay."""
  if strategy not in STRATEGIES:
    raise ValueError(f'unknown seed strategy {strategy!r}; valid: {", ".join(STRATEGIES)}')
  if strategy != 'auto':
    return strategy
  single_cpu = (backend or jax.default_backend()) == 'cpu' and jax.local_device_count() == 1
  return 'map' if single_cpu else 'vmap'


def over_seeds(fn: Callable, in_axes: Sequence[Optional[int]], strategy: str = 'auto',
               backend: Optional[str] = None) -> Callable:
  """fn of one seed -> fn of all seeds.

  in_axes: per positional argument, 0 (it has a leading seed axis) or None
  (shared by every seed, e.g. the batch of evaluation). Outputs get a leading
  seed axis either way.
  """
  in_axes = tuple(in_axes)
  if resolve(strategy, backend) == 'vmap':
    return jax.vmap(fn, in_axes=in_axes)

  def mapped(*args):
    seeded = tuple(a for a, ax in zip(args, in_axes) if ax == 0)

    def one(seeded_one):
      it = iter(seeded_one)
      return fn(*[next(it) if ax == 0 else a for a, ax in zip(args, in_axes)])
    return jax.lax.map(one, seeded)
  return mapped
