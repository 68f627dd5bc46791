import subprocess
import sys
from pathlib import Path

import sparsetrain as st

ROOT = Path(__file__).resolve().parents[1]


def test_train_sage_example_runs_and_learns(tmp_path):
    data = st.datasets.synthesize(tmp_path / "synth", 2000, 20_000, feature_dim=16, num_classes=4, quiet=True).path
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_sage.py"), str(data)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    last = [line for line in result.stdout.splitlines() if line.startswith("epoch 5")][0]
    assert float(last.split("test acc ")[1].split()[0]) > 0.5  # chance is 0.25
