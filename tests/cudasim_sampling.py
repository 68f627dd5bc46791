"""GPU sampler kernels under the Numba CUDA simulator, checked against the CPU sampler.

Run by tests/test_sampling_cuda.py in a subprocess with NUMBA_ENABLE_CUDASIM=1
(the variable must be set before numba.cuda is imported). Prints one JSON
object: check name -> "ok" or the failure.
"""

from __future__ import annotations

import os

import numpy as np
import torch

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", "run with NUMBA_ENABLE_CUDASIM=1"

from sparsetrain.sampling import CSCGraph, NeighborSampler, SamplerInput  # noqa: E402
from sparsetrain.sampling.cuda import driver  # noqa: E402
from sparsetrain.sampling.cuda.arrays import NumpyArrays  # noqa: E402
from sparsetrain.sampling.cuda.padded import PaddedOut  # noqa: E402
from sparsetrain.sampling.cuda.workspace import DeviceWorkspace  # noqa: E402
from sparsetrain.sampling.fanouts import Fanouts  # noqa: E402
from sparsetrain.sampling.layout import KernelLayout  # noqa: E402
from sparsetrain.sampling.rng import hop_key  # noqa: E402


def graph(num_nodes=60, num_edges=500, seed=0, weighted=False) -> CSCGraph:
    g = torch.Generator().manual_seed(seed)
    ei = torch.unique(torch.randint(0, num_nodes, (2, num_edges), generator=g), dim=1)
    return CSCGraph.from_edge_index(ei, num_nodes, torch.rand(ei.shape[1], generator=g) if weighted else None)


def gpu_layers(g: CSCGraph, seeds, fanouts, *, replace=False, weighted=False, hop_nodes="all", seed=5, batch=7,
               ops=None, seed_type=0, workspace=None, padded=None, capture=False):
    """The GPU hop loop's own result: per hop ``(edge_index, edge_ids, segments, before, after)``, nodes per type."""
    indptr, indices, weights = g.numpy()
    weights = weights if weighted else np.empty(1, np.float32)
    edge_perm = None if g.edge_perm is None else g.edge_perm.numpy()
    layout = KernelLayout(g, Fanouts(fanouts))
    keys = [layout.hop_keys(seed, batch, h) for h in range(layout.fanouts.shape[0])]
    if not g.is_typed:
        assert [int(k[0]) for k in keys] == [int(hop_key(seed, batch, h)) for h in range(len(fanouts))]
    with np.errstate(all="ignore"):  # uint64 products wrap on purpose
        return driver.sample_arrays(ops or NumpyArrays(), indptr, indices, weights, np.asarray(seeds, np.int64), layout,
                                keys, replace, weighted, edge_perm=edge_perm, new_only=hop_nodes == "new",
                                seed_type=seed_type, workspace=workspace, padded=padded, capture=capture)


def gpu_sample(g: CSCGraph, seeds, fanouts, **kw):
    """A homogeneous graph's hops as ``([(edge_index, num_src, num_dst, edge_ids)], nodes)``."""
    layers, nodes = gpu_layers(g, seeds, fanouts, **kw)
    return [(ei, int(after[0]), int(before[0]), ids) for ei, ids, _, before, after in layers], nodes[0]


def assert_same_as_cpu(g, seeds, fanouts, ops=None, **kw):
    layers, nodes = gpu_sample(g, seeds, fanouts, ops=ops, **kw)
    mb = NeighborSampler(g, fanouts, seed=5, **kw).sample(SamplerInput(torch.tensor(seeds), key=7))
    assert np.array_equal(nodes, mb.input_nodes.numpy()), "input nodes differ from the CPU sampler"
    for (edge_index, num_src, num_dst, edge_ids), block in zip(reversed(layers), mb.blocks):
        assert (num_src, num_dst) == (block.num_src, block.num_dst), "block sizes differ"
        assert np.array_equal(edge_index, block.edge_index.numpy()), "block edges differ"
        assert np.array_equal(edge_ids, block.edge_ids.numpy()), "block edge ids differ"
    return layers, nodes


def check_uniform_without_replacement():
    assert_same_as_cpu(graph(), [3, 9, 11, 40], [3, 2, 2])


def check_uniform_with_replacement():
    assert_same_as_cpu(graph(seed=1), [0, 1, 2], [4, 3], replace=True)


def check_selection_sampling_large_fanout():
    assert_same_as_cpu(graph(80, 4000, seed=2), [5, 6], [40, 2])


def check_weighted_without_replacement():
    assert_same_as_cpu(graph(seed=3, weighted=True), [1, 7, 8], [3, 2], weighted=True)


def check_weighted_with_replacement():
    assert_same_as_cpu(graph(seed=4, weighted=True), [2, 4], [3, 3], weighted=True, replace=True)


def check_zero_weight_edges_and_zero_fanout():
    g = graph(seed=8, weighted=True)
    w = g.weights.clone()
    w[::3] = 0  # never drawn, on both targets
    g = CSCGraph(g.indptr, g.indices, w)
    assert_same_as_cpu(g, [2, 5, 9], [4, 0, 3], weighted=True)
    assert_same_as_cpu(g, [2, 5, 9], [4, 3], weighted=True, replace=True)


