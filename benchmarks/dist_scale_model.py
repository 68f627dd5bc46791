"""Partitioned training at scale, ON PAPER: a model, not a measurement.

Per rank and training step, from the bytes and memory measured on small graphs (docs/partitioned_training.md,
"Measured"), for papers100M and a 10B-edge graph on 8, 16 and 64 machines: bytes sent by the sampler and by the
feature store, topology and feature memory, and an expected epoch time on a 100 Gb/s network. Every constant below
is named with its source. Prints a table and writes JSON.

    python benchmarks/dist_scale_model.py --json dist_scale_model.json
    python benchmarks/dist_scale_model.py --typed --json typed_scale_model.json   # R-GAT on IGBH-full, 8-64 ranks
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

# --- Measured here (docs/partitioned_training.md) -------------------------------------------------------------------
# Edge cut of restreamed LDG on synthetic community graphs: 1M/20M at 2/4/8 parts 10.0/15.0/17.5%, i.e. exactly
# C_INF * (1 - 1/N); the full papers100M-shaped graph (111M nodes, 1.6B edges) at 8 parts 18.0%:
# C_INF = 0.180 / (7/8).
CUT_LAW_C_INF = {"papers100M": 0.180 / (1 - 1 / 8), "10B-edge": 0.175 / (1 - 1 / 8)}
# Halo at 8 parts: the full papers100M-shaped graph 1.94 x owned nodes (LDG, 18.0% cut); its 1/10 graph 5.27 x with
# hash (87.5% cut; 1.93 x with LDG, so the halo does not grow with the graph at a fixed degree).
HALO_LDG_8, CUT_LDG_8, HALO_HASH_8, CUT_HASH_8, DEG_PAPERS_TENTH = 1.94, 0.180, 5.27, 0.875, 161568588 / 11105996
# Sampler bytes sent per rank and batch, 1M/20M graph, 2 parts, batch 1024, fanouts 15,10,5: 3,280 KiB at a 14% cut
# (LDG), 9,600 KiB at 50% (hash). Calibrates SAMPLE_ALPHA below; the hash point is the check.
SAMPLE_KIB_LDG, SAMPLE_CUT_LDG, SAMPLE_KIB_HASH, SAMPLE_CUT_HASH = 3280, 0.14, 9600, 0.50
# Feature store bytes exchanged (sent + received) per rank and step: 5.1 MB on the 300K/6M graph, 2 parts, 10.0% cut,
# batch 1024, fanouts 10,10, 64 float32 columns, hit rate 41% with the default cache (25% of the halo).
FEAT_MB_MEASURED, FEAT_CUT, FEAT_FANOUTS, FEAT_ROW_BYTES, HIT_RATE = 5.1, 0.10, (10, 10), 64 * 4, 0.41
# Protocol (partitioned/sampler.py, features.py): a remote frontier node costs an int64 id out and an int64 draw
# count back; each draw returns (source, owner, edge id) as 3 int64; a missed feature row costs an int64 id out and
# the row back.
REQUEST_BYTES, DRAW_BYTES, ROW_ID_BYTES = 16, 24, 8
# Exchanges per step: 4 all_to_all per sampling hop, 3 per feature gather.
ALL_TO_ALL_PER_HOP, ALL_TO_ALL_FEATURES = 4, 3
# Part files per local node: indptr int64 + local_to_global int64 + labels int64; per owned node col_start int64;
# per halo node halo_owner int32; per edge an int32 source. Reproduces the measured 4.2 GiB of parts on disk for the
# 1/10 graph (see `check_disk`).
BYTES_PER_LOCAL, BYTES_PER_OWNED, BYTES_PER_HALO, BYTES_PER_EDGE = 24, 8, 4, 4
CACHE_FRACTION = 0.25  # engine/plan.py HALO_CACHE_FRACTION: halo rows cached without --cache-gb
EDGE_BALANCE_8 = 1.023  # largest part's edges / mean, 1/10 graph at 8 parts (LDG)
# Compute per step: sparsetrain's measured single-GPU step, GraphSAGE [15,10,5], batch 1024, hidden 256, graph in
# device memory (benchmarks/RESULTS.md, H200, products-scale synthetic, CLI path: 15.7 ms a step). The step's work
# is per batch, not per graph, so it carries over to papers100M (SALIENT's 14 ms below is the check).
GPU_STEP_S = 0.0157
# Today's DistNeighborSampler runs its hops in Numba kernels on one CPU thread a rank: 233 ms a batch per rank (wall;
# 86 ms of CPU: 2 ranks on 2 shared cores, 1M/20M graph in 2 LDG parts, [15,10,5], batch 1024, benchmarks/
# dist_sampling.py; training not included). The "today" column uses it in place of the GPU step.
CPU_DIST_SAMPLE_S = 0.233

# --- Cited -----------------------------------------------------------------------------------------------------------
PAPERS_TRAIN_NODES = 1_207_179  # ogbn-papers100M train split (OGB)
# SALIENT (one V100, papers100M, SAGE [15,10,5], batch 1024): 16.5 s/epoch -> per step with sampling and training.
SALIENT_STEP_S = 16.5 / math.ceil(PAPERS_TRAIN_NODES / 1024)
DISTDGL_16_S = 13.0  # DistDGL, papers100M, 16 machines (DistDGL paper; shared/ANCHORS.md)
SALIENT_PP_SPEEDUP = 12.7  # SALIENT++ over DistDGL, 8 single-GPU machines (MLSys'23)
SALIENT_16_S = 2.03  # SALIENT, papers100M, 16 A10G on 8 machines (artifact)

# --- Assumed ---------------------------------------------------------------------------------------------------------
LINK_BYTES_S = 100e9 / 8 * 0.8  # 100 Gb/s, full duplex, 80% of line rate achievable by all_to_all
LATENCY_S = 25e-6  # per peer message of an all_to_all (TCP/RoCE small-message latency); peers served in turn
BATCH, FANOUTS = 1024, (15, 10, 5)
GRAPHS = {
    # name: nodes, edges, feature row bytes, train nodes
    "papers100M": (111_059_956, 1_615_685_872, 128 * 2, PAPERS_TRAIN_NODES),
    # a web/social graph: 10B edges on 500M nodes (degree 20, the shape the sampler bytes were measured on),
    # 128 float16 features, 1% of nodes labelled for training
    "10B-edge": (500_000_000, 10_000_000_000, 128 * 2, 5_000_000),
}
MACHINES = (8, 16, 64)


def cut(graph: str, n: int, method: str) -> float:
    return 1 - 1 / n if method == "hash" else CUT_LAW_C_INF[graph] * (1 - 1 / n)


def halo_raw(c: float, degree: float, n: int) -> float:
    """Halo per owned node if remote in-edges came from outside nodes at random: each of the (N-1) x owned outside
    nodes sends Poisson(c * degree / (N-1)) edges into the part, and is in the halo if it sends at least one."""
    return (n - 1) * (1 - math.exp(-c * degree / (n - 1)))


# Degree skew makes fewer distinct halo nodes than the random model: calibrated on the LDG point, checked on hash.
HALO_KAPPA = HALO_LDG_8 / halo_raw(CUT_LDG_8, DEG_PAPERS_TENTH, 8)


def halo(graph: str, n: int, method: str, degree: float) -> float:
    return HALO_KAPPA * halo_raw(cut(graph, n, method), degree, n)


def frontier(fanouts=FANOUTS, batch=BATCH):
    """Per hop (DGL-style, every node so far is expanded): non-seed nodes expanded, and the draws each makes; new
    nodes per hop = frontier x fanout (no deduplication: the bound; SAMPLE_ALPHA absorbs the duplicates)."""
    hops, total, new = [], batch, 0
    for f in fanouts:
        hops.append((total - batch, f))  # non-seed nodes of the frontier and their fanout
        new = total * f
        total += new
    return hops, total


def sample_bytes_raw(c: float, fanouts=FANOUTS) -> float:
    hops, _ = frontier(fanouts)
    return sum(c * nodes * (REQUEST_BYTES + f * DRAW_BYTES) for nodes, f in hops)


SAMPLE_ALPHA = SAMPLE_KIB_LDG * 1024 / sample_bytes_raw(SAMPLE_CUT_LDG)


def feature_bytes_raw(c: float, row_bytes: int, fanouts=FANOUTS, hit=HIT_RATE) -> float:
    """Sent + received per rank and step: misses = (1 - hit) x c x input nodes; each an id one way, a row back."""
    _, inputs = frontier(fanouts)
    return 2 * (1 - hit) * c * inputs * (ROW_ID_BYTES + row_bytes)


FEAT_ALPHA = FEAT_MB_MEASURED * 1e6 / feature_bytes_raw(FEAT_CUT, FEAT_ROW_BYTES, FEAT_FANOUTS)


def row(graph: str, n: int, method: str) -> dict:
    nodes, edges, row_bytes, train = GRAPHS[graph]
    degree = edges / nodes
    c, h = cut(graph, n, method), halo(graph, n, method, degree)
    owned = nodes / n
    sample_sent = SAMPLE_ALPHA * sample_bytes_raw(c)
    feat_sent = FEAT_ALPHA * feature_bytes_raw(c, row_bytes) / 2  # one direction; links are full duplex
    topo = owned * (1 + h) * BYTES_PER_LOCAL + owned * BYTES_PER_OWNED + owned * h * BYTES_PER_HALO \
        + edges / n * EDGE_BALANCE_8 * BYTES_PER_EDGE
    feats = owned * row_bytes + CACHE_FRACTION * h * owned * row_bytes
    steps = math.ceil(train / n / BATCH)
    rounds = len(FANOUTS) * ALL_TO_ALL_PER_HOP + ALL_TO_ALL_FEATURES
    comm_s = (sample_sent + feat_sent) / LINK_BYTES_S + rounds * (n - 1) * LATENCY_S
    return {"graph": graph, "machines": n, "partition": method, "edge_cut": c, "halo_per_owned": h,
            "sample_mb_per_step": sample_sent / 1e6, "feature_mb_per_step": feat_sent / 1e6,
            "comm_ms_per_step": 1e3 * comm_s, "topology_gb_per_rank": topo / 1e9, "feature_gb_per_rank": feats / 1e9,
            "replicated_topology_gb": (nodes * 16 + edges * BYTES_PER_EDGE) / 1e9, "steps_per_epoch": steps,
            "epoch_s_serial": steps * (GPU_STEP_S + comm_s), "epoch_s_overlapped": steps * max(GPU_STEP_S, comm_s),
            "epoch_s_today_cpu_sampler": steps * (CPU_DIST_SAMPLE_S + comm_s)}


def check_disk() -> float:
    """The part-size model on the measured 1/10 papers100M graph at 8 parts: GiB of parts (measured: 4.2)."""
    nodes, edges, rb = 11105996, 161568588, 256
    return (nodes * (1 + HALO_LDG_8) * BYTES_PER_LOCAL + nodes * BYTES_PER_OWNED + nodes * HALO_LDG_8 * BYTES_PER_HALO
            + edges * BYTES_PER_EDGE + nodes * rb) / 2**30


# ======================================================================================================= typed graphs
# R-GAT on IGBH-full (MLPerf Training's GNN benchmark), on N ranks over typed parts: the same terms by node and edge
# type. `python benchmarks/dist_scale_model.py --typed`.

# --- Cited ------------------------------------------------------------------------------------------------------------
# IGBH-full (sparsetrain.datasets.presets, from IGB's loader and DGL's download script) and the relations as MLPerf's
# reference trains on them (sparsetrain.datasets.igb.with_reference_reverses: cites symmetrised with a self-loop per
# paper, every other relation plus its rev_ reverse); (src, relation, dst): edges.
IGBH_FULL_NODES = {"paper": 269_346_174, "author": 277_220_883, "institute": 26_918, "fos": 712_960}
_CITES, _WRITTEN, _AFFILIATED, _TOPIC = 3_996_442_004, 716_761_549, 48_521_486, 1_050_280_600
IGBH_FULL_EDGES = {
    ("paper", "cites", "paper"): 2 * _CITES + IGBH_FULL_NODES["paper"],
    ("paper", "written_by", "author"): _WRITTEN, ("author", "rev_written_by", "paper"): _WRITTEN,
    ("author", "affiliated_to", "institute"): _AFFILIATED, ("institute", "rev_affiliated_to", "author"): _AFFILIATED,
    ("paper", "topic", "fos"): _TOPIC, ("fos", "rev_topic", "paper"): _TOPIC,
}
# MLPerf's reference (mlcommons/training graph_neural_network/train_rgnn_multi_gpu.py and README): batch 1024 a GPU,
# fanouts 15,10,5, features converted to FP16 (1024 wide: 2 KiB a row, every node type), 94.6M training seeds
# (4,730,280 = 5% of them between evaluations), target 72% validation accuracy.
MLPERF_BATCH, MLPERF_FANOUTS, IGBH_ROW_BYTES, MLPERF_TRAIN_SEEDS = 1024, (15, 10, 5), 1024 * 2, 4_730_280 * 20
# NVIDIA's MLPerf Training entry on 8x H200 (issue 46): 7.3 min to 72%, ~183K seeds/s, ~23K seeds/s per GPU, graph and
# features in GPU memory (WholeGraph over NVLink). Its per-GPU rate sets the compute time of a step below.
MLPERF_8X_H200_MIN, MLPERF_8X_H200_SEEDS_S = 7.3, 183_000
STEP_S_AT_MLPERF_RATE = MLPERF_BATCH / (MLPERF_8X_H200_SEEDS_S / 8)
# Links per GPU (assumed): 100 Gb/s Ethernet, 400 Gb/s InfiniBand NDR (a DGX H200's one NIC per GPU), NVLink 4 within
# one 8-GPU node (450 GB/s each way); 80% of line rate reached by an all_to_all.
LINKS_BYTES_S = {"100GbE": 100e9 / 8 * 0.8, "400G IB": 400e9 / 8 * 0.8, "NVLink": 450e9 * 0.8}

# --- Measured here (benchmarks/RESULTS.md, "R-GAT on typed parts"; benchmarks/dist_typed_bytes.py) ------------------
# `synth --preset igbh-tiny --scale 0.3 --feature-dim 32` (165K nodes, 1.24M edges), LDG parts, batch 64 a rank
# (small enough that a batch reaches a third of the graph, not all of it), fanouts 15,10,5, 6 batches a rank.
# parts: edge cut fraction, halo / owned, remote share of the input nodes (rank 0, all types), sampler bytes sent and
# feature bytes exchanged (sent + received) per rank and batch, halo cache hit rate, input nodes per batch.
TYPED_MEASURED = {
    2: {"cut": 0.106, "halo": 0.382, "remote": 0.352, "sample_b": 707 * 1024, "feature_b": 3918 * 1024, "hit": 0.25,
        "inputs": 55_857},
    4: {"cut": 0.159, "halo": 0.743, "remote": 0.559, "sample_b": 1014 * 1024, "feature_b": 6215 * 1024, "hit": 0.18,
        "inputs": 50_701},
}
TYPED_CAL_PARTS = 4  # calibrated on 4 parts, checked on 2
TINY03_NODES = {"paper": 30_000, "author": 107_112, "institute": 2_621, "fos": 25_266}
TINY03_EDGES = {("paper", "cites", "paper"): 328_304, ("paper", "written_by", "author"): 141_433,
                ("author", "affiliated_to", "institute"): 97_623, ("paper", "topic", "fos"): 215_534,
                ("author", "rev_written_by", "paper"): 141_433, ("institute", "rev_affiliated_to", "author"): 97_623,
                ("fos", "rev_topic", "paper"): 215_534}
TINY03_ROW_BYTES = 32 * 4
# typed part files: per edge type an int32 source per edge, an int64 indptr entry per local destination node and an
# int64 col_start per owned one; per local node an int64 local_to_global, per halo node an int32 halo_owner, per local
# paper an int64 label (partition/typed.py, docs/partitioned_training.md)
TYPED_EDGE_BYTES, TYPED_INDPTR_BYTES, TYPED_COL_START_BYTES = 4, 8, 8
TYPED_L2G_BYTES, TYPED_HALO_OWNER_BYTES, TYPED_LABEL_BYTES = 8, 4, 8


def _min_fanout(f: int, degree: float) -> float:
    """E[min(f, D)] for a geometric in-degree D of mean ``degree`` (a skewed degree; -1: every edge)."""
    if f < 0:
        return degree
    q = degree / (degree + 1)
    return q * (1 - q**f) / (1 - q)


def typed_frontier(nodes: dict, edges: dict, batch: int, fanouts=MLPERF_FANOUTS, seed_type: str = "paper") -> dict:
    """One batch's sampling tree by type (as the typed sampler draws it: each node first reached at hop h draws up to
    the fanout from each edge type into its type at hop h + 1): per hop, draws per edge type and nodes expanded by
    type; input nodes by type, a type's distinct nodes capped by drawing that many from its N_t nodes at random
    (``N_t (1 - exp(-draws / N_t))``; no cap on the others: at IGBH-full's size a batch's 1.5M papers are 0.6% of
    them)."""
    degree = {et: e / nodes[et[2]] for et, e in edges.items()}
    new = {t: 0.0 for t in nodes}
    new[seed_type] = float(batch)
    reached = dict(new)
    hops = []
    for f in fanouts:
        draws = {et: new[et[2]] * _min_fanout(f, d) for et, d in degree.items()}
        expanded = dict(new)
        new = {t: 0.0 for t in nodes}
        for et, k in draws.items():
            new[et[0]] += k
        for t in nodes:  # distinct: drawing ``reached + new`` from N_t at random, less what was reached before
            total = nodes[t] * (1 - math.exp(-(reached[t] + new[t]) / nodes[t]))
            new[t], reached[t] = max(total - reached[t], 0.0), total
        hops.append({"draws": draws, "expanded": expanded})
    return {"hops": hops, "inputs": reached}


def remote_share(cut_ratio_c: float, n: int, hops: list, inputs: dict) -> float:
    """Share of a batch's input nodes another rank owns: a node reached over a sampled edge stays in its parent's part
    with probability 1 - c and leaves it for one of the N - 1 others with c (a Markov chain over the hops, seeds owned);
    weighted by the nodes first reached at each hop."""
    p_own, weights, remote = 1.0, 0.0, 0.0
    for hop in hops:
        p_own = p_own * (1 - cut_ratio_c) + (1 - p_own) * cut_ratio_c / (n - 1)
        reached = sum(hop["draws"].values())
        weights, remote = weights + reached, remote + reached * (1 - p_own)
    return remote / weights


def _remote_for(c_sampled: float, n: int, frontier: dict) -> float:
    return remote_share(c_sampled, n, frontier["hops"], frontier["inputs"])


def _fit_sampled_cut(measured: dict, n: int, frontier: dict) -> float:
    """The per-hop crossing probability that reproduces the measured remote share (bisection)."""
    lo, hi = 0.0, (n - 1) / n
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _remote_for(mid, n, frontier) < measured["remote"] else (lo, mid)
    return (lo + hi) / 2


def typed_sample_bytes_raw(remote: float, frontier: dict) -> float:
    """Bytes a rank sends per batch for its remote frontier: a request (id and count) per remote node and edge type
    expanded, the owner's draws back (3 int64 each), summed over the hops."""
    total = 0.0
    for hop in frontier["hops"]:
        for et, k in hop["draws"].items():
            total += remote * (hop["expanded"][et[2]] * REQUEST_BYTES + k * DRAW_BYTES)
    return total


