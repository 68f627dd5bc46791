"""A training step's timeline, phase by phase, from one ``torch.profiler`` trace of the real path (issue 36, item 1).

    from step_timeline import profiled
    timeline = profiled(lambda: train(settings), cuda=True)   # the CLI path, a few steps; or a drop-in loop

The library runs each phase of a step in a named range once ``sparsetrain._phases.record_phases()`` is on:
``sample``, ``fetch`` (features, labels; the drop-in's batch cut from its ``Data``), ``to_device`` and ``step``
(forward, loss, backward, optimizer). :func:`profiled` turns them on, profiles every thread (the loader's producer
thread too) and splits the trace over the timed steps (every ``sparsetrain.step`` range but the first ``skip``):

- per phase, per step: host ms (the ranges' own time: a range that pulls the stages before it, as the fetch stage
  pulls the sampler's batches, does not count theirs) and GPU ms (the kernels and copies launched inside it);
- per step: wall ms, GPU busy ms (the union of every kernel and copy on every stream), the GPU-idle fraction, kernel
  launches (runtime and driver API, graph launches included), copies and host syncs (stream, event, device
  synchronisations and blocking copies) seen by the profiler.

On the CPU only the host columns have values; the GPU columns are ``None``.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from sparsetrain._phases import PREFIX, record_phases

PHASES = ("sample", "fetch", "to_device", "step")
LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
            "cudaLaunchCooperativeKernel"}
SYNCS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
         "cuCtxSynchronize", "cuEventSynchronize", "cudaMemcpy", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2"}


def profiled(run, cuda: bool, skip: int = 1) -> dict:
    """Run ``run()`` under the profiler with the phase ranges on; :func:`timeline` of its trace."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:  # the producer thread's ranges (torch >= 2.5); an older torch records the calling thread only
        config = {"experimental_config": torch._C._profiler._ExperimentalConfig(profile_all_threads=True)}
    except (AttributeError, TypeError):
        config = {}
    record_phases(True)
    try:
        with profile(activities=activities, **config) as prof:
            run()
            if cuda:
                torch.cuda.synchronize()
    finally:
        record_phases(False)
    return timeline(prof.events(), cuda, skip)


def timeline(events, cuda: bool, skip: int = 1) -> dict:
    """The trace ``events`` (``prof.events()``) split by phase over the steps after the first ``skip``."""
    ranges = [e for e in events if e.name.startswith(PREFIX)]
    steps = sorted((e for e in ranges if e.name == PREFIX + "step"), key=_start)[skip:]
    if not steps:
        raise ValueError(f"the trace holds {skip} or fewer '{PREFIX}step' ranges; profile more steps")
    lo, hi, n = _start(steps[0]), _end(steps[-1]), len(steps)
    inside = [e for e in ranges if lo <= _start(e) < hi]
    host, gpu = defaultdict(float), defaultdict(float)
    for e in inside:
        name = e.name[len(PREFIX):]
        host[name] += _own_us(e, inside)
        gpu[name] += _device_us(e) if cuda else 0.0
    out = {"steps": n, "wall_ms": (hi - lo) / 1e3 / n}
    for name in _phases(host):
        out[f"{name}_host_ms"] = host[name] / 1e3 / n
        out[f"{name}_gpu_ms"] = gpu[name] / 1e3 / n if cuda else None
    if not cuda:
        out.update(gpu_busy_ms=None, gpu_idle_fraction=None, launches_per_step=None, copies_per_step=None,
                   host_syncs_per_step=None)
        return out
    from torch.autograd import DeviceType

    device = [e for e in events if e.device_type == DeviceType.CUDA and lo <= _start(e) < hi]
    busy = _union_us([(_start(e), _end(e)) for e in device])
    calls = [e.name for e in events if e.device_type == DeviceType.CPU and lo <= _start(e) < hi]
    out.update(gpu_busy_ms=busy / 1e3 / n, gpu_idle_fraction=1 - busy / (hi - lo),
               launches_per_step=sum(c in LAUNCHES for c in calls) / n,
               copies_per_step=sum("Memcpy" in c and c not in SYNCS for c in calls) / n,
               host_syncs_per_step=sum(c in SYNCS for c in calls) / n)
    return out


def _phases(names) -> list[str]:
    """:data:`PHASES`, then any other range found (a user's stage), by name."""
    return [*PHASES, *sorted(set(names) - set(PHASES))]


def _start(e) -> float:
    return e.time_range.start


def _end(e) -> float:
    return e.time_range.end


def _own_us(e, ranges) -> float:
    """``e``'s time less the other phase ranges nested in it on its thread."""
    nested = [(_start(r), _end(r)) for r in ranges
              if r is not e and r.thread == e.thread and _start(e) <= _start(r) and _end(r) <= _end(e)]
    return (_end(e) - _start(e)) - _union_us(nested)


def _device_us(e) -> float:
    total = getattr(e, "device_time_total", None)
    return float(total if total is not None else e.cuda_time_total)


def _union_us(spans: list[tuple[float, float]]) -> float:
    """The length of the union of ``spans`` (overlapping kernels on several streams counted once)."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def lines(name: str, t: dict | None) -> list[str]:
    """A markdown table of one timeline (``None``: not measured)."""
    if not t:
        return []
    if "error" in t:
        return [f"\nTimeline, {name}: {t['error']}"]
    fmt = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
    phases = _phases(k[: -len("_host_ms")] for k in t if k.endswith("_host_ms"))
    out = [f"\nTimeline, {name} ({t['steps']} steps; ms per step; GPU = kernels and copies launched in the phase):",
           "", "| phase | host ms | GPU ms |", "|---|---:|---:|"]
    out += [f"| {p} | {fmt(t[f'{p}_host_ms'])} | {fmt(t[f'{p}_gpu_ms'])} |" for p in phases]
    out += ["", f"Wall {fmt(t['wall_ms'])} ms a step, GPU busy {fmt(t['gpu_busy_ms'])} ms (idle fraction "
            f"{fmt(t['gpu_idle_fraction'])}), {fmt(t['launches_per_step'])} launches, {fmt(t['copies_per_step'])} "
            f"copies and {fmt(t['host_syncs_per_step'])} host syncs a step."]
    return out
