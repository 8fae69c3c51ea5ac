"""Writes notebooks/monoloc_jax_colab.ipynb (without outputs) from the cells below.

  python notebooks/make_notebook.py          # regenerate after editing this file
  python notebooks/make_notebook.py --check  # exit 1 if the committed notebook is stale

Edit the notebook here, not in Jupyter, so that the committed .ipynb stays
output-free and reviewable; tests/notebook_test.py checks the two agree and
runs the notebook top to bottom with MONOLOC_NOTEBOOK_SMOKE=1.
"""

import pathlib
import re
import sys
from typing import Optional

import nbformat

NOTEBOOK = pathlib.Path(__file__).resolve().parent / 'monoloc_jax_colab.ipynb'
PYPROJECT = NOTEBOOK.parent.parent / 'pyproject.toml'
NOTEBOOK_PATH = 'notebooks/monoloc_jax_colab.ipynb'
BRANCH = 'main'
# Wall time of the whole notebook, top to bottom with nbclient, package already
# installed: minutes on this repository's 2-core x86 CPU machine while it ran other
# jobs (load about 7). The full setting: 466 s (249 s of CPU time); the smoke
# setting: 134 s (66 s). GPU and TPU: not measured (MEASUREMENTS.md §1).
CPU_MINUTES = {'full': 8, 'smoke': 2}


def repo_url() -> Optional[str]:
  """The published repository: pyproject.toml's [project.urls] Repository, the one place;
  None while none is configured (then the notebook has no Colab badge and no git
  install: its install cell takes a wheel or a directory, README "Colab")."""
  m = re.search(r'^Repository\s*=\s*"([^"]+)"', PYPROJECT.read_text(encoding='utf-8'), re.M)
  return m.group(1).rstrip('/') if m else None


def colab_url(url: str) -> str:
  """The Open-in-Colab address of the notebook in the GitHub repository `url`."""
  return (url.replace('https://github.com/', 'https://colab.research.google.com/github/')
          + f'/blob/{BRANCH}/{NOTEBOOK_PATH}')


BADGE = '[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab})\n\n'

INTRO = """\
{badge}# Monotonic location attention: length generalization in JAX

This notebook reproduces the core result of **"Monotonic Location Attention for
Length Generalization"** (Ray Chowdhury & Caragea, ICML 2023) with
{package_link}.

**What it needs.** Any runtime type (*Runtime → Change runtime type*): CPU,
GPU or TPU. Reverse Copy is generated in code, so there is no data to download.
The first code cell installs `monoloc_jax`
({install_from}), then checks that the installed JAX uses the runtime's TPU or
GPU and installs the matching `jax[tpu]` / `jax[cuda12]` when it does not.

**How long it takes**, the whole notebook top to bottom:

| runtime | full setting (2 models × 3 seeds, 3 epochs) | smoke setting (`MONOLOC_NOTEBOOK_SMOKE=1`) |
|---|---|---|
| CPU, 2 cores | about {cpu_full} min (measured) | about {cpu_smoke} min (measured) |
| GPU | not measured | not measured |
| TPU | not measured | not measured |

The CPU times were measured with the package already installed (the pip install
is extra), on a 2-core x86 machine that was running other jobs at the same time
(load about 7). In the full setting each model's first epoch takes about 1.5 min
(it compiles) and the others 30–45 s.

A GRU seq2seq model learns **Reverse Copy** (output = the input reversed) from
inputs of 5–10 digits, and is then tested on inputs of 15, 30 and **100** digits.
Two cross-attentions are compared:

* **Relative** (relative positional attention, Dai et al. 2019) scores every
  input position from its content and its offset to the current step. It learns
  the task in the training range but its attention loses its way on long inputs.
* **OneStepAttn** (the paper's variant of Dubois et al.'s location attention)
  places a Gaussian at a mean μ that moves by (about) one input position per
  output step, from a start point chosen by a direction gate α_dir. A length-100
  input is then just more of the same steps.

What you will see:

1. the install and the detected devices (TPU, GPU or CPU);
2. one location-attention distribution, computed by the library's jittable kernels;
3. both models trained on Reverse Copy, **three seeds each in one vmapped
   program**: a single seed can settle in a basin that fits the training
   lengths and does not extrapolate, which is why the paper reports medians
   over seeds;
4. the accuracy-versus-length table and curve (training lengths shaded; the
   line is the median over seeds, the dots single seeds);
5. the attention heatmaps of a length-100 example, decoded by each model's
   **best-dev seed** (named in the title): OneStepAttn walks the anti-diagonal
   one step at a time; beside each heatmap, sharing its output-step axis, are the
   per-step values μ, σ and step where the variant has them.

Runs are saved to Google Drive when you allow it (step 4), so a disconnect
loses nothing: rerunning the notebook reloads finished runs. The smoke setting
(the test suite's) is a tiny one: the models are then undertrained and the
figures only show that everything runs.
"""

