"""Training precision: ``fp32``, or ``bf16`` mixed precision (autocast).

``bf16`` runs the forward pass and the loss under ``torch.autocast`` with bfloat16: matrix
products take bfloat16 inputs (about 2x the FLOP rate of float32 on CPUs with AVX-512 BF16
or AMX, and on GPUs' tensor cores) while weights, gradients and the optimizer stay float32.
bfloat16 has float32's exponent range, so no loss scaling is needed.
"""

from __future__ import annotations

import torch

from sparsetrain.errors import SettingError

PRECISIONS = ("fp32", "bf16")


def check_precision(precision: str, device: torch.device | str) -> None:
    """Raise ``ValueError`` for an unknown precision or one the device cannot run."""
    if precision not in PRECISIONS:
        raise SettingError(f"precision {precision!r} is not supported; choose one of {', '.join(PRECISIONS)}")
    device = torch.device(device)
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise SettingError(f"precision 'bf16': {torch.cuda.get_device_name(device)} has no bfloat16 support; use "
                           "precision='fp32'")


def autocast(precision: str, device: torch.device | str) -> torch.autocast:
    """The autocast context for ``precision`` on ``device`` (disabled for ``fp32``)."""
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16")
