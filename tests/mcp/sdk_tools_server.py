"""An MCP server written with the official Python SDK, for deepbox's agent
as a client (test_agent_client.py): `echo`; `where`, which says where the
server runs (uid, hostname, /workspace/marker.txt); and `crash`, which exits
the process mid-call. Usage: sdk_tools_server.py [stdio | http PORT]."""

import os
import socket
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("sdk-tools")


@server.tool()
def echo(text: str) -> str:
    """Returns its text."""
    return f"sdk says: {text}"


@server.tool()
def where() -> str:
    """Says where this server runs: its uid, hostname and /workspace/marker.txt."""
    try:
        with open("/workspace/marker.txt") as f:
            marker = f.read().strip()
    except OSError as e:
        marker = f"unreadable ({e.strerror})"
    return f"uid={os.getuid()} hostname={socket.gethostname()} marker={marker}"


@server.tool()
def crash() -> str:
    """Exits the server."""
    sys.stderr.write("sdk server crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
