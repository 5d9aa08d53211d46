#!/usr/bin/python3
"""End-to-end test of the web UI on real traffic: rpc-bench --webserver_port serves the dashboard
while it runs a throughput benchmark; headless Chromium loads "/" and must see the charts draw
real, non-zero throughput at least twice; /metrics must pass `promtool check metrics`; every page
must answer 200; a screenshot is saved.

Chromium is driven over --remote-debugging-pipe (NUL-terminated DevTools JSON on fds 3 and 4), so
the page runs in real time against the live server (no virtual time: rates come from successive
real snapshots) and the test needs nothing beyond Python's standard library.

Exit status: 0 pass, 1 fail, 77 skipped (no /usr/bin/chromium). Every wait is bounded; the
processes this test starts are killed by their own process group ids.

  rpc-bench-ui-test.py --rpc_bench=build/bench/rpc-bench --screenshot=/tmp/dashboard.png
  # a screenshot with two minutes of history (for docs/images/dashboard.png):
  rpc-bench-ui-test.py --rpc_bench=... --run_seconds=130 --shot_after=125 --screenshot=...
"""

import argparse
import base64
import fcntl
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

CHROMIUM = "/usr/bin/chromium"
SKIP = 77
METHOD = "rrpc.bench.BenchService.Echo"
PAGES = ["/", "/metrics", "/metrics.json", "/rpcz", "/varz", "/threadz", "/connections",
         "/healthz", "/static/dashboard.js", "/static/format.js", "/static/line_chart.js",
         "/static/dashboard.css", "/static/pages.css"]


class TestFailure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise TestFailure(message)


def free_port():
    """A port that was free a moment ago (rpc-bench then binds it; a race retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(proc):
    """Kills the process group `proc` leads (started with start_new_session) and reaps it."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


class Bench:
    """rpc-bench with the web UI, its stdout collected by a reader thread."""

    def __init__(self, binary, port, args):
        self.lines = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [binary, "--webserver_port=%d" % port] + args,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line)

    def output(self):
        with self.lock:
            return "".join(self.lines)

    def wait_for_url(self, timeout_s):
        """The URL rpc-bench prints once its web UI listens, or None if it exited first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = re.search(r"rpc-bench web UI at (http://[0-9.]+:\d+)/", self.output())
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                return None
            time.sleep(0.1)
        raise TestFailure("rpc-bench printed no web UI address in %d s:\n%s" %
                          (timeout_s, self.output()))


def start_bench(binary, args):
    """Starts rpc-bench on a free port; retries when another process took the port meanwhile."""
    for _ in range(5):
        bench = Bench(binary, free_port(), args)
        url = bench.wait_for_url(60)
        if url:
            return bench, url
        bench.proc.wait(timeout=30)
        bench.reader.join(timeout=5)
        if "cannot start the web UI" not in bench.output():
            raise TestFailure("rpc-bench failed before serving:\n" + bench.output())
    raise TestFailure("no free port for the web UI after 5 tries")


def http_get(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read()


class Chromium:
    """Headless Chromium driven over the DevTools pipe. Not thread-safe; one page session."""

    def __init__(self, profile_dir, window):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def wire_pipes():  # In the child: Chromium reads commands on fd 3, answers on fd 4.
            # Move both ends above 4 first: a pipe may already sit on fd 3 or 4, where a
            # dup2 onto itself would keep close-on-exec (or clobber the other end).
            r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)  # dup2 clears close-on-exec on 3 and 4.
            os.dup2(w, 4)

        # The flags of src/server/web/web-browser-test.cc, plus the pipe.
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--no-default-browser-check",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-extensions", "--hide-scrollbars", "--force-device-scale-factor=1",
                "--user-data-dir=" + profile_dir, "--window-size=%d,%d" % window,
                "--remote-debugging-pipe", "about:blank"]
        self.log = open(os.path.join(profile_dir + ".log"), "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, close_fds=False, preexec_fn=wire_pipes,
                                     start_new_session=True)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id = 0
        self.buffer = b""
        self.session = None

    def close(self):
        try:
            if self.proc.poll() is None:
                self.send("Browser.close", timeout_s=10, session=False)
        except (TestFailure, OSError):
            pass
        kill_group(self.proc)
        for fd in (self.to_chrome, self.from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()

    def send(self, method, params=None, timeout_s=30, session=True):
        """Sends one command and returns its result; events in between are dropped."""
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise TestFailure("%s failed: %s" % (method, reply["error"]))
                    return reply.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise TestFailure("chromium gave no answer to %s" % method)
            ready, _, _ = select.select([self.from_chrome], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.from_chrome, 1 << 20)
                if not chunk:
                    raise TestFailure("chromium closed the DevTools pipe during %s" % method)
                self.buffer += chunk

    def open_blank(self):
        """A blank page to navigate later: Chromium's start, the costly part, done."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, timeout_s=60,
                           session=False)
        attached = self.send("Target.attachToTarget",
                             {"targetId": target["targetId"], "flatten": True}, session=False)
        self.session = attached["sessionId"]
        self.send("Runtime.evaluate", {"expression": "1"}, timeout_s=60)

    def navigate(self, url):
        self.send("Page.navigate", {"url": url}, timeout_s=60)

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise TestFailure("page script failed: %s" % result["exceptionDetails"])
        return result["result"].get("value")

    def screenshot(self, path):
        shot = self.send("Page.captureScreenshot", {"format": "png"}, timeout_s=60)
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))


