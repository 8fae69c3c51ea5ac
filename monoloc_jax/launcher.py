"""What every console script shares: flag parsing, --config, --help, one-line errors.

  launcher.run(main, __name__)                                  # plain flags
  launcher.run(main, __name__, config_help='...')               # and --config / --config.FIELD
  launcher.run(main, __name__, config_help='...', usage='...')  # and a full --help (monoloc-train)

Every failure of a command line ends as one line on stderr (`error: ...`) and exit
code 2: a bad flag (`parse_flags`), an unknown --config name (`resolve`) or field
(`define_config_flag`), a config file that does not load, and a MonolocError or an
OSError raised by `main` (`errors.one_line_errors`).
"""

import ast
import inspect
import pathlib
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from absl import app
from absl import flags
from ml_collections import config_flags

from monoloc_jax import backbones
from monoloc_jax import errors
from monoloc_jax import interrupts
from monoloc_jax import recipes
from monoloc_jax.configs import default

HELP_FLAGS = ('-h', '--help', '--helpshort', '--helpfull', '-?')
_CONFIG_DIR = pathlib.Path(default.__file__).resolve().parent


# ---------------------------------------------------------------------------
# Named configs (--config=NAME) and field help.
# ---------------------------------------------------------------------------
def named_configs() -> Dict[str, pathlib.Path]:
  """The package's config files, the one registry of `--config=NAME`: {name: path}.

  Every module in monoloc_jax/configs/ except its __init__ is a named config
  (`default`, `quick`, `cfq`, ...); adding a file adds a name.
  """
  return {p.stem: p for p in sorted(_CONFIG_DIR.glob('*.py')) if p.stem != '__init__'}


def summary(path) -> str:
  """The first line of a config file's module docstring."""
  doc = ast.get_docstring(ast.parse(pathlib.Path(path).read_text(encoding='utf-8'))) or ''
  return doc.strip().splitlines()[0] if doc.strip() else ''


def resolve(value: str) -> str:
  """The file of a `--config` value: an existing path as it is; a name such as
  'quick' (or 'quick.py', or a path ending in monoloc_jax/configs/quick.py that does
  not exist here, e.g. the README's path run from another directory) -> the
  package's file. Raises MonolocError naming the valid names otherwise."""
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


def _comments(source: str) -> Dict[str, str]:
  """{field: its inline comment} of the `c.FIELD = value  # comment` lines of `source`."""
  comments = {}
  for line in source.splitlines():
    m = re.match(r'\s*c\.(\w+)\s*=\s*[^#]*?(?:#\s*(.*))?$', line)
    if m:
      comments[m.group(1)] = (m.group(2) or '').strip()
  return comments


def field_help() -> List[Tuple[str, Any, str]]:
  """[(field, default value, comment)] for every field of the default config, in
  file order, with the inline comments of configs/default.py; the fields it takes
  from the `library` recipe with `recipes.FIELD_HELP`; a backbone's group
  (config.gru, config.transformer) field by field ('gru.embed_dim'), after
  'backbone', with the comments of its `config_defaults`
  (monoloc_jax/backbones/<name>.py)."""
  config = default.get_config()
  comments: Dict[str, str] = {}
  for line in pathlib.Path(default.__file__).read_text(encoding='utf-8').splitlines():
    if re.match(r'\s*c\.update\(recipes\.LIBRARY\)', line):
      comments.update(recipes.FIELD_HELP)
    else:
      comments.update(_comments(line))
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


