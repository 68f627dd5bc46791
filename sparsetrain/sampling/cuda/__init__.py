"""The fused multi-hop neighbor sampler on the GPU (``numba.cuda``), one module per concern.

Homogeneous and typed graphs alike: as on the CPU (:mod:`sparsetrain.sampling.neighbor`), a thread's work item is a
column of the graph (a dst node, or an (edge type, dst node) pair), a hop's items come in segments, one per edge type,
and a source's map key is its node type's offset plus its id. What is shared with the CPU kernels: the counter-based
RNG and the per-node draws, compiled from the same Python source, so both targets make the same draws. What is not: the
dedupe + relabel. Thousands of threads insert at once, so it needs atomics and a scan; the CPU does it in one sequential
pass over a direct-address table, which on a CPU is faster than any atomic scheme and gives the same ids.

- :mod:`~sparsetrain.sampling.cuda.kernels`: the kernels (counts, draws into the open-addressing map, numbering).
- :mod:`~sparsetrain.sampling.cuda.arrays`: the array back ends, PyTorch CUDA tensors or NumPy under the simulator.
- :mod:`~sparsetrain.sampling.cuda.workspace`: a batch's arrays and kernel views, kept for the next batch; every
  launch, copy, host wait and allocation of a batch goes through it and is counted.
- :mod:`~sparsetrain.sampling.cuda.counts`: those counts (``LaunchCounts`` per phase, ``BatchCounts`` per batch).
- :mod:`~sparsetrain.sampling.cuda.graph`: ``DeviceCSC``, the graph's kernel views (device or pinned host memory).
- :mod:`~sparsetrain.sampling.cuda.batch`: one batch's bounds, node regions and map.
- :mod:`~sparsetrain.sampling.cuda.driver`: the per-hop driver (``sample_layers``, ``sample_arrays``).
- :mod:`~sparsetrain.sampling.cuda.padded`: ``PaddedOut``, a static step's fixed-size buffers, filled with no host read.
- :mod:`~sparsetrain.sampling.cuda.capture`: a padded batch captured once (a CUDA graph, or the simulator's
  ``Recording``) and replayed as one graph launch.
- :mod:`~sparsetrain.sampling.cuda.fused_mean`: the fused last hop's draws and mean (``fuse_last_hop=True``), also
  queued by the driver into a padded batch (``PaddedHop``).

Nothing here is imported until a batch is drawn on the GPU (``numba.cuda`` through ``sparsetrain._numba_cuda``).
Under ``NUMBA_ENABLE_CUDASIM=1`` the same kernels run on NumPy arrays, which is how the tests check them without a GPU.
"""
