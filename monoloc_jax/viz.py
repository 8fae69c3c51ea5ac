"""Figures: attention heatmaps, accuracy versus length, training curves.

Every function returns a `matplotlib.figure.Figure` built without pyplot, so
nothing here needs a display or touches pyplot's global figure list; write a
figure with `save(fig, 'x.png')` (or `.svg`), or show it in a notebook with
`IPython.display.display(fig)`. The functions take plain data (a `Decoded`, a
mapping, arrays, a results dict, metrics rows) or, where it makes sense, a run
directory, so they work on synthetic data as well as on finished runs:

    from monoloc_jax import inference, viz
    d, = inference.decode_with_attention('runs/x', ['3 1 4 1 5 9'])
    viz.save(viz.plot_attention(d, variant='onestep'), 'runs/x/attention.png')
    viz.save(viz.plot_accuracy_vs_length({'OneStep': 'runs/x', 'Relative': 'runs/y'}),
             'acc.svg')
    viz.save(viz.plot_training_curves('runs/x'), 'runs/x/training_curves.png')

`experiments/plot.py --workdir=runs/x` writes all three next to results.json.

Tick rule of the heatmap (tests rely on it): an axis with n positions gets a
label at every position when n <= max_tick_labels (default 40); otherwise at
every k-th position, k = ceil(n / max_tick_labels), starting at 0, plus the
last position (so START, END and `<eos>` are always labelled), which replaces
the k-th position before it when the two are less than k/2 apart (their labels
would overlap). Fewer labels are drawn where the figure has no room for
max_tick_labels. Thinned labels
read `index:token` (0-based; encoder position 0 is START), full ones just
`token`. See `tick_positions`.

Lengths on the accuracy curve come from the task (`tasks.get(task).split_lengths`
and `.train_lengths`): a digit task's `test_N` split is drawn at input
length N and `test_iid` (lengths 5-10, as train) at 7.5, in the shaded training
band 5-10. A Lookup task's `test_longK` split (compositions of 4 + K tables)
has 6 + K source tokens (input bits, 4 + K table names, '.'), so the paper's
lengths 7 / 9 / 11 are `test_long1` / `test_long3` / `test_long5`; `test_iid`
has 6 tokens and the training band is 3-6 tokens. The best dev accuracy is drawn
over the dev split's lengths (`dev_range`): 10-15 items for a digit task, just
past the band; 3-7 tokens for Lookup (validation plus 500 rows of length 7), its
diamond at 5 inside the band. SCAN and CFQ have a single
`test` split and no length axis: `plot_accuracy_vs_length` raises
`MonolocError` for them.
"""

import json
import math
import pathlib
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from matplotlib import ticker
from matplotlib.figure import Figure
import numpy as np

from monoloc_jax import errors
from monoloc_jax import rundir

PathLike = Union[str, pathlib.Path]

MAX_TICK_LABELS = 40
# Heatmap layout: cells are square, sized to fit HEATMAP_MAX_INCHES (width, height);
# a decode that attends only inside a band narrower than CROP_FRACTION of the input
# is cropped to that band (weight >= CROP_THRESHOLD, plus CROP_MARGIN columns).
HEATMAP_MAX_INCHES = (14.0, 12.0)
HEATMAP_MIN_INCHES = (4.5, 3.0)
HEATMAP_MAX_ASPECT = 2.5
CROP_FRACTION = 0.6
CROP_THRESHOLD = 0.02
CROP_MARGIN = 2
# Per-step aux values drawn beside the heatmap, in this order: key -> axis label (units).
# μ and σ are drawn in encoder positions (the model's normalised units times s - 1);
# step is in positions per output step already (μ moves by step / (s - 1)).
AUX_PANELS = (('mu', 'μ (input position)'), ('sigma', 'σ (positions)'),
              ('step', 'step (positions)'), ('mix', 'content mix (0–1)'))
PANEL_INCHES = 1.25        # width of each per-step panel
COLORBAR_INCHES = 0.8      # the colorbar under the heatmap
# A reading direction whose share of the attention (α_dir or 1 - α_dir) is below this
# gets no μ line.
MU_MIN_WEIGHT = 0.05
SAVE_FORMATS = ('.png', '.svg')
ACCURACY_LABEL = 'sequence accuracy (%)'
LENGTH_LABEL = 'input length'
BAND_GID = 'training-band'
SEEDS_GID = 'seeds'          # gid prefix of each run's per-seed dots
DEV_GID = 'dev'              # gid prefix of each run's dev point ('dev:<label>')
SEED_DOT_SPREAD = 1.035      # per-seed dots sit this factor apart along the length axis

# Input lengths of the training data, per task family (see the module docstring).


# ---------------------------------------------------------------------------
# Loading.
# ---------------------------------------------------------------------------
def _workdir(path: PathLike) -> pathlib.Path:
  path = pathlib.Path(path)
  if not path.is_dir():
    raise errors.MonolocError(f'workdir {path} does not exist')
  return path


def load_results(workdir: PathLike) -> Dict[str, Any]:
  """results.json of a finished run; MonolocError when it is missing or unreadable."""
  path = _workdir(workdir) / 'results.json'
  if not path.exists():
    raise errors.MonolocError(f'{workdir} has no results.json: the run has not finished '
                              '(train it with monoloc-train first)')
  try:
    return json.loads(path.read_text())
  except ValueError as e:
    raise errors.MonolocError(f'{path} is not valid JSON: {e}') from None


