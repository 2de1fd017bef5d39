"""`--threads` means one thing in every command that computes: torch threads per compute worker,
0 = the cores divided among the workers that compute in parallel (burble.cpu_threads.worker_threads)."""

import pytest

import burble
from burble.cli import build_parser, main
from burble.cpu_threads import available_cores, worker_threads

COMPUTING_COMMANDS = {"transcribe": ["x.wav"], "stream": ["x.wav"], "listen": []}


def test_the_rule():
    assert worker_threads(1, cores=8) == 8  # one worker: all cores
    assert worker_threads(3, cores=8) == 2
    assert worker_threads(16, cores=8) == 1  # at least one
    assert worker_threads(2, threads=3, cores=8) == 3  # asked for: given, within the share
    assert worker_threads(2, threads=8, cores=8) == 4  # more than the share: capped
    assert worker_threads(1) == available_cores() >= 1


def _threads_action(command):
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    return next(a for a in subparsers.choices[command]._actions if a.dest == "threads")


def test_every_computing_command_says_it_the_same_way():
    actions = {name: _threads_action(name) for name in COMPUTING_COMMANDS}
    assert {a.default for a in actions.values()} == {0}
    # The part after the command's own "(what a worker is here)" is word for word the same.
    tails = {a.help.split(");", 1)[1] for a in actions.values()}
    assert len(tails) == 1 and "0: automatic" in tails.pop()
    for name, positional in COMPUTING_COMMANDS.items():
        assert build_parser().parse_args([name, *positional]).threads == 0


@pytest.mark.parametrize("command", sorted(COMPUTING_COMMANDS))
def test_negative_threads_are_refused(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, *COMPUTING_COMMANDS[command], "--threads", "-1"])
    assert exit_info.value.code == 2 and "must be >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("requested, expected", [(0, worker_threads(1)), (1, 1)])
def test_stream_gives_its_recognizer_the_cores(monkeypatch, requested, expected):
    from burble.commands.stream import build_pipeline

    loaded = []

    def load_model(name, **kwargs):
        loaded.append(kwargs)
        raise RuntimeError("stop after the model's arguments")

    monkeypatch.setattr(burble, "load_model", load_model)
    args = build_parser().parse_args(["stream", "x.wav", "--threads", str(requested)])
    with pytest.raises(RuntimeError, match="stop after"):
        build_pipeline(args, source=None, sinks=[])
    assert loaded == [{"device": "cpu", "dtype": "float32", "static_decode": False, "threads": expected}]


@pytest.mark.parametrize("workers, items, parallel", [(1, 3, 1), (2, 3, 2), (4, 1, 1)])
def test_transcribe_divides_the_cores_among_the_workers_that_run(monkeypatch, tmp_path, workers, items, parallel):
    import burble.batch.local
    from burble.batch.inputs import AudioItem
    from burble.batch.job import JobConfig
    from burble.batch.runner import RunOptions, run_job

    given = []
    monkeypatch.setattr(burble.batch.local, "run_in_process", lambda *a, threads, **k: given.append(("here", threads)))
    monkeypatch.setattr(burble.batch.local, "run_workers", lambda *a, workers, threads, **k: given.append((workers, threads)))
    todo = [AudioItem(id=f"a{i}", audio=f"a{i}.wav") for i in range(items)]
    run_job(todo, JobConfig(output_dir=str(tmp_path)), RunOptions(workers=workers, progress=False))
    assert given == [("here" if parallel == 1 else workers, worker_threads(parallel))]
