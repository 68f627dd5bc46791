"""`sparsetrain.pyg.NeighborLoader` over `partitioned_stores` on gloo ranks in spawned processes: every batch equals the
single-process drop-in's batch on the unpartitioned dataset for the same seeds and key (nodes, edges, edge ids, x, the
seeds' y); each rank's batch is its share of the one-process batch of 2 x the batch size, under that batch's key,
and a rank with no share in a batch runs a padding batch, so every rank runs as many."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sparsetrain.datasets import load, synthesize
from sparsetrain.errors import SettingError
from sparsetrain.partition import PartitionOptions, partition_dataset
from sparsetrain.partition.load import owners, part_sizes
from sparsetrain.partition.manifest import read_manifest
from sparsetrain.pyg import NeighborLoader, partitioned_stores
from sparsetrain.pyg.keys import batch_key
from tests.collective_harness import spawn, values

pytestmark = pytest.mark.distributed

FANOUTS, BATCH, SEED = [4, 3], 16, 5


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ppyg") / "g"
    synthesize(path, 300, 3000, feature_dim=5, num_classes=3, seed=7, quiet=True)
    return path


def _batches(rank: int, world: int, folder: str) -> dict:
    stores = partitioned_stores(folder, cache_rows=10)
    loader = NeighborLoader(stores, FANOUTS, input_nodes="train", batch_size=BATCH, shuffle=True, seed=SEED)
    out = []
    for _ in range(2):  # two epochs: keys move on
        for batch in loader:
            out.append({"n_id": batch.n_id, "e_id": batch.e_id,
                        "edge_index": batch.edge_index, "x": batch.x, "y": batch.y[: batch.batch_size],
                        "batch_size": batch.batch_size})
    try:
        NeighborLoader(stores, FANOUTS, input_nodes=torch.arange(3), batch_size=BATCH, seed=SEED)
    except SettingError as exc:
        out.append({"error": str(exc)})
    return {"batches": out}


def test_batches_equal_the_single_process_drop_in(graph, tmp_path):
    folder = tmp_path / "parts"
    partition_dataset(graph, folder, PartitionOptions(2, method="ldg", quiet=True))
    per_batch = -(-sum(part_sizes(read_manifest(folder), "train")) // (2 * BATCH))  # the one-process epoch's
    ranks = values(spawn(_batches, 2, str(folder), timeout_s=240))
    ds = load(graph)
    reference = NeighborLoader(ds, FANOUTS, input_nodes="train", batch_size=BATCH, seed=SEED)
    sampler = reference.node_sampler
    checked, remote = 0, 0
    owner = torch.from_numpy(owners(folder).astype("int64"))
    for rank, out in enumerate(ranks):
        *batches, error = out["batches"]
        assert "name a split" in error["error"]
        assert len(batches) == 2 * per_batch  # padded: as many on every rank
        for position, b in enumerate(batches):
            seeds = b["n_id"][: b["batch_size"]]
            if b["batch_size"] == 0:
                assert b["n_id"].numel() == 0
                continue
            key = position  # the one-process run's key of the batch this is a share of, the same on every rank
            with batch_key(key):
                want = reference.collate_fn(_positions(reference, seeds))
            want = want if hasattr(want, "n_id") else reference.filter_fn(want)
            assert torch.equal(b["n_id"], want.n_id) and torch.equal(b["e_id"], want.e_id)
            assert torch.equal(b["edge_index"], want.edge_index)
            assert torch.equal(b["x"], ds.features[b["n_id"]])
            assert torch.equal(b["y"], ds.labels[seeds])
            checked += 1
            remote += int((owner[b["n_id"]] != rank).sum())  # rows and draws that came from the peer
    assert checked >= 2 * per_batch and remote > 0 and sampler.seed == SEED


def _positions(loader, seeds: torch.Tensor) -> list[int]:
    """The positions of ``seeds`` in the loader's input nodes (its collate_fn takes positions)."""
    nodes = loader.input_data.node
    return [int((nodes == s).nonzero()) for s in seeds]


def _drop_in_and_engine_epochs(rank: int, world: int, folder: str) -> dict:
    """Two epochs of the drop-in over the parts and two of the engine's partitioned run (its seed batches and sampler,
    as ``sparsetrain train --data PARTS`` builds them), same seed: seeds per batch and sampled node sets."""
    from sparsetrain.engine.partitioned import PartSeedBatches
    from sparsetrain.partitioned import DistNeighborSampler

    stores = partitioned_stores(folder, cache_rows=0)
    loader = NeighborLoader(stores, FANOUTS, input_nodes="train", batch_size=BATCH, shuffle=True, seed=SEED)
    drop_in = [(b.n_id[: b.batch_size], b.n_id.unique()) for _ in range(2) for b in loader]
    part = stores[1].part
    # the engine's seed batches; its sampler in the drop-in's layout (PyG's hops: each hop samples only the nodes new
    # in the one before, where the engine's blocks sample every node again), so equal node sets mean equal draws
    sampler = DistNeighborSampler(part, FANOUTS, seed=SEED, hop_nodes="new")
    seed_batches = PartSeedBatches(part, "train", BATCH, seed=SEED, shuffle=True)
    engine = [(inp.seeds, sampler.sample(inp).input_nodes.unique()) for epoch in range(2)
              for inp in seed_batches.inputs(epoch)]
    return {"drop_in": drop_in, "engine": engine}


@pytest.mark.slow
def test_the_drop_in_and_the_engine_over_the_same_parts_draw_the_same_epochs(graph, tmp_path):
    folder = tmp_path / "parts"
    partition_dataset(graph, folder, PartitionOptions(2, method="ldg", quiet=True))
    ranks = values(spawn(_drop_in_and_engine_epochs, 2, str(folder), timeout_s=240))
    per_batch = -(-sum(part_sizes(read_manifest(folder), "train")) // (2 * BATCH))
    for out in ranks:
        assert len(out["drop_in"]) == len(out["engine"]) == 2 * per_batch
        for (seeds, nodes), (engine_seeds, engine_nodes) in zip(out["drop_in"], out["engine"], strict=True):
            assert torch.equal(seeds, engine_seeds)  # the same shares of the same one-process batches
            assert torch.equal(nodes, engine_nodes)  # sampled under the same keys
        first, second = out["engine"][0][0], out["engine"][per_batch][0]
        assert not torch.equal(first, second)  # the second epoch is another shuffle
