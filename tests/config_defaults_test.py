"""Each default is written once: no `config.get('<field>', <default>)` restates one.

configs/default.py (with the groups and recipe it builds on) is the one definition of every
field's default, and `rundir.load_config` fills the fields an older config.json lacks, so a
`config.get(field, literal)` beside it is a second definition that can drift. This test walks
every module of the package and fails on such a call whose literal equals the default.
"""

import ast
import pathlib
from typing import Iterator, List, Tuple

from monoloc_jax.configs import default

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'monoloc_jax'


def _is_config(node: ast.expr) -> bool:
  """`config`, `cfg`, `self.config`, `run_config`, ...: a name that holds a run config."""
  name = node.id if isinstance(node, ast.Name) else (
      node.attr if isinstance(node, ast.Attribute) else '')
  return name in ('config', 'cfg') or name.endswith('_config')


def _defaults() -> dict:
  """{field: default} of the default config, nested groups as 'group.field' too."""
  out = {}

  def walk(prefix: str, d: dict) -> None:
    for k, v in d.items():
      if isinstance(v, dict):
        walk(f'{prefix}{k}.', v)
      out[f'{prefix}{k}'] = v
  walk('', default.get_config().to_dict())
  return out


def restated_defaults(source: str, defaults: dict) -> Iterator[Tuple[int, str]]:
  """(line, field) of each `config.get('field', literal)` whose literal is the default."""
  for node in ast.walk(ast.parse(source)):
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == 'get' and _is_config(node.func.value)
            and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)):
      continue
    field = node.args[0].value
    if field not in defaults:
      continue
    fallback = node.args[1]
    if isinstance(fallback, (ast.Name, ast.Attribute)):
      # A named constant (e.g. attention.PADDING_FREE.name) states a default a second time.
      yield node.lineno, field
      continue
    try:
      literal = ast.literal_eval(fallback)
    except ValueError:
      continue                # computed (e.g. from another field): not a restated default
    if literal == defaults[field]:
      yield node.lineno, field


def test_detector_finds_a_restated_default():
  defaults = {'dropout': 0.5, 'seed_strategy': 'auto', 'transformer.layers': 2}
  source = ('a = config.get("dropout", 0.5)\n'
            'b = self.config.get("seed_strategy", "auto")\n'
            'c = config.get("transformer.layers", 2)\n'
            'd = config.get("dropout", attention.RATE)\n'
            'h = config.get("dropout", config.get("rate"))\n'   # computed from another field
            'e = config.get("dropout")\n'                  # no default restated
            'f = other.get("dropout", 0.5)\n'              # not a config
            'g = config.get("not_a_field", 1)\n')
  assert [f for _, f in restated_defaults(source, defaults)] == [
      'dropout', 'seed_strategy', 'transformer.layers', 'dropout']


def test_no_config_get_restates_a_default():
  defaults = _defaults()
  found: List[str] = []
  for path in sorted(PACKAGE.rglob('*.py')):
    for line, field in restated_defaults(path.read_text(encoding='utf-8'), defaults):
      found.append(f'{path.relative_to(PACKAGE.parent)}:{line}: config.get({field!r}, ...)')
  assert not found, ('these restate a default of configs/default.py (use config.<field>; '
                     'rundir.load_config fills fields an old config lacks):\n' + '\n'.join(found))