def check_full_fanout_is_exactly_the_in_edges():
    g = graph(50, 200, seed=5)
    layers, nodes = assert_same_as_cpu(g, [0, 10], [-1, -1])
    src_all, dst_all = g.to_edge_index().numpy()
    for edge_index, num_src, num_dst, _ in layers:
        got = sorted(zip(nodes[edge_index[0]].tolist(), nodes[edge_index[1]].tolist()))
        wanted = np.isin(dst_all, nodes[:num_dst])
        assert got == sorted(zip(src_all[wanted].tolist(), dst_all[wanted].tolist())), (
            "block is not the in-edges of its dst nodes"
        )
        assert len(set(nodes[:num_src].tolist())) == num_src, "a node appears twice"


def check_edge_ids_follow_the_edge_permutation():
    g = graph(seed=9)  # from_edge_index: edge ids are columns of the edge_index it was built from
    assert g.edge_perm is not None
    layers, nodes = assert_same_as_cpu(g, [3, 9, 11], [3, -1])
    ei = torch.unique(torch.randint(0, 60, (2, 500), generator=torch.Generator().manual_seed(9)), dim=1).numpy()
    for edge_index, _, _, edge_ids in layers:
        assert np.array_equal(ei[:, edge_ids], nodes[edge_index]), "edge ids do not name the sampled edges"
    plain = CSCGraph(g.indptr, g.indices)  # no edge_perm: CSC positions
    layers, nodes = assert_same_as_cpu(plain, [3, 9, 11], [3, -1])
    for edge_index, _, _, edge_ids in layers:
        assert np.array_equal(plain.to_edge_index().numpy()[:, edge_ids], nodes[edge_index]), (
            "edge ids are not CSC positions"
        )


def check_new_nodes_only_hops():
    g = graph(seed=10)
    assert_same_as_cpu(g, [3, 9, 11, 40], [3, 2, 2], hop_nodes="new")
    layers, nodes = assert_same_as_cpu(g, [0, 10], [-1, -1, 2], hop_nodes="new", replace=True)
    first = 0
    for edge_index, num_src, num_dst, _ in layers:
        assert (edge_index[1] >= first).all(), "a hop sampled for a node reached before the hop before"
        first = num_dst


def check_a_workspace_kept_across_batches_changes_nothing():
    g = graph(200, 3000, seed=7)
    ws = DeviceWorkspace(NumpyArrays())
    for seeds, fanouts in [([0, 1, 5], [5, 4, 3]), ([0, 1, 5], [5, 4, 3]), ([7], [5, 4, 3]), ([2, 9, 30], [5, 4, 3]),
                           ([0, 1, 5], [5, 4, 3])]:
        fresh = gpu_sample(g, seeds, fanouts)
        layers, nodes = gpu_sample(g, seeds, fanouts, workspace=ws)
        assert np.array_equal(nodes, fresh[1]), "nodes differ with a kept workspace"
        assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[3], b[3]) for a, b in zip(layers, fresh[0]))
        kept = len(ws._arrays)
    gpu_sample(g, [4, 8, 12], [5, 4, 3], workspace=ws)
    assert len(ws._arrays) == kept, "a batch of a shape seen before allocated new arrays"


def check_launch_shape_does_not_change_the_result():
    class Narrow(NumpyArrays):
        threads = 3

    g = graph(seed=6)
    wide = gpu_sample(g, [1, 2, 3, 4, 5], [3, 3])
    narrow = gpu_sample(g, [1, 2, 3, 4, 5], [3, 3], ops=Narrow())
    assert np.array_equal(wide[1], narrow[1])
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[3], b[3]) for a, b in zip(wide[0], narrow[0]))


class CountedReads(NumpyArrays):
    """NumPy arrays that count the host reads (each one is a wait for the device on a GPU)."""

    reads = 0

    def read(self, a):
        CountedReads.reads += 1
        return super().read(a)


def check_one_host_read_per_batch():
    CountedReads.reads = 0
    assert_same_as_cpu(graph(200, 3000, seed=7), [0, 1, 5], [5, 4, 3], ops=CountedReads())
    assert CountedReads.reads == 1, f"{CountedReads.reads} host reads in one batch"


class CountedLaunches:
    """Every kernel the driver can launch, wrapped to count its launches (independently of the driver's counts)."""

    def __enter__(self):
        from sparsetrain.sampling.cuda import batch

        self.launches, self.saved = 0, []
        for module in (driver, batch):
            for name in [n for n in vars(module) if n.endswith("_kernel") or n == "insert_known"]:
                kernel = getattr(module, name)
                self.saved.append((module, name, kernel))
                setattr(module, name, _Counted(kernel, self))
        return self

    def __exit__(self, *exc):
        for module, name, kernel in self.saved:
            setattr(module, name, kernel)


class _Counted:
    def __init__(self, kernel, counter):
        self.kernel, self.counter = kernel, counter

    def __getitem__(self, config):
        self.counter.launches += 1
        return self.kernel[config]


def _phases(ws) -> dict:
    return {p: {k: v for k, v in c.items() if v} for p, c in ws.last_counts.as_dict().items()}


# per hop: count, sample, first occurrences, numbering, relabel (+ the hop's books), and two scans; nothing else
HOP = {"launches": 7, "kernels": 5, "torch_ops": 2}
# the batch's one upload (layout, regions, every hop's constants, the record) and the seeds into their region; then
# the map cleared and the seeds inserted (with the seed checks)
SETUP = {"launches": 4, "kernels": 2, "torch_ops": 2, "copies": 2}


