"""Client-chosen request ids (SGLang's ``rid``) and ``/abort_request``.

A request that names a ``rid`` (on /generate, or as extra body on the OpenAI routes) is
registered under it while it runs, so ``POST /abort_request {"rid"}`` can end it, waiting or
running; its engine requests carry that id (``meta_info.id``). A rid already running is a
400, as SGLang refuses duplicate ids. The registry is per app (``app.state.request_ids``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from sglang_lite.errors import InvalidRequest
from sglang_lite.server.generation import Job, StreamGroup

router = APIRouter()


@dataclass(slots=True)
class _Entry:
    engine_rids: list[str]
    aborted: bool = False


@dataclass(slots=True)
class RequestIds:
    """rid -> the engine requests started under it (event-loop only, no locking)."""

    entries: dict[str, _Entry] = field(default_factory=dict)

    def reserve(self, rid: str, engine_rids: list[str]) -> _Entry:
        if rid in self.entries:
            raise InvalidRequest("rid", f"a request with rid {rid!r} is already running", code="duplicate_rid")
        entry = self.entries[rid] = _Entry(engine_rids)
        return entry

    def release(self, rid: str, entry: _Entry) -> None:
        if self.entries.get(rid) is entry:
            del self.entries[rid]

    def abort(self, engine, rid: str) -> bool:
        entry = self.entries.get(rid)
        if entry is None:
            return False
        entry.aborted = True
        for r in entry.engine_rids:
            engine.abort(r)
        return True

    def abort_all(self, engine) -> int:
        """Abort every request of the engine (SGLang's ``abort_all``), named or not; returns
        how many named ones there were."""
        named = sum(self.abort(engine, rid) for rid in list(self.entries))
        engine.abort_all()
        return named


def assign_rids(jobs: list[Job], rids: list[str] | None) -> dict[str, list[str]]:
    """Give each job its engine rid: a prompt's rid as is when it has one choice, else
    ``{rid}-{choice}``. ``rids``: one per prompt. Returns rid -> its engine rids."""
    if rids is None:
        return {}
    per_prompt: dict[int, list[Job]] = {}
    for job in jobs:
        per_prompt.setdefault(job.prompt_index, []).append(job)
    out: dict[str, list[str]] = {}
    for p, group in per_prompt.items():
        for j, job in enumerate(group):
            job.rid = rids[p] if len(group) == 1 else f"{rids[p]}-{j}"
            out.setdefault(rids[p], []).append(job.rid)
    return out


def rid_list(rid: str | list[str] | None, num_prompts: int, single: bool) -> list[str] | None:
    """SGLang's ``rid``: a string for one prompt, a list with one per prompt for a batch."""
    if rid is None:
        return None
    rids = [rid] if isinstance(rid, str) else list(rid)
    if isinstance(rid, str) and not single and num_prompts != 1:
        raise InvalidRequest("rid", "a batch takes a list of rids, one per prompt")
    if len(rids) != num_prompts or not all(isinstance(r, str) and r for r in rids):
        raise InvalidRequest("rid", f"must be {num_prompts} non-empty string(s), one per prompt")
    if len(set(rids)) != len(rids):
        raise InvalidRequest("rid", "the rids of a batch must differ")
    return rids


async def open_group(state, request, jobs: list[Job], rids: list[str] | None = None,
                     **options) -> StreamGroup:
    """``StreamGroup.open`` for jobs that may carry client rids: registered before they are
    submitted (an abort that arrives meanwhile still ends them), released when the group
    closes."""
    engine_rids = assign_rids(jobs, rids)
    registry: RequestIds = state.request_ids
    held: list[tuple[str, _Entry]] = []
    try:
        for rid, ids in engine_rids.items():
            held.append((rid, registry.reserve(rid, ids)))
        group = await StreamGroup.open(state, request, jobs, **options)
    except BaseException:
        for rid, entry in held:
            registry.release(rid, entry)
        raise
    for rid, entry in held:
        group.on_close.append(lambda rid=rid, entry=entry: registry.release(rid, entry))
        if entry.aborted:  # aborted while it was being submitted
            for r in entry.engine_rids:
                state.engine.abort(r)
    return group


class AbortRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    rid: str | None = None
    abort_all: bool = False


@router.post("/abort_request")
async def abort_request(body: AbortRequest, request: Request):
    state = request.app.state
    if body.abort_all:
        return {"success": True, "aborted": state.request_ids.abort_all(state.engine)}
    if not body.rid:
        raise InvalidRequest("rid", "required (or abort_all: true)")
    found = state.request_ids.abort(state.engine, body.rid)
    return {"success": found, "message": None if found else f"rid: no running request has rid {body.rid!r}"}
