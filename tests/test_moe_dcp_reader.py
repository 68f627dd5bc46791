"""DCP checkpoints load without running pickled code: ``load_dcp`` / ``SafeFileSystemReader`` refuse a
``.metadata`` or a value that would build anything but DCP's own objects (the marker file a payload would
create never appears, while torch's own reader creates it), load genuine checkpoints exactly, and turn
damaged files and DCP's ``CheckpointException`` into one-line ``SparsetrainError``s naming the checkpoint."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException

from sparsetrain.errors import CheckpointError, SparsetrainError
from sparsetrain.moe import DCPState, MoE, SafeFileSystemReader, load_dcp
from sparsetrain.moe.dcp_reader import read_dcp_metadata

D, H, E = 4, 6, 6


class TouchOnLoad:
    """Unpickling this object creates ``marker`` (what a hostile checkpoint would do with worse code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def trained(seed: int = 0):
    torch.manual_seed(seed)
    moe = MoE(D, H, E, top_k=2)
    opt = torch.optim.Adam(moe.parameters(), lr=0.1)
    y, aux = moe(torch.randn(7, D, generator=torch.Generator().manual_seed(seed)))
    (y.square().sum() + aux.loss).backward()
    opt.step()
    return moe, opt


def quiet_dcp(fn, state, path: Path, storage=None):
    """``dcp.save``/``dcp.load`` of ``state`` at ``path`` (torch's own reader/writer unless ``storage`` is given),
    spelled as torch 2.2 takes it too."""
    if storage is None:
        storage = FileSystemWriter(path) if fn is dcp.save else FileSystemReader(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP's "assuming the intent is to ... in a single process"
        if fn is dcp.save:
            return fn(state, storage_writer=storage, no_dist=True)
        return fn(state, storage_reader=storage, no_dist=True)


@pytest.fixture
def checkpoint(tmp_path):
    moe, opt = trained()
    path = tmp_path / "ckpt"
    quiet_dcp(dcp.save, {"train": DCPState(moe, opt), "step": 3}, path)
    return path, moe, opt


def test_genuine_checkpoint_loads_exactly(checkpoint):
    path, moe, opt = checkpoint
    other, other_opt = trained(seed=1)
    state = {"train": DCPState(other, other_opt), "step": 0}
    load_dcp(state, checkpoint_id=path)
    assert state["step"] == 3
    for (n, a), b in zip(moe.state_dict().items(), other.state_dict().values()):
        torch.testing.assert_close(b, a, atol=0, rtol=0, msg=lambda m, n=n: f"{n}: {m}")
    for p, q in zip(moe.parameters(), other.parameters()):
        for key, v in opt.state[p].items():
            torch.testing.assert_close(other_opt.state[q][key], v, atol=0, rtol=0)
    # the same reader through torch's own entry point
    third, _ = trained(seed=2)
    quiet_dcp(dcp.load, {"train": DCPState(third)}, path, SafeFileSystemReader(path))
    for a, b in zip(moe.parameters(), third.parameters()):
        torch.testing.assert_close(b, a, atol=0, rtol=0)


def test_metadata_classes_are_dcps_own(checkpoint):
    path, _, _ = checkpoint
    with open(path / ".metadata", "rb") as f:
        reference = pickle.load(f)  # our own file, just written: the unrestricted unpickler as the reference
    assert read_dcp_metadata(path / ".metadata") == reference


def test_pickled_code_in_metadata_is_refused_and_never_runs(checkpoint, tmp_path):
    path, _, _ = checkpoint
    marker = tmp_path / "marker"
    (path / ".metadata").write_bytes(pickle.dumps(TouchOnLoad(marker)))
    moe, opt = trained(seed=1)
    with pytest.raises(CheckpointError) as err:
        load_dcp({"train": DCPState(moe, opt)}, checkpoint_id=path)
    message = str(err.value)
    assert "\n" not in message and str(path / ".metadata") in message, message
    assert "refused to unpickle io.open" in message, message
    assert not marker.exists()
    with pytest.raises(CheckpointException):  # torch's reader through dcp.load: the reader errors are DCP's too
        quiet_dcp(dcp.load, {"train": DCPState(moe)}, path, SafeFileSystemReader(path))
    assert not marker.exists()
    # the payload is real: torch's own reader runs it
    with pytest.raises(BaseException):
        quiet_dcp(dcp.load, {"train": DCPState(moe)}, path)
    assert marker.exists()


def test_pickled_code_in_a_value_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "ckpt"
    moe, opt = trained()
    quiet_dcp(dcp.save, {"train": DCPState(moe, opt), "step": TouchOnLoad(marker)}, path)
    assert not marker.exists()
    state = {"train": DCPState(*trained(seed=1)), "step": 0}
    with pytest.raises(CheckpointError, match=r"refused the value of 'step'") as err:
        load_dcp(state, checkpoint_id=path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    assert not marker.exists()
    quiet_dcp(dcp.load, {"step": 0}, path)  # torch's reader runs it
    assert marker.exists()


def garbage(path: Path) -> None:
    (path / ".metadata").write_bytes(b"\x00\xffnot a pickle at all" * 3)


def truncated(path: Path) -> None:
    data = (path / ".metadata").read_bytes()
    (path / ".metadata").write_bytes(data[: len(data) // 2])


def not_metadata(path: Path) -> None:
    (path / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": {}}))


def escaping_path(path: Path) -> None:
    md = read_dcp_metadata(path / ".metadata")
    for info in md.storage_data.values():
        info.relative_path = "../../elsewhere.distcp"
    (path / ".metadata").write_bytes(pickle.dumps(md))


DAMAGE = [(garbage, "not a readable DCP metadata file"), (truncated, "not a readable DCP metadata"),
          (not_metadata, "holds a dict, not"), (escaping_path, "not a plain file name")]


@pytest.mark.parametrize("damage, words", DAMAGE)
def test_damaged_metadata_gives_one_line(checkpoint, damage, words):
    path, _, _ = checkpoint
    damage(path)
    with pytest.raises(CheckpointError, match=words) as err:
        load_dcp({"train": DCPState(*trained(seed=1))}, checkpoint_id=path)
    assert "\n" not in str(err.value) and str(path / ".metadata") in str(err.value)


def test_checkpoint_exception_becomes_one_line_sparsetrain_error(checkpoint, tmp_path):
    path, _, _ = checkpoint
    wider = MoE(D, H + 1, E, top_k=2)
    with pytest.raises(CheckpointError, match=r"Size mismatch.*experts\.w_in") as err:
        load_dcp({"train": DCPState(wider)}, checkpoint_id=path)
    assert isinstance(err.value, SparsetrainError) and isinstance(err.value, Exception)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    # a data file gone missing
    for f in path.glob("*.distcp"):
        f.unlink()
    with pytest.raises(CheckpointError, match="FileNotFoundError"):
        load_dcp({"train": DCPState(*trained(seed=1))}, checkpoint_id=path)
    with pytest.raises(CheckpointError, match="not a DCP checkpoint"):
        load_dcp({"train": DCPState(*trained(seed=1))}, checkpoint_id=tmp_path / "nowhere")
