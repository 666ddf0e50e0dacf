#include "api/jinja_lex.h"

#include <algorithm>
#include <cctype>

namespace kvc::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(source) {
    // Jinja drops a single trailing newline (keep_trailing_newline is off).
    if (!src_.empty() && src_.back() == '\n') src_.remove_suffix(1);
  }

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool strip_next = false;  // the previous tag ended with "-": eat leading whitespace
    while (pos <= src_.size()) {
      size_t at = find_tag(pos);
      std::string text(src_.substr(pos, (at == std::string_view::npos ? src_.size() : at) - pos));
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k]))
          ++k;
        text.erase(0, k);
        strip_next = false;
      }
      if (at == std::string_view::npos) {
        emit_text(std::move(text), pos);
        break;
      }
      const char type = src_[at + 1];
      const bool dash = at + 2 < src_.size() && src_[at + 2] == '-';
      if (dash) {
        while (!text.empty() && is_space(text.back()))
          text.pop_back();
      } else if (type == '%' || type == '#') {
        // lstrip_blocks: spaces and tabs from the start of the line to a block or comment tag.
        size_t k = at;
        while (k > 0 && (src_[k - 1] == ' ' || src_[k - 1] == '\t'))
          --k;
        if (k == 0 || src_[k - 1] == '\n') text.resize(text.size() - std::min(text.size(), at - k));
      }
      emit_text(std::move(text), pos);
      size_t end;
      bool close_dash = false;
      if (type == '#') {
        const size_t close = src_.find("#}", at + 2);
        if (close == std::string_view::npos) return error(at, "unclosed comment");
        close_dash = close > at + 2 && src_[close - 1] == '-';
        end = close + 2;
      } else {
        tokens_.push_back({type == '{' ? Token::kOutputOpen : Token::kStmtOpen, "", line_at(at)});
        Result<size_t> e = lex_tag(at + (dash ? 3 : 2), type == '{' ? '}' : '%', close_dash);
        if (!e.ok()) return e.error();
        end = *e;
      }
      if (close_dash) {
        strip_next = true;
      } else if (type != '{' && end < src_.size() && src_[end] == '\n') {
        ++end;  // trim_blocks: the first newline after a block or comment tag
      }
      pos = end;
    }
    tokens_.push_back({Token::kEnd, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t at = src_.find('{', from); at != std::string_view::npos;
         at = src_.find('{', at + 1)) {
      if (at + 1 < src_.size() &&
          (src_[at + 1] == '{' || src_[at + 1] == '%' || src_[at + 1] == '#'))
        return at;
    }
    return std::string_view::npos;
  }
  int line_at(size_t pos) const {
    int line = 1;
    for (size_t i = 0; i < pos && i < src_.size(); ++i)
      line += src_[i] == '\n';
    return line;
  }
  Error error(size_t pos, const std::string& what) const {
    return Error{"chat template line " + std::to_string(line_at(pos)) + ": " + what};
  }
  void emit_text(std::string text, size_t pos) {
    if (!text.empty()) tokens_.push_back({Token::kText, std::move(text), line_at(pos)});
  }

  // Tokens of one tag's expression, up to its close ("}}" or "%}", maybe "-}}" / "-%}");
  // returns the position after the close.
  Result<size_t> lex_tag(size_t pos, char close, bool& close_dash) {
    const int line = line_at(pos);
    while (pos < src_.size()) {
      const char c = src_[pos];
      if (is_space(c)) {
        ++pos;
        continue;
      }
      if (c == '-' && pos + 2 < src_.size() && src_[pos + 1] == close && src_[pos + 2] == '}') {
        close_dash = true;
        tokens_.push_back({Token::kClose, "", line});
        return pos + 3;
      }
      if (c == close && pos + 1 < src_.size() && src_[pos + 1] == '}') {
        tokens_.push_back({Token::kClose, "", line});
        return pos + 2;
      }
      if (c == '\'' || c == '"') {
        std::string s;
        size_t i = pos + 1;
        for (; i < src_.size() && src_[i] != c; ++i) {
          if (src_[i] == '\\' && i + 1 < src_.size()) {
            const char e = src_[++i];
            s += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
          } else {
            s += src_[i];
          }
        }
        if (i >= src_.size()) return error(pos, "unterminated string");
        tokens_.push_back({Token::kString, std::move(s), line});
        pos = i + 1;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t i = pos;
        while (i < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i])))
          ++i;
        bool is_float = false;
        if (i + 1 < src_.size() && src_[i] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[i + 1]))) {
          is_float = true;
          ++i;
          while (i < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i])))
            ++i;
        }
        tokens_.push_back(
            {is_float ? Token::kFloat : Token::kInt, std::string(src_.substr(pos, i - pos)), line});
        pos = i;
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t i = pos;
        while (i < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[i])) || src_[i] == '_'))
          ++i;
        tokens_.push_back({Token::kName, std::string(src_.substr(pos, i - pos)), line});
        pos = i;
        continue;
      }
      static const char* const kOps[] = {"==", "!=", "<=", ">=", "//", "**", "(", ")", "[",
                                         "]",  "{",  "}",  ".",  ",",  ":",  "|", "~", "+",
                                         "-",  "*",  "/",  "%",  "<",  ">",  "="};
      bool matched = false;
      for (const char* op : kOps) {
        const std::string_view o(op);
        if (src_.substr(pos, o.size()) == o) {
          tokens_.push_back({Token::kOp, std::string(o), line});
          pos += o.size();
          matched = true;
          break;
        }
      }
      if (!matched) return error(pos, std::string("unexpected character '") + c + "'");
    }
    return error(pos, "unclosed tag");
  }

  std::string_view src_;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> lex(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace kvc::jinja
