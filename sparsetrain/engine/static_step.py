"""A training step with static shapes: a sampled batch padded to its bounds, so one CUDA graph replays every step.

A sampled batch's sizes change from batch to batch, so its step cannot be captured once. Here every level of the
batch (the seeds, the nodes of each hop) is padded to its upper bound from the batch size and fanouts
(:class:`StepShapes`), and every block's edges to theirs; the model, the loss and the optimizer then see the same
shapes every step, and :class:`StaticStep` replays them as one CUDA graph (``mode="graph"``) or through
``torch.compile(mode="reduce-overhead")`` (``mode="compile"``); on the CPU it runs eagerly (``mode="eager"``).

Padding contributes nothing to the real rows: each level gets one more row than its bound, a *sink* that no real
node occupies; padded edges run from the source level's padding rows (past its real nodes) to the destination level's,
spread over them in ascending order (:func:`~sparsetrain.sampling.cuda.padded.padding_row`: no row takes more than
its share, where one sink row used to take every padded edge, an unbalanced SpMM), so a real destination aggregates
over its real edges only (a mean divides by its true degree), and padded seeds carry weight 0 in the loss, which is
the mean over the real seeds. Padded rows compute finite values that only ever reach other padded rows: the input
level's padded rows hold the features of whatever node ids the buffer holds there (ids of the graph), not zeros.

With a fused last hop (``NeighborSampler(fuse_last_hop=True)``) the input level disappears: only levels ``0..L-1``
are padded, and the first layer reads ``neighbor_mean`` (the outermost hop drawn and averaged, one row per level
``L-1`` node, the padded rows zero) beside those nodes' features: at products scale ~170K rows instead of 1.08M.

Why the bound rather than power-of-two buckets: at products scale ([15, 10, 5], batch 1024) the bound on the input
nodes is 1.08M against ~0.8M sampled (1.35x), one shape and one captured graph; buckets of powers of two pad the same
batch to 1.05M but give a shape (a graph, a memory pool) per combination of buckets over the levels, and up to 2x the
rows at a level that lands just past a power of two.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sparsetrain.engine.loader import EpochStats
from sparsetrain.engine.precision import autocast, check_precision
from sparsetrain.errors import SettingError
from sparsetrain.nn.models import BlockGNN
from sparsetrain.sampling import Fanouts, NeighborSampler, SamplerInput
from sparsetrain.sampling.cuda.padded import PaddedOut, padding_row
from sparsetrain.sampling.errors import CaptureError
from sparsetrain.storage import TensorFeatures

MODES = ("eager", "graph", "compile")


@dataclass(frozen=True)
class StepShapes:
    """The padded sizes of a batch: ``nodes[h]`` rows at level ``h`` (0: the seeds, last: the input nodes), sink row
    included, and ``edges[h - 1]`` the edges sampled at hop ``h`` (from level ``h - 1``'s nodes). ``fused``: the
    sampler fuses one more hop, outermost, into the first layer's ``neighbor_mean`` (``nodes[-1]`` rows)."""

    nodes: tuple[int, ...]
    edges: tuple[int, ...]
    fused: bool = False

    @classmethod
    def bound(cls, batch_size: int, fanouts: Fanouts | Sequence[int], num_nodes: int,
              max_degree: int | None = None, num_edges: int | None = None, fuse_last_hop: bool = False) -> StepShapes:
        """The bounds of a homogeneous node batch sampled with ``hop_nodes="all"``: hop ``h`` draws at most
        ``fanouts[h]`` edges for every node found so far, and adds at most that many nodes (never more than the
        graph's ``num_nodes``). A fanout of -1 (all neighbours) is bounded by ``max_degree``. ``num_edges``: the
        graph's edge count, for a sampler without replacement (the engine's): a hop's distinct nodes each draw a
        subset of their own in-edges, so no hop draws more edges than the graph has, whatever the fanout.
        ``fuse_last_hop``: the sampler's (``NeighborSampler(fuse_last_hop=True)``): the outermost hop is not padded."""
        counts = Fanouts.of(fanouts).as_list()
        if fuse_last_hop:
            if not counts:
                raise SettingError("fuse_last_hop needs at least one hop in fanouts")
            counts = counts[:-1]  # (its fanout may be -1: its mean has one row per node of the level before)
        if batch_size < 1:
            raise SettingError(f"batch_size={batch_size} must be at least 1")
        if any(f < 0 for f in counts) and max_degree is None:
            raise SettingError(f"fanouts {counts} sample all neighbours (-1): pass max_degree (the graph's largest "
                               "in-degree) to bound them")
        found, nodes, edges = min(batch_size, num_nodes), [], []
        nodes.append(found)
        for f in counts:
            hop_edges = found * (f if f >= 0 else max_degree)
            if num_edges is not None:
                hop_edges = min(hop_edges, num_edges)
            found = min(num_nodes, found + hop_edges)
            edges.append(hop_edges)
            nodes.append(found)
        return cls(tuple(n + 1 for n in nodes), tuple(edges), fuse_last_hop)

    @property
    def num_hops(self) -> int:
        """The padded hops (the blocks); a fused hop is not one."""
        return len(self.edges)

    def block(self, i: int) -> tuple[int, int, int]:
        """Block ``i`` of a batch (outermost first) padded: ``(num_src, num_dst, num_edges)``."""
        hop = self.num_hops - i
        return self.nodes[hop], self.nodes[hop - 1], self.edges[hop - 1]


class StaticBatch:
    """Device buffers of one padded batch, filled in place (no host read): the tensors a captured step reads.
    ``csr=True`` also keeps each block's transposed adjacency as a sparse CSR tensor over fixed buffers.

    Two ways to fill them: :meth:`load` copies a sampled ``MiniBatch`` in and pads it; :meth:`sample` has a GPU
    sampler draw the batch straight into them (:attr:`padded`: the edges, the node ids and the sizes per level, on
    the device), then gathers its features and labels by fixed-size ids: no host wait and no copy of the batch.
    ``shapes.fused``: ``neighbor_mean`` ``[nodes[-1], F]`` float32 holds the fused last hop's mean (zero past the
    level's count)."""

    def __init__(self, shapes: StepShapes, num_features: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, csr: bool = False) -> None:
        self.shapes, self.device = shapes, torch.device(device)
        seeds = shapes.nodes[0]
        try:
            self.x = torch.zeros(shapes.nodes[-1], num_features, dtype=dtype, device=self.device)
            self.neighbor_mean = (torch.zeros(shapes.nodes[-1], num_features, dtype=torch.float32, device=self.device)
                                  if shapes.fused else None)
            self.y = torch.zeros(seeds, dtype=torch.int64, device=self.device)
            self.weight = torch.zeros(seeds, dtype=torch.float32, device=self.device)
            self.count = torch.ones((), dtype=torch.float32, device=self.device)
            self.edge_index = [torch.zeros(2, shapes.block(i)[2], dtype=torch.int64, device=self.device)
                               for i in range(shapes.num_hops)]
            self.node_ids = torch.zeros(shapes.nodes[-1], dtype=torch.int64, device=self.device)
            self.sizes = torch.zeros(2 * shapes.num_hops + 1, dtype=torch.int64, device=self.device)
            self._ks = torch.arange(max(shapes.nodes[-1], *shapes.edges, 1), device=self.device)  # (0, 1, 2, ...)
            self.seeds = None  # the seeds of the batch sampled here (gather)
            self.adj_t = [self._csr(i) for i in range(shapes.num_hops)] if csr else None
        except (torch.OutOfMemoryError, RuntimeError) as exc:  # the CPU allocator's failure is a RuntimeError
            if not isinstance(exc, torch.OutOfMemoryError) and "allocate" not in str(exc):
                raise
            need = shapes.nodes[-1] * num_features * (dtype.itemsize + 4 * shapes.fused) + 16 * sum(shapes.edges)
            raise SettingError(f"--step static pads every batch to {shapes.nodes[-1]} input nodes and "
                               f"{sum(shapes.edges)} edges ({need / 2**30:.1f} GiB), more than {self.device} can "
                               "hold; lower --batch-size or --fanout, or drop --step static") from None

    def _csr(self, i: int) -> torch.Tensor:
        num_src, num_dst, num_edges = self.shapes.block(i)
        crow = torch.zeros(num_dst + 1, dtype=torch.int64, device=self.device)
        col = torch.zeros(num_edges, dtype=torch.int64, device=self.device)
        values = torch.ones(num_edges, dtype=self.x.dtype, device=self.device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
            return torch.sparse_csr_tensor(crow, col, values, size=(num_dst, num_src))  # views of the three buffers

    def blocks(self) -> list[tuple[torch.Tensor, tuple[int, int]]]:
        """The padded blocks as ``MiniBatch.to_pyg()`` gives them, outermost first."""
        adj = self.adj_t if self.adj_t is not None else self.edge_index
        return [(adj[i], self.shapes.block(i)[:2]) for i in range(self.shapes.num_hops)]

    @property
    def padded(self) -> PaddedOut:
        """These buffers as a GPU sampler fills them (``NeighborSampler.sample_padded``): per hop, innermost first, its
        edges (this batch's blocks in reverse), the batch's node ids (each level a prefix) and its sizes (the real
        nodes per level, then the real edges per hop); a fused last hop's mean."""
        shapes = self.shapes
        return PaddedOut(shapes.nodes, shapes.edges, self.node_ids, self.edge_index[::-1], self.sizes,
                         self.neighbor_mean)

    def sample(self, sampler, inp: SamplerInput, features: torch.Tensor, labels: torch.Tensor,
               capture: bool = False) -> None:
        """Sample ``inp`` into these buffers on the GPU (``sampler.sample_padded``; a bad seed or a damaged graph
        raises at a later batch or at ``sampler.check_padded()``), then its input features (rows of ``features``,
        a tensor on this device; the padded rows zero) and its seeds' labels (``labels`` on this device).
        ``capture``: full batches' sampling replayed as a CUDA graph once captured (``sample_padded``'s). A fused
        last hop is drawn and averaged over ``features`` into :attr:`neighbor_mean` in the same run."""
        sampler.sample_padded(inp, self.padded, capture=capture, features=features if self.shapes.fused else None)
        self.gather(inp.seeds, features, labels)

    def gather(self, seeds: torch.Tensor, features: torch.Tensor, labels: torch.Tensor) -> None:
        """After :attr:`padded` was sampled: ``x`` (the rows of :attr:`node_ids`, zero past the input nodes' count,
        read on the device), the labels, weights and count of ``seeds`` (kept as :attr:`seeds`)."""
        torch.index_select(features, 0, self.node_ids, out=self.x)  # (padded rows: finite rows of the graph's nodes)
        n = len(seeds)
        self.y[:n].copy_(labels.index_select(0, seeds))
        self._pad_seeds(n)
        self.seeds = seeds
        if self.adj_t is not None:
            for i in range(self.shapes.num_hops):
                self._fill_csr(self.adj_t[i], self.edge_index[i], self.shapes.block(i)[1])

    def _pad_seeds(self, seeds: int) -> None:
        self.y[seeds:].zero_()
        self.weight[:seeds].fill_(1.0)
        self.weight[seeds:].zero_()
        self.count.fill_(seeds)

    def load(self, mb) -> None:
        """Copy ``mb`` (features ``x`` and labels ``y`` attached, on this device) into the buffers, padding it."""
        self._check(mb)
        n, seeds = mb.x.shape[0], len(mb.seeds)
        self.x[:n].copy_(mb.x)
        self.x[n:].zero_()
        if self.neighbor_mean is not None:
            self.neighbor_mean[:n].copy_(mb.neighbor_mean)
            self.neighbor_mean[n:].zero_()
        self.y[:seeds].copy_(mb.y)
        self._pad_seeds(seeds)
        for i, block in enumerate(mb.blocks):
            num_src, num_dst, num_edges = self.shapes.block(i)
            e, buf = block.num_edges, self.edge_index[i]
            buf[:, :e].copy_(block.edge_index)
            if e < num_edges:  # padded edges: spread over both levels' padding rows, ascending
                k = self._ks[: num_edges - e]
                buf[0, e:].copy_(padding_row(k, num_edges - e, block.num_src, num_src))
                buf[1, e:].copy_(padding_row(k, num_edges - e, block.num_dst, num_dst))
            if self.adj_t is not None:
                self._fill_csr(self.adj_t[i], buf, num_dst, block.dst_sorted)

    def _fill_csr(self, adj: torch.Tensor, edge_index: torch.Tensor, num_dst: int, dst_sorted: bool = True) -> None:
        """The CSR of a padded block: its edges are grouped by destination, real then padded (a sampler's blocks and
        its padded runs), so the columns are the sources as they stand; ``dst_sorted=False`` sorts them first."""
        if dst_sorted:
            dst, src = edge_index[1], edge_index[0]
        else:
            dst, order = torch.sort(edge_index[1], stable=True)
            src = edge_index[0][order]
        adj.col_indices().copy_(src)
        adj.crow_indices().copy_(torch.searchsorted(dst, self._ks[: num_dst + 1]))

    def _check(self, mb) -> None:
        shapes = self.shapes
        if mb.is_typed or len(mb.blocks) != shapes.num_hops:
            raise SettingError(f"a padded step takes homogeneous batches of {shapes.num_hops} blocks; this one is "
                               f"{'typed' if mb.is_typed else f'{len(mb.blocks)} blocks'}")
        if (getattr(mb, "neighbor_mean", None) is not None) != shapes.fused:
            raise SettingError("the padded step's shapes are for a fused last hop but the batch has no neighbor_mean; "
                               "sample with fuse_last_hop=True and set mb.neighbor_mean = mb.last_hop.mean(features)"
                               if shapes.fused else "the batch has a fused last hop's neighbor_mean but the padded "
                               "step's shapes do not; build StepShapes.bound with the sampler's fuse_last_hop")
        for i, block in enumerate(mb.blocks):
            num_src, num_dst, num_edges = shapes.block(i)
            if block.num_src >= num_src or block.num_dst >= num_dst or block.num_edges > num_edges:
                raise SettingError(f"block {i} has {block.num_src} sources, {block.num_edges} edges, above its padded "
                                   f"bounds {num_src - 1}, {num_edges}; build StepShapes from the sampler's fanouts "
                                   "and batch size")
        if len(mb.seeds) >= shapes.nodes[0]:
            raise SettingError(f"the batch has {len(mb.seeds)} seeds, above its padded bound {shapes.nodes[0] - 1}; "
                               "build StepShapes from the sampler's batch size")


class StaticStep:
    """One optimizer step of a GraphSAGE ``model`` on padded batches: ``step(mb)`` returns the loss (mean cross
    entropy over the real seeds, a device tensor; read it when needed, it is no sync).

    ``mode``: ``"eager"`` (the CPU's, and the reference), ``"graph"`` (CUDA: the first ``warmup`` steps run eagerly on
    a side stream, then forward, backward and optimizer step are captured once and replayed; the optimizer needs
    ``capturable=True``), ``"compile"`` (``torch.compile(mode="reduce-overhead")`` of forward and loss). ``None``:
    ``"graph"`` on a GPU, else ``"eager"``. ``dtype``: the features'.
    """

    def __init__(self, model: BlockGNN, optimizer: torch.optim.Optimizer, shapes: StepShapes, num_features: int, *,
                 device: torch.device | str = "cpu", mode: str | None = None, precision: str = "fp32",
                 warmup: int = 3, dtype: torch.dtype = torch.float32) -> None:
        device = torch.device(device)
        mode = mode or ("graph" if device.type == "cuda" else "eager")
        _check(model, optimizer, device, mode, precision)
        self.model, self.optimizer, self.mode, self.precision = model, optimizer, mode, precision
        self.device, self.warmup = device, warmup
        self.batch = StaticBatch(shapes, num_features, device, dtype, csr=model.spmm)
        self.steps = 0
        self._graph: torch.cuda.CUDAGraph | None = None
        self._loss = torch.compile(self._forward_loss, mode="reduce-overhead") if mode == "compile" \
            else self._forward_loss

    def _forward_loss(self) -> torch.Tensor:
        b = self.batch
        with autocast(self.precision, self.device):
            out = self.model(b.x, b.blocks(), neighbor_mean=b.neighbor_mean)[: b.y.shape[0]]
            losses = F.cross_entropy(out.float(), b.y, reduction="none")
        return (losses * b.weight).sum() / b.count

    def _eager(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._loss()
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def step(self, mb) -> torch.Tensor:
        """Train on ``mb`` (``x``/``y`` attached, on this step's device), or on :attr:`batch` itself as it stands
        (sampled there by :meth:`StaticBatch.sample`); the real seeds' mean loss."""
        if mb is not self.batch:
            self.batch.load(mb)
        self.steps += 1
        if self.mode != "graph":
            return self._eager()
        if self._graph is None and self.steps <= self.warmup:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                loss = self._eager()
            torch.cuda.current_stream(self.device).wait_stream(side)
            return loss
        if self._graph is None:
            self._capture()
        self._graph.replay()
        return self._static_loss.clone()

    def _capture(self) -> None:
        """Capture forward, backward and optimizer step once, in thread-local capture mode (a loader thread filling
        the next batch meanwhile is not part of it and may allocate or wait); a failure raises
        :class:`~sparsetrain.sampling.errors.CaptureError` naming why, never an eager run."""
        self.optimizer.zero_grad(set_to_none=True)  # gradients are allocated from the graph's pool, then kept
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                loss = self._loss()
                loss.backward()
                self.optimizer.step()
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise CaptureError(f"capturing the static step as a CUDA graph failed ({type(exc).__name__}: {reason}); "
                               "run without capture: drop --step static (or StaticStep(mode='eager'))") from exc
        self._graph = graph
        self._static_loss = loss.detach()


class SampledLoader:
    """``loader``'s batches sampled straight into ``step``'s buffers on the GPU (:meth:`StaticBatch.sample`): it yields
    ``step.batch`` itself, filled, for ``step.step``. No batch is copied and none waits for the device; a bad seed or a
    damaged graph raises a batch or more late, and at the latest when the epoch ends. Each epoch's seeds go to the
    device in one copy. Everything else (seed batches, keys, length, device, epoch stats) is ``loader``'s, whose
    ``sampler`` samples; ``features`` and ``labels``: tensors on the step's device. ``capture``: the full batches'
    sampling captured once as a CUDA graph and replayed (``NeighborSampler.sample_padded``'s ``capture``; opt-in: not
    yet measured on a GPU). See :func:`sampled_loader`."""

    def __init__(self, loader, step: StaticStep, features: torch.Tensor, labels: torch.Tensor,
                 capture: bool = False) -> None:
        self.loader, self.step, self._rows, self._labels = loader, step, features, labels
        self.capture = capture

    def __getattr__(self, name: str):
        return getattr(self.loader, name)

    def __len__(self) -> int:
        return len(self.loader)

    def epoch(self, epoch: int, start_batch: int = 0):
        todo = self.loader.seed_batches.inputs(epoch)[start_batch:]
        stats = self.loader.last_epoch_stats = EpochStats()
        started = time.perf_counter()
        seeds = torch.cat([inp.seeds for inp in todo]).to(self.step.device) if todo else None
        first = 0
        for inp in todo:
            t0 = time.perf_counter()
            part = seeds[first: first + len(inp.seeds)]
            first += len(part)
            self.step.batch.sample(self.loader.sampler, SamplerInput(part, key=inp.key), self._rows, self._labels,
                                   self.capture)
            stats.wait_seconds += time.perf_counter() - t0
            stats.batches += 1
            stats.seeds += len(part)
            yield self.step.batch
        self.loader.sampler.check_padded()
        stats.total_seconds = time.perf_counter() - started


def sampled_loader(loader, step: StaticStep, capture: bool | None = None, required: bool = False):
    """A :class:`SampledLoader` over ``loader`` (its sampling captured if ``capture``; ``None``: as the step is, when
    its mode is ``"graph"``) when its batches can be sampled into ``step``'s buffers: on a GPU, with the graph, the
    features (one tensor) and the labels in its memory, and a homogeneous sampler that has a GPU path; else ``loader``
    itself (each batch then sampled, gathered and copied into the buffers). ``required`` (the plan decided the
    batches are sampled in, ``RunPlan.capture == "sampling+step"``): a batch that cannot be is an error naming why,
    never the other path."""
    capture = step.mode == "graph" if capture is None else capture
    why = _not_sampled_in(loader, step)
    if why is None:
        return SampledLoader(loader, step, loader.features.tensor, loader.labels, capture)
    if required:
        raise SettingError(f"--step static on {step.device} was planned to sample each batch into the step's buffers "
                           f"and capture it, but {why}; run without capture: drop --step static")
    return loader


def _not_sampled_in(loader, step: StaticStep) -> str | None:
    """Why ``loader``'s batches cannot be sampled straight into ``step``'s buffers (None: they can)."""
    sampler, store, labels, device = loader.sampler, loader.features, loader.labels, step.device

    def on_step_device(tensor) -> bool:  # ("cuda" names the current device, as "cuda:0" does on one GPU)
        return tensor.device.type == device.type and device.index in (None, tensor.device.index)

    if device.type != "cuda":
        return f"the step runs on {device}"
    if not (isinstance(sampler, NeighborSampler) and sampler.has_gpu_path):
        return f"the sampler ({type(sampler).__name__}) has no GPU path"
    if not on_step_device(sampler.graph.indptr) or sampler.graph.is_typed:
        return "the graph is not a homogeneous graph in the step's GPU memory"
    if not (isinstance(store, TensorFeatures) and on_step_device(store.tensor)):
        return f"the features ({type(store).__name__}) are not one tensor in the step's GPU memory"
    if not (isinstance(labels, torch.Tensor) and on_step_device(labels)):
        return "the labels are not in the step's GPU memory"
    return None


def _check(model, optimizer, device: torch.device, mode: str, precision: str) -> None:
    if mode not in MODES:
        raise SettingError(f"mode={mode!r}; choose one of {', '.join(MODES)}")
    if not isinstance(model, BlockGNN) or model.kind != "sage":
        kind = getattr(model, "kind", type(model).__name__)
        raise SettingError(f"a padded step trains GraphSAGE only, not {kind}: PyG's GCN and GAT layers add self loops "
                           "by boolean masks, whose shapes depend on the data; use the eager step for them")
    if mode == "graph" and device.type != "cuda":
        raise SettingError(f"mode='graph' captures a CUDA graph and needs a CUDA device, not {device}; use "
                           "mode='eager'")
    if mode == "graph" and not all(group.get("capturable", False) for group in optimizer.param_groups):
        raise SettingError(f"mode='graph' replays the optimizer step: build {type(optimizer).__name__} with "
                           "capturable=True")
    check_precision(precision, device)


__all__ = ["MODES", "SampledLoader", "StaticBatch", "StaticStep", "StepShapes", "sampled_loader"]
