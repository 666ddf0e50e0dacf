#include "replica/tokenizer/tokenizer.h"

#include <algorithm>

namespace kvc {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens(text.size());
  std::transform(text.begin(), text.end(), tokens.begin(),
                 [](char c) { return static_cast<int32_t>(static_cast<unsigned char>(c)); });
  return tokens;
}

std::string ByteTokenizer::decode(int32_t token) const {
  if (token < 0 || token > 255) return {};
  return std::string(1, static_cast<char>(token));
}

bool tokens_to_bytes(std::span<const int32_t> tokens, std::string& out) {
  if (!std::all_of(tokens.begin(), tokens.end(), [](int32_t t) { return t >= 0 && t <= 255; })) {
    return false;
  }
  for (int32_t t : tokens)
    out.push_back(static_cast<char>(t));
  return true;
}

}  // namespace kvc
