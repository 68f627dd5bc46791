"""One remote-row fetch: rows of a table split over ranks, read by a rank that does not hold them.

Both feature stores over ranks read a remote row the same way: :class:`~sparsetrain.collective.ShardedFeatures`
(through :func:`~sparsetrain.collective.sparse_all_gather`'s plan) and the partitioned graph's ``PartitionedFeatures``.
The requester groups its distinct remote ids by owner (:func:`group_by_owner`); the ranks agree on the counts (each
store's own first exchange: the sparse collectives' metadata all-gather, which also checks every rank's input, or the
partitioned store's header all-to-all, which carries a rank's failure); then :func:`fetch_rows` sends the ids to their
owners, each owner serves its rows (translating the ids itself: no rank holds a global table), and the rows come back
grouped by owner, as asked. Every exchange (:func:`exchange`) waits under the one dead-peer rule
(:func:`~sparsetrain.collective._exchange.peer_lost`): a peer that died, stopped or never arrived is one
:class:`~sparsetrain.errors.CollectiveError` line naming the operation, the stage, this rank and the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from sparsetrain.collective import _exchange as ex
from sparsetrain.collective.groups import GroupInfo, Timeout


def group_by_owner(owner: torch.Tensor, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The positions of ``owner`` (each requested id's owner rank) grouped by rank, in order within a rank (the
    order the ids are sent and their rows come back in), and how many each rank is asked for (``[world_size]``)."""
    owner = owner.to(torch.int64)
    return torch.argsort(owner, stable=True), torch.bincount(owner, minlength=world_size)


def exchange(x: torch.Tensor, send: Sequence[int], recv: Sequence[int], *, op: str, stage: str, info: GroupInfo,
             device: torch.device, timeout: Timeout = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """One all-to-all of rows with variable splits (``send[r]`` rows of ``x`` to rank ``r``, ``recv[r]`` from it),
    on ``device`` (the group's :func:`~sparsetrain.collective.comm_device`), waited for at most ``timeout`` (None:
    the group's); a failure is the dead-peer rule's :class:`~sparsetrain.errors.CollectiveError`.
    One rank (or no process group): ``x`` itself. ``out``: filled in place."""
    return ex.exchange_rows(x, send, recv, op=op, stage=stage, info=info, device=device, timeout=timeout, out=out)


def fetch_rows(ids: torch.Tensor, send: Sequence[int], recv: Sequence[int],
               serve: Callable[[torch.Tensor], torch.Tensor], *, op: str, info: GroupInfo, device: torch.device,
               timeout: Timeout = None, out: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Remote rows by id, in two exchanges: ``ids`` (int64, grouped by owner: ``send[r]`` of them owned by rank
    ``r``, as :func:`group_by_owner` orders them) go to their owners; each rank answers the ids asked of it
    (``recv[r]`` by rank ``r``, in that order) with ``serve(asked)``, its rows for them (``[len(asked), ...]``; it
    raises on an id it does not hold); the rows come back in ``ids``' order (into ``out`` when given). The counts must
    already be agreed by every rank (``recv`` is the other ranks' ``send`` to this one). Returns ``(asked, served,
    rows)``: the ids this rank served (on ``device``), the rows it sent, the rows it received. Collective over
    ``info``'s group; the ids then the rows cross the network, nothing else."""
    asked = exchange(ids.to(torch.int64), send, recv, op=op, stage="row-id", info=info, device=device,
                     timeout=timeout)
    served = serve(asked)
    rows = exchange(served, recv, send, op=op, stage="row", info=info, device=device, timeout=timeout, out=out)
    return asked, served, rows


__all__ = ["exchange", "fetch_rows", "group_by_owner"]
