"""The files of a run directory (`--workdir`), read and written in one place.

  config.json    the run's config (its identity)
  vocab.json     the vocabulary built from the training split
  metrics.jsonl  one line per finished epoch (loss, dev accuracy, lr, seconds per seed)
  results.json   test metrics per split, aggregated over seeds and per seed
  checkpoints/   orbax checkpoints, each with a sha256 manifest (see `checkpointing`)
  .lock          the fcntl lock of the process using the workdir

Every file is written atomically (temporary file, fsync, rename), so a kill
never leaves half a file behind; every reader turns a damaged file into a
one-line `MonolocError` naming it. README "Workdir contract" is the contract.
"""

import contextlib
import fcntl
import importlib.util
import json
import os
import pathlib
import platform
from typing import Any, Dict, Iterator, List, Mapping, Sequence, Tuple

import ml_collections

from monoloc_jax import config_paths
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


@contextlib.contextmanager
def os_errors(what: str) -> Iterator[None]:
  """Turns an OSError (read-only or full disk, a file where a directory should be, ...)
  into a one-line MonolocError: '<what>: <reason>: <path>'."""
  try:
    yield
  except OSError as e:
    raise errors.MonolocError(f'{what}: {errors.os_error_message(e)}') from None


def write_bytes_atomic(path: pathlib.Path, data: bytes) -> None:
  """Writes `data` to `path` atomically: a temporary file beside it, fsync, rename,
  fsync of the directory. A kill at any moment leaves the old file or the new one."""
  path = pathlib.Path(path)
  tmp = path.with_name(f'.{path.name}.tmp')
  try:
    with open(tmp, 'wb') as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      tmp.unlink()
    raise
  with contextlib.suppress(OSError):      # the rename itself is durable once the dir is synced
    fd = os.open(path.parent, os.O_RDONLY)
    try:
      os.fsync(fd)
    finally:
      os.close(fd)


def write_json(path: pathlib.Path, obj: Any) -> None:
  """Writes `obj` as JSON to `path` atomically."""
  write_bytes_atomic(path, json.dumps(obj, indent=2, default=float).encode('utf-8'))


def read_json(path: pathlib.Path, what: str) -> Any:
  """The JSON content of `path`; one-line MonolocError when it cannot be read or parsed
  (not UTF-8, invalid JSON, nested too deep, unreadable)."""
  path = pathlib.Path(path)
  try:
    return json.loads(path.read_bytes().decode('utf-8'))
  except OSError as e:
    raise errors.MonolocError(f'cannot read {what} {path}: {errors.os_error_message(e)}') from None
  except UnicodeDecodeError as e:
    raise errors.MonolocError(f'{path} is not a valid {what}: not UTF-8 text '
                              f'(byte {e.start})') from None
  except RecursionError:
    raise errors.MonolocError(f'{path} is not a valid {what}: JSON nested too deeply') from None
  except ValueError as e:
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise errors.MonolocError(f'{path} is not a valid {what}: {reason}') from None


def save_config(workdir: pathlib.Path, config) -> None:
  """Writes config.json (atomically)."""
  write_json(pathlib.Path(workdir) / CONFIG, config.to_dict())


def load_config(workdir: pathlib.Path) -> ml_collections.ConfigDict:
  """The stored config over the current defaults (fields added since keep their defaults).

  Configs written before the field `model` was renamed `variant`, or before
  mix_mode 'reference_code' was renamed 'authors_code', are read too, and so
  are those with the flat names of the backbones' fields (`config_paths.LEGACY_FIELDS`:
  'embed_dim', 'transformer_layers', ... now config.gru.embed_dim,
  config.transformer.layers, ...). A damaged config.json (not JSON, not an object, unknown or mistyped fields, no task
  or variant) is a one-line MonolocError.
  """
  path = pathlib.Path(workdir) / CONFIG
  if not path.is_file():
    inner = sorted(p.parent.name for p in pathlib.Path(workdir).glob(f'*/{CONFIG}'))
    hint = (f"; it holds the run directories {', '.join(inner)} (a grid unit keeps one "
            f'per seed): pass one of them' if inner else '')
    raise errors.MonolocError(f'{workdir} has no {CONFIG}: not a monoloc_jax run '
                              f'directory{hint}')
  stored = read_json(path, 'run config')
  if not isinstance(stored, dict):
    raise errors.MonolocError(f'{path} is not a valid run config: expected a JSON object, '
                              f'got {type(stored).__name__}')
  stored = _current_names(stored)
  fields = default.get_config()
  missing = [k for k in ('task', 'variant') if k not in stored]
  known = config_paths.flatten(fields.to_dict())
  unknown = sorted(set(config_paths.flatten(stored)) - set(known))
  if missing or unknown:
    what = (f"it has no {' or '.join(repr(k) for k in missing)}" if missing
            else f"unknown field(s) {', '.join(map(repr, unknown))}")
    raise errors.MonolocError(f'{path} is not a valid run config: {what}; '
                              f'valid fields: {", ".join(sorted(known))}')
  try:
    return with_defaults(stored)
  except (TypeError, ValueError, KeyError) as e:
    reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    raise errors.MonolocError(f'{path} is not a valid run config: {reason}') from None


