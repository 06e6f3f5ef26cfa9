"""One task per key at a time, shared by whoever waits for its result.

Each waiter gets a Deferred of its own, fired with the result when the task
ends: a shared Deferred would hand its result to its first waiter only, and
this works alike on the asyncio reactor and on Twisted's own. The robots.txt
fetcher and the tdmrep.json files each keep one, keyed by origin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Hashable

__all__ = ["InFlight"]

K = TypeVar("K", bound="Hashable")
V = TypeVar("V")


class _Task(Generic[V]):
    __slots__ = ("deferred", "waiters")

    def __init__(self) -> None:
        self.waiters: list[Deferred[V]] = []
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
        """Run ``work()`` for ``key``, which has no task running. ``work`` must
        not raise: what it returns is every waiter's result."""
        task: _Task[V] = _Task()
        self._tasks[key] = task  # before starting: the task may end at once
        task.deferred = deferred_from_coro(self._run(key, task, work))

    def join(self, key: K) -> Deferred[V]:
        """The result of ``key``'s running task, once it ends."""
        waiter: Deferred[V] = Deferred()
        self._tasks[key].waiters.append(waiter)
        return waiter

    async def _run(
        self, key: K, task: _Task[V], work: Callable[[], Coroutine[Any, Any, V]]
    ) -> None:
        try:
            result = await work()
        finally:
            del self._tasks[key]
        for waiter in task.waiters:
            if not waiter.called:  # a waiter cancelled with its own task is already called
                waiter.callback(result)
