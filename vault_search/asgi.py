"""Run an ASGI app (the MCP SDK's streamable HTTP transport) behind ``serve``'s
own HTTP server: one event loop in a thread, the app's lifespan entered once,
each request handed over whole and its answer collected whole.

``serve`` keeps its socket handling (deadlines, the connection cap, the
Host/Origin checks) for ``/mcp`` too; the app sees a request only once those
have passed. The MCP app answers JSON (``json_response``) without sessions
(``stateless_http``), so an answer is one body, never an open stream.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

STARTUP_TIMEOUT_S = 30.0


@dataclass
class AsgiAnswer:
    status: int = 500
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


class AsgiBridge:
    def __init__(self, app: Any, name: str = "asgi"):
        self.app = app
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"vault-search-{name}", daemon=True)
        self._thread.start()
        self._lifespan: asyncio.Queue | None = None
        self._stopped: asyncio.Future | None = None
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(STARTUP_TIMEOUT_S)

    async def _start(self) -> None:
        """Enter the app's lifespan (ASGI lifespan protocol) and stay in it until ``close``."""
        inbox: asyncio.Queue = asyncio.Queue()
        started: asyncio.Future = self.loop.create_future()
        self._stopped = self.loop.create_future()
        await inbox.put({"type": "lifespan.startup"})

        async def receive():
            return await inbox.get()

        async def send(message):
            if message["type"] == "lifespan.startup.complete" and not started.done():
                started.set_result(None)
            elif message["type"] == "lifespan.startup.failed" and not started.done():
                started.set_exception(RuntimeError(message.get("message") or "ASGI app failed to start"))
            elif message["type"].startswith("lifespan.shutdown") and not self._stopped.done():
                self._stopped.set_result(None)

        task = self.loop.create_task(self.app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                              receive, send))
        def ended(t: asyncio.Task) -> None:
            if not started.done():
                started.set_exception(t.exception() or RuntimeError("ASGI app ended at start-up"))

        task.add_done_callback(ended)
        self._lifespan = inbox
        await started

    def request(self, method: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes,
                client: tuple[str, int], server: tuple[str, int], timeout: float) -> AsgiAnswer:
        """Hand one whole request to the app and wait (at most ``timeout``) for its whole answer."""
        future = asyncio.run_coroutine_threadsafe(
            self._call(method, path, query, headers, body, client, server), self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            return AsgiAnswer(504, [("content-type", "application/json")],
                              b'{"error": "the MCP request took too long"}')

    async def _call(self, method, path, query, headers, body, client, server) -> AsgiAnswer:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
                 "query_string": query.encode("latin-1", "replace"),
                 "headers": [(k.lower().encode("latin-1"), v.encode("latin-1", "replace")) for k, v in headers],
                 "client": client, "server": server, "state": {}}
        answer = AsgiAnswer()
        parts: list[bytes] = []
        sent = False
        done = asyncio.Event()

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()   # the app waits for a disconnect only once it has answered
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                answer.status = message["status"]
                answer.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])]
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))
                if not message.get("more_body"):
                    done.set()

        try:
            await self.app(scope, receive, send)
        finally:
            done.set()
        answer.body = b"".join(parts)
        return answer

    def close(self) -> None:
        async def stop():
            if self._lifespan is not None and self._stopped is not None:
                await self._lifespan.put({"type": "lifespan.shutdown"})
                try:
                    await asyncio.wait_for(self._stopped, 5)
                except asyncio.TimeoutError:
                    pass
        try:
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        except (FutureTimeout, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
