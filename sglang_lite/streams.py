"""A submitted request's output as the Python API hands it out: an iterator (or an async
iterator) of SGLang's chunk dicts. Closing one (or dropping it) before the end aborts the
request, started or not. ``collect`` and ``acollect`` merge a stream into ``generate``'s
result with the one accumulator the HTTP layer uses too."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sglang_lite.outputs import OutputAccumulator


class RequestStream:
    def __init__(self, rid: str, abort: Callable[[str], None]):
        self._rid, self._abort, self._done = rid, abort, False

    @property
    def rid(self) -> str:
        return self._rid

    def _mark(self, chunk: dict) -> dict:
        self._done = chunk["finished"]
        return chunk

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._abort(self._rid)

    def __del__(self):
        self.close()


class ChunkStream(RequestStream):
    def __init__(self, rid: str, abort: Callable[[str], None], get: Callable[[], dict]):
        super().__init__(rid, abort)
        self._get = get

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        if self._done:
            raise StopIteration
        return self._mark(self._get())


class AsyncChunkStream(RequestStream):
    def __init__(self, rid: str, abort: Callable[[str], None], aq: asyncio.Queue):
        super().__init__(rid, abort)
        self._aq = aq

    def __aiter__(self):
        return self

    async def __anext__(self) -> dict:
        if self._done:
            raise StopAsyncIteration
        try:
            chunk = await self._aq.get()
        except BaseException:  # cancelled while waiting: the consumer is gone
            self.close()
            raise
        return self._mark(chunk)

    async def aclose(self) -> None:
        self.close()


def collect(chunks) -> dict:
    out = OutputAccumulator()
    for chunk in chunks:
        out.add(chunk)
        if chunk["finished"]:
            break
    return out.result()


async def acollect(chunks) -> dict:
    out = OutputAccumulator()
    async for chunk in chunks:
        out.add(chunk)
    return out.result()
