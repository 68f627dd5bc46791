"""Class names given as labels are refused in one line that says how to number them (CSV, Parquet, NumPy)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sparsetrain as st
from sparsetrain.datasets.readers import LABEL_NAMES_FIX


@pytest.mark.parametrize("kind", ["csv", "parquet", "npy"])
def test_string_labels_name_the_fix(tmp_path, kind):
    (tmp_path / "edges.csv").write_text("src,dst\n0,1\n1,2\n2,0\n")
    names = ["cat", "dog", "cat"]
    labels = tmp_path / f"labels.{kind}"
    if kind == "csv":
        labels.write_text("label\n" + "\n".join(names) + "\n")
    elif kind == "parquet":
        pd.DataFrame({"label": names}).to_parquet(labels)
    else:
        np.save(labels, np.array(names))
    with pytest.raises(ValueError) as caught:
        st.datasets.from_files(tmp_path / "out", tmp_path / "edges.csv", labels=labels, quiet=True)
    message = str(caught.value)
    assert LABEL_NAMES_FIX in message and str(labels) in message and "\n" not in message
    # the fix it names works: the same names numbered by pandas import, and the ids are the categories' order
    codes = pd.Series(names).astype("category").cat.codes.to_numpy().astype(np.int64)
    np.save(tmp_path / "ids.npy", codes)
    ds = st.datasets.from_files(tmp_path / "ok", tmp_path / "edges.csv", labels=tmp_path / "ids.npy", quiet=True)
    assert ds.labels.tolist() == [0, 1, 0]