def load_history(workdir: PathLike) -> List[Dict[str, Any]]:
  """The rows of metrics.jsonl (one per epoch); MonolocError when missing or unreadable."""
  path = _workdir(workdir) / 'metrics.jsonl'
  if not path.exists():
    raise errors.MonolocError(f'{workdir} has no metrics.jsonl: no epoch has finished yet')
  try:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  except ValueError as e:
    raise errors.MonolocError(f'{path} is not valid JSON lines: {e}') from None


def save(fig: Figure, path: PathLike, dpi: int = 100) -> pathlib.Path:
  """Writes `fig` as PNG or SVG (chosen by the suffix); returns the path."""
  path = pathlib.Path(path)
  if path.suffix.lower() not in SAVE_FORMATS:
    raise errors.MonolocError(f'cannot save a figure as {path.name!r}; use a '
                              f"{' or '.join(SAVE_FORMATS)} file name")
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=dpi, bbox_inches='tight', format=path.suffix[1:].lower())
  return path


def display_name(variant: Optional[str]) -> str:
  """The paper's name of a variant slug (the slug itself when unknown)."""
  from monoloc_jax import variants  # pylint: disable=g-import-not-at-top
  return variants.VARIANTS[variant].display_name if variant in variants.VARIANTS else (variant or '')


# ---------------------------------------------------------------------------
# Attention heatmap.
# ---------------------------------------------------------------------------
def tick_positions(n: int, max_labels: int = MAX_TICK_LABELS) -> List[int]:
  """Which of n positions get a tick label (the rule in the module docstring)."""
  if n <= 0:
    return []
  k = max(1, math.ceil(n / max(1, max_labels)))
  ticks = list(range(0, n, k))
  if ticks[-1] != n - 1:
    if len(ticks) > 1 and n - 1 - ticks[-1] < k / 2:
      ticks[-1] = n - 1            # too close to the last position: its label would overlap
    else:
      ticks.append(n - 1)
  return ticks


def _tick_labels(labels: Sequence[str], ticks: Sequence[int]) -> List[str]:
  thinned = len(ticks) < len(labels)
  return [f'{i}:{labels[i]}' if thinned else str(labels[i]) for i in ticks]


def _as_decoded(decoded) -> Tuple[np.ndarray, List[str], List[str], Dict[str, Any]]:
  """(attention [R, C], x labels [C], y labels [R], aux) from a Decoded, a mapping or an array."""
  if isinstance(decoded, Mapping):
    get = decoded.get
  elif hasattr(decoded, 'attention'):
    get = lambda k, default=None: getattr(decoded, k, default)
  else:
    get = lambda k, default=None: decoded if k == 'attention' else default
  attention = np.asarray(get('attention'), np.float64)
  if attention.ndim != 2 or attention.size == 0:
    raise errors.MonolocError(f'attention must be a non-empty 2-D array [output steps, input '
                              f'positions]; got shape {attention.shape}')
  rows, cols = attention.shape
  source, output = get('source'), get('output')
  if source is None:
    xlabels = [str(i) for i in range(cols)]
  else:
    xlabels = ['START', *map(str, source), 'END']
    if len(xlabels) != cols:
      raise errors.MonolocError(f'attention has {cols} input positions but the source has '
                                f'{len(source)} tokens (+ START and END = {len(xlabels)})')
  if output is None:
    ylabels = [str(i) for i in range(rows)]
  else:
    ylabels = [*map(str, output), '<eos>'][:rows]
    ylabels += [''] * (rows - len(ylabels))
  aux = dict(get('aux') or {})
  return attention, xlabels, ylabels, aux


def attended_band(attention: np.ndarray, threshold: float = CROP_THRESHOLD,
                  margin: int = CROP_MARGIN) -> Tuple[int, int]:
  """[first, last] column any output step gives weight >= threshold, widened by
  `margin` columns on each side (clipped to the array); all columns when none does."""
  cols = attention.shape[1]
  hit = np.flatnonzero(attention.max(axis=0) >= threshold)
  if not hit.size:
    return 0, cols - 1
  return max(0, int(hit[0]) - margin), min(cols - 1, int(hit[-1]) + margin)


def heatmap_size(rows: int, cols: int) -> Tuple[float, float]:
  """(width, height) in inches of the heatmap: square cells of 0.05-0.18 inches that fit
  in HEATMAP_MAX_INCHES, at least HEATMAP_MIN_INCHES on each side, and at most
  HEATMAP_MAX_ASPECT times as wide as high (then the cells are narrower than high)."""
  cell = min(HEATMAP_MAX_INCHES[0] / cols, HEATMAP_MAX_INCHES[1] / rows)
  cell = min(0.18, max(0.05, cell))
  height = max(HEATMAP_MIN_INCHES[1], cell * rows + 1.2)
  width = max(HEATMAP_MIN_INCHES[0], cell * cols + 1.5)
  # A few output steps over a long input: narrower cells rather than a wide strip.
  return min(width, max(HEATMAP_MIN_INCHES[0], HEATMAP_MAX_ASPECT * height)), height


def _fitting_labels(inches: float, fontsize: float, wanted: int) -> int:
  """How many tick labels fit along `inches` without overlapping (1.6 line heights each)."""
  return max(2, min(wanted, int(inches / (1.6 * fontsize / 72.0))))