INSTALL = """\
# 1. Install monoloc_jax, then the JAX build for this runtime. The package comes from
# the first of: nothing to do when monoloc_jax is already importable; MONOLOC_PACKAGE
# (an environment variable, or set it below): a wheel file, a directory holding the
# package, or a git URL; the checkout holding this notebook (pip install -e); a
# monoloc_jax-*.whl in the working directory (on Colab: /content, upload it with the
# Files pane); the published repository (REPO_URL, when one is configured); on
# Colab, an upload prompt for the wheel. README "Colab" says how to build the wheel.
import glob
import importlib
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

# os.environ['MONOLOC_PACKAGE'] = '/content/monoloc_jax-{package_version}-py3-none-any.whl'
REPO_URL = {repo_literal}   # pyproject.toml's [project.urls] Repository{repo_note}
SMOKE = os.environ.get('MONOLOC_NOTEBOOK_SMOKE') == '1'   # tiny CPU setting (the test suite's)


def find_checkout():
  \"\"\"The repository root holding this notebook (or $MONOLOC_REPO), if any.\"\"\"
  if os.environ.get('MONOLOC_REPO'):
    return pathlib.Path(os.environ['MONOLOC_REPO']).resolve()
  here = pathlib.Path.cwd().resolve()
  for d in (here, *here.parents):
    if (d / 'pyproject.toml').exists() and (d / 'monoloc_jax' / '__init__.py').exists():
      return d
  return None


def package_source(repo_url):
  \"\"\"(kind, what) to pip-install: kind 'wheel', 'directory', 'checkout' or 'git';
  None when there is nothing to install from (see the order above).\"\"\"
  given = os.environ.get('MONOLOC_PACKAGE', '').strip()
  if given:
    if given.startswith('git+') or '://' in given:
      return 'git', 'monoloc_jax @ ' + (given if given.startswith('git+') else 'git+' + given)
    path = pathlib.Path(given).expanduser().resolve()
    if not path.exists():
      raise SystemExit(f'MONOLOC_PACKAGE={given}: no such file or directory')
    return ('directory' if path.is_dir() else 'wheel'), str(path)
  checkout = find_checkout()
  if checkout is not None:
    return 'checkout', str(checkout)
  wheels = sorted(glob.glob('monoloc_jax-*.whl'))
  if wheels:
    return 'wheel', str(pathlib.Path(wheels[-1]).resolve())
  if repo_url:
    return 'git', f'monoloc_jax @ git+{repo_url}'
  return None


def pip_target(source):
  \"\"\"The pip install arguments of a package_source().\"\"\"
  kind, what = source
  return ['-e', what] if kind == 'checkout' else [what]


def detect_hardware(environ=os.environ, exists=os.path.exists, which=shutil.which):
  \"\"\"'tpu', 'gpu' or 'cpu': the accelerator this machine has, whatever jax is installed.\"\"\"
  if (environ.get('TPU_ACCELERATOR_TYPE') or environ.get('COLAB_TPU_ADDR')
      or exists('/dev/accel0')):
    return 'tpu'
  if which('nvidia-smi') or exists('/dev/nvidia0'):
    return 'gpu'
  return 'cpu'


def jax_for_runtime(hardware, backend, jax_version):
  \"\"\"The pip requirement that makes jax use `hardware`, or None when it already does.\"\"\"
  extra = {'gpu': 'cuda12', 'tpu': 'tpu'}.get(hardware)
  if extra is None or backend == hardware:
    return None
  return f'jax[{extra}]=={jax_version}'


def installed_jax():
  \"\"\"(version, default backend) of the installed jax, asked in a fresh interpreter.\"\"\"
  out = subprocess.run([sys.executable, '-c', 'import jax; print(jax.__version__, '
                        'jax.default_backend())'], capture_output=True, text=True, check=True)
  version, backend = out.stdout.split()[-2:]
  return version, backend


if importlib.util.find_spec('monoloc_jax') is not None:
  print('monoloc_jax is already installed: nothing to install.')
else:
  source = package_source(REPO_URL)
  if source is None and importlib.util.find_spec('google.colab') is not None:
    from google.colab import files  # pylint: disable=g-import-not-at-top
    print('Upload the monoloc_jax wheel (monoloc_jax-*.whl, README "Colab"):')
    wheels = [name for name in files.upload() if name.endswith('.whl')]
    source = ('wheel', str(pathlib.Path(wheels[-1]).resolve())) if wheels else None
  if source is None:
    raise SystemExit('monoloc_jax is not installed and there is nothing to install it from: '
                     'set MONOLOC_PACKAGE to a wheel, a directory or a git URL, or put '
                     f'monoloc_jax-*.whl in {os.getcwd()}')
  cmd = [sys.executable, '-m', 'pip', 'install', '-q', *pip_target(source)]
  print(f'installing monoloc_jax from the {source[0]} {source[1]}')
  print('$', ' '.join(cmd))
  subprocess.run(cmd, check=True)
  importlib.invalidate_caches()
  if source[0] == 'checkout' and source[1] not in sys.path:
    sys.path.insert(0, source[1])  # an editable install is only seen by new interpreters

hardware = detect_hardware()
if hardware == 'cpu':
  print('Runtime: CPU. The jax that pip installed with monoloc_jax runs on it: nothing to add.')
else:
  version, backend = installed_jax()
  requirement = jax_for_runtime(hardware, backend, version)
  if requirement is None:
    print(f'Runtime: {hardware.upper()}. The installed jax {version} already uses it '
          f'(default backend: {backend}): nothing to install.')
  else:
    print(f'Runtime: {hardware.upper()}, but the installed jax {version} runs on {backend}: '
          f'installing {requirement}.')
    cmd = [sys.executable, '-m', 'pip', 'install', '-q', requirement]
    print('$', ' '.join(cmd))
    subprocess.run(cmd, check=True)
    if 'jax' in sys.modules:
      print('jax was imported before this install: restart the runtime (Runtime → Restart '
            'session) and run the notebook again.')

import monoloc_jax
print(f'monoloc_jax {monoloc_jax.__version__} from', pathlib.Path(monoloc_jax.__file__).parent,
      '| smoke setting' if SMOKE else '| full setting')

%matplotlib inline
from IPython.display import display
"""

