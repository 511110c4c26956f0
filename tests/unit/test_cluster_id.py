"""The local cluster's id: never a word kafka-storage reads as a flag (a CI run's suite once
failed every integration test so: its random id began with ``-``)."""

from __future__ import annotations

import base64
import uuid
from unittest import mock

from kmon.local import cluster


def test_an_id_that_would_start_with_a_dash_is_drawn_again() -> None:
    dash = uuid.UUID(bytes=b"\xf8" + bytes(15))  # base64url of 0xf8... begins with "-"
    plain = uuid.UUID(bytes=b"\x00" + bytes(15))
    with mock.patch.object(cluster.uuid, "uuid4", side_effect=[dash, plain]):
        assert cluster.new_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"


def test_ids_are_kafkas_16_bytes_in_base64url() -> None:
    for _ in range(2000):  # about 31 of them would start with "-" unchecked
        cid = cluster.new_cluster_id()
        assert not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_an_older_id_starting_with_a_dash_is_passed_as_the_options_value() -> None:
    assert cluster.cluster_id_arg("-126wxoBTSy-iVmW_VbUNQ") == "--cluster-id=-126wxoBTSy-iVmW_VbUNQ"
