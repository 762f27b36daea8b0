"""The report in a real browser: headless Chromium opens the index, a capsule page and the suite
pages from file:// at 1024 px wide (a plugin run's index and failing capsule page at 1440 px
too), finds the capsule table and the SVG charts, sees no console message, script error or
failed load, checks that nothing needs horizontal scrolling or overflows its box, that no table
cell breaks inside a word, and that a failing capsule's reasons and replay command are in the
first viewport, and saves screenshots (to $TORCHLEAN_SCREENSHOT_DIR, else a tmp dir).

Chromium is driven over --remote-debugging-pipe (the DevTools protocol as NUL-separated JSON on
file descriptors 3 and 4), so no websocket library and no network port are needed. Skipped, with
the reason, when no chromium is installed (Debian: `apt-get install -y chromium`).
"""
from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from reports.current import FixedBuild
from reports.render import render_report

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "fixtures" / "evidence"
BROWSER = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium on PATH (Debian: "
                                                        "apt-get install -y chromium)")
SIZE = (1024, 900)      # a small laptop screen: the width every page must fit


class Chromium:
    """Just enough of the DevTools protocol: send a command, wait for an event."""

    def __init__(self, profile: Path) -> None:
        to_browser, from_browser = os.pipe(), os.pipe()

        def fds() -> None:       # in the child: the pipe ends become fds 3 (commands) and 4
            a, b = os.dup(to_browser[0]), os.dup(from_browser[1])
            os.dup2(a, 3)
            os.dup2(b, 4)
        self.proc = subprocess.Popen(
            [BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", "--hide-scrollbars", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", f"--window-size={SIZE[0]},{SIZE[1]}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser[0])
        os.close(from_browser[1])
        self.out, self.inp = to_browser[1], from_browser[0]
        self.buf, self.last_id, self.events = b"", 0, []

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            if not select.select([self.inp], [], [], max(deadline - time.time(), 0))[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self.inp, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self.last_id += 1
        msg = {"id": self.last_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + 60
        while True:
            m = self._message(deadline)
            if m.get("id") == self.last_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait(self, event: str) -> dict:
        deadline = time.time() + 60
        while True:
            for i, e in enumerate(self.events):
                if e.get("method") == event:
                    return self.events.pop(i)
            self.events.append(self._message(deadline))

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self.out)
        os.close(self.inp)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    build = FixedBuild.from_file(FIX / "current_build.json")
    return render_report([str(FIX / "cpu"), str(FIX / "h200")], str(out), build=build).parent


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


def shots_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("TORCHLEAN_SCREENSHOT_DIR") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def visit(browser: Chromium, url: str, width: int = SIZE[0]) -> tuple[str, list[str]]:
    """Open url in a fresh tab `width` px wide; (session, every console message, script error
    or log entry)."""
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log"):
        browser.send(f"{domain}.enable", session)
    browser.send("Emulation.setDeviceMetricsOverride", session, width=width, height=SIZE[1],
                 deviceScaleFactor=1, mobile=False)
    browser.events.clear()
    browser.send("Page.navigate", session, url=url)
    browser.wait("Page.loadEventFired")
    browser.send("Runtime.evaluate", session, expression="1")     # flush pending events
    noise = []
    for e in browser.events:
        p = e.get("params", {})
        if e.get("method") == "Runtime.consoleAPICalled":
            noise.append(f"console.{p.get('type')}: {p.get('args')}")
        elif e.get("method") == "Runtime.exceptionThrown":
            noise.append(f"exception: {p.get('exceptionDetails', {}).get('text')}")
        elif e.get("method") == "Log.entryAdded":
            entry = p.get("entry", {})
            noise.append(f"{entry.get('level')}: {entry.get('text')} {entry.get('url', '')}")
    return session, noise


def query(browser: Chromium, session: str, js: str):
    r = browser.send("Runtime.evaluate", session, expression=js, returnByValue=True)
    assert "exceptionDetails" not in r, r
    return r["result"]["value"]


def screenshot(browser: Chromium, session: str, path: Path) -> Path:
    data = browser.send("Page.captureScreenshot", session, format="png")["data"]
    path.write_bytes(base64.b64decode(data))
    return path


# Elements wider than the page, or sticking out of the box they sit in (the counterexample box).
# What sits in a box of its own that scrolls sideways (div.scroll, a pre) may be wider than the
# page: that box scrolls, not the page, and the box itself must fit.
OVERFLOW_JS = """(() => {
  const page = document.documentElement.clientWidth;
  const out = [];
  const scrolls = e => { for (let p = e.parentElement; p; p = p.parentElement) {
    if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) return true; } return false; };
  for (const e of document.querySelectorAll(
      'table, pre, figure, .counterexample, td, th, div.scroll')) {
    if (scrolls(e)) continue;
    const r = e.getBoundingClientRect();
    if (r.right > page + 0.5) out.push(e.tagName + '.' + e.className + ' ends at ' + r.right);
    const box = e.parentElement && e.parentElement.closest('.counterexample');
    if (box && r.right > box.getBoundingClientRect().right + 0.5)
      out.push(e.tagName + '.' + e.className + ' sticks out of its counterexample box');
  }
  return [document.documentElement.scrollWidth - page, out.slice(0, 5)];
})()"""


# Words of table cells broken across lines: each run of non-space text, cut only at the joints the
# report marks (after `.` or `/` before a name's next part), must lie on one line; a number
# (4.46e+43), a hex pattern (0x3f800000), a status (failed) or a hyphenated code never breaks.
TOKENS_JS = """(() => {
  const out = [];
  for (const cell of document.querySelectorAll('table td, table th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const words = /\\S+/g;
      for (let m = words.exec(node.textContent); m; m = words.exec(node.textContent)) {
        let start = m.index;
        for (const piece of m[0].split(/(?<=[.\\/])(?=[A-Za-z_\\/])/)) {
          const range = document.createRange();
          range.setStart(node, start);
          range.setEnd(node, start + piece.length);
          const tops = [...range.getClientRects()].filter(r => r.width > 0).map(r => r.top);
          if (tops.length > 1 && Math.max(...tops) - Math.min(...tops) > 3)
            out.push(piece + ' (in ' + cell.tagName.toLowerCase() + '.' + cell.className + ')');
          start += piece.length;
        }
      }
    }
  }
  return out.slice(0, 10);
})()"""


def whole_words(browser: Chromium, session: str) -> None:
    broken = query(browser, session, TOKENS_JS)
    assert broken == [], f"table cells break inside a word: {broken}"


def fits(browser: Chromium, session: str) -> None:
    extra, over = query(browser, session, OVERFLOW_JS)
    assert (extra, over) == (0, []), f"needs {extra} px of horizontal scrolling: {over}"


# A number of more than 9 significant digits in a table cell's own text (hover titles hold those).
LONG_NUMBERS_JS = """[...document.querySelectorAll('td')].map(td => [...td.childNodes]
  .filter(n => n.nodeType === 3 || n.tagName === 'SPAN').map(n => n.textContent).join(' '))
  .flatMap(t => t.match(/-?\\d+\\.\\d{9,}(e[-+]\\d+)?/g) || [])"""


def test_index_in_chromium(browser, report, tmp_path):
    session, noise = visit(browser, (report / "index.html").as_uri())
    assert noise == []
    assert query(browser, session, "document.scripts.length") == 0      # reads without JS
    assert query(browser, session, "document.querySelectorAll('table.matrix').length") == 1
    rows = query(browser, session, "[...document.querySelectorAll('table.matrix tbody tr[id]')]"
                                   ".map(r => r.id)")
    assert len(rows) == 9 and "capsule-native_cuda.scatter_add" in rows
    counts = query(browser, session, "[...document.querySelectorAll('.count .n')]"
                                     ".map(e => e.textContent)")
    assert counts == ["9", "4", "2", "1", "3"]      # reference.reduce_sum has no record
    # earned trust from the exports: `checked` on the CPU, and the H200's as exported there
    earned = query(browser, session, "[...document.querySelectorAll('#capsule-reference\\\\.add "
                                     "td.earned, #capsule-cublas\\\\.matmul td.earned')]"
                                     ".map(e => e.textContent)")
    assert earned == ["checked", "fuzzedas exported on NVIDIA H200 at commit efa37c6; not "
                                 "recomputable here"]
    # the new statuses are styled (not the plain badge)
    colours = query(browser, session, "['interrupted', 'harness-error'].map(s => getComputedStyle("
                                      "document.querySelector('.st-' + s)).color)")
    assert colours == ["rgb(138, 90, 0)", "rgb(102, 57, 186)"]
    # the stylesheet loaded and applied: the header bar is dark, the counts sit in a row
    assert query(browser, session, "getComputedStyle(document.querySelector('header.top'))"
                                   ".backgroundColor") == "rgb(36, 41, 47)"
    # two evidence directories fit 1024 px; a stale row says what to do, visibly
    fits(browser, session)
    whole_words(browser, session)
    hint = query(browser, session, "document.querySelector('#capsule-reference\\\\.matmul "
                                   ".next').innerText")
    assert hint.startswith("made for another build") and "--capsule reference.matmul" in hint
    assert query(browser, session, "document.querySelector('#capsule-reference\\\\.matmul "
                                   ".next').getBoundingClientRect().height") > 10
    assert query(browser, session, LONG_NUMBERS_JS) == []
    png = screenshot(browser, session, shots_dir(tmp_path) / "report-index.png")
    assert png.stat().st_size > 20_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_capsule_page_in_chromium(browser, report, tmp_path):
    session, noise = visit(browser, (report / "capsule-native_cuda.scatter_add.html").as_uri())
    assert noise == []
    assert query(browser, session, "document.scripts.length") == 0
    svgs = query(browser, session, "[...document.querySelectorAll('figure.chart svg')]"
                                   ".map(s => [s.getBoundingClientRect().width, "
                                   "s.querySelectorAll('rect, polygon').length])")
    assert len(svgs) == 3 and all(w > 300 and shapes > 1 for w, shapes in svgs)
    assert query(browser, session, "!!document.getElementById('capsule-native_cuda.scatter_add')")
    assert "0x80800000" in query(browser, session,
                                 "document.querySelector('.counterexample').textContent")
    fits(browser, session)
    whole_words(browser, session)
    assert query(browser, session, LONG_NUMBERS_JS) == []
    # the counterexample's last column (ulps) is inside the page, not clipped
    ulps = query(browser, session, "[...document.querySelectorAll('.counterexample table.failures"
                                   " thead th')].pop().getBoundingClientRect().right")
    assert ulps <= query(browser, session, "document.querySelector('.counterexample')"
                                           ".getBoundingClientRect().right")
    d = shots_dir(tmp_path)
    screenshot(browser, session, d / "report-capsule.png")
    query(browser, session, "document.getElementById('evidence-h200-errors').scrollIntoView(), 0")
    png = screenshot(browser, session, d / "report-capsule-charts.png")
    assert png.stat().st_size > 20_000


# --- a user's plugin run (fixtures/evidence/plugin: a real `run --plugin ... --quick` and its
# `export-trust`): what it audited at a glance, why it failed above the fold --------------------

PLUGIN = FIX / "plugin"
WIDTHS = (1024, 1440)       # a small laptop, a desktop


@pytest.fixture(scope="module")
def plugin_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plugin-report")
    build = FixedBuild.from_file(FIX / "current_build.json")
    return render_report([str(PLUGIN)], str(out), build=build).parent


def telling_replay() -> str:
    """The replay command of the plugin record's first inf-mismatch counterexample (the most
    telling of its reasons), as the record holds it."""
    rec = json.loads((PLUGIN / "user.naive_softplus.json").read_text())
    return next(ce["replay_command"] for ce in rec["counterexamples"]
                if ce["reasons"] == ["inf-mismatch"])


# Where an element lies in the first viewport: [text, top, bottom] (bottom <= 900: seen without
# scrolling).
PLACED_JS = """(sel => [...document.querySelectorAll(sel)].map(e => { const r =
  e.getBoundingClientRect(); return [e.innerText.trim(), r.top, r.bottom]; }))"""


@pytest.mark.parametrize("width", WIDTHS)
def test_failing_plugin_capsule_page_starts_with_why_and_replay(browser, plugin_report, width,
                                                               tmp_path):
    session, noise = visit(browser, (plugin_report / "capsule-user.naive_softplus.html").as_uri(),
                           width)
    assert noise == []
    reasons = query(browser, session, PLACED_JS + "('#why-failed ul.reasons li')")
    assert [r[0] for r in reasons] == [
        "inf-mismatch × 35: an infinity where the reference is finite, or the reverse",
        "flushed-subnormal × 6: a subnormal result flushed to zero against its policy",
        "exceeds-bound × 14: an error above the bound its policy allows"]   # the console's order
    [(replay, top, bottom)] = query(browser, session, PLACED_JS + "('#why-failed pre.replay')")
    assert replay == telling_replay()
    assert all(0 <= t and b <= SIZE[1] for _, t, b in reasons + [(replay, top, bottom)])
    fits(browser, session)
    whole_words(browser, session)
    screenshot(browser, session, shots_dir(tmp_path) / f"report-plugin-capsule-{width}.png")


@pytest.mark.parametrize("width", WIDTHS)
def test_plugin_run_index_counts_what_it_audited(browser, plugin_report, width, tmp_path):
    session, noise = visit(browser, (plugin_report / "index.html").as_uri(), width)
    assert noise == []
    counts = query(browser, session, "[...document.querySelectorAll('.count')]"
                                     ".map(e => e.innerText.replace(/\\s+/g, ' '))")
    assert counts == ["2 capsules audited", "1 passing", "1 failing",
                      "0 stale 2 of unknown freshness", "0 no verdict"]
    rows = query(browser, session, "[...document.querySelectorAll('table.matrix tbody tr[id]')]"
                                   ".map(r => r.id)")
    assert rows == ["capsule-user.numpy_add", "capsule-user.naive_softplus"]
    # the registry's capsules this directory holds no record of: one click away, folded
    folded = query(browser, session, "[...document.querySelectorAll('details.folded')].map(d => "
                                     "[d.id, d.open, d.querySelector('summary').innerText])")
    assert folded == [
        ["no-evidence-here", False, "7 registered capsules without a record in these "
                                    "directories (cpu: 7)"],
        ["not-audited-here", False, "3 capsules for devices no evidence directory here audits "
                                    "(cuda: 3)"]]
    # the failing row says why, with the command that replays it, in the first viewport
    [(why, _, bottom)] = query(browser, session, PLACED_JS + "('#capsule-user\\\\.naive_softplus "
                                                 ".why-failed')")
    assert why.startswith("inf-mismatch × 35, flushed-subnormal × 6, 1 more\nreplay: ")
    assert why.endswith(telling_replay()) and bottom <= SIZE[1]
    fits(browser, session)
    whole_words(browser, session)
    screenshot(browser, session, shots_dir(tmp_path) / f"report-plugin-index-{width}.png")


@pytest.mark.parametrize("page", ["suite-guards.html", "suite-determinism.html",
                                  "suite-allocator-cap.html", "capsule-reference.exp.html"])
def test_other_pages_fit_1024_px(browser, report, page):
    session, noise = visit(browser, (report / page).as_uri())
    assert noise == []
    fits(browser, session)
    whole_words(browser, session)


def test_the_h100_ulp_table_and_the_peer_pages_fit_1024_px(browser, tmp_path_factory, tmp_path):
    """evidence/h100: the ulp table of 12 functions x 4 implementations (the exhaustive page),
    and PyTorch's own contract on a page of its own, long clause names wrapping at hyphens."""
    out = tmp_path_factory.mktemp("h100")
    h100 = Path(__file__).resolve().parent.parent / "evidence" / "h100"
    index = render_report([str(h100)], str(out))
    session, noise = visit(browser, index.as_uri())
    nav = query(browser, session, "[...document.querySelectorAll('header nav a')]"
                                  ".map(a => a.getAttribute('href'))")
    assert "peer-pytorch.html" in nav and "exhaustive.html" in nav
    for page, shot in (("exhaustive.html", "report-ulp-table.png"),
                       ("peer-pytorch.html", "report-peer-pytorch.png")):
        session, noise = visit(browser, (index.parent / page).as_uri())
        assert noise == [], page
        fits(browser, session)
        assert query(browser, session, TOKENS_JS) == [], page
        screenshot(browser, session, shots_dir(tmp_path) / shot)
    session, _ = visit(browser, (index.parent / "exhaustive.html").as_uri())
    assert query(browser, session, "document.querySelectorAll('table.ulp-table tbody tr')"
                                   ".length") == 15      # 12 functions and 3 .accurate rows


def test_every_page_of_the_recorded_h200_evidence_fits_1024_px(browser, tmp_path_factory):
    # the recorded evidence has the longest kernel lists, policy notes and declared-bound reasons
    # of any capsule (attention's, conv's): five of its pages needed scrolling before
    # `.data td` could wrap them
    out = tmp_path_factory.mktemp("h200")
    h200 = Path(__file__).resolve().parent.parent / "evidence" / "h200"
    flags = h200.parent / "h200-flags"          # the H200's compile-flag matrix (docs/FLAGS.md)
    index = render_report([str(h200), str(flags)], str(out))
    pages = sorted(index.parent.glob("*.html"))
    assert len(pages) > 50
    # PyTorch's kernels audited in the same run (aten.* records): their page is among these
    assert (index.parent / "peers.html").exists() == any(h200.glob("aten.*.json"))
    assert (index.parent / "flags.html").exists() == (flags / "flag-matrix.json").is_file()
    for page in pages:
        session, noise = visit(browser, page.as_uri())
        assert noise == [], page.name
        extra, over = query(browser, session, OVERFLOW_JS)
        assert (extra, over) == (0, []), f"{page.name} needs {extra} px of scrolling: {over}"
        assert query(browser, session, TOKENS_JS) == [], page.name


def test_cpu_only_report_folds_the_cuda_capsules(browser, tmp_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu-only")
    build = FixedBuild.from_file(FIX / "current_build.json")
    index = render_report([str(FIX / "cpu")], str(out), build=build)
    session, noise = visit(browser, index.as_uri())
    assert noise == []
    fits(browser, session)
    assert query(browser, session,
                 "document.querySelectorAll('table.matrix tbody tr[id]').length") == 6
    assert query(browser, session, "document.querySelectorAll('td.na').length") == 0
    folded = query(browser, session, "(() => { const d = document.getElementById("
                                     "'not-audited-here'); return [d.open, d.querySelector("
                                     "'summary').innerText, d.getBoundingClientRect().height]; })()")
    assert folded[0] is False and folded[1].startswith("3 capsules for devices no evidence")
    assert folded[2] < 40                              # one folded line, not 3 rows of dashes
    screenshot(browser, session, shots_dir(tmp_path) / "report-index-cpu-only.png")


def test_peers_page_in_chromium(browser, tmp_path_factory, tmp_path):
    """ours and PyTorch's, from fixtures/evidence/peers (a CPU campaign with fake NumPy peers,
    fixtures/plugins/numpy_peers.py): reached from the navigation, one table, each op's capsules
    grouped, the failing peer marked, and the page fits 1024 px."""
    out = tmp_path_factory.mktemp("peers")
    index = render_report([str(FIX / "peers")], str(out))
    session, noise = visit(browser, index.as_uri())
    assert noise == []
    assert query(browser, session, "[...document.querySelectorAll('header nav a')]"
                                   ".map(a => a.getAttribute('href'))").count("peers.html") == 1
    session, noise = visit(browser, (index.parent / "peers.html").as_uri())
    assert noise == []
    groups = query(browser, session, "[...document.querySelectorAll('table.peers tbody')]"
                                     ".map(b => [b.id, b.querySelectorAll('tr').length])")
    assert groups == [["peers-peers-add", 3], ["peers-peers-gelu", 3]]
    failing = query(browser, session, "[...document.querySelectorAll('table.peers tr.fail a')]"
                                      ".map(a => a.textContent)")
    assert failing == ["aten.gelu"]
    fits(browser, session)
    screenshot(browser, session, shots_dir(tmp_path) / "report-peers.png")


def test_flags_page_fits_1024_px(browser, tmp_path_factory, tmp_path):
    """The compile-flag matrix at its widest: every native capsule under all four sets (seven
    verdict columns), each cell a missing record with its reason, linked from the navigation."""
    from conformance import flag_matrix as fm
    from engine.runtime.flag_sets import FLAG_SETS
    ev = tmp_path_factory.mktemp("flags-ev")
    plan = fm.Plan(list(FLAG_SETS), fm.native_capsules(), {"quick": True, "seed": "0"})
    fm.write(ev, fm.assemble(ev, plan))
    out = tmp_path_factory.mktemp("flags")
    index = render_report([str(ev)], str(out))
    session, noise = visit(browser, index.as_uri())
    assert noise == []
    assert query(browser, session, "[...document.querySelectorAll('header nav a')]"
                                   ".map(a => a.getAttribute('href'))").count("flags.html") == 1
    session, noise = visit(browser, (index.parent / "flags.html").as_uri())
    assert noise == []
    assert query(browser, session, "document.querySelectorAll('table.flags tbody tr').length") \
        == len(plan.capsules)
    fits(browser, session)
    screenshot(browser, session, shots_dir(tmp_path) / "report-flags.png")
