"""ml_collections configs; pass one to the launcher with --config=path/to/file.py.

`validate(config)` checks every field a user can set, in one place.
"""

import math
from typing import Dict, List, Sequence


def validate(config, task=None, variant=None) -> None:
  """Checks every field a user can set; raises a one-line MonolocError.

  task / variant: objects given to the trainer in place of the registry's
  `config.task` / `config.variant` (their names are then not looked up).
  """
  # pylint: disable=g-import-not-at-top
  from monoloc_jax import backbones
  from monoloc_jax import errors
  from monoloc_jax import input_pipeline
  from monoloc_jax import tasks
  from monoloc_jax import variants
  # pylint: enable=g-import-not-at-top
  if task is None and config.task not in tasks.TASKS:
    raise errors.unknown_name('task', config.task, tasks.TASKS)
  if variant is None:
    variants.from_config(config)          # unknown variant or mix_mode
  checks = [
      ('seeds', config.seeds >= 1, 'an integer >= 1'),
      ('seed', config.seed >= 0, 'an integer >= 0'),
      ('batch_size', config.batch_size >= 1, 'an integer >= 1'),
      ('eval_batch_size', config.eval_batch_size >= 1, 'an integer >= 1'),
      ('learning_rate', math.isfinite(config.learning_rate) and config.learning_rate > 0,
       'a positive number'),
      ('max_epochs', config.max_epochs >= 1, 'an integer >= 1'),
      ('dropout', 0.0 <= config.dropout < 1.0, 'in [0, 1)'),
      ('grad_clip', math.isfinite(config.grad_clip) and config.grad_clip > 0,
       'a positive number'),
      ('lr_factor', 0 < config.lr_factor <= 1, 'in (0, 1]'),
      ('warmup_steps', config.get('warmup_steps', 0) >= 0, 'an integer >= 0 (0 = no warmup)'),
      ('train_size', config.train_size >= 0, 'an integer >= 0 (0 = all)'),
      ('eval_size', config.eval_size >= 0, 'an integer >= 0 (0 = all)'),
      ('hidden_dim', config.hidden_dim >= 2 and config.hidden_dim % 2 == 0,
       'an even integer >= 2'),
      ('perfect_dev_patience', config.perfect_dev_patience >= 0, 'an integer >= 0 (0 = off)'),
      ('qk_dim', config.qk_dim >= 0, 'an integer >= 0 (0 = hidden_dim)'),
      ('lr_patience', config.lr_patience >= 1, 'an integer >= 1'),
      ('early_stop_patience', config.early_stop_patience >= 1, 'an integer >= 1'),
      ('improvement_tolerance',
       math.isfinite(config.improvement_tolerance) and config.improvement_tolerance >= 0,
       'a number >= 0'),
      ('min_sigma', math.isfinite(config.min_sigma) and config.min_sigma > 0,
       'a positive number'),
      ('weight_decay', math.isfinite(config.weight_decay) and config.weight_decay >= 0,
       'a number >= 0'),
      ('mono_gate_init', math.isfinite(config.mono_gate_init), 'a finite number'),
      ('data_seed', config.data_seed >= 0, 'an integer >= 0'),
  ]
  for name, ok, want in checks:
    if not ok:
      raise errors.MonolocError(f'bad value for config.{name}: {getattr(config, name)!r}; '
                                f'it must be {want}')
  backbones.validate(config)       # backbone, init_scheme, dtype and every backbone's group
  if config.dev_metric not in ('greedy', 'teacher_forced'):
    raise errors.MonolocError(f"bad value for config.dev_metric: {config.dev_metric!r}; "
                              "valid: greedy, teacher_forced")
  from monoloc_jax import precision  # pylint: disable=g-import-not-at-top
  precision.of(config)                      # unknown matmul_precision
  from monoloc_jax import multiseed  # pylint: disable=g-import-not-at-top
  if config.get('seed_strategy', 'auto') not in multiseed.STRATEGIES:
    raise errors.unknown_name('seed_strategy', config.seed_strategy, multiseed.STRATEGIES)
  from monoloc_jax import train  # pylint: disable=g-import-not-at-top
  if config.get('plateau_rule', 'library') not in train.PLATEAU_RULES:
    raise errors.unknown_name('plateau_rule', config.plateau_rule, train.PLATEAU_RULES)
  threshold = config.get('plateau_threshold', 1e-4)
  if not (math.isfinite(threshold) and threshold >= 0):
    raise errors.MonolocError(f'bad value for config.plateau_threshold: {threshold!r}; '
                              'it must be a number >= 0')
  for name in input_pipeline.source_eos_tasks(config):
    if name not in tasks.TASKS and name != getattr(task, 'name', None):
      raise errors.MonolocError(f'unknown task {name!r} in config.source_eos_tasks; valid '
                                f"tasks: {', '.join(sorted(tasks.TASKS))} (comma list, '' = none)")
  input_pipeline.resolve_test_splits(config, task)


# ---------------------------------------------------------------------------
# Named configs and field help (the launcher's --config=NAME and --help).
# ---------------------------------------------------------------------------
def _config_dir():
  import pathlib  # pylint: disable=g-import-not-at-top
  return pathlib.Path(__file__).resolve().parent


