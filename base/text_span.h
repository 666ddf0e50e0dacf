// A byte range of a rendered prompt. Chat rendering marks the ranges that hold the client's text
// (message content, names): the replica's tokenizer encodes them as plain text, so text such as
// "<|eot_id|>" inside a message cannot become a special token and forge a turn.
#pragma once

#include <cstddef>

namespace kvc {

struct TextSpan {
  size_t begin = 0, end = 0;  // [begin, end), bytes
  friend bool operator==(const TextSpan&, const TextSpan&) = default;
};

}  // namespace kvc
