"""An MCP client from the registry (PyPI `mcp`) against the service's /mcp endpoint, driven by tests/it/mcp.rs.

    python client.py URL TOKEN CALLS_JSON

Connects over Streamable HTTP with the bearer token, initialises, lists the tools, calls each (name, arguments) of
CALLS_JSON in turn, and prints one JSON document: the tools with their input schemas, and each call's result
(is_error, text, structured content) or the error the call raised.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


async def main(url: str, token: str, calls: list) -> dict:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with streamable_http_client(url, http_client=http) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            init = await session.initialize()
            listed = await session.list_tools()
            out = {
                "server": init.server_info.name if getattr(init, "server_info", None) else None,
                "tools": [{"name": t.name, "input_schema": t.input_schema} for t in listed.tools],
                "calls": [],
            }
            for name, arguments in calls:
                try:
                    result = await session.call_tool(name, arguments)
                    text = "".join(getattr(c, "text", "") for c in result.content)
                    out["calls"].append(
                        {"name": name, "is_error": bool(result.is_error), "text": text,
                         "structured": result.structured_content}
                    )
                except Exception as error:  # a protocol error: the test decides whether that was expected
                    out["calls"].append({"name": name, "protocol_error": str(error)})
            return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))))
