"""Use a trained model: :func:`load_model` rebuilds it from a checkpoint folder, :func:`predict` (``sparsetrain
predict``) writes every target node's prediction, or its last hidden layer, to a ``.npy`` or Parquet file.

The model is rebuilt the way ``train`` built it: the checkpoint's record (model, hidden size, fanouts, task, node
type, decoder: every setting that shapes the model) re-planned against the dataset's description, then the weights
loaded with ``torch.load(weights_only=True)``. A checkpoint folder's ``best.pt`` holds the weights of the epoch whose
test metric the run reported; without it (a run with no evaluation) the newest intact step checkpoint is used.

Predictions come from exact layer-wise inference (every in-neighbor, one layer at a time over the whole graph, each
layer's table spilled to disk above a memory budget) for GraphSAGE / GCN / GAT and a link model's encoder: on a run
that evaluated full-graph (the default on Cora-sized graphs) they are the evaluation's own outputs, so their test
accuracy is the reported one. The R-GCN of a typed graph and the graph transformer are run on sampled blocks as the
run's evaluation ran them (its fanouts, its sampler seed, its val and test batches), so their val / test predictions
are the ones the run scored. A partitioned run's checkpoint is predicted on the unpartitioned dataset it was cut from
(the manifest names it; ``--data`` overrides), layer-wise.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sparsetrain import _args
from sparsetrain.datasets.format import NODE
from sparsetrain.datasets.outputs import check_output_path
from sparsetrain.engine.checkpoint import BEST, list_checkpoints, load_checkpoint_file
from sparsetrain.engine.dataset_meta import DatasetMeta
from sparsetrain.engine.default_data import open_dataset
from sparsetrain.engine.distributed import choose_device
from sparsetrain.engine.evaluate import EVAL_EPOCH
from sparsetrain.engine.inference import infer_layers
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.partitioned import is_partitioned
from sparsetrain.engine.plan import plan
from sparsetrain.engine.settings import FLAGS, TrainSettings
from sparsetrain.errors import DatasetError, SettingError
from sparsetrain.nn.models import BlockGNN
from sparsetrain.storage import MmapFeatures
from sparsetrain.storage.rows import gather_rows

FORMATS = (".npy", ".parquet")
LAYER_TABLE_BUDGET = 4 << 30
"""Bytes of one layer's table kept in memory by :func:`predict`; a larger one is spilled beside the output."""
WRITE_ROWS = 1 << 16
"""Rows written at once (a Parquet row group)."""


@dataclass
class _Trained:
    model: torch.nn.Module
    dataset: object
    plan: object
    config: dict


def load_model(checkpoint: str | os.PathLike, data: str | os.PathLike | None = None, *, which: str = "best",
               device: str | torch.device = "cpu") -> torch.nn.Module:
    """The model a ``train`` run trained, in eval mode, from its ``--checkpoint-dir`` (or one checkpoint file).

    ``which="best"``: the weights of the epoch the run reported (``best.pt``), ``"last"``: the newest step
    checkpoint. ``data``: the dataset to size the model by (default: the one the run trained on). The returned
    ``torch.nn.Module`` is the one ``train`` built (``sparsetrain.nn``'s ``BlockGNN``, ``RGCN``, ``GraphTransformer``
    or ``LinkPredictor``): ``model(x, mb.to_pyg())`` on a sampled batch, ``model.layer(i, x, edge_index, size)`` layer
    by layer; ``model.config`` holds the run's settings (model, hidden, fanouts, task, node type, dataset, epoch,
    metrics)."""
    device = _device(device)
    trained = _load(checkpoint, data, which)
    trained.model.config = trained.config
    return trained.model.to(device)


def _device(device: str | torch.device) -> torch.device:
    """``device`` checked as ``train --device`` is (:func:`choose_device`): an unknown name or a GPU this machine
    does not have is one line, before anything is loaded."""
    return device if isinstance(device, torch.device) else choose_device(str(device))


