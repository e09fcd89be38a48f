"""Real git repositories for the git source and `dockyard plan` tests."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from reconciler.adapters.gitsource import GitSource, RepoLocation
from schemas import parse_config


class ConfigRepo:
    """A working repository to commit config files into."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.repo = git.Repo.init(path, initial_branch="main")
        with self.repo.config_writer() as config:
            config.set_value("user", "name", "Test")
            config.set_value("user", "email", "test@example.com")

    def write(self, relative: str, text: str) -> None:
        target = self.path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        self.repo.index.add([relative])

    def remove(self, relative: str) -> None:
        self.repo.index.remove([relative], working_tree=True)

    def move(self, old: str, new: str) -> None:
        (self.path / new).parent.mkdir(parents=True, exist_ok=True)
        self.repo.index.move([old, new])

    def commit(self, message: str = "change") -> str:
        return self.repo.index.commit(message).hexsha

    def branch(self, name: str) -> None:
        self.repo.git.checkout("-b", name)

    def checkout(self, name: str) -> None:
        self.repo.git.checkout(name)


@pytest.fixture
def config_repo(tmp_path: Path) -> ConfigRepo:
    return ConfigRepo(tmp_path / "configs")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def make_source(url: str | Path, data_dir: Path, **kwargs: object) -> GitSource:
    location = RepoLocation(url=str(url), **kwargs)  # type: ignore[arg-type]
    return GitSource(location, data_dir=data_dir, parse=parse_config)


TASK = "type: task\nname: {name}\ncommands: [{command}]\n"
SERVICE = "type: service\nname: web\nimage: {image}\nport: 80\n"
VOLUME = "type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 10GB\n"
