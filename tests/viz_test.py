"""Figures (issue 6): each is rendered to a file and checked for content, labels and ticks.

All but the last test draw synthetic data (no training); the last trains one
tiny run and drives experiments/plot.py end to end.
"""

import json
import pathlib
import subprocess
import sys

import matplotlib.image as mpimg
from matplotlib.collections import PolyCollection
import numpy as np
import pytest

from monoloc_jax import errors
from monoloc_jax import inference
from monoloc_jax import train
from monoloc_jax import viz
from monoloc_jax.configs import default

REPO = pathlib.Path(__file__).resolve().parent.parent


def assert_rendered_png(path: pathlib.Path, min_side: int = 100) -> np.ndarray:
  """The PNG exists, is a real image, and is not one flat colour."""
  assert path.exists() and path.stat().st_size > 1000, path
  image = mpimg.imread(path)
  assert image.ndim == 3 and min(image.shape[:2]) >= min_side, image.shape
  rgb = image[..., :3]
  assert np.ptp(rgb) > 0.5, 'the image is (nearly) constant'
  background = np.all(rgb > 0.97, axis=-1).mean()
  assert background < 0.99, f'{background:.1%} of the pixels are white'
  return image


def reverse_copy_decoded(n: int, direction: float = 1.0, mix: bool = False) -> inference.Decoded:
  """A perfect Reverse Copy decode of n digits: output step t reads encoder position n - t
  (a forward-reading model, α_dir = 1, so mixed and input positions coincide)."""
  source = tuple(str(d) for d in np.random.default_rng(n).integers(0, 10, n))
  output = source[::-1]
  rows, cols = n + 1, n + 2
  attention = np.full((rows, cols), 0.01 / cols)
  peaks = np.arange(n, n - rows, -1)
  peaks[-1] = cols - 1                       # <eos> reads END
  attention[np.arange(rows), peaks] += 0.99
  aux = {'mu': peaks / (cols - 1), 'sigma': np.full(rows, 0.27 / cols),
         'step': np.ones(rows), 'direction': direction}
  if mix:
    aux['mix'] = np.linspace(0.1, 0.9, rows)
  return inference.Decoded(source, output, attention, aux)