DEVICES_MD = """\
## 2. Devices

JAX picks the best backend it finds. Every line below says which platforms were
detected; training in step 4 runs on the default backend.
"""

DEVICES = """\
import jax

backend = jax.default_backend()
print(f'jax {jax.__version__}; default backend: {backend}; devices: {jax.devices()}')
for platform in ('tpu', 'gpu', 'cpu'):
  try:
    found = jax.devices(platform)
  except Exception:  # pylint: disable=broad-except  (jax raises RuntimeError for absent backends)
    found = []
  status = f'{len(found)} x {found[0].device_kind}' if found else 'not detected'
  print(f'  {platform.upper():>3}: {status}')
print({
    'tpu': 'TPU detected: training runs on the TPU.',
    'gpu': 'GPU detected: training runs on the GPU.',
    'cpu': 'No accelerator detected: everything runs on the CPU (the full setting takes '
           'about {cpu_full} min on 2 cores).',
}.get(backend, f'Running on {backend}.'))
"""

MESH = """\
# Seeds over devices: train.train_and_evaluate lays a run's seed axis over a
# jax.sharding.Mesh of every device (monoloc_jax.sharding), one seed per TPU core
# when the seed count allows; with fewer seeds the batch rows are split instead.
from monoloc_jax import sharding

n_devices = jax.device_count()
for seeds in sorted({1, 5, n_devices}):
  print(sharding.plan(seeds, batch_size=32).describe())
print(f'{n_devices} seed(s) train at once, one per device (config.seeds = {n_devices}).'
      if n_devices > 1 else 'One device: the seeds of a run train together in one vmapped program.')
"""

