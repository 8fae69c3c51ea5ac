"""Side-by-side speed of this library and the authors' PyTorch code, on identical work.

  python experiments/speed/side_by_side.py --authors_code=../refcode \
      [--task=recopy --model=onestep --rounds=3 --train_samples=0 --batch_size=32 \
       --eval_batch_size=256 --decode_split=test_100 --json_out=side_by_side.json]

Every speed figure in BUILD_NOTES is a ratio printed by this script, quoted with the
machine line it prints.

Prepare the authors' code (it stays OUTSIDE this repository; nothing of it is copied
here, this script imports it from the checkout in a separate process):

  git clone https://github.com/JRC1995/MonotonicLocationAttention ../refcode
  git -C ../refcode checkout 234f5b5
  python3 -m venv ../refcode/.venv
  ../refcode/.venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
  ../refcode/.venv/bin/pip install numpy jsonlines nltk tqdm

(this is the checkout and environment used so far: torch 2.13.0 CPU). Another Python
with those packages can be named with --authors_python. Nothing has to be exported
beforehand: the script writes the task's splits with experiments/authors_code/
export_data.py into a temporary `processed_data/` folder that both sides read.

What runs. Two long-lived worker processes, started once:
  * the authors' side: a small driver written to the temporary folder at run time
    and run with their Python; it imports their `configs`, `utils.data_utils`,
    `models`, `agents` and `collaters` and builds config, data, model, agent and
    collaters the way their train.py does;
  * our side: this script with --_worker_ours, in this repository's Python; it
    makes the same library calls as `monoloc-benchmark`'s one-seed training and
    greedy-decoding measurements (monoloc_jax/benchmark.py), plus one decoding
    condition that equals theirs (below). `monoloc-benchmark` itself is not run:
    it always adds a multi-seed pass, recompiles in every process and cannot decode
    the authors' batches.
Each of --rounds rounds asks both workers for one measurement, the authors first in
odd rounds and ours first in even rounds, prints both and the ratios (ours / theirs,
samples per second; > 1 means this library is faster), and at the end the median,
min and max ratio over the rounds.

Identical work.
  * Data: the same examples. Training takes the first --train_samples examples of
    the task's train split (0 = all), decoding the first --decode_samples of
    --decode_split (0 = all), on both sides; each worker hashes the token strings it
    read, and the script reports whether the hashes agree.
  * Training, one pass over those samples at --batch_size after one warm-up, timed
    without batch construction (collation is done before the timer on both sides;
    theirs is reported):
    - authors: batches from their DataLoader(shuffle=True) and train collater
      (random batches, padded to the batch's longest example); per batch, what their
      trainers/trainer.py does: agent.run(batch, train=True) (forward, their loss,
      predictions to words, accuracy), agent.backward(loss / accu_step),
      agent.step() (clip_grad_norm_ 5, AdamW). Their log/display calls are left out.
      Warm-up: one step on the first batch.
    - ours: `train_step` over length-bucketed batches (a bucket's last batch is
      filled with rows that carry no loss). Warm-up: one step of each distinct
      batch shape (in round 1 this compiles; reported as compile time).
  * Decoding: greedy, with freshly initialised (untrained) parameters on both
    sides, at --eval_batch_size, one warm-up batch (ours: every distinct shape)
    before the timer.
    - authors: their test mode: config['generate'] = True, agent.run(batch,
      train=False) under torch.no_grad(), batches of consecutive examples in file
      order (their test DataLoader has shuffle=False). Their decoder
      (models/layers/GRUEncoderDecoder.py) runs `for t in range(S2)` with
      S2 = trg_vec.size(1), the batch's longest gold target incl. <eos>: it decodes
      exactly that many steps for every row and never stops at <eos>
      (`max_decoder_len` is not used on this path). Their figure includes turning
      predictions into words and scoring them (agent.run); the model's forward
      alone is reported too.
    - ours, equal (the headline ratio): the same batches (same rows; source padded
      to the batch's longest source, as theirs) for the same number of steps, the
      batch's longest gold target incl. <eos>. Our greedy `while_loop` would stop
      earlier only if every row had emitted <eos>; the steps actually run are
      reported and compared with theirs.
    - ours, benchmark condition (what `monoloc-benchmark` measures): batches
      sorted by length, widths bucketed (BUCKETS in input_pipeline.py; the source
      width capped at the split's longest source), the last batch filled to
      --eval_batch_size rows, decoding to the bucket of the batch's longest target
      (BUILD_NOTES §2 item 5), early exit once every row has emitted <eos>.

Cores and threads (recorded in the output). Both workers are pinned
(sched_setaffinity) to the same CPUs, --cores (default: every CPU this process may
use), and run one at a time, so they never compete with each other for the cores;
other jobs on the machine do, which is why the load average is printed before and
after. XLA:CPU sizes its thread pool to the schedulable CPUs, so JAX uses all the
pinned CPUs. torch gets --threads intra-op threads (OMP/MKL_NUM_THREADS likewise),
default 1: the authors' code as experiments/authors_code/run.py trains it (one
thread per seed), and its fastest setting here. Its ops are small (batch 32, width
128), and with 2 threads on this 2-core VM under background load torch decoded the
same 40 ReCopy-100 examples in 96 s instead of 2.1 s (OpenMP threads waiting on
each other on oversubscribed cores). --threads=0 gives torch as many threads as
pinned CPUs; --cores=0 pins both sides to one core (torch 1 thread, XLA one
schedulable CPU), the strict same-resources comparison.

Arithmetic (ours only measures it; printed per round). What a training ratio can reach
is bounded by how fast the pinned cores multiply matrices, so every round also reports:
the model FLOPs of one training sample (3 x the forward count of
monoloc_jax/benchmark.py's `flops_per_sample`, valid tokens only, averaged over the
training samples); each side's training rate in those FLOPs per second; the rate XLA:CPU
reaches on a 1024 x 1024 x 1024 float32 product and on the train step's own GRU product
([batch, hidden] x [hidden, 3 hidden]), each timed alone for about half a second on the
pinned cores; and the FLOP rate --target_ratio times the authors' training rate needs,
as a fraction of both.

Exit status 2 with a line `error: ...` when the authors' checkout or its Python is
missing or unusable.
"""

