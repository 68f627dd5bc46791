"""Train a graph transformer (exact sparse attention along edges + dense attention within clusters).

    python examples/train_graph_transformer.py   # Cora, from the files shipped in the package
    sparsetrain preprocess --edges ... --reorder cluster --out data/mygraph   # clusters.npy for cluster attention
    python examples/train_graph_transformer.py data/mygraph

A dataset built without ``--reorder cluster`` works too: each connected subgraph of a batch is
then one cluster. The same through the CLI: sparsetrain train --data data/mygraph --model gt
"""

import sys

import torch
import torch.nn.functional as F

import sparsetrain as st
from sparsetrain.datasets import load_clusters
from sparsetrain.engine.default_data import open_dataset
from sparsetrain.nn import GraphTransformer
from sparsetrain.sampling import ClusterSampler

ds = open_dataset(sys.argv[1] if len(sys.argv) > 1 else "cora")  # a folder, or a built-in built once into a cache
clusters = load_clusters(ds)  # cluster id per node, or None
print(f"{ds}: {'no clusters' if clusters is None else f'{int(clusters.max()) + 1} clusters'}")
features = ds.feature_store()

# the sampler wrapper attaches each batch's cluster and subgraph ids (attention never crosses subgraphs)
sampler = ClusterSampler(st.sampling.NeighborSampler(ds.graph, [10, 10], seed=0), clusters)
loader = st.engine.Loader(sampler, features, ds.labels, ds.split["train"], batch_size=256, seed=0)
test_sampler = ClusterSampler(st.sampling.NeighborSampler(ds.graph, [10, 10], seed=1), clusters)
test_loader = st.engine.Loader(test_sampler, features, ds.labels, ds.split["test"], batch_size=1024, shuffle=False)

# two hops: sparse, cluster, sparse, cluster; global_attention=True adds a linear-attention term per subgraph
model = GraphTransformer(ds.num_features, 128, ds.num_classes, num_layers=2, heads=4, dropout=0.5)
optimizer = torch.optim.Adam(model.parameters(), lr=0.003, weight_decay=5e-4)

for epoch in range(5):
    model.train()
    for mb in loader.epoch(epoch):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(mb.x, mb.to_pyg()), mb.y)  # to_pyg(): hops, then the batch's clusters
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(mb.x, mb.to_pyg()).argmax(1) == mb.y).sum().item() for mb in test_loader)
    print(f"epoch {epoch}: loss {loss.item():.3f}, test accuracy {correct / len(ds.split['test']):.4f}")
