"""Times greedy decoding of one split by a finished run (every seed, its best-dev parameters).

  python experiments/speed/decode_split.py RUN_WORKDIR [SPLIT] [--rounds=N] [--tokens=FILE]

SPLIT defaults to test_100. The split's shapes are compiled first (on its first 256
examples, not timed); then the whole split is decoded N times (default 3) and each
round's wall seconds are printed with their median. --tokens=FILE saves the decoded
tokens [N_seeds, n, T] (numpy .npy), so two trees can be checked to decode the same:

  cd /tmp && PYTHONPATH=OLD_TREE python OLD_TREE/experiments/speed/decode_split.py RUN
  cd /tmp && PYTHONPATH=NEW_TREE python NEW_TREE/experiments/speed/decode_split.py RUN

(run from outside either tree, so that PYTHONPATH picks the tree). Read-only: the run's
lock is not taken, so a run another process holds can be timed (copy it first if that
process may write a checkpoint meanwhile).
"""

import sys
import time

import numpy as np

from monoloc_jax import inference
from monoloc_jax import input_pipeline as ip
from monoloc_jax import precision
from monoloc_jax import tasks


def main(argv) -> None:
  flags = dict(a[2:].split('=', 1) for a in argv if a.startswith('--'))
  args = [a for a in argv if not a.startswith('--')]
  if not args:
    sys.exit(__doc__)
  workdir, split = args[0], (args[1] if len(args) > 1 else 'test_100')
  config, vocab, model, params = inference.restore_for_eval(workdir)
  programs = inference.make_eval_programs(model, config.seed_strategy, precision.of(config))
  examples = tasks.load_splits(config.task, (split,), seed=config.data_seed,
                               data_dir=config.data_dir or None)[split]
  encoded = ip.encode_split(examples, vocab, ip.source_eos(config))
  first = ip.encode_split(examples[:256], vocab, ip.source_eos(config))
  inference.decode_split(programs, params, first, config.eval_batch_size, vocab)
  times = []
  for _ in range(int(flags.get('rounds', 3))):
    t0 = time.perf_counter()
    tokens, _ = inference.decode_split(programs, params, encoded, config.eval_batch_size, vocab)
    times.append(time.perf_counter() - t0)
  if 'tokens' in flags:
    np.save(flags['tokens'], tokens)
  print(f'{config.task} / {config.variant} ({config.backbone}), {split}: {len(encoded)} '
        f"examples x {tokens.shape[0]} seed(s); decode {', '.join(f'{t:.1f}' for t in times)} s "
        f'(median {np.median(times):.1f} s)', flush=True)


if __name__ == '__main__':
  main(sys.argv[1:])