# ---------------------------------------------------------------------------
# The --config flag.
# ---------------------------------------------------------------------------
def _unknown_config_fields(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
  """([the --config.FIELD names in argv that the default config lacks], [its fields])."""
  known = {field for field, _, _ in field_help()}
  fields = [a.split('=')[0][len('--config.'):] for a in argv[1:] if a.startswith('--config.')]
  return [f for f in fields if f not in known], sorted(known)


def define_config_flag(argv: Sequence[str], help_text: str) -> None:
  """Defines absl's --config flag (default: configs/default.py) and its
  --config.FIELD overrides, which ml_collections reads from argv as the flag is
  defined; a bad override ends as one line on stderr and exit code 2."""
  try:
    config_flags.DEFINE_config_file('config', str(_CONFIG_DIR / 'default.py'), help_text,
                                    lock_config=True)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    unknown, known = _unknown_config_fields(argv)
    _exit(f"unknown config field {unknown[0]!r}; valid fields: {', '.join(known)}"
          if unknown else f'bad --config override: {str(e).strip()[:200]}')


def config_file() -> str:
  """The path of the --config file (after `resolve`)."""
  return config_flags.get_config_filename(flags.FLAGS['config'])


def given_config() -> Dict[str, Any]:
  """The --config file's config with the command line's --config.FIELD overrides."""
  return flags.FLAGS.config.to_dict()


# ---------------------------------------------------------------------------
# Parsing, --help and running.
# ---------------------------------------------------------------------------
def _exit(message: str) -> None:
  print(f'error: {message}', file=sys.stderr)
  sys.exit(2)


def parse_flags(argv: Sequence[str]) -> List[str]:
  """absl's flag parsing (and the loading of the --config file, where the script has
  one), with every error as one line and exit code 2."""
  try:
    parsed = flags.FLAGS(argv)
    if 'config' in flags.FLAGS:
      flags.FLAGS.config.to_dict()        # loads the --config file (lazily, in ml_collections)
    return parsed
  except flags.Error as e:
    message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
  except OSError as e:
    message = f'cannot load the --config file {config_file()!r} ({type(e).__name__})'
  except Exception as e:  # pylint: disable=broad-except
    # Anything else raised while reading a user's config file.
    message = f'bad --config: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}'
  _exit(message)


def list_flags_in_help(module_name: str) -> None:
  """Makes absl's `--help` of a console script list the flags that `module_name` defines.

  absl's --help shows the key flags of the module named by sys.argv[0]; for a console
  script that is the generated wrapper, which defines none ("Try --helpfull").
  """
  for flag in flags.FLAGS.get_flags_for_module(module_name):
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  if 'config' in flags.FLAGS:
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS['config'])


def help_text(module_name: str, usage: str) -> str:
  """A full --help: the usage, the module's docstring, its flags, the named configs
  and every --config.FIELD with its default (and the inline comment of
  configs/default.py)."""
  module = sys.modules[module_name]
  lines = [f'usage: {usage}', '', (module.__doc__ or '').strip(), '', 'flags:']
  for flag in sorted(flags.FLAGS.get_flags_for_module(module), key=lambda f: f.name):
    default_value = '' if flag.default in (None, []) else f' (default: {flag.default})'
    lines.append(f'  --{flag.name}: {flag.help}{default_value}')
  lines += ['  --config: a named config or a config file (default: default)', '',
            'named configs (--config=NAME):']
  lines += [f'  {name:<10} {summary(path)}' for name, path in named_configs().items()]
  lines += ['', 'config fields (--config.FIELD=VALUE; defaults of configs/default.py):']
  lines += [f'  --config.{field}={value!r}' + (f'  # {comment}' if comment else '')
            for field, value, comment in field_help()]
  lines += ['', 'environment: MONOLOC_CACHE_DIR (generated task data, default '
            '~/.cache/monoloc_jax), MONOLOC_XLA_CACHE (compiled programs, default '
            "~/.cache/monoloc_jax/xla; '' turns it off)."]
  return '\n'.join(lines)


def run(main: Callable[[List[str]], None], module_name: str, *,
        config_help: Optional[str] = None, usage: Optional[str] = None,
        resumable: bool = False) -> None:
  """Runs `main(argv)` as a console script.

  config_help: define --config (a named config or a file; `resolve`) and its
  --config.FIELD overrides, with this help line. usage: answer --help with
  `help_text` (the config fields too) instead of absl's list of flags. resumable:
  Ctrl-C ends the process at once with one line and exit code 130
  (`interrupts.stop_on_interrupt`; a rerun resumes).
  """
  if resumable:
    interrupts.stop_on_interrupt()
  if usage is not None and any(arg in HELP_FLAGS for arg in sys.argv[1:]):
    print(help_text(module_name, usage))
    sys.exit(0)
  if config_help is not None:
    try:
      sys.argv = resolve_argv(sys.argv)
    except errors.MonolocError as e:
      _exit(str(e))
    define_config_flag(sys.argv, config_help)
  list_flags_in_help(module_name)
  app.run(errors.one_line_errors(main), flags_parser=parse_flags)
