"""deepbox: sandboxes for Python deep agents, through deepbox's daemon.

A thin, pure-Python client of the C++ ``deepbox`` CLI (lifecycle) and of the
``deepbox-sandboxd`` daemon inside every sandbox (processes and files, HTTP
over a unix socket or TCP, standard library only).

    from deepbox import Sandbox

    with Sandbox.create(labels={"team": "ml"}, ttl=600) as sb:
        print(sb.exec("python3 -c 'print(1+1)'").text)
        sb.write("/workspace/a.txt", "hello")

``deepbox.deepagents.DeepboxSandbox`` is the deepagents backend.
"""

from deepbox._version import __version__
from deepbox.client import DaemonClient, ExecCancel, ExecResult, FileInfo, GrepMatch, GrepResult, ReadResult, StreamEvent
from deepbox.errors import (
    CLIError,
    ConflictError,
    DaemonError,
    DaemonUnavailableError,
    DeepboxError,
    ExecCancelledError,
    FileTooLargeError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ProtocolError,
    SandboxGoneError,
    SandboxNotFoundError,
    UnsupportedHostError,
)
from deepbox.sandbox import AsyncSandbox, Sandbox, Secret, find_deepbox_bin

__all__ = [
    "AsyncSandbox",
    "CLIError",
    "ConflictError",
    "DaemonClient",
    "DaemonError",
    "DaemonUnavailableError",
    "DeepboxError",
    "ExecCancel",
    "ExecCancelledError",
    "ExecResult",
    "FileTooLargeError",
    "FileInfo",
    "GrepMatch",
    "GrepResult",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "ProtocolError",
    "ReadResult",
    "Sandbox",
    "Secret",
    "SandboxGoneError",
    "SandboxNotFoundError",
    "StreamEvent",
    "UnsupportedHostError",
    "__version__",
    "find_deepbox_bin",
]
