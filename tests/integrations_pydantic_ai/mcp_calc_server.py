"""A real MCP server on stdio (the ``mcp`` SDK's ``MCPServer``) for the MCP test: one tool,
``add``, which appends a line to the side file named by its first argument each time it runs.

    python mcp_calc_server.py CALLS_FILE
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("calc")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    with open(sys.argv[1], "a", encoding="utf-8") as calls:
        calls.write(f"add {a} {b}\n")
    return a + b


if __name__ == "__main__":
    server.run()