def check_launch_counts_of_a_node_batch():
    g = graph(200, 3000, seed=7)
    ws = DeviceWorkspace(CountedReads())
    with CountedLaunches() as launched:
        gpu_sample(g, [0, 1, 5], [5, 4, 3], workspace=ws)
    first = _phases(ws)
    # the first batch allocates its workspace: the pinned and device upload buffers, the nodes, the map's two arrays
    assert first["setup"] == {**SETUP, "allocations": 4, "pinned_allocations": 1}, first["setup"]
    # seg_start, seg_dst, cols, lo, deg, per_item, ends, the edges' pair, ids, slots, src_type, flags, ranks
    assert all(first[f"hop {h}"] == {**HOP, "allocations": 13} for h in range(3)), first
    CountedReads.reads = 0
    with CountedLaunches() as launched:
        gpu_sample(g, [0, 1, 5], [5, 4, 3], workspace=ws)
    steady = _phases(ws)
    # the read of the record, then every hop's edges and edge ids and the nodes copied out of the workspace
    finish = {"launches": 8, "torch_ops": 8, "copies": 8, "syncs": 1, "allocations": 7}
    assert steady == {"setup": SETUP, "hop 0": HOP, "hop 1": HOP, "hop 2": HOP, "finish": finish,
                      "batch": {"launches": 33, "kernels": 17, "torch_ops": 16, "copies": 10, "syncs": 1,
                                "allocations": 7}}, steady
    assert launched.launches == steady["batch"]["kernels"], (launched.launches, steady)
    assert CountedReads.reads == steady["batch"]["syncs"] == 1


def check_launch_counts_of_a_typed_batch():
    ws = DeviceWorkspace(CountedReads())
    for _ in range(2):
        CountedReads.reads = 0
        with CountedLaunches() as launched:
            gpu_layers(typed_graph(), [0, 5, 9, 33], [3, 2], seed_type=0, workspace=ws)
    counts = _phases(ws)
    finish = {"launches": 8, "torch_ops": 8, "copies": 8, "syncs": 1, "allocations": 7}  # 2 hops x 2 + 3 node types
    assert counts == {"setup": SETUP, "hop 0": HOP, "hop 1": HOP, "finish": finish,
                      "batch": {"launches": 26, "kernels": 12, "torch_ops": 14, "copies": 10, "syncs": 1,
                                "allocations": 7}}, counts
    assert launched.launches == 12 and CountedReads.reads == 1


def check_exact_sizes_past_the_bound_limit():
    # bounds past EXACT_ABOVE: every hop reads its counts, the node regions and the table grow (re-inserting the nodes)
    limit = driver.EXACT_ABOVE
    driver.EXACT_ABOVE = 10
    try:
        CountedReads.reads = 0
        assert_same_as_cpu(graph(200, 3000, seed=7), [0, 1], [5, 5, 5], ops=CountedReads())
        assert CountedReads.reads == 1 + 2 * 3, f"{CountedReads.reads} host reads: expected two a hop and the last"
        assert_same_as_cpu(graph(seed=10), [0, 10], [-1, -1, 2], hop_nodes="new", replace=True)
        assert_typed_same_as_cpu(typed_graph(), [0, 5, 9, 33], [3, 2])
        # the seeds have no topic in-edges: hop 1's bounds sample ('p', 'has', 't') for new topics, the counts don't
        rng = np.random.default_rng(3)
        of = np.stack([rng.integers(0, 6, 40), rng.integers(0, 5, 40)])
        sparse = CSCGraph.from_edge_index_dict({("p", "cites", "p"): torch.from_numpy(rng.integers(0, 30, (2, 200))),
                                                ("t", "of", "p"): torch.from_numpy(of),
                                                ("p", "has", "t"): torch.from_numpy(rng.integers(0, 6, (2, 40)))},
                                               {"p": 30, "t": 6})
        assert_typed_same_as_cpu(sparse, [10, 11, 12], [2, 2], seed_type="p", hop_nodes="new")
    finally:
        driver.EXACT_ABOVE = limit


def check_bad_seeds_are_errors():
    from sparsetrain.errors import InputError

    g = graph()
    for seeds, fragment in [([3, 60], "seeds has ids outside [0, 60)"), ([-1, 2], "seeds has ids outside [0, 60)"),
                            ([4, 9, 4], "seed 4 appears more than once")]:
        try:
            gpu_sample(g, seeds, [3, 2])
        except InputError as exc:
            assert fragment in str(exc), str(exc)
        else:
            raise AssertionError(f"seeds {seeds} sampled without an error")


