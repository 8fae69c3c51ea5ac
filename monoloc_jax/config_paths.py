"""Config fields by path ('transformer.layers': config.transformer.layers) and the flat
names of earlier versions (`LEGACY_FIELDS`): how stored configs (an old workdir's
config.json, a results record's 'protocol') and override dicts (a grid's tags,
configs/cfq.py's SIZE) are read into today's nested config. Imports nothing of the
package, so any layer may use it.
"""

from typing import Any, Dict, Mapping

# The flat field names of earlier versions -> the field's path now (a backbone's group).
LEGACY_FIELDS = {
    'embed_dim': 'gru.embed_dim',
    'value_dim': 'gru.value_dim',
    'num_layers': 'gru.num_layers',
    'decoder_init': 'gru.decoder_init',
    'decoder_backward': 'gru.decoder_backward',
    'transformer_layers': 'transformer.layers',
    'transformer_heads': 'transformer.heads',
    'transformer_mlp_dim': 'transformer.mlp_dim',
    'transformer_positions': 'transformer.positions',
}


def upgrade(stored: Mapping[str, Any]) -> Dict[str, Any]:
  """A stored config (a dict, maybe written by an earlier version) in today's nested
  form: each `LEGACY_FIELDS` name moved into its group ('embed_dim': 64 ->
  'gru': {'embed_dim': 64}), dotted keys ('gru.embed_dim') nested likewise; every
  other field as it is. A field given both ways keeps the nested value."""
  out: Dict[str, Any] = {}
  moved = []
  for key, value in stored.items():
    path = LEGACY_FIELDS.get(key, key)
    if '.' in path:
      moved.append((path, value))
    elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
      out[key].update(value)
    else:
      out[key] = dict(value) if isinstance(value, Mapping) else value
  for path, value in moved:
    group, field = path.split('.', 1)
    if not isinstance(out.get(group), dict):
      out[group] = {}
    out[group].setdefault(field, value)
  return out


def stored_field(stored: Mapping[str, Any], path: str, default: Any = None) -> Any:
  """Field `path` ('hidden_dim', 'transformer.layers') of a stored config or a
  results record's 'protocol', in whichever form it was written (nested, dotted
  or an earlier version's flat name, `LEGACY_FIELDS`); `default` when absent."""
  value: Any = upgrade(stored)
  for part in path.split('.'):
    if not isinstance(value, Mapping) or part not in value:
      return default
    value = value[part]
  return value


def flatten(config: Mapping[str, Any]) -> Dict[str, Any]:
  """{path: value} of a nested config dict: a group's fields as 'group.field'."""
  out: Dict[str, Any] = {}
  for key, value in config.items():
    if isinstance(value, Mapping):
      out.update({f'{key}.{k}': v for k, v in flatten(value).items()})
    else:
      out[key] = value
  return out


def get_field(config, path: str) -> Any:
  """config's field at dotted `path` ('transformer.layers')."""
  for part in path.split('.'):
    config = config[part]
  return config


def overridden(config, overrides: Mapping[str, Any]):
  """config with `overrides` applied: {field: value}, a field named by its path
  ('transformer.layers': 1) or by an earlier version's flat name (`LEGACY_FIELDS`).
  Changes `config` and returns it."""
  config.update(upgrade(overrides))
  return config
