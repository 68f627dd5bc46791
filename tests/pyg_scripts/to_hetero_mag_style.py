# A typed node-classification script in the style of PyG's examples/hetero/to_hetero_mag.py (written for sparsetrain's
# tests, not copied): module-level NeighborLoader over a HeteroData with num_workers=6 and no `__main__` guard, an
# ogbn-mag-shaped graph (synthetic, small), a homogeneous GraphSAGE made typed with to_hetero, a few training steps.
import math

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.data import HeteroData
from torch_geometric.nn import SAGEConv, to_hetero

from sparsetrain.pyg import NeighborLoader  # was: from torch_geometric.loader import NeighborLoader

torch.manual_seed(0)
counts = {"paper": 3000, "author": 2000, "institution": 100, "field_of_study": 300}  # ogbn-mag's four node types
num_classes = 349
data = HeteroData()
for node_type, n in counts.items():
    data[node_type].x = torch.randn(n, 32)
data["paper"].y = torch.randint(0, num_classes, (counts["paper"],))
train_mask = torch.zeros(counts["paper"], dtype=torch.bool)
train_mask[torch.randperm(counts["paper"])[:1500]] = True
data["paper"].train_mask = train_mask


def edges(src, dst, m):
    return torch.stack([torch.randint(0, counts[src], (m,)), torch.randint(0, counts[dst], (m,))])


data["author", "writes", "paper"].edge_index = edges("author", "paper", 8000)
data["paper", "cites", "paper"].edge_index = edges("paper", "paper", 10000)
data["author", "affiliated_with", "institution"].edge_index = edges("author", "institution", 2000)
data["paper", "has_topic", "field_of_study"].edge_index = edges("paper", "field_of_study", 6000)
data = T.ToUndirected(merge=True)(data)  # reverse edge types, as the example's transform adds them

train_loader = NeighborLoader(data, num_neighbors=[10] * 2, shuffle=True,
                              input_nodes=("paper", data["paper"].train_mask), batch_size=256, num_workers=6,
                              persistent_workers=True)


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
model.train()
for step, batch in enumerate(train_loader):
    optimizer.zero_grad()
    size = batch["paper"].batch_size
    out = model(batch.x_dict, batch.edge_index_dict)["paper"][:size]
    loss = F.cross_entropy(out, batch["paper"].y[:size])
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step == 3:
        break
assert all(math.isfinite(v) for v in losses)
print(f"steps {len(losses)} first_loss {losses[0]:.4f} last_loss {losses[-1]:.4f}")
