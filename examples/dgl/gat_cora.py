"""A DGL GAT script on Cora whose loader is sparsetrain's: the one changed line is marked `# was:`.

DGL's own `NeighborSampler` object stays; sparsetrain's `DataLoader` reads its settings.
Run in an environment with DGL (`pip install torch==2.2.1 dgl==2.1.0 "torchdata<0.8"`); see docs/migrating_from_dgl.md.
"""

import dgl
import torch
import torch.nn.functional as F
from dgl.dataloading import NeighborSampler
from dgl.nn import GATConv

from sparsetrain.datasets.builtin import planetoid_data
from sparsetrain.dgl import DataLoader  # was: from dgl.dataloading import DataLoader, NeighborSampler

data = planetoid_data("cora")  # DGL: g = dgl.data.CoraGraphDataset()[0]
g = dgl.graph((data.edge_index[0], data.edge_index[1]), num_nodes=data.num_nodes)
features, labels = data.x, data.y
train_nids, test_nids = data.train_mask.nonzero().squeeze(1), data.test_mask.nonzero().squeeze(1)


class GAT(torch.nn.Module):
    def __init__(self, in_size, hidden, out_size, heads=4):
        super().__init__()
        self.conv1 = GATConv(in_size, hidden, heads, feat_drop=0.5, attn_drop=0.5, activation=F.elu,
                             allow_zero_in_degree=True)
        self.conv2 = GATConv(hidden * heads, out_size, 1, feat_drop=0.5, attn_drop=0.5, allow_zero_in_degree=True)

    def forward(self, blocks, x):
        h = self.conv1(blocks[0], x).flatten(1)
        return self.conv2(blocks[1], h).mean(1)


torch.manual_seed(0)
train_loader = DataLoader(g, train_nids, NeighborSampler([10, 10]), batch_size=32, shuffle=True)
test_loader = DataLoader(g, test_nids, NeighborSampler([-1, -1]), batch_size=1000)
model = GAT(features.shape[1], 8, int(labels.max()) + 1)
opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
for epoch in range(15):
    model.train()
    for input_nodes, output_nodes, blocks in train_loader:
        loss = F.cross_entropy(model(blocks, features[input_nodes.long()]), labels[output_nodes.long()])
        opt.zero_grad()
        loss.backward()
        opt.step()

model.eval()
correct = 0
with torch.no_grad():
    for input_nodes, output_nodes, blocks in test_loader:
        pred = model(blocks, features[input_nodes.long()]).argmax(1)
        correct += int((pred == labels[output_nodes.long()]).sum())
print(f"test accuracy {correct / len(test_nids):.4f}")