def typed_feature_bytes(remote: float, hit: float, inputs: float, row_bytes: int) -> float:
    """Sent + received per rank and step: every remote input row the halo cache misses, an id out and the row back."""
    return 2 * (1 - hit) * remote * inputs * (ROW_ID_BYTES + row_bytes)


_CAL_FRONTIER = typed_frontier(TINY03_NODES, TINY03_EDGES, 64)
TYPED_CUT_RATIO = _fit_sampled_cut(TYPED_MEASURED[TYPED_CAL_PARTS], TYPED_CAL_PARTS, _CAL_FRONTIER) \
    / TYPED_MEASURED[TYPED_CAL_PARTS]["cut"]
"""Sampled edges cross parts this many times as often as the edge cut says (hubs are cut more and sampled more)."""
TYPED_SAMPLE_ALPHA = TYPED_MEASURED[TYPED_CAL_PARTS]["sample_b"] / typed_sample_bytes_raw(
    TYPED_MEASURED[TYPED_CAL_PARTS]["remote"], _CAL_FRONTIER)
_TINY_DEGREE = sum(TINY03_EDGES.values()) / sum(TINY03_NODES.values())
TYPED_HALO_KAPPA = TYPED_MEASURED[TYPED_CAL_PARTS]["halo"] / halo_raw(TYPED_MEASURED[TYPED_CAL_PARTS]["cut"],
                                                                        _TINY_DEGREE, TYPED_CAL_PARTS)
