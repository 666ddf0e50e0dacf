// The Jinja lexer (jinja.h): template text to tokens, with Hugging Face's whitespace rules
// applied to the text between tags. Internal to prefix_index/jinja_*.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvc::jinja {

struct Token {
  enum Type { kText, kOutputOpen, kStmtOpen, kClose, kName, kString, kInt, kFloat, kOp, kEnd };
  Type type;
  std::string text;
  int line;
};

// Text tokens, then for each tag its opening, its expression tokens and kClose; kEnd last.
// Errors name the line.
Result<std::vector<Token>> lex(std::string_view source);

}  // namespace kvc::jinja
