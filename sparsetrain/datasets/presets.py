"""Sizes of known graphs for ``sparsetrain synth --preset``, and the default random split."""

DEFAULT_SPLIT = (0.6, 0.2, 0.2)

PAPERS100M = {"nodes": 111_059_956, "edges": 1_615_685_872, "feature_dim": 128, "classes": 172,
              "feature_dtype": "float16", "label_fraction": 0.0139, "split": (0.7804, 0.081, 0.1386)}
"""ogbn-papers100M: 1.39% of the nodes labelled, split 78/8/14 among them as in OGB's time split."""

PRESETS = {"papers100m": PAPERS100M}

IGB_SIZES = ("tiny", "small", "medium", "large", "full")
"""The sizes the Illinois Graph Benchmark ships its heterogeneous graph (IGBH) in."""
IGBH_NODES = {
    "tiny": {"paper": 100_000, "author": 357_041, "institute": 8_738, "fos": 84_220},
    "small": {"paper": 1_000_000, "author": 1_926_066, "institute": 14_751, "fos": 190_449},
    "medium": {"paper": 10_000_000, "author": 15_544_654, "institute": 23_256, "fos": 415_054},
    "large": {"paper": 100_000_000, "author": 116_959_896, "institute": 26_524, "fos": 649_707},
    "full": {"paper": 269_346_174, "author": 277_220_883, "institute": 26_918, "fos": 712_960},
}
"""IGBH's node counts per size (paper and author: IGB's ``igb/dataloader.py`` and MLPerf's ``dataset.py``; institute
and fos: DGL's ``examples/graphbolt/rgcn/download.py``, which checks them against the downloaded files). large and
full also have journal and conference nodes (48,820 and 4,490 in large), which the synthetic presets leave out."""
IGBH_EDGES = {
    "tiny": (447_416, 471_443, 325_410, 718_445),
    "small": (12_070_502, 4_553_516, 1_630_476, 7_234_122),
    "medium": (120_077_694, 39_854_592, 11_049_412, 68_510_495),
    "large": (1_223_571_364, 289_502_107, 34_099_660, 457_577_294),
    "full": (3_996_442_004, 716_761_549, 48_521_486, 1_050_280_600),
}
"""IGBH's edge counts per size, as stored (before the reference's reverses), in the order of ``IGBH_RELATIONS`` (DGL's
``examples/graphbolt/rgcn/download.py``)."""
IGBH_RELATIONS = (("paper", "cites", "paper"), ("paper", "written_by", "author"),
                  ("author", "affiliated_to", "institute"), ("paper", "topic", "fos"))
IGBH_PRESETS = {f"igbh-{size}": size for size in ("tiny", "small", "medium", "large")}
"""``synth --preset igbh-<size>``: the IGBH-shaped synthetic graph with that size's counts."""
