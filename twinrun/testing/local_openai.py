"""A real OpenAI-compatible HTTP server on loopback, for tests and benchmarks.

It is a genuine HTTP server (threads, sockets, JSON) speaking the `/v1/chat/completions` and `/v1/models`
subset that twinrun's executor and judge clients use; only the *model* behind it is scripted: a `responder`
callable maps the request body to the assistant text. Latency and failures can be injected, so tests exercise
the client's real timeout/retry/concurrency code paths.

    with LocalOpenAIServer(lambda req: "<think>x</think><action>look</action>", latency_s=0.05) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x")
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], str]


class LocalOpenAIServer:
    """Serve chat completions on 127.0.0.1:<free port>.

    responder: request JSON -> assistant content.
    latency_s: sleep before answering (simulates model time).
    fail: optional callable(call_index:int, request) -> HTTP status to return instead (e.g. 500), or None.
    """

    def __init__(
        self,
        responder: Responder,
        *,
        latency_s: float = 0.0,
        fail: Callable[[int, dict[str, Any]], int | None] | None = None,
        model: str = "local-test-model",
    ):
        self.responder = responder
        self.latency_s = latency_s
        self.fail = fail
        self.model = model
        self.calls = 0
        self.failures = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> LocalOpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
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

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": "not found"}})
                    return
                with server._lock:
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
