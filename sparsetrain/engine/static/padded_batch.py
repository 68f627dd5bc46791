"""A padded batch: the device buffers a static step reads, filled in place from a sampled batch or by a GPU sampler.

Padding contributes nothing to the real rows: padded edges run from the source level's padding rows (past its real
nodes) to the destination level's, spread over them in ascending order
(:func:`~sparsetrain.sampling.cuda.padded.padding_row`: no row takes more than its share, where one sink row used to
take every padded edge, an unbalanced SpMM), so a real destination aggregates over its real edges only (a mean
divides by its true degree), and padded seeds carry weight 0 in the loss, which is the mean over the real seeds.
Padded rows compute finite values that only ever reach other padded rows: the input level's padded rows hold the
features of whatever node ids the buffer holds there (ids of the graph), not zeros. A fused last hop's
``neighbor_mean`` is padded with zero rows.
"""

from __future__ import annotations

import warnings

import torch

from sparsetrain.engine.static.shapes import StepShapes
from sparsetrain.errors import SettingError
from sparsetrain.sampling import SamplerInput
from sparsetrain.sampling.cuda.padded import PaddedOut, padding_row
from sparsetrain.sampling.graph import EDGE_TYPE, NODE_TYPE


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
        read on the device), the labels, weights and count of ``seeds``."""
        torch.index_select(features, 0, self.node_ids, out=self.x)  # (padded rows: finite rows of the graph's nodes)
        n = len(seeds)
        self.y[:n].copy_(labels.index_select(0, seeds))
        self._pad_seeds(n)
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
        x, seeds = mb.x_by_type[NODE_TYPE], mb.seeds_by_type[NODE_TYPE].numel()
        n = x.shape[0]
        self.x[:n].copy_(x)
        self.x[n:].zero_()
        if self.neighbor_mean is not None:
            self.neighbor_mean[:n].copy_(mb.neighbor_mean)
            self.neighbor_mean[n:].zero_()
        self.y[:seeds].copy_(mb.y)
        self._pad_seeds(seeds)
        for i, block in enumerate(mb.blocks):
            num_src, num_dst, num_edges = self.shapes.block(i)
            e, buf = block.num_edges, self.edge_index[i]
            buf[:, :e].copy_(block.edge_index_by_type.get(EDGE_TYPE, buf[:, :0]))
            if e < num_edges:  # padded edges: spread over both levels' padding rows, ascending
                k = self._ks[: num_edges - e]
                buf[0, e:].copy_(padding_row(k, num_edges - e, block.num_src_by_type[NODE_TYPE], num_src))
                buf[1, e:].copy_(padding_row(k, num_edges - e, block.num_dst_by_type[NODE_TYPE], num_dst))
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
        if mb.is_typed:  # the padded step's one rule: the one-type graph
            raise SettingError("a padded step takes batches of the one-type graph (node type '_N'); this one is "
                               f"typed ({list(mb.input_nodes_by_type)}): drop the static step for a typed graph")
        if len(mb.blocks) != shapes.num_hops:
            raise SettingError(f"a padded step takes batches of {shapes.num_hops} blocks; this one has "
                               f"{len(mb.blocks)}: build StepShapes from the sampler's fanouts")
        if (getattr(mb, "neighbor_mean", None) is not None) != shapes.fused:
            raise SettingError("the padded step's shapes are for a fused last hop but the batch has no neighbor_mean; "
                               "sample with fuse_last_hop=True and set mb.neighbor_mean = mb.last_hop.mean(features)"
                               if shapes.fused else "the batch has a fused last hop's neighbor_mean but the padded "
                               "step's shapes do not; build StepShapes.bound with the sampler's fuse_last_hop")
        for i, block in enumerate(mb.blocks):
            num_src, num_dst, num_edges = shapes.block(i)
            got_src, got_dst = block.num_src_by_type[NODE_TYPE], block.num_dst_by_type[NODE_TYPE]
            if got_src >= num_src or got_dst >= num_dst or block.num_edges > num_edges:
                raise SettingError(f"block {i} has {got_src} sources, {block.num_edges} edges, above its padded "
                                   f"bounds {num_src - 1}, {num_edges}; build StepShapes from the sampler's fanouts "
                                   "and batch size")
        seeds = mb.seeds_by_type[NODE_TYPE].numel()
        if seeds >= shapes.nodes[0]:
            raise SettingError(f"the batch has {seeds} seeds, above its padded bound {shapes.nodes[0] - 1}; "
                               "build StepShapes from the sampler's batch size")


__all__ = ["StaticBatch"]
