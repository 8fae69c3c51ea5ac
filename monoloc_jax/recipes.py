"""The training procedure, in one place: its recipes and the rules they configure.

A recipe is data, {config field: value}, applied on top of any config
(`apply`). Two recipes set the same fields, side by side:

* `library`: this library's own procedure, and the source of those fields'
  defaults (`configs/default.py` takes them from here): length-bucketed
  batches, greedy dev accuracy, ties within 0.1 point count as improvement, the
  lr halves after `lr_patience` epochs without one.
* `authors_code`: how the authors' PyTorch code trains
  (JRC1995/MonotonicLocationAttention at 234f5b5, `train.py`,
  `agents/seq2seq_agent.py`, `collaters/seq2seq_collater.py`, the task configs),
  choice by choice; each value cites where their code makes it.

The launcher's `--config=authors_code` is `configs/default.py` with the
`authors_code` recipe; the reproduction grid's `.authors` tag applies it to a
unit, and its other procedure tags are views of these recipes (`subset`,
`PAPER_EPOCHS`, `TRANSFORMER_GRID`). Every field also works on its own (e.g.
`--config.plateau_rule=...`).

The rules the recipes configure are here too, as host-side numpy on the
per-seed state they act on (`Tracker`, checkpointed with the run):

* improvement (`improvement`): dev >= best - improvement_tolerance;
* stopping (`early_stop`, `perfect_dev_stop`): early_stop_patience epochs without
  improvement, or perfect_dev_patience epochs in a row at 100% dev accuracy;
* the learning rate (`PLATEAU_RULES`, config.plateau_rule): `library_plateau`
  or torch's `reduce_lr_on_plateau`.

This module sits low: it imports only `errors`, numpy and ml_collections.
"""

import dataclasses
import types
from typing import Any, Callable, Dict, Mapping, Optional

import ml_collections
import numpy as np

from monoloc_jax import config_paths
from monoloc_jax import errors

__all__ = ['AUTHORS_CODE', 'FIELD_HELP', 'LIBRARY', 'PAPER_EPOCHS', 'PLATEAU_RULES', 'RECIPES',
           'TRANSFORMER_GRID', 'CHOMSKY_GRID', 'Tracker', 'apply', 'early_stop', 'improvement',
           'library_plateau', 'perfect_dev_stop', 'reduce_lr_on_plateau', 'subset']

# ---------------------------------------------------------------------------
# The recipes.
# ---------------------------------------------------------------------------
LIBRARY: Mapping[str, Any] = types.MappingProxyType({
    # Batching: batches grouped by target length (input_pipeline.train_batches).
    'bucket_batches': True,
    # Budget and stopping (App. E): at most 100 epochs; a seed stops after 50 epochs
    # in a row without improvement; no stop at 100% dev accuracy.
    'max_epochs': 100,
    'early_stop_patience': 50,
    'perfect_dev_patience': 0,
    # Improvement: dev accuracy within 0.1 point of the best counts (the best
    # checkpoint moves to the later of tied epochs).
    'improvement_tolerance': 0.001,
    # The lr: halved after 4 epochs without improvement (the improvement rule above;
    # `library_plateau`); plateau_threshold is read by 'reduce_lr_on_plateau' only.
    'plateau_rule': 'library',
    'plateau_threshold': 1e-4,
    'lr_factor': 0.5,
    'lr_patience': 4,
    # Optimiser (App. E): AdamW(lr 1e-3, no weight decay) after a global-norm clip of
    # 5, batches of 32.
    'learning_rate': 1e-3,
    'weight_decay': 0.0,
    'grad_clip': 5.0,
    'batch_size': 32,
    # Dev accuracy: greedy decoding, as the test splits are scored.
    'dev_metric': 'greedy',
    # Data: no task's sources end in <eos>.
    'source_eos_tasks': '',
    # Initialisation (models.INIT_SCHEMES), a sigma bias, and Eq. 9's normaliser over
    # the real (unpadded) positions only.
    'init_scheme': 'library',
    'sigma_bias': True,
    'location_normaliser': 'padding_free',
})

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
    # after clip_grad_norm_(5): the library's values already.
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

