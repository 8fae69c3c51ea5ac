"""Kernels per decoder timestep on an accelerator (jax.profiler trace + compiled HLO).

  python experiments/speed/accelerator_profile.py OUT_DIR [variant ...]

For each variant (default: onestep) and each decoder backward path, times the
gradient of the paper's small model on a fixed batch (B=32 rows, S=16 source
tokens, T=32 decoder steps, 1 seed), then records 5 calls under `jax.profiler`
and writes to OUT_DIR (BACKWARDS=autodiff limits the paths; JAX_DEFAULT_MATMUL_PRECISION
sets the matmul precision, and the tag):
  trace_<variant>_<backward>_<precision>.json.gz   the perfetto trace (device kernels included);
  hlo_<variant>_<backward>_<precision>.txt       the optimised HLO of the gradient program;
and prints, per variant and path: ms per call (median of 20, after warm-up), device
kernels per call, and the kernels that run T times per call (once per decoder step,
forward or backward), i.e. the launches each decoder timestep costs.
"""

import collections
import glob
import gzip
import json
import os
import shutil
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, __file__.rsplit('/experiments/', 1)[0])
from monoloc_jax import variants  # pylint: disable=wrong-import-position
from monoloc_jax.backbones import gru  # pylint: disable=wrong-import-position

B, S, T, V = 32, 16, 32, 14
CALLS = 5


def _device_pids(events):
  """pids of the trace's device (GPU/TPU) processes, from the metadata events."""
  pids = set()
  for e in events:
    if e.get('ph') == 'M' and e.get('name') == 'process_name':
      name = str(e.get('args', {}).get('name', ''))
      if '/device:' in name and 'CPU' not in name:
        pids.add(e['pid'])
  return pids


def profile(variant: str, backward: str, out_dir: str) -> dict:
  rng = np.random.default_rng(0)
  src = rng.integers(3, V, (B, S)).astype(np.int32)
  src_len = np.full((B,), S, np.int32)
  tgt = rng.integers(3, V, (B, T)).astype(np.int32)
  tgt_in = np.concatenate([np.ones((B, 1), np.int32), tgt[:, :-1]], -1)
  model = gru.Seq2Seq(vocab_size=V, variant=variants.get(variant), decoder_backward=backward)
  params = model.init(jax.random.PRNGKey(0), src, src_len, tgt_in)

  def loss(p):
    out = model.apply(p, src, src_len, tgt_in, train=True, rngs={'dropout': jax.random.PRNGKey(1)})
    return jnp.sum(jax.nn.log_softmax(out.logits) * jax.nn.one_hot(tgt, V))

  grad = jax.jit(jax.grad(loss))
  t0 = time.perf_counter()
  compiled = grad.lower(params).compile()
  compile_s = time.perf_counter() - t0
  precision = jax.config.jax_default_matmul_precision or 'default'
  tag = f'{variant}_{backward}_{precision}'
  with open(os.path.join(out_dir, f'hlo_{tag}.txt'), 'w') as f:
    f.write(compiled.as_text())
  for _ in range(3):
    jax.block_until_ready(grad(params))
  times = []
  for _ in range(20):
    t0 = time.perf_counter()
    jax.block_until_ready(grad(params))
    times.append(1e3 * (time.perf_counter() - t0))
  tmp = f'/tmp/monoloc_trace_{tag}'
  shutil.rmtree(tmp, ignore_errors=True)
  with jax.profiler.trace(tmp, create_perfetto_trace=True):
    for _ in range(CALLS):
      jax.block_until_ready(grad(params))
  found = glob.glob(f'{tmp}/**/perfetto_trace.json.gz', recursive=True)
  found = found or glob.glob(f'{tmp}/**/*.trace.json.gz', recursive=True)
  result = {'variant': variant, 'backward': backward, 'matmul_precision': precision,
            'compile_s': compile_s,
            'ms_per_call_median': statistics.median(times),
            'ms_per_call_min': min(times), 'ms_per_call_max': max(times)}
  if not found:
    result['trace'] = 'none written'
    return result
  shutil.copy(found[0], os.path.join(out_dir, f'trace_{tag}.json.gz'))
  events = json.load(gzip.open(found[0]))
  events = events['traceEvents'] if isinstance(events, dict) else events
  pids = _device_pids(events)
  count, busy = collections.Counter(), collections.Counter()
  for e in events:
    if e.get('ph') == 'X' and e.get('pid') in pids and 'dur' in e:
      count[e['name']] += 1
      busy[e['name']] += e['dur']
  per_call = sum(count.values()) / CALLS
  per_step = sum(n for n in count.values() if round(n / CALLS) % T == 0) / CALLS / T
  result.update({'device_events_per_call': per_call,
                 'device_busy_us_per_call': sum(busy.values()) / CALLS,
                 'events_repeating_T_times_per_step': per_step,
                 'top': [(k[:80], count[k] / CALLS, round(busy[k] / CALLS))
                         for k, _ in busy.most_common(12)]})
  return result


def main(argv):
  out_dir = argv[1]
  os.makedirs(out_dir, exist_ok=True)
  names = argv[2:] or ['onestep']
  print(jax.devices())
  for name in names:
    for backward in os.environ.get('BACKWARDS', ','.join(gru.DECODER_BACKWARDS)).split(','):
      r = profile(name, backward, out_dir)
      print(json.dumps(r), flush=True)


if __name__ == '__main__':
  main(sys.argv)