def plot_attention(decoded, title: Optional[str] = None, variant: Optional[str] = None,
                   max_tick_labels: int = MAX_TICK_LABELS, cmap: str = 'viridis',
                   crop: bool = True) -> Figure:
  """Heatmap of one decode's attention, with its per-step values beside it.

  Dubois et al.'s Fig. 9: output steps (rows, y: output tokens and `<eos>`)
  against encoder positions (columns, x: START, the source tokens, END).
  Where the decode has location attention, μ (the Gaussian's mean, rescaled
  to encoder positions) is drawn over the heatmap as a dashed line, and one
  narrow panel per available per-step value stands to the right of the heatmap,
  in the order μ, σ, step and content-mix weight. Each panel's y axis is the
  heatmap's output-step axis (shared: row t of the heatmap is y = t of every
  panel), its x axis the value in stated units: μ in input positions (the
  heatmap's own x axis), σ in positions, step in positions per output step,
  the content-mix weight in 0-1. α_dir, the direction gate, goes into the title
  when the variant mixes directions.

  Direction mixing (Eq. 18) attends over e_dir_i = α e_i + (1 - α) e_rev(i);
  the model already maps those weights back to input positions
  (`attention.input_attention`), so columns are input tokens. μ is in e_dir
  units: the Gaussian's weight α sits at input position μ and 1 - α at its
  mirror image 1 - μ, so μ is drawn at both (the weaker line fainter), each
  where its share is at least MU_MIN_WEIGHT (`mu_positions`): a model that has
  not chosen a direction shows two lines on the two attended diagonals.

  Args:
    decoded: an `inference.Decoded`, a mapping with 'attention' [R, C] and optional
      'source' (C - 2 tokens), 'output' (R - 1 tokens), 'aux' (as Decoded.aux),
      or a bare 2-D array (then tick labels are indices).
    title: the figure title; default: the variant's name and the input length.
    variant: the run's variant slug; names the figure and says whether α_dir is
      meaningful. Without it, α_dir is shown whenever aux carries it.
    max_tick_labels: the tick rule's threshold (see `tick_positions`); fewer
      labels are drawn where they would not fit.
    cmap: the heatmap's colour map.
    crop: when every output step attends inside a band narrower than
      CROP_FRACTION of the input (a short or failed decode of a long input), show
      only that band (`attended_band`); tick labels keep the input's indices and
      the title says which positions are shown.

  The default title names the variant, the seed that decoded (`Decoded.seed`,
  with its best dev accuracy) and the input length.
  """
  attention, xlabels, ylabels, aux = _as_decoded(decoded)
  seed = getattr(decoded, 'seed', None) if not isinstance(decoded, Mapping) else decoded.get('seed')
  full_cols = attention.shape[1]
  first, last = attended_band(attention) if crop else (0, full_cols - 1)
  cropped = (last - first + 1) < CROP_FRACTION * full_cols
  if not cropped:
    first, last = 0, full_cols - 1
  attention = attention[:, first:last + 1]
  direction = float(aux['direction']) if 'direction' in aux else 1.0
  rows, cols = attention.shape
  panels = [(key, label, np.asarray(aux[key], np.float64)) for key, label in AUX_PANELS
            if key in aux and np.ndim(aux[key]) == 1 and len(aux[key])]
  show_direction = 'direction' in aux
  if variant is not None:
    from monoloc_jax import variants  # pylint: disable=g-import-not-at-top
    show_direction &= variants.get(variant).direction_mixing

  width, heat_h = heatmap_size(rows, cols)
  fig = Figure(figsize=(width + PANEL_INCHES * len(panels), heat_h + COLORBAR_INCHES),
               layout='constrained')
  grid = fig.add_gridspec(1, 1 + len(panels),
                          width_ratios=[width - 1.0] + [PANEL_INCHES] * len(panels))
  ax = fig.add_subplot(grid[0])
  ax.set_label('attention')
  image = ax.imshow(attention, aspect='auto', interpolation='nearest', cmap=cmap,
                    vmin=0.0, vmax=1.0)
  fig.colorbar(image, ax=ax, label='attention weight', location='bottom', fraction=0.04,
               pad=0.01, shrink=0.6)
  fontsize = 8 if max(rows, cols) <= max_tick_labels else 7
  xt = tick_positions(cols, _fitting_labels(width - 1.5, fontsize, max_tick_labels))
  shown = xlabels[first:last + 1]
  if cropped:
    ax.set_xticks(xt, [f'{first + i}:{shown[i]}' for i in xt], rotation=90, fontsize=fontsize)
  else:
    ax.set_xticks(xt, _tick_labels(shown, xt), rotation=90, fontsize=fontsize)
  yt = tick_positions(rows, _fitting_labels(heat_h - 1.2, fontsize, max_tick_labels))
  ax.set_yticks(yt, _tick_labels(ylabels, yt), fontsize=fontsize)
  ax.xaxis.set_minor_locator(ticker.NullLocator())
  ax.yaxis.set_minor_locator(ticker.NullLocator())
  ax.set_xlabel('input token (encoder position)')
  ax.set_ylabel('output token (decoder step)')
  ax.set_xlim(-0.5, cols - 0.5)
  ax.set_ylim(rows - 0.5, -0.5)
  mu_lines = []
  if 'mu' in aux and np.ndim(aux['mu']) == 1 and len(aux['mu']):
    mu_lines = mu_positions(np.asarray(aux['mu'], np.float64)[:rows], direction, full_cols)
    for name, x, weight in mu_lines:
      ax.plot(x - first, np.arange(len(x)), ls='--', lw=1.0, color='tab:red',
              alpha=_mu_alpha(weight), label=f'μ (Gaussian mean){name}')
    # Named in the axis label, not a legend: a legend box would sit on the attention.
    if len(mu_lines) == 1:
      ax.set_xlabel('input token (encoder position);  dashed red line: μ, the Gaussian mean')
    else:
      ax.set_xlabel('input token (encoder position)\ndashed red lines: μ, the Gaussian mean, '
                    f'read forwards (weight α_dir = {direction:.2f}) and backwards '
                    f'({1 - direction:.2f})')

  if title is None:
    name = display_name(variant) if variant else 'attention'
    if seed is not None:
      dev = '' if seed.dev_accuracy is None else f', best dev {seed.dev_accuracy:.1f}%'
      name += f', seed {seed.seed}{dev}'
    title = f'{name}: input length {full_cols - 2}' if xlabels[0] == 'START' else name
  if cropped:
    title += f'\n(input positions {first}–{last} of 0–{full_cols - 1} shown: the attended band)'

  if show_direction:
    if min(direction, 1 - direction) < MU_MIN_WEIGHT:
      reading = 'backward' if direction < 0.5 else 'forward'
    else:
      reading = f'{direction:.0%} forward, {1 - direction:.0%} backward'
    title += f'   (α_dir = {direction:.2f}: {reading})'
  ax.set_title(title)

  # One panel per per-step value, right of the heatmap: its y axis is the heatmap's
  # output-step axis (shared), its x axis the value in the stated units.
  steps = np.arange(rows)
  for i, (key, label, values) in enumerate(panels):
    pax = fig.add_subplot(grid[1 + i], sharey=ax)
    pax.set_label(f'aux:{key}')
    values = values[:rows]
    if key == 'mu':
      for _, x, weight in mu_lines:
        pax.plot(x - first, steps[:len(x)], marker='.', ms=3, lw=1.0, color='tab:red',
                 alpha=_mu_alpha(weight))
      pax.set_xlim(ax.get_xlim())         # the heatmap's input positions
      pax.xaxis.set_major_locator(ticker.MaxNLocator(4, integer=True))
      pax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f'{v + first:g}'))
    else:
      scale = (full_cols - 1) if key in ('sigma',) else 1.0
      values = values * scale
      pax.plot(values, steps[:len(values)], marker='.', ms=3, lw=1.0)
      finite = values[np.isfinite(values)]
      if finite.size:                      # a flat line stays flat, without an offset label
        lo, hi = float(finite.min()), float(finite.max())
        pad = max(0.1 * (hi - lo), 0.02 * max(abs(lo), abs(hi)), 1e-3)
        pax.set_xlim(lo - pad, hi + pad)
      pax.xaxis.set_major_locator(ticker.MaxNLocator(3))
      pax.ticklabel_format(axis='x', useOffset=False)
    pax.set_xlabel(label, fontsize=8)
    pax.grid(alpha=0.3)
    pax.tick_params(labelsize=7)
    pax.tick_params(axis='y', labelleft=False, labelright=False)
  return fig


