"""A key's state as a head and window pages (``state_pages``): what goes back together is what
was cut, a micro-batch writes only the pages it changed, and online verdicts do not depend on
the page size."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from kmon.checker import CheckConfig, Checker
from kmon.checker.state import CHUNK
from kmon.history.events import event_of
from kmon.history.model import Op
from kmon.streaming import state_pages
from kmon.streaming.keyfold import KeyFold
from kmon.streaming.state_pages import PageCache
from kmon.synth import SynthConfig, healthy
from tests.unit.streaming.online import SECOND, KeyStore, run_online, settings, verdicts

SMALL = SynthConfig(keys=2, processes=4, keys_per_process=2)


def _fragments(ops: list[Op], key: Any) -> list[Any]:
    return [fr for op in ops if op.f != "crash" for fr in event_of(op).frags if fr.key == key]


def _folded(n_events: int, page_slots: int) -> tuple[KeyStore, KeyFold, list[int]]:
    """Key 0 of a healthy run folded batch by batch through a paged store; the bytes each
    batch wrote."""
    s = settings(grace=SECOND, page_slots=page_slots)
    frags = _fragments(list(healthy(n_events, SMALL)), 0)
    store, written, kf = KeyStore(), [], KeyFold("p", 0, s)
    for i in range(0, len(frags), 200):
        kf = store.load("p", 0, s)
        before = store.written
        batch = frags[i:i + 200]
        kf.batch(batch, None, max(0, batch[-1].time - SECOND // 2))
        store.save(0, kf)
        written.append(store.written - before)
    return store, store.load("p", 0, s), written


@pytest.mark.parametrize("page_slots", [0, CHUNK, 4 * CHUNK])
def test_what_is_cut_into_pages_goes_back_together(page_slots: int) -> None:
    _, kf, _ = _folded(30_000, 4 * CHUNK)
    body = kf.st.to_body()
    cut = state_pages.split(body, page_slots)
    if page_slots:
        assert len(cut.pages) >= 2  # the test cuts something
    head = pickle.loads(pickle.dumps(cut.head))
    assert state_pages.join(head, dict(cut.pages)) == body


def test_a_batch_writes_only_the_pages_it_changed() -> None:
    paged, kf, written = _folded(60_000, CHUNK)
    whole, _, written_whole = _folded(60_000, 0)
    assert len(kf.pages) >= 8  # a window of many pages
    steady = written[len(written) // 2:]
    steady_whole = written_whole[len(written_whole) // 2:]
    # Every batch of the second half rewrote the whole window before pages; now the head
    # (records, index, the window's hot pages) and the few cold pages its verdicts touched.
    assert sum(steady) * 2 < sum(steady_whole), (sum(steady), sum(steady_whole))
    assert paged.size(0) == pytest.approx(whole.size(0), rel=0.1)


def test_flags_marked_on_cold_pages_ride_in_the_head_not_a_page_write(monkeypatch) -> None:
    # Verdicts decided as the watermark passes mark flags on old offsets, a few per batch.
    patched, kf, _ = _folded(60_000, CHUNK)
    monkeypatch.setattr(state_pages, "PATCH_ENTRIES", 0)
    plain, kf_plain, _ = _folded(60_000, CHUNK)
    assert kf.st.to_bytes() == kf_plain.st.to_bytes()  # the same state either way
    assert patched.page_puts * 2 < plain.page_puts, (patched.page_puts, plain.page_puts)


def _one_entry_off(cut: state_pages.Split, p: int, entries: int) -> dict[int, state_pages.Page]:
    """The store's pages as ``cut`` has them but page ``p``'s flags differing in ``entries``."""
    tables = list(pickle.loads(cut.pages[p]))
    flags = bytearray(tables[1])
    for i in range(entries):
        flags[2 * i] ^= 0x40
    tables[1] = bytes(flags)
    stored = {q: state_pages.Page(7, data) for q, data in cut.pages.items()}
    stored[p] = state_pages.Page(7, pickle.dumps(tuple(tables), protocol=5))
    return stored


def test_a_patched_page_goes_back_together() -> None:
    _, kf, _ = _folded(30_000, CHUNK)
    body = kf.st.to_body()
    cut = state_pages.split(body, CHUNK)
    p = min(cut.pages)
    stored = _one_entry_off(cut, p, 3)
    now, writes, patches = state_pages.changes(stored, cut.pages, cut.widths)
    assert not writes.put and not writes.removed
    assert [(t, i) for t, i, _ in patches[p]] == [(1, 0), (1, 1), (1, 2)]
    assert now == stored  # the store keeps the page it has
    head = pickle.loads(pickle.dumps({**cut.head, "patches": patches}))
    assert state_pages.join(head, {q: pg.data for q, pg in now.items()}) == body
    # past the budget, the page is written instead
    over = _one_entry_off(cut, p, state_pages.PATCH_ENTRIES + 1)
    _, writes, patches = state_pages.changes(over, cut.pages, cut.widths)
    assert list(writes.put) == [p] and not patches


def test_a_page_the_store_lost_is_an_error_naming_it() -> None:
    _, kf, _ = _folded(30_000, CHUNK)
    cut = state_pages.split(kf.st.to_body(), CHUNK)
    first = min(cut.pages)
    del cut.pages[first]
    with pytest.raises(ValueError, match=f"missing from the store: \\[{first}"):
        state_pages.join(cut.head, cut.pages)


def test_a_state_saved_with_another_page_size_loads_and_is_recut() -> None:
    store, kf, _ = _folded(30_000, 4 * CHUNK)
    body = kf.st.to_body()
    small = settings(grace=SECOND, page_slots=CHUNK)
    kf = store.load("p", 0, small)
    assert kf.st.to_body() == body
    store.save(0, kf)  # rewritten in pages of one chunk: the old pages removed
    assert set(store.pages[0]) == set(state_pages.split(body, CHUNK).pages)
    assert store.load("p", 0, small).st.to_body() == body
    whole = settings(grace=SECOND, page_slots=0)
    kf = store.load("p", 0, whole)
    store.save(0, kf)
    assert store.pages[0] == {} and store.load("p", 0, whole).st.to_body() == body


def test_a_state_saved_whole_by_the_previous_release_loads() -> None:
    _, kf, _ = _folded(10_000, CHUNK)
    extra = (3, kf.topic, kf.partition, kf.leader, kf.placed, kf.timer_ms,
             kf.verdicts.to_state(), kf.lags, kf.last_ops)
    v3 = pickle.dumps((kf.st.to_bytes(), extra), protocol=5)
    back = KeyFold.from_parts("p", v3, _no_pages, settings())
    assert back.st.to_body() == kf.st.to_body() and back.pages == {}


def _no_pages() -> dict[int, bytes]:
    raise AssertionError("a whole state has no pages to read")


def test_the_page_size_must_be_whole_chunks() -> None:
    assert state_pages.check_page_slots(0) == 0
    assert state_pages.check_page_slots(4 * CHUNK) == 4 * CHUNK
    for bad in (-CHUNK, CHUNK // 2, CHUNK + 1):
        with pytest.raises(ValueError, match=f"multiple of {CHUNK}"):
            state_pages.check_page_slots(bad)


def _lossy(n_events: int) -> list[Op]:
    """A healthy run whose polls never return some of key 0's offsets: lost writes."""
    ops = list(healthy(n_events, SMALL))
    for op in ops:
        if op.type == "ok" and op.f == "poll":
            op.value = [(m[0], {k: [r for r in recs if k != 0 or r[0] % 97 != 5]
                                for k, recs in m[1].items()}) for m in op.value]
    return ops