def check_damaged_graph_is_an_error_not_a_stray_read():
    from sparsetrain.errors import InputError

    good = graph(seed=8)
    indptr, indices, _ = good.numpy()
    seeds = np.arange(good.num_nodes)
    for array, position, value, fragment in [
        ("indices", 17, 10**6, "CSCGraph.indices: entry 17 is 1000000"),
        ("indices", 40, -3, "CSCGraph.indices: entry 40 is -3"),
        ("indptr", 11, indptr[13], "CSCGraph.indptr: node 11's in-edges"),  # node 11's range runs backwards
        # nodes 29 and 30: past the edges, backwards
        ("indptr", 30, len(indices) + 5, "CSCGraph.indptr: node 30's in-edges"),
    ]:
        damaged = {"indptr": indptr.copy(), "indices": indices.copy()}
        damaged[array][position] = value
        g = CSCGraph.from_numpy(damaged["indptr"], damaged["indices"])
        # every edge is drawn
        for fanouts, kw in [([-1, 2], {}), ([50], {}), ([50, 3], {"replace": True, "weighted": False})]:
            try:
                gpu_sample(g, seeds, fanouts, **kw)
            except InputError as exc:
                assert fragment in str(exc) and "sparsetrain info" in str(exc), str(exc)
            else:
                raise AssertionError(
                    f"{array}[{position}] = {value} sampled with fanouts {fanouts} {kw} without an error"
                )


def padded_out(shapes) -> PaddedOut:
    return PaddedOut.allocate(shapes.nodes, shapes.edges, lambda shape: np.zeros(shape, np.int64))


def assert_spread(out, sizes, hop: int, real: int) -> None:
    """Hop ``hop``'s padded edges run from level ``hop + 1``'s padding rows to level ``hop``'s, spread in ascending
    order: padded edge k to row ``count + k * (rows - count) // padded`` of each (the rule, written out here)."""
    tail, pad = out.edge_index[hop][:, real:], out.edges[hop] - real
    k = np.arange(pad)
    want_src = sizes[hop + 1] + (k * (out.nodes[hop + 1] - sizes[hop + 1])) // max(pad, 1)
    want_dst = sizes[hop] + (k * (out.nodes[hop] - sizes[hop])) // max(pad, 1)
    assert np.array_equal(tail[0], want_src) and np.array_equal(tail[1], want_dst), f"hop {hop}: padding"


def assert_padded_same_as_eager(g, seeds, fanouts, out, ws=None, **kw):
    """The padded batch cut to its device sizes equals the eager driver's (itself checked against the CPU sampler),
    and every padded entry is what the static step expects: edges spread over the padding rows, node ids in the
    graph."""
    eager, nodes = assert_same_as_cpu(g, seeds, fanouts, **kw)
    assert gpu_layers(g, seeds, fanouts, padded=out, workspace=ws, **kw) is out
    sizes = out.sizes.tolist()
    assert sizes == [len(seeds)] + [num_src for _, num_src, _, _ in eager] + [ei.shape[1] for ei, *_ in eager], sizes
    edges, levels = out.unpadded(sizes)
    assert np.array_equal(levels[-1], nodes), "padded node ids differ"
    assert all(np.array_equal(lv, nodes[: len(lv)]) for lv in levels), "a level is not a prefix of the nodes"
    for hop, ((ei, *_), padded) in enumerate(zip(eager, edges)):
        assert np.array_equal(padded, ei), f"hop {hop}: padded edges differ"
        if ei.shape[1]:  # (a hop that sampled nothing runs sink to sink)
            assert_spread(out, sizes, hop, ei.shape[1])
    assert ((out.node_ids >= 0) & (out.node_ids < g.num_nodes)).all(), "a padded node id outside the graph"


def check_padded_batches_equal_eager_batches():
    from sparsetrain.engine.static.shapes import StepShapes

    g = graph(200, 3000, seed=7)
    out = padded_out(StepShapes.bound(4, [5, 4, 3], g.num_nodes, num_edges=g.num_edges))
    ws = DeviceWorkspace(NumpyArrays())
    # a full batch, then into the same buffers a smaller one (an epoch's last) and another: nothing of the last stays
    for seeds in ([0, 1, 5, 9], [7], [2, 9, 30, 44]):
        assert_padded_same_as_eager(g, seeds, [5, 4, 3], out, ws)
    assert_padded_same_as_eager(g, [3, 9, 11, 40], [5, 4, 3], out, ws, hop_nodes="new")
    # shapes capped by the graph: [50, 50] from 4 seeds pass its 3,000 edges and 200 nodes
    capped = StepShapes.bound(4, [50, 50], g.num_nodes, num_edges=g.num_edges)
    assert capped.edges[1] == g.num_edges and capped.nodes[-1] == g.num_nodes + 1, capped
    assert_padded_same_as_eager(g, [0, 1, 5, 9], [50, 50], padded_out(capped))
    replaced = StepShapes.bound(3, [4, 3], g.num_nodes)  # with replacement: not capped by the edges
    assert_padded_same_as_eager(g, [0, 1, 5], [4, 3], padded_out(replaced), replace=True)
    # a hop that samples nothing (fanout 0) is all padding
    zero = StepShapes.bound(2, [3, 0], g.num_nodes)
    out = padded_out(zero)
    out.edge_index[1][...] = 99
    assert_padded_same_as_eager(g, [4, 8], [3, 0], out)


