"""The HTML report in a real headless browser (Debian's chromium): does the page render?

The unit tests in test_report_html.py check the HTML text and the matplotlib figures; this
one checks what an operator sees: the report of a populated demo database, opened in
chromium at 1400 x 900, gives a screenshot that is not blank, every plot is a decoded image
at the page's width, the smallest text is readable and nothing scrolls sideways.

Skipped when chromium is missing, unless PAL_REQUIRE_BROWSER=1 (as `make test` and CI set
it, after tests/services/browser.sh install), where a missing browser is a failure.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

WINDOW = (1400, 900)
CHECK_ID = "pal-browser-check"

# Injected into a copy of the page (the report itself has no script): after load, measure the
# layout and write it into the DOM as JSON, which --dump-dom then returns.
_PROBE = """<script>
window.addEventListener("load", function () {
  var de = document.documentElement, body = document.body;
  var imgs = Array.prototype.map.call(document.images, function (i) {
    return {complete: i.complete, natural: i.naturalWidth, shown: i.getBoundingClientRect().width};
  });
  var smallest = 1e9, where = "";
  var walk = document.createTreeWalker(body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    var n = walk.currentNode, el = n.parentElement;
    if (!n.nodeValue.trim() || !el || el.id === "%(id)s" || el.closest("script, style")) continue;
    if (!el.getClientRects().length) continue;  /* not laid out (a closed <details>) */
    var px = parseFloat(getComputedStyle(el).fontSize);
    if (px < smallest) { smallest = px; where = n.nodeValue.trim().slice(0, 40); }
  }
  var out = document.createElement("pre");
  out.id = "%(id)s";
  out.textContent = JSON.stringify({
    scrollWidth: de.scrollWidth, clientWidth: de.clientWidth, innerWidth: window.innerWidth,
    content: body.getBoundingClientRect().width - parseFloat(getComputedStyle(body).paddingLeft)
             - parseFloat(getComputedStyle(body).paddingRight),
    imgs: imgs, svgs: document.querySelectorAll("svg").length, smallestFontPx: smallest, smallestText: where});
  body.appendChild(out);
});
</script>""" % {"id": CHECK_ID}


@pytest.fixture(scope="module")
def chromium() -> str:
    """The chromium executable; checked before the demo is built, so a skip costs nothing."""
    exe = os.environ.get("PAL_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if exe:
        return exe
    if os.environ.get("PAL_REQUIRE_BROWSER") == "1":
        pytest.fail("chromium not found but PAL_REQUIRE_BROWSER=1 (run tests/services/browser.sh install)")
    pytest.skip("chromium not installed (tests/services/browser.sh install; PAL_REQUIRE_BROWSER=1 to require it)")


def _chromium_cmd(exe: str, profile: Path, *args: str) -> list[str]:
    cmd = [exe, "--headless=new", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
           "--hide-crash-restore-bubble", f"--user-data-dir={profile}",
           f"--window-size={WINDOW[0]},{WINDOW[1]}"]
    if os.geteuid() == 0:
        cmd.append("--no-sandbox")  # chromium refuses to run as root with its sandbox
    return [*cmd, *args]


def _run_chromium(*cmds: list[str]) -> list[str]:
    """Run the chromium command lines side by side (each its own profile); their stdouts."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    outs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=90)
            assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {err[-2000:]}"
            outs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outs