def assert_no_overlapping_tick_labels(fig):
  """No two visible tick labels of one axis overlap once the figure is laid out."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  FigureCanvasAgg(fig)
  renderer = fig.canvas.get_renderer()
  fig.draw(renderer)
  for ax in fig.axes:
    for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
      boxes = [t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text()]
      for a, b in zip(boxes, boxes[1:]):
        assert not a.overlaps(b), (ax.get_label(), a, b)


def axes_by_label(fig):
  return {ax.get_label(): ax for ax in fig.axes}


def tick_texts(ax, axis='x'):
  labels = ax.get_xticklabels() if axis == 'x' else ax.get_yticklabels()
  return [t.get_text() for t in labels]


# --------------------------------------------------------------------------- heatmap


def test_tick_rule():
  assert viz.tick_positions(8) == list(range(8))
  assert viz.tick_positions(40) == list(range(40))
  assert viz.tick_positions(41) == list(range(0, 41, 2))               # 40 is the last one
  assert viz.tick_positions(102) == list(range(0, 102, 3)) + [101]     # k = 3, plus END
  assert viz.tick_positions(101) == list(range(0, 98, 3)) + [100]      # 99 gives way to 100
  assert viz.tick_positions(290, 37) == list(range(0, 281, 8)) + [289]  # 288 gives way
  assert viz.tick_positions(0) == []


def test_attention_heatmap_short_input_labels_every_token(tmp_path):
  d = reverse_copy_decoded(6)
  fig = viz.plot_attention(d, variant='onestep')
  axes = axes_by_label(fig)
  ax = axes['attention']
  assert len(ax.get_xticks()) == 8 and len(ax.get_yticks()) == 7
  assert tick_texts(ax, 'x') == ['START', *d.source, 'END']
  assert tick_texts(ax, 'y') == [*d.output, '<eos>']
  assert ax.get_xlabel() == ('input token (encoder position);  dashed red line: μ, '
                             'the Gaussian mean')
  assert ax.get_legend() is None                          # nothing drawn over the attention
  assert ax.get_ylabel() == 'output token (decoder step)'
  assert 'OneStepAttn' in ax.get_title() and 'α_dir = 1.00: forward' in ax.get_title()
  # μ, σ and step panels, in that order, beside the heatmap (see the panel test below).
  panels = [a for a in fig.axes if a.get_label().startswith('aux:')]
  assert [a.get_label() for a in panels] == ['aux:mu', 'aux:sigma', 'aux:step']
  # The μ overlay sits on the attention peaks (μ rescaled to encoder positions).
  mu_line, = [l for l in ax.get_lines() if l.get_label().startswith('μ')]
  np.testing.assert_allclose(mu_line.get_xdata(), d.attention.argmax(-1))
  assert_rendered_png(viz.save(fig, tmp_path / 'attention.png'))


def test_aux_panels_share_the_heatmaps_output_step_axis_and_name_their_units(tmp_path):
  """The per-step panels stand beside the heatmap, their y axis its output-step axis
  (shared, same direction), their x axis the value in stated units; the μ panel's x
  axis is the heatmap's own (input positions). Before: under it, rotated 90°
  (output step along x), labelled 'μ', 'σ', 'step' without units."""
  d = reverse_copy_decoded(10, mix=True)
  fig = viz.plot_attention(d, variant='mix_onestep')
  axes = axes_by_label(fig)
  ax = axes['attention']
  panels = [axes[f'aux:{k}'] for k in ('mu', 'sigma', 'step', 'mix')]
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  FigureCanvasAgg(fig).draw()
  heat = ax.get_position()
  rows = d.attention.shape[0]
  for pax in panels:
    box = pax.get_position()
    assert box.x0 >= heat.x1, pax.get_label()                      # to the right
    assert abs(box.y0 - heat.y0) < 1e-6 and abs(box.y1 - heat.y1) < 1e-6   # same rows
    assert pax.get_shared_y_axes().joined(ax, pax)
    assert pax.get_ylim() == ax.get_ylim()                         # step 0 at the top
    line = pax.get_lines()[0]
    np.testing.assert_allclose(line.get_ydata(), np.arange(rows))  # y: the output step
  assert [p.get_xlabel() for p in panels] == [
      'μ (input position)', 'σ (positions)', 'step (positions)', 'content mix (0–1)']
  cols = d.attention.shape[1]
  np.testing.assert_allclose(panels[0].get_lines()[0].get_xdata(), d.attention.argmax(-1))
  assert panels[0].get_xlim() == ax.get_xlim()                     # the heatmap's positions
  np.testing.assert_allclose(panels[1].get_lines()[0].get_xdata(), d.aux['sigma'] * (cols - 1))
  np.testing.assert_allclose(panels[3].get_lines()[0].get_xdata(), d.aux['mix'])
  assert_no_overlapping_tick_labels(fig)
  image = assert_rendered_png(viz.save(fig, tmp_path / 'attention.png'))
  assert image.shape[1] > image.shape[0]          # the panels widen the figure, not lengthen it


def undecided_decoded(n: int, direction: float) -> inference.Decoded:
  """A model that walks its e_dir encoding forwards (μ from START to END) with a
  direction gate α between 0 and 1: over input positions its attention is α at the
  walked position and 1 − α at the mirrored one (Eq. 18, `attention.input_attention`)."""
  source = tuple(str(d) for d in np.random.default_rng(n).integers(0, 10, n))
  rows, cols = n + 1, n + 2
  walked = np.arange(1, rows + 1)
  attention = np.zeros((rows, cols))
  attention[np.arange(rows), walked] += direction
  attention[np.arange(rows), cols - 1 - walked] += 1.0 - direction
  aux = {'mu': walked / (cols - 1), 'sigma': np.full(rows, 0.27 / cols), 'step': np.ones(rows),
         'direction': direction}
  return inference.Decoded(source, source[::-1], attention, aux)


@pytest.mark.parametrize('direction', [0.5, 0.3, 0.8])
def test_an_undecided_direction_draws_mu_where_the_attention_is(tmp_path, direction):
  """α_dir between 0 and 1 splits the attention between the walked position and its
  mirror image. μ is drawn on both (the weaker one fainter), never at their weighted
  mean, where there is no attention (before: one line down the middle)."""
  d = undecided_decoded(12, direction)
  fig = viz.plot_attention(d, variant='onestep')
  ax = axes_by_label(fig)['attention']
  lines = [l for l in ax.get_lines() if l.get_label().startswith('μ')]
  assert len(lines) == 2
  rows = np.arange(d.attention.shape[0])
  for line in lines:
    x = np.asarray(line.get_xdata())
    np.testing.assert_allclose(line.get_ydata(), rows)
    columns = np.clip(np.round(x).astype(int), 0, d.attention.shape[1] - 1)
    assert np.all(d.attention[rows, columns] >= min(direction, 1 - direction) - 1e-9), x
  assert 'forwards' in ax.get_xlabel() and 'backwards' in ax.get_xlabel()
  strong, weak = sorted(lines, key=lambda l: -l.get_alpha())
  assert strong.get_alpha() > weak.get_alpha() or direction == 0.5
  if tmp_path and direction == 0.5:
    assert_rendered_png(viz.save(fig, tmp_path / 'undecided.png'))


def test_a_decided_direction_draws_one_mu_line():
  """α_dir within 0.05 of 0 or 1 leaves < 5% of the weight on the mirror image: one line."""
  for direction in (0.97, 0.03):
    d = undecided_decoded(12, direction)
    ax = axes_by_label(viz.plot_attention(d, variant='onestep'))['attention']
    line, = [l for l in ax.get_lines() if l.get_label().startswith('μ')]
    np.testing.assert_allclose(line.get_xdata(), d.attention.argmax(-1))


def test_attention_heatmap_long_input_thins_labels(tmp_path):
  d = reverse_copy_decoded(100)
  fig = viz.plot_attention(d, variant='onestep')
  ax = axes_by_label(fig)['attention']
  xt, yt = tick_texts(ax, 'x'), tick_texts(ax, 'y')
  assert len(ax.get_xticks()) == len(xt) == 35       # positions 0, 3, ..., 99 and 101
  assert len(ax.get_yticks()) == len(yt) == 34       # steps 0, 3, ..., 96 and 100
  assert xt[0] == '0:START' and xt[-1] == '101:END'
  assert xt[1] == f'3:{d.source[2]}'
  assert yt[0] == f'0:{d.output[0]}' and yt[-1] == '100:<eos>'
  assert_no_overlapping_tick_labels(fig)
  assert_rendered_png(viz.save(fig, tmp_path / 'attention100.png'), min_side=500)
  svg = viz.save(fig, tmp_path / 'attention100.svg')
  text = svg.read_text()
  assert text.lstrip().startswith('<?xml') and '<svg' in text and len(text) > 10_000


def test_attention_heatmap_maps_direction_mixed_positions_to_input_tokens():
  """α_dir = 0: the model walks the reversed encoding forwards (its μ rises 0 -> 1), which
  is the input read backwards. The model reports attention over input positions (an
  anti-diagonal); the μ overlay is mapped to input positions and follows it."""
  n = 6
  forward = reverse_copy_decoded(n)
  mixed_mu = 1.0 - forward.aux['mu']
  d = forward._replace(aux={**forward.aux, 'mu': mixed_mu, 'direction': 0.0})
  fig = viz.plot_attention(d, variant='onestep')
  ax = axes_by_label(fig)['attention']
  np.testing.assert_allclose(ax.images[0].get_array(), forward.attention)
  mu_line, = [l for l in ax.get_lines() if l.get_label().startswith('μ')]
  np.testing.assert_allclose(mu_line.get_xdata(), forward.attention.argmax(-1))
  assert 'α_dir = 0.00: backward' in ax.get_title()
  # The μ panel shows μ in input positions too, as the overlay.
  np.testing.assert_allclose(axes_by_label(fig)['aux:mu'].get_lines()[0].get_xdata(),
                             forward.attention.argmax(-1))


def test_attention_heatmap_without_location_values():
  """Relative has no μ/σ/step and no direction gate: only the heatmap (and its colorbar)."""
  d = reverse_copy_decoded(6, direction=1.0)._replace(aux={'direction': 1.0})
  fig = viz.plot_attention(d, variant='relative', title='Relative')
  assert not [a for a in fig.axes if a.get_label().startswith('aux:')]
  ax = axes_by_label(fig)['attention']
  assert ax.get_title() == 'Relative' and not ax.get_lines()


def test_attention_heatmap_shows_content_mix_and_accepts_plain_data(tmp_path):
  d = reverse_copy_decoded(8, mix=True)
  fig = viz.plot_attention(d._asdict(), variant='mix_onestep')
  assert [a.get_label() for a in fig.axes if a.get_label().startswith('aux:')] == [
      'aux:mu', 'aux:sigma', 'aux:step', 'aux:mix']
  bare = viz.plot_attention(np.eye(5, 7))
  ax = axes_by_label(bare)['attention']
  assert tick_texts(ax, 'x') == [str(i) for i in range(7)]
  assert_rendered_png(viz.save(bare, tmp_path / 'bare.png'), min_side=50)
  with pytest.raises(errors.MonolocError, match='input positions but the source has 3 tokens'):
    viz.plot_attention({'attention': np.ones((4, 6)), 'source': ('1', '2', '3')})


def test_a_short_decode_of_a_long_input_is_cropped_to_the_attended_band(tmp_path):
  """A failed seed that emits 7 tokens for a 100-digit input, attending near the end: not
  an 8 x 102 strip but the attended columns, labelled with their input indices."""
  full = reverse_copy_decoded(100)
  d = full._replace(output=full.output[:7], attention=full.attention[:8],
                    aux={k: (v[:8] if np.ndim(v) else v) for k, v in full.aux.items()})
  fig = viz.plot_attention(d, variant='onestep')
  ax = axes_by_label(fig)['attention']
  assert ax.images[0].get_array().shape == (8, 11)            # columns 91..101 (peaks 93..100)
  xt = tick_texts(ax, 'x')
  assert xt[0] == f'91:{d.source[90]}' and xt[-1] == '101:END'
  assert 'input positions 91–101 of 0–101 shown' in ax.get_title()
  mu_line, = [l for l in ax.get_lines() if l.get_label().startswith('μ')]
  np.testing.assert_allclose(mu_line.get_xdata(), d.attention.argmax(-1) - 91)
  width, height = fig.get_size_inches()
  width -= 3 * viz.PANEL_INCHES                    # the μ, σ and step panels beside it
  assert width < 8 and height > 0.4 * width
  assert_no_overlapping_tick_labels(fig)
  uncropped = viz.plot_attention(d, variant='onestep', crop=False)
  assert axes_by_label(uncropped)['attention'].images[0].get_array().shape == (8, 102)
  width, height = uncropped.get_size_inches()    # no 16-inch strip when nothing can be cropped
  width -= 3 * viz.PANEL_INCHES
  assert width <= 2.5 * 3.5 + 3 and height >= 3
  assert_no_overlapping_tick_labels(uncropped)


def test_heatmap_title_names_the_seed_and_a_wide_input_keeps_readable_cells(tmp_path):
  seed = inference.SeedChoice(2, 2, 99.5, 'the best of 3 seeds')
  d = reverse_copy_decoded(12)._replace(seed=seed)
  title = axes_by_label(viz.plot_attention(d, variant='onestep'))['attention'].get_title()
  assert title.startswith('OneStepAttn, seed 2, best dev 99.5%: input length 12')
  # DeDupe-like: 100 output steps over 288 inputs, every column attended.
  rows, cols = 101, 290
  attention = np.zeros((rows, cols))
  attention[np.arange(rows), np.linspace(1, cols - 1, rows).astype(int)] = 1.0
  fig = viz.plot_attention(attention)
  width, height = fig.get_size_inches()
  assert width <= 16 and height >= 5                    # not a 16-inch strip
  assert_no_overlapping_tick_labels(fig)
  assert_rendered_png(viz.save(fig, tmp_path / 'wide.png'), min_side=300)


# --------------------------------------------------------------------------- curves


def fake_results(task, accuracies, seeds=1, model='onestep'):
  test = {}
  for split, acc in accuracies.items():
    per_seed = [{'accuracy': max(0.0, acc - 3 * i)} for i in range(seeds)]
    test[split] = {'accuracy': acc, 'accuracy_std': 1.0, 'per_seed': per_seed, 'n': 100}
  return {'task': task, 'variant': model, 'test': test}


def test_accuracy_vs_length(tmp_path):
  onestep = fake_results('reverse_copy', {'test_iid': 100, 'test_15': 100, 'test_30': 99.5,
                                          'test_100': 98.0}, seeds=3)
  relative = fake_results('reverse_copy', {'test_15': 60, 'test_30': 5, 'test_100': 0},
                          model='relative')
  fig = viz.plot_accuracy_vs_length({'OneStepAttn': onestep, 'Relative': relative})
  ax = axes_by_label(fig)['accuracy_vs_length']
  assert ax.get_xscale() == 'log'
  assert ax.get_xlabel() == 'input length'
  assert ax.get_ylabel() == 'sequence accuracy (%)'
  assert list(ax.get_xticks()) == [5, 10, 15, 30, 100]
  assert tick_texts(ax, 'x') == ['5', '10', '15', '30', '100']
  assert list(ax.get_yticks()) == [0, 20, 40, 60, 80, 100]
  lo, hi = ax.get_ylim()
  assert lo <= 0 and hi >= 100
  band, = [c for c in ax.collections if c.get_gid() == viz.BAND_GID]
  assert isinstance(band, PolyCollection)
  xs = band.get_paths()[0].vertices[:, 0]
  assert (xs.min(), xs.max()) == (5, 10)
  lines = {l.get_label(): l for l in ax.get_lines()}
  assert set(lines) == {'OneStepAttn (n = 100 per length)', 'Relative (n = 100 per length)'}
  np.testing.assert_allclose(lines['OneStepAttn (n = 100 per length)'].get_xdata(),
                             [7.5, 15, 30, 100])
  np.testing.assert_allclose(lines['Relative (n = 100 per length)'].get_ydata(), [60, 5, 0])
  # Three seeds of OneStepAttn: each seed a dot beside the median, one legend entry.
  dots, = [c for c in ax.collections if (c.get_gid() or '').startswith(viz.SEEDS_GID)]
  assert dots.get_gid() == 'seeds:OneStepAttn'
  np.testing.assert_allclose(sorted(dots.get_offsets()[:, 1]),
                             sorted([100, 97, 94, 100, 97, 94, 99.5, 96.5, 93.5, 98, 95, 92]))
  legend = ax.get_legend()
  assert [t.get_text() for t in legend.get_texts()] == [
      'training lengths (5–10)', 'OneStepAttn (n = 100 per length)',
      'Relative (n = 100 per length)', 'single seeds (lines: median)']
  assert_no_overlapping_tick_labels(fig)
  renderer = fig.canvas.get_renderer()
  assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
  assert_rendered_png(viz.save(fig, tmp_path / 'acc.png'))
  assert '<svg' in viz.save(fig, tmp_path / 'acc.svg').read_text()


def test_accuracy_vs_length_reads_workdirs_and_lookup_lengths(tmp_path):
  (tmp_path / 'run').mkdir()
  (tmp_path / 'run' / 'results.json').write_text(json.dumps(
      fake_results('lookup', {'test_long1': 90, 'test_long3': 50, 'test_long5': 10})))
  fig = viz.plot_accuracy_vs_length([tmp_path / 'run'])
  ax = axes_by_label(fig)['accuracy_vs_length']
  line, = ax.get_lines()
  assert line.get_label() == 'OneStepAttn (n = 100 per length)'
  np.testing.assert_allclose(line.get_xdata(), [7, 9, 11])   # 6 + K tokens
  assert list(ax.get_xticks()) == [3, 6, 7, 9, 11]
  assert viz.split_length('reverse_lookup', 'test_iid') == 6
  with pytest.raises(errors.MonolocError, match="task 'scan_length' has no length splits"):
    viz.plot_accuracy_vs_length(fake_results('scan_length', {'test': 10.0}))
  with pytest.raises(errors.MonolocError, match=r'runs of different tasks cannot share a length '
                     r'axis \(lookup: OneStepAttn; copy: Relative\)'):
    viz.plot_accuracy_vs_length([tmp_path / 'run', fake_results('copy', {'test_30': 1.0},
                                                                 model='relative')])


def _dev_artists(ax, label):
  """(the bar over the dev lengths, the diamond at their middle) of run `label`."""
  bar, = [l for l in ax.get_lines() if l.get_gid() == f'{viz.DEV_GID}:{label}']
  diamond, = [l for l in ax.get_lines() if l.get_marker() == 'D']
  return bar, diamond


def test_accuracy_vs_length_draws_the_best_dev_accuracy_at_the_dev_lengths(tmp_path):
  """The point before the test lengths: a digit task's dev inputs have 10-15 items
  (training 5-10), Lookup's 3-7 tokens (validation 3-6, as training, and 500 rows
  of 7), so Lookup's sits inside the training band."""
  run = fake_results('reverse_copy', {'test_15': 60, 'test_30': 5, 'test_100': 0}, seeds=3)
  run['dev'] = {'best_accuracy_per_seed': [97.0, 93.0, 95.5]}
  fig = viz.plot_accuracy_vs_length({'Relative': run})
  ax = axes_by_label(fig)['accuracy_vs_length']
  bar, diamond = _dev_artists(ax, 'Relative')
  np.testing.assert_allclose(bar.get_xdata(), [10, 15])
  np.testing.assert_allclose(bar.get_ydata(), [95.5, 95.5])          # median of the seeds
  np.testing.assert_allclose(diamond.get_xdata(), [12.5])
  assert bar.get_color() == diamond.get_markeredgecolor() == ax.get_lines()[0].get_color()
  np.testing.assert_allclose(ax.get_lines()[0].get_xdata(), [15, 30, 100])   # the test line
  dots, = [c for c in ax.collections if (c.get_gid() or '').startswith(viz.SEEDS_GID)]
  assert sorted(dots.get_offsets()[:3, 1]) == [93.0, 95.5, 97.0]     # the dev seeds first
  assert list(ax.get_xticks()) == [5, 10, 15, 30, 100]
  assert [t.get_text() for t in ax.get_legend().get_texts()] == [
      'training lengths (5–10)', 'Relative (n = 100 per length)',
      'best dev accuracy (dev lengths 10–15)',
      'single seeds (lines: median)']
  assert_no_overlapping_tick_labels(fig)
  assert_rendered_png(viz.save(fig, tmp_path / 'acc.png'))

  lookup_run = fake_results('lookup', {'test_long1': 90, 'test_long3': 50})
  lookup_run['dev'], lookup_run['dev_metric'] = {'best_accuracy_per_seed': [88.0]}, 'teacher_forced'
  ax = axes_by_label(viz.plot_accuracy_vs_length([lookup_run]))['accuracy_vs_length']
  bar, diamond = _dev_artists(ax, 'OneStepAttn')
  np.testing.assert_allclose(bar.get_xdata(), [3, 7])
  band, = [c for c in ax.collections if c.get_gid() == viz.BAND_GID]
  xs = band.get_paths()[0].vertices[:, 0]
  assert xs.min() < diamond.get_xdata()[0] == 5 < xs.max()          # inside the band
  assert 'best teacher-forced dev accuracy (dev lengths 3–7)' in [
      t.get_text() for t in ax.get_legend().get_texts()]
  # Another metric than accuracy, or no dev record: no dev point.
  ax = axes_by_label(viz.plot_accuracy_vs_length([run], metric='accuracy'))['accuracy_vs_length']
  assert any(l.get_gid() for l in ax.get_lines())
  for results, metric in ((run, 'seq_acc_be'), (fake_results('copy', {'test_15': 1.0}),
                                                'accuracy')):
    for split in results['test'].values():
      split['seq_acc_be'] = split['accuracy']
    ax = axes_by_label(viz.plot_accuracy_vs_length([results], metric=metric))[
        'accuracy_vs_length']
    assert not [l for l in ax.get_lines() if l.get_gid()], metric
  assert viz.dev_range('copy') == (10, 15) and viz.dev_range('reverse_lookup') == (3, 7)
  assert viz.dev_range('scan_length') is None


