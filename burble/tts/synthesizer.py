"""``burble.tts.load()``: text -> speech with the codec LM, decoded by the shared decoding core.

Text is normalised and cut into sentences (:mod:`burble.tts.normalize`), each sentence becomes
phoneme units (:mod:`burble.tts.phonemes`), and :func:`burble.decoding.generate.generate` (the
loop that decodes Whisper) samples the sentence's token stream from a :class:`CodecLMSession`.
Tokens become codec frames (``books`` codes each) and the codec (``burble.codecs``) turns them
into 22.05 kHz audio: by default each frame's expected code vector under the LM's distribution
(``SynthesisOptions.expected_codes``), not the codes chosen.

``synthesize`` returns the whole utterance; ``stream`` yields audio while tokens are still being
generated: frames go through the codec's streaming decoder (the exact streaming vocoder, so the
streamed audio is the whole-file audio) in small chunks first, then larger ones (less vocoder
overhead). With the same seed both give the same samples: to float32 rounding with a float32
vocoder, to bfloat16 rounding (about -55 dB) with the bfloat16 one that ``load`` picks on CPUs
with native bfloat16.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import torch

from burble.decoding.generate import generate
from burble.decoding.options import DecodingOptions
from burble.decoding.stats import SpeculativeStats
from burble.tts.model import CodecLM, CodecLMSession, load_state, unit_ids
from burble.tts.normalize import TTSInputError, split_sentences
from burble.tts.phonemes import PhonemeInventory

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DEFAULT_VOICE = "joe"
FIRST_CHUNK_FRAMES = 2  # until the first audio is out, frames go to the vocoder in pairs (latency) ...
CHUNK_FRAMES = 8        # ... then in eights (the streaming vocoder's cost per call)
LM_THREADS = 1          # torch threads of stream()'s generating thread (the vocoder runs beside it) ...
VOCODER_THREADS = 1     # ... and of its vocoding (calling) thread: one core each, no OpenMP pools spinning against each other
_SENTENCE_END = object()  # stream(): a sentence's frames are all out
MAX_CHARS = 400         # longer sentences are cut at a clause or word break
DRAFT_SEED_OFFSET = 1_000_003  # the MTP drafts' random stream: seed + this (apart from the verifier's)
# Greedy by default. The voice learned from Piper at noise 0, which is deterministic, and its most
# likely codes are clearer than sampled ones: tiny.en WER on 100 held-out LJ sentences 13.4% at
# T=0, 14.3% at 0.15, 14.6% at 0.3, 15.6% at 0.5 (codec copy-synthesis of Piper: 14.5%), with
# pitch no flatter (F0 spread 1.6 semitones at T=0, 1.5 at 0.5, Piper 2.2) and no failures.
DEFAULT_TEMPERATURE = 0.0


@dataclass(frozen=True)
class SynthesisOptions:
    """How to sample speech.

    Attributes:
      temperature: sampling temperature of the codec LM (0, the default: greedy, the most
        intelligible, the same audio for a text every time; above 0: varied speech, see
        ``DEFAULT_TEMPERATURE``).
      top_k: sample among the k most likely tokens (0: all).
      top_p: nucleus mass (1.0: off).
      seed: random seed when sampling (``None``: a fresh one each call); sentence ``i`` uses ``seed + i``.
      speculative: ``"mtp"``: speculative sampling with the voice's MTP draft heads (exact: the
        same distribution of speech in fewer decoder passes); ``"off"``: one token per pass;
        ``"auto"``: ``"mtp"`` when the voice ships draft heads.
      draft_length: tokens drafted per pass when speculative (at most).
      expected_codes: decode each frame from its expected code vector under the codec LM's
        distribution (each book's codebook averaged by the model's probabilities: the posterior
        mean of the codec latent) rather than from the codes chosen; the chosen codes still steer
        generation. On by default: averaging keeps what the near-ties of the fine book agree on
        instead of one arbitrary pick (its validation cross-entropy is 5.4 nats). Measured at T=0
        (tiny.en, the same tokens decoded both ways): WER on 100 held-out LJ sentences 13.4% ->
        12.0%, on 55 everyday ones 6.7% both ways.
    """

    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = 0
    top_p: float = 1.0
    seed: Optional[int] = None
    speculative: str = "auto"
    draft_length: int = 3  # measured on 2 cores with the greedy-trained heads: 3 drafted tokens 1.47-1.52x, 2 1.45-1.49x
    expected_codes: bool = True

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise TTSInputError("temperature must be >= 0")
        if self.speculative not in ("off", "mtp", "auto"):
            raise TTSInputError(f"speculative must be 'off', 'mtp' or 'auto', got {self.speculative!r}")


@dataclass
class SentenceResult:
    """One generated sentence: its text, units, frames, and whether it looks like a failure."""

    text: str
    units: int
    frames: int
    failed: bool


@dataclass
class Synthesis:
    """Audio for a text (22.05 kHz float32 mono) and how it was made."""

    audio: np.ndarray
    sample_rate: int
    sentences: list[SentenceResult]
    stats: SpeculativeStats = field(default_factory=SpeculativeStats)
    seconds: float = 0.0

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate

    @property
    def rtf(self) -> float:
        return self.seconds / self.duration if self.duration else 0.0


class FrameAssembler:
    """Generated tokens -> whole codec frames ``(books, n)``; duration tokens are skipped.

    With a session that keeps code distributions (``CodecLMSession(keep_code_distributions=True)``),
    ``push`` also returns the frames' distributions over codes ``(books, n, codebook_size)``,
    else ``None``.
    """

    def __init__(self, model: CodecLM, session: Optional[CodecLMSession] = None) -> None:
        self.config = model.config
        self.session = session if session is not None and session.keep_code_distributions else None
        self._partial: list[int] = []
        self._positions: list[int] = []  # the positions that predicted the partial frame's codes
        self._next = 1  # stream index of the next token pushed (token 0 is BOS)

    def push(self, tokens: list[int]) -> tuple[np.ndarray, Optional[np.ndarray]]:
        c = self.config
        frames, positions = [], []
        for token in tokens:
            if token < c.duration_offset:
                self._partial.append(token - len(self._partial) * c.codebook_size)
                self._positions.append(self._next - 1)
                if len(self._partial) == c.num_books:
                    frames.append(self._partial)
                    positions.extend(self._positions)
                    self._partial, self._positions = [], []
            self._next += 1
        codes = np.array(frames, dtype=np.int64).reshape(-1, c.num_books).T
        if self.session is None:
            return codes, None
        distributions = self.session.code_distributions(positions).reshape(len(frames), c.num_books, c.codebook_size)
        return codes, distributions.transpose(0, 1).float().numpy()


@dataclass
class SentenceCodes:
    """One sentence's generated codec frames.

    Attributes:
      codes: the sampled codes ``(books, frames)``.
      distributions: the codec LM's distributions over them ``(books, frames, codebook_size)``
        when ``SynthesisOptions.expected_codes`` (else ``None``).
      stats: the decoding loop's statistics.
      tokens: the codec LM's token stream after BOS (durations and codes, EOS included when the
        grammar reached it): what ``recipes/tts`` trains draft heads on.
    """

    codes: np.ndarray
    distributions: Optional[np.ndarray]
    stats: SpeculativeStats
    tokens: tuple[int, ...] = ()

    @property
    def decodable(self) -> np.ndarray:
        """What the codec decodes: the distributions when kept, else the codes."""
        return self.codes if self.distributions is None else self.distributions


def _failed(units: int, frames: int, model: CodecLM) -> bool:
    """A stuck sentence: some unit ran to the longest duration, or > 0.6 s of audio per unit."""
    return frames >= units * model.config.max_duration or frames > units * 13


class Synthesizer:
    """A codec LM voice with its phoneme inventory and codec.

    Args:
      model: the trained codec LM.
      inventory: its phoneme symbols.
      codec: the codec whose tokens it generates (``burble.codecs.load(codec_name)``).
      name: the voice's name.
      heads: MTP draft heads for ``speculative="mtp"`` (``None``: not available).
    """

    def __init__(self, model: CodecLM, inventory: PhonemeInventory, codec, name: str, heads=None) -> None:
        self.model = model
        self.inventory = inventory
        self.codec = codec
        self.name = name
        self.heads = heads
        self.sample_rate = codec.sample_rate

    # ------------------------------------------------------------------ text -> units
    def sentences(self, text: str) -> list[str]:
        return split_sentences(text, max_chars=MAX_CHARS)

    def units(self, sentence: str) -> list[int]:
        return unit_ids(self.inventory.text_to_ids(sentence))

    # ------------------------------------------------------------------ units -> codes
    def generate_codes(self, units: list[int], options: SynthesisOptions, seed: int,
                       on_frames: Optional[Callable[[np.ndarray], None]] = None) -> SentenceCodes:
        """Codec frames of one sentence, sampled with the shared loop. ``on_frames`` gets each new
        piece as the codec should decode it (``SentenceCodes.decodable``)."""
        session = CodecLMSession(self.model, units, keep_code_distributions=options.expected_codes)
        c = self.model.config
        decoding = DecodingOptions(max_new_tokens=session.max_tokens, eos_token_id=c.eos, temperature=options.temperature,
                                   top_k=options.top_k, top_p=options.top_p, draft_length=options.draft_length)
        generator = torch.Generator().manual_seed(seed)
        assembler = FrameAssembler(self.model, session)
        codes: list[np.ndarray] = []
        distributions: list[np.ndarray] = []

        def on_tokens(rows: list[list[int]]) -> None:
            new, new_distributions = assembler.push(rows[0])
            if new.shape[1]:
                codes.append(new)
                if new_distributions is not None:
                    distributions.append(new_distributions)
                if on_frames is not None:
                    on_frames(new if new_distributions is None else new_distributions)

        drafter = None
        if options.speculative == "mtp" or (options.speculative == "auto" and self.heads is not None):
            if self.heads is None:
                raise TTSInputError(f"the voice {self.name!r} ships no draft heads: use speculative='off'")
            from burble.decoding.mtp import MTPDrafter

            # Sampling decodes draft by sampling the heads (q goes to the verifier); the drafts' own
            # random stream is seeded from the sentence's seed, so a seed still fixes the speech.
            drafter = MTPDrafter(session, self.heads, eos_token_id=c.eos, sample=options.temperature > 0,
                                 generator=torch.Generator().manual_seed(seed + DRAFT_SEED_OFFSET))
        prompt = torch.tensor([[c.bos]])
        result = generate(session, prompt, decoding, drafter=drafter, generator=generator, on_tokens=on_tokens)
        all_codes = np.concatenate(codes, axis=1) if codes else np.zeros((c.num_books, 0), dtype=np.int64)
        all_distributions = None
        if options.expected_codes:
            all_distributions = (np.concatenate(distributions, axis=1) if distributions
                                 else np.zeros((c.num_books, 0, c.codebook_size), dtype=np.float32))
        stream = tuple(result.tokens[0]) + ((c.eos,) if result.finished[0] else ())
        return SentenceCodes(all_codes, all_distributions, result.stats, stream)

    def _plan(self, text: str, options: SynthesisOptions) -> tuple[list[tuple[str, list[int]]], int]:
        sentences = [(s, self.units(s)) for s in self.sentences(text)]
        seed = options.seed if options.seed is not None else int(torch.randint(0, 2**31 - 1, ()).item())
        return sentences, seed

    # ------------------------------------------------------------------ text -> audio
    def synthesize(self, text: str, options: SynthesisOptions = SynthesisOptions()) -> Synthesis:
        """The whole utterance at once (see the module docstring)."""
        started = time.perf_counter()
        plan, seed = self._plan(text, options)
        stats = SpeculativeStats()
        pieces, results = [], []
        for i, (sentence, units) in enumerate(plan):
            # The codec LM samples with stream()'s thread count: the same floating-point sums give
            # the same distributions, so the same expected codes and the same audio as stream()
            # (with 2 threads the drafts' verify passes sum differently, which the bfloat16 vocoder
            # turned into -28 dB of difference). One thread costs the small LM nothing measurable.
            with torch_threads(LM_THREADS):
                generated = self.generate_codes(units, options, seed + i)
            stats.merge(generated.stats)
            frames = generated.codes.shape[1]
            results.append(SentenceResult(sentence, len(units), frames, _failed(len(units), frames, self.model)))
            if frames:
                pieces.append(self.codec.decode(generated.decodable))
        audio = np.concatenate(pieces).astype(np.float32) if pieces else np.zeros(0, np.float32)
        return Synthesis(audio, self.sample_rate, results, stats, time.perf_counter() - started)

    def stream(self, text: str, options: SynthesisOptions = SynthesisOptions()) -> Iterator[np.ndarray]:
        """Audio chunks (22.05 kHz float32) as they are generated; the text is checked before the
        first chunk, so bad input raises :class:`TTSInputError` at once.

        Two stages overlap on two cores: a worker thread samples codec frames (the codec LM) and
        the calling thread turns them into audio (codec decoder and vocoder) as it pulls chunks,
        each with one torch thread. Measured on 2 cores: streamed RTF 0.40-0.42 and first audio
        112-118 ms, against 0.64-0.74 and 131-153 ms when one worker thread did both with two
        torch threads (two OpenMP pools spinning against each other on two cores).
        """
        plan, seed = self._plan(text, options)
        frames_queue: "queue.Queue[object]" = queue.Queue(maxsize=256)
        done = object()
        stop = threading.Event()

        def produce() -> None:
            try:
                torch.set_num_threads(LM_THREADS)  # this thread only
                for i, (_, units) in enumerate(plan):
                    def on_frames(frames: np.ndarray) -> None:
                        if stop.is_set():
                            raise _Stopped()
                        frames_queue.put(frames)

                    self.generate_codes(units, options, seed + i, on_frames=on_frames)
                    frames_queue.put(_SENTENCE_END)
            except _Stopped:
                pass
            except BaseException as e:  # handed to the consumer, which re-raises it
                frames_queue.put(e)
            finally:
                frames_queue.put(done)

        worker = threading.Thread(target=produce, name="burble-tts", daemon=True)
        worker.start()
        with torch_threads(VOCODER_THREADS):
            decoder = self.codec.stream_decoder() if plan else None  # made while the first frames are sampled
        pending: list[np.ndarray] = []
        heard = False  # small chunks until the first audio is out (the vocoder lags)
        try:
            while True:
                item = frames_queue.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                if item is _SENTENCE_END:
                    if decoder is not None or pending:
                        with torch_threads(VOCODER_THREADS):
                            if decoder is None:  # a sentence shorter than one chunk
                                decoder = self.codec.stream_decoder()
                            tail = [decoder.push(np.concatenate(pending, axis=1))] if pending else []
                            audio = np.concatenate(tail + [decoder.flush()])
                        decoder, pending = None, []
                        if audio.size:
                            heard = True
                            yield audio
                    continue
                pending.append(item)  # type: ignore[arg-type]
                if sum(p.shape[1] for p in pending) >= (CHUNK_FRAMES if heard else FIRST_CHUNK_FRAMES):
                    with torch_threads(VOCODER_THREADS):
                        if decoder is None:
                            decoder = self.codec.stream_decoder()
                        audio = decoder.push(np.concatenate(pending, axis=1))
                    pending.clear()
                    if audio.size:
                        heard = True
                        yield audio
        finally:
            stop.set()
            while worker.is_alive():  # unblock a producer waiting on a full queue
                try:
                    frames_queue.get_nowait()
                except queue.Empty:
                    worker.join(0.05)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads in this thread, then restore the count."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Stopped(Exception):
    """The consumer of ``stream`` went away."""


def available_voices() -> list[str]:
    return sorted(p.name[: -len(".safetensors")] for p in WEIGHTS_DIR.glob("*.safetensors")
                  if not p.name.endswith(".mtp.safetensors"))


def load(name: str = DEFAULT_VOICE, *, vocoder_dtype: str = "auto") -> Synthesizer:
    """The shipped voice ``name`` (see ``available_voices()``) or a ``.safetensors`` path.

    Args:
      name: voice name or path.
      vocoder_dtype: the vocoder's precision (``burble.codecs.load``): ``"auto"`` is bfloat16 where
        the CPU has it natively (synthesis RTF 0.60 -> 0.42 on 2 AMD EPYC cores), else float32.
    """
    return _load(name, vocoder_dtype)


@functools.lru_cache(maxsize=2)
def _load(name: str, vocoder_dtype: str) -> Synthesizer:
    import burble.codecs

    path = Path(name) if name.endswith(".safetensors") else WEIGHTS_DIR / f"{name}.safetensors"
    if not path.is_file():
        raise TTSInputError(f"no TTS voice {name!r}; shipped: {', '.join(available_voices()) or 'none'}")
    model, symbols, extra = load_state(str(path))
    heads = None
    heads_path = path.with_name(path.name[: -len(".safetensors")] + ".mtp.safetensors")
    if heads_path.is_file():
        from burble.decoding.mtp import MTPHeads

        # Half precision, as stored: a drafting pass reads ~4 MB of head and projection weights that
        # the LM's pass has just pushed out of cache, and fp16 halves that (drafting 0.72 -> 0.47 ms
        # a pass on 2 AMD cores, the same tokens per pass). Drafts stay exact: q is what they are sampled from.
        heads = MTPHeads.load(heads_path, dtype=torch.float16)
    codec = burble.codecs.load(extra.get("codec", burble.codecs.DEFAULT_CODEC), vocoder_dtype=vocoder_dtype)
    return Synthesizer(model, PhonemeInventory(tuple(symbols)), codec, path.name[: -len(".safetensors")], heads)
