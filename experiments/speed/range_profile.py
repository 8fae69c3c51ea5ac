"""Where the time of a range evaluation goes (`range_eval.evaluate_lengths`).

  python experiments/speed/range_profile.py [LENGTHS] [SAMPLES] [--hlo=FILE] [--rows=S:B,...]

The benchmark's setting (`monoloc-benchmark --range=only`): copy, onestep, a
freshly initialised model of 3 seeds, configs/default.py. Prints
  * the host-side parts, each timed alone: drawing (`range_eval.draw`), encoding
    (`input_pipeline.encode_split`), the bucket plan, filling the batches row by row,
    and scoring (`range_eval.score`, edit distance included) on the decoded tokens;
  * per bucket (`range_eval.plan_buckets`, `batch_rows`): rows, src_width, steps,
    batch, batches, the compile (lower + compile), and the decode of every batch
    in wall and CPU seconds (CPU seconds are the steadier figure on a shared machine),
    the encoder's share of a batch (the model's `encode` alone, same shape), and
    the mean number of decoder steps the while loop ran (it stops once every row
    of a seed has emitted `<eos>`);
  * --hlo=FILE: the compiled program of the widest bucket is written to FILE, and
    the ops of its greedy while-loop body are counted by kind;
  * --rows=S:B,...: instead of the plan, CPU and wall ns per seed, row and decoder
    step of one batch of B rows, S source tokens, S + 1 steps (3 rounds, the
    shapes alternated), to choose `range_eval.BATCH_ROW_TOKENS`.
LENGTHS defaults to 1:200 and SAMPLES to 200 (the benchmark: 1:500, 200).
"""

import collections
from typing import Dict
import re
import sys
import time

import jax
import numpy as np

from monoloc_jax import backbones
from monoloc_jax import inference
from monoloc_jax import input_pipeline as ip
from monoloc_jax import multiseed
from monoloc_jax import precision
from monoloc_jax import range_eval
from monoloc_jax import tasks
from monoloc_jax import validation
from monoloc_jax.configs import default
from monoloc_jax.vocab import Vocabulary

SEEDS = 3


def timed(fn):
  """(fn(), wall s, CPU s of this process, every thread)."""
  t0, c0 = time.perf_counter(), time.process_time()
  out = fn()
  return out, time.perf_counter() - t0, time.process_time() - c0


def setup():
  config = default.get_config()
  config.task, config.variant = 'copy', 'onestep'
  validation.validate(config)
  train = tasks.load_splits('copy', ('train',), seed=config.data_seed)['train']
  vocab = Vocabulary.from_examples(train)
  model = backbones.from_config(config, vocab)
  one = jax.numpy.ones((1, 1), jax.numpy.int32)
  init = lambda key: backbones.init_params(model, key, one, jax.numpy.ones((1,), 'int32'))
  params = jax.vmap(init)(jax.random.split(jax.random.PRNGKey(0), SEEDS))
  programs = inference.make_eval_programs(model, config.seed_strategy, precision.of(config))
  return config, train, vocab, model, params, range_eval.tokens_only(programs)


def encoder_program(model, strategy: str):
  """The model's encoder alone over the seed axis (the greedy program's first part)."""
  def one(p, src, src_len):
    memory, _, h0, _ = model.apply({'params': p}, src, src_len, False, method=model.encode)
    return memory.values.sum() + sum(h.sum() for h in h0)
  return jax.jit(multiseed.over_seeds(one, (0, None, None), strategy))


def while_body_census(hlo: str, steps: int, batch: int) -> Dict[str, int]:
  """Ops by kind in the greedy loop's while body (a fusion counts once): the body
  computation whose loop state holds the token buffer s32[steps, batch]."""
  bodies = set(re.findall(r'while\([^)]*\), condition=%[\w.\-]+, body=%([\w.\-]+)', hlo))
  buffer = f's32[{steps},{batch}]'
  for name in bodies:
    m = re.search(r'^%' + re.escape(name) + r' (.*)\n((?:  .*\n)*?)}', hlo, re.M)
    if not m or buffer not in m.group(1):
      continue
    ops = [re.search(r'= (?:\(.*?\)|\S+) ([\w\-]+)\(', line) for line in m.group(2).splitlines()]
    kinds = collections.Counter(o.group(1) for o in ops if o)
    for skip in ('parameter', 'get-tuple-element', 'tuple', 'constant', 'bitcast'):
      kinds.pop(skip, None)
    return dict(kinds)
  return {}