TYPED_CUT_C_INF = TYPED_MEASURED[TYPED_CAL_PARTS]["cut"] / (1 - 1 / TYPED_CAL_PARTS)
TYPED_MACHINES = (8, 16, 32, 64)


def typed_checks() -> dict:
    """The calibration and its checks on the other measured part count."""
    other = TYPED_MEASURED[2]
    c2 = min(TYPED_CUT_RATIO * other["cut"], 0.5)
    remote2 = _remote_for(c2, 2, _CAL_FRONTIER)
    inputs = sum(_CAL_FRONTIER["inputs"].values())
    return {"cut_ratio": TYPED_CUT_RATIO, "sample_alpha": TYPED_SAMPLE_ALPHA, "halo_kappa": TYPED_HALO_KAPPA,
            "cut_c_inf": TYPED_CUT_C_INF, "cut_2_predicted": TYPED_CUT_C_INF / 2, "cut_2_measured": other["cut"],
            "remote_2_predicted": remote2, "remote_2_measured": other["remote"],
            "sample_kib_2_predicted": TYPED_SAMPLE_ALPHA * typed_sample_bytes_raw(other["remote"], _CAL_FRONTIER)
            / 1024, "sample_kib_2_measured": other["sample_b"] / 1024,
            "feature_kib_2_predicted": typed_feature_bytes(other["remote"], other["hit"], other["inputs"],
                                                           TINY03_ROW_BYTES) / 1024,
            "feature_kib_2_measured": other["feature_b"] / 1024,
            "halo_2_predicted": TYPED_HALO_KAPPA * halo_raw(other["cut"], _TINY_DEGREE, 2), "halo_2_measured":
            other["halo"], "inputs_predicted_batch64": inputs, "inputs_measured_batch64": TYPED_MEASURED[4]["inputs"]}


