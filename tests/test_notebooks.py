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


def _clean_copy(destination: Path) -> Path:
    """The repository's tracked files (as a fresh clone has them) copied under ``destination``, with nothing beside
    them; Numba's compiled-kernel caches come along (their index keys on the sources' mtimes, kept by ``copy2``) so
    the copy does not pay the JIT again."""
    import shutil
    import subprocess

    root = NOTEBOOKS.parents[1]
    try:
        tracked = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: cannot tell the tracked files")
    repo = destination / "sparsetrain-clone"
    for name in filter(None, tracked.decode().split("\0")):
        if (root / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, repo / name)
    for cache in (root / "sparsetrain").rglob("__pycache__/*.nb[ic]"):
        target = repo / cache.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(cache, target)
    return repo


def test_quickstart_trains_the_packaged_cora_in_a_clean_copy(tmp_path, monkeypatch):
    """Notebook 01 on a copy of the repository with no folder beside it (what a fresh clone is): it reads the Cora
    files shipped in the package, and the accuracy it prints is Cora's (PyG's GraphSAGE on Cora's public split gets
    ~0.80; a synthetic stand-in gets ~0.45), on Cora's exact counts."""
    import re

    repo = _clean_copy(tmp_path / "clean")
    assert sorted(p.name for p in repo.parent.iterdir()) == ["sparsetrain-clone"]
    monkeypatch.setenv("PYTHONPATH", str(repo))  # the kernel imports the copy's package
    monkeypatch.setenv("SPARSETRAIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARSETRAIN_NOTEBOOK_QUICK", raising=False)  # the reader's sizes: 15 epochs on Cora
    monkeypatch.setenv("SPARSETRAIN_NOTEBOOK_OUT", str(tmp_path / "figures"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    folder = repo / "examples" / "notebooks"
    nb = nbformat.read(folder / "01_quickstart.ipynb", as_version=4)
    trained = next(i for i, cell in enumerate(nb.cells) if "runs = {" in cell.source)
    nb.cells = nb.cells[: trained + 1]  # import and train; the timing cells and PyG's do not read Cora again
    nb.cells.append(nbformat.v4.new_code_cell("print('package at', st.__file__)\nshutil.rmtree(WORK)"))
    kernel = this_interpreter_kernel(tmp_path / "jupyter", monkeypatch)
    nbclient.NotebookClient(nb, timeout=600, kernel_name=kernel,
                            resources={"metadata": {"path": str(folder)}}).execute()
    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    assert f"package at {repo / 'sparsetrain' / '__init__.py'}" in printed
    assert "Cora: 2,708 nodes, 10,556 edges, 1433 features, 7 classes" in printed, printed
    assert "train/val/test 140/500/1000" in printed
    test_acc = float(re.search(r"Cora: .* test acc there ([0-9.]+)", printed).group(1))
    assert 0.72 <= test_acc <= 0.86, printed
