"""The file key store (issue 36) on real files, in real processes: keys made, read and
destroyed; a destroyed key unreadable from the store's own files after a rotation; a rotation
killed at each step; a store that cannot be written."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from purgekeeper.storage import failpoints, keystore_files
from purgekeeper.storage.keystore import FileKeyStore, KeyDestroyed, KeyStore, KeyStoreUnusable
from purgekeeper.storage.sealing import SealedInvalid


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "data" / "keys"


@pytest.fixture
def store(directory: Path) -> Iterator[FileKeyStore]:
    made = FileKeyStore(directory)
    yield made
    made.close()
    failpoints.disarm()


def child_program(directory: Path, code: str) -> str:
    """``code``, with ``store`` open on ``directory``, as a program for another process."""
    return (
        "import sys\nfrom purgekeeper.storage import failpoints, keystore_rotation\n"
        "from purgekeeper.storage.keystore import FileKeyStore\n"
        f"store = FileKeyStore({str(directory)!r})\n{code}\n"
    )


def child(directory: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run in another process, with ``store`` open on ``directory``."""
    return subprocess.run(
        [sys.executable, "-c", child_program(directory, code)], capture_output=True, text=True, timeout=60
    )


def test_create_get_destroy_and_the_tombstones(store: FileKeyStore) -> None:
    typed: KeyStore = store  # the file store is a KeyStore
    keys = typed.create(["e1", "e2"])
    assert {len(key) for key in keys.values()} == {32} and keys["e1"] != keys["e2"]
    assert typed.create(["e2", "e3"])["e2"] == keys["e2"]  # an id with a key keeps it
    assert typed.get(["e1", "e2", "never"]) == {"e1": keys["e1"], "e2": keys["e2"], "never": None}
    assert typed.destroy(["e1", "never"]) == 1 and typed.destroy(["e1", "never"]) == 0  # idempotent
    assert typed.get(["e1", "e2"]) == {"e1": None, "e2": keys["e2"]}
    assert typed.destroyed(["e1", "e2", "never"]) == {"e1", "never"}
    with pytest.raises(KeyDestroyed) as refused:
        typed.create(["e4", "never", "e1"])
    assert refused.value.ids == ("e1", "never") and typed.get(["e4"]) == {"e4": None}  # nothing created
    assert all(key.hex() not in str(refused.value) for key in keys.values())


def test_a_second_store_and_another_process_see_the_same_keys(store: FileKeyStore, directory: Path) -> None:
    keys = store.create(["e1", "e2"])
    with FileKeyStore(directory) as other:
        assert other.get(["e1", "e2"]) == keys
    done = child(directory, "print(store.get(['e2'])['e2'].hex()); store.destroy(['e1']); store.create(['e9'])")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == keys["e2"].hex()
    assert store.get(["e1"]) == {"e1": None} and store.get(["e9"])["e9"] is not None
    with pytest.raises(KeyDestroyed):
        store.create(["e1"])


def test_the_cache_never_serves_a_key_destroyed_in_this_process_or_another(directory: Path) -> None:
    """The parent's cache holds e1; a child destroys it; the parent's next batch reads the
    moved generation and drops its cache (without the generation it would serve e1)."""
    with FileKeyStore(directory, cache_keys=2) as store:
        keys = store.create(["e1", "e2", "e3"])
        assert store.get(["e2", "e3"]) == {"e2": keys["e2"], "e3": keys["e3"]}
        assert len(store._cache) == 2  # bounded
        store.destroy(["e2"])
        assert store.get(["e2"]) == {"e2": None}
        assert store.get(["e3"]) == {"e3": keys["e3"]} and "e3" in store._cache
        generation = store.generation()
        done = child(directory, "store.destroy(['e3'])")
        assert done.returncode == 0, done.stderr
        assert store.generation() == generation + 1
        assert store.get(["e3"]) == {"e3": None}


def test_a_destroyed_key_cannot_be_read_back_from_the_stores_files(store: FileKeyStore, directory: Path) -> None:
    keys = store.create([f"e{n}" for n in range(50)])
    raw = keys["e7"]  # the test-only hook: the key as get and create hand it out
    with sqlite3.connect(directory / keystore_files.DATABASE) as db:
        wrapped = db.execute("SELECT wrapped FROM keys WHERE id = 'e7'").fetchone()[0]
    db.close()
    store.destroy(["e7"])
    store.rotate()
    files = [path for path in directory.iterdir() if path.is_file()]
    assert {path.name for path in files} >= {"keys.db", "lock"} and len(keystore_files.kek_versions(directory)) == 1
    for path in files:
        data = path.read_bytes()
        assert raw not in data and wrapped not in data, path.name
    for path in directory.glob("kek.*"):  # no KEK still present opens the old wrapped form
        for version in range(1, 4):
            with pytest.raises(SealedInvalid):
                keystore_files.unwrap(path.read_bytes(), version, "e7", wrapped)
    assert store.get(["e7", "e8"]) == {"e7": None, "e8": keys["e8"]}


