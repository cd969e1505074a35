"""Actors the tests spawn (importable by the workers, as a user's module would be)."""

import asyncio
import os

import baton


class Counter(baton.Actor):
    def __init__(self, start, step=1):
        self.n = start
        self.step = step
        self.seen = []

    @baton.endpoint
    def incr(self):
        self.n += self.step
        return self.n

    @baton.endpoint
    def value(self):
        return self.n

    @baton.endpoint
    def note(self, i):
        self.seen.append(i)

    @baton.endpoint
    def noted(self):
        return self.seen

    @baton.endpoint
    def pid(self):
        return os.getpid()

    @baton.endpoint
    def fail(self, text):
        raise ValueError(text)

    @baton.endpoint
    async def later(self, x):
        await asyncio.sleep(0.01)
        return x * 2

    @baton.endpoint
    async def fail_later(self):
        await asyncio.sleep(0)
        raise KeyError("missing")

    @baton.endpoint
    def echo(self, value):
        return value

    @baton.endpoint
    def say(self, text):
        print(text, flush=True)

    def not_an_endpoint(self):
        return 1
