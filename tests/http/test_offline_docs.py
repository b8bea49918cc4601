"""``/docs`` (Swagger UI) and ``/redoc`` work without internet: their pages name no outside
host, and the scripts, styles and icon they load are served by the app itself (from the
installed ``fastapi-offline`` package), with a JavaScript or CSS content type."""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest

import purgekeeper
from tests.helpers.http import TestClient, make_client

Pk = purgekeeper.Purgekeeper
BASE = "http://testserver"


class References(HTMLParser):
    """Every ``src`` and ``href`` of a page, and any absolute URL written in its inline scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.urls += [word.strip("'\",;()") for word in data.split() if "//" in word and "http" in word]


def references(html: str) -> list[str]:
    parser = References()
    parser.feed(html)
    return parser.urls


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with make_client(pk) as test_client:
        yield test_client


@pytest.mark.parametrize(
    ("page", "assets"),
    [
        ("/docs", {"application/javascript", "text/css", "image/png"}),
        ("/redoc", {"application/javascript", "image/png"}),
    ],
)
def test_the_docs_pages_load_everything_from_this_host(client: TestClient, page: str, assets: set[str]) -> None:
    answer = client.get(page)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    urls = references(answer.text)
    assert urls, answer.text
    for url in urls:
        absolute = urljoin(BASE + page, url)
        assert urlsplit(absolute).netloc == "testserver", (page, url)
    served = set()
    for url in urls:
        path = urlsplit(urljoin(BASE + page, url)).path
        if path in ("/openapi.json", page):
            continue
        asset = client.get(path)
        assert asset.status_code == 200, (url, asset.status_code)
        kind = asset.headers["content-type"].split(";")[0]
        assert len(asset.content) > 1000, url
        served.add("application/javascript" if kind == "text/javascript" else kind)
    assert served == assets, (page, urls)
    assert "/openapi.json" in answer.text


def test_the_static_assets_add_no_operation(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith(("/docs", "/redoc", "/static"))]
