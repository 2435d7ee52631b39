"""A real OpenAI-compatible HTTP server on loopback, for tests and benchmarks.

It is a genuine HTTP server (threads, sockets, JSON) speaking the `/v1/chat/completions` and `/v1/models`
subset that twinrun's executor and judge clients use; only the *model* behind it is scripted: a `responder`
callable maps the request body to the assistant text. Latency and failures can be injected, so tests exercise
the client's real timeout/retry/concurrency code paths.

Decoding defaults behave as a vLLM server's (vllm ModelConfig.get_diff_sampling_param and the chat serving layer,
written out here independently of twinrun's client): a request field left out takes the model's generation config
(`model_generation_config`, the model's generation_config.json) under `generation_config="auto"`, or vLLM's own
defaults under `"vllm"`, with `override_generation_config` on top; `max_new_tokens` there caps max_tokens.
`applied` lists, per chat request, the decoding the server used, and `received` the request's fields besides
model and messages. `/v1/models` says `owned_by: "vllm"`;
`/server_info?config_format=json` (the engine config, with `model_config.generation_config` and
`override_generation_config`) is served only with `dev_mode=True`, as vLLM serves it only under
VLLM_SERVER_DEV_MODE=1.

    with LocalOpenAIServer(lambda req: "<think>x</think><action>look</action>", latency_s=0.05) as srv:
        httpx.post(f"{srv.base_url}/chat/completions", json={"model": "m", "messages": [...]})
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], str]

# vLLM's SamplingParams defaults, and the fields it takes from a generation config (plus max_new_tokens, a cap)
_VLLM_SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
_FROM_GENERATION_CONFIG = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "max_new_tokens")


class JsonHandler(BaseHTTPRequestHandler):
    """What every loopback test server here shares: HTTP/1.1 keep-alive, quiet logs, JSON bodies."""

    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms per
    # response on keep-alive connections (real servers such as uvicorn/vLLM set it too)
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class LocalOpenAIServer:
    """Serve chat completions on 127.0.0.1:<free port>.

    responder: request JSON -> assistant content.
    latency_s: sleep before answering (simulates model time).
    fail: optional callable(call_index:int, request) -> HTTP status to return instead (e.g. 500), or None.
    rejects: request fields the "model" does not accept: a request carrying one gets HTTP 400 with OpenAI's
        error shape (``{"error": {"message", "type": "invalid_request_error", "param", "code"}}``), as reasoning
        models answer ``temperature`` or ``max_tokens``; ``name_param=False`` leaves ``param`` null and the
        message generic (an endpoint whose error does not say which field it refused).
    record: keep every request body in ``requests`` (tests inspect what was sent).
    api_key: when set, a request without ``Authorization: Bearer <api_key>`` gets HTTP 401 (vLLM's --api-key).
    """

    def __init__(
        self,
        responder: Responder,
        *,
        latency_s: float = 0.0,
        fail: Callable[[int, dict[str, Any]], int | None] | None = None,
        model: str = "local-test-model",
        generation_config: str = "auto",
        model_generation_config: dict[str, Any] | None = None,
        override_generation_config: dict[str, Any] | None = None,
        dev_mode: bool = False,
        owned_by: str = "vllm",
        rejects: tuple[str, ...] | list[str] = (),
        name_param: bool = True,
        record: bool = False,
        api_key: str | None = None,
    ):
        self.api_key = api_key
        self.responder = responder
        self.rejects = tuple(rejects)
        self.name_param = name_param
        self.record = record
        self.requests: list[dict[str, Any]] = []
        self.rejected = 0
        self.latency_s = latency_s
        self.fail = fail
        self.model = model
        self.generation_config = generation_config
        self.model_generation_config = dict(model_generation_config or {})
        self.override_generation_config = dict(override_generation_config or {})
        self.dev_mode = dev_mode
        self.owned_by = owned_by
        self.applied: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []  # per chat request: its fields besides model and messages
        self.calls = 0
        self.failures = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def default_sampling_params(self) -> dict[str, Any]:
        """vLLM's get_diff_sampling_param: what the server applies to the fields a request leaves out."""
        config = {} if self.generation_config == "vllm" else dict(self.model_generation_config)
        config.update(self.override_generation_config)
        diff = {k: config[k] for k in _FROM_GENERATION_CONFIG if config.get(k) is not None}
        if "max_new_tokens" in diff:
            diff["max_tokens"] = diff.pop("max_new_tokens")
        return diff

    def resolve(self, req: dict[str, Any]) -> dict[str, Any]:
        """The decoding a chat request runs with: its own fields, else the server's defaults."""
        diff = self.default_sampling_params()
        out = {k: req[k] if req.get(k) is not None else diff.get(k, default)
               for k, default in _VLLM_SAMPLING_DEFAULTS.items()}
        out["presence_penalty"] = req.get("presence_penalty") or 0.0
        cap = diff.get("max_tokens")
        want = req.get("max_tokens")
        out["max_tokens"] = min(want, cap) if want is not None and cap is not None else (want or cap)
        return out

    def server_info(self) -> dict[str, Any]:
        model_config = {"model": self.model, "served_model_name": self.model,
                        "generation_config": self.generation_config,
                        "override_generation_config": self.override_generation_config}
        return {"vllm_config": {"model_config": model_config}, "vllm_env": {}, "system_env": {}}

    # -- lifecycle
    def start(self) -> LocalOpenAIServer:
        server = self

        class Handler(JsonHandler):
            def _refused_key(self) -> bool:
                if server.api_key is None or self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return False
                self._send(401, {"error": {"message": "Unauthorized", "type": "invalid_request_error"}})
                return True

            def do_GET(self) -> None:  # noqa: N802
                if self._refused_key():
                    return
                path = self.path.split("?", 1)[0].rstrip("/")
                if path.endswith("/models"):
                    card = {"id": server.model, "object": "model", "created": int(time.time()),
                            "owned_by": server.owned_by, "root": server.model, "parent": None,
                            "max_model_len": 40960, "permission": []}
                    self._send(200, {"object": "list", "data": [card]})
                elif path == "/server_info" and server.dev_mode:
                    self._send(200, server.server_info())
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(length) or b"{}")
                if self._refused_key():
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": "not found"}})
                    return
                refused = [k for k in server.rejects if k in req]
                if refused:
                    with server._lock:
                        server.rejected += 1
                    name = refused[0]
                    message = (f"Unsupported parameter: '{name}' is not supported with this model."
                               if server.name_param else "Unsupported request for this model.")
                    self._send(400, {"error": {"message": message, "type": "invalid_request_error",
                                               "param": name if server.name_param else None,
                                               "code": "unsupported_parameter"}})
                    return
                with server._lock:
                    if server.record:
                        server.requests.append(req)
                    idx = server.calls
                    server.calls += 1
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if server.latency_s:
                        time.sleep(server.latency_s)
                    status = server.fail(idx, req) if server.fail else None
                    if status:
                        with server._lock:
                            server.failures += 1
                        self._send(status, {"error": {"message": f"injected failure {status}", "type": "server_error"}})
                        return
                    content = server.responder(req)
                    with server._lock:
                        server.applied.append(server.resolve(req))
                        server.received.append({k: v for k, v in req.items() if k not in ("model", "messages")})
                    self._send(
                        200,
                        {
                            "id": f"chatcmpl-{idx}",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": req.get("model", server.model),
                            "choices": [
                                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                            ],
                            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                        },
                    )
                finally:
                    with server._lock:
                        server.in_flight -= 1

        class _Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 1024

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="local-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> LocalOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"
