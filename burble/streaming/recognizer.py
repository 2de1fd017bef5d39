"""Streaming Whisper: re-decode the uncommitted window every chunk, commit with LocalAgreement-2.

Whisper is an offline model, so streaming re-decodes the audio that is not yet committed (the
*window*, at most 30 s) each time new speech arrives, and commits the words two consecutive
hypotheses agree on (:class:`~burble.streaming.policy.LocalAgreement`). Three things keep this
cheap and bounded:

* **Speculative re-decoding.** Most of the previous hypothesis is still right, so it is the draft
  of the next decode (:class:`~burble.decoding.drafters.PreviousHypothesisDrafter`): one target
  pass verifies many tokens, and the output is exactly what plain greedy decoding would give.
* **Trimming.** Once words are committed up to a sentence end, the audio before it leaves the
  window and the committed text becomes the prompt (previous-text conditioning), so the window
  and the latency stay bounded.
* **Encoding.** Each re-decode encodes the window zero-padded to Whisper's full 30 s input, the
  layout the decoder was trained on. Encoding only the window's frames was ~5x cheaper but made
  tiny.en hallucinate (WER 0.49; BENCHMARKS.md, "Streaming Whisper"), so it was removed.

What a decode's result means (the no-speech rule, the word-duration clamp) is the same window
policy as offline and batch decoding (:mod:`burble.asr.window`). A re-decode never reads its
text's compression ratio, so that is never computed here.

Word times come from the cross-attention alignment (:mod:`burble.asr.whisper.timing`) and are
absolute (seconds since the stream's sample 0). The recognizer never reads a clock: the event
loop stamps emission times.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Generator, Hashable, Optional, Sequence

import numpy as np
import torch

from burble.asr.frontend import HOP_LENGTH, N_FRAMES, log_mel_spectrogram, pad_or_trim
from burble.audio import SAMPLE_RATE
from burble.asr.fusion.boosting import as_phrases
from burble.asr.fusion.config import BiasingConfig, phonetic_matcher, processor_factory
from burble.asr.options import TranscribeOptions
from burble.asr.batching import CrossKeysValuesOf, WindowRequest
from burble.asr.pipeline import WhisperASR
from burble.asr.prompt import sot_sequence
from burble.asr.whisper.timing import Alignment, align
from burble.asr.window import WindowResult, clamp_word_durations, is_silence
from burble.decoding.stats import SpeculativeStats
from burble.streaming.engine import run_steps
from burble.streaming.events import StreamEvent, Word
from burble.streaming.policy import (
    AlignAtt,
    LocalAgreement,
    alignatt_stable_words,
    find_trim_time,
    normalize_word,
    trailing_loop_start,
    words_before_a_reread,
)


COMMIT_POLICIES = ("local-agreement", "alignatt")


# Less audio than this after the last committed word holds no new word. Decoding it anyway (the
# hangover left after a pause commit and a trim, at the end of a stream) let a boosted hotword be
# written into 20 ms ("... with his sister. Gdansk"): its bonus makes the invention look confident.
MIN_UNHEARD_SECONDS = 0.2
# A window holding less new audio than this after words committed in the same utterance is a tail
# (the breath or click the VAD kept after a pause commit). There Whisper's confident-text
# exception to its no-speech rule fails: "... for your country." was followed by "Thank you."
# (no-speech 0.76, average log-probability -0.58) decoded from 0.23 s. A tail whose no-speech
# probability is above the threshold is silence whatever its text's confidence.
TAIL_SECONDS = 1.0
# A new word whose attention peaks this far before the committed words' end is a repeat of them
# (policy.words_before_a_reread); DTW word ends and attention peaks differ by a few frames.
REREAD_TOLERANCE_FRAMES = 50


@dataclass(frozen=True)
class StreamingOptions:
    """How the streaming recognizer decodes and commits.

    Attributes:
      agreement: hypotheses that must agree before words are committed (LocalAgreement-n).
      speculative: use the previous hypothesis as the speculative draft of each re-decode
        (``--speculative auto``'s choice when re-decoding; lossless).
      draft_length: draft tokens verified per target pass.
      max_window_seconds: force a trim at the last committed word when the window grows past this.
      min_trim_window_seconds: a committed sentence end trims the window only once it holds this
        much audio; until then the window's committed sentences are each decode's forced prefix,
        heard again as context.
      prompt_tokens: how many committed text tokens prompt each decode (previous-text conditioning).
      no_speech_threshold: a decode whose no-speech probability is above this and whose average
        log-probability is below ``log_prob_threshold`` counts as silence (no words).
      log_prob_threshold: see ``no_speech_threshold``.
      beam_size: 1 (greedy, speculative) or more (beam search, no speculation).
      language: language code for multilingual models.
      biasing: shallow fusion / phrase boosting for this stream (a
        :class:`~burble.asr.fusion.BiasingConfig`); the fusion LM's history is the committed text
        Whisper is prompted with, so it carries across chunks.
      hotwords: extra phrases to boost (e.g. a WebSocket session's ``hotwords``), added to ``biasing``.
      policy: when words are committed: ``"local-agreement"`` (``agreement`` consecutive
        hypotheses agree) or ``"alignatt"`` (a word is final once the alignment heads' attention
        peak of the token after it lies at least ``alignatt_frames`` encoder frames before the
        end of the received audio; SimulStreaming's AlignAtt).
      alignatt_frames: AlignAtt's distance from the end of the audio, in 20 ms encoder frames.
      alignatt_min_probability: AlignAtt commits no word less probable than this, nor what follows
        it (:func:`~burble.streaming.policy.alignatt_stable_words`).
      alignatt_first_commit_seconds: before an utterance's window holds this much audio, AlignAtt
        commits only the words the decode before had too (0: no such wait).
    """

    agreement: int = 2
    # On by default with a short draft: at k=4 re-decodes need ~43% fewer decoder passes and the
    # stream's compute RTF drops at every chunk size (BENCHMARKS.md, "Streaming Whisper"). Longer
    # drafts cost more on CPU, where verifying k+1 tokens pays k+1 rows of the 52k-token projection.
    speculative: bool = True
    draft_length: int = 4
    # A forced trim cuts a long sentence mid-way and decodes the rest without its start: over
    # the 20 short dev clips at 0.9/1/1.1 s chunks (tiny.en, VAD on) 15 s instead of 8 s took the
    # committed WER from 6.3% to 4.9% (re-encode, LocalAgreement-2) and from 5.6% to 4.4-4.7%
    # (cache-aware, AlignAtt); the cache-aware window holds up to 17 s within 1500 positions.
    max_window_seconds: float = 15.0
    # A sentence decoded in a window of its own, after a trim at the sentence before, has only
    # the prompt's text for context: on the 80 s dev file "O'Brien emitted" became "I'll bry and
    # emit it". Committed WER over all of dev-audio at 0.9/1/1.1 s chunks (offline greedy 3.85%):
    # a trim at every committed sentence end 4.62%, once the window holds 5 s 4.62%, 8 s 3.60%,
    # 12 s 3.53%; the 80 s file alone 5.1% -> 2.5% at 8 s.
    min_trim_window_seconds: float = 8.0
    prompt_tokens: int = 128
    no_speech_threshold: float = 0.6
    log_prob_threshold: float = -1.0
    beam_size: int = 1
    language: Optional[str] = None
    biasing: Optional[BiasingConfig] = None
    hotwords: tuple[str, ...] = ()
    # AlignAtt commits each word from one decode as soon as the decoder has attended past it; with
    # the cache-aware encoder it is the default (factory.RecognizerChoice says what was measured).
    # LocalAgreement-2 waits for a second decode that agrees: about 0.5 s later per word.
    policy: str = "alignatt"
    alignatt_frames: int = 10
    # Whisper's guesses at half-heard words ("And white in his lips" for "and moistened his lips")
    # are improbable: such a word waits for the next decode to agree. Over all of dev-audio at
    # 0.9/1/1.1 s chunks (cache-aware, R = 1 s) committed WER 5.20% at 0 (off), 4.95% at 0.15,
    # 4.69% at 0.3 and 0.45, 4.75% at 0.6 (offline greedy 3.85%).
    alignatt_min_probability: float = 0.3
    # Utterances that start on speech (VAD, microphone) were misheard from their first second
    # ("Thank you, my country" for JFK's "What your country"), when every sentence end trimmed
    # the window. Since the last word waits for the next one and trims keep 8 s of context
    # (2026-12-04), 1.5 s no longer pays: committed WER over all of dev-audio at 0.9/1/1.1 s
    # chunks 3.60% at 1.5 s, 3.47% at 1.0 s and off; median AWED on the short clips 1.04 s at
    # 1.5 s, 0.92 s off. Off by default.
    alignatt_first_commit_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.policy not in COMMIT_POLICIES:
            raise ValueError(f"policy must be one of {', '.join(COMMIT_POLICIES)}, not {self.policy!r}")
        if self.alignatt_frames < 0 or self.alignatt_first_commit_seconds < 0:
            raise ValueError("alignatt_frames and alignatt_first_commit_seconds must be >= 0")
        if not 0.0 <= self.alignatt_min_probability <= 1.0:
            raise ValueError("alignatt_min_probability must be in [0, 1]")
        if not 1.0 <= self.max_window_seconds <= 28.0:
            raise ValueError("max_window_seconds must be in [1, 28] (Whisper sees at most 30 s)")
        if not 0.0 <= self.min_trim_window_seconds <= self.max_window_seconds:
            raise ValueError("min_trim_window_seconds must be in [0, max_window_seconds]")


@dataclass(frozen=True)
class WindowDecode:
    """A step of a recognizer call: decode this window with this model (what
    :meth:`WhisperStreamingRecognizer.accept_steps` yields). Steps with one model share a batch."""

    asr: WhisperASR
    request: WindowRequest

    @property
    def batch_key(self) -> Hashable:
        return id(self.asr)

    @staticmethod
    def run_batch(steps: Sequence["WindowDecode"]) -> list[WindowResult]:
        """Decode the steps' windows (one model's) as the rows of one call."""
        return steps[0].asr.decode_rows([step.request for step in steps])


DecodeSteps = Generator[WindowDecode, WindowResult, list[StreamEvent]]


@dataclass
class RecognizerStats:
    """Counters across the stream (for benchmarks and the server's metrics)."""

    decodes: int = 0
    audio_seconds: float = 0.0
    loops_cut: int = 0  # decodes whose trailing loop was cut (policy.trailing_loop_start)
    rereads_cut: int = 0  # decodes whose new words re-read committed audio (policy.words_before_a_reread)
    decoding: SpeculativeStats = field(default_factory=SpeculativeStats)


class WhisperStreamingRecognizer:
    """The :class:`~burble.streaming.stages.Recognizer` over a loaded Whisper model.

    One instance per stream (it holds the stream's state); the model may be shared by many.

    Args:
      asr: the loaded recogniser (``burble.load_model(...)``).
      options: streaming options.
    """

    def __init__(self, asr: WhisperASR, options: StreamingOptions = StreamingOptions()) -> None:
        self.asr = asr
        self.options = options
        self.decode_options = TranscribeOptions(
            beam_size=options.beam_size,
            temperatures=(0.0,),
            no_speech_threshold=options.no_speech_threshold,
            log_prob_threshold=options.log_prob_threshold,
            without_timestamps=True,
            condition_on_previous_text=True,
            language=options.language,
            # "auto" drafts with the previous hypothesis, given one (asr/speculation.py).
            speculative="auto" if options.speculative else "off",
            draft_length=options.draft_length,
        )
        biasing = _stream_biasing(options)
        self.biasing = processor_factory(biasing, asr.tokenizer)
        # Hotwords' phonetic correction touches only what is emitted: the decoder keeps its own
        # spelling in its forced prefix and prompt, as offline decoding does.
        self.phonetic = phonetic_matcher(biasing, asr.tokenizer)
        self.stats = RecognizerStats()
        self.segment_id = 0
        self._audio = np.zeros(0, dtype=np.float32)
        self._window_start = 0  # absolute sample index of self._audio[0]
        self._policy = LocalAgreement(options.agreement) if options.policy == "local-agreement" else AlignAtt()
        self._committed_words: list[Word] = []  # committed and still inside the window
        self._utterance_words: list[Word] = []  # committed in the current utterance
        self._history_tokens: list[int] = []  # committed text tokens (the prompt)
        self._previous_tokens: list[int] = []  # the last hypothesis (speculative draft)
        self._previous_words: list[Word] = []  # AlignAtt: the last hypothesis's uncommitted words
        self._sure_at_pause = 0  # AlignAtt: tentative words a speech pause may commit

    # -- Recognizer protocol -------------------------------------------------------------------

    def accept(self, audio: np.ndarray, start_sample: int) -> list[StreamEvent]:
        """Add speech starting at absolute ``start_sample`` and re-decode the window."""
        return run_steps(self.accept_steps(audio, start_sample))

    def accept_steps(self, audio: np.ndarray, start_sample: int) -> DecodeSteps:
        """:meth:`accept` as steps: yields the window to decode (a :class:`WindowDecode`) and is
        sent its result, so that a compute engine can decode many streams' windows as the rows of
        one call (:mod:`burble.streaming.engine`); returns the events."""
        self._append(audio, start_sample)
        return (yield from self._decode_and_commit())

    def hold(self, audio: np.ndarray, start_sample: int) -> list[StreamEvent]:
        """Add audio after the last speech frame (the VAD's hangover) without decoding it.

        The decode before it covered all the speech, so a pause can commit from that decode at
        once; the audio stays in the window for the decodes after it, should speech resume.
        """
        self._append(audio, start_sample)
        return []

    def _append(self, audio: np.ndarray, start_sample: int) -> None:
        """Add audio starting at absolute ``start_sample`` to the window."""
        audio = np.asarray(audio, dtype=np.float32)
        end = self._window_start + len(self._audio)
        if not len(self._audio):
            self._window_start = start_sample
        elif start_sample > end:
            # A short gap inside an utterance (VAD dropped a pause): keep the time axis by padding.
            self._audio = np.concatenate([self._audio, np.zeros(start_sample - end, np.float32)])
        elif start_sample < end:
            audio = audio[end - start_sample :]  # overlap: keep only new samples
        self._audio = np.concatenate([self._audio, audio])
        self.stats.audio_seconds += len(audio) / SAMPLE_RATE
        if len(self._audio) > 29 * SAMPLE_RATE:  # never exceed Whisper's 30 s: cut the oldest audio
            self._trim_to(self._window_start + len(self._audio) - 29 * SAMPLE_RATE)

    def endpoint(self, at_sample: int) -> list[StreamEvent]:
        """The utterance ended: commit everything and start a new one."""
        events: list[StreamEvent] = []
        remaining = self._policy.flush()
        if remaining:
            events.append(self._commit(remaining))
        utterance_start = self._utterance_words[0].start if self._utterance_words else self._window_start / SAMPLE_RATE
        events.append(
            StreamEvent.from_words(
                "endpoint", self._utterance_words, segment_id=self.segment_id,
                start=utterance_start, end=max(at_sample / SAMPLE_RATE, utterance_start),
            )
        )
        self.segment_id += 1
        self._trim_to(self._window_start + len(self._audio))  # committed words -> prompt history
        self._utterance_words = []
        self._committed_words = []
        self._audio = np.zeros(0, dtype=np.float32)
        self._window_start = at_sample
        self._previous_tokens = []
        self._previous_words = []
        self._sure_at_pause = 0
        self._policy.reset()
        return events

    @property
    def decodes_at_pauses(self) -> bool:
        """Whether the pipeline should decode at VAD speech pauses and call :meth:`pause` (AlignAtt)."""
        return isinstance(self._policy, AlignAtt)

    def pause(self, at_sample: int) -> list[StreamEvent]:
        """Speech stopped (past the VAD's hangover) after the audio already accepted.

        AlignAtt commits the last decode's tentative words at once: they hold no half-heard word
        any more, and the endpoint would commit the same words 0.6 s later (after
        ``silence_after_speech_seconds``) unless speech resumes, when its right context rarely
        changes a word before the pause. It stops before the first doubtful word (less probable
        than ``alignatt_min_probability``) that the decode before did not have: that one waits.
        LocalAgreement waits for its second vote (nothing here).
        """
        if not isinstance(self._policy, AlignAtt) or not self._policy.tentative:
            return []
        sure = min(self._sure_at_pause, len(self._policy.tentative))
        while sure and not normalize_word(self._policy.tentative[sure - 1].word):
            sure -= 1  # a pause is not a sentence end: "helplessly." vs "helplessly, and ..."
        if not sure:
            return []  # a doubtful first word: the endpoint, or the decode after speech resumes, decides
        events = [self._commit(self._policy.insert(self._policy.tentative, sure))]
        self._previous_words, self._previous_tokens, self._sure_at_pause = self._previous_words[sure:], [], 0
        events.append(StreamEvent.from_words("partial", self._shown(self._policy.tentative), segment_id=self.segment_id))
        self._maybe_trim()
        return events

    def flush(self) -> list[StreamEvent]:
        """End of stream: like an endpoint, if anything is pending."""
        if not len(self._audio) and not self._utterance_words and not self._policy.tentative:
            return []
        return self.endpoint(self._window_start + len(self._audio))

    # -- internals -----------------------------------------------------------------------------

    def _commit(self, words: list[Word]) -> StreamEvent:
        self._committed_words.extend(words)
        shown = self._shown(words)
        self._utterance_words.extend(shown)
        return StreamEvent.from_words("final", shown, segment_id=self.segment_id)

    def _shown(self, words: list[Word]) -> list[Word]:
        """Words as emitted: with the hotwords' phonetic correction, if any."""
        return self.phonetic.correct_words(words) if self.phonetic is not None and words else words

    def _encode(self) -> tuple[torch.Tensor, int]:
        """Encoder states of the window zero-padded to 30 s, and its count of real mel frames."""
        mel = log_mel_spectrogram(self._audio, n_mels=self.asr.model.dims.n_mels, padding=HOP_LENGTH)
        frames = min(mel.shape[-1] - 1, N_FRAMES)
        return self.asr.encode(pad_or_trim(mel[:, :frames])), frames

    def _cross_source(self, features: torch.Tensor) -> Optional[CrossKeysValuesOf]:
        """What computes the decoder's cross-attention K/V of ``features`` when the decode runs, if
        this recognizer keeps them (else ``None``: the decode projects them). Re-encoded windows
        change every frame: nothing to keep."""
        return None

    def _decode_and_commit(self) -> DecodeSteps:
        """Re-decode the window, commit what the policy confirms, report the rest as partial."""
        events: list[StreamEvent] = []
        if self._unheard_seconds() < MIN_UNHEARD_SECONDS:
            return events  # no room for a word: a decode would only invent one
        if isinstance(self._policy, AlignAtt):
            committed = self._policy.insert(*(yield from self._decode_alignatt()))
        else:
            committed = self._policy.insert((yield from self._decode_words()))
        if committed:
            events.append(self._commit(committed))
        events.append(StreamEvent.from_words("partial", self._shown(self._policy.tentative), segment_id=self.segment_id))
        self._maybe_trim()
        return events

    def _unheard_seconds(self) -> float:
        """Audio in the window after the utterance's last committed word."""
        heard_until = max(self._window_start / SAMPLE_RATE, self._utterance_words[-1].end if self._utterance_words else 0.0)
        return (self._window_start + len(self._audio)) / SAMPLE_RATE - heard_until

    def _is_silent_tail(self, window: WindowResult, prefix: list[int]) -> bool:
        """A short window after this utterance's committed words that Whisper calls no speech (see
        ``TAIL_SECONDS``)."""
        threshold = self.decode_options.no_speech_threshold
        return (bool(self._utterance_words) and not prefix and threshold is not None
                and self._unheard_seconds() < TAIL_SECONDS and window.no_speech_prob > threshold)

    def _decode_words(self) -> Generator[WindowDecode, WindowResult, list[Word]]:
        """LocalAgreement's hypothesis: the words of the whole window (committed ones included)."""
        decoded = yield from self._decode(prefix=[])
        return decoded[0].words if decoded else []

    def _decode_alignatt(self) -> Generator[WindowDecode, WindowResult, tuple[list[Word], int]]:
        """AlignAtt's hypothesis: new words after the committed ones, and how many are stable.

        The window's committed words are the decode's forced prefix (after the prompt), so they
        are never re-decoded into something else, and only the new tokens are generated.
        """
        prefix = self.asr.tokenizer.encode("".join(w.word for w in self._committed_words)) if self._committed_words else []
        decoded = yield from self._decode(prefix)
        if decoded is None:
            self._previous_words = []
            return [], 0
        alignment, frames = decoded
        # The prefix ends at a word boundary: its words are the alignment's first ones.
        n_prefix, covered = 0, 0
        while n_prefix < len(alignment.word_tokens) and covered < len(prefix):
            covered += len(alignment.word_tokens[n_prefix])
            n_prefix += 1
        words, counts = alignment.words[n_prefix:], [len(t) for t in alignment.word_tokens[n_prefix:]]
        spoken = [bool(normalize_word(w.word)) for w in words]
        if self._committed_words:  # a new word never reads the committed words' audio again
            # Encoder frames are two mel hops: the frame where the committed words end.
            heard = int(self._committed_words[-1].end * SAMPLE_RATE - self._window_start) // (2 * HOP_LENGTH)
            keep = words_before_a_reread(
                counts, alignment.peak_frames, first_row=covered, min_frame=heard - REREAD_TOLERANCE_FRAMES, spoken=spoken,
            )
            if keep < len(words):
                self.stats.rereads_cut += 1
                words, counts, spoken = words[:keep], counts[:keep], spoken[:keep]
        if self._utterance_words:  # committed times are final: new words never start before them
            floor = self._utterance_words[-1].end
            words = [dataclasses.replace(w, start=max(w.start, floor), end=max(w.end, floor)) for w in words]
        # Punctuation is often improbable (which mark, not whether a word): only words are judged.
        probabilities = [w.probability if normalize_word(w.word) else 1.0 for w in words]
        agreed = [normalize_word(a.word) == normalize_word(b.word) for a, b in zip(words, self._previous_words)]
        stable = alignatt_stable_words(
            counts, alignment.peak_frames, first_row=covered, end_frame=frames // 2,
            frames_before_end=self.options.alignatt_frames, word_probabilities=probabilities,
            min_probability=self.options.alignatt_min_probability, agreed=agreed, spoken=spoken,
        )
        # A pause commits the tentative words up to the first doubtful one the previous decode did
        # not have: committing it at once turned "What your country" into "Like your country".
        doubtful = next(
            (i for i, p in enumerate(probabilities)
             if p < self.options.alignatt_min_probability and not (i < len(agreed) and agreed[i])),
            len(words),
        )
        if not self._utterance_words and len(self._audio) < self.options.alignatt_first_commit_seconds * SAMPLE_RATE:
            # An utterance's first second is often a guess ("Thank you," for "What your"): its
            # words wait, unless the decode before had them too (over all dev files at
            # 0.9/1/1.1 s chunks the committed WER stayed 4.95%; the first three words' median
            # AWED went from 1.57 s to 1.32 s).
            agreeing = next((i for i, same in enumerate(agreed) if not same), len(agreed))
            stable = min(stable, agreeing)
        self._previous_words = words[stable:]  # the next hypothesis starts where these do
        self._sure_at_pause = max(0, doubtful - stable)
        # The next decode's prefix grows by the stable words: the rest is its draft.
        self._previous_tokens = self._previous_tokens[covered - len(prefix) + sum(counts[:stable]) :]
        return words, stable

    def _decode(self, prefix: list[int]) -> Generator[WindowDecode, WindowResult, Optional[tuple[Alignment, int]]]:
        """Decode the window after ``prefix`` (forced text tokens) and align prefix + new tokens.

        Returns ``None`` for silence, else the alignment (absolute word times) and the window's mel frames.
        """
        features, frames = self._encode()
        prompt = self.asr.build_prompt(self._history_tokens, self.decode_options) + prefix
        # Speech is at most ~5 tokens per second; a cap keeps a looping decode from running to 224.
        max_tokens = max(8, int(8 * len(self._audio) / SAMPLE_RATE) + 8 - len(prefix))
        options = dataclasses.replace(self.decode_options, max_new_tokens=max_tokens)
        # Beam search counts the forced prefix in each hypothesis's length: normalised over the new
        # tokens alone, an ending just after a boosted name (its bonus over 3 tokens) outranked the
        # rest of the sentence ("... at Newgate" for "... at Newgate to the committee.").
        window = yield WindowDecode(self.asr, WindowRequest(
            features, prompt, options, previous_hypothesis=self._previous_tokens, extra_processors=self.biasing,
            cross=self._cross_source(features), stats=self.stats.decoding, forced_prefix_length=len(prefix),
        ))  # fmt: skip
        self.stats.decodes += 1
        tokenizer = self.asr.tokenizer
        tokens = [t for t in window.tokens if t < tokenizer.eot]
        loop = trailing_loop_start(tokens)
        if loop is not None:  # never commit (or draft) a loop: keep its first occurrence
            tokens = tokens[:loop]
            self.stats.loops_cut += 1
        if is_silence(window, options) or self._is_silent_tail(window, prefix) or not (tokens or prefix):
            self._previous_tokens = []
            return None
        self._previous_tokens = tokens
        offset = self._window_start / SAMPLE_RATE
        start_of_transcript = sot_sequence(tokenizer, options)
        scores, probabilities = self._recorded_alignment(window, prompt, prefix, tokens, len(start_of_transcript))
        alignment = align(
            self.asr.model, tokenizer, start_of_transcript, prefix + tokens, features, frames,
            text_model=window.text_model, scores=scores, token_probabilities=probabilities,
        )
        # The newest words run on into the window's unspoken end: cap their ends (keep the start).
        alignment.words = [
            Word(word=w.word, start=offset + w.start, end=offset + max(w.start, w.end), probability=w.probability)
            for w in clamp_word_durations(alignment.words, keep="start")
        ]
        return alignment, frames

    def _recorded_alignment(
        self, window: WindowResult, prompt: list[int], prefix: list[int], tokens: list[int], sot_length: int
    ) -> tuple[Optional[torch.Tensor], Optional[list[float]]]:
        """The alignment heads' scores the decode recorded for the rows of start-of-transcript
        through the last text token, and the text tokens' probabilities under the decode (NaN for
        the forced prefix: AlignAtt judges only new words); ``(None, None)`` when the decode did
        not compute every row (then :func:`align` runs its own pass)."""
        record = window.record
        logprobs = window.token_logprobs
        first = len(prompt) - len(prefix) - 1 - sot_length  # the start-of-transcript row
        if record is None or logprobs is None or len(logprobs) < len(tokens) or first < 0:
            return None, None
        if prompt[first] != self.asr.tokenizer.sot or prompt[first + sot_length] != self.asr.tokenizer.no_timestamps:
            return None, None  # not the layout align() reads
        scores = record.scores(prompt + tokens, first, len(prompt) + len(tokens))
        if scores is None:
            return None, None
        return scores, [math.nan] * len(prefix) + [math.exp(lp) for lp in logprobs[: len(tokens)]]

    def _maybe_trim(self) -> None:
        window_seconds = len(self._audio) / SAMPLE_RATE
        if window_seconds < self.options.min_trim_window_seconds:
            return
        trim = find_trim_time(
            self._committed_words,
            window_start=self._window_start / SAMPLE_RATE,
            force=window_seconds > self.options.max_window_seconds,
        )
        if trim is not None:
            self._trim_to(int(round(trim * SAMPLE_RATE)))

    def _trim_to(self, sample: int) -> None:
        cut = min(max(0, sample - self._window_start), len(self._audio))
        if cut <= 0:
            return
        self._audio = self._audio[cut:]
        self._window_start += cut
        boundary = self._window_start / SAMPLE_RATE
        # Committed words that leave the window become the prompt. Words still inside it must not
        # be in the prompt: Whisper would treat them as already said and skip their audio.
        # (A mark after a word that leaves goes with it: its alignment may run past the cut.)
        gone = list(itertools.takewhile(lambda w: w.end <= boundary + 1e-6 or not normalize_word(w.word), self._committed_words))
        self._committed_words = self._committed_words[len(gone) :]
        if gone:
            self._history_tokens.extend(self.asr.tokenizer.encode("".join(w.word for w in gone)))
            self._history_tokens = self._history_tokens[-self.options.prompt_tokens :]


def _stream_biasing(options: StreamingOptions) -> BiasingConfig:
    """A stream's ``biasing`` with its ``hotwords`` (e.g. a WebSocket session's) added."""
    config = options.biasing or BiasingConfig()
    if options.hotwords:
        config = dataclasses.replace(config, phrases=config.phrases + tuple(as_phrases(options.hotwords)))
    return config
