"""A batch as the stages hand it on (field name -> tensor) and the preprocessing function collection applies."""

from __future__ import annotations

from collections.abc import Callable

import torch

Batch = dict[str, torch.Tensor]
Preprocess = Callable[[Batch], Batch]