def _load(checkpoint, data, which: str) -> _Trained:
    if which not in ("best", "last"):
        raise SettingError(f"which={which!r}: choose 'best' (the reported epoch's weights) or 'last'")
    path = _checkpoint_file(Path(checkpoint), which)
    state = load_checkpoint_file(path)
    record = state.get("run") if isinstance(state, dict) else None
    if not isinstance(record, dict) or "model" not in record or "record_version" not in record:
        raise SettingError(f"{path}: records no run settings (not a checkpoint `sparsetrain train` wrote, or an older "
                           "sparsetrain's); load its 'model' weights into the model you built yourself")
    dataset = record.get("dataset")
    if not isinstance(state.get("model"), dict) or not isinstance(dataset, dict) or \
            not isinstance(dataset.get("path"), str) or not isinstance(dataset.get("sha256"), str):
        raise SettingError(f"{path}: its {'model weights' if not isinstance(state.get('model'), dict) else 'dataset'} "
                           "record is missing or malformed (the file was edited); use another checkpoint of the run "
                           "or train again")
    ds, differs = _dataset(record, data, path)
    flags = {k: v for k, v in record.items() if k in FLAGS and k not in ("data", "checkpoint_dir")}
    if isinstance(flags.get("fanouts"), dict):  # recorded by edge type as "src,rel,dst"
        flags["fanouts"] = {tuple(str(k).split(",")): v for k, v in flags["fanouts"].items()}
    meta = DatasetMeta.of(ds)
    try:
        settings = TrainSettings(data=ds.path, quiet=True, **flags)
    except SettingError as exc:
        raise SettingError(f"{path}: its recorded settings are not valid ({exc}); the file was edited: use another "
                           "checkpoint of the run or train again") from None
    try:
        run = plan(settings, meta, torch.device("cpu"), 1)
    except (SettingError, DatasetError) as exc:
        if data is None:
            raise
        raise SettingError(f"{path}: the run's settings do not fit {ds.path} ({exc}); give the dataset the run "
                           "trained on (--data)") from None
    model = _build(ds, meta, run)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        raise SettingError(f"{path}: its weights do not fit the model built for {ds.path} "
                           f"({str(exc).splitlines()[1].strip() if len(str(exc).splitlines()) > 1 else exc}); "
                           "give the dataset the run trained on (--data)") from None
    _check_finite(state["model"], path)
    if differs:  # said only once the weights fit: a dataset they do not fit is the one-line error above
        warnings.warn(f"{ds.path}: its contents differ from the dataset the run trained on "
                      f"({record['dataset']['path']}); predicting on it with the trained weights", stacklevel=3)
    model.eval()
    position = state.get("position", {})
    config = {
        "model": run.model.name, "task": run.task, "target_type": run.target_type, "hidden": run.model.hidden,
        "num_layers": run.sampling.fanouts.num_hops, "fanouts": record.get("fanouts"), "dropout":
        state.get("hyperparameters", {}).get("dropout", run.model.dropout), "decoder": run.model.decoder if
        run.task == "link" else None, "seed": run.run.seed, "batch_size": run.sampling.batch_size,
        "dataset": str(ds.path), "checkpoint": str(path), "epoch": position.get("epoch"), "step": position.get("step"),
        "metrics": state.get("metrics"), "partitioned": is_partitioned(record["dataset"]["path"]),
    }
    return _Trained(model, ds, run, config)


def _checkpoint_file(path: Path, which: str) -> Path:
    if path.is_file():
        return path
    if not path.is_dir():
        raise SettingError(f"{path}: no such checkpoint folder or file; give a train run's --checkpoint-dir")
    if which == "best" and (path / BEST).is_file():
        return path / BEST
    found = list_checkpoints(path)
    if not found:
        raise SettingError(f"{path}: holds no checkpoint (step-*.pt or {BEST}); train with --checkpoint-dir {path}")
    if which == "best":
        warnings.warn(f"{path}: has no {BEST} (a run without evaluation, or an older sparsetrain); using the newest "
                      f"step checkpoint, {found[0].name}", stacklevel=3)
    return found[0]


