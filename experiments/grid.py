"""The reproduction grids: which (task, variant) runs make up each of the paper's tables.

Shared by `reproduce.py` (which trains the units) and `report.py` (which
tabulates their results). No flags, no side effects.
"""

import dataclasses
import pathlib
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from monoloc_jax import errors
from monoloc_jax import recipes
from monoloc_jax import tasks
from monoloc_jax.backbones import positions
from monoloc_jax.configs import cfq
from monoloc_jax.tasks import chomsky

TABLE2_TASKS = ('copy', 'reverse_copy', 'lookup', 'reverse_lookup', 'recopy', 'reverse_recopy',
                'inv_recopy', 'inv_reverse_recopy')
TABLE2_VARIANTS = ('content', 'relative', 'locattn', 'bi_relative', 'onestep', 'mono')
TABLE3_VARIANTS = ('content', 'relative', 'mix_locattn', 'bi_relative', 'mix_onestep',
                   'mix_mono')
TABLE4_VARIANTS = ('onestep_minus_step2', 'onestep_minus_step3', 'onestep_minus_sigmoid')
# Beyond the paper: the cross-attention variants run on the Transformer backbone.
TRANSFORMER_VARIANTS = ('content', 'relative', 'onestep', 'mono')
TABLE7_VARIANTS = ('locattn_s', 'rmono', 'bi_rope', 'mix_locattn', 'mix_locattn_s',
                   'mix_locattn_s_pr', 'mix_onestep', 'mix_onestep_pr', 'mix_mono',
                   'mix_mono_pr', 'mix_rmono', 'mix_rmono_pr')
# Beyond the paper II: the Chomsky-hierarchy suite (Delétang et al. 2023) under one
# protocol (recipes.CHOMSKY_GRID): the GRU with OneStepAttn, MonoAttn and content
# attention; the Transformer with content cross-attention under each position scheme; the
# Transformer with OneStepAttn and MonoAttn cross-attention (sinusoidal positions).
CHOMSKY_TASKS = tuple(chomsky.TASKS)
POSITION_SCHEMES = positions.POSITIONS
CHOMSKY_LABELS = (
    'onestep.chomsky', 'mono.chomsky', 'content.chomsky',
    'content.transformer.chomsky',
    *(f'content.transformer.chomsky.pos_{name}' for name in POSITION_SCHEMES
      if name != 'sinusoidal'),
    'onestep.transformer.chomsky', 'mono.transformer.chomsky')
# Grids whose units are range-evaluated after training (reproduce.run_unit): the unit
# JSON gets a 'range' entry over its config's range_lengths.
RANGE_GRIDS = ('chomsky',)
# Config overrides by label suffix: 'mix_onestep.reference_code' runs mix_onestep
# with mix_mode='authors_code'. The procedure's values live in monoloc_jax/recipes.py;
# each procedure tag here is a view of a recipe. Tags are parts of results paths
# (results/<grid>/<task>/<label>/seed<N>.json), which never change: the tag
# 'reference_code' keeps the name mix_mode 'authors_code' had when its units ran.
OPTION_TAGS: Mapping[str, Mapping[str, Any]] = {
    'reference_code': {'mix_mode': 'authors_code'},
    # Single training choices of the authors' code, for explaining disagreements.
    'tf_dev': recipes.subset('authors_code', 'dev_metric'),       # teacher-forced dev
    'random_batches': recipes.subset('authors_code', 'bucket_batches'),  # random batches
    'gate0': {'mono_gate_init': 0.0},               # a trainable MonoAttn gate, g = 0.5
    # The paper's epoch budget: 100 epochs, patience 50, no stop at 100% dev.
    'paper_epochs': dict(recipes.PAPER_EPOCHS),
    # The authors' whole training procedure (monoloc_jax/recipes.py): random batches,
    # 100 epochs, their improvement, plateau and stopping rules, teacher-forced dev,
    # DeDupe's source <eos>, their initialisation and Eq. 9 normaliser.
    'authors': dict(recipes.AUTHORS_CODE),
    # Beyond the paper: the Transformer backbone at the GRU's parameter count
    # (recipes.TRANSFORMER_GRID says why each value).
    'transformer': dict(recipes.TRANSFORMER_GRID),
    # The GRU protocol's dropout on the Transformer (grid `transformer_dropout05`).
    'dropout05': {'dropout': 0.5},
    # The Chomsky-hierarchy grid's budget and range (recipes.CHOMSKY_GRID says why).
    'chomsky': dict(recipes.CHOMSKY_GRID),
    # The Transformer's self-attention positions, one tag per scheme but the default
    # (sinusoidal): 'pos_alibi' sets transformer.positions='alibi'.
    **{f'pos_{name}': {'transformer.positions': name}
       for name in POSITION_SCHEMES if name != 'sinusoidal'},
}
# The investigation of ReCopy / MonoAttn (0 here, 100 in the paper): MonoAttn
# under the authors' code's dev metric, its random batches, both, and with a
# trainable gate; RMonoAttn (what MonoAttn trains like with the default gate)
# and OneStepAttn beside them.
RECOPY_MONO_LABELS = ('mono.tf_dev', 'mono.random_batches', 'mono.tf_dev.random_batches',
                      'mono.gate0', 'rmono')
