"""Everything that needs a GPU, measured in one command with its peers: run it first whenever a GPU is at hand.

    python benchmarks/gpu_report.py --out benchmarks/out/gpu        # the full report (about 9 minutes on one H100)
    python benchmarks/gpu_report.py --out /tmp/r --quick --device cpu   # the same sections on tiny inputs (a check)

Sections, each in its own subprocess with its own time limit (a crash or a hang costs that section, not the report):

1. ``tests``: ``pytest -m gpu``, the pass/fail/skip counts.
2. ``gather``: zero-copy ``PinnedFeatures`` gather in GB/s per row size, as a fraction of pinned host-to-device
   memcpy (target >= 0.90 for rows of 256 B and more), and against the CPU gather + copy.
3. ``sampling``: sampled edges/s of node sampling (graph in device memory, and pinned), link sampling with seed-edge
   exclusion and typed sampling, each against the CPU sampler on this machine's cores, same batches. Per batch, the
   GPU sampler's device work as its driver counts it (launches, copies, host syncs, allocations per hop; under Numba's
   CUDA simulator on a tiny graph when there is no GPU, so ``--quick`` shows it on any machine), and on a GPU its wall
   time against its stream time (CUDA events) and the GPU's busy time (profiler).
4. ``epoch``: GraphSAGE [15,10,5], batch 1024, hidden 256, on the products-scale synthetic graph: the CLI path
   (``sparsetrain.engine.run.train``, one whole epoch, its stall fraction), the PyG drop-in
   (``sparsetrain.pyg.NeighborLoader``) and the peer, PyG's ``NeighborLoader`` with CPU sampling, ``num_workers``,
   ``pin_memory`` and ``.to("cuda")`` (needs torch-sparse or pyg-lib; without them the row says so). ms per step
   over ``--epoch-steps`` steps after a warm-up, and the epoch extrapolated from it. Then a step timeline from the
   library's pieces in a plain loop: per phase (sample, gather, forward + backward + Adam) host ms and stream ms
   (CUDA events), per step host syncs, the sampler's counts, GPU busy time and idle fraction (profiler).
5. ``moe``: the MoE layer in bf16 at d_model 2048, 64 experts, top-8, 16K tokens against ``torch._grouped_mm`` and
   Hugging Face's grouped_mm experts, with achieved TFLOP/s and the fraction of the GPU's bf16 dense peak.

Writes ``report.md`` (the tables for benchmarks/RESULTS.md, device named) and ``report.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# GPU-only sections first: a PyG peer building from source (--peer-src) uses the CPU meanwhile, and the sections
# that time the CPU (sampling's CPU rows, the PyG peer's epoch) wait for it.
SECTIONS = ("tests", "gather", "moe", "data", "sampling", "epoch")
BUDGET_S = {"tests": 120, "gather": 80, "moe": 60, "data": 120, "sampling": 90, "epoch": 360}
WAITS_FOR_PEER = ("sampling", "epoch")
PEER_WAIT_S = 240
BF16_PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense bf16 peak by device family (SXM)
FANOUTS = [15, 10, 5]
BATCH, HIDDEN = 1024, 256


# --------------------------------------------------------------------------- the sections (run in a child process)
def section_tests(args) -> dict:
    """``pytest -m gpu``: its closing counts (CPU runs report what a CPU machine does: every GPU test skipped)."""
    import importlib.util

    cmd = [
        sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors",
        "tests",
    ]
    if importlib.util.find_spec("pytest_timeout"):  # a hanging test costs itself, not the section
        cmd += ["--timeout", "60"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=BUDGET_S["tests"] - 10)
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-300:]
    # pytest's "1 error" is counted as "errored": the key "error" means the section itself failed
    counts = {("errored" if k.startswith("error") else k): int(n)
              for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors|error|deselected)", tail)}
    failed = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {"exit_code": done.returncode, "summary": tail, **counts, "failures": failed[:20]}


def section_gather(args) -> dict:
    """Per row size, in one run: the store's gather end to end (each call waited for, and calls back to back), the
    sort + kernel and the kernel alone, the other kernel variants, against pinned memcpy (``gather_variants.py``, CUDA
    events), the store's per-call counts, and the zero-copy gather against the CPU gather + copy
    (``feature_gather.py``)."""
    import torch

    if args.device != "cuda":
        return {"not_run": "zero-copy gather needs CUDA"}
    sys.path.insert(0, str(HERE))
    import gather_variants
    from feature_gather import bench_gpu

    rows: list = []
    bench_gpu(rows, reps=3 if args.quick else 10)
    memcpy = next(r["GB_per_s"] for r in rows if r["name"] == "pinned host-to-device memcpy")
    variants = gather_variants.bench(reps=3 if args.quick else 10)
    columns = {"end to end": "PinnedFeatures.gather(out=), end to end",
               "back to back": "PinnedFeatures.gather(out=), end to end, calls back to back",
               "new output": "PinnedFeatures.gather, end to end, new output",
               "host ids": "PinnedFeatures.gather(out=), end to end, ids on the host",
               "sort + kernel": "sort + kernel, views made before",
               "kernel": "numba, word per thread (the store's kernel)",
               "kernel, unsorted": "numba, word per thread, ids not sorted"}
    by_name = {(r["row_bytes"], r["variant"]): r for r in variants["rows"] if "GB_per_s" in r}
    summary = []
    for size in sorted({r["row_bytes"] for r in variants["rows"]}):
        found = {key: by_name.get((size, name)) for key, name in columns.items()}
        summary.append({"row_bytes": size, **{key: r["fraction_of_memcpy"] for key, r in found.items() if r},
                        "exact": all(r["exact"] for r in found.values() if r),
                        "counts": (found["end to end"] or {}).get("counts")})
    return {
        "device": torch.cuda.get_device_name(),
        "memcpy_GB_per_s": memcpy,
        "rows": [r for r in rows if "fraction_of_memcpy" in r],
        "variants": variants,
        "summary": summary,
    }


def section_data(args) -> dict:
    """The synthetic datasets the sampling and epoch sections read, made once under ``--data``."""
    start = time.perf_counter()
    products = _products(args)
    made = time.perf_counter()
    typed = _typed(args)
    return {
        "products": str(products),
        "products_s": made - start,
        "typed": str(typed),
        "typed_s": time.perf_counter() - made,
    }


def _products(args) -> Path:
    """The products-scale synthetic dataset (2.4M nodes, 120M edges, 100 float32 features), made once under --data."""
    from sparsetrain.datasets import synthesize

    nodes, edges = (20_000, 400_000) if args.quick else (2_400_000, 120_000_000)
    folder = Path(args.data) / ("products-quick" if args.quick else "products")
    if not (folder / "meta.json").is_file():
        synthesize(folder, nodes, edges, feature_dim=100, num_classes=47, seed=0, overwrite=True, quiet=True)
    return folder


def _typed(args) -> Path:
    """An ogbn-mag-shaped typed synthetic dataset (scale 0.25 of ogbn-mag; tiny with --quick), made once under
    --data."""
    from sparsetrain.datasets import synthesize

    scale = 0.005 if args.quick else 0.25
    folder = Path(args.data) / f"mag-{scale}"
    if not (folder / "meta.json").is_file():
        synthesize(folder, typed=True, scale=scale, seed=0, overwrite=True, quiet=True)
    return folder


def _rate(run, batches, sync, rounds: int) -> dict:
    """Median over ``rounds`` of sampling every batch once: seeds/s and sampled edges/s."""
    run(batches[:2])
    sync()
    results = []
    for _ in range(rounds):
        start = time.perf_counter()
        edges = run(batches)
        sync()
        seconds = time.perf_counter() - start
        results.append({"seeds_per_s": sum(b.shape[-1] for b in batches) / seconds, "edges_per_s": edges / seconds})
    return min(results, key=lambda r: abs(r["edges_per_s"] - statistics.median(x["edges_per_s"] for x in results)))


def _versus(name: str, cpu_run, gpu_run, batches, args) -> dict:
    """One sampler on the GPU (when it has a GPU path) against the same sampler on the CPU, same batches."""
    import torch

    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    row = {"sampler": name, "cpu": _rate(cpu_run, [b.cpu() for b in batches], lambda: None, args.rounds)}
    try:
        row["gpu"] = _rate(gpu_run, [b.to(args.device) for b in batches], sync, args.rounds)
        row["speedup"] = row["gpu"]["edges_per_s"] / row["cpu"]["edges_per_s"]
    except Exception as exc:  # a sampler without a GPU path says so in its row
        row["gpu"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    return row


def section_sampling(args) -> dict:
    import numpy as np
    import torch

    from sparsetrain._late_reads import LateChecks
    from sparsetrain.datasets import load
    from sparsetrain.sampling import EdgeSamplerInput, LinkNeighborSampler, NeighborSampler, SamplerInput

    ds = load(_products(args))
    rng = np.random.default_rng(0)
    train = ds.split["train"].numpy()
    count = 4 if args.quick else 20
    batches = [torch.from_numpy(rng.choice(train, BATCH, replace=False)) for _ in range(count)]

    def node_run(graph):
        sampler = NeighborSampler(graph, FANOUTS, seed=0)
        return lambda bs: sum(sampler.sample(SamplerInput(s)).num_sampled_edges for s in bs)

    on_gpu = args.device == "cuda"
    rows = [
        _versus("node, graph in device memory", node_run(ds.graph), node_run(ds.graph.to(args.device)), batches, args)
    ]
    if on_gpu:
        rows.append(
            _versus(
                "node, graph pinned in host memory", node_run(ds.graph), node_run(ds.graph.pin_memory()), batches, args
            )
        )

    indptr, indices = ds.graph.indptr, ds.graph.indices
    edge_batches = []
    for _ in range(count):  # seed edges: random CSC positions, as (src, dst) pairs
        pos = torch.from_numpy(rng.integers(0, ds.graph.num_edges, BATCH))
        edge_batches.append(torch.stack([indices[pos].long(), torch.searchsorted(indptr, pos, right=True) - 1]))

    def link_run(graph):
        sampler = LinkNeighborSampler(NeighborSampler(graph, FANOUTS, seed=0), neg_sampling="binary", exclude="self")
        return lambda bs: sum(
            sampler.sample(EdgeSamplerInput(b[0], b[1], key=i)).num_sampled_edges for i, b in enumerate(bs)
        )

    rows.append(
        _versus(
            "link, exclude self, 1 negative", link_run(ds.graph), link_run(ds.graph.to(args.device)), edge_batches, args
        )
    )

    typed = load(_typed(args))
    papers = typed.split["train"].numpy()  # the split of the target type, paper
    typed_batches = [torch.from_numpy(rng.choice(papers, min(BATCH, len(papers)), replace=False)) for _ in range(count)]

    def typed_run(graph):
        sampler = NeighborSampler(graph, [15, 10], seed=0, seed_type="paper")
        return lambda bs: sum(sampler.sample(SamplerInput(s, node_type="paper")).num_sampled_edges for s in bs)

    rows.append(
        _versus(
            "typed (ogbn-mag shape, scale 0.25), [15, 10]",
            typed_run(typed.graph),
            typed_run(typed.graph.to(args.device)),
            typed_batches,
            args,
        )
    )
    if on_gpu:
        node = NeighborSampler(ds.graph.to(args.device), FANOUTS, seed=0)
        per_batch = {"node": _per_batch(node, batches),
                     "node, padded": _per_batch(node, batches, _padded_draw(node, ds.graph)),
                     "node, captured": _per_batch(node, batches, _padded_draw(node, ds.graph, capture=True),
                                                  warmup=2 * LateChecks.RING),  # (each slot captured)
                     "typed": _per_batch(NeighborSampler(typed.graph.to(args.device), [15, 10], seed=0,
                                                         seed_type="paper"), typed_batches)}
    else:
        per_batch = {"simulated": _counts_on_the_simulator()}
    return {"device": _device_name(args), "cpu_threads": os.cpu_count(), "rows": rows, "per_batch": per_batch,
            **(_host_syncs(ds.graph, batches[0], args) if on_gpu else {})}


def _padded_draw(sampler, graph, capture: bool = False):
    """Draw a batch as ``--step static`` would: into buffers of the static step's shapes, no host read; ``capture``:
    replayed as a CUDA graph once captured (``sample_padded``'s)."""
    import torch

    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.sampling import SamplerInput
    from sparsetrain.sampling.cuda.padded import PaddedOut

    shapes = StepShapes.bound(BATCH, FANOUTS, graph.num_nodes, num_edges=graph.num_edges)
    out = PaddedOut.allocate(shapes.nodes, shapes.edges,
                             lambda shape: torch.zeros(shape, dtype=torch.int64, device=sampler.graph.device))
    return lambda seeds, key: sampler.sample_padded(SamplerInput(seeds, key=key), out, capture=capture)


def _per_batch(sampler, batches, draw=None, warmup: int = 1) -> dict:
    """GPU sampling batch by batch: wall time against the stream's time (CUDA events) and the GPU's busy time (the
    profiler's kernels and copies, and how many), with the driver's own counts of the last batch. ``draw(seeds,
    key)``: how a batch is drawn (default: ``sampler.sample``), first ``warmup`` times untimed."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from sparsetrain.sampling import SamplerInput

    if draw is None:
        def draw(seeds, key):
            sampler.sample(SamplerInput(seeds, key=key))

    for key in range(warmup):  # compiles the kernels, fills the workspace (and captures)
        draw(batches[key % len(batches)], key)
    torch.cuda.synchronize()
    walls, streams = [], []
    for key, seeds in enumerate(batches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        start.record()
        draw(seeds, key)
        end.record()
        end.synchronize()
        walls.append(1e3 * (time.perf_counter() - began))
        streams.append(start.elapsed_time(end))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for key, seeds in enumerate(batches):
            draw(seeds, key)
        torch.cuda.synchronize()
    sampler.check_padded()
    device = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    return {"wall_ms": statistics.median(walls), "stream_ms": statistics.median(streams),
            "gpu_busy_ms": sum(e.time_range.elapsed_us() for e in device) / 1e3 / len(batches),
            "device_ops_profiled": len(device) / len(batches), "counts": sampler.last_batch_counts.as_dict()}


def simulated_counts() -> dict:
    """The GPU sampler's per-batch counts (the driver's own, not a timing) under Numba's CUDA simulator, the second
    batch of a kept workspace (a padded node batch: once its ring of pinned buffers is made; a captured one: once
    replayed): a node batch [15, 10, 5], eager, padded (a static step's,
    :class:`~sparsetrain.sampling.cuda.padded.PaddedOut`) and captured (its replay: the simulator's record stands for
    the CUDA graph), and a typed batch [15, 10] on tiny graphs. Run with ``NUMBA_ENABLE_CUDASIM=1``
    (:func:`_counts_on_the_simulator`)."""
    import numpy as np
    import torch

    from sparsetrain._late_reads import LateChecks
    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.sampling import CSCGraph
    from sparsetrain.sampling.cuda import driver
    from sparsetrain.sampling.cuda.arrays import NumpyArrays
    from sparsetrain.sampling.cuda.padded import PaddedOut
    from sparsetrain.sampling.cuda.workspace import DeviceWorkspace
    from sparsetrain.sampling.fanouts import Fanouts
    from sparsetrain.sampling.layout import KernelLayout

    def counts(g, seeds, fanouts, seed_type=0, padded=None, capture=False):
        indptr, indices, _ = g.numpy()
        edge_perm = None if g.edge_perm is None else g.edge_perm.numpy()
        layout = KernelLayout(g, Fanouts(fanouts))
        ws = DeviceWorkspace(NumpyArrays())
        # (a padded batch's pinned buffers: a ring, each slot captured after its first batch)
        for key in range(2 if padded is None else 2 * LateChecks.RING + 1 if capture else LateChecks.RING + 1):
            keys = [layout.hop_keys(0, key, h) for h in range(len(fanouts))]
            with np.errstate(all="ignore"):  # uint64 products wrap on purpose
                driver.sample_arrays(NumpyArrays(), indptr, indices, np.empty(1, np.float32),
                                     np.asarray(seeds, np.int64), layout, keys, False, False, edge_perm=edge_perm,
                                     seed_type=seed_type, workspace=ws, padded=padded, capture=capture)
        ws.late.drain()
        return ws.last_counts.as_dict()

    gen = torch.Generator().manual_seed(0)
    node = CSCGraph.from_edge_index(torch.randint(0, 40, (2, 200), generator=gen), 40)
    typed = CSCGraph.from_edge_index_dict({("a", "writes", "p"): torch.randint(0, 20, (2, 80), generator=gen),
                                           ("p", "cites", "p"): torch.randint(0, 30, (2, 80), generator=gen)},
                                          {"a": 20, "p": 30})
    shapes = StepShapes.bound(4, FANOUTS, node.num_nodes, num_edges=node.num_edges)
    padded = PaddedOut.allocate(shapes.nodes, shapes.edges, lambda shape: np.zeros(shape, np.int64))
    return {"node": counts(node, [0, 3, 7, 9], FANOUTS),
            "node, padded": counts(node, [0, 3, 7, 9], FANOUTS, padded=padded),
            "node, captured": counts(node, [0, 3, 7, 9], FANOUTS, padded=padded, capture=True),
            "typed": counts(typed, [1, 2, 5], [15, 10], seed_type=typed.node_types.index("p"))}


def _counts_on_the_simulator() -> dict:
    """:func:`simulated_counts` in a child process with ``NUMBA_ENABLE_CUDASIM=1`` (set before numba.cuda loads)."""
    path = os.pathsep.join(p for p in (str(ROOT), str(HERE), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=path)
    code = ("import json, warnings, gpu_report; warnings.simplefilter('ignore'); "
            "print(json.dumps(gpu_report.simulated_counts()))")
    done = subprocess.run([sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode:
        return {"error": done.stderr.strip()[-300:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _host_syncs(graph, seeds, args) -> dict:
    """Synchronizing torch calls in one GPU node-sampling batch and where each was made (torch's sync debug mode;
    numba's own not counted)."""
    import warnings

    import torch

    from sparsetrain.sampling import NeighborSampler, SamplerInput

    sampler = NeighborSampler(graph.to(args.device), FANOUTS, seed=0)
    seeds = seeds.to(args.device)
    sampler.sample(SamplerInput(seeds))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sampler.sample(SamplerInput(seeds))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    where = [f"{w.filename}:{w.lineno}" for w in caught if "called a synchronizing" in str(w.message)]
    return {"host_syncs_per_batch": len(where), "host_syncs_where": where}


def _device_name(args) -> str:
    import torch

    return torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({os.cpu_count()} cores)"


def _pyg_model(num_features: int, num_classes: int):
    import torch
    from torch_geometric.nn.models import GraphSAGE

    torch.manual_seed(0)
    return GraphSAGE(num_features, HIDDEN, num_layers=len(FANOUTS), out_channels=num_classes)


def _time_pyg_steps(loader, model, device: str, warmup: int, steps: int, trim: bool) -> float:
    """ms per step (next batch + ``.to(device)`` + forward + backward + Adam) over ``steps`` after ``warmup``."""
    import torch
    import torch.nn.functional as F

    from sparsetrain._phases import phase

    model = model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    it = iter(loader)
    for i in range(warmup + steps):
        if i == warmup:
            sync()
            start = time.perf_counter()
        batch = next(it)
        with phase("to_device"):
            batch = batch.to(device, non_blocking=True)
        kwargs = (
            {"num_sampled_nodes_per_hop": batch.num_sampled_nodes, "num_sampled_edges_per_hop": batch.num_sampled_edges}
            if trim
            else {}
        )
        with phase("step"):
            out = model(batch.x, batch.edge_index, **kwargs)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    sync()
    return 1e3 * (time.perf_counter() - start) / steps


def section_epoch(args) -> dict:
    import torch
    from torch_geometric.data import Data

    from sparsetrain.datasets import load
    from sparsetrain.engine.run import TrainSettings, train

    folder = _products(args)
    ds = load(folder)
    steps_per_epoch = -(-len(ds.split["train"]) // BATCH)
    warmup, steps = (2, 4) if args.quick else (20, args.epoch_steps)
    rows = []

    timelines, timeline_steps = {}, 3 if args.quick else 30
    # the CLI path: one whole epoch, its own stall fraction; the default step, then --step static (padded batches:
    # on a GPU sampled into the step's buffers without a host wait, the step replayed as a CUDA graph), then that with
    # the last hop fused into the first layer's mean (no input level: drawn and averaged in the sampler's run)
    for name, settings in (("sparsetrain train (CLI path)", {"step": "eager"}),
                           ("sparsetrain train --step static (CLI path)", {"step": "static"}),
                           ("sparsetrain train --step static --fuse-last-hop (CLI path)",
                            {"step": "static", "fuse_last_hop": True})):
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "log.jsonl"
            cli = dict(data=folder, fanouts=FANOUTS, batch_size=BATCH, hidden=HIDDEN, epochs=1, device=args.device,
                       eval="sampled", quiet=True, **settings)
            start = time.perf_counter()
            try:
                summary = train(TrainSettings(**cli, log=log))
            except Exception as exc:  # the CLI path failing costs its row
                rows.append({"path": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
                continue
            wall = time.perf_counter() - start
            epoch = [json.loads(line) for line in log.read_text().splitlines() if '"train_loss"' in line]
            record = epoch[-1] if epoch else {}
            seconds = record.get("seconds")
            rows.append({"path": name, "epoch_s": seconds,
                         "ms_per_step": 1e3 * seconds / steps_per_epoch if seconds else None,
                         "stall_fraction": record.get("stall_fraction"), "wall_s_incl_setup_and_eval": wall,
                         "train_loss": record.get("train_loss"),
                         "loss_waits_per_step": summary.get("loss_waits_per_step")})
            timelines[name] = _profiled(lambda: train(TrainSettings(**cli, max_steps=1 + timeline_steps)), args)

    edge_index = ds.graph.to_edge_index()
    data = Data(
        x=ds.features.gather(torch.arange(ds.num_nodes)), y=ds.labels, edge_index=edge_index, num_nodes=ds.num_nodes
    )
    train_idx = ds.split["train"]
    from sparsetrain.pyg import NeighborLoader as OurLoader

    # the drop-in as a PyG user runs it: the Data on the host (CPU sampling), the loader given device= (the GPU path
    # from a host Data), the Data moved to the device by the user
    placements = [("on the host", data, None)]
    if args.device == "cuda":
        placements += [("on the host, device='cuda'", data, args.device), ("on the device", None, None)]
    for where, placed, device in placements:
        name = f"sparsetrain.pyg.NeighborLoader (drop-in), Data {where}"
        try:
            placed = placed if placed is not None else data.to(args.device)
            ours = OurLoader(placed, num_neighbors=FANOUTS, batch_size=BATCH, input_nodes=train_idx.to(placed.x.device),
                             shuffle=True, device=device)
            ms = _time_pyg_steps(
                ours, _pyg_model(ds.num_features, ds.num_classes), args.device, warmup, steps, trim=True
            )
            rows.append({"path": name, "ms_per_step": ms, "epoch_s": ms * steps_per_epoch / 1e3})
            model = _pyg_model(ds.num_features, ds.num_classes)
            timelines[name] = _profiled(
                lambda: _time_pyg_steps(ours, model, args.device, 1, timeline_steps, trim=True), args)
        except Exception as exc:  # a path that fails costs its row
            rows.append(
                {"path": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}
            )
        finally:
            placed = ours = None
            if args.device == "cuda":
                torch.cuda.empty_cache()

    from torch_geometric.loader import NeighborLoader

    workers = 0 if args.quick else min(8, os.cpu_count() or 1)
    try:
        peer = NeighborLoader(
            data,
            num_neighbors=FANOUTS,
            batch_size=BATCH,
            input_nodes=train_idx,
            shuffle=True,
            num_workers=workers,
            pin_memory=args.device == "cuda",
            persistent_workers=workers > 0,
        )
        ms = _time_pyg_steps(peer, _pyg_model(ds.num_features, ds.num_classes), args.device, warmup, steps, trim=False)
        rows.append(
            {
                "path": f"PyG NeighborLoader, CPU sampling, {workers} workers, pin_memory, .to(device)",
                "ms_per_step": ms,
                "epoch_s": ms * steps_per_epoch / 1e3,
                "peer": True,
            }
        )
    except (ImportError, RuntimeError) as exc:  # PyG without torch-sparse / pyg-lib cannot sample
        rows.append({"path": "PyG NeighborLoader", "error": str(exc).splitlines()[0], "peer": True})
    peer_ms = next((r["ms_per_step"] for r in rows if r.get("peer") and "ms_per_step" in r), None)
    for r in rows:
        if peer_ms and r.get("ms_per_step") and not r.get("peer"):
            r["speedup_vs_pyg"] = peer_ms / r["ms_per_step"]
    return {"device": _device_name(args), "steps_per_epoch": steps_per_epoch, "timed_steps": steps, "rows": rows,
            "timeline": _timeline(ds, args), "timelines": timelines}


def _profiled(run, args) -> dict:
    """:func:`step_timeline.profiled` of ``run``, or the error that stopped it (a failure costs its timeline only)."""
    from step_timeline import profiled

    try:
        return profiled(run, cuda=args.device == "cuda")
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}


PHASES = ("sample", "gather", "step")


def _timeline(ds, args) -> dict:
    """A training step phase by phase, from the library's pieces in a plain loop: ``sample`` (NeighborSampler, graph
    on the device), ``gather`` (features on the device, ``index_select``), ``step`` (GraphSAGE forward + backward +
    Adam). Per phase, medians over the timed steps: host ms (until the call returns) and stream ms (CUDA events around
    it: the GPU's time, idle gaps included); per step: wall ms, host syncs (torch's sync debug mode; Numba's not
    seen), the sampler's own device-work counts, and from the profiler the GPU's busy ms, its kernels and copies, and
    the idle fraction. On the CPU only the host columns (the path still runs: a check of this code)."""
    import warnings

    import torch
    import torch.nn.functional as F

    from sparsetrain.nn.models import GraphSAGE
    from sparsetrain.sampling import NeighborSampler, SamplerInput

    cuda = args.device == "cuda"
    x = ds.features.gather(torch.arange(ds.num_nodes)).to(args.device)
    y = ds.labels.to(args.device)
    sampler = NeighborSampler(ds.graph.to(args.device), FANOUTS, seed=0)
    torch.manual_seed(0)
    model = GraphSAGE(ds.num_features, HIDDEN, ds.num_classes, len(FANOUTS)).to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    warmup, steps = (1, 2) if args.quick else (10, 50)
    train = ds.split["train"]
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))
    seeds = [train[order[(i * BATCH) % len(train):][:BATCH]].to(args.device) for i in range(warmup + 2 * steps)]

    def step(i: int) -> list:
        marks = []

        def mark():
            event = torch.cuda.Event(enable_timing=True) if cuda else None
            if cuda:
                event.record()
            marks.append((time.perf_counter(), event))

        mark()
        mb = sampler.sample(SamplerInput(seeds[i], key=i))
        mark()
        h = x.index_select(0, mb.input_nodes)
        mark()
        loss = F.cross_entropy(model(h, mb.to_pyg()), y[mb.seeds])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()
        return marks

    for i in range(warmup):
        step(i)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            timed = [step(warmup + i) for i in range(steps)]
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize()
    syncs = sum("called a synchronizing" in str(w.message) for w in caught)
    out = {"steps": steps, "wall_ms": statistics.median(1e3 * (m[-1][0] - m[0][0]) for m in timed),
           "host_syncs_per_step": syncs / steps if cuda else None}
    for p, name in enumerate(PHASES):
        out[f"{name}_host_ms"] = statistics.median(1e3 * (m[p + 1][0] - m[p][0]) for m in timed)
        out[f"{name}_stream_ms"] = statistics.median(m[p][1].elapsed_time(m[p + 1][1]) for m in timed) if cuda else None
    counts = sampler.last_batch_counts
    out["sampler_counts"] = counts.total.as_dict() if counts is not None else None
    if cuda:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            began = time.perf_counter()
            for i in range(steps):
                step(warmup + steps + i)
            torch.cuda.synchronize()
            wall = 1e3 * (time.perf_counter() - began)
        device = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
        busy = sum(e.time_range.elapsed_us() for e in device) / 1e3
        out.update(gpu_busy_ms=busy / steps, device_ops_per_step=len(device) / steps, gpu_idle_fraction=1 - busy / wall)
    return out


def section_moe(args) -> dict:
    import torch

    sys.path.insert(0, str(HERE))
    from moe import throughput

    if args.quick:
        cfg = dict(tokens=512, d=64, h=128, experts=8, top_k=2, reps=2)
    else:
        cfg = dict(tokens=16384, d=2048, h=1024, experts=64, top_k=8, reps=5)  # OLMoE's expert shape
    rows = throughput(cfg["tokens"], cfg["d"], cfg["h"], cfg["experts"], cfg["top_k"], cfg["reps"], args.device)
    name = _device_name(args)
    peak = next((v for k, v in BF16_PEAK_TFLOPS.items() if k in name), None) if args.device == "cuda" else None
    for r in rows:
        r["expert_TFLOP_s"] = r["expert_GFLOP_s"] / 1e3
        r["fraction_of_bf16_peak"] = r["expert_TFLOP_s"] / peak if peak else None
    return {"device": name, "config": cfg, "bf16_dense_peak_TFLOP_s": peak, "rows": rows, "torch": torch.__version__}


RUNNERS = {
    "tests": section_tests,
    "gather": section_gather,
    "moe": section_moe,
    "data": section_data,
    "sampling": section_sampling,
    "epoch": section_epoch,
}


# --------------------------------------------------------------------------- PyG's peer, built where it is missing
def _has_pyg_sampler() -> bool:
    done = subprocess.run([sys.executable, "-c", "import torch_sparse"], capture_output=True)
    return done.returncode == 0


def start_peer_build(src: Path, out: Path):
    """torch-scatter + torch-sparse for PyG's ``NeighborLoader``: wheels in ``src`` installed, or sdists built as
    CPU-only wheels (into ``out/peer_wheels``, reusable with ``--peer-src``) and installed, in the background."""
    if _has_pyg_sampler():
        return None
    wheels = out / "peer_wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pip = f"{sys.executable} -m pip"
    if sorted(src.glob("torch_sparse-*.whl")) and sorted(src.glob("torch_scatter-*.whl")):
        script = f"{pip} install --no-deps --no-index {src}/torch_scatter-*.whl {src}/torch_sparse-*.whl"
    else:
        build = f"{pip} wheel --no-build-isolation --no-deps --no-index -w {wheels}"
        script = (f"cd {wheels} && tar xzf {src}/torch_scatter-*.tar.gz && tar xzf {src}/torch_sparse-*.tar.gz && "
                  f"({build} ./torch_scatter-*/ & {build} ./torch_sparse-*/ & wait) && "
                  f"rm -rf torch_scatter-*/ torch_sparse-*/ && {pip} install --no-deps --no-index {wheels}/*.whl")
    env = {**os.environ, "FORCE_ONLY_CPU": "1", "FORCE_CUDA": "0", "MAX_JOBS": str(max(1, (os.cpu_count() or 2) // 2))}
    log = open(out / "peer_build.log", "w")
    return subprocess.Popen(
        ["nice", "-n", "19", "bash", "-c", script], stdout=log, stderr=subprocess.STDOUT, env=env
    ), time.perf_counter()


# --------------------------------------------------------------------------- the report
def run_section(name: str, args, out: Path) -> dict:
    """Run one section in a child process under its time limit; its JSON, or what went wrong in one line."""
    result = out / f"{name}.json"
    result.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--section",
        name,
        "--out",
        str(out),
        "--device", args.device, "--data", args.data, "--rounds",
        str(args.rounds),
        "--epoch-steps",
        str(args.epoch_steps),
    ] + (["--quick"] if args.quick else [])
    return run_child(cmd, result, out / f"{name}.log", BUDGET_S[name] * (4 if args.quick else 1))


def run_child(cmd: list[str], result: Path, log: Path, limit: float, env: dict | None = None) -> dict:
    """``cmd`` in a child process under ``limit`` seconds, its output kept in ``log``: the JSON it wrote to ``result``,
    or what went wrong in one line; with the section's seconds."""
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit, env=env)
        log.write_text(done.stdout + done.stderr)
        if done.returncode != 0 or not result.is_file():
            lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
            data = {"error": f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"}
        else:
            data = json.loads(result.read_text())
    except subprocess.TimeoutExpired:
        data = {"error": f"did not finish within {limit} s"}
    data["section_seconds"] = round(time.perf_counter() - start, 1)
    return data


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return str(v)


COUNT_COLUMNS = ("launches", "kernels", "torch_ops", "copies", "syncs", "allocations", "pinned_allocations", "graphs")


def _counts_table(counts: dict) -> list[str]:
    """The driver's per-phase counts of one batch as a table."""
    return ["| phase | " + " | ".join(COUNT_COLUMNS) + " |", "|---" + "|---:" * len(COUNT_COLUMNS) + "|"] + [
        f"| {phase} | " + " | ".join(str(c[k]) for k in COUNT_COLUMNS) + " |" for phase, c in counts.items()]


def _per_batch_lines(per_batch: dict) -> list[str]:
    lines = []
    simulated = per_batch.get("simulated")
    if simulated is not None:
        if "error" in simulated:
            return [f"\nPer-batch counts (CUDA simulator): {simulated['error']}"]
        per_batch = simulated
        lines.append("\nPer-batch device work of the GPU sampler, counted by its driver (the CUDA simulator: no GPU)")
    for name in ("node", "node, padded", "node, captured", "typed"):
        b = per_batch.get(name)
        if b is None:
            continue
        if "wall_ms" in b:  # on a GPU: time first, then the counts
            lines.append(f"\n{name} batch on the GPU: wall {b['wall_ms']:.2f} ms, stream {b['stream_ms']:.2f} ms "
                         f"(CUDA events), GPU busy {b['gpu_busy_ms']:.3f} ms; {b['device_ops_profiled']:.0f} kernels "
                         "and copies profiled a batch; the driver's counts:")
            b = b["counts"]
        else:
            lines.append(f"\n{name} batch:")
        lines += ["", *_counts_table(b)]
    return lines


def _timeline_lines(t: dict | None) -> list[str]:
    if not t:
        return []
    lines = [f"\nStep timeline ({t['steps']} steps, medians; stream = CUDA events, GPU time idle gaps included): "
             f"wall {_fmt(t['wall_ms'])} ms, host syncs {_fmt(t['host_syncs_per_step'])} a step, GPU busy "
             f"{_fmt(t.get('gpu_busy_ms'))} ms, {_fmt(t.get('device_ops_per_step'))} kernels and copies a step, "
             f"GPU idle {_fmt(t.get('gpu_idle_fraction'))}", "", "| phase | host ms | stream ms |", "|---|---:|---:|"]
    lines += [f"| {p} | {_fmt(t[p + '_host_ms'])} | {_fmt(t[p + '_stream_ms'])} |" for p in PHASES]
    if t.get("sampler_counts"):
        lines.append(f"\nThe sampler's own device work a step: {t['sampler_counts']}")
    return lines


def markdown(report: dict) -> str:
    """The report's tables, ready for benchmarks/RESULTS.md."""
    from step_timeline import lines as timeline_lines

    s = report["sections"]
    lines = [
        f"## GPU report: {report['device']} ({report['date']})",
        "",
        (
            f"`python benchmarks/gpu_report.py --out DIR{' --quick' if report['quick'] else ''}`: "
            f"{report['total_seconds']:.0f} s in all."
        )
        + (
            f" PyG's peer (torch-sparse) built or installed here: {report['peer_build']}."
            if report.get("peer_build")
            else ""
        ),
        "",
    ]

    def failed(name):
        sec = s.get(name, {"not_run": "not in --only"})
        if "error" in sec or "not_run" in sec:
            lines.extend([f"**{name}**: {sec.get('error') or sec.get('not_run')}", ""])
            return True
        return False

    if not failed("tests"):
        t = s["tests"]
        lines += [f"**pytest -m gpu**: {t['summary']}"] + [f"- {f}" for f in t.get("failures", [])] + [""]
    if not failed("gather"):
        g = s["gather"]
        v = g.get("variants")
        if g.get("summary"):
            keys = ("end to end", "back to back", "new output", "host ids", "sort + kernel", "kernel",
                    "kernel, unsorted")
            lines += [
                "**Zero-copy gather, end to end against the kernel alone** (fractions of pinned memcpy by CUDA events, "
                f"{v['memcpy_GB_per_s']:.1f} GB/s, same run; target: end to end >= 90% for rows >= 256 B). End to end: "
                "`PinnedFeatures.gather(ids, out=)`, ids on the device, each call waited for; back to back: calls "
                "queued with one wait at the end; new output: no `out=`; host ids: ids in pageable host memory; "
                "sort + kernel: no Python between them; kernel: the store's kernel alone (unsorted: on the ids as "
                "given). Counts: what one end-to-end call queued (the store's own count).",
                "",
                "| row size | " + " | ".join(keys) + " | exact | counts |",
                "|---:|" + "---:|" * len(keys) + "---|---|",
            ]
            lines += [
                f"| {r['row_bytes']} B | " + " | ".join(f"{r[k]:.0%}" if k in r else "-" for k in keys)
                + f" | {'yes' if r['exact'] else 'NO'} | "
                + (", ".join(f"{k} {n}" for k, n in r["counts"].items() if n) if r.get("counts") else "-") + " |"
                for r in g["summary"]
            ]
            lines.append("")
        lines += [
            f"**Zero-copy gather against the CPU gather + copy** (`feature_gather.py`: a new output each call, host "
            f"clock; pinned memcpy {g['memcpy_GB_per_s']:.1f} GB/s)",
            "",
            "| row size | GB/s | of memcpy | vs CPU gather + copy |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            (
                f"| {r['name'].split(', ')[-1]} | {r['GB_per_s']:.1f} | {r['fraction_of_memcpy']:.0%} | "
                f"{r['vs_cpu_gather_plus_copy']:.2f}x |"
            )
            for r in g["rows"]
        ]
        lines.append("")
        if v:
            lines += [f"Every row of `gather_variants.py` (CUDA events, each call waited for unless said; pinned "
                      f"memcpy by events {v['memcpy_GB_per_s']:.1f} GB/s):", "",
                      "| row size | variant | GB/s | of memcpy | exact |", "|---:|---|---:|---:|---|"]
            lines += [
                f"| {r['row_bytes']} B | {r['variant']} | {r['GB_per_s']:.1f} | {r['fraction_of_memcpy']:.0%} | "
                f"{'yes' if r['exact'] else 'NO'} |"
                if "GB_per_s" in r
                else f"| {r['row_bytes']} B | {r['variant']} | {r['error']} | | |"
                for r in v["rows"]
            ]
            lines.append("")
    if not failed("sampling"):
        lines += [
            f"**Sampling** ({s['sampling']['device']} vs the CPU sampler on {s['sampling']['cpu_threads']} "
            "cores; target: node, "
            "device memory >= 300M edges/s)",
            "",
            "| sampler | CPU M edges/s | GPU M edges/s | GPU / CPU |",
            "|---|---:|---:|---:|",
        ]
        for r in s["sampling"]["rows"]:
            gpu = r["gpu"]
            gpu_cell = f"{gpu['edges_per_s'] / 1e6:,.1f}" if "edges_per_s" in gpu else gpu["error"]
            lines.append(
                f"| {r['sampler']} | {r['cpu']['edges_per_s'] / 1e6:,.1f} | {gpu_cell} | {_fmt(r.get('speedup'))} |"
            )
        lines += _per_batch_lines(s["sampling"].get("per_batch", {}))
        if s["sampling"].get("host_syncs_per_batch") is not None:
            lines.append(
                f"\nHost syncs in one GPU node-sampling batch (torch's sync debug mode): "
                f"{s['sampling']['host_syncs_per_batch']} ({', '.join(s['sampling'].get('host_syncs_where', []))})"
            )
        lines.append("")
    if not failed("epoch"):
        e = s["epoch"]
        lines += [
            f"**Epoch**, GraphSAGE [15,10,5] b{BATCH} h{HIDDEN}, products-scale synthetic "
            f"({e['steps_per_epoch']} steps; "
            f"{e['timed_steps']} timed; target >= 3x PyG, stall <= 0.05)",
            "",
            "| path | ms / step | epoch s | stall | vs PyG |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in e["rows"]:
            if "error" in r:
                lines.append(f"| {r['path']} | {r['error']} | | | |")
            else:
                lines.append(
                    f"| {r['path']} | {_fmt(r.get('ms_per_step'))} | {_fmt(r.get('epoch_s'))} | "
                    f"{_fmt(r.get('stall_fraction'))} | "
                    f"{_fmt(r.get('speedup_vs_pyg'))} |"
                )
        waits = [r["loss_waits_per_step"] for r in e["rows"] if r.get("loss_waits_per_step") is not None]
        if waits:  # the trainer reads each loss when it has arrived (LossRing): 0 unless the host runs RING steps ahead
            lines.append(f"\nHost waits a step to read the loss, CLI path: {waits[0]:.3f}")
        lines += _timeline_lines(e.get("timeline"))
        for name, t in (e.get("timelines") or {}).items():
            lines += timeline_lines(name, t)
        lines.append("")
    if not failed("moe"):
        m = s["moe"]
        lines += [
            (
                f"**MoE** forward + backward, {m['config']} ({m['rows'][0]['dtype']}; target: expert GEMMs >= "
                "60% of the bf16 peak)"
            ),
            "",
            "| implementation | tokens/s | expert TFLOP/s | of bf16 peak |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            (
                f"| {r['implementation']} | {r['tok_s']:,.0f} | {r['expert_TFLOP_s']:.2f} | "
                f"{_fmt(r['fraction_of_bf16_peak'])} |"
            )
            for r in m["rows"]
        ]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for report.md, report.json and each section's log")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when available")
    p.add_argument(
        "--data",
        default=os.environ.get("SPARSETRAIN_BENCH_DATA", str(HERE / "out")),
        help="where the synthetic datasets are made",
    )
    p.add_argument("--quick", action="store_true", help="tiny inputs: checks that every section runs, measures nothing")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epoch-steps", type=int, default=200, help="timed steps of the drop-in and PyG epoch rows")
    p.add_argument(
        "--peer-src",
        default=os.environ.get("SPARSETRAIN_PYG_PEER_SRC"),
        help="folder with torch_scatter/torch_sparse sdists (or wheels): built and installed when PyG's peer "
        "cannot sample (no torch-sparse, no pyg-lib), while the GPU-only sections run",
    )
    p.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.section:  # child: one section, its JSON into --out
        (out / f"{args.section}.json").write_text(json.dumps(RUNNERS[args.section](args), indent=1, default=str))
        return 0
    start = time.perf_counter()
    build = start_peer_build(Path(args.peer_src), out) if args.peer_src else None
    peer = None
    sections = {}
    for name in args.only.split(","):
        if build is not None and name in WAITS_FOR_PEER:
            proc, began = build
            print(f"[{time.perf_counter() - start:6.0f} s] waiting for the PyG peer's build ...", flush=True)
            try:
                code = proc.wait(timeout=PEER_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = f"killed after {PEER_WAIT_S} s"
            peer = {"exit": code, "seconds": round(time.perf_counter() - began, 1)}
            print(f"         peer build: {peer}", flush=True)
            build = None
        print(f"[{time.perf_counter() - start:6.0f} s] {name} ...", flush=True)
        sections[name] = run_section(name, args, out)
        print(f"         {'error: ' + sections[name]['error'] if 'error' in sections[name] else 'done'} "
              f"({sections[name]['section_seconds']} s)", flush=True)
        # written after every section: a run cut short still leaves the sections it finished
        report = {"device": _device_name(args), "date": time.strftime("%Y-%m-%d"), "quick": args.quick,
                  "total_seconds": time.perf_counter() - start, "peer_build": peer, "sections": sections}
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
        (out / "report.md").write_text(markdown(report))
    print(markdown(report))
    print(f"wrote {out / 'report.md'} and {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
