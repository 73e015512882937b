"""Queue orders: FIFO, LAS and SRTF on hand-made queues whose right order is obvious."""

from __future__ import annotations

import pytest

from pal_slurm.errors import PalError
from pal_slurm.placement.model import JobRequest, PlacementError
from pal_slurm.placement.orders import ORDERS, fifo, get_order, las, srtf


def job(jid: str, submit: float, attained: float = 0.0, remaining: float = 0.0) -> JobRequest:
    return JobRequest(id=jid, gpus=1, job_class="A", submit_time=submit, attained_s=attained, remaining_s=remaining)


def ids(jobs: list[JobRequest]) -> list[str]:
    return [j.id for j in jobs]


def test_fifo_by_submit_time_ties_in_input_order() -> None:
    queue = [job("c", 30), job("a", 10), job("b2", 20), job("b1", 20)]
    assert ids(fifo(queue)) == ["a", "b2", "b1", "c"]


def test_las_least_attained_first_ties_fifo() -> None:
    queue = [job("old-busy", 0, attained=500), job("late", 9, attained=0), job("early", 1, attained=0),
             job("mid", 5, attained=100)]
    assert ids(las(queue)) == ["early", "late", "mid", "old-busy"]


def test_srtf_shortest_remaining_first_ties_fifo() -> None:
    queue = [job("long", 0, remaining=900), job("short-late", 8, remaining=10), job("short-early", 2, remaining=10),
             job("mid", 1, remaining=50)]
    assert ids(srtf(queue)) == ["short-early", "short-late", "mid", "long"]


def test_las_and_srtf_fall_back_to_input_order_on_full_ties() -> None:
    queue = [job("x", 5, 1, 1), job("y", 5, 1, 1), job("z", 5, 1, 1)]
    assert ids(las(queue)) == ids(srtf(queue)) == ["x", "y", "z"]


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_orders_return_a_sorted_copy_with_the_same_jobs(name: str) -> None:
    queue = [job(str(i), submit=(7 * i) % 5, attained=(3 * i) % 4, remaining=(5 * i) % 6) for i in range(12)]
    before = list(queue)
    out = get_order(name)(queue)
    assert queue == before
    assert sorted(ids(out)) == sorted(ids(queue))
    assert get_order(name)(tuple(queue)) == out  # any sequence


def test_registry_names() -> None:
    assert list(ORDERS) == ["fifo", "las", "srtf", "slurm"]
    assert get_order("fifo") is fifo


def test_unknown_order_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown queue order 'sjf'; valid: fifo, las, srtf") as err:
        get_order("sjf")
    assert isinstance(err.value, PlacementError) and isinstance(err.value, PalError)


def test_queue_window_prefix_blocker_and_lookahead() -> None:
    from pal_slurm.placement.model import JobRequest
    from pal_slurm.placement.orders import queue_window

    q = [JobRequest(id=str(i), gpus=g, job_class="A", submit_time=i) for i, g in enumerate([2, 2, 4, 1, 1, 1])]
    assert [j.id for j in queue_window(q, 5, 0)] == ["0", "1", "2"]  # 2+2 fit, 4 blocks
    assert [j.id for j in queue_window(q, 5, 2)] == ["0", "1", "2", "3", "4"]
    assert [j.id for j in queue_window(q, 100, 0)] == [j.id for j in q]


def test_slurm_order_is_tier_then_priority_then_submit_time() -> None:
    from pal_slurm.placement.orders import slurm

    jobs = [JobRequest(id="low", gpus=1, job_class="A", submit_time=1.0, priority=10.0),
            JobRequest(id="high-tier", gpus=1, job_class="A", submit_time=5.0, tier=10, priority=1.0),
            JobRequest(id="high", gpus=1, job_class="A", submit_time=3.0, priority=50.0),
            JobRequest(id="high-late", gpus=1, job_class="A", submit_time=4.0, priority=50.0)]
    assert [j.id for j in slurm(jobs)] == ["high-tier", "high", "high-late", "low"]
    # every rank equal (the simulators): FIFO
    same = [JobRequest(id=str(i), gpus=1, job_class="A", submit_time=t) for i, t in enumerate([3.0, 1.0, 2.0])]
    assert [j.id for j in slurm(same)] == ["1", "2", "0"]
