"""The library's one exception type.

Every user-facing failure (unknown names, bad data, bad flag values, NaN losses,
corrupt checkpoints) raises `MonolocError` with a one-line message. It subclasses
`ValueError` so that callers can also catch it as such; the command-line entry
points catch it and print the message instead of a traceback (`one_line_errors`).
"""

import functools
import sys
from typing import Any, Callable


class MonolocError(ValueError):
  """A clear, one-line, user-facing error."""


class WorkdirInUse(MonolocError):
  """The workdir is locked by another live process (`rundir.lock`)."""


def unknown_name(kind: str, name: str, valid) -> MonolocError:
  """Builds the standard 'unknown X' error that lists the valid choices."""
  return MonolocError(
      f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(valid))}")


def os_error_message(e: OSError) -> str:
  """'<reason>: <path>' for an OSError (the path it names, if any)."""
  reason = e.strerror or str(e) or type(e).__name__
  return f'{reason}: {e.filename}' if e.filename else reason


def one_line_errors(main: Callable[..., Any]) -> Callable[..., Any]:
  """`main` for a command line: a MonolocError prints `error: <message>` on stderr
  and exits with status 2, instead of a traceback; so does an OSError the library
  did not name itself (`error: <reason>: <path>`)."""
  @functools.wraps(main)
  def run(*args, **kwargs):
    try:
      return main(*args, **kwargs)
    except MonolocError as e:
      message = str(e)
    except OSError as e:
      message = os_error_message(e)
    print(f'error: {message}', file=sys.stderr)
    sys.exit(2)
  return run
