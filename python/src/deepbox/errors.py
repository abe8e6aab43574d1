"""Exceptions raised by the deepbox client.

Every error from the daemon carries its stable code (``NOT_FOUND``,
``PERMISSION_DENIED``, ...; see docs/sandboxd-api.md) and message; every error
from the ``deepbox`` CLI carries its message (stderr) and exit code.
"""

from __future__ import annotations


class DeepboxError(Exception):
    """Base class of every error raised by this package."""


class DaemonError(DeepboxError):
    """The sandbox's daemon answered with an error.

    Attributes:
        code: The daemon's error code, e.g. ``"NOT_FOUND"``.
        message: The daemon's message.
        status: The HTTP status of the answer.
    """

    def __init__(self, code: str, message: str, status: int = 0) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class NotFoundError(DaemonError):
    """``NOT_FOUND``: no such file, directory, process or session."""


class PermissionDeniedError(DaemonError):
    """``PERMISSION_DENIED``: not allowed, or the path leaves the daemon's root."""


class InvalidArgumentError(DaemonError):
    """``INVALID_ARGUMENT`` (also ``IS_DIRECTORY`` and ``NOT_DIRECTORY``)."""


class ConflictError(DaemonError):
    """``CONFLICT``: e.g. an ambiguous edit or a non-empty directory."""


_BY_CODE: dict[str, type[DaemonError]] = {
    "NOT_FOUND": NotFoundError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "INVALID_ARGUMENT": InvalidArgumentError,
    "IS_DIRECTORY": InvalidArgumentError,
    "NOT_DIRECTORY": InvalidArgumentError,
    "CONFLICT": ConflictError,
}


def daemon_error(code: str, message: str, status: int = 0) -> DaemonError:
    """The exception class that fits ``code``."""
    return _BY_CODE.get(code, DaemonError)(code, message, status)


class DaemonUnavailableError(DeepboxError):
    """The daemon cannot be reached (the sandbox was deleted, expired or died)."""


class SandboxGoneError(DaemonUnavailableError):
    """The sandbox no longer exists: deleted, expired, or dead. Its files are lost.

    Attributes:
        sandbox_id: Its id.
        cause: Why, as deepbox tells it (e.g. "sandbox 'sb-…' expired: its TTL
            ran out at …; it was deleted").
    """

    def __init__(self, sandbox_id: str, cause: str) -> None:
        super().__init__(cause)
        self.sandbox_id = sandbox_id
        self.cause = cause


class ExecCancelledError(DeepboxError):
    """The command was cancelled (``ExecCancel.cancel``); the daemon kills its process group."""


class ProtocolError(DeepboxError):
    """The daemon's answer is not what the API promises (a malformed answer)."""


class FileTooLargeError(DeepboxError):
    """A file is larger than the ``max_bytes`` its reader allowed (``read_bytes``).

    Attributes:
        path: The file.
        max_bytes: The cap.
        size: Its size when the daemon declared it, else None.
    """

    def __init__(self, path: str, max_bytes: int, size: int | None) -> None:
        what = f"{size} bytes" if size is not None else "larger"
        super().__init__(f"{path} is {what}, more than max_bytes={max_bytes}")
        self.path = path
        self.max_bytes = max_bytes
        self.size = size


class CLIError(DeepboxError):
    """The ``deepbox`` command failed.

    Attributes:
        exit_code: Its exit code (1 failed, 2 usage, 3 no such sandbox,
            4 this host cannot run sandboxes; see ``deepbox sandbox --help``).
        message: What it printed on stderr (the ``deepbox: `` prefix removed).
        argv: The command line.
    """

    def __init__(self, exit_code: int, message: str, argv: list[str]) -> None:
        super().__init__(f"deepbox exited with {exit_code}: {message}")
        self.exit_code = exit_code
        self.message = message
        self.argv = argv


class SandboxNotFoundError(CLIError):
    """Exit code 3: no such sandbox (or it expired or was deleted)."""


class UnsupportedHostError(CLIError):
    """Exit code 4: this host cannot run sandboxes, or not with what was asked."""
