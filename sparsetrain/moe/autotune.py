"""The grouped-matmul backend of a layer, chosen by measurement.

For each (device, dtype, ``d_model``, ``d_hidden``, activation, experts, top-k, token-count bucket, train or
inference) the first call of a layer times the backends of :func:`sparsetrain.moe.grouped.candidates` on that
call's own sorted rows and counts (the experts' forward; then, for those within :data:`PRUNE` of the fastest,
forward and backward when training; the layer's weights, or constant ones of its shapes for a sharded layer, since
the values do not change the time) and keeps the fastest for the rest of the process.

The choices are kept per process; with ``SPARSETRAIN_MOE_BACKENDS=/path/table.json`` set they are also read from
that file on first use and written back (atomically) after every new measurement, so later processes skip the
timing. :func:`save_table` / :func:`load_table` do the same explicitly (``benchmarks/moe_hf_swap.py`` writes one).
Nothing is measured while a CUDA graph is being captured or under ``torch.compile``; those calls use
:func:`~sparsetrain.moe.grouped.default_backend` unless a choice is already known.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

from sparsetrain.errors import SettingError
from sparsetrain.moe import grouped

ENV = "SPARSETRAIN_MOE_BACKENDS"
PRUNE = 1.3  #: candidates whose forward is slower than this multiple of the fastest forward are not timed further
ROUNDS = 2  #: timing rounds of the remaining candidates (alternating); the minimum per candidate decides

_TABLE: dict[str, str] = {}
_TIMES: dict[str, dict[str, float]] = {}
_LOADED: set[str] = set()


def token_bucket(tokens: int) -> int:
    """The power of two at or above ``tokens`` (choices are shared within a bucket)."""
    return 1 << max(0, int(tokens) - 1).bit_length()


def device_name(device: torch.device) -> str:
    """``cpu`` or the accelerator's model (a table written on one GPU model says nothing about another)."""
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return device.type


def tune_key(device: torch.device, dtype: torch.dtype, d_model: int, d_hidden: int, activation: str,
             num_experts: int, top_k: int, tokens: int, train: bool) -> str:
    """The key a choice is stored under."""
    mode = "train" if train else "infer"
    return (f"{device_name(device)}|{str(dtype).removeprefix('torch.')}|d{d_model}|h{d_hidden}|{activation}|"
            f"E{num_experts}|k{top_k}|T{token_bucket(tokens)}|{mode}")


def _env_table() -> str | None:
    path = os.environ.get(ENV)
    if path and path not in _LOADED:
        _LOADED.add(path)
        if Path(path).exists():
            load_table(path)
    return path


def lookup(key: str) -> str | None:
    """The known choice for ``key`` (this process's, or the ``SPARSETRAIN_MOE_BACKENDS`` table's), else ``None``."""
    _env_table()
    return _TABLE.get(key)


def table() -> dict[str, dict]:
    """Every choice this process knows: ``{key: {"backend": name, "ms": {"forward": {backend: ms}, "step": {...}}}}``
    (``ms`` when measured in this process; see :func:`measure`)."""
    return {k: {"backend": b, "ms": _TIMES.get(k, {})} for k, b in sorted(_TABLE.items())}


def load_table(path: str | os.PathLike) -> int:
    """Add the choices of a table written by :func:`save_table` (they win over this process's); returns how many."""
    try:
        data = json.loads(Path(path).read_text())
        entries = {str(k): str(v["backend"]) for k, v in data.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SettingError(f"MoE backend table {path}: cannot be read ({exc}); delete it or write it with "
                           "sparsetrain.moe.autotune.save_table") from None
    for k, b in entries.items():
        grouped.check_backend(b, f"MoE backend table {path}: entry {k!r}")
    _TABLE.update(entries)
    return len(entries)


def save_table(path: str | os.PathLike) -> None:
    """Write :func:`table` as JSON (atomically: a temporary file renamed over ``path``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(table(), indent=1, sort_keys=True))
    os.replace(tmp, path)


def clear() -> None:
    """Forget every choice of this process (tests, benchmarks)."""
    _TABLE.clear()
    _TIMES.clear()
    _LOADED.clear()


def _capturing(device: torch.device) -> bool:
    compiling = getattr(torch.compiler, "is_compiling", lambda: False)()
    return compiling or (device.type == "cuda" and torch.cuda.is_current_stream_capturing())


def measure(run: Callable[[str, bool], None], backends: list[str], device: torch.device,
            train: bool = True) -> dict[str, dict[str, float]]:
    """Seconds per call of ``run(backend, backward)``: one forward-only call of every backend, then the ones within
    :data:`PRUNE` of the fastest forward timed :data:`ROUNDS` times more, alternating (forward and backward when
    ``train``), keeping the minimum of each. Returns ``{"forward": {backend: s}, "step": {backend: s}}``; ``step``
    holds only the backends timed to the end (a GPU first runs every backend once, untimed: its one-time setup)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def timed(backend: str, backward: bool) -> float:
        sync()
        t0 = time.perf_counter()
        run(backend, backward)
        sync()
        return time.perf_counter() - t0

    if device.type == "cuda":
        for b in backends:
            run(b, train)
    forward = {b: timed(b, False) for b in backends}
    fastest = min(forward.values())
    alive = [b for b in backends if forward[b] <= PRUNE * fastest]
    step: dict[str, float] = {}
    for _ in range(ROUNDS if len(alive) > 1 else 0):
        for b in alive:
            t = timed(b, train)
            step[b] = min(step.get(b, t), t)
    if not step:
        step = {alive[0]: forward[alive[0]]}
    return {"forward": forward, "step": step}


def choose(key: str, backends: list[str], run: Callable[[str, bool], None], device: torch.device,
           train: bool = True) -> str:
    """The backend stored for ``key``, measuring with ``run(backend, backward)`` first when none is (see
    :func:`measure`)."""
    known = lookup(key)
    if known is not None and known in backends:
        return known
    if len(backends) == 1:
        return backends[0]
    if _capturing(device):
        return backends[0]
    secs = measure(run, backends, device, train)
    best = min(secs["step"], key=secs["step"].get)
    _TABLE[key] = best
    _TIMES[key] = {kind: {b: round(t * 1e3, 3) for b, t in times.items()} for kind, times in secs.items()}
    path = _env_table()
    if path:
        save_table(path)
    return best
