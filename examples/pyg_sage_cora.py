"""A plain PyG training script (GraphSAGE with trim_to_layer on Cora's public split) on sparsetrain's loader.

The only sparsetrain line is the NeighborLoader import; with PyG's own import the script is unchanged.

    python examples/pyg_sage_cora.py --root /tmp/planetoid --seeds 0 1 2

``--root`` is Planetoid's folder; without ``Cora/raw`` there, the raw files shipped in sparsetrain
are copied in (PyG would otherwise download them).
"""

import argparse
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F
from torch_geometric.datasets import Planetoid
from torch_geometric.nn.models import GraphSAGE

from sparsetrain.pyg import NeighborLoader  # was: from torch_geometric.loader import NeighborLoader


def run(data, seed: int, epochs: int) -> float:
    torch.manual_seed(seed)
    loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=data.train_mask, batch_size=32, shuffle=True)
    model = GraphSAGE(data.num_features, 64, num_layers=2, out_channels=int(data.y.max()) + 1, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    best_val = test_at_best = 0.0
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                        num_sampled_edges_per_hop=batch.num_sampled_edges)[: batch.batch_size]
            F.cross_entropy(out, batch.y[: batch.batch_size]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(dim=-1)
        val = (pred[data.val_mask] == data.y[data.val_mask]).float().mean().item()
        test = (pred[data.test_mask] == data.y[data.test_mask]).float().mean().item()
        if val > best_val:
            best_val, test_at_best = val, test
    return test_at_best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="data/planetoid")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    raw = Path(args.root) / "Cora" / "raw"
    if not raw.is_dir():
        from sparsetrain.datasets.builtin import planetoid_raw_dir

        shutil.copytree(planetoid_raw_dir("cora"), raw)
    data = Planetoid(args.root, "Cora")[0]
    accs = [run(data, seed, args.epochs) for seed in args.seeds]
    for seed, acc in zip(args.seeds, accs):
        print(f"seed {seed} test acc {acc:.4f}")
    print(f"mean test acc {sum(accs) / len(accs):.4f}")


if __name__ == "__main__":
    main()