# Reruns of the Table 2 runs whose cells still disagreed with the paper after seeds
# 0 and 1 (the report's "Table 2 disagreements"; ReCopy / MonoAttn has its own grid
# above): each under the authors' code's random batches; MonoAttn also with a
# trainable gate, the two changes that solved ReCopy / MonoAttn for every seed; and
# the Lookup runs, whose dev accuracy peaks early, under the paper's epoch budget.
TABLE2_EXPLAIN_RUNS: Tuple[Tuple[str, str], ...] = (
    ('lookup', 'mono.random_batches'), ('lookup', 'mono.gate0'),
    ('lookup', 'mono.paper_epochs'),
    ('reverse_lookup', 'bi_relative.random_batches'),
    ('reverse_lookup', 'bi_relative.paper_epochs'),
    ('reverse_lookup', 'onestep.random_batches'),
    ('reverse_lookup', 'onestep.paper_epochs'),
    ('reverse_recopy', 'mono.random_batches'), ('reverse_recopy', 'mono.gate0'),
    ('inv_recopy', 'locattn.random_batches'),
)
# Reruns of the SCAN rows of Table 3 whose means fell outside the paper's standard
# deviation after seeds 0 and 1 (Mix OneStepAttn, in both forms): the paper's
# epoch budget alone, and every training choice of the authors' code at once
# (its Mix form, teacher-forced dev metric, random batches, 100 epochs).
TABLE3_EXPLAIN_RUNS: Tuple[Tuple[str, str], ...] = (
    ('scan_length', 'mix_onestep.paper_epochs'),
    ('scan_length', 'mix_onestep.reference_code.tf_dev.random_batches.paper_epochs'),
)
# Settings of the CFQ size applied to CFQ units: the one place is monoloc_jax/configs/cfq.py.
CFQ_SIZE = cfq.SIZE


@dataclasses.dataclass(frozen=True)
class Unit:
  """One seed of one (task, variant) run of one grid."""
  grid: str
  task: str
  label: str          # variant slug, optionally '.<tag>' of OPTION_TAGS
  seed: int

  @property
  def variant(self) -> str:
    return self.label.split('.')[0]

  @property
  def overrides(self) -> Dict[str, Any]:
    tags = self.label.split('.')[1:]
    out: Dict[str, Any] = {}
    for tag in tags:
      out.update(OPTION_TAGS[tag])
    if self.task == 'cfq_length':
      out.update(CFQ_SIZE)
    return out

  def path(self, root: pathlib.Path, suffix: str = '') -> pathlib.Path:
    return root / self.grid / self.task / self.label / f'seed{self.seed}{suffix}'


def _tagged(labels: Sequence[str], tag: str) -> Tuple[str, ...]:
  return tuple(f'{label}.{tag}' for label in labels)


def _runs(tasks_: Sequence[str], labels: Sequence[str]) -> List[Tuple[str, str]]:
  return [(t, v) for t in tasks_ for v in labels]


def grid_runs(cfq: bool = False) -> Dict[str, List[Tuple[str, str]]]:
  """Each grid's (task, label) runs, in the order they are run."""
  scan_labels = TABLE3_VARIANTS + ('mix_onestep.reference_code', 'mix_mono.reference_code')
  return {
      'table2': _runs(TABLE2_TASKS, TABLE2_VARIANTS),
      'table3': _runs(('scan_length',) + (('cfq_length',) if cfq else ()), scan_labels),
      'table4': _runs(TABLE2_TASKS, TABLE4_VARIANTS),
      'table6': _runs(('dedupe', 'posretrieve'), TABLE2_VARIANTS),
      'table7': _runs(TABLE2_TASKS, TABLE7_VARIANTS),
      'recopy_mono': _runs(('recopy',), RECOPY_MONO_LABELS),
      'table2_explain': list(TABLE2_EXPLAIN_RUNS),
      'table3_explain': list(TABLE3_EXPLAIN_RUNS),
      # Tables 2, 4 and 6 under the authors' training procedure (Fidelity II).
      'table2_authors': _runs(TABLE2_TASKS, _tagged(TABLE2_VARIANTS, 'authors')),
      'table4_authors': _runs(TABLE2_TASKS, _tagged(TABLE4_VARIANTS, 'authors')),
      'table6_authors': _runs(('dedupe', 'posretrieve'), _tagged(TABLE2_VARIANTS, 'authors')),
      # Beyond the paper: Table 2's tasks on the Transformer backbone.
      'transformer': _runs(TABLE2_TASKS, _tagged(TRANSFORMER_VARIANTS, 'transformer')),
      # The same at the GRU protocol's dropout, 0.5 (seed 0 only: the grid's first form).
      'transformer_dropout05': _runs(TABLE2_TASKS,
                                     _tagged(TRANSFORMER_VARIANTS, 'transformer.dropout05')),
      # Beyond the paper II: the Chomsky-hierarchy suite.
      'chomsky': _runs(CHOMSKY_TASKS, CHOMSKY_LABELS),
  }