def profile_plan(lengths_text: str, samples: int, hlo_file: str = '') -> None:
  config, train, vocab, model, params, greedy = setup()
  encode_only = encoder_program(model, config.seed_strategy)
  lengths = range_eval.parse_range(lengths_text, 'copy')
  (drawn, _), draw_s, _ = timed(lambda: range_eval.draw(config, lengths, samples, train))
  splits, enc_s, _ = timed(lambda: {n: ip.encode_split(ex, vocab, ip.source_eos(config))
                                    for n, ex in drawn.items()})

  def plan():
    b = range_eval.plan_buckets({n: len(s) for n, s in splits.items()},
                                {n: int(s.src_len.max()) for n, s in splits.items()},
                                {n: int(s.tgt_len.max()) for n, s in splits.items()})
    return [x._replace(batch=range_eval.batch_rows(x.src_width, config.eval_batch_size))
            for x in b]
  buckets, plan_s, _ = timed(plan)
  print(f'{lengths_text}, {samples} samples, {SEEDS} seeds, '
        f'{sum(len(s) for s in splits.values())} examples, {len(buckets)} buckets; '
        f'backend {jax.default_backend()}')
  own = {n: int(s.tgt_len.max()) for n, s in splits.items()}
  out = {n: np.zeros((SEEDS, len(s), own[n]), np.int32) for n, s in splits.items()}
  totals = collections.Counter()
  for bucket in buckets:
    where = [(n, i) for n in bucket.lengths for i in range(len(splits[n]))]
    shape = (np.zeros((bucket.batch, bucket.src_width), np.int32),
             np.zeros((bucket.batch,), np.int32))
    compiled, compile_s, _ = timed(
        lambda: greedy.lower(params, *shape, bucket.steps).compile())
    if hlo_file and bucket is buckets[-1]:
      text = compiled.as_text()
      with open(hlo_file, 'w') as f:
        f.write(text)
      print(f'greedy while body of the widest bucket (ops by kind, fusions once): '
            f'{while_body_census(text, bucket.steps, bucket.batch)}')
    fill_s = wall = cpu = enc_cpu = 0.0
    steps_run = []
    for start in range(0, len(where), bucket.batch):
      chunk = where[start:start + bucket.batch]

      (src, src_len), dt, _ = timed(lambda: range_eval.fill_batch(bucket, chunk, splits))
      fill_s += dt
      tok, dw, dc = timed(lambda: np.asarray(compiled(params, src, src_len)))
      wall, cpu = wall + dw, cpu + dc
      if start == 0:          # the encoder alone on the first batch (compiled first)
        np.asarray(encode_only(params, src, src_len))
        enc_cpu = timed(lambda: np.asarray(encode_only(params, src, src_len)))[2] / dc
      written = (tok != vocab.pad_id).any(axis=(0, 1))
      steps_run.append(int(np.flatnonzero(written).max()) + 1 if written.any() else 0)
      for row, (n, i) in enumerate(chunk):
        out[n][:, i] = tok[:, row, :own[n]]
    n_batches = len(steps_run)
    totals.update(compile_s=compile_s, decode_wall_s=wall, decode_cpu_s=cpu, fill_s=fill_s)
    print(f'  lengths {bucket.lengths[0]}-{bucket.lengths[-1]}: rows {len(where)}, '
          f'src_width {bucket.src_width}, steps {bucket.steps}, batch {bucket.batch} x '
          f'{n_batches}; compile {compile_s:.2f} s; decode {wall:.1f} s wall, {cpu:.1f} s '
          f'CPU ({1e9 * cpu / (SEEDS * bucket.batch * bucket.steps * n_batches):.0f} ns '
          f'CPU per seed, row and step); encoder {enc_cpu:.0%} of a batch; '
          f'loop ran {np.mean(steps_run):.0f} of {bucket.steps} steps', flush=True)
  _, score_s, _ = timed(lambda: [range_eval.score(out[n], splits[n], vocab.eos_id)
                                 for n in lengths])
  print(f"host: draw {draw_s:.2f} s, encode {enc_s:.2f} s, plan {plan_s:.3f} s, fill "
        f"{totals['fill_s']:.2f} s, score {score_s:.2f} s")
  print(f"device: compile {totals['compile_s']:.1f} s, decode {totals['decode_wall_s']:.1f} s "
        f"wall / {totals['decode_cpu_s']:.1f} s CPU")


def profile_rows(spec: str) -> None:
  _, _, vocab, _, params, greedy = setup()
  rng = np.random.default_rng(0)
  shapes = [tuple(int(v) for v in p.split(':')) for p in spec.split(',')]
  programs = {}
  for s, b in shapes:
    src = rng.integers(4, len(vocab), (b, s)).astype(np.int32)
    src_len = np.full((b,), s, np.int32)
    compiled = greedy.lower(params, src, src_len, s + 1).compile()
    np.asarray(compiled(params, src, src_len))
    programs[s, b] = (compiled, src, src_len)
  runs = {k: ([], []) for k in programs}
  for _ in range(3):
    for k, (compiled, src, src_len) in programs.items():
      _, dw, dc = timed(lambda: np.asarray(compiled(params, src, src_len)))
      runs[k][0].append(dw)
      runs[k][1].append(dc)
  for (s, b), (wall, cpu) in runs.items():
    per = 1e9 / (SEEDS * b * (s + 1))
    print(f'S={s:<4} B={b:<4} ns per seed, row and step: CPU {np.median(cpu) * per:6.0f} '
          f'[{min(cpu) * per:.0f}, {max(cpu) * per:.0f}], wall {np.median(wall) * per:6.0f} '
          f'[{min(wall) * per:.0f}, {max(wall) * per:.0f}]')


def main(argv):
  flags = dict(a[2:].split('=', 1) for a in argv if a.startswith('--'))
  args = [a for a in argv if not a.startswith('--')]
  if 'rows' in flags:
    profile_rows(flags['rows'])
  else:
    profile_plan(args[0] if args else '1:200', int(args[1]) if len(args) > 1 else 200,
                 flags.get('hlo', ''))


if __name__ == '__main__':
  main(sys.argv[1:])
