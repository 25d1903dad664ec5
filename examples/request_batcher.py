"""Concurrent requests to one model, served in batches: async_inference_job.py's async function submits each
request here and awaits its answer.

    batcher = RequestBatcher(model.predict_batch, max_batch=32, max_wait_s=0.005)
    answer = await batcher.submit(features)  # answer.result, answer.batch (how many requests its call served)

Requests queue; a batch is the oldest waiting requests, up to ``max_batch``, formed as soon as that many wait or
``max_wait_s`` after the first of them arrived (requests that queued while the model was busy do not wait again).
One call of ``serve`` (a blocking function: a list of requests in, a list of results out, one per request in
order) answers the batch, in a thread of its own: the event loop keeps taking requests while the model computes,
and the model runs one batch at a time. An exception of ``serve``, or a result list of the wrong length, is
raised to every request of that batch; the next batch is served as usual.

Standard library only: the tests import it without PyFlink.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
from typing import Any, Callable, Deque, Generic, NamedTuple, Optional, Sequence, TypeVar

__all__ = ["Answer", "RequestBatcher"]

Request = TypeVar("Request")
Result = TypeVar("Result")


@dataclasses.dataclass(frozen=True)
class Answer(Generic[Result]):
    result: Result
    batch: int  # how many requests the model call that answered this one served


class _Waiting(NamedTuple):
    request: Any
    future: "asyncio.Future[Answer[Any]]"
    at: float  # the event loop's time when it arrived


class RequestBatcher(Generic[Request, Result]):
    """Batches the requests of the coroutines of one event loop to ``serve`` (see the module docstring)."""

    def __init__(self, serve: Callable[[list[Request]], Sequence[Result]], max_batch: int, max_wait_s: float) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be 1 or more, got {max_batch}.")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be 0 or more, got {max_wait_s}.")
        self.serve, self.max_batch, self.max_wait_s = serve, max_batch, max_wait_s
        self._waiting: Deque[_Waiting] = collections.deque()
        # created by the first submit(): a PyFlink async function's open() runs before its event loop does
        self._arrived: Optional[asyncio.Event] = None
        self._server: Optional[asyncio.Task[None]] = None
        self._model = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")

    async def submit(self, request: Request) -> Answer[Result]:
        """The answer to ``request``, once the model call of its batch has returned."""
        loop = asyncio.get_running_loop()
        if self._arrived is None:
            self._arrived = asyncio.Event()
        future: asyncio.Future[Answer[Result]] = loop.create_future()
        self._waiting.append(_Waiting(request, future, loop.time()))
        self._arrived.set()
        # the server runs while requests wait and ends when none is left: no task is left pending when the
        # loop stops (PyFlink stops it at close(), after every request was answered)
        if self._server is None or self._server.done():
            self._server = loop.create_task(self._serve_waiting())
        return await future

    def close(self) -> None:
        """Ends the model's thread (after its call in progress, if any)."""
        self._model.shutdown(wait=True)

    async def _serve_waiting(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._arrived is not None
        while self._waiting:
            deadline = self._waiting[0].at + self.max_wait_s
            while len(self._waiting) < self.max_batch and loop.time() < deadline:
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), deadline - loop.time())
                except asyncio.TimeoutError:
                    break
            batch = [self._waiting.popleft() for _ in range(min(self.max_batch, len(self._waiting)))]
            requests = [waiting.request for waiting in batch]
            try:
                results = await loop.run_in_executor(self._model, self.serve, requests)
                if len(results) != len(batch):
                    raise ValueError(f"The model answered {len(results)} results to a batch of {len(batch)} requests.")
            except Exception as error:  # every request of the batch fails with it; the next batch is served
                for waiting in batch:
                    if not waiting.future.done():  # a caller that gave up (cancelled) wants nothing
                        waiting.future.set_exception(error)
                continue
            for waiting, result in zip(batch, results, strict=True):
                if not waiting.future.done():
                    waiting.future.set_result(Answer(result, len(batch)))
