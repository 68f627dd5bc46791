# A node-classification script in the style of PyG's examples/reddit.py (written for sparsetrain's tests, not copied):
# module-level NeighborLoader with num_workers=6 and no `if __name__ == "__main__":` guard, a Reddit-shaped graph
# (synthetic, small), GraphSAGE trained for a few epochs and evaluated layer-wise over a full-neighborhood loader.
# The graph is a stochastic block model over the classes (most edges join nodes of one class) and the features are
# a hint of the class, so the neighborhood is what makes the test accuracy high.
import copy
import math
import os

import torch
import torch.nn.functional as F
from torch_geometric import seed_everything
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv

if os.environ.get("LOADER") == "pyg":  # the two-line swap, both ways, so a test can compare them
    from torch_geometric.loader import NeighborLoader
else:
    from sparsetrain.pyg import NeighborLoader  # was: from torch_geometric.loader import NeighborLoader

seed_everything(int(os.environ.get("SEED", 0)))
num_nodes, num_features, num_classes, num_edges = 4000, 64, 41, 40000  # Reddit: 232,965 nodes, 602 features
y = torch.arange(num_nodes) % num_classes
src = torch.randint(0, num_nodes, (num_edges,))
same = torch.rand(num_edges) < 0.8  # 80% of the edges join two nodes of one class
dst = torch.where(same, y[src] + num_classes * torch.randint(0, num_nodes // num_classes, (num_edges,)),
                  torch.randint(0, num_nodes, (num_edges,)))
x = torch.randn(num_nodes, num_features) + F.one_hot(y, num_features).float() * 2
perm = torch.randperm(num_nodes)
train_mask = torch.zeros(num_nodes, dtype=torch.bool)
train_mask[perm[:2600]] = True
test_mask = torch.zeros(num_nodes, dtype=torch.bool)
test_mask[perm[2600:]] = True
data = Data(x=x, y=y, edge_index=torch.stack([src, dst]), train_mask=train_mask, test_mask=test_mask)

kwargs = {"batch_size": 256, "num_workers": 6, "persistent_workers": True}
train_loader = NeighborLoader(data, input_nodes=data.train_mask, num_neighbors=[25, 10], shuffle=True, **kwargs)
subgraph_loader = NeighborLoader(copy.copy(data), input_nodes=None, num_neighbors=[-1], shuffle=False, **kwargs)
del subgraph_loader.data.x, subgraph_loader.data.y  # only the graph is needed for layer-wise inference
subgraph_loader.data.num_nodes = data.num_nodes
subgraph_loader.data.n_id = torch.arange(data.num_nodes)


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.convs = torch.nn.ModuleList([SAGEConv(in_channels, hidden_channels),
                                          SAGEConv(hidden_channels, out_channels)])

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x

    @torch.no_grad()
    def inference(self, x_all, loader):
        for i, conv in enumerate(self.convs):
            xs = []
            for batch in loader:
                x = x_all[batch.n_id]
                x = conv(x, batch.edge_index)
                if i < len(self.convs) - 1:
                    x = F.relu(x)
                xs.append(x[: batch.batch_size])
            x_all = torch.cat(xs, dim=0)
        return x_all


model = SAGE(num_features, 64, num_classes)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
losses = []
for epoch in range(4):
    model.train()
    for batch in train_loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
model.eval()
pred = model.inference(data.x, subgraph_loader).argmax(dim=-1)
acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
assert pred.shape[0] == num_nodes and all(math.isfinite(v) for v in losses)
print(f"steps {len(losses)} first_loss {losses[0]:.4f} last_loss {losses[-1]:.4f} test_acc {acc:.4f}")