def check_padded_batch_counts():
    from sparsetrain._late_reads import LateChecks
    from sparsetrain.engine.static.shapes import StepShapes

    g = graph(200, 3000, seed=7)
    out = padded_out(StepShapes.bound(3, [5, 4, 3], g.num_nodes, num_edges=g.num_edges))
    ws = DeviceWorkspace(CountedReads())
    CountedReads.reads = 0
    with CountedLaunches() as launched:
        for key in range(LateChecks.RING + 1):  # the ring's pinned buffers are made by its first batches
            gpu_layers(g, [0, 1, 5], [5, 4, 3], batch=key, padded=out, workspace=ws)
    counts = _phases(ws)
    # the upload, the seeds in; per hop as eager; then the sizes gathered from the record and its checks queued to
    # pinned memory: no host read, no copy out, no allocation
    finish = {"launches": 2, "torch_ops": 2, "copies": 1}
    assert counts == {"setup": SETUP, "hop 0": HOP, "hop 1": HOP, "hop 2": HOP, "finish": finish,
                      "batch": {"launches": 27, "kernels": 17, "torch_ops": 10, "copies": 3}}, counts
    reads = (CountedReads.reads, launched.launches)
    assert reads == (0, 17 * (LateChecks.RING + 1)), reads
    assert len(ws.late) == 1  # the simulator runs a batch at once: each is checked at the next call, but the last
    ws.late.drain()
    assert len(ws.late) == 0


def check_padded_bad_input_raises_one_batch_late():
    from sparsetrain.engine.static.shapes import StepShapes

    g = graph()
    out = padded_out(StepShapes.bound(3, [3, 2], g.num_nodes, num_edges=g.num_edges))
    for seeds, fragment in [([3, 60], "seeds has ids outside [0, 60)"), ([4, 9, 4], "seed 4 appears more than once")]:
        ws = DeviceWorkspace(NumpyArrays())
        # raised by the next batch, or at the end of the epoch
        for late in (lambda: gpu_layers(g, [1, 2], [3, 2], padded=out, workspace=ws), ws.late.drain):
            gpu_layers(g, seeds, [3, 2], padded=out, workspace=ws)  # queued: no error yet
            _raises(late, fragment)
    indptr, indices, _ = g.numpy()
    damaged = indices.copy()
    damaged[17] = 10**6
    bad = CSCGraph.from_numpy(indptr, damaged)
    ws = DeviceWorkspace(NumpyArrays())
    gpu_layers(bad, np.arange(3), [50], padded=padded_out(StepShapes.bound(3, [50], 60, num_edges=len(indices))),
               workspace=ws)
    _raises(ws.late.drain, "CSCGraph.indices: entry 17 is 1000000")
    for call, fragment in [
        (lambda: gpu_layers(g, [0, 1, 2, 3], [3, 2], padded=out), "level 0: 4 nodes > 3"),  # more seeds than shapes
        (lambda: gpu_layers(g, [0, 1], [5, 2], padded=out), "hop 0: 10 edges > 9"),  # a larger fanout
    ]:
        _raises(call, fragment)
    # a typed graph's batches are not padded: refused once, by the sampler (the driver samples what it is given)
    from sparsetrain.errors import BackendError

    try:
        NeighborSampler(typed_graph(), [3, 2], seed_type="paper").sample_padded(torch.tensor([0, 1]), out)
    except BackendError as exc:
        assert "padded batches need the one-type graph, and the graph has node types" in str(exc), str(exc)
    else:
        raise AssertionError("a typed graph's padded batch: no error")


def _raises(call, fragment: str) -> None:
    """``call()`` raises an InputError whose message holds ``fragment``."""
    from sparsetrain.errors import InputError

    try:
        call()
    except InputError as exc:
        assert fragment in str(exc), str(exc)
    else:
        raise AssertionError(f"{fragment!r}: no error")


def check_static_step_on_a_padded_batch_equals_the_eager_step():
    """The engine's use: batches sampled straight into a StaticBatch's buffers (here through NumPy views of its CPU
    tensors), its features and labels gathered there; the padded step's losses and weights equal the eager step's on
    the CPU sampler's batches of the same keys."""
    import copy

    import torch.nn.functional as F

    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.engine.static.step import StaticStep
    from sparsetrain.nn.models import GraphSAGE

    g = graph(300, 4000, seed=11)
    gen = torch.Generator().manual_seed(0)
    features, labels = torch.randn(g.num_nodes, 8, generator=gen), torch.randint(0, 4, (g.num_nodes,), generator=gen)
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 4, num_layers=2, dropout=0.0)
    padded_model = copy.deepcopy(model)
    opt, padded_opt = (torch.optim.Adam(m.parameters(), lr=0.01) for m in (model, padded_model))
    step = StaticStep(padded_model, padded_opt, StepShapes.bound(24, [4, 3], g.num_nodes, num_edges=g.num_edges), 8)
    batch = step.batch
    p = batch.padded
    views = PaddedOut(p.nodes, p.edges, p.node_ids.numpy(), [e.numpy() for e in p.edge_index], p.sizes.numpy())
    sampler, ws = NeighborSampler(g, [4, 3], seed=5), DeviceWorkspace(NumpyArrays())
    for key, seeds in enumerate([torch.arange(0, 240, 10), torch.arange(3, 300, 13), torch.arange(5, 50, 7)]):
        mb = sampler.sample(SamplerInput(seeds, key=key))
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(features[mb.input_nodes], mb.to_pyg()), labels[mb.seeds])
        loss.backward()
        opt.step()
        gpu_layers(g, seeds.numpy(), [4, 3], batch=key, padded=views, workspace=ws)
        batch.gather(seeds, features, labels)
        n = len(mb.input_nodes)
        assert torch.equal(batch.x[:n], features[mb.input_nodes]), "features"
        assert torch.equal(batch.x, features[batch.node_ids]), "padded rows: rows of the buffer's (graph) node ids"
        padded_loss = step.step(batch)
        assert torch.allclose(padded_loss, loss.detach(), rtol=1e-5, atol=1e-6), (key, padded_loss, loss)
    for a, b in zip(model.parameters(), padded_model.parameters()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), "weights differ after three steps"
    ws.late.drain()


