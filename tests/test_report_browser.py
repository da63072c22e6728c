"""The HTML report in a real headless Chromium: it renders, logs no error, loads nothing.

Chromium is driven through the Chrome DevTools Protocol over ``--remote-debugging-pipe``
(fd 3 in, fd 4 out, NUL-terminated JSON messages, as Puppeteer does), so the test needs
only the distribution's ``chromium`` package and the standard library: no browser
download, no client library, no port. A full-page screenshot is kept in
``test-output/report.png`` for a human to look at.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from logforensics.pipeline import diagnose_files
from logforensics.render.html import write_html

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "test-output"
HEADLINE = ROOT / "fixtures" / "diff" / "custom_ar_pcie_oom"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe")
TIMEOUT_S = 60.0

pytestmark = pytest.mark.browser


def chromium() -> str:
    """The browser binary, or a failure that says how to install it (never a silent skip)."""
    found = os.environ.get("CHROMIUM") or next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    if not found:
        pytest.fail("headless Chromium not found: install the Debian package 'chromium' "
                    "(apt-get install chromium) or set CHROMIUM=/path/to/chrome", pytrace=False)
    return found


_PLACE_FDS = ("import os, sys; r, w = map(int, sys.argv[1:3]); os.dup2(r, 3); os.dup2(w, 4); "
              "os.close(r); os.close(w); os.execv(sys.argv[3], sys.argv[3:])")


def _above_4(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


class DevTools:
    """A minimal CDP client over the debugging pipe; events are kept for the test to inspect."""

    def __init__(self, exe: str, profile: Path) -> None:
        self.log = profile.with_suffix(".stderr")  # a file, not a pipe: a chatty browser never blocks on it
        to_chrome_r, self._write_fd = os.pipe()
        self._read_fd, from_chrome_w = os.pipe()
        # The child's ends go above 4, so that placing them on 3 and 4 cannot clobber one with the other.
        to_chrome_r, from_chrome_w = (_above_4(fd) for fd in (to_chrome_r, from_chrome_w))
        # Chromium reads commands on fd 3 and writes replies on fd 4; a one-line launcher puts our ends there.
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _PLACE_FDS, str(to_chrome_r), str(from_chrome_w),
                 exe, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                pass_fds=(to_chrome_r, from_chrome_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._write_fd, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, since: int, timeout: float = TIMEOUT_S) -> dict[str, Any]:
        """The first ``method`` event from index ``since`` on (it may have come while awaiting a reply)."""
        deadline = time.monotonic() + timeout
        seen = since
        while True:
            for ev in self.events[seen:]:
                if ev.get("method") == method:
                    return ev
            seen = len(self.events)
            self.events.append(self._read(deadline - time.monotonic()))

    def _read(self, timeout: float = TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._read_fd], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"Chromium did not answer within {timeout:.0f} s")
            chunk = os.read(self._read_fd, 1 << 20)
            if not chunk:
                err = self.log.read_text(errors="replace") if self.log.exists() else ""
                raise AssertionError(f"Chromium closed the DevTools pipe (exit {self.proc.poll()}):\n{err[-3000:]}")
            self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\0")
        return json.loads(raw)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._write_fd)
        os.close(self._read_fd)


MARKUP_IN_LOG = "<script>alert(1)</script>"


def _report(tmp_path: Path) -> tuple[Path, str, bool]:
    """The headline case's report when its fixture exists, else the same story in a tiny TP2 pair.

    Returns the report, its verdict, and whether the failing log holds markup to probe escaping with.
    """
    if (HEADLINE / "failing.log").exists():
        base, fail = HEADLINE / "baseline.log", HEADLINE / "failing.log"
    else:
        from test_report import write_capture_oom_pair
        base, fail = write_capture_oom_pair(tmp_path)
    d = diagnose_files(str(fail), str(base))
    path = tmp_path / "report.html"
    write_html(d, str(path))
    return path, d.verdict, MARKUP_IN_LOG in fail.read_text(encoding="utf-8", errors="replace")


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for ev in events:
        method, p = ev.get("method"), ev.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = p.get("exceptionDetails", {})
            out.append(f"uncaught: {details.get('exception', {}).get('description') or details.get('text')}")
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url') or ''}")
    return out


class Page:
    """One tab showing ``url``, loaded; ``evaluate`` runs JavaScript in it and returns the value."""

    def __init__(self, browser: DevTools, url: str, width: int = 1280) -> None:
        self.browser = browser
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", session=self.session)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=self.session)
        mark = len(browser.events)
        browser.send("Page.navigate", {"url": url}, session=self.session)
        browser.wait_event("Page.loadEventFired", since=mark)

    def evaluate(self, expr: str) -> Any:
        res = self.browser.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=self.session)
        assert "exceptionDetails" not in res, res["exceptionDetails"]
        return res["result"].get("value")

    def screenshot(self, path: Path, max_height: int = 16000) -> None:
        height = self.evaluate("Math.ceil(document.documentElement.scrollHeight)")
        shot = self.browser.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": 1280, "height": min(height, max_height), "scale": 1}},
            session=self.session)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))


def _requests(events: list[dict[str, Any]]) -> list[str]:
    """URLs the page asked for beyond itself: anything not file:, data: or about:."""
    urls = [ev["params"]["request"]["url"] for ev in events if ev.get("method") == "Network.requestWillBeSent"]
    return [u for u in urls if not u.startswith(("file:", "data:", "about:"))]


def _wait_for_charts(page: Page) -> None:
    """plotly draws after load: wait until every chart div holds its SVG."""
    deadline = time.monotonic() + 30
    while not page.evaluate("[...document.querySelectorAll('.plotly-graph-div')]"
                            ".every(d => d.querySelector('svg.main-svg'))"):
        assert time.monotonic() < deadline, "plotly charts did not render"
        time.sleep(0.2)


def test_report_renders_in_chromium(tmp_path: Path) -> None:
    exe = chromium()
    report, verdict, probe = _report(tmp_path)
    browser = DevTools(exe, tmp_path / "profile")
    try:
        page = Page(browser, report.as_uri())
        _wait_for_charts(page)
        charts = page.evaluate("[document.querySelectorAll('.plotly-graph-div').length, "
                               "document.querySelectorAll('.js-plotly-plot .main-svg').length > 0]")
        shown = page.evaluate("""(() => { const e = document.getElementById('verdict-text');
            const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
            return {text: e.innerText, visible: r.width > 0 && r.height > 0 && s.visibility === 'visible'
                    && s.display !== 'none' && r.top >= 0 && r.bottom <= window.innerHeight}; })()""")
        page_text = page.evaluate("document.body.innerText")
        page.screenshot(OUTPUT / "report.png")
    finally:
        browser.close()

    assert shown["text"].strip() == verdict.strip()
    assert shown["visible"], "the verdict is not in the first screen"
    assert charts[0] >= 1 and charts[1], f"plotly drew none of {charts[0]} charts"
    assert not [ev for ev in browser.events if ev.get("method") == "Page.javascriptDialogOpening"], \
        "log text ran as script"
    if probe:
        assert MARKUP_IN_LOG in page_text, "log text containing markup is not shown as text"
    assert _errors(browser.events) == []
    assert _requests(browser.events) == []


def test_harness_sees_console_errors_and_requests(tmp_path: Path) -> None:
    """The checks above would catch a broken page: an error, an exception and a fetch all show up."""
    page_file = tmp_path / "broken.html"
    page_file.write_text("<!DOCTYPE html><html><body><p>x</p>"
                         "<img src='http://127.0.0.1:9/never.png'>"
                         "<script>console.error('boom'); undefinedFunction();</script></body></html>",
                         encoding="utf-8")
    browser = DevTools(chromium(), tmp_path / "profile")
    try:
        page = Page(browser, page_file.as_uri())
        assert page.evaluate("document.querySelector('p').innerText") == "x"
    finally:
        browser.close()
    errors = _errors(browser.events)
    assert any("boom" in e for e in errors) and any("undefinedFunction" in e for e in errors), errors
    assert _requests(browser.events) == ["http://127.0.0.1:9/never.png"]


def test_memory_chart_leaves_the_formula_table_uncovered(tmp_path: Path) -> None:
    """Only the failing run has memory figures (the baseline stopped in NCCL init): at the widths
    of common screens the memory chart and the KV-cache formula table do not overlap."""
    base = ROOT / "fixtures" / "real" / "016-nccl-init-tp2-indent-stripped-dunder-eaten-sigquit-typo.log"
    report = tmp_path / "report.html"
    write_html(diagnose_files(str(HEADLINE / "failing.log"), str(base)), str(report))
    browser = DevTools(chromium(), tmp_path / "profile")
    boxes = {}
    try:
        for width in (1280, 1440, 1600):
            page = Page(browser, report.as_uri(), width=width)
            _wait_for_charts(page)
            boxes[width] = page.evaluate("""(() => {
                const box = e => { const r = e.getBoundingClientRect();
                                   return [r.left, r.top, r.right, r.bottom]; };
                return [box(document.querySelector('#memory .js-plotly-plot .main-svg')),
                        box(document.querySelector('#memory table.budget'))]; })()""")
    finally:
        browser.close()
    for width, (chart, table) in boxes.items():
        apart = chart[2] <= table[0] or table[2] <= chart[0] or chart[3] <= table[1] or table[3] <= chart[1]
        assert apart, f"at {width} px the memory chart {chart} covers the formula table {table}"


def test_pool_and_hang_pictures_render_in_chromium(tmp_path: Path) -> None:
    """The pool picture of a real hybrid log (fixtures/real 145) and the hang picture of a hang
    with a rank that differs are drawn as SVG: a line per pool, a row per rank, the initiator's
    row named, the lines they rest on shown as text; no error in the console."""
    from test_report_pictures import initiator_log

    pools_report, hang_report = tmp_path / "pools.html", tmp_path / "hang.html"
    log = next((ROOT / "fixtures" / "real").glob("145-*.log"))
    write_html(diagnose_files(str(log), None), str(pools_report))
    write_html(diagnose_files(str(initiator_log(tmp_path)), None), str(hang_report))
    browser = DevTools(chromium(), tmp_path / "profile")
    try:
        page = Page(browser, pools_report.as_uri())
        _wait_for_charts(page)
        pools = page.evaluate("""(() => { const svg = document.querySelector('#pool-chart svg.main-svg');
            const box = svg ? svg.getBoundingClientRect() : null;
            return {svg: !!svg, width: box ? box.width : 0, height: box ? box.height : 0,
                    lines: document.querySelectorAll('#pool-chart .scatterlayer .trace path.js-line').length,
                    legend: [...document.querySelectorAll('#pool-chart .legendtext')].map(e => e.textContent),
                    text: document.getElementById('pools').innerText}; })()""")
        page = Page(browser, hang_report.as_uri())
        _wait_for_charts(page)
        hang = page.evaluate("""(() => { const svg = document.querySelector('#hang-chart-failing svg.main-svg');
            return {svg: !!svg,
                    ticks: [...document.querySelectorAll('#hang-chart-failing .ytick text')].map(e => e.textContent),
                    notes: [...document.querySelectorAll('#hang-chart-failing .annotation-text')].map(e => e.textContent),
                    points: document.querySelectorAll('#hang-chart-failing .scatterlayer .point').length}; })()""")
        page.screenshot(OUTPUT / "report-pictures.png")
    finally:
        browser.close()
    assert pools["svg"] and pools["width"] > 400 and pools["height"] > 200
    assert pools["lines"] == 2
    assert [t.split(" (")[0] for t in pools["legend"]] == ["full-attention KV pool", "Mamba state pool"]
    assert f"{log.name}:5 (TP0)" in pools["text"]
    assert hang["svg"] and sorted(hang["ticks"]) == ["TP0", "TP1", "TP2 (initiator)", "TP3"]
    assert hang["points"] == 8  # last completed and last enqueued of each of the four ranks
    assert "stuck on BROADCAST seq 78 (PG 0)" in hang["notes"]
    assert _errors(browser.events) == []
    assert _requests(browser.events) == []
