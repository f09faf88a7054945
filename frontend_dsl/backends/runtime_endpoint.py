"""The HTTP backend: SGLang's native ``/generate`` on a running ``sglang-lite serve``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx

from frontend_dsl.backends.base import Backend, BackendError, check_finished
from frontend_dsl.chat_template import PLAIN, ChatTemplate, from_tokenizer


class RuntimeEndpoint(Backend):
    """``RuntimeEndpoint("http://127.0.0.1:30000")``: no local copy of anything is needed.

    Token ids (for ``select``) come from the server's ``/tokenize`` (a server without it: a
    prefill-only ``/generate`` with input logprobs), so they are the server's own. The role
    prefixes come from ``chat_template=`` (a ``ChatTemplate``, a tokenizer or its path), else
    ``tokenizer=``, else the tokenizer directory the server reports at ``/get_model_info`` when
    it is readable here, else plain ``User: ...`` text. ``tokenizer=`` also tokenizes locally.
    """

    def __init__(self, base_url: str, api_key: str | None = None, verify: Any = None,
                 chat_template_name: str | None = None, *, tokenizer: Any = None,
                 chat_template: Any = None, timeout: float = 600.0):
        super().__init__()
        del chat_template_name  # SGLang's template registry name: templates come from the model
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers,
                                   verify=True if verify is None else verify,
                                   limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
        self._tokenizer = _load_tokenizer(tokenizer) if tokenizer is not None else None
        self._template: ChatTemplate | None = (chat_template if isinstance(chat_template, ChatTemplate)
                                               else None)
        self._template_source = chat_template if self._template is None else None
        self._has_tokenize = True

    def _server_tokenizer(self):
        """The tokenizer directory the server loaded, if this machine can read it."""
        try:
            info = self.client.get("/get_model_info").json()
        except (httpx.HTTPError, ValueError):
            return None
        for key in ("tokenizer_path", "model_path"):
            path = info.get(key) if isinstance(info, dict) else None
            if path and os.path.isdir(path):
                try:
                    return _load_tokenizer(path)
                except Exception:  # not a tokenizer directory: try the next
                    continue
        return None

    # ---- requests ---------------------------------------------------------------------------
    def _post(self, body: dict[str, Any], route: str = "/generate") -> Any:
        try:
            resp = self.client.post(route, json=body)
        except httpx.HTTPError as e:
            raise BackendError(f"{self.base_url}{route}: {type(e).__name__}: {e}") from e
        if resp.status_code != 200:
            raise BackendError(f"{self.base_url}{route}: HTTP {resp.status_code}: {_error_text(resp)}")
        return resp.json()

    def _body(self, text: str, sampling_params: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        return {"text": text, "sampling_params": sampling_params,
                **{k: v for k, v in request.items() if v is not None}}

    def generate(self, prompt: str, sampling_params: dict[str, Any], **request: Any) -> Any:
        result = self._post(self._body(prompt, sampling_params, request))
        if isinstance(result, list):
            return [check_finished(r) for r in result]
        return check_finished(result)

    def generate_stream(self, prompt: str, sampling_params: dict[str, Any],
                        **request: Any) -> Iterator[dict[str, Any]]:
        body = {**self._body(prompt, sampling_params, request), "stream": True}
        try:
            with self.client.stream("POST", "/generate", json=body) as resp:
                if resp.status_code != 200:
                    resp.read()
                    raise BackendError(f"{self.base_url}/generate: HTTP {resp.status_code}: "
                                       f"{_error_text(resp)}")
                yield from _deltas(resp.iter_lines())
        except httpx.HTTPError as e:
            raise BackendError(f"{self.base_url}/generate: {type(e).__name__}: {e}") from e

    def prefill(self, texts: list[str]) -> list[dict[str, Any]]:
        results = self._post({"text": list(texts), "sampling_params": {"max_new_tokens": 0}})
        return [r["meta_info"] for r in results]

    def score(self, input_ids: list[list[int]], logprob_start_len: int) -> list[dict[str, Any]]:
        results = self._post({"input_ids": [list(ids) for ids in input_ids],
                              "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
                              "logprob_start_len": logprob_start_len})
        return [check_finished(r)["meta_info"] for r in results]

    def tokenize(self, text: str) -> list[int]:
        return self.tokenize_many([text])[0]

    def tokenize_many(self, texts: list[str]) -> list[list[int]]:
        """One ``/tokenize`` call for all of them (the server's ids, BOS included)."""
        tok = self._tokenizer
        if tok is not None:
            bos = tok.bos_token
            return [tok.encode(t, add_special_tokens=not (bos and t.startswith(bos))) for t in texts]
        if self._has_tokenize:
            try:
                resp = self.client.post("/tokenize", json={"prompt": list(texts)})
            except httpx.HTTPError as e:
                raise BackendError(f"{self.base_url}/tokenize: {type(e).__name__}: {e}") from e
            if resp.status_code == 200:
                return resp.json()["tokens"]
            if resp.status_code not in (404, 405):
                raise BackendError(f"{self.base_url}/tokenize: HTTP {resp.status_code}: {_error_text(resp)}")
            self._has_tokenize = False
        results = self._post({"text": list(texts), "sampling_params": {"max_new_tokens": 0},
                              "return_logprob": True, "logprob_start_len": 0})
        return [[t for _, t, _ in r["meta_info"]["input_token_logprobs"]] for r in results]

    @property
    def chat_template(self) -> ChatTemplate:
        if self._template is None:
            source = self._template_source or self._tokenizer
            tok = _load_tokenizer(source) if source is not None else self._server_tokenizer()
            self._template = from_tokenizer(tok) if tok is not None else PLAIN
        return self._template

    def get_server_info(self) -> dict[str, Any]:
        return self.get_stats()

    def get_stats(self) -> dict[str, Any]:
        try:
            return self.client.get("/get_server_info").json()
        except (httpx.HTTPError, ValueError):
            return {}

    def flush_cache(self) -> None:
        self.client.post("/flush_cache")

    def shutdown(self) -> None:
        self.client.close()


def _load_tokenizer(tokenizer: Any):
    if not isinstance(tokenizer, (str, os.PathLike)):
        return tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.fspath(tokenizer))


def _deltas(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """SSE ``data:`` chunks to text deltas; SGLang sends the text so far, ours may send deltas
    (``finished`` present): both come out as deltas, the last one ``finished``."""
    seen = ""
    last: dict[str, Any] | None = None
    for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        chunk = json.loads(payload)
        if "error" in chunk:
            raise BackendError(f"stream: {_message(chunk['error'])}")
        text = chunk.get("text", "")
        if "finished" not in chunk:  # cumulative (SGLang)
            text, seen = text[len(seen):], text
        finished = bool(chunk.get("finished")) or bool((chunk.get("meta_info") or {}).get("finish_reason"))
        last = {"text": text, "finished": finished, "meta_info": chunk.get("meta_info") or {}}
        if finished:
            check_finished(last)
        yield last
        if finished:
            return
    if last is None or not last["finished"]:
        raise BackendError("stream: the server closed the stream before the request finished")


def _error_text(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        return _message(body.get("error") or body.get("detail") or body)
    return str(body)[:500]


def _message(err: Any) -> str:
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)
