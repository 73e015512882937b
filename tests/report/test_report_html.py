"""The HTML report: one self-contained page, escaped data, three PNG plots, atomic write."""

from __future__ import annotations

import base64
import os
import re
import stat
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pal_slurm.db.classification_store import BinRow, ResultRow, StoredClassification
from pal_slurm.errors import PalError
from pal_slurm.report import page as html_page, plots, tables
from pal_slurm.classification.actions import ActionPolicy
from pal_slurm.report.data import build_report

#: this file's benchmarks: sgemm and resnet are the compute-bound ones
COMPUTE = ActionPolicy(compute_benchmarks=("sgemm", "resnet"))
from pal_slurm.report.page import render_html, write_html
from pal_slurm.report.plots import MAX_HEATMAP_NODES, clock_plot, heatmap_plot
from pal_slurm.report.tables import group_rows, node_table

HOSTILE = "<script>alert(1)</script>"
ACTION = "drain <node> & run `dcgmi diag -r 3`"
OUTLIER_UUID = "GPU-bad-0003"
PNG_RE = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def _row(uuid, node, model, bench, pv, b, sf, *,  # type: ignore[no-untyped-def]
         outlier=False, profiled=True, clock=None):
    return ResultRow(uuid=uuid, node=node, model=model, benchmark=bench, runs=5 if profiled else 1,
                     median_score=None if pv is None else 100 * pv, perfvar=pv, bin=b, slowdown=sf,
                     outlier=outlier, profiled=profiled, median_sm_clock_mhz=clock)


def _stored(model_b: str = "H100", node_name: str = "node-a",
            note_params: dict | None = None) -> StoredClassification:
    """Two models; A100 has sgemm and resnet (with clocks for sgemm only), model_b has sgemm."""
    results = []
    a100 = [("GPU-a-0001", node_name, 0.97, 1410.0), ("GPU-a-0002", node_name, 1.00, 1395.0),
            (OUTLIER_UUID, "node-b", 1.40, 1100.0), ("GPU-a-0004", "node-b", 1.02, None),
            ("GPU-a-0005", None, 1.01, 1400.0)]
    for uuid, node, pv, clk in a100:
        out = uuid == OUTLIER_UUID
        results.append(_row(uuid, node, "A100", "sgemm", pv, 1 if out else 0, 1.40 if out else 1.0,
                            outlier=out, clock=clk))
        results.append(_row(uuid, node, "A100", "resnet", pv * 0.99, 1 if out else 0, 1.39 if out else 1.0,
                            outlier=out))
    results.append(_row("GPU-a-0006", "node-c", "A100", "sgemm", None, None, None, profiled=False))
    for i, pv in enumerate((0.98, 1.0, 1.03)):
        results.append(_row(f"GPU-h-000{i}", "node-d", model_b, "sgemm", pv, 0, 1.0, clock=1900.0 - 10 * i))
    bins = [
        BinRow(0, 1.0, 1.0, 4, False, 0.97, 1.02, model="A100", benchmark="sgemm"),
        BinRow(1, 1.40, 1.40, 1, True, 1.40, 1.40, model="A100", benchmark="sgemm"),
        BinRow(0, 0.99, 1.0, 4, False, 0.96, 1.01, model="A100", benchmark="resnet"),
        BinRow(1, 1.386, 1.39, 1, True, 1.386, 1.386, model="A100", benchmark="resnet"),
        BinRow(0, 1.0, 1.0, 3, False, 0.98, 1.03, model=model_b, benchmark="sgemm"),
    ]
    params = note_params if note_params is not None else {"max_bins": 8, "outlier_z": 3.5, "note": "weekly run"}
    return StoredClassification(version=7, created_at=datetime(2024, 11, 1, 12, 0, tzinfo=timezone.utc),
                                params=params, results=tuple(results), bins=tuple(bins),
                                job_classes={"compute": "sgemm", "train": "resnet"})


_FIGURES: list = []  # type: ignore[type-arg]  # the matplotlib Figures `page` drew (see `figures`)