KERNEL_MD = """\
## 3. One location-attention distribution

The kernels in `monoloc_jax.attention` are pure, jittable functions. Encoder
position *i* of *s* sits at the normalised position *i / (s − 1)* (Eq. 7); the
location attention is a Gaussian over those positions with mean μ and width σ,
renormalised over the valid ones (Eq. 5–9). OneStepAttn moves μ by one position
(1 / (s − 1)) per output step.
"""

KERNEL = """\
import jax.numpy as jnp
import numpy as np
from monoloc_jax import attention
from monoloc_jax import viz

length, mu, sigma = 12, 0.4, 0.08   # s positions; mu, sigma in normalised units


@jax.jit
def location_attention(mu, sigma):
  positions = attention.normalized_positions(jnp.array([length]), length)     # [1, s]
  return attention.gaussian_location_attention(mu[None], sigma[None], positions, positions <= 1.0)[0]


weights = location_attention(jnp.float32(mu), jnp.float32(sigma))
print('weights:', np.round(np.asarray(weights), 3), f' sum = {float(weights.sum()):.4f}')
display(viz.plot_location_distribution(mu, sigma, length, weights=[weights]))
"""

TRAIN_MD = """\
## 4. Train OneStepAttn and Relative on Reverse Copy

A small protocol: the paper's data (10,000 training inputs of 5–10 digits),
**3 seeds (0, 1, 2) trained together in one vmapped program**, 3 epochs (the
paper trains up to 100), and 500 test inputs per length. On a 2-core CPU an
epoch takes 30–45 s, the first about 1.5 min (compilation); on a GPU or TPU it
was not measured. The smoke setting (`MONOLOC_NOTEBOOK_SMOKE=1`) trains on 300
inputs for one epoch and tests 30 inputs of lengths 15 and 100.

**Where the runs go.** On Colab, with `USE_DRIVE = True`, the notebook asks to
mount your Google Drive and writes to `MyDrive/monoloc_jax_runs/`; a finished
run found there is loaded instead of retrained, and an interrupted one resumes
from its last epoch. Elsewhere (or with `USE_DRIVE = False`) runs go to
`./monoloc_jax_runs` (`MONOLOC_NOTEBOOK_WORKDIR` overrides both); the smoke
setting uses a temporary directory. Each run also writes TensorBoard files:
`%load_ext tensorboard` and `%tensorboard --logdir <root>` show them.
"""

