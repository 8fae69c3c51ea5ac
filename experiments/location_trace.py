"""Where a trained location-attention model looks, step by step, on Copy-like tasks.

  python experiments/location_trace.py --workdir=runs/copy_sigmoid [--size=200]

For every seed of a finished (or checkpointed) run of a location variant with
direction mixing (GRU backbone; for the Transformer backbone, every layer's and head's
recurrence on its own row, labelled SPLIT/L<layer>H<head>), greedy-decodes `--size` samples of the dev split and of each test split and prints,
per seed and split: the exact-match accuracy; the mean direction gate alpha_dir
(Eq. 17: 1 reads the input forwards, 0 backwards); the mean step the location rule
took (aux 'step', in input positions: 1.0 is one token per output token) over
output steps t in [0, 10), [10, 20), [20, 30), [30, 100); and the mean distance
|mu_t - ideal_t| in input positions over the same bins, where the ideal is
position t+1 (START is position 0; for a model that reads backwards mu is in
e_dir units, where the ideal is the same). Only rows still decoding (before their
`<eos>`) are counted. A model that fits the training lengths without
extrapolating shows where it goes wrong: a step that drifts from 1 past the
training lengths, or a mu that stays right while the output goes wrong. The step
and |mu - ideal| columns need a task whose output token t is input token t (Copy)
or input token n+1-t (Reverse Copy); on other tasks they print '-'.
"""

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import input_pipeline as ip

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The script's flags (defined only when it runs, so that tests can import it)."""
  flags.DEFINE_string('workdir', None, 'A run of copy or reverse_copy.')
  flags.DEFINE_integer('size', 200, 'Samples decoded per split.', lower_bound=1)
BINS = ((0, 10), (10, 20), (20, 30), (30, 100))
# Tasks whose output token t is read at input position t + 1 (in e_dir units, for the
# reading direction that solves them); on other tasks only accuracy and a_dir print.
ALIGNED_TASKS = ('copy', 'reverse_copy')


def recurrences(config):
  """The location recurrences of a run: [None] for the GRU backbone (one), and each
  (layer, head) of the Transformer backbone, which runs one per layer and head."""
  if config.backbone == 'transformer':
    return [(l, h) for l in range(config.transformer.layers)
            for h in range(config.transformer.heads)]
  return [None]


def trace(greedy, params, split, size: int, sos_id: int, recurrence=None):
  """(accuracy %, mean alpha_dir, mean step per bin, mean |mu - ideal| per bin) on
  `size` samples; greedy(params, src, src_len, steps) is the jitted greedy decoder.
  recurrence: None (the GRU's aux 'mu', 'step' are [B, T]) or the (layer, head) to read
  from the Transformer's [B, T, L, H]."""
  split = ip.EncodedSplit(split.src[:size], split.src_len[:size], split.tgt[:size],
                          split.tgt_len[:size], None, 0)
  correct, steps, distances, counts = 0, np.zeros(len(BINS)), np.zeros(len(BINS)), np.zeros(
      len(BINS))
  alphas = []
  for idx, batch, n_steps in ip.eval_batches(split, 64, sos_id):
    out = greedy(params, batch.src, batch.src_len, n_steps)
    rows = len(idx)
    tokens = np.asarray(out.tokens)[:rows]
    gold = np.asarray(batch.tgt_out)[:rows]
    correct += int(np.sum(np.all(tokens == gold, axis=1)))
    alphas.append(np.asarray(out.aux['direction'], np.float64)[:rows])
    s = np.asarray(batch.src_len)[:rows] + 2                       # START, tokens, END
    pick = (lambda a: a) if recurrence is None else (lambda a: a[:, :, recurrence[0],
                                                                    recurrence[1]])
    mu = pick(np.asarray(out.aux['mu'], np.float64)[:rows]) * (s[:, None] - 1)  # positions
    step = pick(np.asarray(out.aux['step'], np.float64)[:rows])
    t = np.arange(mu.shape[1])[None, :]
    live = t < (np.asarray(batch.src_len)[:rows, None])          # before <eos>
    for b, (lo, hi) in enumerate(BINS):
      m = live & (t >= lo) & (t < hi)
      counts[b] += m.sum()
      steps[b] += step[m].sum()
      distances[b] += np.abs(mu - (t + 1))[m].sum()
  with np.errstate(invalid='ignore', divide='ignore'):
    return (100.0 * correct / len(split.src), float(np.mean(np.concatenate(alphas))),
            steps / counts, distances / counts)


def main(argv):
  del argv
  config, vocab, model, params = inference.restore_for_eval(FLAGS.workdir)
  if not (model.variant.location and model.variant.direction_mixing):
    raise errors.MonolocError('needs a location variant with direction mixing (a_dir, mu, '
                              f'step); got {config.variant!r}')
  aligned = config.task in ALIGNED_TASKS
  data = ip.load_data(config, vocab, with_train=False)
  splits = {'dev': data.dev, **data.tests}
  head = ' '.join(f'{f"{lo}-{hi}":>6}' for lo, hi in BINS)
  print(f'{config.task} / {config.variant}; step (positions per output token) and '
        f'|mu - ideal| (positions) by output step')
  print(f'{"seed":>4} {"split":<9} {"acc":>6} {"a_dir":>5}  step: {head}   |mu-ideal|: {head}')
  # One jitted decoder for every seed and split (compiled once per batch shape).
  greedy = jax.jit(lambda p, s, l, n: model.apply({'params': p}, s, l, n, method=model.greedy),
                   static_argnums=3)
  for i in range(jax.tree_util.tree_leaves(params)[0].shape[0]):
    seed_params = jax.tree_util.tree_map(lambda x, i=i: jnp.asarray(x[i]), params)
    for name, split in splits.items():
      for rec in recurrences(config):
        acc, alpha, step, err = trace(greedy, seed_params, split, FLAGS.size,
                                      vocab.sos_id, rec)
        if not aligned:
          step = err = np.full(len(BINS), np.nan)
        fmt = lambda xs: ' '.join(f'{x:6.2f}' if np.isfinite(x) else '     -' for x in xs)
        label = name if rec is None else f'{name}/L{rec[0]}H{rec[1]}'
        print(f'{config.seed + i:>4} {label:<9} {acc:6.1f} {alpha:5.2f}  step: {fmt(step)}   '
              f'|mu-ideal|: {fmt(err)}', flush=True)


if __name__ == '__main__':
  define_flags()
  flags.mark_flag_as_required('workdir')
  app.run(errors.one_line_errors(main))
