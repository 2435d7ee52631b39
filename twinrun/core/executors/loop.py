"""The event loop every rollout coroutine runs on.

All async work of a training job runs on one :class:`BackgroundLoop` (a dedicated event-loop thread), so the
semaphore and HTTP client always live on the same loop whether the caller is sync (TRL tool methods) or async on
another loop (verl's agent loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from twinrun.core.errors import TwinrunError

T = TypeVar("T")


class BackgroundLoop:
    """An asyncio loop on its own daemon thread.

    ``run(coro)`` from sync code, ``await arun(coro)`` from any other loop, ``submit(coro)`` for a
    concurrent.futures.Future. Calling ``run`` from the loop's own thread would deadlock and is refused."""

    def __init__(self, name: str = "twinrun-rollout"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.loop.is_closed():
            coro.close()
            raise TwinrunError("rollout loop: closed (fix: create a new runtime)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise TwinrunError("rollout loop: run() called from the loop itself (fix: await the coroutine instead)")
        return self.submit(coro).result()

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            return await coro
        return await asyncio.wrap_future(self.submit(coro))

    def close(self) -> None:
        if self.loop.is_closed():
            return

        async def _drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(_drain(), self.loop).result(timeout=10)
        except Exception:  # noqa: BLE001
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()
