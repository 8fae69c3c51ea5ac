"""Evaluation metrics, on id arrays (host side, NumPy).

Sequence accuracy (the metric of the paper's Tables 2 and 3), edit distance (the
paper's App. C), and Dubois et al.'s (ACL 2020) sequence accuracy before
`<eos>` (SeqAccBE) and attention loss.

All functions take predictions and targets as int arrays [n, T] padded with
`<pad>` (id 0); a sequence is cut at its first `<eos>` (exclusive) and nothing
else is trimmed. Sequence accuracy and SeqAccBE first pad the narrower of the
two arrays with `<pad>`, so a prediction without `<eos>` has not ended.
"""

from typing import Dict, Optional

import editdistance
import numpy as np


def cut_lengths(ids: np.ndarray, eos_id: int) -> np.ndarray:
  """Index of the first `<eos>` per row, or the row width when there is none. [n, T] -> [n]."""
  is_eos = ids == eos_id
  return np.where(is_eos.any(-1), is_eos.argmax(-1), ids.shape[-1])


def _masked(ids: np.ndarray, lengths: np.ndarray, fill: int = -1) -> np.ndarray:
  keep = np.arange(ids.shape[-1])[None, :] < lengths[:, None]
  return np.where(keep, ids, fill)


def sequence_accuracy(pred: np.ndarray, target: np.ndarray, eos_id: int) -> np.ndarray:
  """1 iff the cut prediction equals the cut target exactly, length included. -> [n] bool."""
  width = max(pred.shape[-1], target.shape[-1])
  pred = np.pad(pred, ((0, 0), (0, width - pred.shape[-1])))
  target = np.pad(target, ((0, 0), (0, width - target.shape[-1])))
  pl, tl = cut_lengths(pred, eos_id), cut_lengths(target, eos_id)
  same = (_masked(pred, pl) == _masked(target, tl)).all(-1)
  return same & (pl == tl)


def seq_acc_before_eos(pred: np.ndarray, target: np.ndarray, eos_id: int) -> np.ndarray:
  """SeqAccBE (Dubois et al.): the prediction before its `<eos>` equals the target's prefix of that length.

  A prediction longer than the target is wrong. -> [n] bool.
  """
  width = max(pred.shape[-1], target.shape[-1])
  pred = np.pad(pred, ((0, 0), (0, width - pred.shape[-1])))
  target = np.pad(target, ((0, 0), (0, width - target.shape[-1])))
  pl, tl = cut_lengths(pred, eos_id), cut_lengths(target, eos_id)
  same = (_masked(pred, pl) == _masked(target, pl)).all(-1)
  return same & (pl <= tl)


def edit_distances(pred: np.ndarray, target: np.ndarray, eos_id: int) -> np.ndarray:
  """Token-level Levenshtein distance between the cut sequences (App. C). -> [n]."""
  pl, tl = cut_lengths(pred, eos_id), cut_lengths(target, eos_id)
  return np.array([editdistance.eval(p[:a].tolist(), t[:b].tolist())
                   for p, t, a, b in zip(pred, target, pl, tl)], np.float64)


def attention_loss(attention: np.ndarray, gold: np.ndarray, target_len: np.ndarray) -> float:
  """Dubois et al.'s attention loss: mean squared error, in token positions, between
  the *expected* attended source position and the gold one, over the target
  tokens before `<eos>`.

  attention: [n, T, S] weights over encoder positions (position 0 = START, so
  source token j is encoder position j + 1); gold: [n, T'] source indices (-1 =
  none); target_len: [n] target lengths *without* `<eos>`.
  """
  steps = min(attention.shape[1], gold.shape[1])
  expected = (attention[:, :steps] * np.arange(attention.shape[-1])).sum(-1) - 1.0
  gold = gold[:, :steps].astype(np.float64)
  keep = (np.arange(steps)[None, :] < target_len[:, None]) & (gold >= 0)
  if not keep.any():
    return float('nan')
  return float(((expected - gold) ** 2)[keep].mean())


def summarize(pred: np.ndarray, target: np.ndarray, eos_id: int,
              attention: Optional[np.ndarray] = None,
              gold: Optional[np.ndarray] = None) -> Dict[str, float]:
  """All metrics of one split: accuracy and seq_acc_be in %, mean edit distance,
  and the attention loss when gold attention is given."""
  out = {
      'accuracy': 100.0 * float(sequence_accuracy(pred, target, eos_id).mean()),
      'seq_acc_be': 100.0 * float(seq_acc_before_eos(pred, target, eos_id).mean()),
      'edit_distance': float(edit_distances(pred, target, eos_id).mean()),
      'n': int(len(target)),
  }
  if attention is not None and gold is not None:
    out['attention_loss'] = attention_loss(attention, gold, cut_lengths(target, eos_id))
  return out


def token_accuracy(pred: np.ndarray, target: np.ndarray, eos_id: int) -> np.ndarray:
  """Per-token accuracy (the Chomsky-hierarchy papers' score), per row. -> [n] in [0, 1].

  The fraction of the gold output positions j < len(gold) (the target cut at its
  first `<eos>`; the gold `<eos>` itself does not count, nor does padding) where
  the prediction, cut at its own first `<eos>`, holds the gold token:

      acc = |{j < len(gold): pred_j == gold_j, j < len(pred)}| / len(gold).

  A prediction shorter than the gold output counts the missing positions wrong; a
  longer one is scored on the gold positions only (its extra tokens do not count, as
  in Delétang et al. 2023 / Ruoss et al. 2023, whose outputs have the gold length).
  A row whose gold output is empty scores 1 iff the prediction is empty too.
  """
  width = max(pred.shape[-1], target.shape[-1])
  pred = np.pad(pred, ((0, 0), (0, width - pred.shape[-1])))
  target = np.pad(target, ((0, 0), (0, width - target.shape[-1])))
  pl, tl = cut_lengths(pred, eos_id), cut_lengths(target, eos_id)
  gold = np.arange(width)[None, :] < tl[:, None]
  hits = ((_masked(pred, pl) == target) & gold).sum(-1)
  return np.where(tl > 0, hits / np.maximum(tl, 1), (pl == 0).astype(np.float64))
