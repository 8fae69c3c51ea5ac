"""A `lax.scan` with a hand-written backward pass for loop-invariant inputs.

Autodiff of `lax.scan` (XLA's transpose of the loop) stacks every residual of
every step and accumulates the gradient of every loop-invariant input (the
attention values and keys, the folded matrices, the token table) inside the
reverse loop: a [D, 3D] outer product and a [B, S, D] add per step per
invariant. `tapped_scan` differentiates the same loop differently:

  * every use of a loop-invariant array W inside the step goes through a *tap*,
    `tap(op, x_t, W)`, which computes y_t = op(x_t, W);
  * the forward scan saves the carry of each step and every tapped y_t;
  * the backward is a reverse `lax.scan` that replays one step from its carry
    with y_t = saved y_t + p_t (p_t a zero probe; the tapped ops are not run
    again, only their transpose w.r.t. x_t) and takes `jax.vjp` of it with
    respect to the carry and the probes only. The probes' cotangents dy_t and
    the x_t are stacked, and after the loop
        dW = d/dW sum_t <dy_t, op(x_t, W)>
    is taken once per tap over the stacked steps (`TapOp.stacked_cotangent`,
    else the VJP of `vmap(op)`): for op = x @ W one [D, T B] x [T B, 3D]
    product, for the weighted sum of the values one einsum 'tbs,tbd->bsd', for
    the token table one scatter-add.

The step function is written once for every variant; it reads its invariants
only through the tap. In the backward pass the step receives sealed
placeholders instead of the invariant arrays, so a use that bypasses the tap
fails loudly (a TypeError) instead of silently losing its gradient. A tapped
`op` must depend on per-step values only through `x` (it may close over
invariants and constants).

Contract of `tapped_scan(step, invariants, constants, init, xs)`:
  step(tap, invariants, constants, carry, x) -> (carry, y)
  invariants: pytree of float arrays, differentiated (read only through `tap`);
  constants: pytree of arrays read directly; they get a zero cotangent, so
    callers pass only arrays without a gradient path (masks, lengths, positions
    computed from integer lengths; `jax.lax.stop_gradient` them to be explicit);
  init: the initial carry (float leaves differentiated, integer leaves not);
  xs: per-step inputs [T, ...] (integer leaves only get a zero cotangent).
Returns (final carry, ys [T, ...]), exactly `lax.scan`'s, and the forward pass
runs the very same operations as the plain scan (`apply` tap).
"""

from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
# tap(op, x, w) -> op(x, w): how a step reads a loop-invariant array w.
Tap = Callable[[Callable[[Any, Any], Any], Any, Any], Any]

__all__ = ['Tap', 'TapOp', 'apply', 'tapped_scan', 'plain_scan', 'matmul', 'affine',
           'take_rows']


class TapOp(NamedTuple):
  """A tapped op with its own stacked cotangent (optional, for speed).

  forward(x, w) -> y. stacked_cotangent(x_stack, dy_stack, w) -> dw =
  d/dw sum_t <dy_t, forward(x_t, w)> over the leading step axis, written as
  the one contraction XLA:CPU runs best; without it `tapped_scan` takes the
  VJP of `vmap(forward)`, which is the same sum.
  """
  forward: Callable[[Any, Any], Any]
  stacked_cotangent: Optional[Callable[[Any, Any, Any], Any]] = None

  def __call__(self, x, w):
    return self.forward(x, w)


def _rows(a: Array, width_dims: int) -> Array:
  """[T, ..., *width] -> [T * ..., *width] (the last `width_dims` axes kept)."""
  return a.reshape((-1,) + a.shape[a.ndim - width_dims:])


def _matmul_cotangent(x: Array, dy: Array, w: Array) -> Array:
  """dW = X^T dY with the step and batch axes flattened: [D, T B] x [T B, M]."""
  return _rows(x, 1).T @ _rows(dy, w.ndim - 1)


