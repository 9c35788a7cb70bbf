"""The torch runner's CPU weights moved onto huge pages (backends/huge_pages.py says why).

Every parameter's data (the ``[in, out]`` matrices the C decode kernel streams, the embedding / tied head, the
norms) is copied into one 2 MiB-aligned arena advised for huge pages, and each tensor is re-pointed at its slice
in place (``Tensor.set_``): the same tensor objects, so the model, the oneDNN-packed copies beside them
(cpu_packed.py: separate memory, untouched) and anything holding a parameter keep working, and the bits are
the same. Done before the decode kernel binds its pointers (TorchModelRunner.initialize_kv_cache). Where huge
pages cannot be had (see ``unavailable_reason``) nothing moves.
"""

from __future__ import annotations

import logging

import torch

from backends.huge_pages import Arena, HugePageResult, unavailable_reason

logger = logging.getLogger(__name__)
ALIGN = 64  # each tensor's start in the arena: a cache line (the kernel's vector loads)


def move_to_huge_pages(model: torch.nn.Module) -> tuple[HugePageResult, Arena | None]:
    """Copy the model's CPU parameters into an Arena and point them there. Returns what was granted and the
    arena (keep it alive as long as the model). Tensors that share storage with another (a tied head) or are
    views into a larger storage keep sharing: each distinct storage moves whole, its tensors re-pointed into
    the moved copy at their own offsets."""
    params = [p for p in model.parameters() if p.device.type == "cpu"]
    offsets: dict[int, int] = {}  # a distinct storage's data pointer -> its byte offset in the arena
    storages = []
    total = 0
    for t in params:
        src = t.untyped_storage()
        if src.data_ptr() not in offsets:
            offsets[src.data_ptr()] = total
            storages.append(src)
            total += (src.nbytes() + ALIGN - 1) // ALIGN * ALIGN  # cache-line starts: any dtype's view aligns
    requested = sum(src.nbytes() for src in storages)
    reason = unavailable_reason() or ("" if params else "no CPU parameters")
    arena = None if reason else Arena(total)
    if arena is None or arena.advised:
        return HugePageResult(requested, 0, reason or arena.advised), None
    whole = torch.frombuffer(arena.buffer, dtype=torch.uint8)
    for src in storages:  # copy each storage's bytes (pages are placed, huge where granted, at this first touch)
        start = offsets[src.data_ptr()]
        whole[start : start + src.nbytes()].copy_(torch.empty(0, dtype=torch.uint8).set_(src))
    with torch.no_grad():
        for t in params:
            region = whole[offsets[t.untyped_storage().data_ptr()] :].view(t.dtype)
            t.set_(region.untyped_storage(), region.storage_offset() + t.storage_offset(), t.shape, t.stride())
    return arena.result(), arena


def ensure_on_huge_pages(model: torch.nn.Module) -> HugePageResult:
    """``move_to_huge_pages`` once per model (runners sharing a model share its move); the arena is kept on
    the model (``_huge_page_arena``) and the result on ``_huge_page_result``. Logged."""
    done = getattr(model, "_huge_page_result", None)
    if done is not None:
        return done
    result, arena = move_to_huge_pages(model)
    model._huge_page_arena = arena
    model._huge_page_result = result
    logger.info("weights: %s", result.summary())
    return result


def zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.zeros(shape)``; on a CPU placed on huge pages where they can be had (an Arena the tensor keeps
    alive through its buffer), for arrays a step streams that are not weights (LoRA slots: lora_slots.py).
    Elsewhere, or without huge pages, plain ``torch.zeros``."""
    numel = 1
    for n in shape:
        numel *= n
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if device.type != "cpu" or nbytes < (2 << 20) or unavailable_reason():
        return torch.zeros(shape, dtype=dtype, device=device)
    arena = Arena(nbytes)
    if arena.advised:
        return torch.zeros(shape, dtype=dtype, device=device)
    out = torch.frombuffer(arena.buffer, dtype=dtype, count=numel).view(shape)
    out.zero_()  # the first touch: pages placed here (mmap memory is zero already; this faults it in)
    return out