def _current_names(stored: Mapping[str, Any]) -> Dict[str, Any]:
  """`stored` with the field names and values of today (`model` was renamed `variant`;
  mix_mode 'reference_code' was renamed 'authors_code' in 2026-12)."""
  stored = dict(stored)
  if 'model' in stored and 'variant' not in stored:
    stored['variant'] = stored.pop('model')
  if stored.get('mix_mode') == 'reference_code':
    stored['mix_mode'] = 'authors_code'
  return config_paths.upgrade(stored)


def with_defaults(stored: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """configs/default.py's config with the fields of `stored` (a config.json, the
  'config' of a results.json) over it: a field it lacks (added since it was
  written) has its default. Unknown or mistyped fields raise ml_collections'
  KeyError / TypeError (`load_config` names the file)."""
  config = default.get_config()
  config.update(_current_names(stored))
  return config


def refuse_overrides(mode: str, overrides: Mapping[str, Any], allowed: Sequence[str]) -> None:
  """A one-line MonolocError when `overrides` (a finished run's --config.FIELD values for
  --mode=`mode`) holds a field outside `allowed`."""
  refused = sorted(set(overrides) - set(allowed))
  if refused:
    raise errors.MonolocError(f"--mode={mode} cannot change config.{refused[0]}; it may "
                              f"change only {', '.join(allowed)}")


def config_changes(stored, given) -> List[Tuple[str, Any, Any]]:
  """[(field, stored value, given value)] for every field that differs, sorted by field.

  A field the stored config lacks (written before the field existed) has its default:
  that is what the older version ran, so a workdir of it still resumes. A field of a
  backbone's group is named by its path ('transformer.layers').
  """
  defaults = config_paths.flatten(default.get_config().to_dict())
  a, b = config_paths.flatten(stored.to_dict()), config_paths.flatten(given.to_dict())
  a = {**{k: v for k, v in defaults.items() if k in b}, **a}
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


def config_file_defaults(config_file: str) -> ml_collections.ConfigDict:
  """The config of a --config file (its `get_config()`), without any --config.FIELD
  override."""
  spec = importlib.util.spec_from_file_location('monoloc_config_file', config_file)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def given_fields(config_file: str, given) -> Dict[str, Any]:
  """{field: value} of the fields of `given` (the --config file's config with the
  command line's --config.FIELD overrides) that differ from the file's own."""
  return {field: new for field, _, new in config_changes(config_file_defaults(config_file),
                                                         ml_collections.ConfigDict(given))}


def train_config(workdir: pathlib.Path, config_file: str, given,
                 overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """The config to train with.

  given: the --config file's config with the --config.FIELD overrides (a ConfigDict
  or its dict); overrides: {field: value} of the plain flags, None = not given.
  A new workdir: `given`, then `overrides`. A workdir that holds a run: its stored
  config.json, with only the fields given on the command line changed (those of
  `given` that differ from the --config file's own, then `overrides`), so
  `--workdir=W --config.max_epochs=6` resumes W's own run; `check_config` then
  refuses changes beyond RESUMABLE_FIELDS.
  """
  given = ml_collections.ConfigDict(given)
  if (pathlib.Path(workdir) / CONFIG).exists():
    config = load_config(pathlib.Path(workdir))
    for field, value in given_fields(config_file, given).items():
      config[field] = value
  else:
    config = given
  for field, value in overrides.items():
    if value is not None:
      config[field] = value
  return config


@contextlib.contextmanager
def lock(workdir: pathlib.Path) -> Iterator[None]:
  """Holds an exclusive lock on the workdir; a second process is refused with one line."""
  path = pathlib.Path(workdir) / LOCK
  with open(path, 'a+', encoding='utf-8', errors='replace') as f:
    try:
      fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      f.seek(0)
      holder = f.read().strip() or 'unknown'
      raise errors.WorkdirInUse(f'{workdir} is in use by another process (pid {holder}); '
                                'wait for it to finish or use another --workdir') from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    try:
      yield
    finally:
      fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def read_history(workdir: pathlib.Path) -> List[Dict[str, Any]]:
  """The records of metrics.jsonl that can be read, in file order (damaged lines are
  skipped: on resume the file is rewritten from the checkpoint's own copy)."""
  path = pathlib.Path(workdir) / HISTORY
  records = []
  try:
    lines = path.read_bytes().splitlines()
  except FileNotFoundError:
    return []
  for line in lines:
    try:
      record = json.loads(line.decode('utf-8'))
    except (ValueError, RecursionError):
      continue
    if isinstance(record, dict) and isinstance(record.get('epoch'), int):
      records.append(record)
  return records


def history_claims_epochs(workdir: pathlib.Path) -> bool:
  """Whether the workdir says that training happened: a non-empty metrics.jsonl or a
  results.json."""
  workdir = pathlib.Path(workdir)
  history = workdir / HISTORY
  return (history.is_file() and history.stat().st_size > 0) or (workdir / RESULTS).exists()


def write_history(workdir: pathlib.Path, records: List[Mapping[str, Any]]) -> None:
  """Writes metrics.jsonl, one line per epoch, atomically (the whole file each epoch,
  so a kill never leaves a half line or a duplicated epoch)."""
  write_bytes_atomic(pathlib.Path(workdir) / HISTORY,
                     ''.join(json.dumps(r) + '\n' for r in records).encode('utf-8'))


def load_results(workdir: pathlib.Path) -> Dict[str, Any]:
  """results.json ({} when there is none); MonolocError when it is damaged."""
  path = pathlib.Path(workdir) / RESULTS
  if not path.exists():
    return {}
  results = read_json(path, 'results file')
  if not isinstance(results, dict) or not isinstance(results.get('test', {}), dict):
    raise errors.MonolocError(f'{path} is not a valid results file: expected a JSON object '
                              'with a "test" object; move it away to re-create it')
  return results


def save_results(workdir: pathlib.Path, results: Mapping[str, Any]) -> None:
  """Writes results.json (atomically)."""
  write_json(pathlib.Path(workdir) / RESULTS, results)


def versions() -> Dict[str, Any]:
  """Python, the installed versions of the packages a run depends on, and the devices,
  recorded in results.json and in each unit's JSON (experiments/reproduce.py).

  Package versions come from the installed distributions (`importlib.metadata`):
  jax, jaxlib, flax, optax, orbax-checkpoint (key 'orbax') and numpy; '' for one not
  installed. 'backend' is JAX's default backend, 'devices' its devices, 'host_cores'
  the CPU cores the process may use (`multiseed.host_cores`): on the CPU, some programs
  round differently with another number of cores, so a seed's numbers are reproduced
  under the same count (BUILD_NOTES §3).
  """
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from monoloc_jax import multiseed  # pylint: disable=g-import-not-at-top  (imports jax)
  def version(dist: str) -> str:
    try:
      return metadata.version(dist)
    except metadata.PackageNotFoundError:
      return ''
  packages = {'jax': 'jax', 'jaxlib': 'jaxlib', 'flax': 'flax', 'optax': 'optax',
              'orbax': 'orbax-checkpoint', 'numpy': 'numpy'}     # key -> distribution
  return {'python': platform.python_version(),
          **{key: version(dist) for key, dist in packages.items()},
          'backend': jax.default_backend(), 'devices': [str(d) for d in jax.devices()],
          'host_cores': multiseed.host_cores()}
