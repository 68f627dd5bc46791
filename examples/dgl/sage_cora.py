"""A DGL GraphSAGE script on Cora whose loader is sparsetrain's: the one changed line is marked `# was:`.

DGL's own `NeighborSampler` object stays; sparsetrain's `DataLoader` reads its settings.
Run in an environment with DGL (`pip install torch==2.2.1 dgl==2.1.0 "torchdata<0.8"`); see docs/migrating_from_dgl.md.
Cora comes from the files sparsetrain ships (DGL's CoraGraphDataset downloads the same graph).
"""

import dgl
import torch
import torch.nn.functional as F
from dgl.dataloading import NeighborSampler
from dgl.nn import SAGEConv

from sparsetrain.datasets.builtin import planetoid_data
from sparsetrain.dgl import DataLoader  # was: from dgl.dataloading import DataLoader, NeighborSampler

data = planetoid_data("cora")  # DGL: g = dgl.data.CoraGraphDataset()[0]
g = dgl.graph((data.edge_index[0], data.edge_index[1]), num_nodes=data.num_nodes)
g.ndata["feat"], g.ndata["label"] = data.x, data.y
train_nids, test_nids = data.train_mask.nonzero().squeeze(1), data.test_mask.nonzero().squeeze(1)


class SAGE(torch.nn.Module):
    def __init__(self, in_size, hidden, out_size):
        super().__init__()
        self.layers = torch.nn.ModuleList([SAGEConv(in_size, hidden, "mean"), SAGEConv(hidden, out_size, "mean")])
        self.dropout = torch.nn.Dropout(0.5)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h


torch.manual_seed(0)
sampler = NeighborSampler([10, 10], prefetch_node_feats=["feat"], prefetch_labels=["label"])
train_loader = DataLoader(g, train_nids, sampler, batch_size=32, shuffle=True, drop_last=False)
test_loader = DataLoader(g, test_nids, NeighborSampler([-1, -1], prefetch_node_feats=["feat"],
                                                          prefetch_labels=["label"]), batch_size=1000)
model = SAGE(g.ndata["feat"].shape[1], 64, int(data.y.max()) + 1)
opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
for epoch in range(15):
    model.train()
    for input_nodes, output_nodes, blocks in train_loader:
        x, y = blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]
        loss = F.cross_entropy(model(blocks, x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

model.eval()
correct = 0
with torch.no_grad():
    for input_nodes, output_nodes, blocks in test_loader:
        pred = model(blocks, blocks[0].srcdata["feat"]).argmax(1)
        correct += int((pred == blocks[-1].dstdata["label"]).sum())
print(f"test accuracy {correct / len(test_nids):.4f}")
