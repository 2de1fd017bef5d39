"""``import burble`` and ``burble --help`` stay light; the lazy names still resolve."""

import subprocess
import sys

import pytest

from burble.cli import COMMANDS


def torch_loaded_after(code: str) -> bool:
    """Run ``code`` in a fresh interpreter (``--help`` exits: that is fine) and say whether torch got imported."""
    script = f"import contextlib, sys\nwith contextlib.suppress(SystemExit):\n    {code}\nprint('torch loaded:', 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    last = out.stdout.strip().splitlines()[-1]
    assert last in ("torch loaded: True", "torch loaded: False"), out.stdout[-500:]
    return last == "torch loaded: True"


def test_the_probe_sees_torch():
    assert torch_loaded_after("import burble.decoding.generate")


@pytest.mark.parametrize(
    "code",
    [
        "import burble, burble.batch, burble.asr.fusion",
        "from burble.cli import main; main(['--help'])",
        *[f"from burble.cli import main; main(['{name}', '--help'])" for name in ("transcribe", "stream", "listen", "serve", "lm", "score", "client")],
    ],
)
def test_help_and_package_imports_do_not_load_torch(code):
    assert not torch_loaded_after(code), code


def test_lazy_names_resolve_and_unknown_names_fail():
    import burble
    import burble.asr.fusion as fusion
    import burble.batch as batch

    assert batch.run_job.__module__ == "burble.batch.runner"
    assert fusion.ShallowFusion.__name__ == "ShallowFusion" and "ShallowFusion" in dir(fusion)
    assert burble.load_model.__module__ == "burble.asr.pipeline"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        batch.nope  # noqa: B018


def test_every_command_is_listed():
    assert {"transcribe", "stream", "listen", "serve", "lm"} <= set(COMMANDS)