def _affine_cotangent(x: Array, dy: Array, w):
  kernel, bias = w
  return _matmul_cotangent(x, dy, kernel), jnp.sum(_rows(dy, bias.ndim), axis=0)


# x [..., D] @ w [D, M] (or w [D] -> [...]).
matmul = TapOp(lambda x, w: x @ w, _matmul_cotangent)
# x [..., D] @ kernel [D, M] + bias [M] (the same two operations as written inline).
affine = TapOp(lambda x, w: x @ w[0] + w[1], _affine_cotangent)
# table [V, M] indexed by x [B] -> [B, M]; its cotangent is one scatter-add. Token
# ids are always in range, so the lookup clips instead of filling out-of-range rows
# with NaN: the same values, but XLA:CPU fused the fill's select into the GRU gates
# of `tapped_scan`'s forward loop as an unvectorised loop (MEASUREMENTS.md §4).
take_rows = TapOp(lambda x, w: jnp.take(w, x, axis=0, mode='clip'),
                  lambda x, dy, w: jnp.zeros_like(w).at[x.reshape(-1)].add(_rows(dy, 1)))


def apply(op: Callable[[Any, Any], Any], x: Any, w: Any) -> Any:
  """The plain tap: y = op(x, w). Used by the forward pass and by greedy decoding."""
  return op(x, w)


class _Sealed:
  """Stands for invariant leaf `index` in the backward's step; jnp refuses it."""
  __slots__ = ('index', 'shape', 'dtype')

  def __init__(self, index: int, shape: Tuple[int, ...], dtype: Any):
    self.index, self.shape, self.dtype = index, shape, dtype

  def __repr__(self):
    return f'<invariant #{self.index}: read it through the tap>'


class _TapSite(NamedTuple):
  """One tap call: its op, the invariant leaves it reads and where its x leaves are stacked."""
  op: Callable[[Any, Any], Any]
  w_def: Any                # treedef of w
  w_index: Tuple[int, ...]  # invariant leaf of each w leaf
  x_def: Any                # treedef of x
  x_slot: Tuple[Tuple[Any, ...], ...]  # where each x leaf's stack is (see `_Recorder`)


class _Recorder:
  """The tap of `tapped_scan`'s own passes, in one of three modes.

  'trace': computes op(x, w) and records the tap sites (one step, outside the loop).
  'save' (forward scan): computes op(x, w) and records y_t (`saved`), so that the
    backward needs no tapped op again (they are the step's matrix products).
  'replay' (reverse scan): y_t = saved_t + probe_t, whose cotangent w.r.t. x is
    that of op(x, w) (`_replay`); records the x_t leaves to stack.

  Each x leaf's stack is found once: a leaf of the step's carry or input
  (`known`, stacked by the forward) is ('known', i); an output of an earlier
  tap is ('out', k, j) (its saved y); any other distinct leaf is ('x', i), the
  i-th leaf the reverse scan stacks.
  """

  def __init__(self, mode: str, leaves: Sequence[Array], known: Sequence[Array] = (),
               saved=None, probes=None):
    self.mode, self.leaves, self.saved, self.probes = mode, leaves, saved, probes
    self.sites: List[_TapSite] = []
    self.outputs: List[Any] = []
    self.x_leaves: List[Array] = []
    self._slot_of = {id(leaf): ('known', i) for i, leaf in enumerate(known)}
    self._alive = list(known)   # keeps the ids above unique while recording

  def __call__(self, op, x, w):
    w_leaves, w_def = jax.tree_util.tree_flatten(w)
    if not all(isinstance(l, _Sealed) for l in w_leaves):
      raise TypeError('tap(op, x, w): every leaf of w must be a loop invariant of the scan')
    real_w = jax.tree_util.tree_unflatten(w_def, [self.leaves[l.index] for l in w_leaves])
    if not w_leaves:
      return op(x, real_w)
    k = len(self.sites)
    x_leaves, x_def = jax.tree_util.tree_flatten(x)
    slots = []
    for leaf in x_leaves:
      if id(leaf) not in self._slot_of:
        self._slot_of[id(leaf)] = ('x', len(self.x_leaves))
        self.x_leaves.append(leaf)
      slots.append(self._slot_of[id(leaf)])
    self.sites.append(_TapSite(op, w_def, tuple(l.index for l in w_leaves), x_def,
                               tuple(slots)))
    if self.mode == 'replay':
      y = _replay(op, x, real_w, self.saved[k], self.probes[k])
    else:
      y = op(x, real_w)
    self.outputs.append(y)
    for j, leaf in enumerate(jax.tree_util.tree_leaves(y)):
      self._slot_of.setdefault(id(leaf), ('out', k, j))
      self._alive.append(leaf)
    return y


