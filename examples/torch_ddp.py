"""A tiny Hugging Face GPT-2 trained with DistributedDataParallel on ``dk``
(or with FSDP2, ``fully_shard``: ``--fsdp``).

    torchrun --nproc-per-node 2 examples/torch_ddp.py
    torchrun --nproc-per-node 2 examples/torch_ddp.py --fsdp

Each rank runs on its own ``dk:0`` (the reference CPU plugin's cpu:0 in each
process) and trains on its own slice of one batch; the ``torch.distributed``
backend ``dk`` (registered by ``import devicekit.torch``) averages the
gradients through the plugin's collectives. With ``--fsdp`` each block and
the whole model are sharded across the ranks instead (parameters gathered
for forward and backward, gradients reduce-scattered; on dk this does not
free the gathered parameters between uses: docs/torch.md). Rank 0 prints the
losses, which are those of one process training on the whole batch. Needs
torch, transformers and a plugin with the collectives part.
"""

import argparse

import torch
import torch.distributed as dist
import transformers
from torch.nn.parallel import DistributedDataParallel as DDP

import devicekit.torch  # noqa: F401  (the dk device and the "dk" backend)

STEPS, PER_RANK, LENGTH = 5, 2, 16


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fsdp", action="store_true", help="shard with FSDP2 instead of DDP")
    args = parser.parse_args()
    dist.init_process_group("dk")  # or "cpu:gloo,dk:dk" to also run CPU collectives
    rank, world = dist.get_rank(), dist.get_world_size()
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=LENGTH, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).to("dk:0")
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard
        for block in model.transformer.h:
            fully_shard(block)
        fully_shard(model)
    else:
        model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = torch.randint(0, 64, (PER_RANK * world, LENGTH),
                          generator=torch.Generator().manual_seed(1))
    ids = batch[rank * PER_RANK:(rank + 1) * PER_RANK].to("dk:0")
    for step in range(STEPS):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # the whole batch's loss
        if rank == 0:
            print(f"step {step}: loss {mean.item():.4f} (mean over {world} ranks)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
