"""The drop-in mixture-of-experts layer and its expert placement (FSSDP, expert parallel)."""