def _replay(op, x, w, saved, probe):
  """saved + probe, differentiated as op(x, w) + probe would be w.r.t. x and probe.

  `saved` is op(x, w) from the forward scan, so the reverse scan does not
  compute the op again: only its transpose w.r.t. x (for a matrix product,
  dy W^T), which needs no forward value.
  """
  @jax.custom_vjp
  def replay(x, w, saved, probe):
    return jax.tree_util.tree_map(jnp.add, saved, probe)

  def replay_fwd(x, w, saved, probe):
    return replay(x, w, saved, probe), (x, w, saved)

  def replay_bwd(res, dy):
    x, w, saved = res
    x_float, x_rebuild = _split(x)
    _, vjp = jax.vjp(lambda xf: op(x_rebuild(xf), w), x_float)
    (dx_float,) = vjp(dy)
    _, dx_rebuild = _split(jax.tree_util.tree_map(_zero_cotangent, x))
    return (dx_rebuild(dx_float), jax.tree_util.tree_map(jnp.zeros_like, w),
            jax.tree_util.tree_map(jnp.zeros_like, saved), dy)

  replay.defvjp(replay_fwd, replay_bwd)
  return replay(x, w, saved, probe)


def _is_float(a) -> bool:
  return jnp.issubdtype(jnp.result_type(a), jnp.inexact)


def _zero_cotangent(a):
  a = jnp.asarray(a) if not hasattr(a, 'dtype') else a
  if _is_float(a):
    return jnp.zeros(a.shape, a.dtype)
  return np.zeros(a.shape, jax.dtypes.float0)


def _split(tree):
  """tree -> (float leaves, rebuild(float leaves) -> tree with the other leaves kept)."""
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  mask = [_is_float(l) for l in leaves]
  floats = [l for l, m in zip(leaves, mask) if m]

  def rebuild(new_floats):
    it = iter(new_floats)
    return jax.tree_util.tree_unflatten(
        treedef, [next(it) if m else l for l, m in zip(leaves, mask)])
  return floats, rebuild


def _floats(tree):
  return _split(tree)[0]


def plain_scan(step, invariants, constants, init, xs, unroll: int = 1):
  """The same loop under plain `lax.scan` autodiff (the reference for `tapped_scan`)."""
  return jax.lax.scan(lambda c, x: step(apply, invariants, constants, c, x), init, xs,
                      unroll=unroll)