@pytest.fixture(scope="module")
def demo_report(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML report of a populated demo database (the demo's own import -> classify -> report)."""
    from pal_slurm.demo.walkthrough import DemoOptions, run_demo

    out = tmp_path_factory.mktemp("browser-demo")
    result = run_demo(DemoOptions(out_dir=out, nodes=8, gpus_per_node=4, runs_per_gpu=3), say=lambda s: None)
    assert result.planted_bad  # outliers, so the outlier table and the red markers are drawn too
    return result.html_file


def test_report_renders_in_chromium(chromium: str, demo_report: Path, tmp_path: Path) -> None:
    from PIL import Image  # matplotlib's own dependency

    exe = chromium
    # 1. the page as it is, a screenshot; 2. a copy with a probe script that measures the layout
    # after load and writes it into the DOM, read back with --dump-dom. Both at once.
    page = demo_report.read_text(encoding="utf-8")
    assert "<script" not in page  # the report itself runs nothing
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    shot = tmp_path / "report.png"
    _, dom = _run_chromium(_chromium_cmd(exe, tmp_path / "profile1", f"--screenshot={shot}", demo_report.as_uri()),
                           _chromium_cmd(exe, tmp_path / "profile2", "--dump-dom", probe.as_uri()))

    # the screenshot at 1400 x 900 is not one flat colour
    with Image.open(shot) as img:
        assert img.size == WINDOW
        rgb = img.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 20, "blank screenshot"
        # text is drawn: a fair share of the first screen is dark ink, not background
        dark = sum(n for n, (r, g, b) in (colours or []) if r + g + b < 200)
        assert colours is None or dark > 2000, "no text in the screenshot"

    # the probe's facts (--dump-dom prints the DOM after the load event)
    m = re.search(rf'<pre id="{CHECK_ID}">(.*?)</pre>', dom, re.S)
    assert m, f"the probe did not run; DOM tail: {dom[-500:]}"
    facts = json.loads(html.unescape(m[1]))

    # plots present: the three figures are decoded images, shown at (nearly) the content width
    imgs = facts["imgs"]
    assert len(imgs) + facts["svgs"] >= 3, facts
    assert all(i["complete"] and i["natural"] > 0 for i in imgs), imgs
    assert all(i["shown"] >= 0.95 * facts["content"] for i in imgs), (imgs, facts["content"])
    # no horizontal scroll at 1400 px
    assert facts["innerWidth"] == WINDOW[0]
    assert facts["scrollWidth"] <= facts["clientWidth"], facts
    # the smallest text on the page is readable at 100 % zoom
    assert facts["smallestFontPx"] >= 11, facts


def test_simulate_plot_renders_in_chromium(chromium: str, tmp_path: Path) -> None:
    """`pal simulate --plot x.svg` of a real (small) simulation opens in chromium and draws:
    each policy's colour is on screen (its CDF line, panel and title)."""
    from PIL import Image

    from pal_slurm.placement.model import Cluster
    from pal_slurm.simulate.plot import policy_colours, write_plot
    from pal_slurm.simulate.runner import FixedVariability, SimulationSpec, run_simulations
    from pal_slurm.simulate.synthetic import generate

    pv = [1.0, 1.0, 1.1, 1.3] * 2
    cluster = Cluster.uniform(2, 4, slowdown={c: pv for c in "ABCD"}, perfvar={c: pv for c in "ABCD"})
    spec = SimulationSpec(traces=(generate(40, seed=1, max_gpus=8),), policies=("pal", "packed-sticky"),
                          variability=FixedVariability(cluster), mode="event", baseline="slurm-backfill")
    results = run_simulations(spec).results
    svg = tmp_path / "sim.svg"
    write_plot(svg, results)
    shot = tmp_path / "sim.png"
    _run_chromium(_chromium_cmd(chromium, tmp_path / "profile", f"--screenshot={shot}", svg.as_uri()))
    with Image.open(shot) as img:
        rgb = img.convert("RGB")
    colours = dict((c, n) for n, c in rgb.getcolors(maxcolors=1 << 20))
    assert len(colours) > 20, "blank screenshot"
    for policy, rgba in policy_colours([r.policy for r in results]).items():
        want = tuple(round(255 * v) for v in rgba[:3])
        near = sum(n for c, n in colours.items() if max(abs(a - b) for a, b in zip(c, want)) <= 8)
        assert near > 200, f"{policy}'s colour {want} is not on screen"
