"""Load generator for test_load.py, run as a separate process:
``python load_client.py BASE_URL NUM_REQUESTS OUT_JSON``.

Mixed traffic, all at once: non-streamed and streamed completions, streamed chat with a usage
chunk, and streams cancelled after their first event. Writes what it saw to OUT_JSON.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

import httpx

PROMPTS = ["The capital of France is", "List three fruits:", "Once upon a time",
           "def fibonacci(n):", "The quick brown fox"]
KINDS = ("completion", "completion_stream", "chat_stream", "cancelled")


def _request(i: int, rng: random.Random) -> tuple[str, str, dict]:
    kind = KINDS[i % len(KINDS)]
    prompt = PROMPTS[i % len(PROMPTS)]
    sampling = {"max_tokens": rng.randint(1, 8), "temperature": rng.choice([0.0, 0.8]), "seed": i}
    if kind == "chat_stream":
        return kind, "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                              "stream": True, "stream_options": {"include_usage": True},
                                              **sampling}
    body = {"prompt": prompt, **sampling}
    if kind == "cancelled":
        body.update(max_tokens=64, ignore_eos=True)
    if kind != "completion":
        body["stream"] = True
    return kind, "/v1/completions", body


async def _one(client: httpx.AsyncClient, i: int, rng: random.Random) -> dict:
    kind, path, body = _request(i, rng)
    rec = {"i": i, "kind": kind, "path": path, "body": body, "ok": False}
    if not body.get("stream"):
        r = await client.post(path, json=body)
        rec["status"] = r.status_code
        data = r.json()
        choice = data["choices"][0]
        rec["usage"] = data["usage"]
        rec["ok"] = (r.status_code == 200 and isinstance(choice["text"], str)
                     and choice["finish_reason"] in ("stop", "length")
                     and data["usage"]["completion_tokens"] <= body["max_tokens"])
        return rec
    async with client.stream("POST", path, json=body) as r:
        rec["status"] = r.status_code
        events = []
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            events.append(line[6:])
            if kind == "cancelled":
                rec["ok"] = True  # closing the stream here disconnects the client mid-way
                return rec
    payloads = [json.loads(e) for e in events[:-1]]
    finishes = [c["finish_reason"] for p in payloads for c in p["choices"] if c.get("finish_reason")]
    rec["usage"] = payloads[-1].get("usage") if payloads else None
    rec["ok"] = (r.status_code == 200 and events[-1] == "[DONE]" and finishes in (["stop"], ["length"])
                 and (kind != "chat_stream" or rec["usage"]["completion_tokens"] <= body["max_tokens"]))
    return rec


async def main(base_url: str, n: int, out_path: str) -> None:
    rng = random.Random(0)
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(base_url=base_url, timeout=300, limits=limits) as client:
        results = await asyncio.gather(*(_one(client, i, rng) for i in range(n)), return_exceptions=True)
    records = [r if isinstance(r, dict) else {"ok": False, "error": repr(r)} for r in results]
    with open(out_path, "w") as f:
        json.dump(records, f)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
