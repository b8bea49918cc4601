"""What the HTTP tests share: ``client``, the app of the test's handle as the host calls it
(with the host token). A module whose client signs in, or carries another token, or none,
defines its own ``client``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import purgekeeper
from tests.helpers.http import AS_HOST, TestClient, make_client


@pytest.fixture
def client(pk: purgekeeper.Purgekeeper) -> Iterator[TestClient]:
    with make_client(pk) as test_client:
        test_client.headers.update(AS_HOST)
        yield test_client
