"""Buys from Umpire's MCP endpoint the way an agent living in MCP does: the official MCP
Python SDK client (streamable HTTP) wrapped by x402's MCP client (PyPI `x402`,
`x402.mcp.x402MCPSession`), paying with the devnet's demo payer (ExactEvmScheme,
eth_account). Prints one JSON line: {"is_error", "payment_made", "payment_response",
"structured", "texts"}.

  python tests/py/mcp_buy.py --devnet devnet.json --url http://127.0.0.1:8080/mcp \
      --tool buy_verdict --arguments '{"tier": "basic", ...}'
"""

import argparse
import asyncio
import json

from eth_account import Account
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from x402 import x402Client
from x402.mcp import x402MCPSession
from x402.mechanisms.evm.exact import ExactEvmClientScheme


def as_plain(value):
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, exclude_none=True)
    return value


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--devnet", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--tool", required=True)
    p.add_argument("--arguments", required=True)
    args = p.parse_args()
    with open(args.devnet) as f:
        devnet = json.load(f)

    client = x402Client()
    client.register(devnet["network"], ExactEvmClientScheme(Account.from_key(devnet["payer_private_key"])))
    # The devnet token is not one of the client's default assets: allowed explicitly,
    # capped at the most expensive product ($5).
    client.set_spend_controls(
        {
            "allowed_assets": [
                {"network": devnet["network"], "asset": devnet["asset"], "max_amount_per_payment": "5000000"}
            ]
        }
    )
    async with streamable_http_client(args.url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            paying = x402MCPSession(session, client)
            await paying.initialize()
            result = await paying.call_tool(args.tool, json.loads(args.arguments))
    raw = result.raw_result
    print(
        json.dumps(
            {
                "is_error": bool(result.is_error),
                "payment_made": result.payment_made,
                "payment_response": as_plain(result.payment_response),
                "structured": getattr(raw, "structuredContent", None),
                "texts": [getattr(c, "text", None) for c in result.content],
            }
        )
    )


asyncio.run(main())
