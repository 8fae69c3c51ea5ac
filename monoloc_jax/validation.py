"""`validate(config)`: every field a user can set, checked in one place.

Each check raises a one-line `MonolocError` that names the field and the valid
choices. The shared fields are checked here; each backbone checks its own group
(`backbones.validate`), the procedure's rules name their choices in `recipes`, and
the task's and variant's registries theirs.
"""

import math

from monoloc_jax import backbones
from monoloc_jax import errors
from monoloc_jax import input_pipeline
from monoloc_jax import multiseed
from monoloc_jax import precision
from monoloc_jax import recipes
from monoloc_jax import tasks
from monoloc_jax import variants


def validate(config, task=None, variant=None) -> None:
  """Checks every field a user can set; raises a one-line MonolocError.

  task / variant: objects given to the trainer in place of the registry's
  `config.task` / `config.variant` (their names are then not looked up).
  """
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
      ('warmup_steps', config.warmup_steps >= 0, 'an integer >= 0 (0 = no warmup)'),
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
  precision.of(config)                      # unknown matmul_precision
  if config.train_widths not in input_pipeline.TRAIN_WIDTHS:
    raise errors.MonolocError(f'bad value for config.train_widths: {config.train_widths!r}; '
                              f"valid: {', '.join(input_pipeline.TRAIN_WIDTHS)}")
  if config.seed_strategy not in multiseed.STRATEGIES:
    raise errors.unknown_name('seed_strategy', config.seed_strategy, multiseed.STRATEGIES)
  if config.plateau_rule not in recipes.PLATEAU_RULES:
    raise errors.unknown_name('plateau_rule', config.plateau_rule, recipes.PLATEAU_RULES)
  threshold = config.plateau_threshold
  if not (math.isfinite(threshold) and threshold >= 0):
    raise errors.MonolocError(f'bad value for config.plateau_threshold: {threshold!r}; '
                              'it must be a number >= 0')
  for name in input_pipeline.source_eos_tasks(config):
    if name not in tasks.TASKS and name != getattr(task, 'name', None):
      raise errors.MonolocError(f'unknown task {name!r} in config.source_eos_tasks; valid '
                                f"tasks: {', '.join(sorted(tasks.TASKS))} (comma list, '' = none)")
  input_pipeline.resolve_test_splits(config, task)

