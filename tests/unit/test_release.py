"""Release hygiene: the licence pyproject.toml names is the one shipped, the version lives in
pyproject.toml alone, and the image's lock and base are pinned and agree with pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import joulie


def pyproject(repo_root: Path) -> dict[str, Any]:
    with (repo_root / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def locked(repo_root: Path) -> dict[str, str]:
    """Each package of requirements-image.txt and its pinned version."""
    text = (repo_root / "requirements-image.txt").read_text()
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", text, re.MULTILINE)
    return {canonicalize_name(name): version for name, version in pins}


def test_the_licence_file_is_the_one_pyproject_names(repo_root: Path) -> None:
    assert pyproject(repo_root)["project"]["license"] == "Apache-2.0"
    text = (repo_root / "LICENSE").read_text()
    assert "Apache License" in text.splitlines()[1]
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_version_is_read_from_pyproject(repo_root: Path) -> None:
    version = pyproject(repo_root)["project"]["version"]
    assert joulie.__version__ == version
    changelog = (repo_root / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(version)}\b", changelog, re.MULTILINE)
    # Nothing else under joulie/ spells the version out.
    for path in (repo_root / "joulie").rglob("*.py"):
        assert f'"{version}"' not in path.read_text(), path


def test_the_manifests_run_the_image_of_this_version(repo_root: Path) -> None:
    """The manifests are the one other place that names the version (an image tag): they move
    with pyproject.toml at a release."""
    version = pyproject(repo_root)["project"]["version"]
    tags = []
    for path in (repo_root / "manifests").rglob("kustomization.yaml"):
        for image in yaml.safe_load(path.read_text()).get("images", []):
            if image.get("name") == "joulie":
                tags.append((path.relative_to(repo_root), image.get("newTag")))
    assert tags
    assert all(tag == version for _, tag in tags), tags


def test_the_image_lock_pins_every_dependency_within_its_range(repo_root: Path) -> None:
    project = pyproject(repo_root)
    pins = locked(repo_root)
    wanted = project["project"]["dependencies"] + project["build-system"]["requires"]
    for line in wanted:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate(
            {"sys_platform": "linux", "platform_system": "Linux"}
        ):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in requirements-image.txt: run hack/image/lock.sh"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{name}=={pins[name]} is outside {requirement.specifier}: run hack/image/lock.sh"
        )


def test_the_image_lock_leaves_the_extras_out(repo_root: Path) -> None:
    pins = locked(repo_root)
    extras = pyproject(repo_root)["project"]["optional-dependencies"]
    for line in extras["plots"] + extras["dev"]:
        assert canonicalize_name(Requirement(line).name) not in pins, line


def test_every_locked_package_carries_its_hashes(repo_root: Path) -> None:
    text = (repo_root / "requirements-image.txt").read_text()
    blocks = re.split(r"^(?=[A-Za-z0-9])", text, flags=re.MULTILINE)
    entries = [block for block in blocks if "==" in block.splitlines()[0]]
    assert len(entries) == len(locked(repo_root))
    for entry in entries:
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), entry.splitlines()[0]


def test_the_dockerfile_pins_its_base_and_installs_the_lock(repo_root: Path) -> None:
    dockerfile = (repo_root / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE=python:3\.11-slim@sha256:[0-9a-f]{64}$", dockerfile, re.MULTILINE)
    assert "COPY requirements-image.txt" in dockerfile
    assert "--require-hashes" in dockerfile
    assert "-r requirements-image.txt" in dockerfile
    # The lock is in the build context: .dockerignore leaves hack/ and tests/ out.
    ignored = (repo_root / ".dockerignore").read_text().split()
    assert "requirements-image.txt" not in ignored
