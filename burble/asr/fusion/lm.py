"""Building and loading n-gram language models for shallow fusion.

``build_lm`` normalises a text corpus with :class:`~burble.asr.fusion.normalize.LMTextNormalizer`
(the same normaliser fusion applies to hypothesis words) and estimates a modified Kneser-Ney model:

* ``backend="kenlm"``: KenLM's ``lmplz`` (and ``build_binary`` for ``.bin`` outputs). The binaries
  are not in any wheel or Debian package, so :func:`install_kenlm_tools` builds them from the
  ``kenlm`` PyPI source distribution (cmake + Boost, ~2-4 min) into ``$BURBLE_KENLM_BIN`` or
  ``~/.cache/burble/kenlm/bin``.
* ``backend="kaldingram"``: the pure-Python ``kaldingram`` package (interpolated Kneser-Ney ARPA,
  SRILM-compatible). It writes no ``<unk>`` entry, so KenLM gives out-of-vocabulary words its
  default log10 probability of -100; fusion replaces that with ``FusionOptions.oov_log10``.
* ``backend="auto"``: KenLM when its tools are found, else kaldingram.

Querying goes through the ``kenlm`` Python module (``pip install kenlm``), which reads both ARPA
and KenLM binary files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Optional

from burble.asr.fusion.normalize import LMTextNormalizer

if TYPE_CHECKING:
    import kenlm

KENLM_VERSION = "0.3.0"
KENLM_TOOLS = ("lmplz", "build_binary")


# -- the KenLM command-line tools ---------------------------------------------------------------


def kenlm_bin_dir() -> Path:
    """Where burble keeps (or builds) KenLM's binaries: ``$BURBLE_KENLM_BIN`` or the user cache."""
    env = os.environ.get("BURBLE_KENLM_BIN")
    if env:
        return Path(env).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "burble" / "kenlm" / "bin"


def find_kenlm_tool(name: str) -> Optional[Path]:
    """Path of a KenLM tool (``lmplz``, ``build_binary``, ``query``) in burble's dir or on PATH."""
    candidate = kenlm_bin_dir() / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which(name)
    return Path(found) if found else None


def install_kenlm_tools(
    dest: Optional[Path] = None,
    *,
    jobs: Optional[int] = None,
    version: str = KENLM_VERSION,
    sdist: Optional[Path] = None,
    verbose: bool = False,
) -> Path:
    """Build ``lmplz``, ``build_binary`` and ``query`` from the ``kenlm`` source distribution.

    Needs ``cmake``, a C++ compiler and Boost (Debian: ``cmake g++ libboost-program-options-dev
    libboost-system-dev libboost-thread-dev libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev``).

    Args:
      dest: directory for the binaries (default :func:`kenlm_bin_dir`).
      jobs: parallel compile jobs (default: number of CPUs).
      version: ``kenlm`` sdist version to fetch with pip.
      sdist: a local ``kenlm-*.tar.gz`` to build instead of downloading one.
      verbose: stream the build output.

    Returns:
      The directory holding the binaries.
    """
    dest = Path(dest) if dest is not None else kenlm_bin_dir()
    if shutil.which("cmake") is None:
        raise RuntimeError("building KenLM needs cmake (Debian: apt-get install cmake g++ libboost-*-dev)")
    jobs = jobs or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="burble-kenlm-") as tmp:
        work = Path(tmp)
        if sdist is None:
            _run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "kenlm",
                 f"kenlm=={version}", "-d", str(work)],
                verbose,
            )
            archives = sorted(work.glob("kenlm-*.tar.gz"))
            if not archives:
                raise RuntimeError("pip download did not produce a kenlm source archive")
            sdist = archives[0]
        with tarfile.open(sdist) as archive:
            try:
                archive.extractall(work / "src", filter="data")
            except TypeError:  # Python < 3.10.12 has no extraction filters
                archive.extractall(work / "src")
        (source,) = [p for p in (work / "src").iterdir() if p.is_dir()]
        build = work / "build"
        build.mkdir()
        _run(["cmake", str(source), "-DCMAKE_BUILD_TYPE=Release"], verbose, cwd=build)
        _run(["make", f"-j{jobs}", "lmplz", "build_binary", "query"], verbose, cwd=build)
        dest.mkdir(parents=True, exist_ok=True)
        for tool in (*KENLM_TOOLS, "query"):
            shutil.copy2(build / "bin" / tool, dest / tool)
    return dest


