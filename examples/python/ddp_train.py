"""Data-parallel training from Python: N trainer actors in N procs train a small torch MLP on
the scikit-learn digits (Debian's python3-sklearn ships them), each on a shard, their gradients
averaged with baton's allreduce at every step; an evaluator actor scores the held-out fifth
after each epoch. Fails (exit 1) unless the loss falls and the accuracy reaches 0.9.

    PYTHONPATH=python:build/python python3 examples/python/ddp_train.py [--trainers 2] [--epochs 10]
"""

import argparse
import sys
import time

import baton


def digits():
    """(train x, train y, test x, test y): every fifth sample held out."""
    import torch
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    held = torch.arange(len(y)) % 5 == 0
    return x[~held], y[~held], x[held], y[held]


def model():
    import torch

    torch.manual_seed(0)  # every replica starts from the same weights
    return torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    )


class Trainer(baton.Actor):
    def __init__(self):
        import torch

        torch.set_num_threads(1)
        self.x, self.y, _, _ = digits()
        self.model = model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.2)

    @baton.endpoint
    async def join(self, group):
        self.comm = baton.collective.Communicator(self)
        await self.comm.join(group)
        return self.comm.rank

    @baton.endpoint
    async def epoch(self, e, batch):
        import torch
        import torch.nn.functional as F

        rank, size = self.comm.rank, self.comm.size
        shard = torch.arange(rank, len(self.y), size)
        torch.manual_seed(1000 * e + rank)
        shard = shard[torch.randperm(len(shard))]
        steps = (len(self.y) // size) // batch  # the same on every rank: each allreduce matches
        total = 0.0
        for s in range(steps):
            rows = shard[s * batch : (s + 1) * batch]
            self.opt.zero_grad()
            loss = F.cross_entropy(self.model(self.x[rows]), self.y[rows])
            loss.backward()
            flat = torch.cat([p.grad.view(-1) for p in self.model.parameters()])
            await self.comm.allreduce(flat, op="avg")
            at = 0
            for p in self.model.parameters():
                n = p.numel()
                p.grad.view(-1).copy_(flat[at : at + n])
                at += n
            self.opt.step()
            total += loss.item()
        return total / steps, steps * batch

    @baton.endpoint
    def weights(self):
        import torch

        return torch.cat([p.detach().view(-1) for p in self.model.parameters()])


class Evaluator(baton.Actor):
    def __init__(self):
        import torch

        torch.set_num_threads(1)
        _, _, self.x, self.y = digits()
        self.model = model()

    @baton.endpoint
    def accuracy(self, weights):
        import torch

        at = 0
        with torch.no_grad():
            for p in self.model.parameters():
                p.copy_(weights[at : at + p.numel()].view_as(p))
                at += p.numel()
            right = (self.model(self.x).argmax(1) == self.y).sum().item()
        return right / len(self.y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--min-accuracy", type=float, default=0.9)
    args = ap.parse_args()

    procs = baton.this_host().spawn_procs({"trainers": args.trainers})
    eval_proc = baton.this_host().spawn_procs({"evaluators": 1})
    trainers = procs.spawn("trainers", Trainer)
    evaluator = eval_proc.spawn("evaluator", Evaluator)
    trainers.join.call(baton.collective.make_group(trainers)).get()
    print(f"ddp_train.py: {args.trainers} trainers, {args.epochs} epochs, batch {args.batch}")
    first = loss = accuracy = 0.0
    for e in range(1, args.epochs + 1):
        t0 = time.monotonic()
        results = trainers.epoch.call(e, args.batch).get().values()
        seconds = time.monotonic() - t0
        loss = sum(r[0] for r in results) / len(results)
        first = first or loss
        weights = trainers.slice(trainers=0).weights.call_one().get()
        accuracy = evaluator.accuracy.call_one(weights).get()
        rate = sum(r[1] for r in results) / seconds / len(results)
        print(f"epoch {e}/{args.epochs}  loss {loss:.4f}  accuracy {accuracy:.3f}  "
              f"{rate:.0f} samples/s per trainer")
    replicas = trainers.weights.call().get().values()
    same = all(bool((w == replicas[0]).all()) for w in replicas)
    procs.stop().get()
    eval_proc.stop().get()
    print(f"ddp_train.py: final held-out accuracy {accuracy:.3f} "
          f"(loss {loss:.4f}, from {first:.4f})")
    if not same:
        print("ddp_train.py: the replicas' weights differ", file=sys.stderr)
        return 1
    if not (loss < first) or accuracy < args.min_accuracy:
        print("ddp_train.py: the model did not learn", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
