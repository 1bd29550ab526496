"""Tokenizers for the tiny model folders, built offline: nothing is downloaded.

- :func:`write_clip_tokenizer`: a byte-level ``CLIPTokenizer`` (Stable Diffusion, SDXL, SD3, Flux).
  Its vocabulary is CLIP's 256 byte symbols, their end-of-word forms and the two special tokens,
  with no BPE merges, so any prompt tokenizes (one token per byte).
- :func:`write_t5_tokenizer`: a ``T5TokenizerFast`` (SD3, Flux, PixArt, Chroma, and Wan's UMT5): a
  Unigram model trained with the ``tokenizers`` library on a few sentences, T5's special tokens
  (``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2) and its ``</s>`` appended to every text. Unknown
  characters become ``<unk>``.
- :func:`write_lm_tokenizer`: the same Unigram model as a decoder-only text encoder's tokenizer
  class (Gemma-2's, GLM-4's, Qwen2.5-VL's, Llama 3's) with its special tokens.

Both are saved with ``save_pretrained`` into a folder that diffusers and mindone.diffusers read.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
CLIP_MAX_TOKENS = 77  # CLIP's context length: the pipelines pad every prompt to it

T5_PAD, T5_EOS, T5_UNK = "<pad>", "</s>", "<unk>"
# What the T5 Unigram model is trained on: enough words for test prompts to be more than <unk>.
T5_SENTENCES = (
    "a photo of a cat sitting on a red chair",
    "a red circle on a blue square",
    "an astronaut riding a horse on the moon, high quality, detailed",
    "a dog running in a green field under the blue sky at sunset",
    "the quick brown fox jumps over the lazy dog",
    "a painting of a small house by the river in winter with snow",
    "blurry, low quality, ugly, distorted, watermark, text",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 .,;:!?'\"-()",
)
T5_VOCAB_SIZE = 256


def byte_vocab() -> Dict[str, int]:
    """CLIP's byte-level vocabulary without merges: 256 byte symbols, their ``</w>`` forms, BOS, EOS.

    The byte-to-symbol table is GPT-2's/CLIP's ``bytes_to_unicode``
    (transformers/models/clip/tokenization_clip.py): printable bytes map to themselves, the
    others to code points from 256 up.
    """
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    codes, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            codes.append(256 + extra)
            extra += 1
    order = printable + [b for b in range(256) if b not in printable]
    symbols = [chr(c) for _, c in sorted(zip(order, codes))]
    vocab = {s: i for i, s in enumerate(symbols)}
    vocab.update({s + "</w>": 256 + i for i, s in enumerate(symbols)})
    vocab[BOS], vocab[EOS] = 512, 513
    return vocab


def write_clip_tokenizer(folder: Path) -> Path:
    """Save the byte-level ``CLIPTokenizer`` (pads with EOS, as Stable Diffusion's does) in ``folder``."""
    from transformers import CLIPTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(byte_vocab(), ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"),
                              model_max_length=CLIP_MAX_TOKENS, pad_token=EOS)
    tokenizer.save_pretrained(str(folder))
    return folder


def clip_text_config_ids() -> Dict[str, int]:
    """The vocabulary size and special token ids a CLIP text encoder config needs for this tokenizer."""
    vocab = byte_vocab()
    return dict(vocab_size=len(vocab), bos_token_id=vocab[BOS], eos_token_id=vocab[EOS], pad_token_id=vocab[EOS])


def _unigram(specials, unk: str):
    """A Unigram model trained on :data:`T5_SENTENCES` with ``specials`` first (ids 0, 1, ...), T5's
    normalisation and word marks: what every tokenizer here but CLIP's is made of."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    model = Tokenizer(models.Unigram())
    # T5's own pipeline (transformers' convert_slow_tokenizer.py, T5Converter): whitespace runs
    # folded, words marked with a leading "▁".
    model.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    model.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    model.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=T5_VOCAB_SIZE, special_tokens=list(specials), unk_token=unk,
                                      show_progress=False)
    model.train_from_iterator(T5_SENTENCES, trainer)
    # The trainer finds the same pieces every time, but its parallel sums move scores in the
    # last bits and tied pieces trade places: rounded and sorted, the ids are the same everywhere.
    trained = json.loads(model.to_str())["model"]["vocab"]
    pieces = sorted(((piece, round(score, 4)) for piece, score in trained[len(specials):]), key=lambda p: (-p[1], p[0]))
    model.model = models.Unigram([(s, 0.0) for s in specials] + pieces, unk_id=list(specials).index(unk))
    return model


def write_t5_tokenizer(folder: Path, max_length: int = 512) -> Path:
    """Train a small Unigram model, wrap it as ``T5TokenizerFast`` and save it in ``folder``.

    ``max_length`` becomes the tokenizer's ``model_max_length``. The same sentences give the
    same vocabulary and ids on every machine.
    """
    from tokenizers import processors
    from transformers import T5TokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = _unigram((T5_PAD, T5_EOS, T5_UNK), T5_UNK)
    model.post_processor = processors.TemplateProcessing(
        single=f"$A {T5_EOS}", pair=f"$A {T5_EOS} $B {T5_EOS}", special_tokens=[(T5_EOS, 1)])
    tokenizer = T5TokenizerFast(tokenizer_object=model, pad_token=T5_PAD, eos_token=T5_EOS, unk_token=T5_UNK,
                                extra_ids=0, model_max_length=max_length)
    tokenizer.save_pretrained(str(folder))
    return folder


#: The decoder-only text encoders' tokenizers (Gemma-2: Sana, Lumina 2; GLM-4: CogView4; Qwen2.5-VL:
#: Qwen-Image; Llama 3: HunyuanVideo): their transformers class and special tokens (pad, bos, eos, unk; None: none),
#: each prompt starting with BOS where the real one does.
LM_TOKENIZERS = {
    "gemma": ("GemmaTokenizerFast", ("<pad>", "<bos>", "<eos>", "<unk>")),
    "glm": ("PreTrainedTokenizerFast", ("<|endoftext|>", "[gMASK]", None, "<unk>")),  # GLM-4 starts with [gMASK]
    "qwen2": ("Qwen2TokenizerFast", ("<|endoftext|>", None, "<|im_end|>", "<unk>")),
    # Llama 3's (HunyuanVideo's llava-llama-3 text encoder): a Llama tokenizer class, prompts start with BOS
    "llama": ("LlamaTokenizerFast", ("<pad>", "<|begin_of_text|>", "<|end_of_text|>", "<unk>")),
}


def write_lm_tokenizer(folder: Path, kind: str, max_length: int = 512) -> Path:
    """A Unigram tokenizer as ``kind``'s (a key of :data:`LM_TOKENIZERS`) saved in ``folder``: the
    same words as the T5 one, that class and its special tokens; padding on the right."""
    import transformers
    from tokenizers import processors

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cls_name, (pad, bos, eos, unk) = LM_TOKENIZERS[kind]
    specials = [t for t in (pad, bos, eos, unk) if t is not None]
    model = _unigram(specials, unk)
    if bos is not None:
        model.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, specials.index(bos))])
    named = {"pad_token": pad, "bos_token": bos, "eos_token": eos, "unk_token": unk}
    named = {k: v for k, v in named.items() if v}
    if cls_name == "LlamaTokenizerFast":  # its own pieces, no slow tokenizer's legacy behaviour to keep (or warn of)
        named["legacy"] = False
    tokenizer = getattr(transformers, cls_name)(tokenizer_object=model, model_max_length=max_length,
                                                padding_side="right", **named)
    tokenizer.save_pretrained(str(folder))
    return folder


def lm_config_ids(folder: Path) -> Dict[str, int]:
    """The vocabulary size and special token ids a decoder-only text encoder config needs for the
    tokenizer in ``folder``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    ids = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    ids.update({f"{k}_token_id": getattr(tokenizer, f"{k}_token_id") for k in ("bos", "eos")
                if getattr(tokenizer, f"{k}_token_id") is not None})
    return ids


def t5_config_ids(folder: Path) -> Dict[str, int]:
    """The vocabulary size and special token ids a T5/UMT5 encoder config needs for the tokenizer in ``folder``."""
    from transformers import T5TokenizerFast

    tokenizer = T5TokenizerFast.from_pretrained(str(folder))
    return dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                decoder_start_token_id=tokenizer.pad_token_id)
