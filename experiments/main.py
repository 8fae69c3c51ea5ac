"""Launcher script: `python experiments/main.py --task=copy --model=onestep --workdir=/tmp/x`.

Same flags as the installed `monoloc-train`; see monoloc_jax/main.py.
"""

from monoloc_jax.cli import run

if __name__ == '__main__':
  run()