GRID_NAMES = tuple(grid_runs())
# Grids beyond the paper: named one by one on the command line, not part of 'all', and
# not part of a complete reproduction (`expected_units`); REPRODUCTION.md shows each in
# its own section once it has results.
BEYOND_PAPER_GRIDS = ('transformer', 'transformer_dropout05', 'chomsky')
PAPER_GRID_NAMES = tuple(g for g in GRID_NAMES if g not in BEYOND_PAPER_GRIDS)


def parse_grids(spec: str) -> List[str]:
  """The grids of a --grid value: a comma list of GRID_NAMES, or 'all' (every grid of
  the paper, PAPER_GRID_NAMES; grids beyond the paper are named one by one)."""
  names = (list(PAPER_GRID_NAMES) if spec == 'all'
           else [g.strip() for g in spec.split(',') if g.strip()])
  for name in names:
    if name not in GRID_NAMES:
      raise errors.MonolocError(f"unknown grid {name!r}; valid grids: {', '.join(GRID_NAMES)}"
                                " (or 'all': every grid of the paper)")
  if not names:
    raise errors.MonolocError('--grid is empty; name one or more of ' + ', '.join(GRID_NAMES))
  return names


def parse_seeds(spec: str) -> List[int]:
  try:
    seeds = [int(s) for s in spec.split(',') if s.strip()]
  except ValueError:
    raise errors.MonolocError(f'bad --seeds {spec!r}; give a comma list of integers >= 0, '
                              'e.g. 0 or 1,2') from None
  if not seeds or any(s < 0 for s in seeds):
    raise errors.MonolocError(f'bad --seeds {spec!r}; give a comma list of integers >= 0')
  return seeds


def units(grids: Sequence[str], seeds: Sequence[int], cfq: bool = False) -> List[Unit]:
  """All units: for each seed, for each grid, for each run."""
  runs = grid_runs(cfq)
  return [Unit(g, t, label, s) for s in seeds for g in grids for t, label in runs[g]]


def select_runs(todo: Sequence[Unit], spec: str) -> List[Unit]:
  """The units of `todo` whose run is named in `spec` ('' keeps all).

  `spec` is a comma list of task/label runs, e.g. 'reverse_lookup/onestep,lookup/mono',
  to add seeds to a few runs of a grid without running the rest of it.
  """
  wanted = [r.strip() for r in spec.split(',') if r.strip()]
  if not wanted:
    return list(todo)
  known = list(dict.fromkeys(f'{u.task}/{u.label}' for u in todo))
  for run in wanted:
    if run not in known:
      raise errors.MonolocError(f'unknown run {run!r} for these grids; valid runs: '
                                + ', '.join(known))
  return [u for u in todo if f'{u.task}/{u.label}' in wanted]


# What a complete reproduction holds: a first pass of seed 0 over every grid of the paper,
# then seeds 1 and 2 for Tables 2, 3, 4 and 6 (both procedures) and the investigation grids.
# (Grids beyond the paper, BEYOND_PAPER_GRIDS, are not part of it.)
SEEDS_1_2_GRIDS = ('table2', 'table3', 'recopy_mono', 'table2_explain', 'table3_explain',
                   # Fidelity II: every Table 2, 4 and 6 run with >= 3 seeds under both
                   # training procedures.
                   'table4', 'table6', 'table2_authors', 'table4_authors', 'table6_authors')


def expected_units(cfq: bool = False) -> List[Unit]:
  """The units of a complete reproduction of the paper (see above)."""
  return units(PAPER_GRID_NAMES, [0], cfq) + units(SEEDS_1_2_GRIDS, [1, 2], cfq)


# The paper's outcome marks, at the lengths the report compares.
SOLVED, FAILED = 90.0, 50.0
# Seeds a run gets beyond 0-2 when its first three disagree (`split_run`).
SPLIT_RUN_SEEDS = (3, 4)


def mark(acc: float) -> str:
  """'solved' (acc ≥ 90), 'failed' (acc ≤ 50) or 'partial': the paper's outcome marks."""
  return 'solved' if acc >= SOLVED else ('failed' if acc <= FAILED else 'partial')


def compared_splits(task: str) -> Tuple[str, ...]:
  """The splits whose marks the report compares with the paper: the two longest lengths
  of the task's paper splits (lengths 30 and 100; Lookup 9 and 11), or its only split."""
  splits = tasks.get(task).paper_splits
  return splits[1:] if len(splits) > 1 else splits


def split_run(task: str, test_results: Sequence[Mapping[str, Mapping[str, float]]]) -> bool:
  """Whether a run's median sits within one seed of flipping: seeds 0-2 (their units'
  `test` dicts, all three) disagree on the mark at some compared split. With three seeds
  a median can flip by one seed exactly then, so such a run gets seeds 3 and 4
  (`reproduce.py --split_runs_only`)."""
  if len(test_results) != 3:
    raise ValueError(f'split_run needs the test results of seeds 0, 1 and 2, got {len(test_results)}')
  return any(len({mark(t[split]['accuracy']) for t in test_results}) > 1
             for split in compared_splits(task))
