"""``--step static``: a GraphSAGE step on batches padded to static shapes, one module per concern.

``shapes`` (``StepShapes``: the padded bounds), ``padded_batch`` (``StaticBatch``: the device buffers, filled in
place), ``step`` (``StaticStep``: the eager, captured or compiled step) and ``sampled_loader`` (``SampledLoader``:
batches sampled straight into the step's buffers on a GPU). What a run captures is decided by its plan
(``RunPlan.capture``), never here.
"""
