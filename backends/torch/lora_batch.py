"""One step's LoRA work: which rows use which device slot, and the batched low-rank matmuls.

Rows without an adapter are untouched. The rest is computed as Punica does it (Chen et al., "Punica:
Multi-Tenant LoRA Serving", 2023: BGMV for decode, SGMV for prefill), with plain torch ops::

    decode rows   grouped by slot, padded to the largest group L (rows without an adapter use the
                  always-zero slot, so every decode row has a group and a result):
                  x [G, L, in] @ A[slots] [G, in, nR] -> [G, L, nR];  each module: @ B[slots] [G, R, out]
                  -> [G*L, out], put back in row order by one index_select, added to out[:D, cols]
                  (no scatter: CPU's index_add_ is a slow scatter_add)
    chunk rows    one contiguous segment per request: x[s:e] @ A[slot] @ B[slot], no gather at all

Decode rows of at most ``MAX_LORA_SEGMENTS`` adapters that sit side by side (the runner orders them so)
are segments too: a few plain matmuls on views beat gathers and batched matmuls on a CPU.

On CUDA (``kernel="triton"``, ``choose_lora_kernel``) every row instead names its slot in one int32 vector and
two Triton kernels per group serve all rows at once, whatever their adapters (triton_lora.py: Punica's
BGMV shrink and expand); ``ZOO_LORA_KERNEL=torch`` keeps the torch ops there, ``=triton`` forces the kernels
(on CPU tensors only under ``TRITON_INTERPRET=1``, as the tests run them).

On a CPU in fp32, decode-only steps of at most 64 rows skip this class: the C decode kernel adds the same deltas
from the same slot tensors (cpu_decode.py, ``zoo_decode_step_lora``).

``delta = scaling * B (A x)`` is added in place to the base projection's output (scaling is in B).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import torch

from backends.torch.lora_slots import LoraSlots

MAX_LORA_SEGMENTS = 4  # decode adapters served as contiguous segments rather than padded groups
LORA_KERNELS = ("torch", "triton")


def choose_lora_kernel(device: torch.device) -> str:
    """``ZOO_LORA_KERNEL`` (torch | triton) if set, else "triton" on CUDA where triton is installed, else "torch"."""
    forced = os.environ.get("ZOO_LORA_KERNEL", "")
    if forced:
        if forced not in LORA_KERNELS:
            raise ValueError(f"ZOO_LORA_KERNEL must be one of {LORA_KERNELS}, got {forced!r}")
        return forced
    return "triton" if device.type == "cuda" and importlib.util.find_spec("triton") is not None else "torch"


@dataclass(slots=True)
class _DecodeGroups:
    """Decode rows by slot: group g holds rows ``gather_rows[g*L : g*L + n_g]``, padded with row 0."""

    slots: list[int]  # [G] device slots, ascending
    gather_rows: torch.Tensor  # [G * L] int64 rows of x
    position_of_row: torch.Tensor  # [D] int64 where decode row i's result is among the G * L
    num_rows: int  # D
    max_len: int


class LoraBatch:
    """Built once per step by the runner; the model calls ``add`` after each base projection."""

    def __init__(
        self,
        lora_slots: LoraSlots,
        decode_slots: list[int | None],
        segments: list[tuple[int, int, int]],
        device: torch.device,
        kernel: str = "torch",
    ) -> None:
        """decode_slots: per decode row (rows 0..D-1), its slot or None; segments: (first row, rows, slot);
        kernel: "torch" (ops below) or "triton" (triton_lora.py, every row by its slot)."""
        self.lora = lora_slots
        self.rank = lora_slots.config.max_lora_rank
        self.row_slots: torch.Tensor | None = None
        if kernel == "triton":
            from backends.torch import triton_lora

            self._triton = triton_lora
            num_rows = max([len(decode_slots), *(first + n for first, n, _ in segments)])
            slots = [-1 if s is None else s for s in decode_slots] + [-1] * (num_rows - len(decode_slots))
            for first, n, slot in segments:
                slots[first : first + n] = [slot] * n
            self.row_slots = torch.tensor(slots, dtype=torch.int32, device=device)
            self.segments, self.decode, self._take = [], None, None
            return
        if kernel != "torch":
            raise ValueError(f"LoRA kernel must be one of {LORA_KERNELS}, got {kernel!r}")
        decode_segments = _decode_segments(decode_slots)
        self.segments = segments if decode_segments is None else decode_segments + segments
        self.decode = (
            None if decode_segments is not None else _decode_groups(decode_slots, lora_slots.zero_slot, device)
        )
        # the decode groups' slots of one layer's [S, ...] stack: a view when the slots are contiguous, else a
        # gather per layer (small enough to stay in cache for the bmm that reads it)
        self._take = None if self.decode is None else _slot_taker(self.decode.slots, device)

    def add(self, layer: int, group_index: int, x: torch.Tensor, out: torch.Tensor) -> None:
        """out[rows, cols] += delta of group ``group_index``'s projections for input x [T, in]."""
        group = self.lora.groups[group_index]
        r = self.rank
        if self.row_slots is not None:  # Triton: every row by its slot, two launches per projection group
            rows = self.row_slots.shape[0]
            y = self._triton.lora_shrink(x[:rows], self.lora.a[group.name][layer], self.row_slots)
            for j, (module, (begin, _)) in enumerate(zip(group.modules, group.out_columns)):
                self._triton.lora_expand(y, self.lora.b[module][layer], self.row_slots, out, j * r, begin)
            return
        d = self.decode
        if d is not None:
            take = self._take
            a = take(self.lora.a[group.name][layer])  # [G, in, nR]
            xg = x.index_select(0, d.gather_rows).view(a.shape[0], d.max_len, x.shape[1])
            shrunk = torch.bmm(xg, a)  # [G, L, nR]
            for j, (module, (begin, end)) in enumerate(zip(group.modules, group.out_columns)):
                y = torch.bmm(shrunk[:, :, j * r : (j + 1) * r], take(self.lora.b[module][layer]))  # [G, L, out]
                y = y.view(-1, end - begin).index_select(0, d.position_of_row)  # [D, out]
                out[: d.num_rows, begin:end].add_(y)
        if self.segments:
            a_all = self.lora.a[group.name][layer]  # [S, in, nR]
            b_all = [self.lora.b[module][layer] for module in group.modules]  # each [S, R, out]
            for first, num_rows, slot in self.segments:
                shrunk = torch.mm(x[first : first + num_rows], a_all[slot])  # [n, nR]
                for j, (b, (begin, end)) in enumerate(zip(b_all, group.out_columns)):
                    out[first : first + num_rows, begin:end].addmm_(shrunk[:, j * r : (j + 1) * r], b[slot])


