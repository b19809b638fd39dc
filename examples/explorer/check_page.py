#!/usr/bin/python3
"""Opens an explorer page in headless Chromium and checks it as a student would see it.

    check_page.py PAGE.html NUMBERS.json [--screenshot OUT.png]

Through Chromium's DevTools protocol (one WebSocket, Debian's python3-websocket):
  - the page loads with no console error, no uncaught exception and no request but its own file;
  - every head's map is drawn, cell by cell, with the weights the program computed (NUMBERS.json,
    written by `explorer --numbers`): each cell's rendered fill-opacity is its weight;
  - hovering a token (a real mouse event) frames that token's row in every map that reads it,
    names under each map the key it looks at most, as the numbers say, and changes the pixels;
  - clicking a map enlarges that head.
Every wait is on a protocol event or on the page's DOM, never on a clock; a deadline only turns
a hang into a failure. Exit 0 when all hold, 1 (with the reasons) otherwise, also when Chromium
or python3-websocket is missing: a check that cannot run never passes.
"""
import argparse
import base64
from decimal import Decimal, ROUND_HALF_UP
import json
import math
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

DEADLINE_S = 120  # for the whole check: a guard against a hang, not a wait


def fail(message):
    print(f"check_page: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import websocket  # Debian's python3-websocket
except ImportError:
    fail("python3-websocket is not installed (apt-get install python3-websocket; scripts/setup installs it)")


class Browser:
    """Headless Chromium and one page in it, driven over the DevTools protocol."""

    def __init__(self, width, height):
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if not chromium:
            fail("chromium is not installed (apt-get install chromium; scripts/setup installs it)")
        self.profile = tempfile.mkdtemp(prefix="explorer-chromium-")
        # Port 0: Chromium picks a free port and prints the address it listens on.
        self.process = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.deadline = time.monotonic() + DEADLINE_S
        address = self._devtools_address()
        self.socket = websocket.create_connection(address, timeout=DEADLINE_S, suppress_origin=True)
        self.next_id = 0
        self.events = []  # every event received, in order
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def _devtools_address(self):
        stderr = b""
        while time.monotonic() < self.deadline:
            ready, _, _ = select.select([self.process.stderr], [], [], self.deadline - time.monotonic())
            if not ready:
                break
            chunk = os.read(self.process.stderr.fileno(), 4096)
            if not chunk:
                fail(f"chromium ended before listening (exit {self.process.wait()}): {stderr.decode(errors='replace')}")
            stderr += chunk
            for line in stderr.decode(errors="replace").splitlines():
                if line.startswith("DevTools listening on "):
                    return line.split(" ", 3)[3].strip()
        fail("chromium did not open its DevTools port in time")

    def _receive(self):
        self.socket.settimeout(max(0.1, self.deadline - time.monotonic()))
        try:
            return json.loads(self.socket.recv())
        except websocket.WebSocketTimeoutException:
            fail("no answer from chromium before the deadline")

    def call(self, method, session=True, **params):
        """Sends a command (to the page's session unless session=False) and returns its result."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session and getattr(self, "session", None):
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        while True:
            reply = self._receive()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    fail(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for_event(self, method):
        for event in self.events:
            if event["method"] == method:
                return event
        while True:
            event = self._receive()
            if "method" in event:
                self.events.append(event)
                if event["method"] == method:
                    return event

    def evaluate(self, expression):
        """The value of a JavaScript expression in the page; a promise is awaited."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            fail(f"evaluating {expression[:80]!r}: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")

    def wait_until(self, condition, what):
        """Waits until the JavaScript `condition` holds, checked now and after every change of the DOM."""
        ok = self.evaluate(f"""new Promise(resolve => {{
            const holds = () => {{ try {{ return Boolean({condition}); }} catch (e) {{ return false; }} }};
            if (holds()) return resolve(true);
            const observer = new MutationObserver(() => {{ if (holds()) {{ observer.disconnect(); resolve(true); }} }});
            observer.observe(document, {{subtree: true, childList: true, attributes: true, characterData: true}});
            setTimeout(() => {{ observer.disconnect(); resolve(holds()); }}, {int(1000 * max(1, self.deadline - time.monotonic()))});
        }})""")
        if not ok:
            fail(f"the page never showed {what}")

    def mouse(self, kind, x, y, button="none", clicks=0):
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button=button, clickCount=clicks)

    def centre(self, selector):
        box = self.evaluate(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            if (!e) return null; e.scrollIntoView({{block: "center", inline: "center"}});
            const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
        if box is None:
            fail(f"the page has no {selector}")
        return box

    def screenshot(self):
        return self.call("Page.captureScreenshot", format="png")["data"]

    def close(self):
        try:
            self.socket.close()
        finally:
            self.process.kill()
            self.process.wait()
            shutil.rmtree(self.profile, ignore_errors=True)


def problems_in(events, page_url):
    """Console errors, uncaught exceptions and requests for anything but the page itself."""
    found = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.exceptionThrown":
            found.append(f"uncaught exception: {p['exceptionDetails'].get('exception', {}).get('description') or p['exceptionDetails'].get('text')}")
        elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
            found.append(f"console.{p['type']}: {' '.join(str(a.get('value', a.get('description'))) for a in p.get('args', []))}")
        elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":  # a refused request is one
            found.append(f"{p['entry']['source']} {p['entry']['level']}: {p['entry']['text']}")
        elif e["method"] == "Network.requestWillBeSent" and p["request"]["url"] != page_url:
            found.append(f"request for {p['request']['url']}")
    return found


def expected_top(numbers, layer, head, q):
    """What the page should write under a map for query q: the strongest key and its weight."""
    lay = numbers["layers"][layer]
    keys = next(s["tokens"] for s in numbers["sequences"] if s["name"] == lay["keys"])
    row = lay["heads"][head][q * len(keys):(q + 1) * len(keys)]
    k = max(range(len(row)), key=lambda i: (row[i], -i))  # the first of equal weights, as indexOf
    return f"→ {keys[k]} (#{k}) {to_fixed(row[k])}"


def to_fixed(w):
    """JavaScript's w.toFixed(2): the exact binary value rounded, halves up."""
    return str(Decimal(w).quantize(Decimal("0.01"), ROUND_HALF_UP))


def check_cells(browser, numbers, scale):
    """Every head's map is drawn once, each cell shaded by its weight on `scale` (the page's)."""
    if browser.evaluate("document.body.dataset.scale") != scale:
        fail(f"the page does not draw on the {scale} scale")
    shade = math.sqrt if scale == "sqrt" else (lambda w: w)
    drawn = browser.evaluate("""[...document.querySelectorAll('#grid svg.map')].map(svg => ({
        layer: Number(svg.dataset.layer), head: Number(svg.dataset.head),
        cells: [...svg.querySelectorAll('rect.cell')].map(c =>
            [Number(c.dataset.q), Number(c.dataset.k), Number(getComputedStyle(c).fillOpacity)]) }))""")
    expected_maps = sum(len(layer["heads"]) for layer in numbers["layers"])
    if len(drawn) != expected_maps:
        fail(f"{len(drawn)} maps drawn, the program computed {expected_maps}")
    seen, worst = set(), 0.0
    for m in drawn:
        lay = numbers["layers"][m["layer"]]
        seen.add((m["layer"], m["head"]))
        S = len(next(s["tokens"] for s in numbers["sequences"] if s["name"] == lay["keys"]))
        weights = lay["heads"][m["head"]]
        if len(m["cells"]) != len(weights):
            fail(f"layer {m['layer']} head {m['head']}: {len(m['cells'])} cells drawn for {len(weights)} weights")
        for q, k, opacity in m["cells"]:
            worst = max(worst, abs(opacity - shade(weights[q * S + k])))
    if len(seen) != expected_maps:
        fail("some head is drawn twice and another not at all")
    # The renderer keeps opacities in single precision: 1e-6 is far below a visible step (1/255).
    if worst > 1e-6:
        fail(f"a cell's drawn opacity is {worst:.3g} from the {scale} shade of the weight the program computed")
    print(f"check_page: {expected_maps} maps, {sum(len(m['cells']) for m in drawn)} cells, each shaded by its "
          f"weight on the {scale} scale (largest difference {worst:.2g})")
    return drawn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page")
    parser.add_argument("numbers")
    parser.add_argument("--screenshot", help="also write a PNG of the page, a token hovered")
    parser.add_argument("--zoom-screenshot", help="also write a PNG of the page with a head enlarged")
    parser.add_argument("--hover", type=int, default=3, help="the token hovered for the screenshot")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args()
    numbers = json.load(open(args.numbers, encoding="utf-8"))
    page_url = "file://" + os.path.abspath(args.page)

    browser = Browser(args.width, args.height)
    try:
        for domain in ("Runtime", "Log", "Network", "Page"):
            browser.call(f"{domain}.enable")
        # The viewport exactly width x height (the window's would lose its frame's height).
        browser.call("Emulation.setDeviceMetricsOverride", width=args.width, height=args.height, deviceScaleFactor=1,
                     mobile=False)
        browser.call("Page.navigate", url=page_url)
        browser.wait_for_event("Page.loadEventFired")

        # ---- the maps are the program's numbers, on either scale ----
        drawn = check_cells(browser, numbers, "sqrt")
        x, y = browser.centre("#linear")
        browser.mouse("mousePressed", x, y, "left", 1)
        browser.mouse("mouseReleased", x, y, "left", 1)
        browser.wait_until('document.body.dataset.scale === "linear"', "the linear scale after a click on its box")
        check_cells(browser, numbers, "linear")

        # ---- hovering a token shows where each head looks from it ----
        state = """JSON.stringify({readout: document.getElementById('readout').textContent,
            tops: [...document.querySelectorAll('#grid figure.head .top')].map(e => e.textContent),
            frames: [...document.querySelectorAll('#grid svg.map')].map(s => s.querySelector('rect[stroke="#d62728"]').getAttribute('display') + s.querySelector('rect[stroke="#d62728"]').getAttribute('y'))})"""
        before_state, before_pixels = browser.evaluate(state), browser.screenshot()
        sequence = numbers["sequences"][0]
        hovered = [min(2, len(sequence["tokens"]) - 1), 0]
        for index in hovered:
            x, y = browser.centre(f'.token[data-sequence="{sequence["name"]}"][data-index="{index}"]')
            browser.mouse("mouseMoved", x, y)
            browser.wait_until(f'document.querySelector(".token.selected")?.dataset.index === "{index}"',
                               f"token {index} chosen on hover")
            tops = browser.evaluate("""[...document.querySelectorAll('#grid figure.head')].map(f => {
                const svg = f.querySelector('svg.map');
                return [Number(svg.dataset.layer), Number(svg.dataset.head), f.querySelector('.top').textContent]; })""")
            reading = 0
            for layer, head, text in tops:
                if numbers["layers"][layer]["queries"] != sequence["name"]:
                    continue
                reading += 1
                want = expected_top(numbers, layer, head, index)
                if text != want:
                    fail(f"hovering token {index}: layer {layer} head {head} shows {text!r}, the numbers say {want!r}")
            if reading == 0:
                fail(f"no map reads the {sequence['name']}")
        after_state, after_pixels = browser.evaluate(state), browser.screenshot()
        if after_state == before_state:
            fail("hovering changed nothing on the page")
        if after_pixels == before_pixels:
            fail("hovering changed no pixel")
        print(f"check_page: hovering tokens {hovered} frames their rows and names each head's strongest key, as computed")

        # ---- hovering a row of a map chooses that token too; clicking a map enlarges it ----
        last = drawn[-1]
        lay = numbers["layers"][last["layer"]]
        row = len(next(s["tokens"] for s in numbers["sequences"] if s["name"] == lay["queries"])) - 1
        x, y = browser.centre(f'#grid svg.map[data-layer="{last["layer"]}"][data-head="{last["head"]}"] '
                              f'rect.cell[data-q="{row}"][data-k="0"]')
        browser.mouse("mouseMoved", x, y)
        browser.wait_until(f'document.querySelector(".token.selected[data-sequence=\\"{lay["queries"]}\\"]")'
                           f'?.dataset.index === "{row}"', f"row {row} of a map chosen on hover")
        browser.mouse("mousePressed", x, y, "left", 1)
        browser.mouse("mouseReleased", x, y, "left", 1)
        browser.wait_until(f'!document.getElementById("zoom").hidden && document.querySelector("#zoom-map svg")'
                           f'?.dataset.head === "{last["head"]}"', "the clicked head enlarged")
        # The enlarged map opens under the pointer, which may choose another row: choose one there.
        row = row // 2
        x, y = browser.centre(f'#zoom-map rect.cell[data-q="{row}"][data-k="0"]')
        browser.mouse("mouseMoved", x, y)
        browser.wait_until(f'document.querySelector(".token.selected[data-sequence=\\"{lay["queries"]}\\"]")'
                           f'?.dataset.index === "{row}"', f"row {row} of the enlarged map chosen on hover")
        keys = len(next(s["tokens"] for s in numbers["sequences"] if s["name"] == lay["keys"]))
        numbers_shown = browser.evaluate('[...document.querySelectorAll("#zoom-map text.weight")].map(t => t.textContent)')
        weights = lay["heads"][last["head"]][row * keys:(row + 1) * keys]
        if numbers_shown != [to_fixed(w).lstrip("0") for w in weights]:
            fail(f"the enlarged head writes {numbers_shown} in row {row}, the numbers are {weights}")
        if browser.evaluate('document.getElementById("zoom-top").textContent') != expected_top(numbers, last["layer"], last["head"], row):
            fail("the enlarged head names another strongest key than the numbers")
        if args.zoom_screenshot:
            with open(args.zoom_screenshot, "wb") as f:
                f.write(base64.b64decode(browser.screenshot()))
        browser.call("Input.dispatchKeyEvent", type="keyDown", key="Escape", code="Escape", windowsVirtualKeyCode=27)
        browser.wait_until('document.getElementById("zoom").hidden', "the enlarged head closed by Escape")
        print("check_page: a map's row chooses its token; a click enlarges the head, which writes the row's weights; "
              "Escape closes it")

        if args.screenshot:  # on the page's own scale, the square root
            x, y = browser.centre("#linear")
            browser.mouse("mousePressed", x, y, "left", 1)
            browser.mouse("mouseReleased", x, y, "left", 1)
            browser.wait_until('document.body.dataset.scale === "sqrt"', "the square-root scale again")
            sequence = numbers["sequences"][-1]
            x, y = browser.centre(f'.token[data-sequence="{sequence["name"]}"][data-index="{args.hover}"]')
            browser.mouse("mouseMoved", x, y)
            browser.wait_until(f'document.querySelector(".token.selected")?.dataset.index === "{args.hover}"',
                               "the screenshot's token chosen")
            browser.evaluate("window.scrollTo(0, 0)")
            with open(args.screenshot, "wb") as f:
                f.write(base64.b64decode(browser.screenshot()))
            print(f"check_page: screenshot written to {args.screenshot}")

        browser.evaluate("1")  # a last round trip: every event the page caused has arrived before its answer
        found = problems_in(browser.events, page_url)
        if not any(e["method"] == "Network.requestWillBeSent" and e["params"]["request"]["url"] == page_url
                   for e in browser.events):
            found.append("the page's own request was not seen: the check of requests would be blind")
        if found:
            fail("the page reported:\n  " + "\n  ".join(found))
        print("check_page: no console error, no exception, no request but the page's own file")
    finally:
        browser.close()


if __name__ == "__main__":
    main()