def typed_row(n: int, method: str, hit: float = TYPED_MEASURED[TYPED_CAL_PARTS]["hit"]) -> dict:
    """Per rank and step, R-GAT on IGBH-full over ``n`` typed parts (MLPerf's batch a rank and fanouts)."""
    nodes, edges = IGBH_FULL_NODES, IGBH_FULL_EDGES
    frontier = typed_frontier(nodes, edges, MLPERF_BATCH)
    inputs = sum(frontier["inputs"].values())
    c = 1 - 1 / n if method == "hash" else TYPED_CUT_C_INF * (1 - 1 / n)
    c_sampled = min(TYPED_CUT_RATIO * c, 1 - 1 / n) if method == "ldg" else c
    remote = _remote_for(c_sampled, n, frontier)
    sample = TYPED_SAMPLE_ALPHA * typed_sample_bytes_raw(remote, frontier)
    feature = typed_feature_bytes(remote, hit, inputs, IGBH_ROW_BYTES) / 2  # one direction; links are full duplex
    degree = sum(edges.values()) / sum(nodes.values())
    h = TYPED_HALO_KAPPA * halo_raw(c, degree, n)
    owned = {t: v / n for t, v in nodes.items()}
    local = {t: v * (1 + h) for t, v in owned.items()}
    topo = sum(e / n * EDGE_BALANCE_8 * TYPED_EDGE_BYTES + local[et[2]] * TYPED_INDPTR_BYTES
               + owned[et[2]] * TYPED_COL_START_BYTES for et, e in edges.items()) \
        + sum(local.values()) * TYPED_L2G_BYTES + sum(owned.values()) * h * TYPED_HALO_OWNER_BYTES \
        + local["paper"] * TYPED_LABEL_BYTES
    feats = sum(owned.values()) * IGBH_ROW_BYTES
    cache = CACHE_FRACTION * h * sum(owned.values()) * IGBH_ROW_BYTES
    rounds = len(MLPERF_FANOUTS) * ALL_TO_ALL_PER_HOP + ALL_TO_ALL_FEATURES * len(nodes)
    comm = {name: (sample + feature) / rate + rounds * (n - 1) * LATENCY_S for name, rate in LINKS_BYTES_S.items()}
    return {"machines": n, "partition": method, "edge_cut": c, "sampled_cut": c_sampled, "remote_inputs": remote,
            "inputs_per_step": inputs, "halo_per_owned": h, "sample_mb_per_step": sample / 1e6,
            "feature_mb_per_step": feature / 1e6, "comm_ms": {k: 1e3 * v for k, v in comm.items()},
            "topology_gb_per_rank": topo / 1e9, "feature_gb_per_rank": feats / 1e9, "cache_gb_per_rank": cache / 1e9,
            "seeds_s_overlapped": {k: n * MLPERF_BATCH / max(STEP_S_AT_MLPERF_RATE, v) for k, v in comm.items()}}


