"""Issue 30: ``layer.to_torch(...)`` under a plain ``torch.utils.data.DataLoader`` (real
worker processes) and Lightning's: ``to_torch(batch_size=B)`` yields batches
(``DataLoader(ds, batch_size=None)``), ``to_torch()`` yields rows that ``DataLoader(ds,
batch_size=64)`` batches; every epoch gives every row once across the workers, whatever
their number."""

from __future__ import annotations

import numpy as np
import pytest

import torch

from actkit.errors import ValidationError  # noqa: E402
from actkit.store import LayerSpec, create_store, open_store  # noqa: E402

ROWS, D = 1000, 4
SMALL = dict(buffer_rows=96, block_rows=50)  # many windows, so every worker has some


@pytest.fixture(scope="module")
def layer(tmp_path_factory):
    X = np.zeros((ROWS, D), dtype=np.float32)
    X[:, 0] = np.arange(ROWS)  # a row says which it is
    X[:, 1:] = np.random.default_rng(0).normal(size=(ROWS, D - 1))
    w = create_store(tmp_path_factory.mktemp("lt") / "s.h5", [LayerSpec("L", ROWS, D)], n_samples=ROWS,
                     request={"t": 1})
    w.append("L", X)
    w.checkpoint(ROWS, force=True)
    store = open_store(w.finalize())
    yield store["L"]
    store.close()


def _ids(batches):
    return np.concatenate([b[:, 0].numpy() for b in batches]).astype(np.int64)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, 2, 3])
def test_batches_under_a_plain_dataloader(layer, workers):
    ds = layer.to_torch(batch_size=32, **SMALL)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    orders = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        batches = list(loader)
        assert all(b.shape[1] == D and len(b) <= 32 for b in batches)
        ids = _ids(batches)
        np.testing.assert_array_equal(np.sort(ids), np.arange(ROWS))  # every row once
        orders.append(ids)
    assert not np.array_equal(orders[0], orders[1])  # set_epoch: a new order


@pytest.mark.parametrize("workers", [0, 2])
def test_rows_batched_by_a_plain_dataloader(layer, workers):
    ds = layer.to_torch(**SMALL)
    assert len(ds) == ROWS
    loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=workers)
    assert len(loader) == -(-ROWS // 64)
    batches = list(loader)
    assert [tuple(b.shape) for b in batches[:-1]] == [(64, D)] * (len(batches) - 1)
    np.testing.assert_array_equal(np.sort(_ids(batches)), np.arange(ROWS))
    ds_i = layer.to_torch(return_index=True, **SMALL)  # (row, index) pairs, batched as a tuple
    for rows, idx in torch.utils.data.DataLoader(ds_i, batch_size=100, num_workers=workers):
        np.testing.assert_array_equal(rows[:, 0].numpy().astype(np.int64), idx.numpy())


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_batched_again_are_refused_clearly(layer, workers):
    """Issue 39: ``DataLoader(layer.to_torch(batch_size=256), batch_size=32, num_workers=2)``
    died with torch's ``RuntimeError: Trying to resize storage that is not resizable`` from a
    worker (and stacked 32 batches into one (32, 256, D) tensor without workers). Now the
    dataset says what happened and the two ways out, before its first batch; both ways work."""
    loader = torch.utils.data.DataLoader(layer.to_torch(batch_size=256, **SMALL), batch_size=32, num_workers=workers)
    with pytest.raises(ValidationError) as info:
        next(iter(loader))
    assert ("already yields batches of 256 rows and the DataLoader batches them again (batch_size=32: tensors of "
            "32 x 256 x features): give the DataLoader batch_size=None") in str(info.value)
    ok = [torch.utils.data.DataLoader(layer.to_torch(batch_size=256, **SMALL), batch_size=None, num_workers=workers),
          torch.utils.data.DataLoader(layer.to_torch(**SMALL), batch_size=32, num_workers=workers)]
    for loader in ok:
        np.testing.assert_array_equal(np.sort(_ids(list(loader))), np.arange(ROWS))


def test_negative_workers_is_one_line(layer):
    with pytest.raises(ValidationError, match="num_workers must be a non-negative integer"):
        layer.to_torch(batch_size=32, num_workers=-1)
    with pytest.raises(ValidationError, match="give to_torch a batch_size"):
        layer.to_torch(num_workers=2)


def test_lightning_default_loaders(layer):
    """A LightningModule whose train_dataloader is a plain DataLoader over the rows, with two
    workers: each of two epochs sees every row once."""
    import pytorch_lightning as pl

    seen = []

    class Probe(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(D, 1)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(layer.to_torch(**SMALL), batch_size=64, num_workers=2)

        def on_train_epoch_start(self):
            seen.append([])

        def training_step(self, batch, i):
            seen[-1].append(batch[:, 0].detach().numpy().astype(np.int64))
            return self.lin(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Probe())
    assert len(seen) == 2
    for epoch in seen:
        np.testing.assert_array_equal(np.sort(np.concatenate(epoch)), np.arange(ROWS))
