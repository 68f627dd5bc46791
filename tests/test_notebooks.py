"""The example notebooks run top to bottom (a failing cell fails the test), save their figures, and are committed
without outputs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "examples" / "notebooks"
EXPECTED_FIGURES = {
    "01_quickstart.ipynb": ["quickstart.png", "quickstart_time_split.png"],
    "02_features_and_caches.ipynb": ["cache_hit_rate.png", "cache_epoch_time.png"],
    "03_moe_dropin.ipynb": ["moe_expert_histogram.png", "moe_fssdp_vs_ep.png"],
    "04_graph_transformer.ipynb": ["gt_reordering.png", "gt_attention_memory.png"],
    "05_heterogeneous.ipynb": ["hetero_cache_hit_rate.png", "hetero_training.png"],
    "06_link_prediction.ipynb": ["link_training.png", "link_leakage.png"],
    "07_out_of_core.ipynb": ["ooc_hit_rate_and_reads.png"],
}


def test_every_notebook_is_listed():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(EXPECTED_FIGURES)


@pytest.mark.parametrize("name", sorted(EXPECTED_FIGURES))
def test_committed_notebook_has_no_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code, f"{name} has no code cells"
    dirty = [i for i, cell in enumerate(code) if cell.outputs or cell.execution_count is not None]
    assert not dirty, f"{name}: code cells {dirty} carry outputs or execution counts; strip them before committing"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


def this_interpreter_kernel(folder: Path, monkeypatch) -> str:
    """A kernelspec that runs ipykernel in this interpreter, found first (JUPYTER_PATH precedes the user's
    and the system's folders), so a 'python3' spec of another Python on the machine is never picked."""
    name = "sparsetrain-tests"
    spec = folder / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python {sys.version_info.major}.{sys.version_info.minor} (tests)",
        "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("JUPYTER_PATH")])))
    return name


QUICK_BY_DEFAULT = ("01_quickstart.ipynb",)  # (the default suite's time on CI's two cores: the other notebooks'
# quick runs are slow tests, as every full run is)
RUNS = [pytest.param(name, size, marks=() if size == "quick" and name in QUICK_BY_DEFAULT else pytest.mark.slow)
        for name in sorted(EXPECTED_FIGURES) for size in ("quick", "full")]


@pytest.mark.parametrize(("name", "size"), RUNS)
def test_notebook_runs_and_saves_its_figures(name, size, tmp_path, monkeypatch):
    """``quick``: every cell on the smaller sizes a notebook picks under SPARSETRAIN_NOTEBOOK_QUICK=1 (fewer epochs,
    a smaller graph); ``full``: what a reader runs."""
    import matplotlib.image

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    if size == "quick":
        monkeypatch.setenv("SPARSETRAIN_NOTEBOOK_QUICK", "1")
    elif "SPARSETRAIN_NOTEBOOK_QUICK" in "".join(cell.source for cell in nb.cells):
        monkeypatch.delenv("SPARSETRAIN_NOTEBOOK_QUICK", raising=False)
    else:
        pytest.skip(f"{name} has no quick sizes: its quick run is its full run")
    figures = tmp_path / "figures"
    monkeypatch.setenv("SPARSETRAIN_NOTEBOOK_OUT", str(figures))  # the kernel inherits the environment
    monkeypatch.setenv("MPLBACKEND", "Agg")
    kernel = this_interpreter_kernel(tmp_path / "jupyter", monkeypatch)
    before = sorted(NOTEBOOKS.rglob("*"))
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name=kernel, resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell

    for figure in EXPECTED_FIGURES[name]:
        path = figures / figure
        assert path.is_file() and path.stat().st_size > 5_000, f"{name} did not save {figure}"
        image = matplotlib.image.imread(path)
        height, width = image.shape[:2]
        assert 200 <= height <= 2000 and 300 <= width <= 3000, (figure, image.shape)
        rgb = image[..., :3]
        # a plot, not a blank canvas: many distinct colours and dark pixels (axes, labels, text)
        assert (rgb.reshape(-1, 3)[:, :3].min(axis=1) < 0.3).mean() > 0.005, (
            f"{figure} has almost no dark pixels (no axes or text?)"
        )
        assert len({tuple(p) for p in (rgb.reshape(-1, 3)[::7] * 255).astype(int).tolist()}) > 20, (
            f"{figure} looks blank"
        )
    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    assert "saved" in printed
    assert sorted(NOTEBOOKS.rglob("*")) == before, (
        "the notebook wrote files next to itself; write under SPARSETRAIN_NOTEBOOK_OUT or a temp dir"
    )


@pytest.mark.slow  # (a notebook run more; the default suite's time on CI's two cores)
def test_notebook_falls_back_to_a_synthetic_graph_without_planetoid(tmp_path, monkeypatch):
    empty = tmp_path / "no-planetoid"
    empty.mkdir()
    monkeypatch.setenv("SPARSETRAIN_PLANETOID", str(empty))
    figures = tmp_path / "figures"
    monkeypatch.setenv("SPARSETRAIN_NOTEBOOK_OUT", str(figures))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOKS / "04_graph_transformer.ipynb", as_version=4)
    # only the cells up to the figure of the graph: the attention cells after it do not read the graph and
    # already ran in test_notebook_runs_and_saves_its_figures
    drawn = next(i for i, cell in enumerate(nb.cells) if "gt_reordering.png" in cell.source)
    nb.cells = nb.cells[: drawn + 1]  # nor the clean-up cell: the kernel's temp files go under tmp_path instead
    (tmp_path / "kernel-tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "kernel-tmp"))
    kernel = this_interpreter_kernel(tmp_path / "jupyter", monkeypatch)
    nbclient.NotebookClient(
        nb, timeout=600, kernel_name=kernel, resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    assert "Planetoid Cora raw files not found" in printed and "synthetic graph" in printed
    assert (figures / "gt_reordering.png").stat().st_size > 5_000
