"""Ctrl-C for the command-line tools, in place before anything heavy is imported.

`monoloc-train` (cli.py) and `python -m monoloc_jax.main` call `stop_on_interrupt`
first, so that a SIGINT at any moment, even while jax is still being imported,
ends the process with one line and exit code 130. Only the standard library is
imported by this module.
"""

import os
import signal
import sys
import threading

INTERRUPTED = 'interrupted; rerun the same command to resume from the last checkpoint'
_WATCHER = 'monoloc-sigint'


def exit_interrupted() -> None:
  """One line on stderr and exit code 130, at once.

  The process ends as if killed: every workdir file is written atomically and a
  checkpoint counts only once its manifest exists, so the next run resumes from
  the last complete epoch (tests/workdir_test.py kills a run at every phase to
  prove it). Exiting at once, rather than unwinding, also stops a long XLA
  compile and leaves no thread behind to print a traceback.
  """
  try:
    sys.stdout.flush()
    os.write(2, f'{INTERRUPTED}\n'.encode())
  finally:
    os._exit(130)  # pylint: disable=protected-access


def stop_on_interrupt() -> None:
  """Routes SIGINT to `exit_interrupted` for this command-line process (idempotent).

  SIGINT is blocked in the calling (main) thread, and so in every thread started
  later, and a watcher thread waits for it with `sigwait`: it acts even while the
  main thread is inside a long C++ call. The Python-level handler covers threads
  that existed before.
  """
  if any(t.name == _WATCHER for t in threading.enumerate()):
    return
  signal.signal(signal.SIGINT, lambda signum, frame: exit_interrupted())
  signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

  def watch() -> None:
    signal.sigwait({signal.SIGINT})
    exit_interrupted()

  threading.Thread(target=watch, name=_WATCHER, daemon=True).start()

