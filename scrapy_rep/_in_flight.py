"""One task per key at a time (a robots.txt or tdmrep.json fetch per origin), shared by its waiters.

Each waiter gets a Deferred of its own, fired with the result when the task
ends: a shared Deferred would hand its result to its first waiter only. A
task may end before ``join`` returns (Scrapy's HTTP cache answers at once on
Twisted's reactor), so a waiter is registered before its task starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred

from scrapy_rep import _timers

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

K = TypeVar("K")
V = TypeVar("V")


class _Task(Generic[V]):
    __slots__ = ("deferred", "waiters")

    def __init__(self) -> None:
        self.waiters: list[Deferred[V | None]] = []
        # Held so that the running task is referenced: the event loop keeps
        # only weak references to tasks, which may vanish mid-way otherwise.
        self.deferred: Deferred[None] | None = None


class InFlight(Generic[K, V]):
    """The tasks running, by key (see the module docstring)."""

    def __init__(self) -> None:
        self._tasks: dict[K, _Task[V]] = {}

    def __contains__(self, key: K) -> bool:
        return key in self._tasks

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, key: K, work: Callable[[], Coroutine[Any, Any, V]]) -> None:
        """Run ``work()`` for ``key`` unless a task for it runs already.
        ``work`` must not raise: what it returns is every waiter's result."""
        if key not in self._tasks:
            self._run_new(key, _Task(), work)

    def join(
        self,
        key: K,
        work: Callable[[], Coroutine[Any, Any, V]],
        *,
        timeout: float | None = None,
    ) -> Deferred[V | None]:
        """The result of ``key``'s task once it ends, starting one with ``work``
        if none runs; None if ``timeout`` seconds pass first (the task goes on
        for its other waiters)."""
        waiter: Deferred[V | None] = Deferred()
        task = self._tasks.get(key)
        if task is None:
            task = _Task()
            task.waiters.append(waiter)  # before starting: the task may end at once
            self._run_new(key, task, work)
        else:
            task.waiters.append(waiter)
        if timeout is not None and not waiter.called:
            timer = _timers.call_later(max(timeout, 0.0), _give_up, task, waiter)
            waiter.addBoth(_cancelling, timer)
        return waiter

    def _run_new(self, key: K, task: _Task[V], work: Callable[[], Coroutine[Any, Any, V]]) -> None:
        self._tasks[key] = task
        task.deferred = deferred_from_coro(self._run(key, task, work))

    async def _run(
        self, key: K, task: _Task[V], work: Callable[[], Coroutine[Any, Any, V]]
    ) -> None:
        try:
            result = await work()
        finally:
            del self._tasks[key]
        for waiter in task.waiters:
            if not waiter.called:  # timed out, or cancelled with its own request
                waiter.callback(result)


def _give_up(task: _Task[Any], waiter: Deferred[Any]) -> None:
    if not waiter.called:
        task.waiters.remove(waiter)
        waiter.callback(None)


def _cancelling(result: Any, timer: _timers.Timer) -> Any:
    timer.cancel()  # a no-op once it fired
    return result
