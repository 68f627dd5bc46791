"""The padded (static-shape) training step against the eager step on the unpadded batch."""

import copy

import pytest
import torch
import torch.nn.functional as F

import sparsetrain as st
from sparsetrain.engine.static.padded_batch import StaticBatch
from sparsetrain.engine.static.shapes import StepShapes
from sparsetrain.engine.static.step import StaticStep
from sparsetrain.errors import SettingError
from sparsetrain.nn.models import GAT, GCN, GraphSAGE
from sparsetrain.sampling import NeighborSampler, SamplerInput

FANOUTS = [5, 4]
BATCH = 48


@pytest.fixture(scope="module")
def cora(cora_data, tmp_path_factory):
    return st.datasets.from_pyg(cora_data, tmp_path_factory.mktemp("cora") / "cora", quiet=True)


def batches(cora, count, batch=BATCH, fanouts=FANOUTS):
    sampler = NeighborSampler(cora.graph, fanouts, seed=7)
    seeds = cora.split["train"]
    for k in range(count):
        part = seeds[(k * batch) % len(seeds):][:batch - 3 * k]  # a smaller batch each step: the padding changes
        mb = sampler.sample(SamplerInput(part, key=k))
        mb.x, mb.y = cora.features[mb.input_nodes], cora.labels[mb.seeds]
        yield mb


def eager_step(model, optimizer, mb):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(mb.x, mb.to_pyg()), mb.y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def test_bounds_follow_the_fanouts_and_stop_at_the_graph():
    shapes = StepShapes.bound(1024, [15, 10, 5], num_nodes=2_449_029)
    assert shapes.nodes == (1025, 16385, 180225, 1081345)  # each bound + the sink row
    assert shapes.edges == (15360, 163840, 901120)
    assert shapes.block(0) == (1081345, 180225, 901120)  # outermost block first, as MiniBatch.blocks
    fused = StepShapes.bound(1024, [15, 10, 5], num_nodes=2_449_029, fuse_last_hop=True)
    assert fused.nodes == (1025, 16385, 180225) and fused.edges == (15360, 163840) and fused.fused  # no input level
    assert StepShapes.bound(4, [3, -1], num_nodes=100, fuse_last_hop=True).edges == (12,)  # (the fused -1: no bound)
    small = StepShapes.bound(64, [10, 10], num_nodes=500)
    assert small.nodes == (65, 501, 501) and small.edges == (640, 5000)
    assert StepShapes.bound(4, [-1], num_nodes=100, max_degree=7).edges == (28,)
    with pytest.raises(SettingError, match="max_degree"):
        StepShapes.bound(4, [-1], num_nodes=100)


@pytest.mark.parametrize("spmm", [True, False], ids=["spmm", "scatter"])
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_padded_step_matches_the_eager_step(cora, spmm, dropout):
    torch.manual_seed(0)
    model = GraphSAGE(cora.num_features, 32, 7, num_layers=2, dropout=dropout, spmm=spmm)
    padded_model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    padded_opt = torch.optim.Adam(padded_model.parameters(), lr=0.01)
    shapes = StepShapes.bound(BATCH, FANOUTS, cora.num_nodes)
    step = StaticStep(padded_model, padded_opt, shapes, cora.num_features)
    assert step.mode == "eager"
    for k, mb in enumerate(batches(cora, 4)):
        assert mb.input_nodes.numel() < shapes.nodes[-1] - 1  # the batch is really padded
        torch.manual_seed(100 + k)  # the same dropout draws for both
        want = eager_step(model, opt, mb)
        torch.manual_seed(100 + k)
        got = step.step(mb)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        for (name, p), q in zip(model.named_parameters(), padded_model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)
    assert step.steps == 4


def fused_batches(cora, count, fanouts=FANOUTS, **options):
    """A fused sampler's batches (``neighbor_mean`` attached, as the fetch stage attaches it), smaller each step."""
    sampler = NeighborSampler(cora.graph, fanouts, seed=7, fuse_last_hop=True, **options)
    features, seeds = cora.features[torch.arange(cora.num_nodes)], cora.split["train"]
    for k in range(count):
        mb = sampler.sample(SamplerInput(seeds[(k * BATCH) % len(seeds):][:BATCH - 3 * k], key=k))
        mb.x, mb.y, mb.neighbor_mean = features[mb.input_nodes], cora.labels[mb.seeds], mb.last_hop.mean(features)
        yield mb