def _slot_taker(slots: list[int], device: torch.device):
    """A function [S, ...] -> [G, ...] for these ascending slots (a view when they are contiguous)."""
    first, count = slots[0], len(slots)
    if slots == list(range(first, first + count)):
        return lambda t: t[first : first + count]
    index = torch.tensor(slots, dtype=torch.int64, device=device)
    return lambda t: t.index_select(0, index)


def _decode_segments(decode_slots: list[int | None]) -> list[tuple[int, int, int]] | None:
    """(first row, rows, slot) per adapter when each adapter's decode rows are one contiguous run and there
    are at most MAX_LORA_SEGMENTS of them; else None (padded groups). Rows without an adapter are skipped."""
    runs: list[tuple[int, int, int]] = []
    for row, slot in enumerate(decode_slots):
        if slot is None:
            continue
        if runs and runs[-1][2] == slot and runs[-1][0] + runs[-1][1] == row:
            first, num_rows, _ = runs[-1]
            runs[-1] = (first, num_rows + 1, slot)
        else:
            runs.append((row, 1, slot))
    if len({slot for _, _, slot in runs}) != len(runs) or len(runs) > MAX_LORA_SEGMENTS:
        return None
    return runs


def _decode_groups(decode_slots: list[int | None], zero_slot: int, device: torch.device) -> _DecodeGroups | None:
    if all(slot is None for slot in decode_slots):
        return None
    rows_of: dict[int, list[int]] = {}
    for row, slot in enumerate(decode_slots):
        rows_of.setdefault(zero_slot if slot is None else slot, []).append(row)
    slots = sorted(rows_of)
    max_len = max(len(rows) for rows in rows_of.values())
    gather: list[int] = []
    position_of_row = [0] * len(decode_slots)
    for g, slot in enumerate(slots):
        rows = rows_of[slot]
        for i, row in enumerate(rows):
            position_of_row[row] = g * max_len + i
        gather.extend(rows + [0] * (max_len - len(rows)))

    def tensor(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=device)

    return _DecodeGroups(slots, tensor(gather), tensor(position_of_row), len(decode_slots), max_len)
