"""Headless Chromium driven over the DevTools protocol (a websocket, through aiohttp): open a local
page, run JavaScript in it, take a screenshot. No network: the browser is started with every
background service off, on a fresh profile directory."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path

import aiohttp

FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
]


def executable() -> str | None:
    return shutil.which("chromium")


class Page:
    """One tab of a headless Chromium with a ``width`` x ``height`` viewport; ``async with Page(profile) as page``."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 1000):
        self.profile, self.size = profile, (width, height)
        self._ids = itertools.count(1)

    async def __aenter__(self) -> Page:
        w, h = self.size
        self.proc = subprocess.Popen(
            [executable(), *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={w},{h}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit {self.proc.poll()})")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
            target = next(t for t in await r.json() if t["type"] == "page")
        self.ws = await self.session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        await self.send("Emulation.setDeviceMetricsOverride", width=w, height=h, deviceScaleFactor=1, mobile=False)
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.ws.close()
        await self.session.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    async def send(self, method: str, **params) -> dict:
        """A protocol command; its result (events that arrive meanwhile are dropped)."""
        msg_id = next(self._ids)
        await self.ws.send_str(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads((await self.ws.receive()).data)
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    async def open(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'")

    async def evaluate(self, expression: str):
        """The value of a JavaScript expression (a promise is awaited)."""
        result = await self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}...: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, condition: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not await self.evaluate(f"Boolean({condition})"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never satisfied: {condition}")
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> None:
        data = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(data["data"]))
