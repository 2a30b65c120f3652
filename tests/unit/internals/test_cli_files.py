"""Which files `yamltrace validate DIR` reads: an iterative walk that visits each real directory once
(a second path to one is passed over, a loop reported) and stops at `MAX_WALK_DEPTH`, reporting the directories past it
(never exponential, never a RecursionError)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from yamltrace.cli._files import MAX_WALK_DEPTH, collect


def test_a_symlink_dag_is_walked_once_per_directory(tmp_path: Path) -> None:
    """Level i holds a spec and two links to level i+1: 2**depth paths, depth + 1 directories."""
    depth = 12
    for level in range(depth + 1):
        (tmp_path / f"level{level}").mkdir()
        (tmp_path / f"level{level}" / "spec.yaml").write_text("yamltrace: 1\n")
    for level in range(depth):
        for link in ("a", "b"):
            os.symlink(tmp_path / f"level{level + 1}", tmp_path / f"level{level}" / link)
    targets = collect([str(tmp_path / "level0")]).targets
    read = [t.path for t in targets if t.problem is None]
    skipped = [t for t in targets if t.problem is not None]
    assert len(read) == depth + 1
    assert read[:2] == [str(tmp_path / "level0" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "spec.yaml"),
                        str(tmp_path / "level0" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "a" / "spec.yaml")]  # fmt: skip
    assert skipped == []


def test_a_link_loop_is_reported_once(tmp_path: Path) -> None:
    (tmp_path / "top" / "sub").mkdir(parents=True)
    (tmp_path / "top" / "sub" / "s.yml").write_text("yamltrace: 1\n")
    os.symlink(tmp_path / "top", tmp_path / "top" / "sub" / "back")
    targets = collect([str(tmp_path / "top")]).targets
    assert [(t.path, t.problem and t.problem.message) for t in targets] == [
        (str(tmp_path / "top" / "sub" / "back"), f"symbolic link loop back to {tmp_path / 'top'}; not followed"),
        (str(tmp_path / "top" / "sub" / "s.yml"), None),
    ]


@pytest.fixture
def deep_tree(tmp_path: Path) -> Iterator[str]:
    """tmp_path/d/d/.../d (1,500 levels) holding x.yaml; removed bottom up afterwards, since pytest's
    own clean-up (shutil.rmtree) recurses too deep for it, as pathlib's mkdir(parents=True) does."""
    deepest = str(tmp_path)
    for _ in range(1500):
        deepest = os.path.join(deepest, "d")
        os.mkdir(deepest)
    Path(deepest, "x.yaml").write_text("yamltrace: 1\n")
    yield deepest
    os.unlink(os.path.join(deepest, "x.yaml"))
    while deepest != str(tmp_path):
        for name in os.listdir(deepest):
            os.unlink(os.path.join(deepest, name))
        os.rmdir(deepest)
        deepest = os.path.dirname(deepest)


def test_a_tree_deeper_than_the_limit_is_reported_not_a_recursion_error(tmp_path: Path, deep_tree: str) -> None:
    (tmp_path / "d" / "top.yaml").write_text("yamltrace: 1\n")
    targets = collect([str(tmp_path)]).targets
    assert [t.path for t in targets if t.problem is None] == [str(tmp_path / "d" / "top.yaml")]
    (stopped,) = [t for t in targets if t.problem is not None]
    assert stopped.path == os.path.join(tmp_path, *["d"] * (MAX_WALK_DEPTH + 1))
    assert f"more than {MAX_WALK_DEPTH} levels below {tmp_path} (MAX_WALK_DEPTH)" in stopped.problem.message
