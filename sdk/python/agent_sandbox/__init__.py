"""Python client for agent-sandbox: disposable Linux sandboxes for AI agents.

Standard library only (Python 3.9+). Talks to sandboxd over HTTP or a Unix socket.

    from agent_sandbox import Sandbox

    with Sandbox(base_url="http://127.0.0.1:3000", api_key="sk_test_...") as sb:
        with sb.create(template="python") as session:
            print(session.run_code("print(2 + 2)").stdout)
"""

from .client import (
    ExecResult,
    FileEntry,
    FileStat,
    OutputChunk,
    Port,
    Preview,
    Sandbox,
    SandboxError,
    Session,
    StreamEvent,
    Watch,
    WatchEvent,
)

__all__ = [
    "ExecResult",
    "FileEntry",
    "FileStat",
    "OutputChunk",
    "Port",
    "Preview",
    "Sandbox",
    "SandboxError",
    "Session",
    "StreamEvent",
    "Watch",
    "WatchEvent",
]
__version__ = "0.1.0"
