"""examples/request_batcher.py: concurrent requests served in batches by one model call each (no Flink needed)."""

import asyncio
import importlib.util
import sys
import threading
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "request_batcher", Path(__file__).resolve().parent.parent / "examples" / "request_batcher.py"
)
request_batcher = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = request_batcher  # dataclasses look their module up there
_spec.loader.exec_module(request_batcher)
RequestBatcher = request_batcher.RequestBatcher


class Model:
    """serve(): each request squared, one call per batch; the batches it was called with are recorded."""

    def __init__(self, fail_on=None):
        self.batches = []
        self.fail_on = fail_on

    def serve(self, requests):
        self.batches.append(list(requests))
        if self.fail_on is not None and self.fail_on in requests:
            raise ValueError(f"cannot score {self.fail_on}")
        return [r * r for r in requests]


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_each_request_gets_its_own_answer_and_no_call_serves_more_than_max_batch():
    model = Model()

    async def main():
        batcher = RequestBatcher(model.serve, max_batch=4, max_wait_s=0.01)
        try:
            return await asyncio.gather(*(batcher.submit(r) for r in range(10)))
        finally:
            batcher.close()

    answers = run(main())
    assert [a.result for a in answers] == [r * r for r in range(10)]
    # all ten waited when the first call began: the oldest four, the next four, the last two
    assert model.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [a.batch for a in answers] == [4] * 8 + [2] * 2


def test_a_lone_request_is_answered_once_the_wait_for_a_batch_ends():
    model = Model()

    async def main():
        batcher = RequestBatcher(model.serve, max_batch=32, max_wait_s=0.005)
        try:
            return await batcher.submit(7)
        finally:
            batcher.close()

    answer = run(main())
    assert (answer.result, answer.batch) == (49, 1)


def test_requests_that_arrive_while_the_model_computes_are_served_together_by_its_next_call():
    entered, release = threading.Event(), threading.Event()
    model = Model()

    def serve(requests):
        if not entered.is_set():  # the first call holds the model until the test has queued more requests
            entered.set()
            assert release.wait(30)
        return model.serve(requests)

    async def main():
        batcher = RequestBatcher(serve, max_batch=8, max_wait_s=0)
        try:
            first = asyncio.ensure_future(batcher.submit(0))
            await asyncio.get_running_loop().run_in_executor(None, entered.wait, 30)
            # the model's call runs in its own thread: the event loop still takes requests
            later = [asyncio.ensure_future(batcher.submit(r)) for r in range(1, 6)]
            await asyncio.sleep(0)  # each submit has queued its request
            release.set()
            return await asyncio.gather(first, *later)
        finally:
            batcher.close()

    answers = run(main())
    assert model.batches == [[0], [1, 2, 3, 4, 5]]
    assert [(a.result, a.batch) for a in answers] == [(0, 1)] + [(r * r, 5) for r in range(1, 6)]


def test_an_error_of_the_model_reaches_every_request_of_its_batch_and_the_next_batch_is_served():
    model = Model(fail_on=-1)

    async def main():
        batcher = RequestBatcher(model.serve, max_batch=8, max_wait_s=0.01)
        try:
            failed = await asyncio.gather(*(batcher.submit(r) for r in (1, -1, 2)), return_exceptions=True)
            after = await batcher.submit(3)
            return failed, after
        finally:
            batcher.close()

    failed, after = run(main())
    assert model.batches[0] == [1, -1, 2]
    assert [type(e) for e in failed] == [ValueError] * 3
    assert all(str(e) == "cannot score -1" for e in failed)
    assert (after.result, after.batch) == (9, 1)


def test_a_model_that_answers_a_batch_with_too_few_results_fails_every_request_of_it_saying_so():
    async def main():
        batcher = RequestBatcher(lambda requests: requests[:-1], max_batch=8, max_wait_s=0.01)
        try:
            return await asyncio.gather(*(batcher.submit(r) for r in range(3)), return_exceptions=True)
        finally:
            batcher.close()

    failed = run(main())
    assert [str(e) for e in failed] == ["The model answered 2 results to a batch of 3 requests."] * 3


def test_once_every_request_is_answered_no_task_of_the_batcher_is_left_pending():
    # PyFlink stops the event loop at close(): a task still pending then would be destroyed with a warning
    async def main():
        before = asyncio.all_tasks()
        batcher = RequestBatcher(Model().serve, max_batch=2, max_wait_s=0.01)
        try:
            await asyncio.gather(*(batcher.submit(r) for r in range(5)))
            return asyncio.all_tasks() - before
        finally:
            batcher.close()

    assert run(main()) == set()


@pytest.mark.parametrize(
    "max_batch, max_wait_s, message",
    [(0, 0.01, "max_batch must be 1 or more, got 0."), (4, -1, "max_wait_s must be 0 or more, got -1.")],
)
def test_a_batch_limit_out_of_range_is_refused_naming_it(max_batch, max_wait_s, message):
    with pytest.raises(ValueError) as raised:
        RequestBatcher(Model().serve, max_batch, max_wait_s)
    assert str(raised.value) == message