def test_training_curves(tmp_path):
  rows = [{'epoch': e, 'loss': [1.0 / e, 1.5 / e], 'dev_accuracy': [20.0 * e, 10.0 * e]}
          for e in (1, 2, 3)]
  fig = viz.plot_training_curves(rows, seeds=[4, 5])
  axes = axes_by_label(fig)
  assert axes['loss'].get_yscale() == 'log'
  assert axes['loss'].get_xlabel() == axes['dev_accuracy'].get_xlabel() == 'epoch'
  assert axes['dev_accuracy'].get_ylabel() == 'dev accuracy (%)'
  assert [l.get_label() for l in axes['dev_accuracy'].get_lines()] == ['seed 4', 'seed 5']
  assert list(axes['loss'].get_xticks()) == [1, 2, 3]
  assert_no_overlapping_tick_labels(fig)
  renderer = fig.canvas.get_renderer()
  legend = axes['dev_accuracy'].get_legend().get_window_extent(renderer)
  assert not any(legend.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)
  assert_rendered_png(viz.save(fig, tmp_path / 'curves.png'))


def test_location_distribution(tmp_path):
  weights = viz.location_weights(0.5, 0.05, 11)
  np.testing.assert_allclose(weights.sum(), 1.0, rtol=1e-5)
  assert weights.argmax() == 5
  fig = viz.plot_location_distribution(0.5, 0.05, 11)
  ax = axes_by_label(fig)['location']
  assert len(ax.patches) == 11 and ax.get_ylabel() == "location attention λ'"
  assert_rendered_png(viz.save(fig, tmp_path / 'loc.png'))


