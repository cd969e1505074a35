"""Asynchronous reinforcement learning from Python, with the weights moved through baton's tensor
store. Generator actors play CartPole (written here with numpy) with a small torch policy; a
trainer improves it from their episodes (REINFORCE). The trainer runs as two ranks (replicas
fed the same batches), and after each update each rank puts its rows of every parameter into
the store, a Shard(0) of it, as DTensor would place them. Generators and the evaluator read each
parameter whole, the version they were told, assembled by the store from the two ranks' rows.
Generators never wait for the trainer: a batch played with weights more than --max-staleness
updates old is dropped. Prints the return curve; fails (exit 1) unless the evaluator's mean
return reaches --target within --updates.

    PYTHONPATH=python:build/python python3 examples/python/async_rl.py [--generators 2]
"""

import argparse
import math
import sys
import time

import baton
from baton.store import Shard, Store, box_of

KEY = "policy"


class CartPole:
    """The classic control task: push the cart left or right to keep the pole up; +1 for every
    step it stays up, at most 500."""

    def __init__(self, seed):
        import numpy as np

        self.random = np.random.default_rng(seed)
        self.s = None
        self.steps = 0

    def reset(self):
        self.s = list(self.random.uniform(-0.05, 0.05, 4))
        self.steps = 0
        return self.s

    def step(self, action):
        gravity, cart, pole, half, force, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
        x, v, theta, omega = self.s
        f = force if action == 1 else -force
        cos, sin = math.cos(theta), math.sin(theta)
        total = cart + pole
        temp = (f + pole * half * omega * omega * sin) / total
        angular = (gravity * sin - cos * temp) / (half * (4.0 / 3.0 - pole * cos * cos / total))
        linear = temp - pole * half * angular * cos / total
        self.s = [x + tau * v, v + tau * linear, theta + tau * omega, omega + tau * angular]
        self.steps += 1
        return abs(self.s[0]) > 2.4 or abs(self.s[2]) > 12 * math.pi / 180 or self.steps >= 500


def policy():
    import torch

    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))


