"""The files of a run directory (`--workdir`), read and written in one place.

  config.json    the run's config (its identity)
  vocab.json     the vocabulary built from the training split
  metrics.jsonl  one line per finished epoch (loss, dev accuracy, lr, seconds per seed)
  results.json   test metrics per split, aggregated over seeds and per seed
  checkpoints/   orbax checkpoints (see `checkpointing`)

JSON files are written atomically (temporary file, fsync, rename), so a kill
never leaves half a file behind.
"""

import contextlib
import fcntl
import json
import os
import pathlib
import platform
from typing import Any, Dict, Iterator, List, Mapping, Tuple

import ml_collections

from monoloc_jax import errors
from monoloc_jax.configs import default

CONFIG = 'config.json'
VOCAB = 'vocab.json'
HISTORY = 'metrics.jsonl'
RESULTS = 'results.json'
CHECKPOINTS = 'checkpoints'
LOCK = '.lock'

# Config fields a run may change when it resumes: they change neither the data,
# the model, nor the training already done (test evaluation only, or when to stop).
RESUMABLE_FIELDS = ('max_epochs', 'progress', 'eval_batch_size', 'test_splits')


def seeds_of(config) -> List[int]:
  """The model seeds of a run: config.seed, config.seed + 1, ..."""
  return [config.seed + i for i in range(config.seeds)]


def write_json(path: pathlib.Path, obj: Any) -> None:
  """Writes `obj` as JSON to `path` atomically."""
  path = pathlib.Path(path)
  tmp = path.with_name(f'.{path.name}.tmp')
  with open(tmp, 'w', encoding='utf-8') as f:
    f.write(json.dumps(obj, indent=2, default=float))
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def save_config(workdir: pathlib.Path, config) -> None:
  write_json(pathlib.Path(workdir) / CONFIG, config.to_dict())


def load_config(workdir: pathlib.Path) -> ml_collections.ConfigDict:
  """The stored config over the current defaults (fields added since keep their defaults).

  Configs written before the field `model` was renamed `variant` are read too.
  """
  path = pathlib.Path(workdir) / CONFIG
  if not path.exists():
    raise errors.MonolocError(f'{workdir} has no {CONFIG}: not a monoloc_jax run directory')
  stored = json.loads(path.read_text(encoding='utf-8'))
  if 'model' in stored and 'variant' not in stored:
    stored['variant'] = stored.pop('model')
  config = default.get_config()
  config.update(stored)
  return config


def config_changes(stored, given) -> List[Tuple[str, Any, Any]]:
  """[(field, stored value, given value)] for every field that differs, sorted by field."""
  a, b = dict(stored.to_dict()), dict(given.to_dict())
  return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def check_config(workdir: pathlib.Path, config) -> None:
  """Refuses a config that differs from the workdir's stored one beyond RESUMABLE_FIELDS.

  The stored config is the run's identity; nothing is written before this check.
  """
  if not (pathlib.Path(workdir) / CONFIG).exists():
    return
  changes = [c for c in config_changes(load_config(workdir), config)
             if c[0] not in RESUMABLE_FIELDS]
  if changes:
    diff = '; '.join(f'{k}: {a!r} (stored) != {b!r}' for k, a, b in changes)
    raise errors.MonolocError(
        f'{workdir} holds a run with another configuration ({diff}); resume it with its own '
        f"settings (only {', '.join(RESUMABLE_FIELDS)} may change) or use a fresh --workdir")


@contextlib.contextmanager
def lock(workdir: pathlib.Path) -> Iterator[None]:
  """Holds an exclusive lock on the workdir; a second process is refused with one line."""
  path = pathlib.Path(workdir) / LOCK
  with open(path, 'a+', encoding='utf-8') as f:
    try:
      fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      f.seek(0)
      holder = f.read().strip() or 'unknown'
      raise errors.MonolocError(f'{workdir} is in use by another process (pid {holder}); '
                                'wait for it to finish or use another --workdir') from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    try:
      yield
    finally:
      fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def append_history(workdir: pathlib.Path, record: Mapping[str, Any]) -> None:
  """Appends one epoch's record to metrics.jsonl."""
  with (pathlib.Path(workdir) / HISTORY).open('a', encoding='utf-8') as f:
    f.write(json.dumps(record) + '\n')


def truncate_history(workdir: pathlib.Path, epoch: int) -> None:
  """Drops history lines of epochs after `epoch` (written before a crash, not checkpointed)."""
  path = pathlib.Path(workdir) / HISTORY
  if path.exists():
    lines = [l for l in path.read_text(encoding='utf-8').splitlines()
             if l.strip() and json.loads(l)['epoch'] <= epoch]
    path.write_text(''.join(l + '\n' for l in lines), encoding='utf-8')


def load_results(workdir: pathlib.Path) -> Dict[str, Any]:
  path = pathlib.Path(workdir) / RESULTS
  return json.loads(path.read_text(encoding='utf-8')) if path.exists() else {}


def save_results(workdir: pathlib.Path, results: Mapping[str, Any]) -> None:
  write_json(pathlib.Path(workdir) / RESULTS, results)


def versions() -> Dict[str, Any]:
  """Package versions and devices, recorded in results.json."""
  import flax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  return {'python': platform.python_version(), 'jax': jax.__version__,
          'jaxlib': getattr(jax.lib, '__version__', ''),
          'flax': flax.__version__, 'optax': optax.__version__,
          'orbax': getattr(ocp, '__version__', ''), 'numpy': np.__version__,
          'backend': jax.default_backend(), 'devices': [str(d) for d in jax.devices()]}