TRAIN = """\
import json
import tempfile
import time

from monoloc_jax import inference
from monoloc_jax import train
from monoloc_jax.configs import default
from monoloc_jax import variants

MODELS = ('onestep', 'relative')
SEEDS = 3                 # trained together in one vmapped program
USE_DRIVE = True          # on Colab: keep the runs in Google Drive


def runs_root():
  \"\"\"Where the runs go (see the text above).\"\"\"
  if os.environ.get('MONOLOC_NOTEBOOK_WORKDIR'):
    return pathlib.Path(os.environ['MONOLOC_NOTEBOOK_WORKDIR'])
  if SMOKE:
    return pathlib.Path(tempfile.mkdtemp(prefix='monoloc_notebook_'))
  if USE_DRIVE and importlib.util.find_spec('google.colab') is not None:
    from google.colab import drive  # pylint: disable=g-import-not-at-top
    drive.mount('/content/drive')
    return pathlib.Path('/content/drive/MyDrive/monoloc_jax_runs')
  return pathlib.Path('monoloc_jax_runs').resolve()


def make_config(model):
  c = default.get_config()
  c.task, c.variant, c.seeds, c.progress = 'reverse_copy', model, SEEDS, False
  if SMOKE:
    c.train_size, c.eval_size, c.max_epochs = 300, 30, 1
    c.test_splits = 'test_15,test_100'
    c.eval_batch_size, c.bucket_batches = 32, False   # fewer programs to compile on a CPU
  else:
    c.train_size, c.eval_size, c.max_epochs = 0, 500, 3
    c.test_splits = 'all'                             # test_iid and lengths 15 ... 100
  return c


root = runs_root() / ('smoke' if SMOKE else 'reverse_copy_3epochs')
print('runs in', root)
workdirs, results = {}, {}
for model in MODELS:
  t0 = time.time()
  workdirs[model] = root / model
  done = workdirs[model] / 'results.json'
  if done.exists():          # finished earlier (e.g. before a disconnect): load it
    results[model] = json.loads(done.read_text())
  else:                      # trains, or resumes an interrupted run from its last epoch
    results[model] = train.train_and_evaluate(make_config(model), str(workdirs[model]))
  dev = results[model]['dev']['best_accuracy_per_seed']
  seeds = results[model]['seeds']
  print(f'{variants.get(model).display_name:<12} seeds {", ".join(map(str, seeds))}: '
        f'{results[model]["epochs"]} epoch(s), best dev accuracy per seed '
        f'{", ".join(f"{d:.1f}" for d in dev)}%, {time.time() - t0:.0f}s  -> {workdirs[model]}')
"""

RESULTS_MD = """\
## 5. Accuracy versus length

Sequence accuracy (the whole output must be right) per test length: the median
over the three seeds (the paper's statistic), with each seed's value beside it.
In the figure the line is the median and the hollow dots are single seeds; the
shaded band is the training range; the length axis is logarithmic.
"""

RESULTS = """\
for model in MODELS:
  print(inference.format_table(results[model]['test'], make_config(model)), end='\\n\\n')

splits = list(results[MODELS[0]]['test'])
names = [variants.get(m).display_name + ' (seeds)' for m in MODELS]
print(f"{'length':>8}" + ''.join(f'{name:>30}' for name in names))
for split in splits:
  cells = []
  for m in MODELS:
    r = results[m]['test'][split]
    per_seed = '/'.join(f"{s['accuracy']:.0f}" for s in r['per_seed'])
    cells.append(f"{r['accuracy']:>13.1f}% ({per_seed})".rjust(30))
  print(f"{viz.split_length('reverse_copy', split):>8g}" + ''.join(cells))

display(viz.plot_accuracy_vs_length({variants.get(m).display_name: results[m] for m in MODELS}))
"""

HEATMAP_MD = """\
## 6. Attention on a length-100 input

Each model decodes with its **best-dev seed** (`inference.decode_with_attention`
picks it from `results.json`; pass `seed_index=` for another), and the title
names it. Rows are output steps (the emitted tokens, then `<eos>`), columns the encoder
positions (START, the 100 input digits, END); long axes are labelled
`index:token`. A decode that attends only a narrow band of a long input (a
model that stops early) is cropped to that band, and the title says so. For
Reverse Copy the correct attention is the
anti-diagonal: output step *t* reads input digit 100 − *t*. For OneStepAttn
the dashed red line is μ, and the panels to the right show, for every output
step (the heatmap's rows), μ in input positions, σ in positions and the step
taken in positions; α_dir is in the title. A model that has not chosen a
direction (α_dir between 0 and 1) splits its attention between two mirrored
diagonals, and μ is drawn on both.
"""

HEATMAP = """\
from monoloc_jax import input_pipeline
from monoloc_jax import tasks

source, target = tasks.load('reverse_copy', 'test_100')[0]
print('input (100 digits):', ' '.join(source))
for model in MODELS:
  decoded, = inference.decode_with_attention(
      str(workdirs[model]), [' '.join(source)],
      max_steps=input_pipeline.bucket_length(len(target) + 11))
  correct = sum(a == b for a, b in zip(decoded.output, target))
  print(f'{variants.get(model).display_name}, {decoded.seed.describe()}: {len(decoded.output)} '
        f'tokens out, {correct} of the first {len(target)} correct, exact match: '
        f'{decoded.output == tuple(target)}')
  display(viz.plot_attention(decoded, variant=model))
"""