STEPS = ["kek_written", "switched", "batch", "retired", "zeroed"]


@pytest.mark.parametrize("step", STEPS)
def test_a_rotation_killed_at_each_step_loses_no_key_and_revives_none(
    store: FileKeyStore, directory: Path, step: str
) -> None:
    keys = store.create([f"e{n}" for n in range(5)])
    store.destroy(["e0"])
    code = f"keystore_rotation.ROTATE_BATCH = 2\nfailpoints.arm('keystore.rotate.{step}=exit')\nstore.rotate()\n"
    done = child(directory, code + "print('rotated')")
    assert done.returncode == 137 and "rotated" not in done.stdout, done.stderr
    survivors = {key_id: key for key_id, key in keys.items() if key_id != "e0"}
    with FileKeyStore(directory) as after:
        assert after.get(list(keys)) == {"e0": None, **survivors}
        assert after.rotation_due()  # an interrupted rotation is due at once
        with pytest.raises(KeyDestroyed):
            after.create(["e0"])
        after.create(["new"])
        after.rotate()
        assert not after.rotation_due(now=0)
        assert after.get(list(keys)) == {"e0": None, **survivors}
    assert len(keystore_files.kek_versions(directory)) == 1 and not keystore_files.leftovers(directory)


def test_a_rotation_is_due_after_destructions_at_most_every_interval(store: FileKeyStore) -> None:
    store.create(["e1", "e2"])
    assert not store.rotation_due(now=1e12)  # nothing destroyed
    store.destroy(["e1"])
    assert store.rotation_due(now=1e12) and not store.rotation_due(now=0)
    store.rotate()
    assert not store.rotation_due(now=1e12)


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EROFS"])
def test_a_store_that_cannot_be_written_refuses_and_writes_nothing(store: FileKeyStore, errno_name: str) -> None:
    keys = store.create(["e1"])
    generation = store.generation()
    failpoints.arm(f"keystore.write={errno_name}")
    with pytest.raises(KeyStoreUnusable, match=str(store.directory)):
        store.create(["e2"])
    with pytest.raises(KeyStoreUnusable):
        store.destroy(["e1"])
    with pytest.raises(KeyStoreUnusable):
        store.rotate()
    failpoints.disarm()
    assert store.get(["e1", "e2"]) == {"e1": keys["e1"], "e2": None}
    assert store.destroyed(["e1"]) == set() and store.generation() == generation
    store.rotate()  # the stray KEK of the refused rotation is shredded, the rotation done
    assert store.get(["e1"]) == keys and len(keystore_files.kek_versions(store.directory)) == 1


def test_a_store_open_to_others_or_behind_a_symlink_is_refused(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o755)
    with pytest.raises(KeyStoreUnusable, match="open to others"):
        FileKeyStore(open_dir)
    real = tmp_path / "real"
    FileKeyStore(real).close()
    linked = tmp_path / "linked"
    linked.mkdir(mode=0o700)
    (linked / keystore_files.DATABASE).symlink_to(real / keystore_files.DATABASE)
    with pytest.raises(KeyStoreUnusable, match="symlink"):
        FileKeyStore(linked)


def test_a_kek_file_open_to_others_or_missing_is_refused(store: FileKeyStore, directory: Path) -> None:
    store.create(["e1"])
    store.close()
    kek = keystore_files.kek_path(directory, 1)
    os.chmod(kek, 0o644)
    with FileKeyStore(directory) as reopened, pytest.raises(KeyStoreUnusable, match="open to others") as refused:
        reopened.get(["e1"])
    assert kek.read_bytes().hex() not in str(refused.value)
    os.chmod(kek, 0o600)
    kek.rename(directory / "elsewhere")
    with FileKeyStore(directory) as reopened, pytest.raises(KeyStoreUnusable, match="missing"):
        reopened.get(["e1"])