@pytest.mark.parametrize("fanouts, options", [(FANOUTS, {}), ([5, 4, 3], {"hop_nodes": "new"}), ([5], {}),
                                              ([4, -1], {})], ids=["2 hops", "3 hops new", "1 hop", "all last"])
def test_padded_fused_step_matches_the_eager_fused_step(cora, fanouts, options):
    """--step static --fuse-last-hop on the CPU: levels 0..L-1 padded, the mean padded with zero rows; the same losses
    and weights as the eager step on the fused batches, and far fewer padded rows than the unfused input level."""
    torch.manual_seed(0)
    model = GraphSAGE(cora.num_features, 32, 7, num_layers=len(fanouts), dropout=0.5)
    padded_model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    shapes = StepShapes.bound(BATCH, fanouts, cora.num_nodes, max_degree=200, fuse_last_hop=True)
    assert shapes.fused and shapes.nodes == StepShapes.bound(BATCH, fanouts[:-1], cora.num_nodes).nodes
    step = StaticStep(padded_model, torch.optim.Adam(padded_model.parameters(), lr=0.01), shapes, cora.num_features)
    assert step.batch.neighbor_mean.shape == (shapes.nodes[-1], cora.num_features)
    for k, mb in enumerate(fused_batches(cora, 4, fanouts, **options)):
        n = mb.input_nodes.numel()
        assert n < shapes.nodes[-1] - (k > 0) and mb.neighbor_mean.abs().sum() > 0  # padded, and a mean to read
        torch.manual_seed(100 + k)  # the same dropout draws for both
        opt.zero_grad(set_to_none=True)
        want = F.cross_entropy(model(mb.x, mb.to_pyg(), neighbor_mean=mb.neighbor_mean), mb.y)
        want.backward()
        opt.step()
        torch.manual_seed(100 + k)
        got = step.step(mb)
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
        assert torch.equal(step.batch.neighbor_mean[:n], mb.neighbor_mean) and not step.batch.neighbor_mean[n:].any()
        for (name, p), q in zip(model.named_parameters(), padded_model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)


def test_a_fused_batch_and_unfused_shapes_do_not_mix(cora):
    model = GraphSAGE(cora.num_features, 8, 7)
    plain = StaticStep(model, torch.optim.SGD(model.parameters(), lr=0.1),
                       StepShapes.bound(BATCH, FANOUTS, cora.num_nodes), cora.num_features)
    with pytest.raises(SettingError, match="a padded step takes batches of 2 blocks; this one has 1"):
        plain.step(next(fused_batches(cora, 1)))
    fused = StaticStep(model, torch.optim.SGD(model.parameters(), lr=0.1),
                       StepShapes.bound(BATCH, [5, 4, 3], cora.num_nodes, fuse_last_hop=True), cora.num_features)
    with pytest.raises(SettingError, match="shapes are for a fused last hop but the batch has no neighbor_mean"):
        fused.step(next(batches(cora, 1)))


def test_padded_step_matches_the_eager_step_in_bf16(cora):
    from sparsetrain.engine.precision import autocast

    torch.manual_seed(0)
    model = GraphSAGE(cora.num_features, 32, 7, num_layers=2, dropout=0.5)
    padded_model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    step = StaticStep(padded_model, torch.optim.Adam(padded_model.parameters(), lr=0.01),
                      StepShapes.bound(BATCH, FANOUTS, cora.num_nodes), cora.num_features, precision="bf16")
    for k, mb in enumerate(batches(cora, 3)):
        torch.manual_seed(k)
        opt.zero_grad(set_to_none=True)
        with autocast("bf16", "cpu"):
            want = F.cross_entropy(model(mb.x, mb.to_pyg()).float(), mb.y)
        want.backward()
        opt.step()
        torch.manual_seed(k)
        torch.testing.assert_close(step.step(mb), want.detach(), rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), padded_model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)


def test_the_model_sees_the_same_shapes_every_batch(cora):
    model = GraphSAGE(cora.num_features, 16, 7, num_layers=2, dropout=0.0, spmm=False)
    shapes = StepShapes.bound(BATCH, FANOUTS, cora.num_nodes)
    step = StaticStep(model, torch.optim.SGD(model.parameters(), lr=0.1), shapes, cora.num_features)
    seen = []
    model.register_forward_pre_hook(
        lambda _, args: seen.append((args[0].shape, args[0].data_ptr(),
                                     [(ei.shape, ei.data_ptr(), size) for ei, size in args[1]])))
    sizes = set()
    for mb in batches(cora, 4):
        sizes.add(mb.input_nodes.numel())
        step.step(mb)
    assert len(sizes) == 4  # four batch sizes ...
    assert all(s == seen[0] for s in seen)  # ... one set of shapes and buffers
    assert seen[0][0] == (shapes.nodes[-1], cora.num_features)
    assert [e[0][1] for e in seen[0][2]] == [shapes.edges[1], shapes.edges[0]]


