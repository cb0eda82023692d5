"""ImageNet-style training (after pytorch/examples' imagenet/main.py), with NVIDIA apex amp.

Synthetic images stand in for the dataset so that the script runs anywhere in seconds:

    python main.py --steps 6                      # one process
    python main.py --steps 6 --world-size 2       # two processes (nccl on GPU, gloo on CPU)

The final model state and the per-step losses go to a JSON file (``--out``) so that two runs can
be compared number by number.
"""

import argparse
import json
import os
import random
import time

import torch
import torch.backends.cudnn as cudnn
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim
import torch.utils.data
import torch.utils.data.distributed
from apex import amp

import models

parser = argparse.ArgumentParser(description="PyTorch ImageNet Training")
parser.add_argument("-a", "--arch", default="resnet_tiny", choices=sorted(models.ARCHITECTURES))
parser.add_argument("--steps", default=6, type=int, help="number of training iterations")
parser.add_argument("-b", "--batch-size", default=8, type=int, help="batch size per process")
parser.add_argument("--lr", "--learning-rate", default=0.1, type=float, dest="lr")
parser.add_argument("--momentum", default=0.9, type=float)
parser.add_argument("--wd", "--weight-decay", default=1e-4, type=float, dest="weight_decay")
parser.add_argument("-p", "--print-freq", default=2, type=int)
parser.add_argument("--prof", default=-1, type=int, help="mark iterations for nsys from this one on")
parser.add_argument("--world-size", default=1, type=int, help="number of training processes")
parser.add_argument("--dist-url", default="tcp://127.0.0.1:23456", type=str)
parser.add_argument("--seed", default=1234, type=int)
parser.add_argument("--image-size", default=16, type=int)
parser.add_argument("--num-classes", default=10, type=int)
parser.add_argument("--out", default=os.environ.get("TRAIN_RESULT", "result.json"))


class SyntheticImageNet(torch.utils.data.Dataset):
    """Fixed random images and labels: the same on every run and on every process."""

    def __init__(self, length, image_size, num_classes, seed):
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(length, 3, image_size, image_size, generator=generator)
        self.targets = torch.randint(0, num_classes, (length,), generator=generator)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        return self.images[index], self.targets[index]


def main():
    args = parser.parse_args()
    if args.world_size > 1:
        # One process per device, as with --multiprocessing-distributed in pytorch/examples.
        mp.spawn(main_worker, nprocs=args.world_size, args=(args,))
    else:
        main_worker(0, args)


def seed_everything(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def main_worker(gpu, args):
    seed_everything(args.seed)
    cudnn.benchmark = True
    args.distributed = args.world_size > 1
    if args.distributed:
        if torch.cuda.is_available():
            torch.cuda.set_device(gpu)
        dist.init_process_group(
            backend="nccl" if torch.cuda.is_available() else "gloo",
            init_method=args.dist_url,
            world_size=args.world_size,
            rank=gpu,
        )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    model = models.ARCHITECTURES[args.arch](num_classes=args.num_classes)
    model.to(device)
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[gpu] if torch.cuda.is_available() else None
        )

    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(
        model.parameters(), args.lr, momentum=args.momentum, weight_decay=args.weight_decay
    )
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2", loss_scale=32.0)

    dataset = SyntheticImageNet(
        args.steps * args.batch_size * args.world_size, args.image_size, args.num_classes, args.seed
    )
    if args.distributed:
        sampler = torch.utils.data.distributed.DistributedSampler(dataset, seed=args.seed)
    else:
        sampler = None
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=(sampler is None), sampler=sampler,
        num_workers=0,
    )

    losses = train(loader, model, criterion, optimizer, device, gpu, args)
    if gpu == 0:
        save_result(args.out, model, losses)
    if args.distributed:
        dist.barrier()  # let rank 0 finish writing before any process tears the group down
        dist.destroy_process_group()


def train(loader, model, criterion, optimizer, device, gpu, args):
    model.train()
    losses = []
    end = time.time()
    for i, (images, target) in enumerate(loader):
        if 0 <= args.prof <= i:
            # NVTX ranges exist only for NVIDIA's profiler; --prof is for nsys runs on GPUs.
            torch.cuda.nvtx.range_push(f"Body of iteration {i}")  # npu-migrate: ignore[NPU924]
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)

        output = model(images)
        loss = criterion(output, target)

        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if 0 <= args.prof <= i:
            torch.cuda.nvtx.range_pop()  # npu-migrate: ignore[NPU924] (see range_push above)
        losses.append(loss.item())
        if i % args.print_freq == 0 and gpu == 0:
            print(f"step {i}  loss {loss.item():.5f}  time {time.time() - end:.3f}s")
        end = time.time()
    return losses


def save_result(path, model, losses):
    module = model.module if hasattr(model, "module") else model
    state = {name: value.float().tolist() for name, value in module.state_dict().items()}
    with open(path, "w") as f:
        json.dump({"losses": losses, "state": state}, f)


if __name__ == "__main__":
    main()