class SimulatedSampler:
    """A NeighborSampler whose padded batches are drawn by the driver under the simulator, into NumPy views of the
    (CPU) tensors it is handed: what ``sample_padded`` does on a GPU."""

    def __init__(self, sampler, fanouts):
        self.sampler, self.fanouts, self.ws = sampler, fanouts, DeviceWorkspace(NumpyArrays())

    def __getattr__(self, name):
        return getattr(self.sampler, name)

    def sample_padded(self, inp, out, capture=False, features=None):
        views = PaddedOut(out.nodes, out.edges, out.node_ids.numpy(), [e.numpy() for e in out.edge_index],
                          out.sizes.numpy())
        gpu_layers(self.sampler.graph, inp.seeds.numpy(), self.fanouts, seed=self.sampler.seed, batch=inp.key,
                   padded=views, workspace=self.ws, capture=capture)

    def check_padded(self):
        self.ws.late.drain()


def _static_steps_and_loaders(batch_size: int, seeds: torch.Tensor, capture: bool):
    """Two static steps of one GraphSAGE (a copy each) and the batches for them on a small graph: the ``Loader``'s
    over a simulated GPU sampler, and a ``SampledLoader`` (``capture``d or not) over the same loader for the second
    step. Returns ``(steps, sampler, loader, sampled)``."""
    import copy

    from sparsetrain.engine.loader import Loader
    from sparsetrain.engine.static.sampled_loader import SampledLoader
    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.engine.static.step import StaticStep
    from sparsetrain.nn.models import GraphSAGE

    g = graph(300, 4000, seed=12)
    gen = torch.Generator().manual_seed(1)
    features, labels = torch.randn(g.num_nodes, 8, generator=gen), torch.randint(0, 4, (g.num_nodes,), generator=gen)
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 4, num_layers=2, dropout=0.0)
    shapes = StepShapes.bound(batch_size, [4, 3], g.num_nodes, num_edges=g.num_edges)
    steps = [StaticStep(m, torch.optim.Adam(m.parameters(), lr=0.01), shapes, 8)
             for m in (model, copy.deepcopy(model))]
    sampler = SimulatedSampler(NeighborSampler(g, [4, 3], seed=5), [4, 3])
    loader = Loader(sampler, features, labels, seeds, batch_size=batch_size, prefetch=0, seed=4)
    return steps, sampler, loader, SampledLoader(loader, steps[1], features, labels, capture=capture)


def check_sampled_loader_trains_as_the_loader():
    """--step static's loader on a GPU (SampledLoader: the seed batches and keys of the wrapped Loader, each sampled
    into the step's buffers): the same losses and weights as the static step on the Loader's batches, resumed
    mid-epoch too."""
    steps, sampler, loader, sampled = _static_steps_and_loaders(32, torch.arange(0, 300, 3), capture=False)
    assert len(sampled) == len(loader) == 4
    for epoch, start in [(0, 0), (1, 2)]:
        for mb, padded in zip(loader.epoch(epoch, start), sampled.epoch(epoch, start), strict=True):
            assert padded is steps[1].batch and torch.equal(padded.seeds, mb.seeds)
            loss, padded_loss = steps[0].step(mb), steps[1].step(padded)
            assert torch.allclose(padded_loss, loss, rtol=1e-5, atol=1e-6), (epoch, padded_loss, loss)
        assert loader.last_epoch_stats.batches == 4 - start
    for a, b in zip(*(s.model.parameters() for s in steps)):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), "weights differ"


def assert_padded_same_as_cpu(g, seeds, fanouts, key, out):
    """``out`` holds the CPU sampler's batch of ``seeds`` and ``key``, padded as the static step expects."""
    mb = NeighborSampler(g, fanouts, seed=5).sample(SamplerInput(torch.as_tensor(seeds), key=key))
    sizes = out.sizes.tolist()
    assert sizes == [len(seeds)] + [b.num_src for b in reversed(mb.blocks)] + [
        b.num_edges for b in reversed(mb.blocks)], (key, sizes)
    edges, levels = out.unpadded(sizes)
    assert np.array_equal(levels[-1], mb.input_nodes.numpy()), f"batch {key}: node ids differ"
    for hop, block in enumerate(reversed(mb.blocks)):
        assert np.array_equal(edges[hop], block.edge_index.numpy()), f"batch {key}, hop {hop}: edges differ"
        assert_spread(out, sizes, hop, block.num_edges)


# a replayed batch: the seeds copied into the captured batch's buffer, then one graph launch
REPLAY = {"setup": {"launches": 1, "torch_ops": 1, "copies": 1}, "graph": {"launches": 1, "graphs": 1},
          "batch": {"launches": 2, "torch_ops": 1, "copies": 1, "graphs": 1}}


