"""burble.audio and burble.text sit below every model package: they import nothing above them."""

from __future__ import annotations

from pathlib import Path

import pytest

from burble.testing.imports import build_import_graph

PACKAGE = Path(__file__).resolve().parents[2] / "burble"
# What the low packages may import from burble: themselves (and the bare ``burble`` package, whose
# lazy ``__init__`` any submodule import passes through).
LOW_PACKAGES = ("burble.audio", "burble.text")


def _imports_leaving(graph_targets: dict[str, set[str]], package: str) -> list[str]:
    """``module -> target`` for every import (deferred ones included) from ``package`` to burble
    modules outside it."""

    def inside(name: str) -> bool:
        return name == package or name.startswith(package + ".")

    return sorted(
        f"{source} -> {target}"
        for source, targets in graph_targets.items()
        if inside(source)
        for target in targets
        if not inside(target) and target != "burble"
    )


@pytest.fixture(scope="module")
def targets() -> dict[str, set[str]]:
    return build_import_graph(PACKAGE).targets(include_deferred=True)


@pytest.mark.parametrize("package", LOW_PACKAGES)
def test_low_packages_import_nothing_above_them(targets, package):
    assert any(name.startswith(package + ".") for name in targets), f"{package} has no modules"
    assert _imports_leaving(targets, package) == []


def test_the_check_sees_imports_that_leave_a_package(targets):
    # Negative control: streaming imports the audio package, so the same check on streaming
    # reports those edges (a check that saw no edges would pass the test above vacuously).
    leaving = _imports_leaving(targets, "burble.streaming")
    assert "burble.streaming.sources -> burble.audio.resample" in leaving
    assert "burble.streaming.stages -> burble.audio.vad" in leaving
