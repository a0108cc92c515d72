"""Two principals' agents at once against `palisade serve --http --escalation elicit`, with
the Python `mcp` SDK's Streamable HTTP client, for tests/http_front/rounds.rs.

Usage: http_elicit.py URL ALICE_TOKEN BOB_TOKEN. Both sessions are opened (Bob's last, so a
gateway that asked "the latest agent" would ask Bob), then Alice calls faulty__echo, then
Bob does. Alice's agent approves every question, Bob's declines every one. Prints one JSON
report: {"alice": {"asked": [...], "call": {...}}, "bob": {...}} or {"error": "..."}.
Reports; never asserts.
"""

import asyncio
import json
import sys
from contextlib import AsyncExitStack

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from common import call


def answering(asked, approve):
    async def on_elicit(_context, params):
        asked.append(params.message)
        if approve:
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="decline")

    return on_elicit


async def open_session(stack, url, token, asked, approve):
    http = await stack.enter_async_context(
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}))
    streams = await stack.enter_async_context(streamable_http_client(url, http_client=http))
    s = await stack.enter_async_context(
        ClientSession(streams[0], streams[1], elicitation_callback=answering(asked, approve)))
    await asyncio.wait_for(s.initialize(), 30)
    return s


async def main(url, alice_token, bob_token):
    report = {"alice": {"asked": []}, "bob": {"asked": []}}
    async with AsyncExitStack() as stack:
        alice = await open_session(stack, url, alice_token, report["alice"]["asked"], True)
        bob = await open_session(stack, url, bob_token, report["bob"]["asked"], False)
        report["alice"]["call"] = await call(alice, "faulty__echo", {"text": "from alice"})
        report["bob"]["call"] = await call(bob, "faulty__echo", {"text": "from bob"})
    return report


if __name__ == "__main__":
    try:
        out = asyncio.run(main(*sys.argv[1:4]))
    except BaseException as e:  # the report says what failed; the Rust test decides
        out = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out))
