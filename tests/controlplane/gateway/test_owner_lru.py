"""gateway/owner_lru.py: the bounds hold after every change, a lone owner has the whole store, the flooding owner loses
its own first, and the kept record (``keep``) is never the one dropped; checked on random sequences (hypothesis)
against a plain model of the rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.gateway.owner_lru import OwnerLRU

OWNERS = ("a", "b", "c", None)
_OPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "get", "pop", "grow"]),
        st.sampled_from(OWNERS),
        st.integers(0, 9),  # the record id
        st.integers(1, 40),  # its size, or how much it grows
    ),
    max_size=80,
)


def _model_evict(order: list, sizes: dict, owners: list, max_records: int, max_bytes: int, share: float, keep) -> list:
    """The rule written plainly, over a list of keys (least recently used first): what goes, in order."""
    dropped = []
    owner_records, owner_bytes = max(1, int(max_records * share)), max(1, int(max_bytes * share))
    while len(order) > max_records or sum(sizes[k] for k in order) > max_bytes:
        by_bytes = sum(sizes[k] for k in order) > max_bytes
        held = dict.fromkeys(owners, 0)  # in the order the owners came (a tie goes to the earliest)
        for k in order:
            held[k[0]] += sizes[k] if by_bytes else 1
        largest = max(held, key=held.__getitem__)
        candidates = []
        if held[largest] > (owner_bytes if by_bytes else owner_records):
            candidates = [k for k in order if k[0] == largest and k != keep]
        if not candidates:
            candidates = [k for k in order if k != keep]
        if not candidates:
            break
        dropped.append(candidates[0])
        order.remove(candidates[0])
        _forget_emptied(owners, order)
    return dropped


def _forget_emptied(owners: list, order: list) -> None:
    owners[:] = [owner for owner in owners if any(k[0] == owner for k in order)]


@settings(max_examples=300, deadline=None)
@given(ops=_OPS, max_records=st.integers(1, 6), max_bytes=st.integers(40, 200), share=st.sampled_from([0.25, 0.5, 1]))
def test_random_changes_match_the_plain_rule_and_keep_the_bounds(ops, max_records, max_bytes, share):
    lru: OwnerLRU[str] = OwnerLRU(max_records, max_bytes, share)
    order: list = []
    sizes: dict = {}
    owners: list = []  # the owners holding records, in the order they came
    for op, owner, n, size in ops:
        key = (owner, f"r{n}")
        if op == "put":
            lru.put(key, f"v{n}", size)
            if key in order:
                order.remove(key)
                _forget_emptied(owners, order)
            order.append(key)
            sizes[key] = size
            if owner not in owners:
                owners.append(owner)
        elif op == "get":
            assert (lru.get(key) is not None) == (key in order)
            if key in order:
                order.remove(key)
                order.append(key)
            continue
        elif op == "pop":
            assert (lru.pop(key) is not None) == (key in order)
            if key in order:
                order.remove(key)
                _forget_emptied(owners, order)
            continue
        else:  # grow a kept record
            if key not in order:
                continue
            lru.resize(key, size)
            sizes[key] += size
        expected = _model_evict(order, sizes, owners, max_records, max_bytes, share, keep=key)
        assert [k for k, _ in lru.evict(keep=key)] == expected
        assert list(lru) == order and lru.num_bytes == sum(sizes[k] for k in order)
        assert len(lru) <= max_records or order == [key]
        assert lru.num_bytes <= max_bytes or order == [key]  # only the kept record alone may be over


def test_a_lone_owner_has_the_whole_store_and_a_flood_evicts_its_own():
    lru: OwnerLRU[int] = OwnerLRU(max_records=4, max_bytes=10_000, max_share=0.25)
    for i in range(6):
        lru.put((None, f"c{i}"), i, 1)
        lru.evict()
    assert [k[1] for k in lru] == ["c2", "c3", "c4", "c5"] and lru.num_evicted == 2
    shared: OwnerLRU[int] = OwnerLRU(max_records=4, max_bytes=10_000, max_share=0.25)
    shared.put(("quiet", "q"), 0, 1)
    for i in range(8):
        shared.put(("loud", f"l{i}"), i, 1)
        shared.evict(keep=("loud", f"l{i}"))
    assert shared.get(("quiet", "q")) == 0 and len(shared) == 4
    with pytest.raises(ValueError):
        OwnerLRU(4, 100, max_share=0)
    with pytest.raises(ValueError):
        OwnerLRU(-1, 100)