def _dataset(record: dict, data, checkpoint: Path):
    """The dataset to predict on: ``data`` when given, else the recorded one (a partitioned run's: the folder its
    manifest was cut from), and whether its contents differ from the record's."""
    recorded = record["dataset"]["path"]
    task = record.get("task", "node")
    if data is not None:
        if is_partitioned(data):
            raise SettingError(f"{data}: is a partitioned folder; give the unpartitioned dataset it was cut from "
                               "(its manifest.json names it under dataset.path)")
        ds = open_dataset(data, quiet=True, task=task)
    elif is_partitioned(recorded):
        source = json.loads((Path(recorded) / "manifest.json").read_text())["dataset"]["path"]
        if not Path(source, "meta.json").is_file():
            raise SettingError(f"{checkpoint}: a partitioned run's checkpoint; the dataset its parts were cut from "
                               f"({source}) is gone: pass --data with that dataset folder")
        ds = open_dataset(source, quiet=True, task=task)
    else:
        if not Path(recorded).exists():
            raise SettingError(f"{checkpoint}: the run's dataset {recorded} is gone; pass --data with that dataset")
        ds = open_dataset(recorded, quiet=True, task=task)
    expected = record["dataset"]["sha256"]
    if is_partitioned(recorded):
        expected = json.loads((Path(recorded) / "manifest.json").read_text())["dataset"]["checksum"]
    return ds, DatasetMeta.of(ds).meta_sha256 != expected


def _check_finite(weights: dict, path: Path) -> None:
    """Every floating tensor of the checkpoint's weights finite: a NaN or inf weight would write NaN predictions
    without a word."""
    for name, value in weights.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not torch.isfinite(value).all():
            bad = int((~torch.isfinite(value)).sum())
            raise SettingError(f"{path}: weight {name} holds {bad} NaN or infinite value(s) (the run diverged, or the "
                               "file was edited); use an earlier checkpoint of the run (--last / another step-*.pt) "
                               "or train again with a lower --lr")

def _build(ds, meta: DatasetMeta, run) -> torch.nn.Module:
    """The model ``train`` builds for this plan (the same builders)."""
    from sparsetrain.engine.run import _node_model
    from sparsetrain.nn.link import build_link_model

    layers = run.sampling.fanouts.num_hops
    if run.task == "link":
        return build_link_model(ds.num_features, run.model.hidden, layers, run.model.decoder, run.model.dropout)
    return _node_model(meta, run.model, layers, run.target_type)


class _HiddenLayers(torch.nn.Module):
    """A block GNN without its last layer: layer-wise inference of it gives the last hidden layer."""

    def __init__(self, model: BlockGNN) -> None:
        super().__init__()
        self.inner = model
        self.kind = model.kind

    @property
    def num_layers(self) -> int:
        return self.inner.num_layers - 1

    def layer(self, i: int, x, edge_index, size):
        return self.inner.layer(i, x, edge_index, size)


