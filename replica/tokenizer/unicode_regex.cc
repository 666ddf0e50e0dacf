#include "replica/tokenizer/unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace kvc {

struct UnicodeRegex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

UnicodeRegex::UnicodeRegex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UnicodeRegex::~UnicodeRegex() = default;

Result<std::unique_ptr<UnicodeRegex>> UnicodeRegex::compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return Error{"regex error at offset " + std::to_string(offset) + ": " +
                 reinterpret_cast<const char*>(message)};
  }
  // JIT is an optimisation: where it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  auto impl = std::make_unique<Impl>();
  impl->code = code;
  return std::unique_ptr<UnicodeRegex>(new UnicodeRegex(std::move(impl)));
}

void* UnicodeRegex::new_match_data() const {
  return pcre2_match_data_create_from_pattern(impl_->code, nullptr);
}

void UnicodeRegex::free_match_data(void* match_data) {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data));
}

bool UnicodeRegex::find(std::string_view text, size_t from, void* match_data, size_t& begin,
                        size_t& end) const {
  auto* md = static_cast<pcre2_match_data*>(match_data);
  // The caller validated the UTF-8: checking it again on every call would cost O(n^2).
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = pcre2_match(impl_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, md, nullptr);
  // The JIT's stack (32 KiB) can run out on a long run of one class (backtracking lookahead):
  // the interpreter keeps its backtracking on the heap.
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
    rc = pcre2_match(impl_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                     nullptr);
  }
  if (rc < 0) return false;  // no match (or a heap limit hit): the rest is one piece
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  begin = ov[0];
  end = ov[1];
  return begin >= from && end >= begin && end <= text.size();
}

}  // namespace kvc