def mu_positions(mu: np.ndarray, direction: float, cols: int
                 ) -> List[Tuple[str, np.ndarray, float]]:
  """Where μ sits over input positions: [(name suffix, x [steps], weight)].

  μ is in e_dir units. Direction mixing (Eq. 18) puts weight α_dir of the Gaussian
  at input position μ (s - 1) and 1 - α_dir at its mirror image (1 - μ)(s - 1)
  (`attention.input_attention`); each direction with weight >= MU_MIN_WEIGHT is a
  line, the stronger first. (Their weighted mean would run where there is no
  attention when the model has not chosen a direction.)
  """
  lines = [(', read forwards', mu * (cols - 1), float(direction)),
           (', read backwards', (1.0 - mu) * (cols - 1), 1.0 - float(direction))]
  return sorted((l for l in lines if l[2] >= MU_MIN_WEIGHT), key=lambda l: -l[2])


def _mu_alpha(weight: float) -> float:
  return 0.35 + 0.55 * min(1.0, max(0.0, weight))


# ---------------------------------------------------------------------------
# Location-attention distribution (notebook step 3).
# ---------------------------------------------------------------------------
def location_weights(mu: float, sigma: float, length: int) -> np.ndarray:
  """λ' (Eq. 5-9) over `length` encoder positions for one μ and σ, via the jitted kernels."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from monoloc_jax import attention  # pylint: disable=g-import-not-at-top

  if length < 1:
    raise errors.MonolocError(f'length must be >= 1, got {length}')
  if not sigma > 0:
    raise errors.MonolocError(f'sigma must be > 0, got {sigma}')

  @jax.jit
  def kernel(mu, sigma):
    positions = attention.normalized_positions(jnp.array([length]), length)
    return attention.gaussian_location_attention(mu[None], sigma[None], positions, positions <= 1.0)[0]

  return np.asarray(kernel(jnp.float32(mu), jnp.float32(sigma)))


def plot_location_distribution(mu: Union[float, Sequence[float]],
                               sigma: Union[float, Sequence[float]], length: int,
                               weights: Optional[Sequence[np.ndarray]] = None,
                               title: Optional[str] = None) -> Figure:
  """Bars of the location attention λ' over `length` encoder positions.

  mu and sigma are in normalised position units (position i sits at
  i / (length - 1), Eq. 7); give sequences to overlay several distributions.
  `weights` (one array per μ) skips recomputing them with `location_weights`.
  """
  mus = np.atleast_1d(np.asarray(mu, np.float64))
  sigmas = np.broadcast_to(np.atleast_1d(np.asarray(sigma, np.float64)), mus.shape)
  if weights is None:
    weights = [location_weights(m, s, length) for m, s in zip(mus, sigmas)]
  fig = Figure(figsize=(max(5.0, min(12.0, 0.25 * length + 3)), 3.2), layout='constrained')
  ax = fig.add_subplot()
  ax.set_label('location')
  idx = np.arange(length)
  n = len(weights)
  width = 0.8 / n
  for j, (m, s, w) in enumerate(zip(mus, sigmas, weights)):
    bars = ax.bar(idx + (j - (n - 1) / 2) * width, np.asarray(w), width=width, alpha=0.8,
                  label=f'μ = {m:.3g}, σ = {s:.3g}')
    ax.axvline(m * max(1, length - 1), ls='--', lw=1, color=bars.patches[0].get_facecolor())
  ax.set_xticks(tick_positions(length))
  ax.set_xlabel('encoder position i  (normalised: i / (s - 1))')
  ax.set_ylabel("location attention λ'")
  ax.set_ylim(0, None)
  ax.set_title(title or f'Gaussian location attention over s = {length} positions')
  ax.legend(fontsize=8)
  return fig


# ---------------------------------------------------------------------------
# Accuracy versus input length.
# ---------------------------------------------------------------------------
def training_range(task) -> Tuple[float, float]:
  """The input lengths of the task's training data (the shaded band); the task's own fact."""
  from monoloc_jax import tasks  # pylint: disable=g-import-not-at-top
  spec = tasks.get(task)
  if spec.train_lengths is None:
    raise errors.MonolocError(f'task {spec.name!r} has no length splits (only one test '
                              'split), so there is no accuracy-versus-length curve to draw')
  return spec.train_lengths


def split_length(task, split: str) -> float:
  """The input length at which `split` of `task` is drawn (the task's `split_lengths`)."""
  from monoloc_jax import tasks  # pylint: disable=g-import-not-at-top
  spec = tasks.get(task)
  training_range(spec)
  if split not in spec.split_lengths:
    raise errors.MonolocError(f'split {split!r} of task {spec.name!r} has no input length')
  return float(spec.split_lengths[split])


def dev_range(task) -> Optional[Tuple[float, float]]:
  """The input lengths of the task's dev split, (shortest, longest); None where the
  task does not say (SCAN, CFQ, a task defined outside the package's families).

  Digit tasks: 10-15 items, longer than training (5-10). Lookup: the validation
  rows (1-4 tables, 3-6 tokens, as training) and 500 rows of longer_seen_1 (7).
  Chomsky-hierarchy tasks: the training range (1-40).
  """
  from monoloc_jax import tasks  # pylint: disable=g-import-not-at-top
  from monoloc_jax.tasks import chomsky  # pylint: disable=g-import-not-at-top
  from monoloc_jax.tasks import lookup  # pylint: disable=g-import-not-at-top
  from monoloc_jax.tasks import synthetic  # pylint: disable=g-import-not-at-top
  spec = tasks.get(task)
  lengths = dict(spec.split_lengths)
  if spec.splits == synthetic.SPLITS and lengths == dict(synthetic.SPLIT_LENGTHS):
    dev = synthetic.SPLIT_SPECS['dev']
    return float(dev.min_length), float(dev.max_length)
  if spec.splits == lookup.SPLITS and lengths == dict(lookup.SPLIT_LENGTHS):
    return (float(lookup.TRAIN_LENGTHS[0]),
            float(lookup.source_length(lookup.DEFAULT_CONFIG.max_composition_train + 1)))
  if (spec.splits == chomsky.SPLITS and spec.name in chomsky.TASKS and
      lengths == chomsky.split_lengths(spec.name)):
    return tuple(float(n) for n in chomsky.train_lengths(spec.name))
  return None


def dev_point(results: Mapping[str, Any]) -> Optional[Tuple[float, float, float, List[float]]]:
  """(shortest, longest dev length, median best dev accuracy, per-seed values) of a
  run's results (`results['dev']['best_accuracy_per_seed']`, in %); None without them."""
  task = results.get('task') or results.get('config', {}).get('task')
  per_seed = (results.get('dev') or {}).get('best_accuracy_per_seed')
  span = dev_range(task)
  if not per_seed or span is None:
    return None
  per_seed = [float(v) for v in per_seed]
  return span[0], span[1], float(np.median(per_seed)), per_seed


def _labelled_runs(runs, is_one: Callable[[Any], bool], load: Callable[[Any], Dict[str, Any]],
                   what: str) -> List[Tuple[str, Dict[str, Any]]]:
  """[(label, dict)] from a mapping {label: run}, a sequence of runs or one run (`is_one`);
  a run is a workdir (read with `load`) or its dict. An unlabelled run is named by its
  variant, with its workdir's name when two share one."""
  if isinstance(runs, (str, pathlib.Path)) or (isinstance(runs, Mapping) and is_one(runs)):
    runs = [runs]
  items = list(runs.items()) if isinstance(runs, Mapping) else [(None, r) for r in runs]
  out = []
  for label, run in items:
    result = load(run) if isinstance(run, (str, pathlib.Path)) else dict(run)
    if label is None:
      label = display_name(result.get('variant', result.get('model'))) or f'run {len(out) + 1}'
      if any(label == l for l, _ in out) and isinstance(run, (str, pathlib.Path)):
        label = f'{label} ({pathlib.Path(run).name})'
    out.append((str(label), result))
  if not out:
    raise errors.MonolocError(f'no {what} to plot')
  return out


def _named_runs(runs) -> List[Tuple[str, Dict[str, Any]]]:
  """[(label, results dict)] from a mapping, a sequence, one results dict or one workdir."""
  out = _labelled_runs(runs, lambda r: 'test' in r, load_results, 'runs')
  for label, results in out:
    if 'test' not in results:
      raise errors.MonolocError(f'run {label} has no "test" results')
  return out


def accuracy_by_length(results: Mapping[str, Any], metric: str = 'accuracy'
                       ) -> List[Tuple[float, str, float, List[float]]]:
  """[(length, split, median value, per-seed values)] sorted by length."""
  task = results.get('task') or results.get('config', {}).get('task')
  rows = []
  for split, r in results['test'].items():
    per_seed = [float(s[metric]) for s in r.get('per_seed', []) if metric in s]
    rows.append((split_length(task, split), split, float(r[metric]), per_seed))
  return sorted(rows)


def _with_sample_count(label: str, results: Mapping[str, Any]) -> str:
  """'OneStepAttn (n = 2000 per length)': the samples each test split was scored on
  ('500–2000' when the run's splits differ); the label alone where n is not recorded."""
  counts = sorted({r['n'] for r in results['test'].values()
                   if isinstance(r, Mapping) and isinstance(r.get('n'), int)})
  if not counts:
    return label
  n = str(counts[0]) if len(counts) == 1 else f'{counts[0]}–{counts[-1]}'
  return f'{label} (n = {n} per length)'


def plot_accuracy_vs_length(runs, metric: str = 'accuracy', title: Optional[str] = None
                            ) -> Figure:
  """Test accuracy against input length, one line per run, on a log length axis.

  runs: {label: results dict or workdir}, a sequence of those (labelled by
  model name), or a single one. The training lengths are a shaded band (gid
  'training-band'). x ticks sit at the band's ends and at every length
  drawn outside it. Each run's line is its median over seeds; with several
  seeds each seed's value is a hollow dot beside it (gid 'seeds:<label>'),
  with one legend entry. Where results.json has the best dev accuracies (and
  metric is 'accuracy'), each run also has a diamond at its dev split's lengths
  (`dev_range`: a bar spanning them; gid 'dev:<label>'), the point before the
  test lengths. Each run's legend entry says how many samples each length was
  scored on ('(n = 2000 per length)'). The legend sits outside the axes. Runs of
  different tasks are refused (their splits have different lengths).
  """
  named = _named_runs(runs)
  task_of = lambda results: results.get('task') or results.get('config', {}).get('task')
  tasks_seen = {}
  for label, results in named:
    tasks_seen.setdefault(task_of(results), []).append(label)
  if len(tasks_seen) > 1:
    listing = '; '.join(f"{t}: {', '.join(labels)}" for t, labels in tasks_seen.items())
    raise errors.MonolocError(f'runs of different tasks cannot share a length axis ({listing}); '
                              'plot each task separately')
  task = task_of(named[0][1])
  lo, hi = training_range(task)
  fig = Figure(figsize=(8.0, 4.2), layout='constrained')
  ax = fig.add_subplot()
  ax.set_label('accuracy_vs_length')
  band = ax.fill_between([lo, hi], -5, 105, color='0.85', alpha=0.6, lw=0,
                         label=f'training lengths ({lo:g}–{hi:g})')
  band.set_gid(BAND_GID)
  lengths = {lo, hi}
  with_seeds = False
  dev_label = None
  for label, results in named:
    rows = accuracy_by_length(results, metric)
    x = [r[0] for r in rows]
    y = [r[2] for r in rows]
    line, = ax.plot(x, y, marker='o', ms=5, lw=1.6, label=_with_sample_count(label, results),
                    clip_on=False, zorder=3)
    dev = dev_point(results) if metric == 'accuracy' else None
    if dev is not None:
      dev_lo, dev_hi, dev_median, dev_seeds = dev
      middle = (dev_lo + dev_hi) / 2
      marker, = ax.plot([dev_lo, dev_hi], [dev_median] * 2, color=line.get_color(), lw=1.0,
                        marker='|', ms=7, clip_on=False, zorder=3, label='_nolegend_')
      marker.set_gid(f'{DEV_GID}:{label}')
      ax.plot([middle], [dev_median], ls='none', marker='D', ms=6, mfc='white',
              mec=line.get_color(), mew=1.4, clip_on=False, zorder=4, label='_nolegend_')
      rows = [(middle, 'dev', dev_median, dev_seeds)] + rows
      lengths.update((dev_lo, dev_hi))
      metric_name = ('teacher-forced ' if results.get('dev_metric') == 'teacher_forced'
                     else '')
      dev_label = f'best {metric_name}dev accuracy (dev lengths {dev_lo:g}–{dev_hi:g})'
    seeds_x, seeds_y = [], []
    for length, _, _, per_seed in rows:
      if len(per_seed) > 1:          # side by side, a few % apart on the log axis
        offsets = SEED_DOT_SPREAD ** (np.arange(len(per_seed)) - (len(per_seed) - 1) / 2)
        seeds_x += list(length * offsets)
        seeds_y += per_seed
    if seeds_x:
      dots = ax.scatter(seeds_x, seeds_y, s=14, facecolors='none', edgecolors=line.get_color(),
                        linewidths=0.9, alpha=0.8, zorder=4, clip_on=False)
      dots.set_gid(f'{SEEDS_GID}:{label}')
      with_seeds = True
    lengths.update(v for v in x if not lo < v < hi)
  ax.set_xscale('log')
  ticks = sorted(lengths)
  ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
  ax.xaxis.set_major_formatter(ticker.FixedFormatter([f'{t:g}' for t in ticks]))
  ax.xaxis.set_minor_locator(ticker.NullLocator())
  ax.set_xlim(min(ticks) / 1.25, max(ticks) * 1.25)
  ax.set_ylim(-2, 102)
  ax.set_yticks(range(0, 101, 20))
  ax.set_xlabel(LENGTH_LABEL)
  ax.set_ylabel(ACCURACY_LABEL if metric == 'accuracy' else f'{metric} (%)')
  ax.grid(alpha=0.3)
  handles, labels = ax.get_legend_handles_labels()
  from matplotlib.lines import Line2D  # pylint: disable=g-import-not-at-top
  if dev_label:
    handles.append(Line2D([], [], ls='none', marker='D', mfc='white', mec='0.3', mew=1.4, ms=6))
    labels.append(dev_label)
  if with_seeds:
    handles.append(Line2D([], [], ls='none', marker='o', mfc='none', mec='0.3', ms=5))
    labels.append('single seeds (lines: median)')
  ax.legend(handles, labels, loc='upper left', bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
            fontsize=8)                              # outside the axes: never on the data
  ax.set_title(title or f'{task}: trained on lengths {lo:g}–{hi:g}')
  return fig


RANGE_GID = 'range'            # gid prefix of each run's median range curve ('range:<label>')
RANGE_XSCALES = ('linear', 'log')            # plot_range's length axes
RANGE_LINESTYLES = ('-', '--', '-.', ':')  # one per run, in turn


def _range_runs(runs) -> List[Tuple[str, Dict[str, Any]]]:
  """[(label, range.json dict)] from one range dict or workdir, a sequence or a mapping."""
  def load(run):
    path = _workdir(run) / 'range.json'
    if not path.is_file():
      raise errors.MonolocError(f'{run} has no range.json: run monoloc-train --mode=range '
                                f'--workdir={run} first')
    return rundir.read_json(path, 'range result')
  return _labelled_runs(runs, lambda r: 'lengths' in r, load, 'range results')


def _range_legend(result: Mapping[str, Any]) -> str:
  """'median of 3 seeds, n = 200 per length', 'seed 2, n = 15–200 per length'."""
  seeds = result['per_seed']['seeds']
  lo, hi = min(result['samples']), max(result['samples'])
  who = f'seed {seeds[0]}' if len(seeds) == 1 else f'median of {len(seeds)} seeds'
  return f"{who}, n = {hi if lo == hi else f'{lo}–{hi}'} per length"


def plot_range(runs, metric: str = 'accuracy', title: Optional[str] = None,
               xscale: str = 'linear') -> Figure:
  """A range evaluation (range.json): `metric` against every length, one curve per run.

  runs: one range.json dict or workdir, a sequence of them or {label: one}. Each
  run's line is its median over seeds (gid 'range:<label>'); with one run, each
  seed is a thin line beside it. The training lengths are shaded (gid
  'training-band') and the dev lengths marked by dotted lines. xscale: 'linear' (the
  Chomsky papers' axis) or 'log' (the lengths near training, where curves part, get as
  much width as the long tail; ticks at 1, 2, 5, 10, 20, ...). Runs' lines cycle
  through `RANGE_LINESTYLES`, so curves lying on one another (several runs at 100%)
  stay visible. Runs of different tasks are refused (their lengths count different units).
  """
  if xscale not in RANGE_XSCALES:
    raise errors.MonolocError(f"unknown xscale {xscale!r}; valid: {', '.join(RANGE_XSCALES)}")
  named = _range_runs(runs)
  seen = {r.get('task') for _, r in named}
  if len(seen) > 1:
    raise errors.MonolocError(f"runs of different tasks cannot share a length axis "
                              f"({', '.join(sorted(map(str, seen)))}); plot each task separately")
  first = named[0][1]
  fig = Figure(figsize=(8.0, 4.2), layout='constrained')
  ax = fig.add_subplot()
  ax.set_label('range')
  if first.get('train_lengths'):
    lo, hi = first['train_lengths']
    band = ax.axvspan(lo, hi, color='0.85', alpha=0.6, lw=0,
                      label=f'training lengths ({lo:g}–{hi:g})')
    band.set_gid(BAND_GID)
  if first.get('dev_lengths'):
    for k, x in enumerate(first['dev_lengths']):
      ax.axvline(x, color='0.4', ls=':', lw=1.0,
                 label=f"dev lengths ({first['dev_lengths'][0]:g}–"
                       f"{first['dev_lengths'][1]:g})" if k == 0 else '_nolegend_')
  for k, (label, result) in enumerate(named):
    x = result['lengths']
    line, = ax.plot(x, result[metric], lw=1.8, zorder=3,
                    ls=RANGE_LINESTYLES[k % len(RANGE_LINESTYLES)],
                    label=f'{label} ({_range_legend(result)})')
    line.set_gid(f'{RANGE_GID}:{label}')
    if len(named) == 1 and len(result['per_seed']['seeds']) > 1:
      for k, (seed, values) in enumerate(zip(result['per_seed']['seeds'],
                                             result['per_seed'][metric])):
        ax.plot(x, values, lw=0.7, alpha=0.55, color=line.get_color(), zorder=2,
                label='single seeds' if k == 0 else '_nolegend_')
  first_n = min(r['lengths'][0] for _, r in named)
  last_n = max(r['lengths'][-1] for _, r in named)
  if xscale == 'log':
    ax.set_xscale('log')
    ticks = [t for t in (m * 10 ** e for e in range(6) for m in (1, 2, 5))
             if first_n <= t <= last_n]
    ticks = sorted(ticks + [n for n in (first_n, last_n)     # the ends, if not crowded
                            if all(max(n, t) / min(n, t) >= 1.3 for t in ticks)])
    ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
    ax.xaxis.set_major_formatter(ticker.FixedFormatter([f'{t:g}' for t in ticks]))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xlim(first_n / 1.05, last_n * 1.05)
  else:
    ax.set_xlim(first_n - 0.5, last_n + 0.5)
  if metric != 'edit_distance':
    ax.set_ylim(-2, 102)
    ax.set_yticks(range(0, 101, 20))
  ax.set_xlabel(f"{LENGTH_LABEL} ({first.get('length_unit') or 'tokens'})")
  ax.set_ylabel({'accuracy': ACCURACY_LABEL, 'token_accuracy': 'per-token accuracy (%)',
                 'edit_distance': 'mean edit distance'}.get(metric, metric))
  ax.grid(alpha=0.3)
  ax.legend(loc='upper left', bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)
  ax.set_title(title or f"{first.get('task')}: range evaluation")
  return fig


# ---------------------------------------------------------------------------
# Training curves.
# ---------------------------------------------------------------------------
def plot_training_curves(history, seeds: Optional[Sequence[int]] = None,
                         title: Optional[str] = None) -> Figure:
  """Training loss (log scale) and dev accuracy against epoch, one line per seed.

  history: the rows of metrics.jsonl (dicts with 'epoch', 'loss' [per seed]
  and 'dev_accuracy' [per seed, %]) or a workdir holding metrics.jsonl.
  seeds: the seeds' names for the legend (from the workdir's config.json when
  history is a workdir; else 0, 1, ...).
  """
  if isinstance(history, (str, pathlib.Path)):
    workdir = pathlib.Path(history)
    rows = load_history(workdir)
    if seeds is None and (workdir / rundir.CONFIG).exists():
      config = rundir.load_config(workdir)      # with the defaults of fields added since
      seeds = rundir.seeds_of(config)
      title = title or f'{display_name(config.variant)} on {config.task}'
  else:
    rows = list(history)
  if not rows:
    raise errors.MonolocError('the training history is empty: no epoch has finished yet')
  epochs = np.array([r['epoch'] for r in rows])
  loss = np.array([np.atleast_1d(r['loss']) for r in rows], np.float64)
  dev = np.array([np.atleast_1d(r['dev_accuracy']) for r in rows], np.float64)
  n_seeds = loss.shape[1]
  if seeds is None or len(seeds) != n_seeds:
    seeds = list(range(n_seeds))
  fig = Figure(figsize=(9, 3.6), layout='constrained')
  ax_loss, ax_dev = fig.subplots(1, 2)
  ax_loss.set_label('loss')
  ax_dev.set_label('dev_accuracy')
  for i, seed in enumerate(seeds):
    ax_loss.plot(epochs, loss[:, i], marker='o', ms=3, label=f'seed {seed}')
    ax_dev.plot(epochs, dev[:, i], marker='o', ms=3, label=f'seed {seed}')
  ax_loss.set_yscale('log')
  ax_loss.set_ylabel('training loss (per token)')
  ax_dev.set_ylabel('dev accuracy (%)')
  ax_dev.set_ylim(-2, 102)
  for ax in (ax_loss, ax_dev):
    ax.set_xlabel('epoch')
    ax.xaxis.set_major_locator(ticker.FixedLocator(epochs) if len(epochs) <= 12
                               else ticker.MaxNLocator(integer=True))
    ax.set_xlim(epochs.min() - 0.5, epochs.max() + 0.5)
    ax.grid(alpha=0.3)
  ax_dev.legend(fontsize=8, loc='upper left', bbox_to_anchor=(1.02, 1.0),
                borderaxespad=0.0)                  # outside the axes: never on the curves
  if title:
    fig.suptitle(title)
  return fig
