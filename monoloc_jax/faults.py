"""A test hook that kills the process at a named phase, to prove the workdir survives.

  MONOLOC_KILL_AT=<phase>[:<n>]   send SIGKILL to this process the n-th time (default 1)
                                  training reaches <phase>

Phases, in the order a run reaches them (`train._train_and_evaluate`):
  startup      the workdir is locked, nothing is written yet
  mid_epoch    after the first training step of an epoch
  dev          the epoch's dev accuracy is computed, nothing of the epoch is saved
  save         orbax has written the epoch's checkpoint, its manifest not yet
  manifest     the checkpoint is complete, metrics.jsonl not yet rewritten
  history      metrics.jsonl records the epoch, the previous checkpoint is not yet deleted
  final        the test splits are evaluated, results.json not yet written

The variable is read once per run; unset (always, outside tests) the hook does nothing.
"""

import os
import signal

ENV = 'MONOLOC_KILL_AT'
PHASES = ('startup', 'mid_epoch', 'dev', 'save', 'manifest', 'history', 'final')


class KillSwitch:
  """Callable with a phase name; kills the process at the configured occurrence."""

  def __init__(self, spec: str = ''):
    self.phase, _, count = spec.partition(':')
    if self.phase and self.phase not in PHASES:
      from monoloc_jax import errors  # pylint: disable=g-import-not-at-top
      raise errors.MonolocError(f'unknown {ENV} phase {self.phase!r}; valid phases: '
                                f"{', '.join(PHASES)}")
    self.remaining = int(count) if count.isdigit() else 1

  @classmethod
  def from_env(cls) -> 'KillSwitch':
    return cls(os.environ.get(ENV, ''))

  def __call__(self, phase: str) -> None:
    if phase == self.phase:
      self.remaining -= 1
      if self.remaining == 0:
        os.kill(os.getpid(), signal.SIGKILL)