def check_captured_batches_replay_the_eager_batches():
    """capture=True: a ring slot's first full batch runs eagerly, its second is captured (the simulator's record of
    every device operation), then the record is replayed with no driver logic: each batch is the CPU sampler's for its
    own seeds and key, a smaller batch runs eagerly in between, and a bad seed in a replayed batch raises late."""
    from sparsetrain._late_reads import LateChecks
    from sparsetrain.engine.static.shapes import StepShapes

    g, fanouts, ring = graph(200, 3000, seed=7), [4, 3], LateChecks.RING
    out = padded_out(StepShapes.bound(4, fanouts, g.num_nodes, num_edges=g.num_edges))
    ws, rng = DeviceWorkspace(NumpyArrays()), np.random.default_rng(0)
    real_sample = driver._sample

    def no_driver(*args):
        raise AssertionError("a replayed batch ran the driver")

    try:
        for key in range(3 * ring):
            smaller = key == 2 * ring + 1  # (an epoch's last batch)
            seeds = rng.choice(g.num_nodes, 3 if smaller else 4, replace=False)
            replayed = key >= 2 * ring and not smaller
            driver._sample = no_driver if replayed else real_sample
            gpu_layers(g, seeds, fanouts, batch=key, padded=out, workspace=ws, capture=True)
            driver._sample = real_sample
            assert_padded_same_as_cpu(g, seeds, fanouts, key, out)
            counts = _phases(ws)
            assert (counts == REPLAY) == (key >= ring and not smaller), (key, counts)
        for seeds, fragment in [([5, 9, 5, 11], "seed 5 appears more than once"),
                                ([3, 250, 7, 8], "seeds has ids outside [0, 200)")]:
            driver._sample = no_driver
            gpu_layers(g, np.array(seeds), fanouts, batch=1, padded=out, workspace=ws, capture=True)  # no error yet
            driver._sample = real_sample
            assert _phases(ws) == REPLAY
            _raises(ws.late.drain, fragment)
    finally:
        driver._sample = real_sample
    gpu_layers(g, np.array([1, 2, 3, 4]), fanouts, batch=99, padded=out, workspace=ws, capture=True)
    assert_padded_same_as_cpu(g, [1, 2, 3, 4], fanouts, 99, out)
    ws.late.drain()


def check_a_failed_capture_is_an_error():
    """A capture the run asked for that fails raises, naming why and how to run without it (no silent eager run); the
    workspace stays usable: an eager padded batch after it equals the CPU's."""
    from sparsetrain._late_reads import LateChecks
    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.errors import BackendError

    class NoGraphs(NumpyArrays):
        def graph(self):
            raise RuntimeError("no graphs here")

    g, fanouts = graph(200, 3000, seed=7), [4, 3]
    out = padded_out(StepShapes.bound(4, fanouts, g.num_nodes, num_edges=g.num_edges))
    ws = DeviceWorkspace(NoGraphs())
    for key in range(LateChecks.RING):  # each slot's first full batch runs eagerly (it makes the slot's arrays)
        gpu_layers(g, [0, 1, 5, 9], fanouts, batch=key, padded=out, workspace=ws, capture=True)
        assert_padded_same_as_cpu(g, [0, 1, 5, 9], fanouts, key, out)
    try:
        gpu_layers(g, [0, 1, 5, 9], fanouts, batch=LateChecks.RING, padded=out, workspace=ws, capture=True)
    except BackendError as exc:
        said = ("capturing the padded batch's sampling as a CUDA graph failed (RuntimeError: no graphs here); run "
                "without capture: drop --step static (or sample_padded(..., capture=False))")
        assert str(exc) == said, exc
    else:
        raise AssertionError("a failed capture sampled eagerly instead of raising")
    gpu_layers(g, [2, 3, 4, 6], fanouts, batch=LateChecks.RING + 1, padded=out, workspace=ws, capture=False)
    assert_padded_same_as_cpu(g, [2, 3, 4, 6], fanouts, LateChecks.RING + 1, out)
    ws.late.drain()


def check_captured_sampled_loader_trains_as_the_loader():
    """SampledLoader(capture=True) over a ring of two: batches eager, captured, replayed and the epoch's last (a
    smaller one) eager, each step's loss the static step's on the Loader's batch."""
    from sparsetrain._late_reads import LateChecks

    steps, sampler, loader, sampled = _static_steps_and_loaders(16, torch.arange(0, 120), capture=True)
    ring, LateChecks.RING = LateChecks.RING, 2
    try:
        graphs = []
        for mb, padded in zip(loader.epoch(0), sampled.epoch(0), strict=True):
            graphs.append(sampler.ws.last_counts.total.graphs)
            loss, padded_loss = steps[0].step(mb), steps[1].step(padded)
            assert torch.allclose(padded_loss, loss, rtol=1e-5, atol=1e-6), (graphs, padded_loss, loss)
    finally:
        LateChecks.RING = ring
    assert graphs == [0, 0, 1, 1, 1, 1, 1, 0], graphs  # 7 full batches of 16, then 8 seeds
    for a, b in zip(*(s.model.parameters() for s in steps)):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), "weights differ"


def check_overlapping_ranges_are_an_error_not_a_stray_write():
    from sparsetrain.errors import InputError

    # node 1's range runs backwards but is never sampled; nodes 0 and 2 overlap: 14 edges drawn from a graph of 10,
    # past the edge arrays (sized by the graph's 10 edges), node 2's partly
    bad = CSCGraph.from_numpy(np.array([0, 8, 4, 10]), np.zeros(10, np.int64))
    try:
        gpu_sample(bad, [0, 2], [-1])
    except InputError as exc:
        assert "CSCGraph.indptr: the in-edge ranges of two nodes overlap" in str(exc), str(exc)
    else:
        raise AssertionError("overlapping in-edge ranges sampled without an error")


