"""The loader pipeline, the trainer and distributed launch."""
