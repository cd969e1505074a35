"""GRPO (group relative policy optimisation) with actors, on a small CPU model, written
against Monarch's API: run it unchanged with `python -m baton.monarch examples/monarch/grpo.py`.

The task: a state is a random vector; of ACTIONS actions, the right one is the largest entry
of a fixed hidden linear map of the state (reward 1, else 0). Generators (a mesh of two procs)
sample a group of G actions per state from their copy of the policy and score them; a replay
buffer holds the scored groups; the learner (a proc of its own) takes batches from it and
makes GRPO updates: advantages are rewards normalised within each group, the policy ratio is
clipped. After each update the generators read the new weights straight from the learner's
memory through RDMABuffers. Exits 1 unless the policy went from chance to 85% or more of the
states answered right (greedy)."""

import asyncio
import sys
from dataclasses import dataclass

import torch
from monarch.actor import Actor, concurrent_endpoint, current_rank, endpoint, this_host
from monarch.rdma import RDMABuffer
from torch import nn
from torch.distributions import Categorical

STATE_DIM, ACTIONS, G = 6, 4, 8  # G: the group of actions sampled per state
STATES_PER_ROUND = 32  # per generator
STEPS = 80
TASK = torch.Generator().manual_seed(7)
HIDDEN_MAP = torch.randn(STATE_DIM, ACTIONS, generator=TASK)


def right_actions(states: torch.Tensor) -> torch.Tensor:
    return (states @ HIDDEN_MAP).argmax(-1)


def policy() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(STATE_DIM, 32), nn.Tanh(), nn.Linear(32, ACTIONS))


@dataclass
class Group:
    """One state, the G actions sampled for it, their log-probabilities and rewards."""

    version: int
    state: torch.Tensor
    actions: torch.Tensor
    logps: torch.Tensor
    rewards: torch.Tensor


class ReplayBuffer(Actor):
    """Scored groups, taken by the learner in batches; a take waits until enough are in (its
    endpoints are concurrent: a take that waits lets puts in)."""

    def __init__(self):
        self.groups: list = []
        self.added = asyncio.Event()

    @concurrent_endpoint
    async def put(self, groups: list) -> None:
        self.groups.extend(groups)
        self.added.set()

    @concurrent_endpoint
    async def take(self, k: int) -> list:
        while len(self.groups) < k:
            self.added.clear()
            await asyncio.wait_for(self.added.wait(), timeout=60)
        taken, self.groups = self.groups[:k], self.groups[k:]
        return taken


class Learner(Actor):
    def __init__(self, buffer):
        self.model = policy()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        self.buffer = buffer
        self.version = 0

    @endpoint
    def weights(self) -> dict:
        """Each parameter's RDMABuffer: generators read the weights from here."""
        return {name: RDMABuffer(p.data.view(torch.uint8).flatten())
                for name, p in self.model.named_parameters()}

    @endpoint
    async def step(self, batch: int) -> float:
        groups = await self.buffer.take.call_one(batch)
        states = torch.stack([g.state for g in groups]).repeat_interleave(G, 0)
        actions = torch.cat([g.actions for g in groups])
        old_logps = torch.cat([g.logps for g in groups])
        rewards = torch.stack([g.rewards for g in groups])
        advantages = ((rewards - rewards.mean(1, keepdim=True))
                      / (rewards.std(1, keepdim=True) + 1e-4)).flatten()
        logps = Categorical(logits=self.model(states)).log_prob(actions)
        ratio = (logps - old_logps).exp()
        loss = -torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages).mean()
        self.optimizer.zero_grad()
        loss.backward()
        with torch.no_grad():  # the parameters' memory stays where the RDMABuffers point
            self.optimizer.step()
        self.version += 1
        return loss.item()


class Generator(Actor):
    def __init__(self, weights: dict, buffer):
        self.model = policy()
        self.weights = weights
        self.buffer = buffer
        self.version = 0
        self.rng = torch.Generator().manual_seed(100 + current_rank().rank)

    @endpoint
    async def update(self, version: int) -> None:
        """Reads the learner's weights into this copy, one-sided."""
        params = dict(self.model.named_parameters())
        for name, remote in self.weights.items():
            await remote.read_into(params[name].data.view(torch.uint8).flatten())
        self.version = version

    @endpoint
    async def generate(self) -> float:
        """Samples and scores a group of actions for fresh states; the mean reward."""
        states = torch.randn(STATES_PER_ROUND, STATE_DIM, generator=self.rng)
        with torch.no_grad():
            dist = Categorical(logits=self.model(states.repeat_interleave(G, 0)))
            actions = dist.sample()
            logps = dist.log_prob(actions)
        right = right_actions(states).repeat_interleave(G, 0)
        rewards = (actions == right).float()
        await self.buffer.put.call_one([
            Group(self.version, states[i], actions[i * G:(i + 1) * G], logps[i * G:(i + 1) * G],
                  rewards[i * G:(i + 1) * G])
            for i in range(STATES_PER_ROUND)
        ])
        return rewards.mean().item()

    @endpoint
    def accuracy(self, n: int) -> float:
        """How often the greedy action is the right one, on states it has not seen."""
        states = torch.randn(n, STATE_DIM, generator=torch.Generator().manual_seed(12345))
        with torch.no_grad():
            return (self.model(states).argmax(-1) == right_actions(states)).float().mean().item()


def main() -> int:
    learner_procs = this_host().spawn_procs(per_host={"gpus": 1})
    generator_procs = this_host().spawn_procs(per_host={"gpus": 2})
    buffer = learner_procs.spawn("buffer", ReplayBuffer)
    learner = learner_procs.spawn("learner", Learner, buffer)
    weights = learner.weights.call_one().get()
    generators = generator_procs.spawn("generators", Generator, weights, buffer)
    before = generators.accuracy.call(2000).get().values()
    for step in range(STEPS):
        rewards = generators.generate.call().get().values()
        loss = learner.step.call_one(2 * STATES_PER_ROUND).get()
        generators.update.call(step + 1).get()
        if step % 10 == 0 or step == STEPS - 1:
            print(f"step {step:2d}: mean reward {sum(rewards) / len(rewards):.3f}, "
                  f"loss {loss:+.4f}")
    after = generators.accuracy.call(2000).get().values()
    print(f"greedy accuracy: {before[0]:.3f} before, {after[0]:.3f} after "
          f"(generators agree: {after[0] == after[1]})")
    learner_procs.stop().get()
    generator_procs.stop().get()
    return 0 if after[0] >= 0.85 and after[0] == after[1] and before[0] < 0.6 else 1


if __name__ == "__main__":
    sys.exit(main())
