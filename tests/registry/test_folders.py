"""Folders on a real IPFS node: what is pushed comes back byte for byte, and a hostile file list
writes nothing outside, or instead of, the folder it is pulled into."""

from __future__ import annotations

import json

import pytest

from marketplace import folders
from marketplace.folders import FORMAT, FolderError
from marketplace.storage import ContentTooLarge


def listing(*files: tuple[str, int, str]) -> bytes:
    return json.dumps(
        {"format": FORMAT, "files": [{"path": p, "size": s, "cid": c} for p, s, c in files]}
    ).encode()


def test_a_folder_comes_back_byte_for_byte_without_its_hidden_files(storage, tmp_path):
    src = tmp_path / "src"
    (src / "shards").mkdir(parents=True)
    (src / "config.json").write_text('{"a": 1}')
    (src / "shards" / "part-000.jsonl").write_bytes(b'{"text": "x"}\n' * 30_000)  # two chunks
    (src / "empty.txt").write_bytes(b"")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref")

    cid, pushed = folders.push(storage, src)
    assert [e.path for e in pushed.files] == ["config.json", "empty.txt", "shards/part-000.jsonl"]

    out = tmp_path / "out"
    pulled = folders.pull(storage, cid, out)
    assert pulled == pushed
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "config.json",
        "empty.txt",
        "shards/part-000.jsonl",
    ]
    for entry in pushed.files:
        assert (out / entry.path).read_bytes() == (src / entry.path).read_bytes()
    assert not list(tmp_path.glob(".out.*"))  # no staging folder left behind


def test_a_single_file_is_a_folder_of_one(storage, tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text("one line\n")
    cid, _ = folders.push(storage, data)
    folders.pull(storage, cid, tmp_path / "out")
    assert (tmp_path / "out" / "corpus.txt").read_text() == "one line\n"


@pytest.mark.parametrize(
    "path",
    ["../escape", "/etc/passwd", "a/../../b", "a//b", ".hidden", "a/./b", "a\\b", "x" * 300, ""],
)
def test_a_list_naming_a_path_outside_the_folder_writes_nothing(storage, tmp_path, path):
    cid = storage.add_bytes(b"payload")
    bad = storage.add_bytes(listing((path, 7, cid)))
    with pytest.raises(FolderError, match="is not a folder's file list"):
        folders.pull(storage, bad, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("declared", "error"), [(100, ContentTooLarge), (20_000, FolderError)], ids=["more", "less"]
)
def test_a_list_that_lies_about_a_size_is_refused_and_leaves_no_folder(
    storage, tmp_path, declared, error
):
    small = storage.add_bytes(b"small")
    big = storage.add_bytes(b"x" * 10_000)
    bad = storage.add_bytes(listing(("a.txt", 5, small), ("b.bin", declared, big)))
    with pytest.raises(error):
        folders.pull(storage, bad, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        listing(("a", 1, "Qm1"), ("a", 1, "Qm1")),  # twice
        listing(("a", 1, "Qm1"), ("a/b", 1, "Qm1")),  # a file and a folder
        listing(("a", -1, "Qm1")),
        json.dumps({"format": FORMAT, "files": []}).encode(),
        json.dumps({"format": "other", "files": [{"path": "a", "size": 1, "cid": "Qm1"}]}).encode(),
    ],
)
def test_a_malformed_list_is_refused(storage, tmp_path, body):
    with pytest.raises(FolderError, match="is not a folder's file list"):
        folders.pull(storage, storage.add_bytes(body), tmp_path / "out")


def test_a_list_too_large_is_refused_before_it_is_read_whole(storage, tmp_path):
    huge = storage.add_bytes(b" " * (folders.MAX_LIST_BYTES + 1))
    with pytest.raises(ContentTooLarge, match="more than"):
        folders.pull(storage, huge, tmp_path / "out")


def test_pull_refuses_a_folder_that_holds_files_and_push_a_symlink(storage, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    cid, _ = folders.push(storage, tmp_path / "out")
    with pytest.raises(FolderError, match="is not an empty folder"):
        folders.pull(storage, cid, tmp_path / "out")
    (tmp_path / "out" / "link").symlink_to(tmp_path / "out" / "mine.txt")
    with pytest.raises(FolderError, match="symbolic link"):
        folders.push(storage, tmp_path / "out")