def _run(command: list[str], verbose: bool, cwd: Optional[Path] = None) -> None:
    result = subprocess.run(
        command, cwd=cwd, text=True,
        stdout=None if verbose else subprocess.PIPE, stderr=None if verbose else subprocess.STDOUT,
    )
    if result.returncode != 0:
        tail = (result.stdout or "")[-3000:]
        hint = ""
        if "Boost" in tail:
            hint = (
                "\nInstall Boost: apt-get install libboost-program-options-dev libboost-system-dev "
                "libboost-thread-dev libboost-test-dev"
            )
        raise RuntimeError(f"{' '.join(command[:3])} ... failed (exit {result.returncode}):\n{tail}{hint}")


# -- corpora --------------------------------------------------------------------------------------


def read_corpus(path: str | Path, *, text_column: Optional[int] = None) -> Iterator[str]:
    """Lines of a text corpus; for ``.tsv`` files (or ``text_column``) one tab-separated column.

    Args:
      path: a text file, one sentence (or paragraph) per line.
      text_column: column index of the text in tab-separated lines (default: the last one for
        ``.tsv`` files, the whole line otherwise).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus not found: {path}")
    tsv = path.suffix.lower() == ".tsv"
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if text_column is not None or tsv:
                columns = line.split("\t")
                index = -1 if text_column is None else text_column
                try:
                    line = columns[index]
                except IndexError:
                    raise ValueError(f"{path}: a line has no column {index}: {line[:80]!r}") from None
            yield line


def write_normalized_corpus(
    lines: Iterable[str], output: str | Path, normalizer: LMTextNormalizer = LMTextNormalizer()
) -> int:
    """Write normalised lines (empty ones skipped); returns how many lines were written."""
    written = 0
    with Path(output).open("w", encoding="utf-8") as f:
        for line in lines:
            text = normalizer.line(line)
            if text:
                f.write(text + "\n")
                written += 1
    return written


# -- building -------------------------------------------------------------------------------------


def build_lm(
    corpus: str | Path | Iterable[str],
    output: str | Path,
    order: int = 3,
    *,
    normalizer: LMTextNormalizer = LMTextNormalizer(),
    backend: str = "auto",
    text_column: Optional[int] = None,
    memory: str = "25%",
    tmp_dir: Optional[str | Path] = None,
    verbose: bool = False,
) -> Path:
    """Estimate a Kneser-Ney n-gram LM on a normalised corpus and write ARPA or KenLM binary.

    Args:
      corpus: a corpus file (see :func:`read_corpus`) or an iterable of text lines.
      output: ``*.arpa`` for ARPA text, anything else (``*.bin``) for KenLM's binary format.
      order: n-gram order (2-6 with KenLM, 1-5 with kaldingram).
      normalizer: text normalisation (must match the one fusion uses: see ``FusionOptions``).
      backend: ``"kenlm"``, ``"kaldingram"`` or ``"auto"`` (KenLM if its tools are installed).
      text_column: see :func:`read_corpus`.
      memory: ``lmplz -S`` (RAM for sorting).
      tmp_dir: ``lmplz -T`` (temporary files; default: a fresh temporary directory).
      verbose: show the tools' output.

    Returns:
      ``output`` as a path.
    """
    output = Path(output)
    if backend not in ("auto", "kenlm", "kaldingram"):
        raise ValueError(f"backend must be auto, kenlm or kaldingram, not {backend!r}")
    lmplz = find_kenlm_tool("lmplz")
    if backend == "auto":
        backend = "kenlm" if lmplz is not None else "kaldingram"
    if backend == "kenlm" and lmplz is None:
        raise RuntimeError(
            "KenLM's lmplz not found (looked in $BURBLE_KENLM_BIN, ~/.cache/burble/kenlm/bin and PATH); "
            "build it with `burble lm install-kenlm` or use --backend kaldingram"
        )
    limit = (2, 6) if backend == "kenlm" else (1, 5)
    if not limit[0] <= order <= limit[1]:
        raise ValueError(f"order {order} unsupported by {backend} (range {limit[0]}-{limit[1]})")
    binary = output.suffix.lower() != ".arpa"
    build_binary = find_kenlm_tool("build_binary")
    if binary and build_binary is None:
        raise RuntimeError("a binary LM needs KenLM's build_binary (`burble lm install-kenlm`), or write .arpa")
    lines = read_corpus(corpus, text_column=text_column) if isinstance(corpus, (str, Path)) else corpus
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="burble-lm-", dir=tmp_dir) as tmp:
        text = Path(tmp) / "corpus.txt"
        if write_normalized_corpus(lines, text, normalizer) == 0:
            raise ValueError("the corpus has no words after normalisation")
        arpa = output if not binary else Path(tmp) / "lm.arpa"
        if backend == "kenlm":
            assert lmplz is not None
            command = [
                str(lmplz), "-o", str(order), "-S", memory, "-T", str(tmp_dir or tmp),
                "--text", str(text), "--arpa", str(arpa),
                # Small corpora lack the count-of-counts modified KN needs; fall back to fixed discounts.
                "--discount_fallback",
            ]
            _run(command, verbose)
        else:
            _kaldingram_arpa(text, arpa, order)
        if binary:
            assert build_binary is not None
            _run([str(build_binary), "-S", memory, "-T", str(tmp_dir or tmp), str(arpa), str(output)], verbose)
    return output


def _kaldingram_arpa(text: Path, arpa: Path, order: int) -> None:
    try:
        from kaldingram.train import NgramCounts
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise RuntimeError("the kaldingram backend needs `pip install kaldingram`") from error
    counts = NgramCounts(order)
    with text.open(encoding="utf-8") as f:
        for line in f:
            counts.add_raw_counts_from_line(line.strip())
    raw = Path(str(arpa) + ".raw")
    # kaldingram reports progress with tqdm on stderr; keep library calls quiet.
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        counts.cal_discounting_constants()
        counts.cal_f()
        counts.cal_bow()
        with raw.open("w", encoding="utf-8") as f:
            counts.print_as_arpa(fout=f)
    _add_unk(raw, arpa)
    raw.unlink()


def _add_unk(source: Path, dest: Path) -> None:
    """Copy an ARPA file, adding ``<unk>`` as a unigram with the smallest unigram probability.

    Without ``<unk>`` KenLM scores every out-of-vocabulary word log10 P = -100, which would let one
    unknown name outweigh the acoustic model entirely; lmplz gives ``<unk>`` about the mass of a
    singleton, and the rarest unigram is the same order of magnitude.
    """
    with source.open(encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = lines.index("\\1-grams:")
    if any(line.split("\t")[1:2] == ["<unk>"] for line in lines[start:]):
        shutil.copyfile(source, dest)
        return
    lowest = 0.0
    for line in lines[start + 1 :]:
        if not line:
            break
        fields = line.split("\t")
        if fields[1] != "<s>":
            lowest = min(lowest, float(fields[0]))
    for i, line in enumerate(lines[:start]):
        if line.startswith("ngram 1="):
            lines[i] = f"ngram 1={int(line.split('=')[1]) + 1}"
    lines.insert(start + 1, f"{lowest:.7f}\t<unk>\t0")
    dest.write_text("\n".join(lines), encoding="utf-8")


# -- loading --------------------------------------------------------------------------------------


def load_lm(path: str | Path) -> "kenlm.Model":
    """Load an ARPA or KenLM binary model for querying with the ``kenlm`` module."""
    try:
        import kenlm
    except ImportError as error:
        raise RuntimeError("shallow fusion needs the kenlm module: pip install kenlm") from error
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"language model not found: {path}")
    return kenlm.Model(str(path))
