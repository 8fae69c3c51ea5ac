"""Training jobs as Ray tasks: the reproduction runner's `--executor=ray`.

A job is one run directory and the config that trains it. Each job becomes a
Ray task with its resource needs (`Resources`: CPUs, or one accelerator); Ray
schedules the tasks over a local Ray or an existing cluster and retries a task
whose worker died (`max_retries`). The retried task calls
`train.train_and_evaluate` on the same workdir, which resumes from the last
epoch checkpoint, so a workdir on storage every node sees (or a one-node Ray)
loses at most one epoch. The task returns the run's results to the driver,
which writes the unit's results JSON itself: results land in the driver's
results/ whichever node trained.

The package is shipped to the workers with Ray's `py_modules`, so a cluster
runs the driver's code; JAX, Flax, etc. must be installed on every node
(`pip install "monoloc_jax[ray]"`). Ray is optional: nothing here imports it
until `run_jobs` is called.
"""

import dataclasses
import os
import pathlib
import platform
import re
import signal
import threading
import time
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

from monoloc_jax import errors

RAY_INSTALL = 'pip install "monoloc_jax[ray]" (or pip install ray)'
# Fault injection for tests: the first task (over all workers) that sees an
# epoch checkpoint in its workdir creates this file and SIGKILLs its own worker.
KILL_ONCE_ENV = 'MONOLOC_KILL_ONCE_MARKER'


@dataclasses.dataclass(frozen=True)
class Job:
  """One run: `name` for messages, the config as a plain dict, an absolute workdir."""
  name: str
  config: Dict[str, Any]
  workdir: str


@dataclasses.dataclass(frozen=True)
class Resources:
  """What one task reserves on a node: CPUs, GPUs and TPU chips (Ray's resources)."""
  cpus: float = 1.0
  gpus: float = 0.0
  tpus: float = 0.0

  def ray_options(self) -> Dict[str, Any]:
    options: Dict[str, Any] = {'num_cpus': self.cpus, 'num_gpus': self.gpus}
    if self.tpus:
      options['resources'] = {'TPU': self.tpus}
    return options


def import_ray():
  """The `ray` module, or a one-line error saying how to install it."""
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise errors.MonolocError(f'--executor=ray needs Ray; install it with {RAY_INSTALL}, '
                              'or use --executor=local') from None
  return ray


def _latest_epoch(workdir: pathlib.Path) -> Optional[int]:
  """The newest finished epoch checkpoint in `workdir` (orbax names it by the epoch)."""
  ckpt = workdir / 'checkpoints'
  epochs = [int(p.name) for p in ckpt.iterdir() if re.fullmatch(r'\d+', p.name)] \
      if ckpt.is_dir() else []
  return max(epochs) if epochs else None


def _kill_after_first_checkpoint(workdir: pathlib.Path, marker: pathlib.Path) -> None:
  """Testing: SIGKILLs this process once an epoch checkpoint exists, unless
  `marker` exists (then another task already died; nothing happens)."""
  def watch():
    while _latest_epoch(workdir) is None:
      time.sleep(0.02)
    try:
      os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
      return
    os.kill(os.getpid(), signal.SIGKILL)
  threading.Thread(target=watch, daemon=True).start()


def train_job(config: Dict[str, Any], workdir: str) -> Dict[str, Any]:
  """The body of one Ray task: trains (or resumes) `workdir` and returns
  {'results', 'wall_s', 'resumed_from_epoch', 'backend', 'node'}."""
  import jax  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  from monoloc_jax import xla_cache  # pylint: disable=g-import-not-at-top
  xla_cache.enable_compilation_cache()
  path = pathlib.Path(workdir)
  resumed = _latest_epoch(path)
  if os.environ.get(KILL_ONCE_ENV):
    _kill_after_first_checkpoint(path, pathlib.Path(os.environ[KILL_ONCE_ENV]))
  t0 = time.time()
  results = train.train_and_evaluate(ml_collections.ConfigDict(config), workdir)
  return {'results': results, 'wall_s': time.time() - t0, 'resumed_from_epoch': resumed,
          'backend': jax.default_backend(), 'node': platform.node()}


def run_jobs(jobs: Sequence[Job], *, address: str = '', local_cpus: int = 0,
             resources: Resources = Resources(), max_retries: int = 3
             ) -> Iterator[Tuple[Job, Union[Dict[str, Any], errors.MonolocError]]]:
  """Runs `jobs` as Ray tasks; yields (job, train_job's output or the error) as each ends.

  address: '' starts a local Ray (with `local_cpus` CPUs, 0 = all) and stops it
    at the end; 'auto' or 'ray://host:10001' joins an existing cluster.
  max_retries: how often a task whose worker died is run again (it resumes).
  A training error (`MonolocError`) is not retried; it is yielded.
  """
  ray = import_ray()
  package = str(pathlib.Path(__file__).resolve().parent)
  kwargs: Dict[str, Any] = {'runtime_env': {'py_modules': [package]},
                            'include_dashboard': False, 'log_to_driver': False}
  if address:
    kwargs['address'] = address
  elif local_cpus:
    kwargs['num_cpus'] = local_cpus
  ray.init(**kwargs)
  try:
    task = ray.remote(train_job).options(max_retries=max_retries, retry_exceptions=False,
                                         **resources.ray_options())
    pending = {task.remote(job.config, job.workdir): job for job in jobs}
    while pending:
      (ref,), _ = ray.wait(list(pending), num_returns=1)
      job = pending.pop(ref)
      try:
        yield job, ray.get(ref)
      except ray.exceptions.RayTaskError as e:
        cause = e.as_instanceof_cause()
        message = str(getattr(e, 'cause', None) or cause).strip().splitlines()
        yield job, errors.MonolocError(message[-1] if message else type(cause).__name__)
      except ray.exceptions.RayError as e:   # worker died more than max_retries times, ...
        yield job, errors.MonolocError(f'{type(e).__name__} after {max_retries} retries: '
                                       f'{str(e).strip().splitlines()[0][:200]}')
  finally:
    if not address:
      ray.shutdown()
