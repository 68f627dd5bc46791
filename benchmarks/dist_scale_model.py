"""Partitioned training at scale, ON PAPER: a model, not a measurement.

Per rank and training step, from the bytes and memory measured on small graphs (docs/partitioned_training.md,
"Measured"), for papers100M and a 10B-edge graph on 8, 16 and 64 machines: bytes sent by the sampler and by the
feature store, topology and feature memory, and an expected epoch time on a 100 Gb/s network. Every constant below
is named with its source. Prints a table and writes JSON.

    python benchmarks/dist_scale_model.py --json dist_scale_model.json
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=Path("dist_scale_model.json"))
    a = ap.parse_args()
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
