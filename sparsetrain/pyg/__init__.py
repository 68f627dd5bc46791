"""PyG's contracts over sparsetrain: samplers and loaders that PyG training scripts use unchanged."""