@torch.no_grad()
def predict(checkpoint: str | os.PathLike, out: str | os.PathLike, data: str | os.PathLike | None = None, *,
            embeddings: bool = False, which: str = "best", batch_size: int = 4096,
            device: str | torch.device = "cpu", memory_budget: int | None = LAYER_TABLE_BUDGET,
            overwrite: bool = False) -> dict:
    """Write every target node's prediction to ``out`` (``.npy``: a float32 ``[nodes, classes]`` table of scores, row
    = node id; ``.parquet``: columns ``node``, ``class`` and ``scores``); ``embeddings=True``: the last hidden layer
    instead (``.parquet``: ``node`` and ``embedding``). A link model's prediction is each node's embedding, what its
    decoder scores pairs of. Returns what was written and, where the dataset has them, the test metric of these
    predictions (``test_acc``; link: ``test_auc``). An existing ``out`` is replaced only with ``overwrite=True``."""
    batch_size = _args.integer("predict", "batch_size", batch_size, low=1, error=SettingError)
    embeddings = _args.boolean("predict", "embeddings", embeddings)
    overwrite = _args.boolean("predict", "overwrite", overwrite)
    memory_budget = _args.integer("predict", "memory_budget", memory_budget, low=0, optional=True, error=SettingError)
    device = _device(device)
    trained = _load(checkpoint, data, which)
    ds, run, model = trained.dataset, trained.plan, trained.model.to(device)
    out = _check_out(Path(out), ds.path, trained.config, overwrite)
    spill = Path(tempfile.mkdtemp(prefix=".sparsetrain-predict-", dir=out.parent))
    try:
        layerwise = run.task == "link" or isinstance(model, BlockGNN)
        if layerwise:
            table = _layerwise(model, ds, run, embeddings, batch_size, device, memory_budget, spill)
        else:
            table = _sampled(model, ds, run, embeddings, device, spill)
        n = table.shape[0]
        _write(table, out, embeddings or run.task == "link")
        result = {"out": str(out), "rows": n, "width": int(table.shape[1]), "node_type": run.target_type or NODE,
                  "what": "embeddings" if embeddings else ("node embeddings" if run.task == "link" else "scores"),
                  "checkpoint": trained.config["checkpoint"], "epoch": trained.config["epoch"],
                  "method": "layer-wise" if layerwise else "sampled"}
        if not embeddings:
            result.update(_test_metric(model, ds, run, table, device))
        if isinstance(table, MmapFeatures):
            table.close()
        return result
    finally:
        for leftover in spill.glob("*"):
            leftover.unlink(missing_ok=True)
        spill.rmdir()


def _check_out(out: Path, dataset: Path, config: dict, overwrite: bool) -> Path:
    """``out`` as a writable output file: a known suffix, not inside a data folder (the one output-path rule,
    :func:`check_output_path`), not a folder, not an existing file unless
    ``overwrite``."""
    if out.suffix not in FORMATS:
        raise SettingError(f"{out}: the output's suffix must be one of {', '.join(FORMATS)}")
    check_output_path("--out", out, inputs=(dataset, config["dataset"]))
    resolved = out.resolve()
    if resolved.is_dir():
        raise SettingError(f"{out}: is a folder; give a file name ending in {' or '.join(FORMATS)}")
    if resolved.exists() and not overwrite:
        raise SettingError(f"--out {out}: already exists; pass --overwrite to replace it, or give another file name")
    resolved.parent.mkdir(parents=True, exist_ok=True)
    return resolved


def _layerwise(model, ds, run, embeddings: bool, batch_size: int, device, memory_budget, spill: Path):
    network = model.encoder if run.task == "link" else model
    if embeddings:
        if network.num_layers < 2:
            raise SettingError(f"--embeddings: the model has one layer ({run.model.name}, one --fanout), so no "
                               "hidden layer; train with two fanouts or more, or drop --embeddings")
        network = _HiddenLayers(network)
    return infer_layers(network, ds.feature_store(), ds.graph, batch_size, device, memory_budget, spill)


