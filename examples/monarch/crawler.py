"""A distributed crawler written against Monarch's API (Monarch's crawler example, our own
code): one queue actor hands out URLs, eight crawler actors fetch pages over HTTP, parse their
links and queue the new ones, and each stops once the queue stays empty for a while. The site
is real HTML served over a real socket by this program, so it runs offline:

    python -m baton.monarch examples/monarch/crawler.py

The queue replies to get() through an explicit response port, later, once it has an item; a
crawler's plain endpoint blocks on that reply with a timeout. Exits 1 unless every page within
the depth was crawled exactly once."""

import http.server
import sys
import tempfile
import threading
import urllib.request
from collections import deque
from html.parser import HTMLParser
from pathlib import Path
from typing import Optional

from monarch.actor import Actor, Port, ProcMesh, context, endpoint, this_host

PAGES = 40
DEPTH = 4
CRAWLERS = 8
IDLE = 3.0  # seconds a crawler waits on an empty queue before it is done


class QueueActor(Actor):
    """Items to crawl, each once; a get() on an empty queue is answered by the next insert."""

    def __init__(self):
        self.items: deque = deque()
        self.seen: set = set()
        self.waiters: deque = deque()

    @endpoint
    def insert(self, url: str, depth: int) -> None:
        if url in self.seen:
            return
        self.seen.add(url)
        if self.waiters:
            self.waiters.popleft().send((url, depth))
        else:
            self.items.append((url, depth))

    @endpoint(explicit_response_port=True)
    def get(self, port: "Port[Optional[tuple]]") -> None:
        if self.items:
            port.send(self.items.popleft())
        else:
            self.waiters.append(port)


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links += [v for k, v in attrs if k == "href" and v]


class CrawlActor(Actor):
    def __init__(self, queues, base: str):
        self.queue = queues.slice(procs=slice(0, 1))  # the one queue all crawlers share
        self.base = base
        self.crawled: list[str] = []

    def fetch(self, url: str, depth: int) -> None:
        with urllib.request.urlopen(url, timeout=10) as response:
            page = response.read().decode()
        parser = Links()
        parser.feed(page)
        for link in parser.links:
            if depth > 0:
                self.queue.insert.broadcast(self.base + link, depth - 1)

    @endpoint
    def crawl(self) -> list[str]:
        rank = context().actor_instance.rank
        while True:
            try:
                url, depth = self.queue.get.call_one().get(timeout=IDLE)
            except TimeoutError:
                break  # the queue stayed empty: this crawler is done
            self.fetch(url, depth)
            self.crawled.append(url)
        print(f"crawler {rank.rank}: {len(self.crawled)} pages")
        return self.crawled


def make_site(root: Path) -> None:
    """Page i links to pages 2i+1 and 2i+2 (a binary tree) and back to the start."""
    for i in range(PAGES):
        kids = [k for k in (2 * i + 1, 2 * i + 2) if k < PAGES]
        links = "".join(f'<a href="/p{k}.html">page {k}</a> ' for k in kids)
        (root / f"p{i}.html").write_text(f'<html><body>{links}<a href="/p0.html">home</a>'
                                         f"</body></html>")


def reachable(depth: int) -> set[str]:
    """The pages within `depth` links of the start, as a breadth-first walk finds them."""
    seen, frontier = {0}, [0]
    for _ in range(depth):
        frontier = [k for i in frontier for k in (2 * i + 1, 2 * i + 2, 0) if k < PAGES
                    and k not in seen]
        seen.update(frontier)
    return {f"/p{i}.html" for i in seen}


def main() -> int:
    with tempfile.TemporaryDirectory() as root:
        make_site(Path(root))

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=root, **kwargs)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            procs: ProcMesh = this_host().spawn_procs(per_host={"procs": CRAWLERS})
            queues = procs.spawn("queues", QueueActor)
            queues.slice(procs=slice(0, 1)).insert.broadcast(base + "/p0.html", DEPTH)
            crawlers = procs.spawn("crawlers", CrawlActor, queues, base)
            crawled = [u for urls in crawlers.crawl.call().get(timeout=120).values() for u in urls]
            procs.stop().get()
        finally:
            server.shutdown()
    pages = [u[len(base):] for u in crawled]
    want = reachable(DEPTH)
    ok = sorted(pages) == sorted(want)
    print(f"crawled {len(pages)} pages ({len(set(pages))} distinct) of the {len(want)} within "
          f"depth {DEPTH}: {'each once' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
