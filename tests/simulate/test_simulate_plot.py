"""`pal simulate --plot`: busy GPUs as small multiples (one panel per policy, shared axes),
legends outside the data, readable text, one colour per policy everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from pal_slurm.simulate.event import busy_curve
from pal_slurm.simulate.metrics import JobOutcome, run_metrics
from pal_slurm.simulate.plot import MIN_FONT_PT, build_figure, write_plot
from pal_slurm.simulate.result import SimResult

POLICIES = ("pal", "packed-sticky", "slurm-backfill", "random-sticky")


def _result(trace: str, policy: str, k: int) -> SimResult:
    outcomes = tuple(JobOutcome(f"j{i}", 1 + i % 4, 600.0 * i, 600.0 * i + 60 * k, 600.0 * i + 3600 * (1 + i % 3 + k))
                     for i in range(12))
    busy = sum(o.gpus * (o.finish_time - o.start_time) for o in outcomes)
    return SimResult(trace=trace, policy=policy, mode="event", order="fifo", outcomes=outcomes,
                     metrics=run_metrics(outcomes, busy_gpu_seconds=busy, cluster_gpus=16),
                     busy_timeline=busy_curve(outcomes), cluster_gpus=16)


@pytest.fixture(scope="module")
def figure():  # type: ignore[no-untyped-def]
    results = [_result(t, p, k) for t in ("trace-a", "trace-b") for k, p in enumerate(POLICIES)]
    fig = build_figure(results)
    fig.canvas.draw()
    return fig


def _blocks(fig):  # type: ignore[no-untyped-def]
    """The figure's axes per trace: [CDF, panel, panel, ...] in drawing order."""
    blocks: list = []  # type: ignore[type-arg]
    for ax in fig.get_axes():
        if "JCT CDF" in ax.get_title():
            blocks.append([ax])
        else:
            blocks[-1].append(ax)
    return blocks


def test_one_busy_panel_per_policy_with_shared_axes(figure) -> None:  # type: ignore[no-untyped-def]
    blocks = _blocks(figure)
    assert len(blocks) == 2
    for cdf, *panels in blocks:
        assert [ax.get_title().split(":")[0] for ax in panels] == list(POLICIES)  # one panel each
        for ax in panels[1:]:  # same time and GPU scales in every panel of a trace
            assert ax.get_shared_x_axes().joined(ax, panels[0])
            assert ax.get_shared_y_axes().joined(ax, panels[0])
        assert all(ax.get_ylim() == panels[0].get_ylim() for ax in panels)
        assert panels[0].get_ylim()[1] >= 16  # the cluster size line is inside the panels
        # a policy has one colour: its CDF line, its panel's curve and its title
        cdf_colour = {line.get_label(): line.get_color() for line in cdf.get_lines()}
        for ax, policy in zip(panels, POLICIES):
            assert ax.title.get_color() == cdf_colour[policy]
            assert ax.get_lines()[0].get_color() == cdf_colour[policy]
    # no two axes overlap (the hand-made layout)
    renderer = figure.canvas.get_renderer()
    boxes = [ax.get_window_extent(renderer) for ax in figure.get_axes()]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_legends_outside_the_data_and_text_readable(figure) -> None:  # type: ignore[no-untyped-def]
    from matplotlib.text import Text

    renderer = figure.canvas.get_renderer()
    axes = figure.get_axes()
    legends = [ax.get_legend() for ax in axes if ax.get_legend() is not None]
    assert len(legends) == 4  # per trace: the policies (CDF) and the cluster-size line (panels)
    for leg in legends:
        box = leg.get_window_extent(renderer)
        assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in axes)
    texts = [t for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert min(t.get_fontsize() for t in texts) >= MIN_FONT_PT


@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_write_plot_formats(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"p.{suffix}"
    write_plot(path, [_result("t", p, k) for k, p in enumerate(POLICIES[:2])])
    head = path.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if suffix == "png" else b"<svg" in path.read_bytes()[:2000]


def test_busy_curve_ends_when_the_run_ends() -> None:
    """A round-mode timeline stops at its last change: the panel holds that level until the
    run's last job ends and then drops to 0, and never runs on to another policy's end."""
    short, long_ = _result("t", "pal", 0), _result("t", "packed-sticky", 3)
    timeline = short.busy_timeline[:-1]  # as round mode records it: no final 0
    from dataclasses import replace

    fig = build_figure([replace(short, busy_timeline=timeline), long_])
    _, pal_panel, _ = _blocks(fig)[0]
    x, y = pal_panel.get_lines()[0].get_data()
    end_h = max(o.finish_time for o in short.outcomes) / 3600
    assert x[-1] == pytest.approx(end_h) and y[-1] == 0
    assert y[-2] == timeline[-1][1]  # the last recorded level, held until the end
    assert max(o.finish_time for o in long_.outcomes) / 3600 > end_h


def test_a_trace_or_policy_name_with_mathtext_is_drawn_as_text(tmp_path: Path) -> None:
    """Trace names come from file names: a `$` would be parsed as mathtext, and a stray one raised
    a ValueError out of `pal simulate --plot`."""
    path = tmp_path / "p.png"
    write_plot(path, [_result(r"run$\foo$x", p, k) for k, p in enumerate(("pal", "we$ird"))])
    assert path.read_bytes().startswith(b"\x89PNG")
