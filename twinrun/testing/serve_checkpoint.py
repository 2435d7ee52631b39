"""A real OpenAI-compatible server holding one checkpoint, in a process of its own: the CPU stand-in for ``vllm serve``
in the served-curator tests (``sweep.curator_server``, :mod:`twinrun.core.sweeps.served`).

    python -m twinrun.testing.serve_checkpoint --model DIR --port P [--dtype float32] [--seed 0] [--threads N]

It speaks the subset of vLLM's API a served sweep uses: ``GET /health``, ``GET /v1/models`` and ``POST
/v1/completions`` with ``prompt`` as a list of token ids (vLLM's shape: ``choices[0].text``, ``token_ids`` when
``return_token_ids``, ``finish_reason``), plus ``GET /stats`` (requests served, for tests). A request is generated
with twinrun's own generation loop (:func:`twinrun.models.batched_generation.generate_rows`, a batch of one) from the
request's token ids, seed, temperature, top_p, top_k (-1 or 0: all tokens), max_tokens and stop_token_ids: the
loop the in-process curator runs, so on one machine the two draw the same tokens for the same seed (one request at a
time; ``--threads`` pins torch's CPU threads to the caller's). vLLM samples with its own kernels: there the tokens
for a seed differ, the distribution does not (DIVERGENCES D10). Its startup prints the port, dtype,
seed and ``CUDA_VISIBLE_DEVICES`` it was given (the log a sweep keeps in ``<out>/servers/``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from twinrun.testing.local_openai import JsonHandler


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twinrun.testing.serve_checkpoint")
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from twinrun.models.batched_generation import generate_rows

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"serve_checkpoint: pid {os.getpid()} model {args.model} port {args.port} dtype {args.dtype} "
          f"seed {args.seed} "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!s} threads {torch.get_num_threads()}",
          flush=True)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    lock = threading.Lock()  # one generation at a time: each request alone, as the in-process curator's batch of one
    stats = {"completions": 0}

    def complete(req: dict[str, Any]) -> dict[str, Any]:
        prompt = req["prompt"]
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            raise ValueError("prompt: a list of token ids is all this server takes")
        top_k = req.get("top_k")
        with lock:
            rows = generate_rows(model, [prompt], [int(req.get("seed") or 0)], max_new_tokens=int(req["max_tokens"]),
                                 temperature=float(req.get("temperature", 1.0)), top_p=float(req.get("top_p", 1.0)),
                                 top_k=None if top_k in (None, 0, -1) else int(top_k),
                                 eos_ids=list(req.get("stop_token_ids") or []), pad_id=int(pad))
            stats["completions"] += 1
        ids = rows[0]
        stop = set(req.get("stop_token_ids") or [])
        finished = bool(ids) and ids[-1] in stop
        choice: dict[str, Any] = {"index": 0, "text": tok.decode(ids, skip_special_tokens=bool(
            req.get("skip_special_tokens", True))), "logprobs": None,
            "finish_reason": "stop" if finished else "length", "stop_reason": ids[-1] if finished else None}
        if req.get("return_token_ids"):
            choice["token_ids"] = ids
        return {"id": f"cmpl-{stats['completions']}", "object": "text_completion", "created": int(time.time()),
                "model": args.model, "choices": [choice],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                          "total_tokens": len(prompt) + len(ids)}}

    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/health":
                self._send(200, {})
            elif path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": args.model, "object": "model",
                                                             "owned_by": "twinrun-test", "root": args.model}]})
            elif path == "/stats":
                self._send(200, dict(stats))
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:  # noqa: N802
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path.rstrip("/") != "/v1/completions":
                self._send(404, {"error": {"message": "not found"}})
                return
            try:
                self._send(200, complete(req))
            except (KeyError, ValueError, TypeError) as e:
                self._send(400, {"error": {"message": str(e), "type": "invalid_request_error"}})

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    httpd = Server((args.host, args.port), Handler)
    print(f"serve_checkpoint: listening on http://{args.host}:{args.port}/v1", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