# What the test reads from the page ('null' until it has loaded): the data-updates hooks, the numbers shown, the method cards.
PAGE_STATE_JS = """!document.getElementById('total-chart') ? 'null' : JSON.stringify({
  body: Number(document.body.dataset.updates || 0),
  total: Number(document.getElementById('total-chart').dataset.updates || 0),
  rateText: document.getElementById('total-rate').textContent,
  state: document.getElementById('status').dataset.state,
  server: document.getElementById('server-name').textContent,
  status: document.getElementById('status-text').textContent,
  methods: Array.from(document.querySelectorAll('.method')).map((m) => ({
    id: m.dataset.method,
    stats: Array.from(m.querySelectorAll('.method-stats b')).map((b) => b.textContent),
    charts: Array.from(m.querySelectorAll('canvas')).map((c) => Number(c.dataset.updates || 0)),
  })),
})"""


def parse_rate(text):
    """The dashboard's number ("425k", "1.25M", "980") as a float; None for "–"."""
    m = re.match(r"\s*([0-9.]+)\s*([kMGT]?)", text or "")
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)]


def check_metrics(base, promtool):
    status, body = http_get(base + "/metrics")
    check(status == 200, "/metrics answered %d" % status)
    text = body.decode()
    m = re.search(r'^rrpc_calls_total\{[^}]*id="%s"[^}]*\} (\d+)' % re.escape(METHOD), text, re.M)
    check(m and int(m.group(1)) > 0, "/metrics shows no calls of %s:\n%s" % (METHOD, text[:2000]))
    if not promtool:
        print("note: promtool not found; /metrics not linted")
        return
    lint = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                          timeout=60)
    check(lint.returncode == 0, "promtool check metrics failed (%d):\n%s%s" %
          (lint.returncode, lint.stdout.decode(), lint.stderr.decode()))
    print("promtool check metrics: OK (%d lines)" % text.count("\n"))