def test_reads_during_another_processs_rotation_always_find_their_keys(store: FileKeyStore, directory: Path) -> None:
    """A child rotates three times, a row a transaction, while this process reads through new
    handles: every read finds every surviving key and no destroyed one. (The retry of a read
    whose KEK was retired after its snapshot covers a narrow window this test does not force.)"""
    keys = store.create([f"e{n}" for n in range(300)])
    store.destroy(["e0"])
    expected = {**keys, "e0": None}
    program = "keystore_rotation.ROTATE_BATCH = 1\nfor _ in range(3):\n    store.rotate()\nprint('rotated')"
    with subprocess.Popen(
        [sys.executable, "-c", child_program(directory, program)], stdout=subprocess.PIPE, text=True
    ) as rotating:
        reads = 0
        while rotating.poll() is None or reads == 0:
            with FileKeyStore(directory, cache_keys=0) as reader:
                assert reader.get(list(expected)) == expected
            reads += 1
        out, _ = rotating.communicate(timeout=60)
    assert rotating.returncode == 0 and "rotated" in out
    assert store.get(list(expected)) == expected and keystore_files.kek_versions(directory) == {4}


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /srv/keys rw,relatime shared:20 - nfs4 server:/export rw,vers=4.2
41 40 0:36 / /srv/keys/local\\040disk rw,relatime - ext4 /dev/sdb1 rw
42 22 0:37 / /mnt/sshfs rw,nosuid - fuse.sshfs user@host:/ rw
"""


def test_the_file_system_under_a_path_is_its_longest_mount() -> None:
    """Tried: mount points nested (an ext4 disk mounted inside an NFS mount, with a space in its
    name), FUSE, and a path outside any of them but the root."""
    kinds = {
        p: keystore_files.file_system_type(Path(p), MOUNTINFO)
        for p in (
            "/srv/keys/db1.keys",
            "/srv/keys/local disk/db1.keys",
            "/mnt/sshfs/x",
            "/var/lib/purgekeeper",
        )
    }
    assert kinds == {
        "/srv/keys/db1.keys": "nfs4",
        "/srv/keys/local disk/db1.keys": "ext4",
        "/mnt/sshfs/x": "fuse.sshfs",
        "/var/lib/purgekeeper": "ext4",
    }


@pytest.mark.parametrize("kind", ["nfs4", "cifs", "fuse.sshfs"])
def test_a_store_on_a_network_file_system_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Tried: the store's directory on NFS, SMB and a FUSE mount, where SQLite's write-ahead
    log is not shared between machines. Opening refuses, naming the file system, before the
    store's database is made."""
    monkeypatch.setattr(keystore_files, "file_system_type", lambda _path, _mountinfo=None: kind)
    with pytest.raises(KeyStoreUnusable, match=kind):
        FileKeyStore(tmp_path / "db1.keys")
    assert not (tmp_path / "db1.keys" / keystore_files.DATABASE).exists()


def test_destroying_a_key_the_store_never_held_is_refused_when_asked(store: FileKeyStore) -> None:
    """Tried: ``held_only`` destructions (a purge's) of ids this store never made, beside one it
    holds and one it destroyed: refused with nothing destroyed (the sign of a wrong store);
    without ``held_only`` the unknown id is remembered as destroyed, as before."""
    keys = store.create(["held", "gone"])
    store.destroy(["gone"], held_only=True)
    with pytest.raises(KeyStoreUnusable, match="never held 1"):
        store.destroy(["held", "gone", "elsewhere"], held_only=True)
    assert store.get(["held"]) == {"held": keys["held"]}
    assert store.destroy(["held", "gone"], held_only=True) == 1
    assert store.destroy(["elsewhere"]) == 0 and store.destroyed(["elsewhere"]) == {"elsewhere"}


def test_an_aead_kept_for_reads_never_outlives_its_keys_destruction_elsewhere(directory: Path) -> None:
    """Tried: a reader's ContentKeys warm with a key's AEAD, then the key destroyed through
    another store on the same directory (another process's). The reader's next lookup gives
    None for it at once (the store's generation moved), and still opens the others."""
    from purgekeeper.storage.content_keys import ContentKeys
    from purgekeeper.storage.sealing import open_text, seal_text

    with FileKeyStore(directory) as mine, FileKeyStore(directory) as theirs:
        reader = ContentKeys(mine)
        made = mine.create(["a", "b"])
        sealed = seal_text(made["b"], "kept", bound_to="event:b:body")
        assert all(reader.ciphers(["a", "b"]).values())
        assert reader.ciphers(["a", "b"]) == reader.ciphers(["a", "b"])  # kept: the same AEADs
        ContentKeys(theirs).destroy(["a"])
        now = reader.ciphers(["a", "b"])
        assert now["a"] is None and now["b"] is not None
        assert open_text(now["b"], sealed, bound_to="event:b:body") == "kept"