def test_errors(tmp_path):
  with pytest.raises(errors.MonolocError, match='does not exist'):
    viz.load_results(tmp_path / 'nope')
  with pytest.raises(errors.MonolocError, match='has no results.json'):
    viz.plot_accuracy_vs_length({'x': tmp_path})
  with pytest.raises(errors.MonolocError, match='has no metrics.jsonl'):
    viz.plot_training_curves(tmp_path)
  (tmp_path / 'metrics.jsonl').write_text('')
  with pytest.raises(errors.MonolocError, match='history is empty'):
    viz.plot_training_curves(tmp_path)
  with pytest.raises(errors.MonolocError, match="cannot save a figure as 'x.jpg'"):
    viz.save(viz.plot_attention(np.eye(3)), tmp_path / 'x.jpg')


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
  """One undertrained OneStepAttn run on Reverse Copy (about half a minute on 2 cores)."""
  c = default.get_config()
  c.task, c.variant, c.progress = 'reverse_copy', 'onestep', False
  c.train_size, c.eval_size, c.max_epochs = 600, 50, 1
  c.test_splits = 'test_15,test_100'
  c.eval_batch_size, c.bucket_batches = 64, False   # fewer programs to compile
  workdir = tmp_path_factory.mktemp('tiny_run')
  train.train_and_evaluate(c, str(workdir))
  return workdir