# What each procedure field means, for the launcher's --help (`launcher.field_help`);
# the values and the reasons for them are the recipes' above.
FIELD_HELP: Mapping[str, str] = types.MappingProxyType({
    'bucket_batches': 'group training batches by target length (False: random batches, '
                      'as the authors)',
    'max_epochs': 'at most this many epochs',
    'early_stop_patience': 'stop a seed after this many epochs without dev improvement',
    'perfect_dev_patience': 'stop a seed once its dev accuracy has been 100% for N epochs '
                            '(0 = off)',
    'improvement_tolerance': 'dev accuracy within this of the best counts as improvement',
    'plateau_rule': "'library' or 'reduce_lr_on_plateau': torch's ReduceLROnPlateau, "
                    'as the authors',
    'plateau_threshold': 'reduce_lr_on_plateau only: relative gain that counts as better',
    'lr_factor': 'lr plateau: multiply the lr by this ...',
    'lr_patience': '... after this many epochs without dev improvement',
    'learning_rate': 'AdamW learning rate',
    'weight_decay': 'AdamW weight decay',
    'grad_clip': 'global gradient-norm clip',
    'batch_size': 'training batch size (per seed)',
    'dev_metric': "'greedy' or 'teacher_forced' (the authors' code's)",
    'source_eos_tasks': "comma list of tasks whose sources end in <eos> (authors: 'dedupe')",
    'init_scheme': "parameter init: 'library' or 'authors_code' (the authors' torch inits)",
    'sigma_bias': "sigma read-out has a bias (False: as the authors' code)",
    'location_normaliser': "Eq. 9: 'padding_free' or 'authors_code' (sum + S*1e-20)",
})

# The paper's epoch budget as App. E states it ("100 epochs, patience 50", no stop at
# 100% dev accuracy), under this library's stopping rule: a seed stops after 50 epochs
# without improvement. The authors' code stops one epoch later (51, AUTHORS_CODE above);
# the grid's `paper_epochs` units (results/table2_explain, results/table3_explain) ran
# with this 50, so it stays the paper's number, not the authors' code's.
PAPER_EPOCHS: Mapping[str, Any] = types.MappingProxyType({
    'max_epochs': AUTHORS_CODE['max_epochs'],
    'early_stop_patience': 50,
    'perfect_dev_patience': AUTHORS_CODE['perfect_dev_patience'],
})

# Beyond the paper: the Transformer backbone (monoloc_jax/transformer.py) at the GRU's
# parameter count (1 encoder + 1 decoder layer, 4 heads, width hidden_dim = 128, MLP 128,
# sinusoidal positions: 250,643 parameters with OneStepAttn on ReCopy against the GRU's
# 249,040; experiments/speed/backbone_speed.py finds this size), so that the grid
# compares the two backbones at equal size (the reproduction grid's `transformer` tag).
# warmup_steps 100: tests/transformer_test.py found the Transformer needs an lr warmup
# to start learning (50 steps there, at 3e-3 and batch 4; without it about 1 seed in 3
# never learns). Here the lr is 1e-3 and batches are 32, and the digit tasks' 10,000
# training samples make 313 steps an epoch: 100 steps is a third of the first epoch,
# so the first dev evaluation already sees the full lr. A pilot on this CPU (Copy,
# OneStepAttn, seed 0, 3,000 training samples, 5 epochs, the default 2 + 2 layers):
# 100% dev (200 samples) from epoch 2, 100% at lengths 30 and 100 (200 samples each).
# dropout 0.1, a Transformer's usual rate, not the GRU protocol's 0.5: at 0.5 the
# repeat-task runs learned a network that works only with dropout on (Inv ReCopy /
# MonoAttn, 512 test_iid inputs: 99.8% with dropout on, 39.5% off, which is how every
# evaluation runs); grid `transformer_dropout05` keeps those seed-0 units
# (results/NOTES.md, "The Transformer grid").
# test_iid as well: whether a failing unit fit the training lengths at all.
TRANSFORMER_GRID: Mapping[str, Any] = types.MappingProxyType({
    'backbone': 'transformer', 'warmup_steps': 100, 'transformer.layers': 1,
    'transformer.heads': 4, 'transformer.mlp_dim': 128, 'dropout': 0.1,
    'test_splits': 'test_iid,paper',
})