def _spread(real: int, pad: int, rows: int) -> list[int]:
    """Hand-written spread of ``pad`` padded edges over rows ``real .. rows - 1``: edge k to row real + k * P // pad."""
    per_row = rows - real
    return [real + (k * per_row) // pad for k in range(pad)]


def test_padded_edges_are_spread_over_the_padding_rows_in_order(cora):
    mb = next(batches(cora, 1))
    shapes = StepShapes.bound(BATCH, FANOUTS, cora.num_nodes)
    buf = StaticBatch(shapes, cora.num_features, csr=True)
    buf.load(mb)
    n, e0 = mb.input_nodes.numel(), mb.blocks[0].num_edges
    assert torch.equal(buf.x[:n], mb.x) and not buf.x[n:].any()
    assert buf.weight.sum() == len(mb.seeds) == buf.count
    assert torch.equal(buf.edge_index[0][:, :e0], mb.blocks[0].edge_index)
    num_src, num_dst, num_edges = shapes.block(0)
    block, pad = mb.blocks[0], num_edges - e0
    assert buf.edge_index[0][0, e0:].tolist() == _spread(block.num_src, pad, num_src)
    assert buf.edge_index[0][1, e0:].tolist() == _spread(block.num_dst, pad, num_dst)
    dst = buf.edge_index[0][1]
    assert bool((dst[1:] >= dst[:-1]).all())  # still grouped by destination: its CSR takes the sources as they stand
    dense = buf.adj_t[0].to_dense()  # the CSR over the fixed buffers is the padded block's adjacency
    want = torch.zeros(num_dst, num_src)
    want.index_put_((buf.edge_index[0][1], buf.edge_index[0][0]), torch.ones(shapes.edges[-1]), accumulate=True)
    assert torch.equal(dense, want)


def test_a_padded_blocks_rows_hold_at_most_their_share_of_the_padding(cora):
    """The largest row of a padded block's CSR: no more than the fanout (a real row) or the padded edges' share of the
    padding rows, rounded up (where one sink row used to hold every padded edge; a level filled to its bound has only
    its sink row to take them)."""
    shapes = StepShapes.bound(BATCH, FANOUTS, cora.num_nodes)
    buf = StaticBatch(shapes, cora.num_features, csr=True)
    for mb in batches(cora, 4):
        buf.load(mb)
        for i, block in enumerate(mb.blocks):
            num_src, num_dst, num_edges = shapes.block(i)
            pad = num_edges - block.num_edges
            row_nnz = buf.adj_t[i].crow_indices().diff()
            share = -(-pad // (num_dst - block.num_dst))
            fanout = FANOUTS[len(FANOUTS) - 1 - i]
            assert int(row_nnz.max()) <= max(fanout, share), (i, int(row_nnz.max()), fanout, share)
            assert int(row_nnz[block.num_dst:].sum()) == pad and int(row_nnz[: block.num_dst].sum()) == block.num_edges
            if num_dst - block.num_dst > 1:  # (a full level has its sink row only: its deficit stays there)
                assert pad > share  # (the old sink row held all `pad`)


def test_refusals_are_one_line(cora):
    shapes = StepShapes.bound(BATCH, FANOUTS, cora.num_nodes)
    sage = GraphSAGE(cora.num_features, 8, 7)
    for model in (GCN(cora.num_features, 8, 7), GAT(cora.num_features, 8, 7)):
        with pytest.raises(SettingError, match="GraphSAGE only, not (gcn|gat)"):
            StaticStep(model, torch.optim.SGD(model.parameters(), lr=0.1), shapes, cora.num_features)
    with pytest.raises(SettingError, match="needs a CUDA device"):
        StaticStep(sage, torch.optim.SGD(sage.parameters(), lr=0.1), shapes, cora.num_features, mode="graph")
    small = StaticStep(sage, torch.optim.SGD(sage.parameters(), lr=0.1), StepShapes.bound(8, FANOUTS, cora.num_nodes),
                       cora.num_features)
    with pytest.raises(SettingError, match="above its padded bounds"):
        small.step(next(batches(cora, 1)))


@pytest.mark.slow
def test_compiled_padded_step_matches_the_eager_step(cora):
    torch.manual_seed(0)
    model = GraphSAGE(cora.num_features, 16, 7, num_layers=2, dropout=0.0, spmm=False)
    compiled_model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    step = StaticStep(compiled_model, torch.optim.Adam(compiled_model.parameters(), lr=0.01),
                      StepShapes.bound(BATCH, FANOUTS, cora.num_nodes), cora.num_features, mode="compile")
    for mb in batches(cora, 3):
        torch.testing.assert_close(step.step(mb), eager_step(model, opt, mb), rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), compiled_model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)


def _run_losses(cora, log, *extra) -> list[float]:
    import json

    from sparsetrain.cli import main

    argv = ["train", "--data", cora.path, "--fanout", "5,5", "--batch-size", "64", "--hidden", "32", "--epochs", "2",
            "--seed", "3", "--eval", "sampled", "--quiet", "--metrics-log", log, *extra]
    assert main([str(a) for a in argv]) == 0
    return [r["loss"] for r in map(json.loads, log.read_text().splitlines()) if "loss" in r]


def test_train_step_static_gives_the_eager_runs_losses(cora, tmp_path, monkeypatch):
    eager = _run_losses(cora, tmp_path / "eager.jsonl")
    padded, step = [], StaticStep.step
    monkeypatch.setattr(StaticStep, "step", lambda self, mb: padded.append(self.batch.x.shape) or step(self, mb))
    static = _run_losses(cora, tmp_path / "static.jsonl", "--step", "static")
    assert len(static) == len(eager) == len(padded) == 6  # 140 train seeds: 3 batches an epoch, each one padded
    assert set(padded) == {(StepShapes.bound(64, [5, 5], cora.num_nodes).nodes[-1], cora.num_features)}
    assert static == pytest.approx(eager, rel=1e-5)


@pytest.mark.parametrize("extra, refused", [(["--model", "gcn"], "not --model gcn"),
                                            (["--fanout", "5,-1"], "samples all neighbours")])
def test_train_step_static_refuses_what_it_cannot_pad_in_one_line(cli, cora, tmp_path, extra, refused):
    code, _, err = cli("train", "--data", cora.path, "--step", "static", "--epochs", "1", "--quiet", *extra)
    assert code != 0 and refused in err and "--step static" in err and "Traceback" not in err


@pytest.mark.gpu
@pytest.mark.parametrize("spmm", [True, False], ids=["spmm", "scatter"])
def test_captured_step_matches_the_eager_step_on_the_gpu(cora, spmm):
    torch.manual_seed(0)
    model = GraphSAGE(cora.num_features, 32, 7, num_layers=2, dropout=0.0, spmm=spmm).cuda()
    captured_model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    step = StaticStep(captured_model, torch.optim.Adam(captured_model.parameters(), lr=0.01, capturable=True),
                      StepShapes.bound(BATCH, FANOUTS, cora.num_nodes), cora.num_features, device="cuda",
                      mode="graph")
    assert step.mode == "graph"
    for mb in batches(cora, 7):  # 3 eager warm-up steps, then one capture and replays
        mb = mb.to("cuda")
        torch.testing.assert_close(step.step(mb), eager_step(model, opt, mb), rtol=1e-4, atol=1e-5)
    assert step._graph is not None
    for p, q in zip(model.parameters(), captured_model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)


def test_a_hop_never_pads_to_more_edges_than_the_graph_has():
    # without replacement a hop's distinct nodes draw subsets of their own in-edges: at most the graph's edges
    huge = StepShapes.bound(64, [2**31 - 1, 2**31 - 1], num_nodes=500, num_edges=6000)
    assert huge.nodes == (65, 501, 501) and huge.edges == (6000, 6000)
    assert StepShapes.bound(64, [10, 10], num_nodes=500, num_edges=6000).edges == (640, 5000)  # below: unchanged


def test_train_step_static_with_a_fanout_above_every_degree_pads_to_the_graph(cora, tmp_path, monkeypatch):
    widths = []
    init = StaticBatch.__init__
    monkeypatch.setattr(StaticBatch, "__init__", lambda self, shapes, *a, **k: widths.append(shapes.edges)
                        or init(self, shapes, *a, **k))
    losses = _run_losses(cora, tmp_path / "m.jsonl", "--step", "static", "--fanout", "2147483647,2147483647")
    assert len(losses) == 6 and widths == [(cora.num_edges, cora.num_edges)]


def test_a_padded_batch_too_large_to_allocate_is_one_line():
    shapes = StepShapes.bound(10**6, [10**6, 10**6], num_nodes=10**9)
    with pytest.raises(SettingError, match=r"pads every batch to 1000000001 input nodes .* lower --batch-size") as info:
        StaticBatch(shapes, 100)
    assert "\n" not in str(info.value)


@pytest.mark.gpu
def test_captured_step_on_batches_sampled_into_its_buffers(cora):
    """The sync-free path: the GPU sampler draws each batch into the captured step's buffers (StaticBatch.sample),
    the same losses and weights as the eager step on the eager batches of the same keys."""
    torch.manual_seed(0)
    model = GraphSAGE(cora.num_features, 32, 7, num_layers=2, dropout=0.0).cuda()
    captured_model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    graph = cora.graph.to("cuda")
    step = StaticStep(captured_model, torch.optim.Adam(captured_model.parameters(), lr=0.01, capturable=True),
                      StepShapes.bound(BATCH, FANOUTS, cora.num_nodes, num_edges=graph.num_edges), cora.num_features,
                      device="cuda", mode="graph")
    sampler = NeighborSampler(graph, FANOUTS, seed=7)
    features = cora.features[torch.arange(cora.num_nodes)].cuda()
    labels, seeds = cora.labels.cuda(), cora.split["train"].cuda()
    for k in range(7):
        inp = SamplerInput(seeds[(k * BATCH) % len(seeds):][:BATCH - 3 * k], key=k)
        mb = sampler.sample(inp)
        mb.x, mb.y = features[mb.input_nodes], labels[mb.seeds]
        step.batch.sample(sampler, inp, features, labels)
        torch.testing.assert_close(step.step(step.batch), eager_step(model, opt, mb), rtol=1e-4, atol=1e-5)
    sampler.check_padded()
    for p, q in zip(model.parameters(), captured_model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)


def test_the_plan_decides_what_a_static_step_captures():
    from sparsetrain.engine.plan import capture_plan

    shapes = StepShapes.bound(BATCH, FANOUTS, 2708)
    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    assert capture_plan(shapes, gpu, "device", graph_on_device=True) == "sampling+step"
    for placement, on_device in [("pinned", True), ("mmap", True), ("cached", True), ("device", False)]:
        assert capture_plan(shapes, gpu, placement, graph_on_device=on_device) == "step"  # the loader fills buffers
    assert capture_plan(shapes, cpu, "memory", graph_on_device=False) is None  # a CPU's static step runs eagerly
    assert capture_plan(None, gpu, "device", graph_on_device=True) is None  # the eager step


def test_a_batch_planned_to_be_sampled_in_that_cannot_be_is_an_error_not_the_other_path(cora):
    from sparsetrain.engine.static.sampled_loader import sampled_loader

    model = GraphSAGE(cora.num_features, 8, 7)
    step = StaticStep(model, torch.optim.SGD(model.parameters(), lr=0.1), StepShapes.bound(8, FANOUTS, cora.num_nodes),
                      cora.num_features)
    loader = st.Loader(NeighborSampler(cora.graph, FANOUTS), cora.features, cora.labels, cora.split["train"],
                       batch_size=8)
    with pytest.raises(SettingError) as info:  # (a library call too: no silent fallback to the loader's batches)
        sampled_loader(loader, step, capture=True)
    assert str(info.value) == ("--step static on cpu was planned to sample each batch into the step's buffers and "
                               "capture it, but the step runs on cpu; run without capture: drop --step static")


@pytest.mark.gpu
def test_a_failed_step_capture_is_an_error_naming_why(cora, monkeypatch):
    from sparsetrain.errors import BackendError

    model = GraphSAGE(cora.num_features, 8, 7).cuda()
    step = StaticStep(model, torch.optim.Adam(model.parameters(), lr=0.01, capturable=True),
                      StepShapes.bound(BATCH, FANOUTS, cora.num_nodes), cora.num_features, device="cuda", warmup=1,
                      mode="graph")

    def no_graphs(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(torch.cuda, "graph", no_graphs)
    mbs = [mb.to("cuda") for mb in batches(cora, 2)]
    step.step(mbs[0])  # the warm-up step, eager
    with pytest.raises(BackendError, match="capturing the static step as a CUDA graph failed .RuntimeError: operation "
                                           "not permitted when stream is capturing.; run without capture: drop "
                                           "--step static"):
        step.step(mbs[1])
