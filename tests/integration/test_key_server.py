"""``purgectl keys serve`` as its own process, and ``HttpKeyStore`` over it: the key store that
the API and worker processes of many machines share (``purgekeeper.commands.key_server``,
``purgekeeper.storage.key_client``)."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from purgekeeper.schema.errors import ValidationError
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.storage.key_client import IDS_PER_REQUEST, HttpKeyStore
from purgekeeper.storage.keystore import KeyDestroyed, KeyStoreUnusable
from tests.helpers.key_server import TOKEN, running_key_server, self_signed
from tests.helpers.served import BIN, STOP_S, clean_environment

ROTATION_WAIT_S = 60.0  # a bound on the wait for the server's rotation, never a measured time


def post(url: str, path: str, body: object, *, token: str = TOKEN) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def test_keys_round_trip_and_a_destruction_is_seen_by_another_client_at_once(tmp_path: Path) -> None:
    """Tried: create, get, destroy and destroyed through one client; a get of the destroyed key
    from a second client that had read it just before (no cache serves it); create of a
    destroyed id (KeyDestroyed with the id, nothing made); a held-only destroy naming an id
    never made (refused, nothing destroyed); more ids than one request takes."""
    with running_key_server(tmp_path) as server, server.client() as one, server.client() as two:
        made = one.create(["a", "b"])
        assert {len(key) for key in made.values()} == {32}
        assert one.create(["a", "b"]) == made  # idempotent: the same keys
        assert two.get(["a", "b", "never"]) == {**made, "never": None}
        assert one.destroy(["a", "gone-without-a-key"]) == 1
        assert two.get(["a", "b"]) == {"a": None, "b": made["b"]}
        assert one.destroyed(["a", "b", "gone-without-a-key"]) == {"a", "gone-without-a-key"}
        with pytest.raises(KeyDestroyed) as refused:
            two.create(["c", "a"])
        assert refused.value.ids == ("a",)
        assert one.get(["c"]) == {"c": None}
        with pytest.raises(KeyStoreUnusable, match="never held") as wrong_store:
            one.destroy(["b", "never-made"], held_only=True)
        assert server.url in str(wrong_store.value)
        assert one.destroyed(["b", "never-made"]) == set() and two.get(["b"]) == {"b": made["b"]}
        many = [f"m{n}" for n in range(2 * IDS_PER_REQUEST + 500)]
        assert list(one.create(many)) == many
        assert one.destroy(many) == len(many)
        assert set(two.get(many).values()) == {None}


def test_a_wrong_token_is_refused_and_the_client_names_the_url_not_the_token(tmp_path: Path) -> None:
    """Tried: a request without a token, with a wrong one, and with another scheme (401 each);
    HttpKeyStore with a wrong token (KeyStoreUnusable naming the URL, not either token), for
    a get and for its health check; /healthz without a token answers (a supervisor's probe)."""
    wrong = "w" * 40
    with running_key_server(tmp_path) as server:
        assert httpx.post(f"{server.url}/v1/keys/get", json={"ids": ["a"]}, timeout=10).status_code == 401
        assert post(server.url, "/v1/keys/get", {"ids": ["a"]}, token=wrong).status_code == 401
        basic = {"Authorization": f"Basic {TOKEN}"}
        assert httpx.post(f"{server.url}/v1/keys/get", json={"ids": ["a"]}, headers=basic).status_code == 401
        assert httpx.get(f"{server.url}/healthz", timeout=10).json() == {"ok": True}
        with server.client(token=wrong) as client:
            for call in (lambda: client.get(["a"]), client.check):
                with pytest.raises(KeyStoreUnusable) as refused:
                    call()
                assert server.url in str(refused.value) and "token" in str(refused.value)
                assert wrong not in str(refused.value) and TOKEN not in str(refused.value)
        assert "refused a request to /v1/keys/get" in server.output()
        assert wrong not in server.output() and TOKEN not in server.output()


def test_too_many_ids_and_malformed_requests_are_refused(tmp_path: Path) -> None:
    """Tried: one id more than a request takes (413), an id of 201 characters and an empty one
    (422), a body that is not JSON, and ids that are not a list of strings (400); the store
    still answers afterwards."""
    with running_key_server(tmp_path) as server:
        too_many = post(server.url, "/v1/keys/create", {"ids": [f"i{n}" for n in range(IDS_PER_REQUEST + 1)]})
        assert (too_many.status_code, too_many.json()["error"]) == (413, "too_large")
        assert post(server.url, "/v1/keys/create", {"ids": ["x" * 201]}).status_code == 422
        assert post(server.url, "/v1/keys/get", {"ids": [""]}).status_code == 422
        for body in ({"ids": "a"}, {"ids": [1]}, ["a"], {}):
            assert post(server.url, "/v1/keys/get", body).status_code == 400, body
        garbage = httpx.post(
            f"{server.url}/v1/keys/get", content=b"{not json", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert garbage.status_code == 400
        assert post(server.url, "/v1/keys/get", {"ids": ["a"]}).json() == {"keys": {"a": None}}


def test_a_stopped_or_silent_server_is_unusable_not_a_hang(tmp_path: Path) -> None:
    """Tried: a get once the server has stopped (connection refused, after its retries), and a
    get from a server that accepts connections and never answers (the client's timeout ends
    each try): KeyStoreUnusable naming the URL both times."""
    with running_key_server(tmp_path) as server:
        client = server.client(timeout=1.0)
        assert client.get(["a"]) == {"a": None}
    with client, pytest.raises(KeyStoreUnusable) as stopped:
        client.get(["a"])
    assert server.url in str(stopped.value) and "cannot be reached" in str(stopped.value)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the connections; nobody reads or answers them
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with HttpKeyStore(url, TOKEN, timeout=0.5) as hung, pytest.raises(KeyStoreUnusable) as timed_out:
            hung.get(["a"])
    assert url in str(timed_out.value) and "did not answer within 0.5 s" in str(timed_out.value)


def test_a_store_that_cannot_be_written_answers_503_with_the_reason(tmp_path: Path) -> None:
    """Tried: the server's store meeting ENOSPC at every commit (a failpoint armed after it
    opened): /healthz answers 503 with the reason, a create is KeyStoreUnusable naming the URL
    and the reason (after its retries), and a get, which writes nothing, still answers."""
    with running_key_server(tmp_path, env={"PURGEKEEPER_FAILPOINTS": "keystore.write=ENOSPC"}) as server:
        health = httpx.get(f"{server.url}/healthz", timeout=10)
        assert health.status_code == 503 and "No space left" in health.json()["detail"]
        with server.client() as client:
            with pytest.raises(KeyStoreUnusable) as full:
                client.create(["a"])
            assert server.url in str(full.value) and "503" in str(full.value) and "No space left" in str(full.value)
            with pytest.raises(KeyStoreUnusable, match="No space left"):
                client.check()
            assert client.get(["a"]) == {"a": None}


def test_sigterm_stops_the_server_with_exit_0_and_its_log_holds_no_key(tmp_path: Path) -> None:
    """Tried: keys made, read and destroyed, then SIGTERM to the server's group: exit 0, and
    neither the token nor any key's base64 in its output."""
    with running_key_server(tmp_path) as server, server.client() as client:
        made = client.create([f"k{n}" for n in range(20)])
        client.get(made)
        client.destroy(list(made)[:5])
        os.killpg(server.process.pid, signal.SIGTERM)
        assert server.process.wait(timeout=STOP_S) == 0, server.output()
    output = server.output()
    assert "Uvicorn running on" in output and TOKEN not in output
    assert not [key for key in made.values() if base64.b64encode(key).decode() in output]


def test_the_server_rotates_its_kek_after_destructions(tmp_path: Path) -> None:
    """Tried: a server with --rotate-every 1; two keys made and one destroyed. The server
    rotates by itself (no client calls rotate: HttpKeyStore's rotation_due is False and its
    rotate refused): kek.1 is shredded, kek.2 appears, and the surviving key reads the same."""
    with running_key_server(tmp_path, "--rotate-every", "1") as server, server.client() as client:
        made = client.create(["kept", "shredded"])
        assert not client.rotation_due()
        with pytest.raises(KeyStoreUnusable, match="rotates its own"):
            client.rotate()
        client.destroy(["shredded"])
        deadline = time.monotonic() + ROTATION_WAIT_S
        while (server.directory / "kek.1").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sorted(path.name for path in server.directory.glob("kek.*")) == ["kek.2"], server.output()
        assert client.get(["kept", "shredded"]) == {"kept": made["kept"], "shredded": None}
        assert "rotated to version 2" in server.output()


def test_content_keys_pool_over_the_key_server(tmp_path: Path) -> None:
    """Tried: ContentKeys over HttpKeyStore taking more keys than its pool holds (two creates),
    each given once; looking them up from another host's ContentKeys; destroying one there
    and looking it up here at once."""
    with running_key_server(tmp_path) as server, server.client() as here_store, server.client() as there_store:
        here, there = ContentKeys(here_store, pool=4), ContentKeys(there_store, pool=4)
        taken = dict(here.take_many(6))
        assert len(taken) == 6
        assert there.lookup(taken) == taken
        doomed = next(iter(taken))
        assert there.destroy([doomed]) == 1
        assert here.lookup([doomed, ""]) == {doomed: None}
        assert here.destroyed(taken) == {doomed}


def test_the_server_serves_tls_with_its_key_and_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tried: --ssl-keyfile and --ssl-certfile with a self-signed certificate: a client trusting
    it (SSL_CERT_FILE, as httpx reads it) round-trips over https; plain http to that port is
    KeyStoreUnusable."""
    tls = self_signed(tmp_path / "tls")
    with running_key_server(tmp_path, tls=tls) as server:
        assert server.url.startswith("https://")
        monkeypatch.setenv("SSL_CERT_FILE", str(tls.certfile))
        with server.client() as client:
            made = client.create(["a"])
            assert client.get(["a"]) == made
            client.check()
        plain = server.url.replace("https://", "http://")
        with HttpKeyStore(plain, TOKEN, timeout=2) as cleartext, pytest.raises(KeyStoreUnusable):
            cleartext.get(["a"])
    assert "Uvicorn running on https://" in server.output()


@pytest.mark.parametrize(
    ("token", "reason"),
    [(None, "PURGEKEEPER_KEY_SERVER_TOKEN is not set"), ("short-token", "at least 32")],
)
def test_the_server_refuses_to_start_without_a_token(tmp_path: Path, token: str | None, reason: str) -> None:
    """Tried: ``keys serve`` with no token, and with one of 11 characters: exit 2 naming the
    variable and the rule, and the short token not repeated."""
    env = clean_environment() if token is None else clean_environment(PURGEKEEPER_KEY_SERVER_TOKEN=token)
    done = subprocess.run(
        [str(BIN / "purgectl"), "keys", "serve", "--directory", str(tmp_path / "store"), "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert reason in done.stderr and "PURGEKEEPER_KEY_SERVER_TOKEN" in done.stderr
    assert token is None or token not in done.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        ("http://keys.example.com:8090", "use https://"),
        ("http://10.0.0.5:8090/", "use https://"),
        ("https://user:pass@keys.example.com", "credentials"),
        ("ftp://keys.example.com", "not https://"),
        ("keys.example.com:8090", "not https://"),
    ],
)
def test_a_url_that_would_send_keys_in_clear_is_refused(url: str, refusal: str) -> None:
    """Tried: http:// to another host (by name and by address), credentials in the URL, and
    URLs that are not http(s): ValidationError, before any connection."""
    with pytest.raises(ValidationError, match=refusal) as refused:
        HttpKeyStore(url, TOKEN)
    assert "pass" not in str(refused.value)


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("https://keys.example.com", "https://keys.example.com/"),
        ("https://keys.example.com/prefix", "https://keys.example.com/prefix/"),
        ("http://localhost:8090", "http://localhost:8090/"),
        ("http://[::1]:8090/", "http://[::1]:8090/"),
        ("http://127.0.0.2:8090", "http://127.0.0.2:8090/"),
    ],
)
def test_https_and_loopback_urls_are_taken(url: str, normal: str) -> None:
    """Tried: https:// to any host, with a path prefix (a reverse proxy's), and http:// to a
    loopback address or localhost: taken, with a trailing slash, shown as the store's place."""
    with HttpKeyStore(url, TOKEN) as store:
        assert store.url == store.directory == normal


def test_a_busy_port_exits_4_naming_the_command_and_the_store_is_under_the_data_dir(tmp_path: Path) -> None:
    """Tried: ``keys serve`` without --directory, on a port another socket holds: exit 4, the
    message naming ``purgectl keys serve --port`` with another port, no traceback; the store
    it opened is ``<data dir>/key-server``."""
    env = clean_environment(PURGEKEEPER_KEY_SERVER_TOKEN=TOKEN, PURGEKEEPER_DATA_DIR=str(tmp_path / "data"))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        done = subprocess.run(
            [str(BIN / "purgectl"), "keys", "serve", "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 4 and "Traceback" not in done.stderr, done.stderr
    assert f"purgectl keys serve --port {port + 1}" in done.stderr
    assert (tmp_path / "data" / "key-server" / "keys.db").exists()
