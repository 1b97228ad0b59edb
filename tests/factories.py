"""Fixtures that make things on demand and undo them after the test: one shape for backends and
simulators alike."""

from __future__ import annotations

from typing import Callable, Iterator, List, TypeVar

T = TypeVar("T")


def made_then_ended(build: Callable[..., T], end: Callable[[T], None]) -> Iterator[Callable[..., T]]:
    """A factory (for a fixture to yield from) that calls ``build`` and, after the test, ``end`` on each
    thing it made, newest last."""
    made: List[T] = []

    def make(*args: object, **kwargs: object) -> T:
        thing = build(*args, **kwargs)
        made.append(thing)
        return thing

    yield make
    for thing in made:
        end(thing)