@pytest.fixture(scope="module")
def page() -> str:
    real = plots._png

    def keep(fig):  # type: ignore[no-untyped-def]
        out = real(fig)  # drawn: extents and fonts can be inspected
        _FIGURES.append(fig)
        return out

    _FIGURES.clear()
    stored = _stored()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "_png", keep)
        return render_html(stored, build_report(stored, outlier_action=ACTION, policy=COMPUTE))


def test_one_html_document_with_tables(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<html") == 1 and page.rstrip().endswith("</html>")
    assert "classification version 7" in page
    assert "2024-11-01T12:00:00+00:00" in page
    assert "outlier_z" in page and "3.5" in page  # parameters in the header
    # per model x benchmark: A100 sgemm has 5 profiled GPUs, 1 unprofiled, one bin 1.000x4 and one outlier
    # (counted in the outliers column, as in the terminal table: the outlier's own bin is not a bin)
    assert re.search(r"<td>A100</td><td>sgemm</td><td class=\"num\">5</td><td class=\"num\">1</td>", page)
    assert "1.000×4" in page and "1.400×1" not in page
    # per job class table
    assert "<td>compute</td><td>A100</td><td>sgemm</td>" in page
    assert "<td>train</td><td>A100</td><td>resnet</td>" in page
    # outliers table: node, uuid, PerfVar, escaped recommendation
    assert re.search(rf"<td>node-b</td><td class=\"mono\">{OUTLIER_UUID}</td>.*?1\.400", page)
    assert "drain &lt;node&gt; &amp; run `dcgmi diag -r 3`" in page
    # the unprofiled GPU, and the GPU without a node shown as "unknown"
    assert "GPU-a-0006" in page
    assert "unknown" in page


def test_self_contained_three_png_plots(page: str) -> None:
    images = PNG_RE.findall(page)
    assert len(images) == 3
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
    assert not re.search(r"(?:src|href)=\"(?:https?:|//|file:)", page)
    assert "<script" not in page and "<link" not in page and "@import" not in page


def test_hostile_names_are_escaped() -> None:
    """Node, model, parameter and recommendation strings come from files and users."""
    stored = _stored(model_b=HOSTILE + " $x^{", node_name=HOSTILE + " n$1$\x00",
                     note_params={"note": HOSTILE, HOSTILE: "x"})
    out = render_html(stored, build_report(stored, outlier_action=HOSTILE))
    assert "<script" not in out.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; n$1$\ufffd" in out  # node (control char replaced)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; $x^{" in out  # model
    assert "\x00" not in out
    # names with mathtext syntax do not break the plots
    images = PNG_RE.findall(out)
    assert len(images) == 3


def test_no_clocks_skips_scatter_with_note() -> None:
    base = _stored()
    stored = replace(base, results=tuple(replace(r, median_sm_clock_mhz=None) for r in base.results))
    report = build_report(stored, outlier_action="x")
    img, note = clock_plot(report, group_rows(stored))
    assert img == "" and "clock vs performance plot skipped" in note


def test_empty_classification_renders() -> None:
    stored = StoredClassification(1, datetime(2024, 1, 1, tzinfo=timezone.utc), {}, (), (), {})
    out = render_html(stored, build_report(stored, outlier_action="x"))
    assert out.startswith("<!DOCTYPE html>") and "nothing to plot" in out
    assert not PNG_RE.findall(out)


def test_plot_failure_degrades_to_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> tuple[str, str]:
        raise ValueError("<bad> data")

    monkeypatch.setattr(plots, "histogram_plot", boom)
    monkeypatch.setattr(plots, "heatmap_plot", boom)
    monkeypatch.setattr(plots, "clock_plot", boom)
    stored = _stored()
    out = render_html(stored, build_report(stored, outlier_action="x"))
    assert out.count("This plot could not be drawn (ValueError: &lt;bad&gt; data).") == 3
    assert OUTLIER_UUID in out


def test_heatmap_is_capped_with_note() -> None:
    n = MAX_HEATMAP_NODES + 2
    rows = tuple(_row(f"GPU-{i}", f"n{i:03d}", "A100", "sgemm", 1.0 + i / 1000, 0, 1.0) for i in range(n))
    stored = StoredClassification(1, datetime(2024, 1, 1, tzinfo=timezone.utc), {}, rows, (), {})
    img, note = heatmap_plot(stored)
    assert img.startswith('<img src="data:image/png;base64,')
    assert note == f"Showing the {MAX_HEATMAP_NODES} rows with the worst PerfVar of {n} nodes."


def test_heatmap_counts_nodes_as_the_cards_do() -> None:
    """GPUs without a node are a row of their own ("unknown"), never counted as a node."""
    n = MAX_HEATMAP_NODES + 2
    rows = tuple(_row(f"GPU-{i}", f"n{i:03d}" if i else None, "A100", "sgemm", 1.0 + i / 1000, 0, 1.0)
                 for i in range(n))
    stored = StoredClassification(1, datetime(2024, 1, 1, tzinfo=timezone.utc), {}, rows, (), {})
    _img, note = heatmap_plot(stored)
    assert f"of {n - 1} nodes and the “unknown” row." in note and f"of {n} nodes" not in note
    assert "All nodes as a table (" + f"{n - 1} nodes and the “unknown” row" in node_table(stored)


def test_write_html_is_atomic(tmp_path: Path, page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stored = _stored()
    report = build_report(stored, outlier_action=ACTION, policy=COMPUTE)
    monkeypatch.setattr(html_page, "render_html", lambda s, r: page)  # rendering is tested above
    target = tmp_path / "report.html"
    target.write_text("old")
    write_html(target, stored, report)
    text = target.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and OUTLIER_UUID in text
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary file left
    assert stat.S_IMODE(target.stat().st_mode) & 0o044  # readable by others like a normal file (umask 022)


def test_write_html_missing_dir_is_pal_error(tmp_path: Path) -> None:
    target = tmp_path / "nope" / "report.html"
    with pytest.raises(PalError) as exc:
        write_html(target, _stored(), {"benchmarks": [], "job_classes": []})
    msg = str(exc.value)
    assert str(target) in msg and "does not exist" in msg and "\n" not in msg


def test_write_html_parent_is_file_is_pal_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    target = tmp_path / "f" / "report.html"
    with pytest.raises(PalError, match="is not a directory"):
        write_html(target, _stored(), {})


def test_write_html_real_os_refusal_is_pal_error() -> None:
    """A directory nobody can create files in, root included (/proc): the OS error becomes a PalError."""
    target = Path("/proc/pal-report-test.html")
    with pytest.raises(PalError) as exc:
        write_html(target, _stored(), {})
    assert str(target) in str(exc.value)
    assert not target.exists()


def test_write_html_not_writable_per_access_is_pal_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same check as above, also under root (which may write anywhere): os.access says no."""
    monkeypatch.setattr(html_page.os, "access", lambda path, mode: False)
    target = tmp_path / "report.html"
    with pytest.raises(PalError) as exc:
        write_html(target, _stored(), {})
    assert str(target) in str(exc.value) and "not writable" in str(exc.value)
    assert not target.exists()


def test_write_html_target_is_directory_is_pal_error(tmp_path: Path) -> None:
    with pytest.raises(PalError, match="is a directory"):
        write_html(tmp_path, _stored(), {})


def test_write_failure_is_pal_error_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure after the temp file exists (e.g. disk full, EACCES on rename) leaves nothing behind."""
    stored = _stored()
    report = build_report(stored, outlier_action="x")
    monkeypatch.setattr(html_page, "render_html", lambda s, r: "<!DOCTYPE html><html></html>")

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    target = tmp_path / "report.html"
    with pytest.raises(PalError) as exc:
        write_html(target, stored, report)
    assert str(target) in str(exc.value) and "Permission denied" in str(exc.value)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- layout


@pytest.fixture(scope="module")
def figures(page: str) -> list:  # type: ignore[type-arg]
    """The three figures of the `page` fixture's report."""
    assert len(_FIGURES) == 3
    return list(_FIGURES)


def test_legends_never_cover_data(figures: list) -> None:  # type: ignore[type-arg]
    """Every legend sits outside every axes (above the panels), whatever the data."""
    for fig in figures:
        renderer = fig.canvas.get_renderer()
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        for leg in legends:
            box = leg.get_window_extent(renderer)
            for ax in fig.axes:
                if ax.get_visible():
                    assert not box.overlaps(ax.get_window_extent(renderer)), "a legend covers an axes"
    # the histogram and the clock scatter have a legend (the heatmap has its colour bar)
    assert sum(1 for f in figures if f.legends) == 2


def test_plot_text_is_readable_and_figures_use_the_page_width(figures: list) -> None:  # type: ignore[type-arg]
    """No text under MIN_FONT_PT (9 pt = 12 px when shown at the page width); every figure is
    FIG_WIDTH_IN wide and the page shows it at width 100 %."""
    from matplotlib.text import Text

    for fig in figures:
        assert fig.get_figwidth() == pytest.approx(plots.FIG_WIDTH_IN)
        texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
        assert texts
        small = [(t.get_text(), t.get_fontsize()) for t in texts if t.get_fontsize() < plots.MIN_FONT_PT]
        assert not small, small
    assert plots.MIN_FONT_PT * plots.CSS_DPI / 72 >= 11  # CSS pixels at 1:1
    assert re.search(r"figure img \{[^}]*\bwidth: 100%", html_page._CSS)


def test_outliers_listed_once_per_gpu_with_every_benchmark(page: str) -> None:
    """GPU-bad-0003 is an outlier on sgemm and resnet: one row, a PerfVar cell per benchmark."""
    section = page[page.index('<h2 id="outliers">'):page.index('<h2 id="dist">')]
    assert section.count(OUTLIER_UUID) == 1
    head = re.search(r"<thead><tr>(.*?)</tr></thead>", section)[1]  # type: ignore[index]
    assert re.findall(r"<th>(.*?)</th>", head) == ["Node", "UUID", "Model", "resnet", "sgemm", "Recommendation"]
    row = re.search(rf"<tr><td>node-b</td><td class=\"mono\">{OUTLIER_UUID}</td>(.*?)</tr>", section)[1]  # type: ignore[index]
    assert re.findall(r'<td class="num out"[^>]*>([\d.]+)</td>', row) == ["1.386", "1.400"]
    assert row.count("drain &lt;node&gt; &amp; run") == 1  # the same advice once, not once per benchmark


def test_every_table_colour_is_explained(page: str) -> None:
    """The bin chips and red counts/cells have a key on the page (outliers are counted, not shown as bins)."""
    assert page.count('<p class="key">Colours:') == 2  # under both summary tables
    assert 'a bin of regular GPUs' in page and 'class="bin out"' not in page
    assert "an outlier on that benchmark" in page  # under the outlier table
    assert "grey means no data" in page and "green is faster" in page  # heatmap caption
    assert 'A <span class="bad">red</span> count: the node has outlier GPUs.' in page  # the node table


def test_outlier_table_escapes_benchmark_node_and_uuid() -> None:
    """The per-GPU outlier table puts benchmark names in its header and node/UUID in cells."""
    base = _stored()
    evil = HOSTILE + "&"
    results = tuple(replace(r, benchmark=evil if r.benchmark == "resnet" else r.benchmark,
                            node=evil if r.uuid == OUTLIER_UUID else r.node,
                            uuid=r.uuid + "<b>" if r.uuid == OUTLIER_UUID else r.uuid) for r in base.results)
    bins = tuple(replace(b, benchmark=evil if b.benchmark == "resnet" else b.benchmark) for b in base.bins)
    stored = replace(base, results=results, bins=bins, job_classes={"compute": "sgemm"})
    section = tables.outlier_table(stored, build_report(stored, outlier_action=evil))
    assert "<script" not in section.lower() and f"{OUTLIER_UUID}<b>" not in section
    assert "<th>&lt;script&gt;alert(1)&lt;/script&gt;&amp;</th>" in section
    assert f"<td>&lt;script&gt;alert(1)&lt;/script&gt;&amp;</td><td class=\"mono\">{OUTLIER_UUID}&lt;b&gt;</td>" in section


def test_the_variability_tax_section_plots_and_escapes() -> None:
    """The savings section: the headline, a fourth PNG (lost and saved per partition), the GPUs
    responsible with their action; names from the cluster are escaped; none recorded says so."""
    from pal_slurm.savings import Cell, PaceCell, savings

    cells = [Cell("gpu", "observe", True, 10, 100.0, 12.0, 11.0, 9.0, 10),
             Cell("<big>", "observe", True, 4, 40.0, 2.0, 2.0, 1.5, 4), Cell("gpu", "observe", False, 1, 2.0, 0, 0, 0, 0)]
    tax = savings(cells, [PaceCell("node<1>:2", 8.0, 5)], by="partition", since="7d",
                  gpu_names={("node<1>", 2): "GPU-x"}, actions={"GPU-x": {"action": "drain", "reason": "slow"}})
    stored = _stored()
    page = render_html(stored, {**build_report(stored, outlier_action=ACTION, policy=COMPUTE), "savings": tax})
    assert len(PNG_RE.findall(page)) == 4
    assert '<h2 id="savings">Variability tax</h2>' in page and '<a href="#savings">' in page
    assert "last 7 days: 14 GPU-hours (10.0 %) lost to slow GPUs; pal-slurm would have saved 10 of them" in page
    assert "<td>node&lt;1&gt;</td><td>2</td><td>GPU-x</td><td>8.000</td><td>57.1 %</td><td>5</td><td>drain</td>" in page
    assert "<big>" not in page
    none = render_html(stored, build_report(stored, outlier_action=ACTION, policy=COMPUTE))
    assert "No job accounting recorded yet" in none and len(PNG_RE.findall(none)) == 3


def test_one_far_outlier_leaves_the_regular_bins_readable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """16 GPUs within 6 % and one at 5x: the axis spans the regular GPUs (plus one overflow bin
    holding the outlier, labelled), not 1.0-5.0 with the regular bins in a sliver at the left."""
    from click.testing import CliRunner

    from tests.support.fleetgen import records
    from pal_slurm.cli.main import cli
    from pal_slurm.config import load_config
    from pal_slurm.db.engine import make_engine
    from pal_slurm.ingest.jsonl import dump_jsonl
    from pal_slurm.report import plots
    from pal_slurm.report.tables import group_rows
    from pal_slurm.report.service import load_for_html

    fleet = {f"GPU-{i:02d}": 1.0 + 0.004 * i for i in range(16)} | {"GPU-far": 5.0}
    path = tmp_path / "far.jsonl"
    path.write_text(dump_jsonl(records(fleet)))
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    for args in (["db", "upgrade"], ["profile", "import", str(path)], ["classify", "--allow-partial"]):
        assert CliRunner().invoke(cli, ["--db", url, *args], env={"PAL_CONFIG": ""}).exit_code == 0
    engine = make_engine(url)
    try:
        stored, report = load_for_html(engine, load_config(None, db_url=url), None)
    finally:
        engine.dispose()
    items = [i for i in report["benchmarks"] if i["benchmark"] == "resnet50"]
    fig = plots.histogram_figure(items, group_rows(stored))
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    # the regular GPUs' PerfVars (about 0.97-1.03) and one overflow bin, not an axis up to ~4.9
    assert lo < 0.98 and 1.02 < hi < 1.1, (lo, hi)
    labels = [t.get_text() for t in ax.texts]
    assert any(t.startswith("1 GPU\nup to 4.") for t in labels), labels