import argparse
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
AUTHORS_DIR = REPO / 'experiments' / 'authors_code'
MARK = '@@side_by_side '
AUTHORS_REPO = 'https://github.com/JRC1995/MonotonicLocationAttention'
AUTHORS_COMMIT = '234f5b5'
# Files of their checkout the driver imports.
AUTHORS_FILES = ('configs/configLoader.py', 'utils/data_utils.py',
                 'models/seq2seq_framework.py', 'agents/seq2seq_agent.py',
                 'collaters/seq2seq_collater.py')
AUTHORS_MODULES = ('torch', 'numpy', 'jsonlines', 'nltk')
PREPARE = (f'git clone {AUTHORS_REPO} PATH && git -C PATH checkout {AUTHORS_COMMIT} && '
           'python3 -m venv PATH/.venv && PATH/.venv/bin/pip install torch numpy jsonlines '
           'nltk tqdm (see the docstring of experiments/speed/side_by_side.py)')
# Default Lookup / SCAN files (as experiments/authors_code/run.py finds them).
SHARED = REPO.parent / 'shared'
DEFAULT_DATA_DIRS = {'lookup': SHARED / 'data' / 'lookup' / 'forward',
                     'reverse_lookup': SHARED / 'data' / 'lookup' / 'reverse',
                     'scan_length': SHARED / 'data' / 'scan' / 'length_split'}


class UsageError(Exception):
  """A problem the user must fix before anything runs (exit status 2)."""


