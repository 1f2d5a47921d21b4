"""One exception family for kvplan.

The CLI maps :class:`UsageError` (bad input: a file, field or flag) to one line on stderr and exit
code 2, and :class:`DoesNotFit` (a valid plan that does not fit) to one line and exit code 1.
"""


class KvplanError(Exception):
    """Base class of every error kvplan raises on purpose."""

    exit_code = 2


class UsageError(KvplanError):
    """Bad input: the message names the file, field or flag, what was wrong and what is allowed."""

    exit_code = 2


class SpecError(UsageError):
    """A model spec (YAML or config.json) is missing, malformed or inconsistent."""


class DoesNotFit(KvplanError):
    """A valid plan that does not fit the memory available (an answer, not a usage error)."""

    exit_code = 1


class MissingExtra(UsageError):
    """An optional dependency (torch, matplotlib) is not installed."""


class LoadRefused(UsageError):
    """The engine refuses to load the checkpoint at this layout (its own load-time check: block-quantized
    weights, expert counts); the message quotes the engine. ``kvplan fleet`` shows it as the layout's reason."""