OUTRO = """\
## What to look for

* With the full setting, OneStepAttn's heatmap is a clean anti-diagonal over
  all 100 inputs: μ starts at END (α_dir picks the backward direction) and
  moves one position per step, so the model is as accurate at length 100 as at
  length 10. Relative attends correctly while the output is short and drifts or
  blurs later, and its accuracy falls off outside the shaded band.
* The seeds differ: look at the per-seed numbers in step 5. A seed that fits the
  training lengths without extrapolating is a known failure mode of this
  setting; the median over seeds and the best-dev seed are robust to it.
* `python experiments/plot.py --workdir=<run>` writes the same figures for any
  run; `monoloc-results <root>/*` tabulates runs; `monoloc-train --task=...
  --model=...` trains the other tasks and the other 19 variants.
"""


_FROM_PYPROJECT = object()


def build(url=_FROM_PYPROJECT) -> nbformat.NotebookNode:
  """The notebook; cell ids are fixed so that regenerating it gives the same file.

  url: the published GitHub repository (default: pyproject.toml's, `repo_url()`);
  None: not published, so no badge, no link and no git install.
  """
  if url is _FROM_PYPROJECT:
    url = repo_url()
  minutes = {'{cpu_full}': str(CPU_MINUTES['full']), '{cpu_smoke}': str(CPU_MINUTES['smoke'])}
  if url:
    intro = (INTRO.replace('{badge}', BADGE.replace('{colab}', colab_url(url)))
             .replace('{package_link}', f'[`monoloc_jax`]({url}#readme)')
             .replace('{install_from}', f'with pip from {url}, or from a wheel or a directory'))
    install = (INSTALL.replace('{repo_literal}', repr(url))
               .replace('{repo_note}', ''))
  else:
    intro = (INTRO.replace('{badge}', '')
             .replace('{package_link}', '`monoloc_jax` (its README.md says how to install it)')
             .replace('{install_from}', 'from a wheel you upload, README "Colab", or from '
                      'the checkout it runs in'))
    install = (INSTALL.replace('{repo_literal}', 'None')
               .replace('{repo_note}', ': none yet, not published'))
  install = install.replace('{package_version}', package_version())
  devices = DEVICES
  for key, value in minutes.items():
    intro, devices = intro.replace(key, value), devices.replace(key, value)
  cells = [('md', intro), ('code', install), ('md', DEVICES_MD), ('code', devices), ('code', MESH),
           ('md', KERNEL_MD), ('code', KERNEL), ('md', TRAIN_MD), ('code', TRAIN),
           ('md', RESULTS_MD), ('code', RESULTS), ('md', HEATMAP_MD), ('code', HEATMAP),
           ('md', OUTRO)]
  nb = nbformat.v4.new_notebook()
  for i, (kind, source) in enumerate(cells):
    make = nbformat.v4.new_markdown_cell if kind == 'md' else nbformat.v4.new_code_cell
    nb.cells.append(make(source.rstrip('\n'), id=f'cell-{i:02d}'))
  nb.metadata = {
      'kernelspec': {'display_name': 'Python 3', 'language': 'python', 'name': 'python3'},
      'language_info': {'name': 'python'},
      'colab': {'provenance': [], 'name': 'monoloc_jax_colab.ipynb'},
  }
  return nb


def package_version() -> str:
  """pyproject.toml's [project] version (the wheel's name in the install cell's example)."""
  m = re.search(r'^version\s*=\s*"([^"]+)"', PYPROJECT.read_text(encoding='utf-8'), re.M)
  return m.group(1)


def render() -> str:
  nb = build()
  nbformat.validate(nb)
  return nbformat.writes(nb) + '\n'


def main(argv) -> int:
  text = render()
  if '--check' in argv[1:]:
    if not NOTEBOOK.exists() or NOTEBOOK.read_text() != text:
      print(f'{NOTEBOOK} is stale: run python notebooks/make_notebook.py', file=sys.stderr)
      return 1
    return 0
  NOTEBOOK.write_text(text)
  print(NOTEBOOK)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
