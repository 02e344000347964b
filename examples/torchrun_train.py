"""Data-parallel training on the CPU with torchrun: one stoker pipeline per rank, each on its shard.

    python -m stoker.sample_data /tmp/samples 64 --classes 4
    torchrun --nproc-per-node 2 examples/torchrun_train.py --data /tmp/samples --epochs 2

The recipe (stoker/plugin/README.md, "Several ranks"):

* each rank builds its pipeline with ``shard_id=rank, num_shards=world_size`` and the reader's
  ``pad_last_batch=True``: every shard is padded to the same number of batches, so every rank
  takes the same number of steps and no collective waits for a rank that ran out;
* the iterator has ``reader_name`` and ``LastBatchPolicy.PARTIAL``: the padding is cut off the
  last batch, so across ranks every file is seen exactly once per epoch (a rank's last batch may
  be short, even empty);
* the loss is summed per rank and divided by the number of samples of the step over all ranks,
  and the gradients are summed over the ranks, so short batches weigh what they hold;
* each rank saves its own checkpoint (``iterator.checkpoints()``) and resumes from it with
  ``Pipeline(checkpoint=...)``. At another world size, every new rank passes the list of all old
  ranks' checkpoints: the interrupted epoch is finished first, its unread files spread over the
  new ranks (each read once, equal step counts), then epochs go on at the new size.

``--record FILE`` writes, per step, the rank, epoch and the paths it read (JSON lines; the test
uses it); ``--stop-after N`` saves a checkpoint after N steps and exits (a simulated preemption);
``--resume`` continues from the checkpoints in ``--checkpoint-dir``.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist

import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.plugin.pytorch import DALIRaggedIterator, LastBatchPolicy

SIDE = 16  # images are resized to SIDE x SIDE: a tiny model, a quick example


@pipeline_def(num_threads=2, device_id=None, enable_checkpointing=True)
def train_pipe(root, shard_id, num_shards):
    jpegs, labels = fn.readers.file(file_root=root, shard_id=shard_id, num_shards=num_shards, pad_last_batch=True,
                                    random_shuffle=True, name="Reader")
    paths = fn.get_property(jpegs, key="source_info")  # which file each sample came from
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    images = fn.resize(images, size=[SIDE, SIDE])
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=[127.5] * 3,
                                      std=[64.0] * 3, mirror=fn.random.coin_flip())
    return images, labels, paths


def make_iterator(args, rank: int, world: int, checkpoint: str | None):
    pipe = train_pipe(args.data, shard_id=rank, num_shards=world, batch_size=args.batch_size, seed=args.seed,
                      checkpoint=checkpoint)
    return DALIRaggedIterator(pipe, ["images", "labels", "paths"], reader_name="Reader",
                              last_batch_policy=LastBatchPolicy.PARTIAL,
                              output_types=[DALIRaggedIterator.DENSE_TAG, DALIRaggedIterator.DENSE_TAG,
                                            DALIRaggedIterator.SPARSE_LIST_TAG])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="class folders of JPEGs (python -m stoker.sample_data)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8, help="per rank")
    ap.add_argument("--classes", type=int, default=None, help="default: the number of class folders")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--checkpoint-dir", default=None)
    ap.add_argument("--stop-after", type=int, default=None, help="save and exit after this many steps")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--record", default=None, help="append per-step JSON lines to FILE.rank<r>")
    args = ap.parse_args(argv)

    # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # the same initial weights on every rank

    ckpt_path = os.path.join(args.checkpoint_dir, f"rank{rank}.pt") if args.checkpoint_dir else None
    state, pipeline_state = load(args.checkpoint_dir, rank, world) if args.resume else (None, None)
    it = make_iterator(args, rank, world, pipeline_state)

    classes = args.classes or len([d for d in os.scandir(args.data) if d.is_dir()])
    # A plain model and one all_reduce of the gradients per step: what DistributedDataParallel does,
    # without its start-up cost (seconds on a small CPU), which a larger model would amortize.
    model = torch.nn.Linear(3 * SIDE * SIDE, classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    epoch, step = (state["epoch"], state["step"]) if state else (0, 0)
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    record = open(f"{args.record}.rank{rank}", "a") if args.record else None

    loss = None
    while epoch < args.epochs:
        for batch in it:
            b = batch[0]
            x, y = b["images"].reshape(len(b["labels"]), -1), b["labels"].reshape(-1).long()
            # Sum over this rank, divide by the step's samples over all ranks, sum the gradients over
            # the ranks: the global mean, with short or empty last batches counted for what they hold.
            count = torch.tensor([float(len(y))])
            dist.all_reduce(count)
            loss = torch.nn.functional.cross_entropy(model(x), y, reduction="sum") / count.clamp(min=1)
            opt.zero_grad()
            loss.backward()
            grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            dist.all_reduce(grads)
            torch.nn.utils.vector_to_parameters(grads, [p.grad for p in model.parameters()])
            opt.step()
            step += 1
            if record:
                paths = [bytes(p.tolist()).decode() for p in b["paths"]]
                record.write(json.dumps({"rank": rank, "epoch": epoch, "step": step, "paths": paths}) + "\n")
                record.flush()
            if args.stop_after is not None and step == args.stop_after:
                save(ckpt_path, it, model, opt, epoch, step)
                dist.barrier()
                dist.destroy_process_group()
                return
        epoch += 1
        if rank == 0 and loss is not None:  # (an epoch resumed after its last step has none left)
            print(f"epoch {epoch}: {len(it)} steps per rank, last loss {loss.item():.3f} (rank 0)", flush=True)
    if ckpt_path:
        save(ckpt_path, it, model, opt, epoch, step)
    dist.destroy_process_group()


def save(path: str | None, it, model, opt, epoch: int, step: int) -> None:
    """One checkpoint per rank: the pipeline's (with the iterator's position inside) and the model's."""
    if path is None:
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    torch.save({"pipeline": it.checkpoints()[0], "epoch": epoch, "step": step, "world": dist.get_world_size(),
                "model": model.state_dict(), "optimizer": opt.state_dict()}, path)


def load(folder: str, rank: int, world: int):
    """This rank's training state and what its pipeline resumes from: its own checkpoint at the
    same world size, the list of every old rank's at another (the model is the same on all)."""
    first = torch.load(os.path.join(folder, "rank0.pt"), weights_only=True)
    old_world = first.get("world", world)
    if old_world == world:
        state = torch.load(os.path.join(folder, f"rank{rank}.pt"), weights_only=True)
        return state, state["pipeline"]
    states = [torch.load(os.path.join(folder, f"rank{r}.pt"), weights_only=True) for r in range(old_world)]
    return first, [s["pipeline"] for s in states]


if __name__ == "__main__":
    main()
