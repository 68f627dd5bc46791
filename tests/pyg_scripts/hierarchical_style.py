# A script in the style of PyG's examples/hierarchical_sampling.py (written for sparsetrain's tests, not copied):
# module-level NeighborLoaders with num_workers=6 and no `__main__` guard; each layer trims the batch to the hops it
# still needs with trim_to_layer and the batch's num_sampled_nodes / num_sampled_edges per hop. A few epochs on a
# stochastic block model over the classes (features a hint of the class), then the test accuracy over a test loader.
import math
import os

import torch
import torch.nn.functional as F
from torch_geometric import seed_everything
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import trim_to_layer

if os.environ.get("LOADER") == "pyg":  # the two-line swap, both ways, so a test can compare them
    from torch_geometric.loader import NeighborLoader
else:
    from sparsetrain.pyg import NeighborLoader  # was: from torch_geometric.loader import NeighborLoader

seed_everything(int(os.environ.get("SEED", 0)))
num_nodes, num_features, num_classes, num_edges = 4000, 64, 41, 40000
y = torch.arange(num_nodes) % num_classes
src = torch.randint(0, num_nodes, (num_edges,))
same = torch.rand(num_edges) < 0.8  # 80% of the edges join two nodes of one class
dst = torch.where(same, y[src] + num_classes * torch.randint(0, num_nodes // num_classes, (num_edges,)),
                  torch.randint(0, num_nodes, (num_edges,)))
x = torch.randn(num_nodes, num_features) + F.one_hot(y, num_features).float() * 2
perm = torch.randperm(num_nodes)
train_mask = torch.zeros(num_nodes, dtype=torch.bool).index_fill_(0, perm[:2000], True)
test_mask = torch.zeros(num_nodes, dtype=torch.bool).index_fill_(0, perm[2000:], True)
data = Data(x=x, y=y, edge_index=torch.stack([src, dst]), train_mask=train_mask, test_mask=test_mask)

kwargs = {"num_neighbors": [20, 10, 5], "batch_size": 256, "num_workers": 6, "persistent_workers": True}
loader = NeighborLoader(data, input_nodes=data.train_mask, shuffle=True, **kwargs)
test_loader = NeighborLoader(data, input_nodes=data.test_mask, **kwargs)


class HierarchicalSAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers):
        super().__init__()
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x, edge_index, num_sampled_nodes_per_hop, num_sampled_edges_per_hop):
        for i, conv in enumerate(self.convs):
            if num_sampled_nodes_per_hop is not None:  # trimming leaves the seeds' outputs as they are
                x, edge_index, _ = trim_to_layer(layer=i, num_sampled_nodes_per_hop=num_sampled_nodes_per_hop,
                                                 num_sampled_edges_per_hop=num_sampled_edges_per_hop, x=x,
                                                 edge_index=edge_index)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


model = HierarchicalSAGE(num_features, 64, num_classes, num_layers=3)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
losses, trimmed_rows = [], []
for epoch in range(4):
    model.train()
    for batch in loader:
        optimizer.zero_grad()
        # PyG's own loader reports the hops only with pyg-lib installed (torch-sparse's sampler does not): untrimmed
        hops = (batch.num_sampled_nodes, batch.num_sampled_edges) if "num_sampled_nodes" in batch else (None, None)
        out = model(batch.x, batch.edge_index, *hops)
        if hops[0] is not None:  # after the last layer's trim only the seeds and their first hop remain
            assert out.shape[0] == int(batch.num_sampled_nodes[0]) + int(batch.num_sampled_nodes[1]), out.shape
            trimmed_rows.append(out.shape[0])
        loss = F.cross_entropy(out[: batch.batch_size], batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

model.eval()
correct = total = 0
with torch.no_grad():
    for batch in test_loader:
        hops = (batch.num_sampled_nodes, batch.num_sampled_edges) if "num_sampled_nodes" in batch else (None, None)
        out = model(batch.x, batch.edge_index, *hops)
        correct += int((out[: batch.batch_size].argmax(dim=-1) == batch.y[: batch.batch_size]).sum())
        total += batch.batch_size
assert total == int(data.test_mask.sum()) and all(math.isfinite(v) for v in losses)
print(f"steps {len(losses)} first_loss {losses[0]:.4f} last_loss {losses[-1]:.4f} test_acc {correct / total:.4f} "
      f"trimmed_steps {len(trimmed_rows)} rows {trimmed_rows[:4]}")
