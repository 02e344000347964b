"""A linear classifier in pure JAX, fed by a stoker pipeline through ``stoker.plugin.jax``.

    python -m stoker.sample_data /tmp/samples 64 --classes 4
    python examples/jax_train.py --data /tmp/samples --epochs 3

Runs on the CPU in seconds (JAX's CPU build: pip install jax). The pipeline decodes, resizes and
normalizes; ``data_iterator`` turns its definition into an iterator of ``{name: jax.Array}``;
``last_batch_policy=DROP`` keeps every batch the same shape, so the step is compiled once.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp

import stoker.fn as fn
from stoker import types
from stoker.plugin.jax import LastBatchPolicy, data_iterator

SIDE = 32


@data_iterator(output_map=["images", "labels"], reader_name="Reader", last_batch_policy=LastBatchPolicy.DROP,
               auto_reset=True)
def train_data(root):
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    images = fn.resize(images, size=[SIDE, SIDE])
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, mean=[127.5] * 3, std=[64.0] * 3,
                                      mirror=fn.random.coin_flip())
    return images, labels


def init_params(key, classes: int) -> dict:
    return {"w": jax.random.normal(key, (3 * SIDE * SIDE, classes)) * 0.01, "b": jnp.zeros(classes)}


def loss_fn(params: dict, images, labels):
    logits = images.reshape(images.shape[0], -1) @ params["w"] + params["b"]
    labels = labels.reshape(-1)
    log_probs = jax.nn.log_softmax(logits)
    loss = -jnp.take_along_axis(log_probs, labels[:, None], axis=1).mean()
    return loss, (logits.argmax(-1) == labels).mean()


@jax.jit
def train_step(params: dict, images, labels, lr: float = 0.05):
    (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, images, labels)
    params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return params, loss, acc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="class folders of JPEGs (python -m stoker.sample_data)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args(argv)

    classes = len([d for d in os.scandir(args.data) if d.is_dir()])
    it = train_data(args.data, batch_size=args.batch_size, num_threads=2, seed=0)
    params = init_params(jax.random.PRNGKey(0), classes)
    for epoch in range(args.epochs):
        start, losses, accs = time.perf_counter(), [], []
        for batch in it:  # auto_reset: the next epoch starts by itself
            params, loss, acc = train_step(params, batch["images"], batch["labels"])
            losses.append(loss)
            accs.append(acc)
        print(f"epoch {epoch}: {len(losses)} steps, loss {float(jnp.mean(jnp.stack(losses))):.3f}, "
              f"train accuracy {float(jnp.mean(jnp.stack(accs))):.2f}, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
