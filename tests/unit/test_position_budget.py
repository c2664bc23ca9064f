"""The teacher's budget of prompt positions in flight (`scoring/position_budget.py`)."""

from __future__ import annotations

import asyncio

import pytest

from scoring.position_budget import PositionBudget


async def _run(budget: PositionBudget, sizes: list[int], hold_s: float = 0.02):
    """Start one holder per size at once; return (the largest sum in flight, the admission order)."""
    in_flight: list[int] = []
    peak = 0
    order: list[int] = []

    async def one(i: int, n: int) -> None:
        nonlocal peak
        async with budget.hold(n):
            order.append(i)
            in_flight.append(n)
            peak = max(peak, sum(in_flight))
            await asyncio.sleep(hold_s)
            in_flight.remove(n)

    await asyncio.gather(*(one(i, n) for i, n in enumerate(sizes)))
    return peak, order


async def test_the_sum_in_flight_never_exceeds_the_capacity():
    budget = PositionBudget(1000)
    peak, order = await _run(budget, [400, 400, 400, 300, 100, 900])
    assert peak <= 1000
    assert peak == 900  # 400 + 400 + ... : the first two fit, the third waits
    assert sorted(order) == list(range(6))
    assert budget.in_use == 0


async def test_small_requests_all_run_at_once_when_they_fit():
    budget = PositionBudget(65536)
    peak, _ = await _run(budget, [630] * 32)
    assert peak == 630 * 32


async def test_a_request_longer_than_the_capacity_runs_alone():
    budget = PositionBudget(1000)
    seen: list[tuple[str, int]] = []

    async def long() -> None:
        async with budget.hold(5000):
            seen.append(("long", budget.in_use))
            await asyncio.sleep(0.02)

    async def short() -> None:
        async with budget.hold(100):
            seen.append(("short", budget.in_use))
            await asyncio.sleep(0.02)

    await asyncio.gather(short(), long(), short())
    assert ("long", 1000) in seen  # it holds the whole budget: nothing else ran beside it
    assert budget.in_use == 0


async def test_first_come_first_served_a_long_request_is_not_starved():
    budget = PositionBudget(1000)
    order: list[str] = []

    async def one(name: str, n: int, delay: float) -> None:
        await asyncio.sleep(delay)
        async with budget.hold(n):
            order.append(name)
            await asyncio.sleep(0.03)

    # a (600) runs; b (800) must wait; c (100) arrives after b and fits beside a, but queues behind b
    await asyncio.gather(one("a", 600, 0), one("b", 800, 0.005), one("c", 100, 0.01))
    assert order == ["a", "b", "c"]


async def test_a_cancelled_waiter_leaves_the_queue_and_the_next_one_runs():
    budget = PositionBudget(100)
    release = asyncio.Event()
    ran: list[str] = []

    async def holder() -> None:
        async with budget.hold(100):
            await release.wait()

    async def waiter(name: str) -> None:
        async with budget.hold(60):
            ran.append(name)

    h = asyncio.create_task(holder())
    await asyncio.sleep(0)
    doomed = asyncio.create_task(waiter("doomed"))
    survivor = asyncio.create_task(waiter("survivor"))
    await asyncio.sleep(0.01)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    release.set()
    await asyncio.wait_for(asyncio.gather(h, survivor), 1)
    assert ran == ["survivor"]
    assert budget.in_use == 0


async def test_a_cancelled_holder_gives_its_positions_back():
    budget = PositionBudget(100)

    async def holder() -> None:
        async with budget.hold(80):
            await asyncio.sleep(10)

    task = asyncio.create_task(holder())
    await asyncio.sleep(0.01)
    assert budget.in_use == 80
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert budget.in_use == 0
    async with budget.hold(100):
        assert budget.in_use == 100


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match="position budget must be >= 1"):
        PositionBudget(0)

    async def negative() -> None:
        async with PositionBudget(10).hold(-1):
            pass

    with pytest.raises(ValueError, match="positions must be >= 0"):
        asyncio.run(negative())
