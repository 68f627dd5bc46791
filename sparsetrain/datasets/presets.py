"""Sizes of known graphs for ``sparsetrain synth --preset``, and the default random split."""

DEFAULT_SPLIT = (0.6, 0.2, 0.2)

PAPERS100M = {"nodes": 111_059_956, "edges": 1_615_685_872, "feature_dim": 128, "classes": 172,
              "feature_dtype": "float16", "label_fraction": 0.0139, "split": (0.7804, 0.081, 0.1386)}
"""ogbn-papers100M: 1.39% of the nodes labelled, split 78/8/14 among them as in OGB's time split."""

PRESETS = {"papers100m": PAPERS100M}
