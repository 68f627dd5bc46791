"""Feature tiers behind one gather contract (device, pinned host, memory-mapped disk) and the caches in front of them."""
