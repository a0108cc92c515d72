"""Drives `palisade serve` for tests/relay.rs with the Python `mcp` SDK as the agent's client,
which declares sampling and elicitation (unless RELAY_NO_CALLBACKS=1) and counts every
request that reaches it. Usage:
    relay_drive.py CALLS_JSON -- CMD ARGS...
CALLS_JSON is [{"tool": NAME, "args": {...}}]. Prints one JSON object: {"tools": [...],
"calls": [{"tool", "error", "text"}], "sampling": [prompt texts seen], "elicitation":
[messages seen], "cancelled": [prompts whose sampling was cancelled while the client
answered], "modes": [the mode of each elicitation seen]}. A prompt starting with "hang" is answered only after 60 s, unless cancelled;
with RELAY_WAIT_CANCEL=1 the client waits (up to 30 s) after its calls until one was. With
RELAY_TOGETHER=1 the calls are made at once, each started 0.3 s after the one before.
"""

import asyncio
import json
import os
import sys

import anyio
from mcp import types

from common import call_each, command_after_dashes, sampled, session, tool_names

seen = {"sampling": [], "elicitation": [], "cancelled": [], "modes": []}


async def on_sampling(context, params):
    texts = [getattr(m.content, "text", "") for m in params.messages]
    if texts and texts[0].startswith("hang"):
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            seen["cancelled"].append(texts[0])
            raise
    seen["sampling"].append({"text": "\n".join(texts), "includeContext": params.include_context,
                             "meta": (params.meta or {}) if isinstance(params.meta, dict) else
                             (params.meta.model_dump() if params.meta else {})})
    return sampled("canned-by-relay-client", "relay-test-model")


async def on_elicitation(context, params):
    seen["elicitation"].append(params.message)
    seen["modes"].append(getattr(params, "mode", None) or "form")
    return types.ElicitResult(action="accept", content={"answer": "canned-answer", "name": "canned-name"})


async def main():
    calls = json.loads(sys.argv[1])
    kw = {}
    if os.environ.get("RELAY_NO_CALLBACKS") != "1":
        kw = {"sampling_callback": on_sampling, "elicitation_callback": on_elicitation}
    async with session(command_after_dashes(), "RELAY_ERRLOG", "w", init_timeout=90, **kw) as s:
        names = await tool_names(s)
        if os.environ.get("RELAY_TOGETHER") == "1":
            async def later(i, c):
                await anyio.sleep(0.3 * i)
                return await call_each(s, [c])
            each = await asyncio.gather(*(later(i, c) for i, c in enumerate(calls)))
            out = [r for rs in each for r in rs]
        else:
            out = await call_each(s, calls)
        if os.environ.get("RELAY_WAIT_CANCEL") == "1":
            with anyio.move_on_after(30):
                while not seen["cancelled"]:
                    await anyio.sleep(0.05)
    print(json.dumps({"tools": names, "calls": out, **seen}, default=str))


asyncio.run(main())
