"""A DGL R-GCN script on a typed graph (papers, authors) whose loader is sparsetrain's: the one changed line is marked
`# was:`. Seeds are a dict per node type, blocks are typed; the rest is DGL's HeteroGraphConv as written for DGL.

DGL's own `NeighborSampler` object stays; sparsetrain's `DataLoader` reads its settings.
Run in an environment with DGL (`pip install torch==2.2.1 dgl==2.1.0 "torchdata<0.8"`); see docs/migrating_from_dgl.md.
The graph is made here (no download): a paper's class follows from its own and its authors' features.
"""

import dgl
import torch
import torch.nn.functional as F
from dgl.dataloading import NeighborSampler
from dgl.nn import GraphConv, HeteroGraphConv

from sparsetrain.dgl import DataLoader  # was: from dgl.dataloading import DataLoader, NeighborSampler

torch.manual_seed(0)
papers, authors, dim, classes = 2000, 1000, 16, 3
writes = (torch.randint(0, authors, (4000,)), torch.randint(0, papers, (4000,)))
cites = (torch.randint(0, papers, (8000,)), torch.randint(0, papers, (8000,)))
g = dgl.heterograph({("author", "writes", "paper"): writes, ("paper", "written-by", "author"): writes[::-1],
                     ("paper", "cites", "paper"): cites}, num_nodes_dict={"paper": papers, "author": authors})
g.nodes["paper"].data["feat"] = torch.randn(papers, dim)
g.nodes["author"].data["feat"] = torch.randn(authors, dim)
authors_mean = dgl.function.copy_u("feat", "m"), dgl.function.mean("m", "a")
g.update_all(*authors_mean, etype="writes")  # each paper's mean author feature (0 without an author)
w = torch.randn(dim, classes)
g.nodes["paper"].data["label"] = ((g.nodes["paper"].data["feat"] + 2 * g.nodes["paper"].data.pop("a")) @ w).argmax(1)
perm = torch.randperm(papers)
train_nids, test_nids = {"paper": perm[:1400]}, {"paper": perm[1400:]}


class RGCN(torch.nn.Module):
    def __init__(self, in_size, hidden, out_size, rel_names):
        super().__init__()
        self.conv1 = HeteroGraphConv({r: GraphConv(in_size, hidden, norm="right", allow_zero_in_degree=True)
                                      for r in rel_names}, aggregate="sum")
        self.conv2 = HeteroGraphConv({r: GraphConv(hidden, out_size, norm="right", allow_zero_in_degree=True)
                                      for r in rel_names}, aggregate="sum")
        self.self1 = torch.nn.Linear(in_size, hidden)  # R-GCN's self-loop weight
        self.self2 = torch.nn.Linear(hidden, out_size)

    def forward(self, blocks, x):
        h = self.conv1(blocks[0], x)
        h = {t: F.relu(v + self.self1(x[t][: blocks[0].num_dst_nodes(t)])) for t, v in h.items()}
        out = self.conv2(blocks[1], h)
        return {t: v + self.self2(h[t][: blocks[1].num_dst_nodes(t)]) for t, v in out.items()}


def inputs(input_nodes):
    return {t: g.nodes[t].data["feat"][ids.long()] for t, ids in input_nodes.items()}


train_loader = DataLoader(g, train_nids, NeighborSampler([{r: 5 for r in g.etypes}] * 2), batch_size=128,
                          shuffle=True)
test_loader = DataLoader(g, test_nids, NeighborSampler([-1, -1]), batch_size=1000)
model = RGCN(dim, 32, classes, g.etypes)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(6):
    model.train()
    for input_nodes, output_nodes, blocks in train_loader:
        logits = model(blocks, inputs(input_nodes))["paper"]
        loss = F.cross_entropy(logits, g.nodes["paper"].data["label"][output_nodes["paper"].long()])
        opt.zero_grad()
        loss.backward()
        opt.step()

model.eval()
correct = 0
with torch.no_grad():
    for input_nodes, output_nodes, blocks in test_loader:
        pred = model(blocks, inputs(input_nodes))["paper"].argmax(1)
        correct += int((pred == g.nodes["paper"].data["label"][output_nodes["paper"].long()]).sum())
print(f"test accuracy {correct / len(test_nids['paper']):.4f}")
