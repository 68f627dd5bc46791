"""Train a plain PyG GraphSAGE from your own script with sparsetrain's sampler and loader.

    python examples/train_sage.py                # Cora, from the files shipped in the package
    sparsetrain synth --nodes 50000 --edges 1000000 --out data/synth   # or: sparsetrain preprocess ...
    python examples/train_sage.py data/synth     # a dataset folder (or a built-in name: cora, synthetic)

The same through the CLI: sparsetrain train --data data/synth --fanout 10,10 --epochs 5
"""

import sys

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

import sparsetrain as st
from sparsetrain.engine.default_data import open_dataset


class SAGE(torch.nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.convs = torch.nn.ModuleList([SAGEConv(d_in, d_hidden), SAGEConv(d_hidden, d_out)])

    def forward(self, x, blocks):  # blocks = MiniBatch.to_pyg(), outermost hop first
        for i, (conv, (edge_index, (_, num_dst))) in enumerate(zip(self.convs, blocks)):
            x = conv((x, x[:num_dst]), edge_index)  # each layer only for the dst nodes the next one needs
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), p=0.5, training=self.training)
        return x


ds = open_dataset(sys.argv[1] if len(sys.argv) > 1 else "cora")  # a folder, or a built-in built once into a cache
features = ds.feature_store()  # memory-mapped: reads only the rows a batch needs
sampler = st.sampling.NeighborSampler(ds.graph, [10, 10], seed=0)
loader = st.engine.Loader(sampler, features, ds.labels, ds.split["train"], batch_size=1024, seed=0)
test_loader = st.engine.Loader(st.sampling.NeighborSampler(ds.graph, [-1, -1]), features, ds.labels, ds.split["test"],
                               batch_size=1024, shuffle=False)  # all neighbors: exact test accuracy
model = SAGE(ds.num_features, 128, ds.num_classes)
optimizer = torch.optim.Adam(model.parameters(), lr=0.003)

for epoch in range(5):
    model.train()
    for mb in loader.epoch(epoch):  # mb.x and mb.y are ready; the next batch is being prepared meanwhile
        optimizer.zero_grad()
        loss = F.cross_entropy(model(mb.x, mb.to_pyg()), mb.y)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(mb.x, mb.to_pyg()).argmax(1) == mb.y).sum().item() for mb in test_loader)
    acc = correct / len(ds.split["test"])
    print(
        f"epoch {epoch + 1}: loss {loss.item():.4f}  test acc {acc:.4f}  stall "
        f"{loader.last_epoch_stats.stall_fraction:.1%}"
    )
