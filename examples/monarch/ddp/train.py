"""A plain torch.distributed DDP script, as torchrun would run it: it reads RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT from its environment, trains a small classifier of handwritten
digits (scikit-learn's 8x8 digits) on its shard of the data, and writes its test accuracy and
a checksum of its weights to OUT_DIR/rank-N.txt. Run by spmd_ddp.py through SPMDActor."""

import os
import sys

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main(out_dir: str, epochs: int) -> None:
    dist.init_process_group("gloo")  # CPU; on GPUs, "nccl" and a device per LOCAL_RANK
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y)
    test_x, test_y = x[1500:], y[1500:]
    train_x, train_y = x[:1500][rank::world], y[:1500][rank::world]  # this rank's shard

    model = DDP(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        for i in range(0, len(train_x), 50):
            optimizer.zero_grad()
            loss = loss_fn(model(train_x[i:i + 50]), train_y[i:i + 50])
            loss.backward()  # gradients averaged over the ranks here
            optimizer.step()
        print(f"[rank {rank}] epoch {epoch} loss {loss.item():.3f}", flush=True)
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
        checksum = sum(p.sum().item() for p in model.parameters())
    with open(os.path.join(out_dir, f"rank-{rank}.txt"), "w") as f:
        f.write(f"{accuracy:.4f} {checksum:.6f}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10)