# ---------------------------------------------------------------------------
# Checks and small helpers.
# ---------------------------------------------------------------------------
def check_authors_code(path: str, python: str = '', probe: bool = True):
  """(checkout, python) as absolute paths, or UsageError naming what to prepare."""
  if not path:
    raise UsageError(f'--authors_code is required: the path of a checkout of {AUTHORS_REPO} '
                     f'@{AUTHORS_COMMIT}; prepare it with: {PREPARE}')
  root = pathlib.Path(path).expanduser().resolve()
  if not root.is_dir():
    raise UsageError(f'--authors_code={path}: no such directory; prepare the authors\' code '
                     f'there with: {PREPARE}')
  missing = [f for f in AUTHORS_FILES if not (root / f).is_file()]
  if missing:
    raise UsageError(f'--authors_code={path} is not a checkout of {AUTHORS_REPO} (missing '
                     f'{", ".join(missing)}); prepare it with: {PREPARE}')
  py = pathlib.Path(python).expanduser() if python else root / '.venv' / 'bin' / 'python'
  py = py if py.is_absolute() else pathlib.Path.cwd() / py
  if not (py.is_file() and os.access(py, os.X_OK)):
    what = '--authors_python' if python else f'{root}/.venv/bin/python'
    raise UsageError(f'{what} ({py}) is missing: give the authors\' code a virtualenv with '
                     f'torch, numpy, jsonlines and nltk: python3 -m venv {root}/.venv && '
                     f'{root}/.venv/bin/pip install torch numpy jsonlines nltk tqdm '
                     '(or name another Python with --authors_python)')
  if probe:
    proc = subprocess.run([str(py), '-c', 'import ' + ', '.join(AUTHORS_MODULES)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
      last = (proc.stderr.strip().splitlines() or ['no output'])[-1]
      raise UsageError(f'{py} cannot import {", ".join(AUTHORS_MODULES)} ({last}); install '
                       f'them: {py.parent}/pip install torch numpy jsonlines nltk tqdm')
  return root, py


def parse_cores(spec: str) -> List[int]:
  """'0,1' / '0-3' / '0-1,4' -> sorted CPU ids; '' -> every CPU this process may use."""
  if not spec.strip():
    return sorted(os.sched_getaffinity(0))
  cores = set()
  for part in spec.split(','):
    part = part.strip()
    if not part:
      continue
    lo, _, hi = part.partition('-')
    try:
      a, b = int(lo), int(hi or lo)
    except ValueError:
      raise UsageError(f'--cores={spec}: give CPU ids such as 0,1 or 0-3') from None
    if a > b or a < 0:
      raise UsageError(f'--cores={spec}: bad range {part}')
    cores.update(range(a, b + 1))
  allowed = os.sched_getaffinity(0)
  if not cores or not cores <= allowed:
    raise UsageError(f'--cores={spec}: this process may only use CPUs {sorted(allowed)}')
  return sorted(cores)


def machine_description(label: str = '') -> str:
  """One line naming the machine: CPU model, logical CPUs, memory (and --machine)."""
  model = platform.processor() or platform.machine()
  try:
    for line in pathlib.Path('/proc/cpuinfo').read_text().splitlines():
      if line.startswith('model name'):
        model = line.split(':', 1)[1].strip()
        break
  except OSError:
    pass
  mem = ''
  try:
    for line in pathlib.Path('/proc/meminfo').read_text().splitlines():
      if line.startswith('MemTotal'):
        mem = f', {int(line.split()[1]) / 2**20:.0f} GiB RAM'
        break
  except OSError:
    pass
  text = f'{model}, {os.cpu_count()} logical CPUs{mem}, {platform.system()} {platform.release()}'
  return f'{label} ({text})' if label else text


def load_average() -> str:
  try:
    return ' / '.join(f'{x:.2f}' for x in os.getloadavg()) + ' (1 / 5 / 15 min)'
  except OSError:
    return 'unknown'


# ---------------------------------------------------------------------------
# Ratios and report (pure; tested without torch or jax).
# ---------------------------------------------------------------------------
RATIOS = (
    ('train', 'training'),
    ('decode', 'decoding, equal steps'),
    ('decode_vs_forward', 'decoding, equal steps, vs their forward only'),
    ('decode_benchmark', 'decoding, monoloc-benchmark condition'),
)


def ratio_stats(values: Sequence[float]) -> Dict[str, float]:
  """Median, min and max of per-round ratios."""
  values = [float(v) for v in values]
  if not values:
    raise ValueError('no rounds')
  return {'median': statistics.median(values), 'min': min(values), 'max': max(values),
          'rounds': len(values)}


def round_ratios(theirs: Dict[str, Any], ours: Dict[str, Any]) -> Dict[str, float]:
  """Ours / theirs samples per second of one round (> 1: this library is faster)."""
  return {
      'train': ours['train']['samples_per_s'] / theirs['train']['samples_per_s'],
      'decode': ours['decode_equal']['samples_per_s'] / theirs['decode']['samples_per_s'],
      'decode_vs_forward': (ours['decode_equal']['samples_per_s']
                            / theirs['decode']['forward_samples_per_s']),
      'decode_benchmark': (ours['decode_benchmark']['samples_per_s']
                           / theirs['decode']['samples_per_s']),
  }


def arithmetic(r: Dict[str, Any], target_ratio: float) -> Optional[Dict[str, float]]:
  """A round's training rates in model GFLOP/s, and what `target_ratio` x the authors'
  rate needs, against the matrix-product rates measured in the round (None if the
  round has no arithmetic figures).

  flops = model FLOPs of one training sample (forward + backward);
  gflops_side = samples_per_s_side * flops / 1e9;
  needed = target_ratio * gflops_authors; needed_of_large = needed / gemm_large,
  needed_of_step = needed / gemm_step (> 1: more than the cores reach on that product).
  """
  a = r['ours'].get('arith')
  if not a:
    return None
  flops = a['train_flops_per_sample']
  authors = r['authors']['train']['samples_per_s'] * flops / 1e9
  ours = r['ours']['train']['samples_per_s'] * flops / 1e9
  needed = target_ratio * authors
  return {'train_mflops_per_sample': flops / 1e6, 'authors_gflops': authors,
          'ours_gflops': ours, 'target_ratio': target_ratio, 'needed_gflops': needed,
          'gemm_large_gflops': a['gemm_large_gflops'], 'gemm_step_gflops': a['gemm_step_gflops'],
          'ours_of_large': ours / a['gemm_large_gflops'],
          'needed_of_large': needed / a['gemm_large_gflops'],
          'needed_of_step': needed / a['gemm_step_gflops']}


def summarize(rounds: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
  """Median / min / max of every ratio and of each side's samples per second."""
  out = {key: ratio_stats([r['ratios'][key] for r in rounds]) for key, _ in RATIOS}
  out['samples_per_s'] = {
      'authors_train': ratio_stats([r['authors']['train']['samples_per_s'] for r in rounds]),
      'ours_train': ratio_stats([r['ours']['train']['samples_per_s'] for r in rounds]),
      'authors_decode': ratio_stats([r['authors']['decode']['samples_per_s'] for r in rounds]),
      'authors_decode_forward': ratio_stats(
          [r['authors']['decode']['forward_samples_per_s'] for r in rounds]),
      'ours_decode_equal': ratio_stats(
          [r['ours']['decode_equal']['samples_per_s'] for r in rounds]),
      'ours_decode_benchmark': ratio_stats(
          [r['ours']['decode_benchmark']['samples_per_s'] for r in rounds]),
  }
  ar = [r['arith'] for r in rounds if r.get('arith')]
  if ar:
    out['arith'] = {k: ratio_stats([x[k] for x in ar])
                    for k in ('ours_gflops', 'needed_gflops', 'gemm_large_gflops',
                              'gemm_step_gflops', 'ours_of_large', 'needed_of_large',
                              'needed_of_step')}
    out['arith']['target_ratio'] = ar[0]['target_ratio']
  return out


def format_round(r: Dict[str, Any]) -> str:
  """The lines of one round."""
  a, o, x = r['authors'], r['ours'], r['ratios']
  first = 'authors first' if r['order'][0] == 'authors' else 'ours first'
  lines = [f"round {r['round']} ({first}):"]
  warm = (f"compile + warm-up {o['train']['warmup_s']:.1f} s" if r['round'] == 1
          else f"warm-up {o['train']['warmup_s']:.1f} s")
  lines.append(
      f"  training   authors {a['train']['samples_per_s']:8.1f} samples/s "
      f"({a['train']['samples']} in {a['train']['seconds']:.2f} s)   "
      f"ours {o['train']['samples_per_s']:8.1f} samples/s "
      f"({o['train']['samples']} in {o['train']['seconds']:.2f} s; {warm})   "
      f"ratio {x['train']:.2f}x")
  lines.append(
      f"  decoding   authors {a['decode']['samples_per_s']:8.1f} samples/s "
      f"({a['decode']['samples']} in {a['decode']['seconds']:.2f} s; forward only "
      f"{a['decode']['forward_samples_per_s']:.1f})   "
      f"ours equal {o['decode_equal']['samples_per_s']:8.1f} samples/s "
      f"({o['decode_equal']['seconds']:.2f} s), benchmark condition "
      f"{o['decode_benchmark']['samples_per_s']:.1f}   "
      f"ratio {x['decode']:.2f}x (vs forward only {x['decode_vs_forward']:.2f}x; "
      f"benchmark condition {x['decode_benchmark']:.2f}x)")
  lines.append(
      f"  decode steps (rows x steps)   authors {a['decode']['row_steps']}   "
      f"ours equal {o['decode_equal']['row_steps_run']} run of "
      f"{o['decode_equal']['row_steps']}   ours benchmark condition "
      f"{o['decode_benchmark']['row_steps_run']} run of {o['decode_benchmark']['row_steps']}")
  ar = r.get('arith')
  if ar:
    lines.append(
        f"  arithmetic   {ar['train_mflops_per_sample']:.2f} model MFLOP per training sample: "
        f"authors {ar['authors_gflops']:.1f}, ours {ar['ours_gflops']:.1f} GFLOP/s; "
        f"products alone: 1024^3 {ar['gemm_large_gflops']:.1f}, the step's GRU product "
        f"{ar['gemm_step_gflops']:.1f} GFLOP/s; {ar['target_ratio']:g}x the authors needs "
        f"{ar['needed_gflops']:.1f} GFLOP/s = {ar['needed_of_large']:.0%} of the 1024^3 rate, "
        f"{ar['needed_of_step']:.0%} of the step product's")
  return '\n'.join(lines)


def format_summary(summary: Dict[str, Any], machine: str) -> str:
  """The closing block: median / min / max ratio per figure, with the machine named."""
  n = summary['train']['rounds']
  lines = [f'summary over {n} round(s), ratio = ours / authors in samples/s, on {machine}:']
  for key, name in RATIOS:
    s = summary[key]
    lines.append(f"  {name:<48} median {s['median']:6.2f}x   min {s['min']:6.2f}x   "
                 f"max {s['max']:6.2f}x")
  sp = summary['samples_per_s']
  lines.append(f"  median samples/s: training authors {sp['authors_train']['median']:.1f}, "
               f"ours {sp['ours_train']['median']:.1f}; decoding authors "
               f"{sp['authors_decode']['median']:.1f} (forward only "
               f"{sp['authors_decode_forward']['median']:.1f}), ours equal "
               f"{sp['ours_decode_equal']['median']:.1f}, ours benchmark condition "
               f"{sp['ours_decode_benchmark']['median']:.1f}")
  ar = summary.get('arith')
  if ar:
    lines.append(
        f"  median arithmetic: ours {ar['ours_gflops']['median']:.1f} GFLOP/s "
        f"({ar['ours_of_large']['median']:.0%} of the 1024^3 product's "
        f"{ar['gemm_large_gflops']['median']:.1f}); {ar['target_ratio']:g}x the authors needs "
        f"{ar['needed_gflops']['median']:.1f} GFLOP/s ({ar['needed_of_large']['median']:.0%} "
        f"of it; {ar['needed_of_step']['median']:.0%} of the step product's "
        f"{ar['gemm_step_gflops']['median']:.1f})")
  return '\n'.join(lines)


def conditions_text(settings: Dict[str, Any]) -> List[str]:
  s = settings
  return [
      f"training: first {s['train_samples']} examples of {s['task']} train, batch "
      f"{s['batch_size']}, one pass after warm-up, collation outside the timer. authors: "
      'DataLoader(shuffle=True) random batches, agent.run(train=True) + agent.backward + '
      "agent.step (clip 5, AdamW) per batch. ours: train_step over length-bucketed batches.",
      f"decoding: first {s['decode_samples']} examples of {s['decode_split']} (their "
      f"test_{s['decode_key']}), batch {s['eval_batch_size']}, untrained parameters, greedy. "
      "authors: config['generate']=True, agent.run(train=False) under no_grad, file-order "
      "batches, each decoded for exactly the batch's longest gold target incl. <eos> "
      '(their loop runs trg_vec.size(1) steps and never stops at <eos>).',
      '  ours, equal: the same batches, source width = batch max, the same step count '
      '(while_loop would stop early only if every row emitted <eos>; steps run below).',
      '  ours, benchmark condition: length-sorted batches, bucketed widths (source capped '
      "at the split's longest), last batch filled, to the bucket of the longest target, "
      'early exit when all rows emitted <eos>.',
  ]


def format_header(setup: Dict[str, Any]) -> str:
  s, a, o = setup['settings'], setup['authors'], setup['ours']
  same = 'identical' if setup['same_data'] else 'DIFFERENT (hashes disagree)'
  lines = [
      f"side by side: monoloc_jax ({o['git']}) vs the authors' code ({a['git']}, torch "
      f"{a['torch']})",
      f"machine: {setup['machine']}",
      f"load average at start: {setup['load_start']}",
      f"cores: both workers pinned to CPUs {','.join(map(str, s['cores']))}; torch "
      f"{a['torch_threads']} intra-op thread(s) ({a['os_threads']} OS threads after "
      f"warm-up); JAX {o['jax']} {o['backend']}, XLA:CPU thread pool sized to the "
      f"{o['schedulable_cpus']} schedulable CPU(s) ({o['os_threads']} OS threads after "
      f"warm-up), XLA_FLAGS={o['xla_flags'] or '(none)'}",
      f"work: {s['task']}/{s['model']} (their {s['dataset']} / {s['their_model']}); data "
      f"{same}: train sha {a['train_sha']} / {o['train_sha']}, decode sha "
      f"{a['decode_sha']} / {o['decode_sha']}; vocabulary authors {a['vocab']}, ours "
      f"{o['vocab']}; trainable parameters authors {a['params']}, ours {o['params']}",
  ]
  lines += conditions_text(s)
  return '\n'.join(lines)


# ---------------------------------------------------------------------------
# The authors' side: a driver written at run time, run with their Python.
# ---------------------------------------------------------------------------
AUTHORS_DRIVER = r'''
# Written at run time by monoloc_jax's experiments/speed/side_by_side.py (not part of
# either code base). Imports the authors' modules from their checkout, builds config,
# data, model, agent and collaters as their train.py does, and times their training
# step and test-mode decoding; one JSON line (prefixed) per request on stdout.
import hashlib, json, os, pathlib, pickle, random, sys, time, types, zlib

MARK = '@@side_by_side '


def say(obj):
  sys.stdout.write(MARK + json.dumps(obj) + '\n')
  sys.stdout.flush()


spec = json.load(open(sys.argv[1]))
sys.path.insert(0, spec['authors_code'])
import numpy as np
import torch as T
T.set_num_threads(spec['threads'])
from torch.utils.data import DataLoader
from configs.configLoader import load_config
from utils.data_utils import load_data, Dataset
from models import seq2seq_framework
from agents import seq2seq_agent
from collaters import seq2seq_collater

folder = pathlib.Path(spec['data_folder'])
with open(folder / 'metadata.pkl', 'rb') as f:
  metadata = pickle.load(f)
args = types.SimpleNamespace(dataset=spec['dataset'], model=spec['their_model'],
                             model_type='seq2seq', limit=-1)
config = load_config(args)
device = T.device('cpu')
config['device'] = device
key = spec['decode_key']
paths = {'train': folder / 'train.jsonl', 'dev': {},
         'test': {key: folder / ('test_%s.jsonl' % key)}}
data, config = load_data(paths, metadata, args, config)
config['batch_size'] = config['train_batch_size'] = spec['batch_size']
config['dev_batch_size'] = spec['eval_batch_size']
SEED = zlib.adler32(str.encode('{}_{}_{}_{}'.format(spec['dataset'], spec['their_model'],
                                                    'seq2seq', 0)))


def build():
  T.manual_seed(SEED)
  random.seed(SEED)
  np.random.seed(SEED)
  model = seq2seq_framework(data=data, config=config).to(device)
  return model, seq2seq_agent(model=model, config=config, device=device)


train_model, train_agent = build()
dec_model, dec_agent = build()          # decodes with untrained parameters
config['current_lr'] = train_agent.optimizer.param_groups[-1]['lr']
train_collater = seq2seq_collater(PAD=data['PAD_id'], config=config, train=True)
dev_collater = seq2seq_collater(PAD=data['PAD_id'], config=config, train=False)
n_train = spec['train_samples'] or len(data['train'])
n_dec = spec['decode_samples'] or len(data['test'][key])
train_samples = {i: data['train'][i] for i in range(n_train)}
dec_samples = {i: data['test'][key][i] for i in range(n_dec)}

forward_s = [0.0]
_forward = dec_model.forward


def timed_forward(batch):
  t0 = time.perf_counter()
  out = _forward(batch)
  forward_s[0] += time.perf_counter() - t0
  return out


dec_model.forward = timed_forward


def digest(samples):
  h = hashlib.sha256()
  for i in range(len(samples)):
    s = samples[i]
    h.update((' '.join(s['src']) + '\t' + ' '.join(s['trg']) + '\n').encode())
  return h.hexdigest()[:16]


def batches_of(samples, size, collater, shuffle):
  loader = DataLoader(Dataset(samples), batch_size=size * config['bucket_size_factor'],
                      num_workers=config['num_workers'], shuffle=shuffle,
                      collate_fn=collater.collate_fn)
  return [b for group in loader for b in group]


def train_step(batch):
  item = train_agent.run(batch, train=True)
  accu_step = config['batch_size'] // batch['batch_size']
  train_agent.backward(item['loss'] / accu_step)
  train_agent.step()


def train_round():
  config['generate'] = False
  t0 = time.perf_counter()
  batches = batches_of(train_samples, config['train_batch_size'], train_collater, True)
  collate_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  train_step(batches[0])
  warm = time.perf_counter() - t0
  t0 = time.perf_counter()
  for b in batches:
    train_step(b)
  dt = time.perf_counter() - t0
  return {'samples': n_train, 'batches': len(batches), 'seconds': dt,
          'samples_per_s': n_train / dt, 'warmup_s': warm, 'collate_s': collate_s}


def decode_round():
  config['generate'] = True
  t0 = time.perf_counter()
  batches = batches_of(dec_samples, config['dev_batch_size'], dev_collater, False)
  collate_s = time.perf_counter() - t0
  with T.no_grad():
    t0 = time.perf_counter()
    dec_agent.run(batches[0], train=False)
    warm = time.perf_counter() - t0
    forward_s[0] = 0.0
    t0 = time.perf_counter()
    for b in batches:
      dec_agent.run(b, train=False)
    dt = time.perf_counter() - t0
  config['generate'] = False
  steps = [int(b['trg_vec'].shape[1]) for b in batches]
  rows = [int(b['batch_size']) for b in batches]
  return {'samples': n_dec, 'batches': len(batches), 'seconds': dt,
          'samples_per_s': n_dec / dt, 'forward_s': forward_s[0],
          'forward_samples_per_s': n_dec / forward_s[0], 'warmup_s': warm,
          'collate_s': collate_s, 'steps': steps, 'rows': rows,
          'row_steps': sum(r * s for r, s in zip(rows, steps))}


def os_threads():
  try:
    return len(os.listdir('/proc/self/task'))
  except OSError:
    return -1


info = {'torch': T.__version__, 'torch_threads': T.get_num_threads(),
        'schedulable_cpus': len(os.sched_getaffinity(0)),
        'omp_num_threads': os.environ.get('OMP_NUM_THREADS', ''),
        'vocab': config['vocab_len'],
        'params': sum(p.numel() for p in train_model.parameters() if p.requires_grad),
        'train_samples': n_train, 'decode_samples': n_dec,
        'train_sha': digest(train_samples), 'decode_sha': digest(dec_samples)}
say({'ready': info})
for line in sys.stdin:
  cmd = line.strip()
  if cmd == 'quit':
    break
  if cmd == 'round':
    out = {'train': train_round(), 'decode': decode_round()}
    out['os_threads'] = os_threads()
    say(out)
'''


# ---------------------------------------------------------------------------
# Our side (runs in this repository's Python with --_worker_ours SPEC).
# ---------------------------------------------------------------------------
def _say(obj):
  sys.stdout.write(MARK + json.dumps(obj) + '\n')
  sys.stdout.flush()


def _os_threads() -> int:
  try:
    return len(os.listdir('/proc/self/task'))
  except OSError:
    return -1


def our_worker(spec_path: str) -> None:
  """Builds data and programs once; answers 'round' with one measurement."""
  import hashlib   # pylint: disable=g-import-not-at-top
  spec = json.loads(pathlib.Path(spec_path).read_text())
  sys.path.insert(0, str(REPO))
  import jax   # pylint: disable=g-import-not-at-top
  import numpy as np   # pylint: disable=g-import-not-at-top
  from monoloc_jax import validation   # pylint: disable=g-import-not-at-top
  from monoloc_jax import inference   # pylint: disable=g-import-not-at-top
  from monoloc_jax import input_pipeline as ip   # pylint: disable=g-import-not-at-top
  from monoloc_jax import backbones   # pylint: disable=g-import-not-at-top
  from monoloc_jax import multiseed   # pylint: disable=g-import-not-at-top
  from monoloc_jax import train   # pylint: disable=g-import-not-at-top
  from monoloc_jax.configs import default   # pylint: disable=g-import-not-at-top

  config = default.get_config()
  config.task, config.variant = spec['task'], spec['model']
  config.batch_size, config.eval_batch_size = spec['batch_size'], spec['eval_batch_size']
  config.train_size, config.eval_size = spec['train_samples'], spec['decode_samples']
  config.test_splits, config.data_dir = spec['decode_split'], spec['data_dir']
  config.data_seed = spec['data_seed']
  config.source_eos_tasks = spec['task'] if spec['source_eos'] else ''
  config.gru.decoder_backward, config.seed_strategy = 'autodiff', 'auto'   # the benchmark's
  validation.validate(config)
  data = ip.load_data(config)
  split = data.tests[spec['decode_split']]
  vocab = data.vocab
  model = backbones.from_config(config, vocab)
  programs = train.make_train_programs(model, train.make_optimizer(config), 'auto')
  eval_programs = inference.make_eval_programs(model, 'auto')
  batch_size, eval_batch = spec['batch_size'], spec['eval_batch_size']
  from monoloc_jax import benchmark   # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp   # pylint: disable=g-import-not-at-top
  # Forward + backward = 3 x the forward count, valid tokens only.
  train_flops = 3 * benchmark.model_flops(config, model.variant, len(vocab),
                                          data.train.src_len, data.train.tgt_len)

  def gemm_gflops(m, k, n, seconds=0.5):
    """float32 [m, k] x [k, n] alone, jitted, repeated for about `seconds`."""
    x, y = jnp.ones((m, k), jnp.float32), jnp.ones((k, n), jnp.float32)
    f = jax.jit(jnp.matmul)
    f(x, y).block_until_ready()
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
      for _ in range(8):
        out = f(x, y)
      out.block_until_ready()
      reps += 8
    return 2 * m * k * n * reps / (time.perf_counter() - t0) / 1e9

  def digest(enc):
    h = hashlib.sha256()
    for i in range(len(enc)):
      src = [vocab.tokens[t] for t in enc.src[i, :enc.src_len[i]]]
      trg = [vocab.tokens[t] for t in enc.tgt[i, :enc.tgt_len[i]]]
      h.update((' '.join(src) + '\t' + ' '.join(trg) + '\n').encode())
    return h.hexdigest()[:16]

  # Training, as benchmark.measure's one-seed pass.
  batches = list(ip.train_batches(data.train, batch_size, [0], 0, 0, vocab.sos_id))
  state = train.create_train_state(programs, [0], batches[0])
  # Decoding parameters: a fresh (untrained) initialisation, as the benchmark's.
  dec_params = train.create_train_state(programs, [0], batches[0]).params

  def warm(st):
    stats = train.EpochStats.zeros(1)
    seen = set()
    for b in batches:
      shape = (b.src.shape, b.tgt_in.shape)
      if shape not in seen:
        seen.add(shape)
        st, stats = programs.train_step(st, b, stats)
    jax.block_until_ready(stats)
    return st

  # Decoding batches: the authors' (file order, exact widths and steps) and the benchmark's.
  n_dec = len(split)
  equal = []
  for start in range(0, n_dec, eval_batch):
    idx = np.arange(start, min(start + eval_batch, n_dec))
    steps = int(split.tgt_len[idx].max())
    b = ip._make_batch(split, idx, int(split.src_len[idx].max()), steps,   # pylint: disable=protected-access
                       vocab.sos_id)
    equal.append((b, steps))
  bench = [(b, steps) for _, b, steps in ip.eval_batches(split, eval_batch, vocab.sos_id)]

  def decode(which):
    seen = set()
    t0 = time.perf_counter()
    for b, steps in which:
      if (b.src.shape, steps) not in seen:
        seen.add((b.src.shape, steps))
        tok, _ = eval_programs.greedy(dec_params, b.src, b.src_len, steps)
        jax.block_until_ready(tok)
    warm_s = time.perf_counter() - t0
    outs = []
    t0 = time.perf_counter()
    for b, steps in which:
      tok, _ = eval_programs.greedy(dec_params, b.src, b.src_len, steps)
      outs.append(tok)
    jax.block_until_ready(outs)
    dt = time.perf_counter() - t0
    row_steps = row_steps_run = 0
    steps_run = []
    for (b, steps), tok in zip(which, outs):
      is_eos = np.asarray(tok)[0] == vocab.eos_id        # [rows, steps]
      run = int(is_eos.argmax(1).max()) + 1 if is_eos.any(1).all() else steps
      steps_run.append(run)
      row_steps += b.src.shape[0] * steps
      row_steps_run += b.src.shape[0] * run
    return {'samples': n_dec, 'batches': len(which), 'seconds': dt,
            'samples_per_s': n_dec / dt, 'warmup_s': warm_s,
            'steps': [s for _, s in which], 'steps_run': steps_run,
            'rows': [int(b.src.shape[0]) for b, _ in which],
            'row_steps': row_steps, 'row_steps_run': row_steps_run}

  info = {'jax': jax.__version__, 'backend': jax.default_backend(),
          'device': str(jax.devices()[0]), 'schedulable_cpus': len(os.sched_getaffinity(0)),
          'xla_flags': os.environ.get('XLA_FLAGS', ''), 'vocab': len(vocab),
          'params': int(backbones.count_params(dec_params)),
          'seed_strategy': multiseed.resolve('auto'), 'decoder_backward': 'autodiff',
          'train_samples': len(data.train), 'decode_samples': n_dec,
          'train_batches': len(batches),
          'train_sha': digest(data.train), 'decode_sha': digest(split)}
  _say({'ready': info})
  for line in sys.stdin:
    cmd = line.strip()
    if cmd == 'quit':
      break
    if cmd != 'round':
      continue
    t0 = time.perf_counter()
    state = warm(state)
    warm_s = time.perf_counter() - t0
    stats = train.EpochStats.zeros(1)
    t0 = time.perf_counter()
    for b in batches:
      state, stats = programs.train_step(state, b, stats)
    jax.block_until_ready(stats)
    dt = time.perf_counter() - t0
    n_train = len(data.train)
    out = {'train': {'samples': n_train, 'batches': len(batches), 'seconds': dt,
                     'samples_per_s': n_train / dt, 'warmup_s': warm_s},
           'decode_equal': decode(equal), 'decode_benchmark': decode(bench)}
    h = config.hidden_dim
    out['arith'] = {'train_flops_per_sample': train_flops / n_train,
                    'gemm_large_gflops': gemm_gflops(1024, 1024, 1024),
                    'gemm_step_gflops': gemm_gflops(batch_size, h, 3 * h),
                    'gemm_step_shape': [batch_size, h, 3 * h]}
    out['os_threads'] = _os_threads()
    _say(out)


# ---------------------------------------------------------------------------
# Worker processes.
# ---------------------------------------------------------------------------
class WorkerError(Exception):
  pass


class Worker:
  """A pinned child process that answers requests with one MARK-prefixed JSON line."""

  def __init__(self, name: str, cmd: List[str], cores: Sequence[int], env: Dict[str, str],
               cwd: pathlib.Path, log: pathlib.Path):
    self.name, self.log_path = name, log
    self._log = open(log, 'w', encoding='utf-8')   # pylint: disable=consider-using-with
    cores = set(cores)
    self.proc = subprocess.Popen(   # pylint: disable=consider-using-with
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
        env=env, cwd=cwd, preexec_fn=lambda: os.sched_setaffinity(0, cores))

  def read(self) -> Dict[str, Any]:
    for line in self.proc.stdout:
      if line.startswith(MARK):
        return json.loads(line[len(MARK):])
      self._log.write(line)
    self._log.flush()
    self.proc.wait()
    tail = '\n'.join(self.log_path.read_text(errors='replace').splitlines()[-25:])
    raise WorkerError(f'the {self.name} worker exited ({self.proc.returncode}) without '
                      f'answering; last lines of {self.log_path}:\n{tail}')

  def request(self, cmd: str) -> Dict[str, Any]:
    self.proc.stdin.write(cmd + '\n')
    self.proc.stdin.flush()
    return self.read()

  def close(self) -> None:
    if self.proc.poll() is None:
      try:
        self.proc.stdin.write('quit\n')
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
      except (OSError, subprocess.TimeoutExpired):
        self.proc.kill()
        self.proc.wait()
    self._log.close()


def git_describe(path: pathlib.Path) -> str:
  proc = subprocess.run(['git', '-C', str(path), 'rev-parse', '--short', 'HEAD'],
                        capture_output=True, text=True, check=False)
  head = proc.stdout.strip() or 'unknown commit'
  dirty = subprocess.run(['git', '-C', str(path), 'status', '--porcelain', '--untracked-files=no'],
                         capture_output=True, text=True, check=False).stdout.strip()
  return head + (' + uncommitted changes' if dirty else '')


# ---------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------
def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
      description='Alternates the authors\' trainer and this library on identical work and '
                  'prints per-round and median speed ratios (see the module docstring).')
  p.add_argument('--authors_code', default='', help='checkout of JRC1995/'
                 'MonotonicLocationAttention (@234f5b5) with its virtualenv at <path>/.venv')
  p.add_argument('--authors_python', default='', help='their Python (default '
                 '<authors_code>/.venv/bin/python)')
  p.add_argument('--task', default='recopy', help='our task slug')
  p.add_argument('--model', default='onestep', help='our variant slug')
  p.add_argument('--rounds', type=int, default=3)
  p.add_argument('--train_samples', type=int, default=0,
                 help='first N training examples per timing on both sides (0 = all)')
  p.add_argument('--batch_size', type=int, default=32)
  p.add_argument('--eval_batch_size', type=int, default=256)
  p.add_argument('--decode_split', default='test_100')
  p.add_argument('--decode_samples', type=int, default=0,
                 help='first N examples of --decode_split (0 = all)')
  p.add_argument('--threads', type=int, default=1,
                 help='torch intra-op threads (default 1, the authors\' run.py setting; '
                 '0 = as many as --cores, like XLA:CPU)')
  p.add_argument('--cores', default='', help='CPU ids both workers are pinned to, e.g. 0,1 '
                 'or 0-3 (default: every CPU this process may use)')
  p.add_argument('--data_seed', type=int, default=0)
  p.add_argument('--data_dir', default='', help='task files (Lookup, SCAN, CFQ)')
  p.add_argument('--machine', default='', help='a label for the machine line')
  p.add_argument('--json_out', default='', help='write every figure to this JSON file')
  p.add_argument('--keep_tmp', action='store_true', help='keep the temporary folder')
  p.add_argument('--target_ratio', type=float, default=12.0,
                 help='the training ratio whose FLOP rate the arithmetic line states')
  p.add_argument('--_worker_ours', default='', help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if not args.target_ratio > 0:
    raise UsageError(f'--target_ratio must be above 0, not {args.target_ratio}')
  for name in ('rounds', 'batch_size', 'eval_batch_size'):
    if getattr(args, name) < 1:
      raise UsageError(f'--{name} must be at least 1')
  for name in ('train_samples', 'decode_samples', 'threads'):
    if getattr(args, name) < 0:
      raise UsageError(f'--{name} must be 0 or more')
  return args


def run(args: argparse.Namespace) -> int:
  authors_code, authors_python = check_authors_code(args.authors_code, args.authors_python)
  cores = parse_cores(args.cores)
  threads = args.threads or len(cores)
  sys.path.insert(0, str(AUTHORS_DIR))
  sys.path.insert(0, str(REPO))
  import export_data   # pylint: disable=g-import-not-at-top
  import run as authors_run   # pylint: disable=g-import-not-at-top
  if args.task not in export_data.DATASETS:
    raise UsageError(f'--task={args.task}: one of {", ".join(sorted(export_data.DATASETS))}')
  if args.model not in authors_run.MODELS:
    raise UsageError(f'--model={args.model}: one of {", ".join(sorted(authors_run.MODELS))}')
  if not args.decode_split.startswith('test_'):
    raise UsageError(f'--decode_split={args.decode_split}: give a test split, e.g. test_100')
  data_dir = args.data_dir or (str(DEFAULT_DATA_DIRS[args.task])
                               if args.task in DEFAULT_DATA_DIRS else '')
  source_eos = args.task in export_data.SOURCE_EOS_TASKS
  machine = machine_description(args.machine)
  load_start = load_average()

  tmp = pathlib.Path(tempfile.mkdtemp(prefix='side_by_side_'))
  workers: Dict[str, Worker] = {}
  try:
    print(f'exporting {args.task} to {tmp}/processed_data ...', flush=True)
    try:
      folder = export_data.export(args.task, args.data_seed, data_dir, tmp / 'processed_data',
                                  source_eos)
    except export_data.errors.MonolocError as e:
      raise UsageError(str(e)) from None
    decode_key = export_data.split_key(args.decode_split)[1]
    if not (folder / f'test_{decode_key}.jsonl').exists():
      raise UsageError(f'--decode_split={args.decode_split}: {args.task} has no such split')
    settings = {
        'task': args.task, 'model': args.model, 'dataset': export_data.DATASETS[args.task],
        'their_model': authors_run.MODELS[args.model], 'rounds': args.rounds,
        'train_samples': args.train_samples, 'batch_size': args.batch_size,
        'eval_batch_size': args.eval_batch_size, 'decode_split': args.decode_split,
        'decode_key': decode_key, 'decode_samples': args.decode_samples,
        'cores': cores, 'threads': threads, 'data_seed': args.data_seed,
        'data_dir': data_dir, 'source_eos': source_eos,
        'authors_code': str(authors_code), 'authors_python': str(authors_python),
        'data_folder': str(folder),
    }
    spec = tmp / 'spec.json'
    spec.write_text(json.dumps(settings))
    driver = tmp / 'authors_driver.py'
    driver.write_text(AUTHORS_DRIVER)
    t_env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                 PYTHONUNBUFFERED='1')
    print('starting the workers (data, model; ours builds its programs) ...', flush=True)
    workers['authors'] = Worker('authors', [str(authors_python), str(driver), str(spec)],
                                cores, t_env, tmp, tmp / 'authors.log')
    workers['ours'] = Worker('ours', [sys.executable, str(pathlib.Path(__file__).resolve()),
                                      '--_worker_ours', str(spec)],
                             cores, dict(os.environ, PYTHONUNBUFFERED='1'), REPO,
                             tmp / 'ours.log')
    ready = {name: w.read()['ready'] for name, w in workers.items()}
    settings['train_samples'] = ready['ours']['train_samples']
    settings['decode_samples'] = ready['ours']['decode_samples']
    print('both ready; round 1 includes our compile (reported separately) ...', flush=True)
    rounds = []
    for k in range(1, args.rounds + 1):
      order = ('authors', 'ours') if k % 2 else ('ours', 'authors')
      res = {side: workers[side].request('round') for side in order}
      r = {'round': k, 'order': list(order), 'authors': res['authors'], 'ours': res['ours'],
           'ratios': round_ratios(res['authors'], res['ours'])}
      r['arith'] = arithmetic(r, args.target_ratio)
      if k == 1:
        a, o = ready['authors'], ready['ours']
        a.update(git=git_describe(authors_code), os_threads=res['authors']['os_threads'])
        o.update(git=git_describe(REPO), os_threads=res['ours']['os_threads'])
        setup = {'machine': machine, 'load_start': load_start, 'settings': settings,
                 'authors': a, 'ours': o,
                 'same_data': (a['train_sha'] == o['train_sha']
                               and a['decode_sha'] == o['decode_sha']),
                 'conditions': conditions_text(settings)}
        print(format_header(setup), flush=True)
      print(format_round(r), flush=True)
      rounds.append(r)
    summary = summarize(rounds)
    summary['compile_s'] = {'train': rounds[0]['ours']['train']['warmup_s'],
                            'decode_equal': rounds[0]['ours']['decode_equal']['warmup_s'],
                            'decode_benchmark': rounds[0]['ours']['decode_benchmark']['warmup_s']}
    print(format_summary(summary, machine))
    print(f"our compile (+ one run of each shape), round 1: training "
          f"{summary['compile_s']['train']:.1f} s, decoding equal "
          f"{summary['compile_s']['decode_equal']:.1f} s, benchmark condition "
          f"{summary['compile_s']['decode_benchmark']:.1f} s")
    load_end = load_average()
    print(f'load average at end: {load_end}')
    if not setup['same_data']:
      print('WARNING: the two sides did not read the same examples (hashes differ).')
    if args.json_out:
      pathlib.Path(args.json_out).write_text(json.dumps(
          {'setup': setup, 'rounds': rounds, 'summary': summary, 'load_end': load_end},
          indent=1) + '\n')
      print(f'wrote {args.json_out}')
    return 0
  finally:
    for w in workers.values():
      w.close()
    if args.keep_tmp:
      print(f'kept {tmp}')
    else:
      shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
  try:
    args = parse_args(argv)
    if args._worker_ours:   # pylint: disable=protected-access
      our_worker(args._worker_ours)   # pylint: disable=protected-access
      return 0
    return run(args)
  except UsageError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  except WorkerError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1


if __name__ == '__main__':
  sys.exit(main())
