"""The `monoloc-train` console script (also `python experiments/main.py`).

Ctrl-C is routed to one line and exit code 130 before jax is imported; then the
launcher's flags and dispatch (main.py) run.
"""

from monoloc_jax import interrupts


def run() -> None:
  """Console-script entry point: the SIGINT watcher, then `main.run`."""
  interrupts.stop_on_interrupt()
  from monoloc_jax import main  # pylint: disable=g-import-not-at-top  (imports jax: after the watcher)
  main.run()
