"""Layer-wise full-graph inference equals per-node inference with every neighbor (PyG blocks from fanout -1)."""

import numpy as np
import pytest
import torch

import sparsetrain as st
from sparsetrain.nn.models import GAT, GraphSAGE
from sparsetrain.sampling import NeighborSampler, SamplerInput
from sparsetrain.storage import MmapFeatures


@pytest.fixture(scope="module")
def cora(cora_data, tmp_path_factory):
    return st.datasets.from_pyg(cora_data, tmp_path_factory.mktemp("cora") / "cora", quiet=True)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return st.datasets.synthesize(tmp_path_factory.mktemp("synth") / "g", 1500, 16_000, feature_dim=24, num_classes=6,
                                  feature_dtype="float16", seed=3, quiet=True)


def per_node_inference(model, ds, num_layers, batch_size=700):
    """Each node's own L-hop neighborhood with every neighbor (fanout -1), one sampled block stack per batch."""
    sampler = NeighborSampler(ds.graph, [-1] * num_layers, seed=0)
    outs = []
    with torch.no_grad():
        for key, seeds in enumerate(torch.arange(ds.num_nodes).split(batch_size)):
            mb = sampler.sample(SamplerInput(seeds, key=key))
            outs.append(model(ds.features[mb.input_nodes].float(), mb.to_pyg()))
    return torch.cat(outs)


@pytest.mark.parametrize("make, layers", [(GraphSAGE, 3), (GAT, 2)])
@pytest.mark.parametrize("data", ["cora", "synthetic"])
def test_layerwise_equals_per_node_inference(request, data, make, layers):
    ds = request.getfixturevalue(data)
    torch.manual_seed(0)
    model = make(ds.num_features, 16, ds.num_classes, num_layers=layers).eval()
    reference = per_node_inference(model, ds, layers)
    out = st.engine.layerwise_inference(model, ds, batch_size=512)
    assert isinstance(out, torch.Tensor) and out.shape == reference.shape
    assert torch.allclose(out, reference, atol=1e-5)


def test_layer_tables_above_the_budget_go_to_disk_and_give_the_same_result(synthetic, tmp_path):
    torch.manual_seed(1)
    model = GraphSAGE(synthetic.num_features, 32, synthetic.num_classes, num_layers=3).eval()
    in_memory = st.engine.layerwise_inference(model, synthetic, batch_size=1000)
    spilled = st.engine.layerwise_inference(
        model, synthetic, batch_size=1000, memory_budget=synthetic.num_nodes * 4 * 4, spill_dir=tmp_path
    )  # every layer (32, 32, 6 wide) spills
    assert isinstance(spilled, MmapFeatures)
    assert spilled.shape == in_memory.shape
    assert torch.equal(spilled.gather(torch.arange(synthetic.num_nodes)), in_memory)
    assert [p.name for p in tmp_path.iterdir()] == ["layer2.npy"]  # earlier layers' files are gone


def test_auto_eval_picks_layerwise_on_small_graphs_and_where_its_weighted_edges_are_fewer():
    from sparsetrain.engine.inference import layerwise_cost, sampled_cost
    from sparsetrain.engine.plan import full_eval_is_cheaper
    from sparsetrain.sampling import Fanouts

    assert layerwise_cost(1_000, 3) == 3_000 and sampled_cost(2, Fanouts([15, 10, 5])) == 2 * (15 + 150 + 750)
    assert sampled_cost(10, Fanouts([-1, 5])) == np.inf
    fanout = Fanouts([15, 10, 5])

    def picks(nodes, edges, eval_nodes):
        return full_eval_is_cheaper(nodes, edges, fanout, eval_nodes)

    assert picks(2708, 10_556, 1_500)  # Cora
    assert not picks(200_000, 2_000_000, 80_000)  # measured: layer-wise 93 s, sampled 66 s
    assert not picks(111_059_956, 1_615_685_872, 339_000)  # papers100M
    assert picks(200_000, 2_000_000, 200_000)  # 16 x 6M weighted layer-wise edges < 183M sampled ones
