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


class Caller(baton.Actor):
    """Given meshes and buffers by the controller, uses them from inside an actor."""

    @baton.endpoint
    async def total(self, counters):
        values = await counters.value.call()
        return sum(values.values())

    @baton.endpoint
    def blocking(self, counters):
        return counters.value.call().get()

    @baton.endpoint
    async def fetch(self, buffer, n, offset=0):
        out = bytearray(n)
        await buffer.read_into(out, offset)
        return bytes(out)

    @baton.endpoint
    async def put(self, buffer, data, offset=0):
        await buffer.write_from(bytearray(data), offset)