def run(args):
    work = tempfile.mkdtemp(prefix="rpc-bench-ui-test.")
    bench = chrome = None
    try:
        # Chromium starts before the load does: started beside a benchmark that takes both cores
        # of a small machine, it drew its first snapshot only as the run ended.
        chrome = Chromium(os.path.join(work, "profile"), (args.width, args.height))
        chrome.open_blank()
        # Modest load: Chromium needs CPU on the same machine to draw.
        bench, base = start_bench(args.rpc_bench, [
            "--mode=throughput", "--run_seconds=%g" % args.run_seconds, "--warmup_seconds=1",
            "--client_threads=1", "--async_call_concurrency=32",
            "--webserver_linger_seconds=%g" % args.linger_seconds])
        started = time.monotonic()
        print("rpc-bench web UI at", base)
        for page in PAGES:
            status, _ = http_get(base + page)
            check(status == 200, "%s answered %d" % (page, status))
        chrome.navigate(base + "/")

        # At least three snapshots processed and two chart updates with real, non-zero traffic.
        state = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and bench.proc.poll() is None:
            state = json.loads(chrome.evaluate(PAGE_STATE_JS))
            if state is None:  # Still loading.
                time.sleep(0.5)
                continue
            echo = [m for m in state["methods"] if m["id"] == METHOD]
            rate = parse_rate(state["rateText"])
            if (state["body"] >= 3 and state["total"] >= 2 and rate and echo and
                    min(echo[0]["charts"]) >= 2 and parse_rate(echo[0]["stats"][0])):
                break
            time.sleep(0.5)
        else:
            raise TestFailure("the dashboard drew no live data while rpc-bench ran: %s" % state)
        print("dashboard state:", json.dumps(state))
        check(state["state"] == "live", "status is not live: %s" % state["status"])
        check(state["server"] == "rpc-bench", "top bar names %r" % state["server"])
        # One card per method of the bench service: Echo, which the run calls, and its three
        # stream methods (rpc-bench --mode=stream), idle here.
        cards = sorted(m["id"] for m in state["methods"])
        expected = sorted("rrpc.bench.BenchService." + name
                          for name in ("Download", "Echo", "Exchange", "Upload"))
        check(cards == expected, "expected the bench service's method cards: %s" % cards)

        check_metrics(base, args.promtool)

        # The screenshot, once the charts have some history (still during the run).
        wait = started + args.shot_after - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        state = json.loads(chrome.evaluate(PAGE_STATE_JS))
        check(parse_rate(state["rateText"]), "no throughput shown at screenshot time: %s" % state)
        chrome.screenshot(args.screenshot)
        with open(args.screenshot, "rb") as f:
            png = f.read()
        check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000,
              "screenshot missing or blank: %s" % args.screenshot)
        print("screenshot (%d updates): %s" % (state["total"], args.screenshot))
        chrome.close()
        chrome = None

        # The run itself must succeed: its RESULT line and exit status 0.
        rc = bench.proc.wait(timeout=args.run_seconds + args.linger_seconds + 120)
        bench.reader.join(timeout=10)
        check(rc == 0, "rpc-bench exited %d:\n%s" % (rc, bench.output()))
        check("RESULT impl=rrpc mode=throughput" in bench.output(), "no RESULT line")
        bench = None
        return 0
    finally:
        if chrome:
            chrome.close()
        if bench:
            kill_group(bench.proc)
            print("rpc-bench output:\n" + bench.output())
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rpc_bench", required=True, help="the rpc-bench binary")
    parser.add_argument("--screenshot", default="rpc-bench-dashboard.png")
    # Long enough for Chromium to start and draw on a loaded 2-core machine (it starts after
    # rpc-bench, inside this window).
    parser.add_argument("--run_seconds", type=float, default=24,
                        help="rpc-bench's measuring window")
    parser.add_argument("--shot_after", type=float, default=20,
                        help="seconds after rpc-bench starts serving to take the screenshot")
    parser.add_argument("--linger_seconds", type=float, default=1)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1000)
    parser.add_argument("--promtool", default=shutil.which("promtool"))
    args = parser.parse_args()
    if not os.access(CHROMIUM, os.X_OK):
        print("SKIP: %s is not installed" % CHROMIUM)
        return SKIP
    try:
        return run(args)
    except (TestFailure, OSError, subprocess.SubprocessError) as e:
        print("FAIL:", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
