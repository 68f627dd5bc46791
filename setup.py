from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
METIS = ["pymetis>=2023.1"]
NOTEBOOKS = ["matplotlib>=3.7", "nbclient>=0.8", "nbformat>=5.9", "ipykernel>=6"]
TENSORBOARD = ["tensorboard>=2.10"]
HF = ["transformers>=5"]  # sparsetrain.moe.hf, notebook 03, benchmarks/moe.py
version = {}
exec((ROOT / "sparsetrain" / "_version.py").read_text(), version)

setup(
    name="sparsetrain",
    version=version["__version__"],
    description="GPU-centric data path for training large graph models and mixture-of-experts layers",
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    # the folder of Cora's Planetoid raw files (MIT licence, 0.6 MB) is a data package: `sparsetrain train` works offline
    packages=[*find_packages(include=["sparsetrain", "sparsetrain.*"]), "sparsetrain.datasets.builtin.cora"],
    include_package_data=True,
    package_data={"sparsetrain": ["py.typed"], "sparsetrain.datasets.builtin.cora": ["ind.cora.*", "LICENSE"]},
    install_requires=[
        "torch>=2.2",
        "numpy>=1.24",
        "numba>=0.58",
        "pyarrow>=12",
        "tqdm>=4.60",
        "torch-geometric>=2.4",
    ],
    extras_require={
        # the test suite executes the example notebooks, so dev carries what they need
        "dev": ["pytest>=7", "ruff>=0.6", "scipy>=1.10", "psutil>=5.9", "ogb>=1.3", *NOTEBOOKS, *METIS, *HF,
                *TENSORBOARD],  # ogb: the reference the OGB importers and link metrics are tested against
        "gpu": ["cupy-cuda12x>=12"],
        "notebooks": [*NOTEBOOKS, *HF],
        "hf": HF,
        "metis": METIS,  # `--reorder cluster` partitions with METIS when present (else a BFS fallback)
        "tensorboard": TENSORBOARD,  # `train --tensorboard DIR`
        "plot": ["matplotlib>=3.7"],  # `sparsetrain plot RUN`
    },
    entry_points={"console_scripts": ["sparsetrain=sparsetrain.cli:main"]},
)