def _sampled(model, ds, run, embeddings: bool, device, spill: Path):
    """The R-GCN's or the graph transformer's outputs on sampled blocks, as the run's evaluation sampled them: its
    sampler (seed + 1), its batch size, each evaluated split's nodes batched on their own, then the other nodes."""
    from sparsetrain.engine.run import _clusters, _random_split, _sampler

    if embeddings:
        raise SettingError(f"--embeddings: the last hidden layer is read layer-wise, which {run.model.name} does not "
                           "have; drop --embeddings for its class scores")
    target = run.target_type
    seed = run.run.seed
    n = ds.num_nodes_by_type[target]
    split = _random_split(n, seed) if run.random_split else ds.split
    times = {} if run.times is None else {run.times: getattr(ds, run.times)}
    clusters = _clusters(ds) if run.clusters else None
    sampler = _sampler(ds.graph, run.sampling, times, ds.node_time, seed + 1, target, clusters)
    features = {t: ds.feature_store(t) for t in ds.features_by_type}
    seen = torch.zeros(n, dtype=torch.bool)
    groups = []
    for name, idx in split.items():
        if name != "train":
            groups.append(idx)
            seen[idx] = True
    groups.append((~seen).nonzero().view(-1))
    table = None
    with torch.no_grad():
        for idx in groups:
            if not len(idx):
                continue
            loader = Loader(sampler, features, None, idx, batch_size=run.sampling.batch_size, shuffle=False,
                            device=device)
            for mb in loader.epoch(EVAL_EPOCH):
                scores = model(mb.x, mb.to_pyg()).float().cpu()
                if table is None:
                    table = np.lib.format.open_memmap(spill / "scores.npy", mode="w+", dtype=np.float32,
                                                      shape=(n, scores.shape[1]))
                table[mb.seeds_by_type[target].cpu().numpy()] = scores.numpy()
    table.flush()
    return torch.from_numpy(np.asarray(table))


def _rows(table, lo: int, hi: int) -> np.ndarray:
    if isinstance(table, torch.Tensor):
        return table[lo:hi].numpy()
    return gather_rows(table, torch.arange(lo, hi)).numpy()


def _write(table, out: Path, embeddings: bool) -> None:
    """``table`` to ``out`` in row chunks (memory bounded by ``WRITE_ROWS``), through a temp file in the same folder,
    fsynced and renamed."""
    n, width = int(table.shape[0]), int(table.shape[1])
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        if out.suffix == ".npy":
            array = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, width))
            for lo in range(0, n, WRITE_ROWS):
                array[lo : lo + WRITE_ROWS] = _rows(table, lo, min(lo + WRITE_ROWS, n))
            array.flush()
            del array
        else:
            _write_parquet(table, tmp, n, width, embeddings)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _write_parquet(table, tmp: Path, n: int, width: int, embeddings: bool) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    value = pa.list_(pa.float32(), width)
    fields = [("node", pa.int64())] + ([("embedding", value)] if embeddings else [("class", pa.int64()),
                                                                                   ("scores", value)])
    schema = pa.schema(fields)
    with pq.ParquetWriter(tmp, schema) as writer:
        for lo in range(0, n, WRITE_ROWS):
            hi = min(lo + WRITE_ROWS, n)
            rows = np.ascontiguousarray(_rows(table, lo, hi), dtype=np.float32)
            vectors = pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), width)
            columns = [pa.array(np.arange(lo, hi, dtype=np.int64))]
            columns += [vectors] if embeddings else [pa.array(rows.argmax(axis=1).astype(np.int64)), vectors]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))


def _test_metric(model, ds, run, table, device) -> dict:
    """The test metric of the written predictions: accuracy of the argmax (node), AUC (link)."""
    if run.task == "link":
        from sparsetrain.engine.link_task import score_pairs
        from sparsetrain.engine.metrics import roc_auc

        test = (ds.edge_split or {}).get("test")
        if test is None or test.neg is None:
            return {}
        h = table if isinstance(table, torch.Tensor) else gather_rows(table, torch.arange(table.shape[0]))
        return {"test_auc": roc_auc(score_pairs(model, h, test.pos, device), score_pairs(model, h, test.neg, device))}
    split = None if run.random_split else ds.split
    if run.random_split:
        from sparsetrain.engine.run import _random_split

        split = _random_split(ds.num_nodes_by_type[run.target_type], run.run.seed)
    test = (split or {}).get("test")
    labels = ds.labels_by_type.get(run.target_type)
    if test is None or labels is None or not len(test):
        return {}
    predicted = torch.from_numpy(np.asarray(gather_rows(table, test))).argmax(dim=1)
    return {"test_acc": (predicted == labels[test]).double().mean().item()}
