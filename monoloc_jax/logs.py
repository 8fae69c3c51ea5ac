"""What a training run prints and logs: a header, progress bars, epoch lines and
TensorBoard event files.

- **Progress bars** (tqdm) only when `config.progress` is on *and* stderr is a
  terminal (`progress_enabled`): a log file or a CI log gets no `\\r` updates.
  The bar's ETA restarts after the first step of an epoch, which carries the
  compilation, so it does not read minutes while XLA compiles.
- **Epoch lines** on stdout, always (`epoch_line`), one per epoch.
- **The header** (`header`): package versions, devices, the run, its data and
  every config field, printed once when a run starts or resumes.
- **TensorBoard** (`MetricWriter`): the per-epoch scalars of each seed, written
  with tensorboardX (protobuf only, no TensorFlow) under `W/tensorboard/seed_<s>/`,
  so `tensorboard --logdir runs/` overlays seeds and runs; metrics.jsonl stays the
  record of truth.
"""

import pathlib
import sys
import textwrap
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Sequence, TextIO

import numpy as np

TENSORBOARD_DIR = 'tensorboard'
HEADER_WIDTH = 100


def progress_enabled(config, stream: Optional[TextIO] = None) -> bool:
  """Whether to draw progress bars: config.progress and `stream` (stderr) is a terminal."""
  stream = sys.stderr if stream is None else stream
  isatty = getattr(stream, 'isatty', None)
  return bool(config.progress) and callable(isatty) and bool(isatty())


def progress(batches: Iterable[Any], total: int, desc: str, enabled: bool) -> Iterator[Any]:
  """Yields `batches`, with a tqdm bar on stderr when `enabled`.

  The first step of an epoch carries the compilation of the train step; the bar is
  labelled '(compiling)' until it returns and then restarts its clock, so the ETA
  is the rate of the compiled steps.
  """
  if not enabled:
    yield from batches
    return
  import tqdm  # pylint: disable=g-import-not-at-top
  bar = tqdm.tqdm(total=total, desc=f'{desc} (compiling)', leave=False, file=sys.stderr,
                  dynamic_ncols=True)
  try:
    for i, batch in enumerate(batches):
      yield batch
      if i == 0:
        bar.reset(total=total)
        bar.set_description(desc)
      bar.update(1)
  finally:
    bar.close()


def header(config, workdir, data=None, seeds: Sequence[int] = (),
           resumed_epoch: Optional[int] = None, display_name: str = '') -> str:
  """The lines printed when a run starts: versions, devices, the run, its data and config."""
  import jax  # pylint: disable=g-import-not-at-top
  from monoloc_jax import multiseed  # pylint: disable=g-import-not-at-top
  from monoloc_jax import rundir  # pylint: disable=g-import-not-at-top
  versions = rundir.versions()
  devices = ', '.join(versions['devices'])
  lines = [f"monoloc_jax: jax {versions['jax']}, flax {versions['flax']}, python "
           f"{versions['python']}; backend {jax.default_backend()}; devices: {devices}; "
           f"{versions['host_cores']} host core(s)",
           f"run: {display_name or config.variant} on {config.task}, seed(s) "
           f"{', '.join(map(str, seeds))} ({multiseed.describe(config.seed_strategy, len(seeds))}), "
           f"workdir {workdir}"
           + (f'; resuming after epoch {resumed_epoch}' if resumed_epoch else '')]
  if data is not None:
    tests = ', '.join(f'{name} {len(split)}' for name, split in data.tests.items())
    lines.append(f'data: train {len(data.train)}, dev {len(data.dev)}; test: {tests}')
  fields = ' '.join(f'{k}={v!r}' for k, v in sorted(config.to_dict().items()))
  lines += textwrap.wrap(f'config: {fields}', HEADER_WIDTH, subsequent_indent='  ',
                         break_on_hyphens=False)
  return '\n'.join(lines)


def epoch_line(record: Mapping[str, Any]) -> str:
  """One epoch of metrics.jsonl as a line: mean loss, each seed's dev accuracy and lr."""
  return (f"epoch {record['epoch']:3d}  loss {np.mean(record['loss']):.4f}  dev acc "
          f"{', '.join(f'{a:.1f}' for a in record['dev_accuracy'])}%  "
          f"lr {', '.join(f'{x:.2g}' for x in record['lr'])}  {record['epoch_s']:.1f}s")


class MetricWriter:
  """TensorBoard event files of a run, one directory (a TensorBoard "run") per seed.

  Tags: train/loss, dev/accuracy (%), train/lr, time/epoch_s at step = epoch, and
  test/accuracy/<split> (%) at the last epoch. `purge_step` (the first epoch
  after a resume) makes TensorBoard drop events of later epochs that an
  interrupted process wrote before its last checkpoint.
  """

  def __init__(self, workdir, seeds: Sequence[int], purge_step: Optional[int] = None):
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    root = pathlib.Path(workdir) / TENSORBOARD_DIR
    self.seeds = list(seeds)
    self._writers = [SummaryWriter(str(root / f'seed_{s}'), purge_step=purge_step,
                                   flush_secs=10) for s in self.seeds]

  def write_epoch(self, record: Mapping[str, Any]) -> None:
    """Writes one metrics.jsonl record (per-seed lists) and flushes."""
    step = int(record['epoch'])
    for i, writer in enumerate(self._writers):
      writer.add_scalar('train/loss', float(record['loss'][i]), step)
      writer.add_scalar('dev/accuracy', float(record['dev_accuracy'][i]), step)
      writer.add_scalar('train/lr', float(record['lr'][i]), step)
      writer.add_scalar('time/epoch_s', float(record['epoch_s']), step)
      writer.flush()

  def write_test(self, test: Mapping[str, Dict[str, Any]], step: int) -> None:
    """Each seed's test accuracy per split (results.json's per_seed values)."""
    for i, writer in enumerate(self._writers):
      for split, r in test.items():
        writer.add_scalar(f'test/accuracy/{split}', float(r['per_seed'][i]['accuracy']), step)
      writer.flush()

  def close(self) -> None:
    for writer in self._writers:
      writer.close()