def typed_main(out: Path) -> None:
    checks = typed_checks()
    rows = [typed_row(n, m) for m in ("ldg", "hash") for n in TYPED_MACHINES]
    full = typed_frontier(IGBH_FULL_NODES, IGBH_FULL_EDGES, MLPERF_BATCH)["inputs"]
    print("MODEL, not a measurement. IGBH-full (547M nodes, 5.8B edges stored, 11.9B as MLPerf trains), R-GAT, batch "
          "1024 a rank, fanouts 15,10,5, FP16 features (2 KiB a row)")
    print("calibration (typed parts of an IGBH-tiny-shaped graph): " + ", ".join(f"{k} {v:.3g}" for k, v in
                                                                                   checks.items()))
    print("input nodes a step: " + ", ".join(f"{t} {v:,.0f}" for t, v in full.items())
          + f" (features {sum(full.values()) * IGBH_ROW_BYTES / 1e9:.2f} GB a step and rank)")
    links = list(LINKS_BYTES_S)
    head = (f"{'part':<5}{'N':>3}{'cut':>6}{'remote':>7}{'halo':>6}{'smpl MB':>8}{'feat MB':>8}{'topo GB':>8}"
            f"{'feat GB':>8}{'cache GB':>9}" + "".join(f"{'ms ' + k:>13}" for k in links)
            + "".join(f"{'seeds/s ' + k:>17}" for k in links))
    print(head)
    for r in rows:
        print(f"{r['partition']:<5}{r['machines']:>3}{r['edge_cut']:>6.3f}{r['remote_inputs']:>7.2f}"
              f"{r['halo_per_owned']:>6.2f}{r['sample_mb_per_step']:>8.0f}{r['feature_mb_per_step']:>8.0f}"
              f"{r['topology_gb_per_rank']:>8.1f}{r['feature_gb_per_rank']:>8.1f}{r['cache_gb_per_rank']:>9.1f}"
              + "".join(f"{r['comm_ms'][k]:>13.0f}" for k in links)
              + "".join(f"{r['seeds_s_overlapped'][k]:>17,.0f}" for k in links))
    print(f"MLPerf Training, NVIDIA 8x H200 (features in GPU memory, NVLink): {MLPERF_8X_H200_MIN} min, "
          f"~{MLPERF_8X_H200_SEEDS_S:,} seeds/s; a step's compute at its per-GPU rate: "
          f"{1e3 * STEP_S_AT_MLPERF_RATE:.1f} ms (the seeds/s columns: N x 1024 / max(that, comm))")
    out.write_text(json.dumps({"model": True, "checks": checks, "rows": rows}, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=Path("dist_scale_model.json"))
    ap.add_argument("--typed", action="store_true", help="R-GAT on IGBH-full over typed parts (8-64 ranks)")
    a = ap.parse_args()
    if a.typed:
        typed_main(a.json)
        return
    checks = {"sample_alpha": SAMPLE_ALPHA, "feature_alpha": FEAT_ALPHA, "halo_kappa": HALO_KAPPA,
              "halo_kappa_hash_check": HALO_HASH_8 / halo_raw(CUT_HASH_8, DEG_PAPERS_TENTH, 8),
              "sample_hash_predicted_kib": SAMPLE_ALPHA * sample_bytes_raw(SAMPLE_CUT_HASH) / 1024,
              "sample_hash_measured_kib": SAMPLE_KIB_HASH, "parts_gib_predicted": check_disk(),
              "parts_gib_measured": 4.2, "gpu_step_ms": 1e3 * GPU_STEP_S,
              "salient_step_ms": 1e3 * SALIENT_STEP_S}
    rows = [row(g, n, m) for g in GRAPHS for m in ("ldg", "hash") for n in MACHINES]
    print("MODEL, not a measurement. Calibration: " + ", ".join(f"{k} {v:.3g}" for k, v in checks.items()))
    head = (f"{'graph':<11}{'part':<5}{'N':>3}{'cut':>6}{'halo':>6}{'smpl MB':>8}{'feat MB':>8}{'comm ms':>8}"
            f"{'topo GB':>8}{'feat GB':>8}{'steps':>6}{'epoch s':>8}{'overlap':>8}{'today':>7}")
    print(head)
    for r in rows:
        print(f"{r['graph']:<11}{r['partition']:<5}{r['machines']:>3}{r['edge_cut']:>6.3f}{r['halo_per_owned']:>6.2f}"
              f"{r['sample_mb_per_step']:>8.1f}{r['feature_mb_per_step']:>8.1f}{r['comm_ms_per_step']:>8.1f}"
              f"{r['topology_gb_per_rank']:>8.2f}{r['feature_gb_per_rank']:>8.2f}{r['steps_per_epoch']:>6}"
              f"{r['epoch_s_serial']:>8.2f}{r['epoch_s_overlapped']:>8.2f}{r['epoch_s_today_cpu_sampler']:>7.0f}")
    print(f"peers, papers100M: DistDGL {DISTDGL_16_S} s/epoch on 16 machines; SALIENT {SALIENT_16_S} s on 16 GPUs "
          f"/ 8 machines; SALIENT++ {SALIENT_PP_SPEEDUP}x DistDGL on 8 machines")
    a.json.write_text(json.dumps({"model": True, "checks": checks, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