def test_plot_script_writes_the_three_figures(tiny_run):
  proc = subprocess.run([sys.executable, str(REPO / 'experiments' / 'plot.py'),
                         f'--workdir={tiny_run}'], capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  names = ('attention.png', 'accuracy_vs_length.png', 'training_curves.png')
  assert proc.stdout.split() == [str(tiny_run / n) for n in names]
  assert 'heatmap: seed 0 (' in proc.stderr and 'the only seed)' in proc.stderr
  for name in names:
    assert_rendered_png(tiny_run / name)
  missing = subprocess.run([sys.executable, str(REPO / 'experiments' / 'plot.py'),
                            f'--workdir={tiny_run}', f'--workdir={tiny_run / "nope"}'],
                           capture_output=True, text=True, timeout=300)
  assert missing.returncode == 2
  assert missing.stderr.strip().splitlines()[-1] == f'error: workdir {tiny_run / "nope"} does not exist'
  other = tiny_run.parent / 'other_task'
  other.mkdir(exist_ok=True)
  (other / 'results.json').write_text(json.dumps(fake_results('copy', {'test_15': 1.0})))
  mixed = subprocess.run([sys.executable, str(REPO / 'experiments' / 'plot.py'),
                          f'--workdir={tiny_run}', f'--workdir={other}'],
                         capture_output=True, text=True, timeout=300)
  assert mixed.returncode == 2
  assert mixed.stderr.strip().splitlines()[-1] == (
      'error: the runs are of different tasks (copy, reverse_copy); one length axis holds one '
      'task: plot each task separately')
