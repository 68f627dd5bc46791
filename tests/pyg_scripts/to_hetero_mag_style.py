# A typed node-classification script in the style of PyG's examples/hetero/to_hetero_mag.py (written for sparsetrain's
# tests, not copied): module-level NeighborLoaders over a HeteroData with num_workers=6 and no `__main__` guard, an
# ogbn-mag-shaped graph (synthetic, small), a homogeneous GraphSAGE made typed with to_hetero, a few epochs and the
# test accuracy over a sampled test loader. Every node has a class (its id modulo num_classes), most edges of every
# type join two nodes of one class, and only the papers' features hint at it: the neighborhood carries the label.
import math
import os

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric import seed_everything
from torch_geometric.data import HeteroData
from torch_geometric.nn import SAGEConv, to_hetero

if os.environ.get("LOADER") == "pyg":  # the two-line swap, both ways, so a test can compare them
    from torch_geometric.loader import NeighborLoader
else:
    from sparsetrain.pyg import NeighborLoader  # was: from torch_geometric.loader import NeighborLoader

seed_everything(int(os.environ.get("SEED", 0)))
counts = {"paper": 3000, "author": 2000, "institution": 100, "field_of_study": 300}  # ogbn-mag's four node types
num_classes = 20  # ogbn-mag has 349 venues; fewer here, so that a few epochs learn them
data = HeteroData()
for node_type, n in counts.items():
    data[node_type].x = torch.randn(n, 32)
data["paper"].y = torch.arange(counts["paper"]) % num_classes
data["paper"].x += F.one_hot(data["paper"].y, 32).float() * 2
perm = torch.randperm(counts["paper"])
data["paper"].train_mask = torch.zeros(counts["paper"], dtype=torch.bool).index_fill_(0, perm[:1500], True)
data["paper"].test_mask = torch.zeros(counts["paper"], dtype=torch.bool).index_fill_(0, perm[1500:], True)


def edges(src, dst, m, same=0.9):
    """m edges from src to dst nodes, a share `same` of them between two nodes of one class."""
    row = torch.randint(0, counts[src], (m,))
    own_class = row % num_classes + num_classes * torch.randint(0, counts[dst] // num_classes, (m,))
    return torch.stack([row, torch.where(torch.rand(m) < same, own_class, torch.randint(0, counts[dst], (m,)))])


data["author", "writes", "paper"].edge_index = edges("author", "paper", 8000)
data["paper", "cites", "paper"].edge_index = edges("paper", "paper", 10000)
data["author", "affiliated_with", "institution"].edge_index = edges("author", "institution", 2000)
data["paper", "has_topic", "field_of_study"].edge_index = edges("paper", "field_of_study", 6000)
data = T.ToUndirected(merge=True)(data)  # reverse edge types, as the example's transform adds them

kwargs = {"batch_size": 128, "num_workers": 6, "persistent_workers": True}
train_loader = NeighborLoader(data, num_neighbors=[10] * 2, shuffle=True,
                              input_nodes=("paper", data["paper"].train_mask), **kwargs)
test_loader = NeighborLoader(data, num_neighbors=[10] * 2, input_nodes=("paper", data["paper"].test_mask), **kwargs)


class GNN(torch.nn.Module):
    def __init__(self, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden_channels)
        self.conv2 = SAGEConv((-1, -1), out_channels)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        return self.conv2(x, edge_index)


model = to_hetero(GNN(64, num_classes), data.metadata(), aggr="sum")
with torch.no_grad():  # initialize the lazy modules
    batch = next(iter(train_loader))
    model(batch.x_dict, batch.edge_index_dict)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
losses = []
for epoch in range(3):
    model.train()
    for batch in train_loader:
        optimizer.zero_grad()
        size = batch["paper"].batch_size
        out = model(batch.x_dict, batch.edge_index_dict)["paper"][:size]
        loss = F.cross_entropy(out, batch["paper"].y[:size])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

model.eval()
correct = total = 0
with torch.no_grad():
    for batch in test_loader:
        size = batch["paper"].batch_size
        pred = model(batch.x_dict, batch.edge_index_dict)["paper"][:size].argmax(dim=-1)
        correct += int((pred == batch["paper"].y[:size]).sum())
        total += size
assert total == int(data["paper"].test_mask.sum()) and all(math.isfinite(v) for v in losses)
print(f"steps {len(losses)} first_loss {losses[0]:.4f} last_loss {losses[-1]:.4f} test_acc {correct / total:.4f}")
