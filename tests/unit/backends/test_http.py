"""The kit's HTTP door, the same for every backend: which failures are tried again (and for a request
that is not idempotent, only those the server cannot have acted on), the wait (Retry-After honoured),
the counters, and one class of the error tree per status with the backend's hint."""

from __future__ import annotations

from typing import List, Optional, Type

import pytest

from gahp.backends.http import MESSAGE_MAX, Door, Failed, Failure, Service, retryable
from gahp.core.errors import (AuthError, BackendError, Conflict, Expired, GahpError, Invalid, InvalidJob, Missing, NotFound,
                         QuotaExceeded, Refused, ServiceRefusal, TransientError, Unauthorized, Unavailable)
from gahp.core.retry import Backoff

SERVICE = Service("the Test API", 3, Backoff(1.0, 8.0, jitter=0), {401: "check the key", 402: "add billing"})


def _door(sleeps: List[float]) -> Door:
    return Door(SERVICE, sleep=sleeps.append)


@pytest.mark.parametrize("status, sent, idempotent, again", [
    (500, True, True, True), (502, True, True, True), (429, True, True, True), (0, True, True, True),
    (500, True, False, False), (502, True, False, False), (0, True, False, False),
    (429, True, False, True), (503, True, False, True), (0, False, False, True),
    (400, True, True, False), (404, True, True, False), (409, True, True, False), (401, True, True, False),
], ids=["500", "502", "429", "no-answer", "500-unsafe", "502-unsafe", "no-answer-unsafe", "429-unsafe",
        "503-unsafe", "unsent-unsafe", "400", "404", "409", "401"])
def test_which_failures_are_tried_again(status: int, sent: bool, idempotent: bool, again: bool) -> None:
    assert retryable(Failure(status, "m", sent=sent), idempotent) is again


def test_a_request_is_tried_until_it_succeeds_with_the_back_off_and_retry_after() -> None:
    sleeps: List[float] = []
    door = _door(sleeps)
    answers = [Failure(503, "busy"), Failure(429, "slow down", retry_after=5.0), None]

    def attempt() -> str:
        failure = answers.pop(0)
        if failure is not None:
            raise Failed(failure)
        return "done"

    assert door.call("list jobs", attempt) == "done"
    assert sleeps == [1.0, 5.0] and (door.requests, door.errors) == (3, 2)


def test_attempts_are_bounded_and_the_last_failure_is_an_error_of_the_tree() -> None:
    sleeps: List[float] = []
    door = _door(sleeps)

    def attempt() -> None:
        raise Failed(Failure(500, "x" * 5000))

    with pytest.raises(Unavailable) as info:
        door.call("create job", attempt)
    assert sleeps == [1.0, 2.0, 4.0] and door.requests == 4
    assert isinstance(info.value, TransientError) and info.value.status == 500
    assert str(info.value).startswith("create job: the Test API answered HTTP 500: xxx")
    assert len(info.value.body) <= MESSAGE_MAX and len(str(info.value)) < MESSAGE_MAX + 100
    with pytest.raises(Unavailable):
        door.call("create job", attempt, retry=False)
    assert door.requests == 5


def test_a_throttling_service_is_waited_for_within_the_patience_and_then_counts() -> None:
    """429s do not use up the retries while their waits stay within ``throttle_wait_s`` (10 s here, of
    Retry-After 3 s each: 3 + 3 + 3 + the 1 s left); after that they are failed attempts like others."""
    sleeps: List[float] = []
    door = Door(Service("the Test API", 2, Backoff(1.0, 8.0, jitter=0), throttle_wait_s=10.0), sleep=sleeps.append)
    answers: List[Optional[Failure]] = [Failure(429, "slow down", retry_after=3.0)] * 6 + [None]

    def attempt() -> str:
        failure = answers.pop(0)
        if failure is not None:
            raise Failed(failure)
        return "done"

    assert door.call("create pod", attempt, idempotent=False) == "done"
    assert sleeps == [3.0, 3.0, 3.0, 1.0, 3.0, 3.0] and door.requests == 7
    sleeps.clear()
    answers[:] = [Failure(429, "slow down", retry_after=3.0)] * 7
    with pytest.raises(Unavailable):
        door.call("create pod", attempt, idempotent=False)
    assert sleeps == [3.0, 3.0, 3.0, 1.0, 3.0, 3.0] and not answers  # four waited for, then the two retries
    sleeps.clear()
    answers[:] = [Failure(429, "slow down", retry_after=3.0)]
    with pytest.raises(Unavailable):
        door.call("create pod", attempt, retry=False)
    assert sleeps == []


def test_a_service_that_throttles_with_retry_after_0_for_ever_is_given_up_on() -> None:
    """Each wait for a 429 counts at least 0.1 s against the patience: 1 s of it is 10 waits, then the
    retries; the loop ends however the service answers."""
    sleeps: List[float] = []
    door = Door(Service("the Test API", 1, Backoff(0.0, 8.0, jitter=0), throttle_wait_s=1.0), sleep=sleeps.append)

    def attempt() -> None:
        raise Failed(Failure(429, "slow down", retry_after=0.0))

    with pytest.raises(Unavailable):
        door.call("create pod", attempt)
    assert len(sleeps) == 11 and sum(sleeps[:10]) == pytest.approx(1.0) and door.requests == 12


def test_an_error_the_attempt_raises_itself_passes_at_once() -> None:
    door = _door([])

    def attempt() -> None:
        raise BackendError("answer cannot be read")

    with pytest.raises(BackendError, match="cannot be read"):
        door.call("show job", attempt)
    assert door.requests == 1


@pytest.mark.parametrize("failure, cls, base, words", [
    (Failure(0, "connection refused"), Unavailable, TransientError, "the Test API cannot be reached: connection refused"),
    (Failure(400, "bad"), Invalid, InvalidJob, "answered HTTP 400: bad"),
    (Failure(401, "no"), Unauthorized, AuthError, "answered HTTP 401: no; check the key"),
    (Failure(402, "pay"), Refused, BackendError, "answered HTTP 402: pay; add billing"),
    (Failure(403, "forbidden"), Unauthorized, AuthError, "answered HTTP 403: forbidden"),
    (Failure(403, "exceeded quota", admission=True), QuotaExceeded, BackendError, "exceeded quota"),
    (Failure(404, "gone"), Missing, NotFound, "answered HTTP 404: gone"),
    (Failure(409, "exists", reason="AlreadyExists"), Conflict, BackendError, "answered HTTP 409: exists"),
    (Failure(410, "too old"), Expired, TransientError, "answered HTTP 410"),
    (Failure(418, "teapot"), Refused, BackendError, "answered HTTP 418: teapot"),
    (Failure(422, "invalid"), Invalid, InvalidJob, "answered HTTP 422: invalid"),
    (Failure(504, "timeout"), Unavailable, TransientError, "answered HTTP 504: timeout"),
], ids=["0", "400", "401", "402", "403", "403-admission", "404", "409", "410", "418", "422", "504"])
def test_each_status_is_one_class_of_the_tree(failure: Failure, cls: Type[GahpError], base: Type[GahpError],
                                              words: str) -> None:
    door = Door(Service("the Test API", 0, Backoff(1, 1), SERVICE.hints), sleep=lambda s: None)

    def attempt() -> None:
        raise Failed(failure)

    with pytest.raises(cls) as info:
        door.call("do it", attempt)
    error = info.value
    assert isinstance(error, base) and isinstance(error, ServiceRefusal) and words in str(error)
    assert (error.status, error.reason) == (failure.status, failure.reason)
