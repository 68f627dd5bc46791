# A script in the style of PyG's examples/hierarchical_sampling.py (written for sparsetrain's tests, not copied):
# module-level NeighborLoader with num_workers=6 and no `__main__` guard; each layer trims the batch to the hops it
# still needs with trim_to_layer and the batch's num_sampled_nodes / num_sampled_edges per hop.
import math

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import trim_to_layer

from sparsetrain.pyg import NeighborLoader  # was: from torch_geometric.loader import NeighborLoader

torch.manual_seed(0)
num_nodes, num_features, num_classes = 4000, 64, 41
data = Data(x=torch.randn(num_nodes, num_features), y=torch.randint(0, num_classes, (num_nodes,)),
            edge_index=torch.randint(0, num_nodes, (2, 40000)))
train_mask = torch.zeros(num_nodes, dtype=torch.bool)
train_mask[:2000] = True
data.train_mask = train_mask

loader = NeighborLoader(data, input_nodes=data.train_mask, num_neighbors=[20, 10, 5], batch_size=256, shuffle=True,
                        num_workers=6, persistent_workers=True)


class HierarchicalSAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers):
        super().__init__()
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x, edge_index, num_sampled_nodes_per_hop, num_sampled_edges_per_hop):
        for i, conv in enumerate(self.convs):
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
model.train()
for step, batch in enumerate(loader):
    optimizer.zero_grad()
    out = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    trimmed_rows.append(out.shape[0])
    # after the last layer's trim only the seeds and their first hop remain
    assert out.shape[0] == int(batch.num_sampled_nodes[0]) + int(batch.num_sampled_nodes[1]), out.shape
    loss = F.cross_entropy(out[: batch.batch_size], batch.y[: batch.batch_size])
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step == 3:
        break
assert all(math.isfinite(v) for v in losses)
print(f"steps {len(losses)} first_loss {losses[0]:.4f} last_loss {losses[-1]:.4f} rows {trimmed_rows}")