def named_configs():
  """The package's config files, the one registry of `--config=NAME`: {name: path}.

  Every module in monoloc_jax/configs/ except this one is a named config
  (`default`, `quick`, `cfq`, ...); adding a file adds a name.
  """
  return {p.stem: p for p in sorted(_config_dir().glob('*.py')) if p.stem != '__init__'}


def summary(path) -> str:
  """The first line of a config file's module docstring."""
  import ast  # pylint: disable=g-import-not-at-top
  import pathlib  # pylint: disable=g-import-not-at-top
  doc = ast.get_docstring(ast.parse(pathlib.Path(path).read_text(encoding='utf-8'))) or ''
  return doc.strip().splitlines()[0] if doc.strip() else ''


def _unknown_config_fields(argv):
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  known = {field for field, _, _ in field_help()}
  fields = [a.split('=')[0][len('--config.'):] for a in argv[1:] if a.startswith('--config.')]
  return [f for f in fields if f not in known], sorted(known)


def define_config_flag(argv, help_text: str) -> None:
  """Defines absl's --config flag (default: configs/default.py) and its
  --config.FIELD overrides, which ml_collections reads from argv as the flag is
  defined; a bad override ends as one line on stderr and exit code 2. Shared by
  the console scripts (monoloc-train, monoloc-benchmark)."""
  import sys  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  try:
    config_flags.DEFINE_config_file('config', str(_config_dir() / 'default.py'), help_text,
                                    lock_config=True)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    unknown, known = _unknown_config_fields(argv)
    message = (f"unknown config field {unknown[0]!r}; valid fields: {', '.join(known)}"
               if unknown else f'bad --config override: {str(e).strip()[:200]}')
    print(f'error: {message}', file=sys.stderr)
    sys.exit(2)


def resolve_argv_or_exit(argv: list) -> list:
  """`resolve_argv`, with an unknown config name as one line and exit code 2."""
  import sys  # pylint: disable=g-import-not-at-top
  from monoloc_jax import errors  # pylint: disable=g-import-not-at-top
  try:
    return resolve_argv(argv)
  except errors.MonolocError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)


def resolve(value: str) -> str:
  """The file of a `--config` value: an existing path as it is; a name such as
  'quick' (or 'quick.py', or a path ending in monoloc_jax/configs/quick.py that does
  not exist here, e.g. the README's path run from another directory) -> the
  package's file. Raises MonolocError naming the valid names otherwise."""
  import pathlib  # pylint: disable=g-import-not-at-top
  from monoloc_jax import errors  # pylint: disable=g-import-not-at-top
  path = pathlib.Path(value)
  if path.is_file():
    return value
  named = named_configs()
  stem = path.name[:-3] if path.name.endswith('.py') else path.name
  in_package = path.parent == pathlib.Path('.') or path.parent.parts[-2:] == ('monoloc_jax',
                                                                              'configs')
  if in_package and stem in named:
    return str(named[stem])
  raise errors.MonolocError(
      f"cannot load the --config file {value!r}: no such file; named configs: "
      f"{', '.join(named)} (or a path to a .py file with get_config())")


def _comments(source: str) -> Dict[str, str]:
  """{field: its inline comment} of the `c.FIELD = value  # comment` lines of `source`."""
  import re  # pylint: disable=g-import-not-at-top
  comments = {}
  for line in source.splitlines():
    m = re.match(r'\s*c\.(\w+)\s*=\s*[^#]*?(?:#\s*(.*))?$', line)
    if m:
      comments[m.group(1)] = (m.group(2) or '').strip()
  return comments


def field_help():
  """[(field, default value, comment)] for every field of the default config, in
  file order, with the inline comments of configs/default.py; a backbone's group
  (config.gru, config.transformer) is listed field by field ('gru.embed_dim') with
  the comments of its `config_defaults` (monoloc_jax/backbones/<name>.py)."""
  import inspect  # pylint: disable=g-import-not-at-top
  from monoloc_jax import backbones  # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default  # pylint: disable=g-import-not-at-top
  config = default.get_config()
  comments = _comments((_config_dir() / 'default.py').read_text(encoding='utf-8'))
  order = list(comments) + [k for k in config.keys() if k not in comments]
  groups = [k for k in order if k in backbones.BACKBONES]       # listed after 'backbone'
  order = [k for k in order if k not in groups]
  order[order.index('backbone') + 1:order.index('backbone') + 1] = groups
  out = []
  for k in order:
    if k not in config:
      continue
    if k in backbones.BACKBONES:
      group = _comments(inspect.getsource(backbones.BACKBONES[k].defaults))
      fields = [f for f in group if f in config[k]] + [f for f in config[k] if f not in group]
      out += [(f'{k}.{f}', config[k][f], group.get(f, '')) for f in fields]
    else:
      out.append((k, config[k], comments.get(k, '')))
  return out


def resolve_argv(argv: Sequence[str]) -> List[str]:
  """argv with a named --config (`--config=quick`, or the README's path run from
  another directory) replaced by the package's file (`resolve`); an unknown name
  raises a MonolocError listing the named configs."""
  out = list(argv)
  for i, arg in enumerate(out):
    if arg.startswith('--config='):
      value, at = arg[len('--config='):], i
    elif arg == '--config' and i + 1 < len(out):
      value, at = out[i + 1], i + 1
    else:
      continue
    resolved = resolve(value)
    out[at] = f'--config={resolved}' if at == i else resolved
  return out
