"""Sparse collectives over torch.distributed: fetch or reduce exactly the rows a rank needs."""
