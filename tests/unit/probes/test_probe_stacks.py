"""A faulthandler dump said in one line: each thread's innermost frame, counted."""

from __future__ import annotations

import faulthandler
import threading
from pathlib import Path

from kmon.probes.stacks import innermost_frames, stack_of

DUMP = '''\
Thread 0x00007f0000000002 (most recent call first):
  File "/venv/lib/python3.11/site-packages/kmon/probes/process.py", line 398 in _poll
  File "/venv/lib/python3.11/site-packages/kmon/probes/process.py", line 571 in poll

Thread 0x00007f0000000003 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/usr/lib/python3.11/threading.py", line 629 in wait

Thread 0x00007f0000000004 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait

Current thread 0x00007f0000000001 (most recent call first):
  File "/venv/lib/python3.11/site-packages/kmon/probes/workload.py", line 326 in _final_read
'''


def test_each_thread_is_named_by_its_innermost_frame_the_commonest_first() -> None:
    assert innermost_frames(DUMP) == ("2x wait (threading.py:331); _poll (process.py:398); "
                                      "_final_read (workload.py:326)")


def test_places_past_the_most_shown_are_counted() -> None:
    assert innermost_frames(DUMP, most=1) == "2x wait (threading.py:331); ... (2 more places)"


def test_text_without_a_stack_says_nothing() -> None:
    assert innermost_frames("") == ""
    assert innermost_frames("Fatal Python error: Segmentation fault\n\n") == ""


def test_a_real_dump_names_the_call_a_thread_waits_in(tmp_path: Path) -> None:
    release = threading.Event()
    waiter = threading.Thread(target=release.wait, name="waiter", daemon=True)
    waiter.start()
    path = tmp_path / "stacks"
    try:
        with open(path, "w") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
    finally:
        release.set()
        waiter.join()
    frames = innermost_frames(path.read_text())
    assert "wait (threading.py:" in frames, frames
    assert "test_a_real_dump_names_the_call_a_thread_waits_in (test_probe_stacks.py:" in frames


def test_a_thread_s_stack_is_where_it_waits_and_a_finished_one_has_none() -> None:
    release = threading.Event()
    waiter = threading.Thread(target=release.wait, name="waiter", daemon=True)
    waiter.start()
    try:
        assert "in wait" in stack_of(waiter), stack_of(waiter)
    finally:
        release.set()
        waiter.join()
    assert stack_of(waiter) == ""
