"""Training recipes: a training procedure as one named set of config values.

A recipe is data, {config field: value}, applied on top of any config
(`apply`). Two are defined:

* `library`: this library's own procedure, the defaults of `configs/default.py`
  (length-bucketed batches, greedy dev accuracy, ties within 0.1 point count as
  improvement, the lr halves after `lr_patience` epochs without one).
* `authors_code`: how the authors' PyTorch code trains
  (JRC1995/MonotonicLocationAttention at 234f5b5, `train.py`,
  `agents/seq2seq_agent.py`, `collaters/seq2seq_collater.py`, the task configs),
  choice by choice; each value below cites where their code makes it.

The launcher's `--config=authors_code` is `configs/default.py` with the
`authors_code` recipe; the reproduction grid's `.authors` tag applies it to a
unit. Every field also works on its own (e.g. `--config.plateau_rule=...`).
"""

import types
from typing import Any, Mapping

import ml_collections

from monoloc_jax import errors

__all__ = ['AUTHORS_CODE', 'LIBRARY', 'RECIPES', 'apply']

LIBRARY: Mapping[str, Any] = types.MappingProxyType({})

AUTHORS_CODE: Mapping[str, Any] = types.MappingProxyType({
    # Batching: torch DataLoader(shuffle=True, batch_size=32), each batch padded
    # to its own longest example, the epoch's last batch partial; here random
    # batches padded to their own longest source and target, rounded up to a
    # multiple of 8 (input_pipeline.random_batch_widths; padding carries no loss,
    # and the partial last batch is completed with filler rows that carry none).
    'bucket_batches': False,
    # Budget: `epochs = 100`. Stopping: after every epoch but the first,
    # `impatience += 1`; an improvement resets it; training stops once
    # `impatience > early_stop_patience` (50), i.e. after 51 epochs in a row
    # without improvement. No stop at 100% dev accuracy.
    'max_epochs': 100,
    'early_stop_patience': 51,
    'perfect_dev_patience': 0,
    # Improvement: `dev > best or |dev - best| < 0.001` with dev accuracy in
    # percent, i.e. a strict gain or an exact tie (a dev split of 2,000 moves in
    # steps of 0.05 points). On this library's 0-1 scale: a tolerance of 1e-5.
    'improvement_tolerance': 1e-5,
    # The lr: ReduceLROnPlateau(mode='max', factor=0.5, patience=4,
    # threshold=1e-4 relative), stepped with the dev score after every epoch
    # but the first; ties are bad epochs for it (its own best, not `best` above).
    'plateau_rule': 'reduce_lr_on_plateau',
    'plateau_threshold': 1e-4,
    'lr_factor': 0.5,
    'lr_patience': 4,
    # Optimiser: AdamW(lr=1e-3, weight_decay=0.0), betas (0.9, 0.999), eps 1e-8,
    # after clip_grad_norm_(5): the library's defaults already.
    'learning_rate': 1e-3,
    'weight_decay': 0.0,
    'grad_clip': 5.0,
    'batch_size': 32,
    # Dev accuracy: teacher-forced (`config["generate"] = False` while validating).
    'dev_metric': 'teacher_forced',
    # Data: their DeDupe preprocessing ends every source with a literal <eos>.
    'source_eos_tasks': 'dedupe',
    # Initialisation (torch defaults and their explicit inits), no sigma bias,
    # and Eq. 9's normaliser as their `sum_normalize` computes it.
    'init_scheme': 'authors_code',
    'sigma_bias': False,
    'location_normaliser': 'authors_code',
})

RECIPES: Mapping[str, Mapping[str, Any]] = types.MappingProxyType({
    'library': LIBRARY,
    'authors_code': AUTHORS_CODE,
})


def apply(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
  """A copy of `config` with recipe `name`'s values (one-line error for unknown names)."""
  if name not in RECIPES:
    raise errors.unknown_name('recipe', name, RECIPES)
  out = ml_collections.ConfigDict(config.to_dict())
  for field, value in RECIPES[name].items():
    out[field] = value
  return out