def load(store, model, version):
    """Reads every parameter whole, weights `version`, straight into the model."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            store.get(f"{KEY}/{name}", into=p.data, version=version).get()


class Generator(baton.Actor):
    def __init__(self):
        import torch

        torch.set_num_threads(1)
        self.policy = policy()
        self.env = CartPole(1000 + baton.current_rank().rank)
        self.have = None

    @baton.endpoint
    def play(self, store, version, episodes):
        import torch

        sync_ms = 0.0
        if version != self.have:
            t0 = time.monotonic()
            load(store, self.policy, version)
            sync_ms = (time.monotonic() - t0) * 1e3
            self.have = version
        states, actions, returns, lengths = [], [], [], []
        with torch.no_grad():
            for _ in range(episodes):
                s, over, first = self.env.reset(), False, len(actions)
                while not over:
                    logits = self.policy(torch.tensor([s], dtype=torch.float32))
                    a = int(torch.multinomial(torch.softmax(logits, 1), 1).item())
                    states.append(s)
                    actions.append(a)
                    over = self.env.step(a)
                    s = self.env.s
                length = len(actions) - first
                lengths.append(length)
                g, rs = 0.0, [0.0] * length
                for i in reversed(range(length)):  # rewards of 1, discounted by 0.99
                    g = rs[i] = 1.0 + 0.99 * g
                returns.extend(rs)
        return {"states": states, "actions": actions, "returns": returns, "version": version,
                "mean_return": sum(lengths) / len(lengths), "sync_ms": sync_ms}


class Trainer(baton.Actor):
    """One rank of the trainer: the whole policy, the same steps as the other rank; it publishes
    its Shard(0) rows of every parameter."""

    def __init__(self, store, keep):
        import torch

        torch.set_num_threads(1)
        self.store, self.keep = store, keep
        self.policy = policy()
        self.opt = torch.optim.Adam(self.policy.parameters(), lr=0.01)

    @baton.endpoint
    def publish(self):
        rank = baton.current_rank().rank
        version = 0
        for name, p in self.policy.named_parameters():
            shape = list(p.shape)
            (offsets, sizes) = box_of(shape, [Shard(0)], [2], [rank])
            rows = p.detach()[offsets[0]:offsets[0] + sizes[0]]
            put = self.store.put(f"{KEY}/{name}", rows, shard=(offsets, sizes),
                                 global_shape=shape, keep=self.keep).get()
            version = put.version
        return version

    @baton.endpoint
    def update(self, batch):
        import torch

        states = torch.tensor(batch["states"], dtype=torch.float32)
        actions = torch.tensor(batch["actions"]).view(-1, 1)
        returns = torch.tensor(batch["returns"], dtype=torch.float32)
        returns = (returns - returns.mean()) / (returns.std() + 1e-6)
        logp = torch.log_softmax(self.policy(states), 1).gather(1, actions).view(-1)
        loss = -(logp * returns).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return self.publish()


class Evaluator(baton.Actor):
    def __init__(self):
        import torch

        torch.set_num_threads(1)
        self.policy = policy()
        self.env = CartPole(7)

    @baton.endpoint
    def score(self, store, version, episodes):
        import torch

        load(store, self.policy, version)
        total = 0
        with torch.no_grad():
            for _ in range(episodes):
                s, over = self.env.reset(), False
                while not over:
                    a = int(self.policy(torch.tensor([s], dtype=torch.float32)).argmax(1).item())
                    over = self.env.step(a)
                    s = self.env.s
                    total += 1
        return total / episodes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--generators", type=int, default=2)
    ap.add_argument("--updates", type=int, default=300)
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--target", type=float, default=150.0)
    ap.add_argument("--max-staleness", type=int, default=2)
    args = ap.parse_args()

    gen_procs = baton.this_host().spawn_procs({"generators": args.generators})
    generators = gen_procs.spawn("generators", Generator)
    trainer_procs = baton.this_host().spawn_procs({"trainer": 2})
    store = Store.create(trainer_procs)
    keep = args.max_staleness + 2  # a generator may read that old a version, while one plays
    trainer = trainer_procs.spawn("trainer", Trainer, store, keep)
    eval_proc = baton.this_host().spawn_procs({"evaluator": 1})
    evaluator = eval_proc.spawn("evaluator", Evaluator)
    print(f"async_rl.py: {args.generators} generators, {args.episodes} episodes each per batch, "
          f"up to {args.updates} updates")

    latest = max(trainer.publish.call().get().values())
    playing = [(g, generators.slice(generators=g).play.call_one(store, latest, args.episodes))
               for g in range(args.generators)]
    start, samples, best, dropped, update = time.monotonic(), 0, 0.0, 0, 0
    sync_ms, syncs = 0.0, 0
    while update < args.updates:
        g, future = playing.pop(0)
        batch = future.get()
        member = generators.slice(generators=g)
        playing.append((g, member.play.call_one(store, latest, args.episodes)))
        if batch["sync_ms"] > 0:
            sync_ms, syncs = sync_ms + batch["sync_ms"], syncs + 1
        if latest - batch["version"] > args.max_staleness:
            dropped += 1
            continue
        samples += len(batch["actions"])
        latest = max(trainer.update.call(batch).get().values())
        update += 1
        if update % 10 == 0:
            score = evaluator.score.call_one(store, latest, 5).get()
            best = max(best, score)
            rate = samples / (time.monotonic() - start)
            print(f"update {update:4d}  mean return {batch['mean_return']:6.1f}  eval "
                  f"{score:6.1f}  {rate:6.0f} samples/s  weight sync "
                  f"{sync_ms / max(syncs, 1):.2f} ms  dropped {dropped}", flush=True)
            if score >= args.target:
                break
    for _, f in playing:
        f.get()
    for p in (gen_procs, trainer_procs, eval_proc):
        p.stop().get()
    print(f"async_rl.py: best evaluated mean return {best:.1f} after {update} updates "
          f"(target {args.target:.0f})")
    if best < args.target:
        print("async_rl.py: the policy did not reach the target return", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
