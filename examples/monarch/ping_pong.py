"""Two meshes of players that call each other, written against Monarch's API: run it unchanged
with `python -m baton.monarch examples/monarch/ping_pong.py`. Each player learns its partner
(the player at the same point of the other mesh), then a ping from one side is a plain endpoint
that blocks on its partner's pong, as Monarch allows. Exits 1 unless every pong arrived where
it should."""

import sys

from monarch.actor import Actor, current_rank, current_size, endpoint, this_host

PLAYERS = 4


class Player(Actor):
    def __init__(self, side: str):
        self.side = side
        self.rank = current_rank().rank  # Monarch's programs name their own attributes freely
        self.size = current_size()["gpus"]
        self.heard: list[str] = []

    @endpoint
    def meet(self, other) -> str:
        # The partner: the one actor at this player's point of the other mesh.
        self.partner = other.slice(**current_rank())
        return f"{self.side}[{self.rank}/{self.size}]"

    @endpoint
    def ping(self, text: str) -> str:
        return self.partner.pong.call_one(f"{self.side}[{self.rank}] says {text}").get(timeout=30)

    @endpoint
    def pong(self, text: str) -> str:
        self.heard.append(text)
        return f"{self.side}[{self.rank}] heard: {text}"

    @endpoint
    def heard_so_far(self) -> list[str]:
        return self.heard


def main() -> int:
    left = this_host().spawn_procs(per_host={"gpus": PLAYERS}).spawn("left", Player, "left")
    right = this_host().spawn_procs(per_host={"gpus": PLAYERS}).spawn("right", Player, "right")
    print("players:", left.meet.call(right).get().values(), right.meet.call(left).get().values())
    replies = left.ping.call("ping").get(timeout=60)
    for point, reply in replies.items():
        print(point, reply)
    right.ping.call("pong").get(timeout=60)
    ok = True
    for r in range(PLAYERS):
        want_right = [f"left[{r}] says ping"]
        want_left = [f"right[{r}] says pong"]
        got_right = right.slice(gpus=r).heard_so_far.call_one().get()
        got_left = left.slice(gpus=r).heard_so_far.call_one().get()
        ok = ok and got_right == want_right and got_left == want_left
    print("ping pong:", "every message reached its partner" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
