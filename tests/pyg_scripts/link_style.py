# A link-prediction script in the style of PyG's examples/link_pred.py, with mini-batches from LinkNeighborLoader
# (written for sparsetrain's tests, not copied): module-level loaders with num_workers=6 and no `__main__` guard,
# binary negatives drawn by the loader (neg_sampling_ratio), a GraphSAGE encoder and a dot-product decoder, test AUC
# on held-out edges against RandomLinkSplit's negatives. The graph is a stochastic block model, so links are
# predictable from the communities, which the node features hint at.
import math
import os

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric import seed_everything
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv

if os.environ.get("LOADER") == "pyg":  # the two-line swap, both ways, so a test can compare them
    from torch_geometric.loader import LinkNeighborLoader
else:
    from sparsetrain.pyg import LinkNeighborLoader  # was: from torch_geometric.loader import LinkNeighborLoader

seed_everything(int(os.environ.get("SEED", 0)))  # RandomLinkSplit's negatives use Python's random
num_nodes, num_features, num_communities, num_edges = 2000, 32, 10, 12000
community = torch.arange(num_nodes) % num_communities
src = torch.randint(0, num_nodes, (num_edges,))
same = torch.rand(num_edges) < 0.9  # 90% of the edges stay inside a community
dst = torch.where(same, community[src] + num_communities * torch.randint(0, num_nodes // num_communities,
                                                                         (num_edges,)),
                  torch.randint(0, num_nodes, (num_edges,)))
x = torch.randn(num_nodes, num_features) + F.one_hot(community, num_features).float()
data = T.ToUndirected()(Data(x=x, edge_index=torch.stack([src, dst]), num_nodes=num_nodes))
data = T.RemoveDuplicatedEdges()(data)
train_data, _, test_data = T.RandomLinkSplit(num_val=0.0, num_test=0.1, is_undirected=True,
                                             add_negative_train_samples=False)(data)

kwargs = {"num_neighbors": [10, 10], "batch_size": 512, "num_workers": 6, "persistent_workers": True}
train_loader = LinkNeighborLoader(train_data, edge_label_index=train_data.edge_label_index,
                                  edge_label=train_data.edge_label, neg_sampling_ratio=1.0, shuffle=True, **kwargs)
test_loader = LinkNeighborLoader(test_data, edge_label_index=test_data.edge_label_index,
                                 edge_label=test_data.edge_label, shuffle=False, **kwargs)


class Net(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = SAGEConv(in_channels, hidden_channels)
        self.conv2 = SAGEConv(hidden_channels, out_channels)

    def encode(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    def decode(self, z, edge_label_index):
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(dim=-1)


def roc_auc(scores, labels):
    """Area under the ROC curve: the chance that a positive outscores a negative (ties count half)."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    wins = (pos[:, None] > neg[None, :]).float() + 0.5 * (pos[:, None] == neg[None, :]).float()
    return float(wins.mean())


model = Net(num_features, 64, 32)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
losses = []
for epoch in range(3):
    model.train()
    for batch in train_loader:
        optimizer.zero_grad()
        z = model.encode(batch.x, batch.edge_index)
        out = model.decode(z, batch.edge_label_index)
        loss = F.binary_cross_entropy_with_logits(out, batch.edge_label)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

model.eval()
scores, labels = [], []
with torch.no_grad():
    for batch in test_loader:
        scores.append(model.decode(model.encode(batch.x, batch.edge_index), batch.edge_label_index))
        labels.append(batch.edge_label)
auc = roc_auc(torch.cat(scores), torch.cat(labels))
assert all(math.isfinite(v) for v in losses)
print(f"steps {len(losses)} first_loss {losses[0]:.4f} last_loss {losses[-1]:.4f} test_auc {auc:.4f}")
