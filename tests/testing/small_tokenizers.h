// Small tokenizer.json documents the tests build tokenizers from.
#pragma once

namespace kvc::testing {

// A character-level BPE with byte fallback (the Llama 2 / Mistral style): "<s>" (id 0) and "</s>"
// (id 1) are special, "é" falls back to its bytes <0xC3><0xA9>, " hi" merges to "▁hi".
inline constexpr char kSentencePieceStyleTokenizer[] = R"({
  "added_tokens": [{"id": 0, "content": "<s>", "special": true},
                   {"id": 1, "content": "</s>", "special": true}],
  "normalizer": {"type": "Sequence", "normalizers": [
     {"type": "Prepend", "prepend": "\u2581"},
     {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
  "pre_tokenizer": null,
  "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}]},
  "model": {"type": "BPE", "byte_fallback": true, "unk_token": null,
    "vocab": {"<s>": 0, "</s>": 1, "<0xC3>": 2, "<0xA9>": 3, "\u2581": 4, "h": 5, "i": 6,
              "\u2581h": 7, "\u2581hi": 8},
    "merges": ["\u2581 h", "\u2581h i"]}
})";

}  // namespace kvc::testing