def typed_graph(seed=0):
    """A small typed graph: three node types, five edge types (one with no edges), repeated edges kept."""
    rng = np.random.default_rng(seed)
    num_nodes = {"paper": 40, "author": 30, "topic": 6}
    shapes = {("author", "writes", "paper"): 150, ("paper", "cites", "paper"): 120, ("paper", "has", "topic"): 60,
              ("topic", "of", "paper"): 60, ("author", "knows", "topic"): 0}
    edges = {}
    for et, e in shapes.items():
        src, dst = rng.integers(0, num_nodes[et[0]], e), rng.integers(0, num_nodes[et[2]], e)
        edges[et] = torch.from_numpy(np.stack([src, dst]))
    return CSCGraph.from_edge_index_dict(edges, num_nodes)


def assert_typed_same_as_cpu(g, seeds, fanouts, seed_type="paper", **kw):
    types = g.node_types
    layers, nodes = gpu_layers(g, seeds, fanouts, seed_type=types.index(seed_type), **kw)
    seeds_t = torch.tensor(seeds, dtype=torch.int64)
    mb = NeighborSampler(g, fanouts, seed=5, seed_type=seed_type, **kw).sample(SamplerInput(seeds_t, key=7))
    for i, t in enumerate(types):
        assert np.array_equal(nodes[i], mb.input_nodes[t].numpy()), f"{t} input nodes differ from the CPU sampler"
    for (ei, ids, segments, before, after), block in zip(reversed(layers), mb.blocks):
        assert block.num_src == {t: int(after[i]) for i, t in enumerate(types)}, "block sizes differ"
        assert block.num_dst == {t: int(before[i]) for i, t in enumerate(types)}, "block sizes differ"
        span = {g.edge_types[k]: (a, b) for k, a, b in segments}
        for et, edge_index in block.edge_index.items():
            a, b = span.get(et, (0, 0))
            assert np.array_equal(ei[:, a:b], edge_index.numpy()), f"{et} edges differ"
            assert np.array_equal(ids[a:b], block.edge_ids[et].numpy()), f"{et} edge ids differ"
        assert sum(b - a for _, a, b in segments) == block.num_edges
    return mb


def check_typed_graphs_sample_as_on_the_cpu():
    g = typed_graph()
    assert_typed_same_as_cpu(g, [0, 5, 9, 33], [3, 2])
    assert_typed_same_as_cpu(g, [2, 7], [-1, 2], hop_nodes="new")
    assert_typed_same_as_cpu(g, [1, 2, 3], [4, 4], replace=True)
    mb = assert_typed_same_as_cpu(g, [4, 20], {("author", "writes", "paper"): [2, 0], ("topic", "of", "paper"): [1, 3]})
    assert set(mb.blocks[-1].edge_index) == {("author", "writes", "paper"), ("topic", "of", "paper")}
    assert_typed_same_as_cpu(g, [0, 3], [2, 2], seed_type="topic")
    assert_typed_same_as_cpu(g, [], [2, 2])  # no seeds: empty hops


def check_typed_weighted_and_one_node_type():
    g = typed_graph(1)
    w = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(1))
    w[::4] = 0
    weighted = CSCGraph.typed(g.num_nodes, g.edge_types, g.indptr, g.indices, weights=w, edge_perm=g.edge_perm)
    assert_typed_same_as_cpu(weighted, [1, 8, 30], [3, 2], weighted=True)
    assert_typed_same_as_cpu(weighted, [1, 8, 30], [3, 2], weighted=True, replace=True)
    # one node type, two edge types: two segments whose sources share one type's local ids
    rng = np.random.default_rng(2)
    cites = torch.from_numpy(rng.integers(0, 50, (2, 300)))
    one = CSCGraph.from_edge_index_dict({("p", "cites", "p"): cites, ("p", "rev", "p"): cites.flip(0)}, {"p": 50})
    assert_typed_same_as_cpu(one, [0, 1, 2], [3, 3], seed_type="p")


def check_typed_damaged_graph_is_an_error():
    from sparsetrain.errors import InputError

    g = typed_graph(2)
    indices = g.indices.clone()
    writes = g.edge_types.index(("author", "writes", "paper"))
    position = int(g.indptr[g.types.col_offset[writes]]) + 3  # writes' CSC entry 3
    indices[position] = 10**6
    damaged = CSCGraph.typed(g.num_nodes, g.edge_types, g.indptr, indices)
    for sample in (lambda: gpu_layers(damaged, np.arange(40), [-1], seed_type=0),
                   lambda: NeighborSampler(damaged, [-1], seed_type="paper").sample(torch.arange(40))):
        try:
            sample()
        except InputError as exc:
            # the edge type and its entry (counted from the edge type's first edge), on either target
            assert "edge type ('author', 'writes', 'paper'): " in str(exc) and "entry 3 is" in str(exc), str(exc)
        else:
            raise AssertionError("a damaged typed graph sampled without an error")


if __name__ == "__main__":
    from cudasim_main import run_checks

    run_checks(globals())