# The Chomsky-hierarchy grid's budget (beyond the paper; experiments/grid.py `chomsky`), on
# top of the grid protocol (experiments/configs/reproduce.py: library procedure, 3 epochs
# at 100% dev stop a seed). The suite trains 1,000,000 steps of batch 128 (1.28e8
# sequences) per model; a 2-core CPU affords about a thousandth: 10 epochs of the task's
# 10,000 training inputs (1e5 sequences, ~3,100 updates of 32), early stopping after 5
# epochs without dev improvement. Scored on test_iid (does it fit lengths 1-40?) and
# test_ood (41-500), then range-evaluated over 41-500 with 16 inputs per length (the
# suite's score is the mean per-token accuracy over those lengths).
CHOMSKY_GRID: Mapping[str, Any] = types.MappingProxyType({
    'max_epochs': 10, 'early_stop_patience': 5, 'test_splits': 'test_iid,test_ood',
    'range_lengths': '41:500', 'range_samples': 16,
})


def subset(name: str, *fields: str) -> Dict[str, Any]:
  """{field: value} of recipe `name` for `fields` only: one choice of a procedure
  taken on its own (one-line errors for unknown recipes and fields)."""
  if name not in RECIPES:
    raise errors.unknown_name('recipe', name, RECIPES)
  for field in fields:
    if field not in RECIPES[name]:
      raise errors.unknown_name(f'{name} recipe field', field, RECIPES[name])
  return {field: RECIPES[name][field] for field in fields}


def apply(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
  """A copy of `config` with recipe `name`'s values (one-line error for unknown names)."""
  if name not in RECIPES:
    raise errors.unknown_name('recipe', name, RECIPES)
  return config_paths.overridden(ml_collections.ConfigDict(config.to_dict()), RECIPES[name])


# ---------------------------------------------------------------------------
# The rules, on the host: numpy over a leading seed axis [N].
# ---------------------------------------------------------------------------
def improvement(dev_acc: np.ndarray, best_dev: np.ndarray, tolerance: float) -> np.ndarray:
  """The improvement rule: dev_acc >= best_dev - tolerance ([N] bool; ties count)."""
  return dev_acc >= best_dev - tolerance


def early_stop(since_best: np.ndarray, patience: int) -> np.ndarray:
  """Stop once `patience` epochs in a row went without improvement ([N] bool)."""
  return since_best >= patience


def perfect_dev_stop(perfect: np.ndarray, patience: int) -> np.ndarray:
  """Stop once dev accuracy has been 100% for `patience` epochs in a row; 0 = off."""
  return perfect >= patience if patience else np.zeros(perfect.shape, bool)


@dataclasses.dataclass
class Tracker:
  """Host-side per-seed schedule and early-stopping state (the paper's App. E)."""
  lr: np.ndarray            # [N] current learning rate
  best_dev: np.ndarray      # [N] best dev accuracy so far (fraction)
  best_epoch: np.ndarray    # [N] epoch of the best checkpoint (-1 = none)
  since_best: np.ndarray    # [N] epochs without improvement
  plateau: np.ndarray       # [N] bad epochs of the lr plateau rule since its last lr change
  stopped: np.ndarray       # [N] early-stopped
  perfect: np.ndarray       # [N] consecutive epochs at 100% dev accuracy
  epoch: int = 0            # epochs completed
  # [N] the 'reduce_lr_on_plateau' rule's own best dev score (None under other rules,
  # and then not in the checkpoint, so workdirs of the 'library' rule keep their layout).
  plateau_best: Optional[np.ndarray] = None

  @classmethod
  def create(cls, n: int, lr: float, plateau_rule: str = 'library') -> 'Tracker':
    if plateau_rule not in PLATEAU_RULES:
      raise errors.unknown_name('plateau_rule', plateau_rule, PLATEAU_RULES)
    return cls(np.full(n, lr, np.float32), np.full(n, -1.0), np.full(n, -1, np.int32),
               np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, bool),
               np.zeros(n, np.int32),
               plateau_best=(np.full(n, -np.inf) if plateau_rule == 'reduce_lr_on_plateau'
                             else None))

  def to_tree(self) -> Dict[str, np.ndarray]:
    tree = {k: np.asarray(v) for k, v in dataclasses.asdict(self).items() if v is not None}
    tree['epoch'] = np.asarray(self.epoch, np.int32)
    return tree

  @classmethod
  def from_tree(cls, tree: Dict[str, Any]) -> 'Tracker':
    kw = {k: np.asarray(v) for k, v in tree.items()}
    kw['epoch'] = int(kw['epoch'])
    return cls(**kw)

  def update(self, dev_acc: np.ndarray, config) -> np.ndarray:
    """Records one epoch's dev accuracy; returns which seeds improved.

    Improvement: `improvement` (the best checkpoint moves to the later of tied
    epochs). The lr follows `config.plateau_rule` (`PLATEAU_RULES`). A seed stops
    by `early_stop` or `perfect_dev_stop`.
    """
    active = ~self.stopped
    improved = active & improvement(dev_acc, self.best_dev, config.improvement_tolerance)
    self.best_dev = np.where(improved, np.maximum(self.best_dev, dev_acc), self.best_dev)
    self.best_epoch = np.where(improved, self.epoch, self.best_epoch)
    self.since_best = np.where(improved, 0, self.since_best + active)
    PLATEAU_RULES[config.plateau_rule](self, dev_acc, improved, active, config)
    self.perfect = np.where(active & (dev_acc >= 1.0), self.perfect + 1, 0).astype(np.int32)
    self.stopped = (self.stopped | early_stop(self.since_best, config.early_stop_patience)
                    | perfect_dev_stop(self.perfect, config.perfect_dev_patience))
    self.epoch += 1
    return improved


