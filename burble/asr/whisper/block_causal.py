"""The streaming encoder's exact reference: Whisper's encoder over a whole sequence in one pass,
under a block-causal mask with Emformer-style right-context copies of each chunk's lookahead.

:class:`~burble.asr.whisper.streaming_encoder.StreamingEncoder` must equal it (within fp32
rounding) at every layer; the tests compare them.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F

from burble.asr.whisper.model import AudioEncoder, Whisper
from burble.asr.whisper.streaming_encoder import encoder_block, encoder_of


def block_causal_mask(
    n_frames: int, chunk: int, lookahead: int, tail_from: Optional[int] = None, *, first_chunk: Optional[int] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The block-causal attention pattern over a sequence augmented with right-context copies.

    The lookahead frames a chunk sees are computed *within* that chunk's step (they attend to the
    earlier frames, the chunk and each other), and differ from the same frames' final states, so a
    one-pass form carries them as a separate copy per chunk (Emformer's right-context block).

    Args:
      n_frames: frames ``T`` of the sequence.
      chunk: ``C``; chunk ``k`` holds frames ``[b_k, b_{k+1})`` with ``b_k = kC`` (or
        ``F + (k-1)C`` after a first chunk of ``F`` frames).
      lookahead: ``R``; chunk ``k``'s copies are frames ``[b_{k+1}, b_{k+1} + R)`` (clipped to ``T``).
      tail_from: frames from here on form one last block that sees every frame (the padding tail);
        it must lie on the chunk grid.
      first_chunk: ``F``, the first chunk's size (``None``: ``C``; see ``first_chunk_frames``).

    Returns:
      ``(source, mask)``: ``source[a]`` is the frame index of augmented position ``a`` (the first
      ``T`` are the frames themselves, then the copies), and ``mask[a, b]`` is True where ``a`` may
      attend to ``b``.
    """
    tail_from = n_frames if tail_from is None else tail_from
    first = chunk if first_chunk is None else first_chunk
    # Chunk boundaries b_0 = 0, b_1 = F, b_2 = F + C, ... up to the tail.
    bounds = [0] + list(range(first, max(tail_from, first) + chunk, chunk))
    n_chunks = next(k for k, b in enumerate(bounds) if b >= tail_from) if tail_from > 0 else 0
    if tail_from not in bounds and tail_from != n_frames:
        raise ValueError("tail_from must lie on the chunk grid")
    ends = torch.tensor(bounds[1 : n_chunks + 1], dtype=torch.long)  # b_{k+1} of every chunk k
    frames = torch.arange(n_frames)
    # Right-context copies: chunk k's lookahead frames, for chunks before the tail.
    offsets = torch.arange(lookahead)
    copy_frames = ends[:, None] + offsets[None, :]
    copy_owner = torch.arange(n_chunks)[:, None].expand_as(copy_frames)
    valid = copy_frames < n_frames
    copy_frames, copy_owner = copy_frames[valid], copy_owner[valid]
    source = torch.cat([frames, copy_frames])
    # Owner block of each augmented position; the tail is block n_chunks.
    frame_owner = torch.searchsorted(ends, frames, right=True)
    owner = torch.cat([torch.where(frames < tail_from, frame_owner, torch.full_like(frames, n_chunks)), copy_owner])
    is_copy = torch.cat([torch.zeros(n_frames, dtype=torch.bool), torch.ones(len(copy_frames), dtype=torch.bool)])
    # A query of block k sees the real frames before b_{k+1} (every frame for the tail) ...
    limit = torch.cat([ends, torch.tensor([n_frames])])[owner]
    sees_frames = (~is_copy)[None, :] & (source[None, :] < limit[:, None])
    # ... and the copies of its own chunk (the tail has none).
    sees_copies = is_copy[None, :] & (owner[None, :] == owner[:, None])
    return source, sees_frames | sees_copies


@torch.inference_mode()
def encode_block_causal(
    model: Union[Whisper, AudioEncoder],
    mel: torch.Tensor,
    chunk: int,
    lookahead: int = 0,
    *,
    tail_from: Optional[int] = None,
    return_layers: bool = False,
    first_chunk: Optional[int] = None,
) -> Union[torch.Tensor, tuple[torch.Tensor, list[torch.Tensor]]]:
    """The masked full-sequence encoder: the streaming encoder's exact reference, in one pass.

    Uses the model's own convolutions over the whole mel (Whisper's padding at both ends), then the
    blocks over the sequence plus right-context copies under :func:`block_causal_mask`. With
    ``chunk >= T`` and no lookahead it is Whisper's encoder.

    Args:
      model: a ``Whisper`` model or its ``AudioEncoder``.
      mel: ``(n_mels, M)`` or ``(B, n_mels, M)`` log-mel frames.
      chunk: ``C`` frames per chunk.
      lookahead: ``R`` lookahead frames per chunk.
      tail_from: frames from here on form the padding tail block (see :meth:`StreamingEncoder.padding_tail`).
      first_chunk: the first chunk's size (``StreamingEncoderOptions.first_chunk_frames``).
      return_layers: also return each block's output.

    Returns:
      ``(B, ceil(M / 2), D)`` encoder states, and with ``return_layers`` each block's output too.
    """
    encoder = encoder_of(model)
    weight = encoder.conv1.weight
    if mel.dim() == 2:
        mel = mel.unsqueeze(0)
    mel = mel.to(device=weight.device, dtype=weight.dtype)
    x = F.gelu(encoder.conv2(F.gelu(encoder.conv1(mel)))).transpose(1, 2)
    n_frames = x.shape[1]
    if n_frames > encoder.positional_embedding.shape[0]:
        raise ValueError(f"audio too long for the encoder: {n_frames} frames")
    source, mask = block_causal_mask(n_frames, chunk, lookahead, tail_from, first_chunk=first_chunk)
    source, mask = source.to(x.device), mask.to(x.device)
    x = x[:, source] + encoder.positional_embedding[source].to(x.dtype)
    layers: list[torch.Tensor] = []
    for block in encoder.blocks:
        x = encoder_block(block, x, lambda k, v: (k, v), mask=mask)
        layers.append(x[:, :n_frames])
    out = encoder.ln_post(x[:, :n_frames])
    return (out, layers) if return_layers else out
