"""How the seed-batched programs run over their leading seed axis [N, ...].

Every array of a multi-seed train state has a leading seed axis. A program of
one seed runs over that axis in one of three ways, with the same per-seed result:
  * 'vmap': one batched program (`jax.vmap`); right on an accelerator, where a
    step of 32 rows leaves the device idle and batching seeds fills it;
  * 'map': the seeds one after another inside one program (`jax.lax.map`);
    right on one CPU core, where XLA:CPU runs seed-batched products outside its
    fast matmul path (MEASUREMENTS.md §3: 5 vmapped seeds are slower in total than
    5 in a row);
  * 'threads': the 'map' programs, but each seed's training steps run as calls of
    the one-seed program from their own host thread (`run_steps`), and evaluation
    batches are decoded side by side (`host_threads`), so that XLA:CPU runs them on
    every core; right on a multi-core CPU, where one seed's step of 32 rows keeps
    only about one and a half cores busy (MEASUREMENTS.md §3: 3 seeds of README
    command 1's model train 1.77x the samples/s of 'map' on 2 cores, the same
    numbers to the bit).
'auto' picks 'threads' on a single CPU device with more than one core, 'map' on one
core, and 'vmap' otherwise (accelerators, and several devices, whose mesh shards the
seed axis of the batched program). On an H100 5 vmapped seeds train 43,977 samples/s
against 9,899 mapped (MEASUREMENTS.md §7).
"""

import concurrent.futures
import functools
import os
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp

STRATEGIES = ('auto', 'vmap', 'map', 'threads')

__all__ = ["STRATEGIES", "resolve", "describe", "over_seeds", "host_cores", "host_threads",
           "side_by_side", "split_seeds", "join_seeds", "run_steps"]


def host_cores() -> int:
  """The CPU cores this process may run on (its affinity mask, e.g. under taskset)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:     # not on Linux
    return os.cpu_count() or 1


def resolve(strategy: str, backend: Optional[str] = None) -> str:
  """'auto' -> 'threads' on a single CPU device with more than one core (`host_cores`),
  'map' on a single core, 'vmap' elsewhere (accelerators, and several devices, where
  `sharding` lays the seed axis of one batched program over them); the others stay."""
  if strategy not in STRATEGIES:
    raise ValueError(f'unknown seed strategy {strategy!r}; valid: {", ".join(STRATEGIES)}')
  if strategy != 'auto':
    return strategy
  single_cpu = (backend or jax.default_backend()) == 'cpu' and jax.local_device_count() == 1
  if not single_cpu:
    return 'vmap'
  return 'threads' if host_cores() > 1 else 'map'


def host_threads(strategy: str, backend: Optional[str] = None) -> int:
  """How many calls of one program a caller may run side by side from host threads:
  `host_cores()` under 'threads', else 1 (calls in order)."""
  return host_cores() if resolve(strategy, backend) == 'threads' else 1


def side_by_side(fn: Callable, items: Sequence[Tuple[Any, ...]], threads: int,
                 progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it
                 ) -> List[Any]:
  """[fn(*item) for item in items], up to `threads` calls at a time from host threads.

  Each call is one program's call on its own inputs (e.g. a batch of a split to
  decode), so the results are those of the calls in order, and in order. progress
  wraps the results as they arrive (e.g. a progress bar). Calls that meet a program
  not yet compiled wait for one compilation (JAX compiles a program once for all the
  threads that ask for it).
  """
  items = list(items)
  if threads <= 1 or len(items) <= 1:
    return list(progress(fn(*item) for item in items))
  with concurrent.futures.ThreadPoolExecutor(
      max_workers=min(threads, len(items)), thread_name_prefix='monoloc-call') as pool:
    return list(progress(pool.map(lambda item: fn(*item), items)))


def describe(strategy: str, n_seeds: int) -> str:
  """How `n_seeds` seeds run under `strategy`, for the run's header line."""
  resolved = resolve(strategy)
  if resolved == 'threads':
    return f'{n_seeds} side by side, one host thread each'
  return f'{n_seeds} in one program, {resolved} over seeds'


def over_seeds(fn: Callable, in_axes: Sequence[Optional[int]], strategy: str = 'auto',
               backend: Optional[str] = None) -> Callable:
  """fn of one seed -> fn of all seeds ('threads' builds the 'map' program).

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


@functools.partial(jax.jit, static_argnums=1)
def split_seeds(tree: Any, n: int) -> Tuple[Any, ...]:
  """A tree of [n, ...] leaves -> n trees of [1, ...] leaves (seed i's slices)."""
  return tuple(jax.tree_util.tree_map(lambda x, i=i: x[i:i + 1], tree) for i in range(n))


@jax.jit
def join_seeds(parts: Sequence[Any]) -> Any:
  """`split_seeds`' inverse: trees of [k_i, ...] leaves -> one tree of [sum k_i, ...]."""
  return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *parts)


def run_steps(step: Callable, state: Any, stats: Any, batches: Sequence[Any], strategy: str,
              progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
              on_step: Callable[[int], None] = lambda i: None) -> Tuple[Any, Any]:
  """(state, stats) after `state, stats = step(state, batch, stats)` for each batch in order.

  state, stats: trees of [N, ...] leaves; batches: trees of [N, ...] leaves (host
  arrays); `step` is a program over the seed axis (`over_seeds`). Under 'threads'
  (`resolve`) with N > 1, seed i's slice of state and stats takes every step with its
  slice of each batch, in its own host thread, and the results are joined
  (`split_seeds`, `join_seeds`): the same per-seed arithmetic, the seeds side by side.
  progress wraps the batches of the first (or only) loop, e.g. a progress bar; on_step(i)
  is called from that loop after its step i.
  """
  def loop(state, stats, rows: Optional[slice], first: bool):
    for i, batch in enumerate(progress(batches) if first else batches):
      if rows is not None:
        batch = jax.tree_util.tree_map(lambda x: x[rows], batch)
      state, stats = step(state, batch, stats)
      if first:
        on_step(i)
    return state, stats

  n = jax.tree_util.tree_leaves(state)[0].shape[0]
  if resolve(strategy) != 'threads' or n == 1:
    return loop(state, stats, None, True)
  parts = split_seeds((state, stats), n)
  with concurrent.futures.ThreadPoolExecutor(
      max_workers=n, thread_name_prefix='monoloc-seed') as pool:
    futures = [pool.submit(loop, *parts[i], slice(i, i + 1), i == 0) for i in range(n)]
    done = [f.result() for f in futures]
  return join_seeds(done)
