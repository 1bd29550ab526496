"""A headless Chromium driven over the Chrome DevTools Protocol on a pipe, for the page tests.

No driver, no websocket, no Python dependency: Chromium started with ``--remote-debugging-pipe``
reads protocol messages on its file descriptor 3 and writes on 4, each a JSON object ended by a
NUL byte. :func:`open_page` loads a file and returns what a person would see (the screenshot and
the text) and what must not happen (console errors, uncaught exceptions, network requests).
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

#: Debian's package installs ``chromium``; other systems name it otherwise.
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> Optional[str]:
    """The browser's path: ``$XRAND_CHROMIUM`` (None if that is no program) or the first of
    :data:`NAMES` on the PATH."""
    path = os.environ.get("XRAND_CHROMIUM")
    if path:
        return shutil.which(path)
    return next((p for p in map(shutil.which, NAMES) if p), None)


@dataclass
class Page:
    """What loading one page gave."""

    url: str
    text: str
    screenshot: bytes
    console_errors: List[str] = field(default_factory=list)
    requests: List[str] = field(default_factory=list)  # every URL the page asked for, data: ones left out
    values: Dict[str, Any] = field(default_factory=dict)  # results of the expressions asked for


class Chromium:
    """One headless Chromium process; ``call`` sends a command and waits for its answer, keeping
    the events that arrive meanwhile in ``events``."""

    def __init__(self, path: str, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="xrand-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # moved above 2 first: dup2 onto 3 and 4 must not close the other end
        high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
        high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)

        def child_fds() -> None:  # in the child, before exec: its fd 3 reads commands, fd 4 answers
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        args = [path, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage",
                "--mute-audio", "--hide-scrollbars", f"--user-data-dir={self.profile}", "about:blank"]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, preexec_fn=child_fds, close_fds=False)
        for fd in (to_browser_r, from_browser_w, high_r, high_w):
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self.events: List[Dict[str, Any]] = []

    def _send(self, message: Dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._to_browser, data):]

    def _receive(self, deadline: float) -> Dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed its pipe: {self.process.stderr.read().decode()[-2000:]}")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, params: Optional[Dict[str, Any]] = None,
             session: Optional[str] = None) -> Dict[str, Any]:
        self._next_id += 1
        message: Dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._send(message)
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._receive(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, method: str, session: str) -> Dict[str, Any]:
        """The first event ``method`` of ``session``, already received or still to come."""
        deadline = time.monotonic() + self.timeout
        seen = 0
        while True:
            for event in self.events[seen:]:
                if event.get("method") == method and event.get("sessionId") == session:
                    return event
            seen = len(self.events)
            self.events.append(self._receive(deadline))

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # already gone: nothing to close
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_page(browser: Chromium, path: str, width: int = 1280, height: int = 900,
              evaluate: Optional[Dict[str, str]] = None, full_page: bool = False) -> Page:
    """Load the file ``path`` in a new tab, wait for its load event and a settled frame, and
    return its text, a screenshot of the first screen, the console errors (console.error,
    uncaught exceptions, the browser's own error log such as a blocked resource) and every
    request it made. ``evaluate``: JavaScript expressions to run afterwards, by name;
    ``full_page``: the screenshot of the whole page rather than of the first screen."""
    url = "file://" + os.path.abspath(path)
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.call(f"{domain}.enable", session=session)
    browser.call("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
    first = len(browser.events)
    browser.call("Page.navigate", {"url": url}, session=session)
    browser.wait_for("Page.loadEventFired", session)
    # two animation frames: the page has laid out and painted what the load revealed
    browser.call("Runtime.evaluate", {"expression": "new Promise(r => requestAnimationFrame(() => "
                                                    "requestAnimationFrame(r)))", "awaitPromise": True},
                 session=session)
    values = {}
    for name, expression in (evaluate or {}).items():
        result = browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                   "awaitPromise": True}, session=session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{name}: {result['exceptionDetails']}")
        values[name] = result["result"].get("value")
    text = browser.call("Runtime.evaluate", {"expression": "document.body.innerText", "returnByValue": True},
                        session=session)["result"]["value"]
    params: Dict[str, Any] = {"format": "png"}
    if full_page:
        size = browser.call("Page.getLayoutMetrics", session=session)["cssContentSize"]
        params.update(captureBeyondViewport=True,
                      clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
    shot = browser.call("Page.captureScreenshot", params, session=session)["data"]
    errors, requests = [], []
    for event in browser.events[first:]:
        if event.get("sessionId") != session:
            continue
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            errors.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            request_url = params.get("request", {}).get("url", "")
            if not request_url.startswith("data:"):
                requests.append(request_url)
    browser.call("Target.closeTarget", {"targetId": target})
    return Page(url=url, text=text, screenshot=base64.b64decode(shot), console_errors=errors,
                requests=requests, values=values)
