"""One step's LoRA work: which rows use which device slot, and the batched low-rank matmuls.

Rows without an adapter are untouched. The rest is computed as Punica does it (Chen et al., "Punica:
Multi-Tenant LoRA Serving", 2023: BGMV for decode, SGMV for prefill), with plain torch ops::

    decode rows   grouped by slot, padded to the largest group L:
                  x [G, L, in] @ A[slots] [G, in, nR] -> [G, L, nR];  each module: @ B[slots] [G, R, out]
                  then scattered back onto their rows (index_add_ on the module's output columns)
    chunk rows    one contiguous segment per request: x[s:e] @ A[slot] @ B[slot], no gather at all

``delta = scaling * B (A x)`` is added in place to the base projection's output (scaling is in B).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backends.torch.lora_slots import LoraSlots


@dataclass(slots=True)
class _DecodeGroups:
    slots: torch.Tensor  # [G] int64 device slots
    gather_rows: torch.Tensor  # [G * L] int64 rows of x (padding repeats row 0)
    valid: torch.Tensor  # [N] int64 positions in G * L that hold a real row
    dest_rows: torch.Tensor  # [N] int64 the row each of them is added to
    num_groups: int
    max_len: int


class LoraBatch:
    """Built once per step by the runner; the model calls ``add`` after each base projection."""

    def __init__(
        self,
        lora_slots: LoraSlots,
        decode_slots: list[int | None],
        segments: list[tuple[int, int, int]],
        device: torch.device,
    ) -> None:
        """decode_slots: per decode row (rows 0..D-1), its slot or None; segments: (first row, rows, slot)."""
        self.lora = lora_slots
        self.rank = lora_slots.config.max_lora_rank
        self.segments = segments
        self.decode = _decode_groups(decode_slots, device)

    def add(self, layer: int, group_index: int, x: torch.Tensor, out: torch.Tensor) -> None:
        """out[rows, cols] += delta of group ``group_index``'s projections for input x [T, in]."""
        group = self.lora.groups[group_index]
        a_all = self.lora.a[group.name][layer]  # [S, in, nR]
        b_all = [self.lora.b[module][layer] for module in group.modules]  # each [S, R, out]
        r = self.rank
        d = self.decode
        if d is not None:
            xg = x.index_select(0, d.gather_rows).view(d.num_groups, d.max_len, x.shape[1])
            shrunk = torch.bmm(xg, a_all.index_select(0, d.slots))  # [G, L, nR]
            for j, (b, (begin, end)) in enumerate(zip(b_all, group.out_columns)):
                y = torch.bmm(shrunk[:, :, j * r : (j + 1) * r], b.index_select(0, d.slots))  # [G, L, out]
                y = y.view(d.num_groups * d.max_len, end - begin).index_select(0, d.valid)
                out[:, begin:end].index_add_(0, d.dest_rows, y)
        for first, num_rows, slot in self.segments:
            shrunk = torch.mm(x[first : first + num_rows], a_all[slot])  # [n, nR]
            for j, (b, (begin, end)) in enumerate(zip(b_all, group.out_columns)):
                out[first : first + num_rows, begin:end].addmm_(shrunk[:, j * r : (j + 1) * r], b[slot])


def _decode_groups(decode_slots: list[int | None], device: torch.device) -> _DecodeGroups | None:
    rows_of: dict[int, list[int]] = {}
    for row, slot in enumerate(decode_slots):
        if slot is not None:
            rows_of.setdefault(slot, []).append(row)
    if not rows_of:
        return None
    max_len = max(len(rows) for rows in rows_of.values())
    gather, valid, dest = [], [], []
    for g, rows in enumerate(rows_of.values()):
        gather.extend(rows + [0] * (max_len - len(rows)))
        valid.extend(range(g * max_len, g * max_len + len(rows)))
        dest.extend(rows)

    def tensor(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=device)

    return _DecodeGroups(tensor(list(rows_of)), tensor(gather), tensor(valid), tensor(dest), len(rows_of), max_len)