def test_verdicts_do_not_depend_on_the_page_size_nor_a_workers_copy() -> None:
    ops = _lossy(20_000)
    offline = Checker(CheckConfig(cycles=False)).run(ops).errors
    counts = {}
    for page_slots, cache in ((0, None), (CHUNK, None), (4 * CHUNK, None),
                              (CHUNK, PageCache(1 << 30)), (CHUNK, PageCache(20_000))):
        out = run_online(ops, batch=300, s=settings(page_slots=page_slots), cache=cache)
        counts[page_slots, cache] = {t: len(r) for t, r in verdicts(out["evidence"]).items()}
        if cache:
            assert cache.hits > 10 and cache.nbytes <= cache.max_bytes
    first = counts[0, None]
    assert first.get("lost-write", 0) >= 10  # the test finds something
    assert all(c == first for c in counts.values())
    assert first == {t: len(r) for t, r in offline.items()}


def test_a_workers_copy_is_used_only_while_the_store_holds_it() -> None:
    # A task saved the key (its pages in this worker's copy), then failed: the store was
    # rolled back to the head before, whose tokens the copy does not have.
    cache = PageCache(1 << 30)
    store, _, _ = _folded(30_000, CHUNK)
    s = settings(grace=SECOND, page_slots=CHUNK)
    committed = dict(store.heads), {k: dict(v) for k, v in store.pages.items()}
    kf = store.load("p", 0, s)
    frags = _fragments(list(healthy(40_000, SMALL)), 0)
    kf.batch([f for f in frags if f.op > max(kf.last_ops.values())][:300], None, 0)
    saved = kf.to_parts(CHUNK)
    assert saved.writes.put  # the failed attempt changed a cold page
    cache.put(0, saved.pages)
    heads, pages = committed
    tokens = pickle.loads(heads[0])[1][-1]
    assert cache.get(0, tokens) is None  # rolled back: read the store
    cache.put(0, {p: state_pages.Page(tokens[p], b) for p, b in pages[0].items()})
    assert cache.get(0, tokens) is not None


def test_a_workers_copy_is_bounded() -> None:
    cache = PageCache(max_bytes=10_000)
    for key in range(10):
        cache.put(key, {0: state_pages.Page(key, b"x" * 3_000)})
        assert cache.nbytes <= 10_000
    assert cache.get(9, {0: 9}) is not None and cache.get(0, {0: 0}) is None
    cache.put("big", {0: state_pages.Page(1, b"x" * 20_000)})  # larger than the budget: not kept
    assert cache.get("big", {0: 1}) is None and cache.nbytes <= 10_000


def _index_of(st: Any) -> dict[int, int]:
    """Each value in the window -> the offset the value index finds it at."""
    return {st.val[i]: st.find(st.val[i]) for i in range(len(st.val)) if st.find(st.val[i]) >= 0}


@pytest.mark.parametrize("page_slots", [0, CHUNK])
def test_the_head_leaves_the_value_index_out_and_the_load_rebuilds_it(page_slots: int) -> None:
    store, kf, _ = _folded(30_000, page_slots)
    saved = kf.to_parts(page_slots)
    head, extra = pickle.loads(saved.head)
    assert extra[0] == 5 and head["arrays"][-1] == ("i", b"")
    indexed = kf.st.to_body()["arrays"][-1]
    assert len(indexed[1]) > 1_000  # what the head no longer carries
    back = store.load("p", 0, settings(grace=SECOND, page_slots=page_slots))
    found = _index_of(back.st)
    assert found == _index_of(kf.st) and len(found) > 1_000
    # a state saved by the previous release (version 4: the index in the head) loads as is
    v4 = state_pages.split(kf.st.to_body(), 0).head
    old = pickle.dumps((v4, (4, *extra[1:-1], {})), protocol=5)
    assert KeyFold.from_parts("p", old, _no_pages, settings()).st.to_body() == kf.st.to_body()