def tapped_scan(step, invariants, constants, init, xs, unroll: int = 1):
  """`plain_scan` with the hand-written backward pass described in the module docstring."""
  inv_leaves, inv_def = jax.tree_util.tree_flatten(invariants)
  sealed = jax.tree_util.tree_unflatten(
      inv_def, [_Sealed(i, l.shape, l.dtype) for i, l in enumerate(inv_leaves)])

  @jax.custom_vjp
  def run(inv_leaves, constants, init, xs):
    inv = jax.tree_util.tree_unflatten(inv_def, inv_leaves)
    return plain_scan(step, inv, constants, init, xs, unroll)

  def run_fwd(inv_leaves, constants, init, xs):
    def body(carry, x):
      rec = _Recorder('save', inv_leaves)
      new, y = step(rec, sealed, constants, carry, x)
      return new, (y, carry, rec.outputs)
    final, (ys, carries, saved) = jax.lax.scan(body, init, xs, unroll=unroll)
    return (final, ys), (inv_leaves, constants, init, carries, xs, saved)

  def run_bwd(res, g):
    inv_leaves, constants, init, carries, xs, saved = res
    g_final, g_ys = g
    # Trace one step here (outside the loop; XLA drops it as dead code) to learn the
    # tap sites and bind their ops to this scope's arrays.
    first = lambda a: a[0]
    carry0, x0 = jax.tree_util.tree_map(first, (carries, xs))
    trace = _Recorder('trace', inv_leaves, known=jax.tree_util.tree_leaves((carry0, x0)))
    step(trace, sealed, constants, carry0, x0)
    sites = trace.sites
    zero_probes = [jax.tree_util.tree_map(jnp.zeros_like, y) for y in trace.outputs]

    def bwd_body(d_carry, inp):
      carry, x, saved_t, g_y = inp
      c_float, c_rebuild = _split(carry)
      x_float, x_rebuild = _split(x)

      def f(c_float, x_float, probes):
        carry, x = c_rebuild(c_float), x_rebuild(x_float)
        rec = _Recorder('replay', inv_leaves, known=jax.tree_util.tree_leaves((carry, x)),
                        saved=saved_t, probes=probes)
        new, y = step(rec, sealed, constants, carry, x)
        return (_floats(new), _floats(y)), rec.x_leaves
      _, vjp, x_taps = jax.vjp(f, c_float, x_float, zero_probes, has_aux=True)
      d_prev, d_x, d_probes = vjp((d_carry, _floats(g_y)))
      return d_prev, (x_taps, d_x, d_probes)

    d_init_floats, (x_taps, d_x, d_probes) = jax.lax.scan(
        bwd_body, _floats(g_final), (carries, xs, saved, g_ys), reverse=True, unroll=unroll)

    # The invariants' cotangents: one contraction over all steps per tap.
    known = jax.tree_util.tree_leaves((carries, xs))
    stacks = {'known': lambda i: known[i], 'x': lambda i: x_taps[i],
              'out': lambda k, j: jax.tree_util.tree_leaves(saved[k])[j]}
    d_inv = [None] * len(inv_leaves)
    for site, d_y in zip(sites, d_probes):
      x_stack = jax.tree_util.tree_unflatten(
          site.x_def, [stacks[slot[0]](*slot[1:]) for slot in site.x_slot])
      w = jax.tree_util.tree_unflatten(site.w_def, [inv_leaves[i] for i in site.w_index])
      if getattr(site.op, 'stacked_cotangent', None) is not None:
        d_w = site.op.stacked_cotangent(x_stack, d_y, w)
      else:
        _, vjp = jax.vjp(lambda w, x_stack=x_stack, op=site.op:
                         jax.vmap(op, in_axes=(0, None))(x_stack, w), w)
        (d_w,) = vjp(d_y)
      for i, d in zip(site.w_index, jax.tree_util.tree_leaves(d_w)):
        d_inv[i] = d if d_inv[i] is None else d_inv[i] + d
    # In the invariant's own dtype: a tap may compute in a wider one (e.g. a bfloat16
    # model's location read-out in float32), and custom_vjp wants the primal's.
    d_inv = [jnp.zeros(l.shape, l.dtype) if d is None else d.astype(l.dtype)
             for d, l in zip(d_inv, inv_leaves)]

    _, init_rebuild = _split(jax.tree_util.tree_map(_zero_cotangent, init))
    _, xs_rebuild = _split(jax.tree_util.tree_map(_zero_cotangent, xs))
    return (d_inv, jax.tree_util.tree_map(_zero_cotangent, constants),
            init_rebuild(d_init_floats), xs_rebuild(d_x))

  run.defvjp(run_fwd, run_bwd)
  return run(inv_leaves, constants, init, xs)