def library_plateau(tracker: Tracker, dev_acc: np.ndarray, improved: np.ndarray,
                    active: np.ndarray, config) -> None:
  """The library's lr plateau: lr <- lr * lr_factor once a seed has gone `lr_patience`
  epochs without improvement (the improvement rule: ties count); the count then
  restarts."""
  del dev_acc
  tracker.plateau = np.where(improved, 0, tracker.plateau + active)
  halve = active & (tracker.plateau >= config.lr_patience)
  tracker.lr = np.where(halve, tracker.lr * config.lr_factor, tracker.lr).astype(np.float32)
  tracker.plateau = np.where(halve, 0, tracker.plateau)


def reduce_lr_on_plateau(tracker: Tracker, dev_acc: np.ndarray, improved: np.ndarray,
                         active: np.ndarray, config) -> None:
  """torch.optim.lr_scheduler.ReduceLROnPlateau(mode='max', factor=lr_factor,
  patience=lr_patience, threshold=plateau_threshold, threshold_mode='rel', cooldown=0,
  eps=1e-8), stepped with the dev score after every epoch but the first, as the
  authors' train.py does.

  better_t = dev_t > best * (1 + threshold); best <- dev_t when better, and
  bad <- 0 if better else bad + 1; when bad > patience:
  lr <- lr * factor (unless that changes lr by at most 1e-8) and bad <- 0.
  Its best is its own: ties are bad epochs here even where they count as improvement.
  """
  del improved
  step = active & (tracker.epoch > 0)
  better = step & (dev_acc > tracker.plateau_best * (1.0 + config.plateau_threshold))
  tracker.plateau_best = np.where(better, dev_acc, tracker.plateau_best)
  tracker.plateau = np.where(better, 0, tracker.plateau + step).astype(np.int32)
  reduce = step & (tracker.plateau > config.lr_patience)
  new_lr = (tracker.lr * config.lr_factor).astype(np.float32)
  change = reduce & (tracker.lr - new_lr > 1e-8)
  tracker.lr = np.where(change, new_lr, tracker.lr).astype(np.float32)
  tracker.plateau = np.where(reduce, 0, tracker.plateau).astype(np.int32)


# config.plateau_rule -> how the learning rate follows dev accuracy.
PLATEAU_RULES: Mapping[str, Callable[..., None]] = types.MappingProxyType({
    'library': library_plateau,
    'reduce_lr_on_plateau': reduce_lr_on_plateau,
})
