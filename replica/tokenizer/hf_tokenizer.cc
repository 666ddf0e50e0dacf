#include "replica/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <utf8proc.h>
#include <nlohmann/json.hpp>

namespace kvc {
namespace {

using json = nlohmann::json;

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the other 68 (controls,
// space, 0x7F-0xA0, 0xAD) for U+0100 onwards in byte order, so every byte is a visible character.
struct ByteAlphabet {
  char32_t to_char[256];
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteAlphabet() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

// Decodes one UTF-8 character at s[at] (advancing at); nullopt (at + 1) on an invalid sequence.
std::optional<char32_t> next_char(std::string_view s, size_t& at) {
  const auto c0 = static_cast<unsigned char>(s[at]);
  size_t n;
  char32_t cp;
  if (c0 < 0x80) {
    ++at;
    return c0;
  } else if ((c0 & 0xE0) == 0xC0 && c0 >= 0xC2) {
    n = 2, cp = c0 & 0x1F;
  } else if ((c0 & 0xF0) == 0xE0) {
    n = 3, cp = c0 & 0x0F;
  } else if ((c0 & 0xF8) == 0xF0 && c0 <= 0xF4) {
    n = 4, cp = c0 & 0x07;
  } else {
    ++at;
    return std::nullopt;
  }
  if (at + n > s.size()) {
    ++at;
    return std::nullopt;
  }
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[at + k]);
    if ((c & 0xC0) != 0x80) {
      ++at;
      return std::nullopt;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++at;
    return std::nullopt;
  }
  at += n;
  return cp;
}

// Calls on_run(valid, piece) for maximal valid UTF-8 runs and for each invalid byte on its own.
template <typename F>
void utf8_runs(std::string_view s, F&& on_run) {
  size_t run = 0, at = 0;
  while (at < s.size()) {
    const size_t here = at;
    if (next_char(s, at)) continue;
    if (here > run) on_run(true, s.substr(run, here - run));
    on_run(false, s.substr(here, 1));
    run = at;
  }
  if (s.size() > run) on_run(true, s.substr(run));
}

// Maps a byte-level vocabulary string back to the bytes it stands for.
std::optional<std::string> from_byte_alphabet(std::string_view piece) {
  const ByteAlphabet& a = byte_alphabet();
  std::string out;
  for (size_t at = 0; at < piece.size();) {
    const std::optional<char32_t> cp = next_char(piece, at);
    if (!cp) return std::nullopt;
    const auto it = a.to_byte.find(*cp);
    if (it == a.to_byte.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path + ": cannot open"};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A token named in tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return {};
}

const std::string kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const std::string kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

}  // namespace

struct HfTokenizer::Step {
  enum Kind { kSplit, kPrepend, kReplace, kMetaspace, kAddPrefixSpace, kNfc };
  Step(Kind k, std::shared_ptr<UnicodeRegex> r = nullptr, std::string x = {}, std::string y = {})
      : kind(k), regex(std::move(r)), a(std::move(x)), b(std::move(y)) {}
  Kind kind;
  std::shared_ptr<UnicodeRegex> regex;  // kSplit
  std::string a, b;                     // kPrepend: a; kReplace: a -> b; kMetaspace: a
  bool prepend = false;                 // kMetaspace: prepend a ("first" is read as "always")
};

HfTokenizer::HfTokenizer() = default;
HfTokenizer::~HfTokenizer() = default;

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::load_dir(const std::string& dir) {
  Result<std::string> tok = read_file(dir + "/tokenizer.json");
  if (!tok.ok()) return Error{"no tokenizer: " + tok.error().message};
  std::string config, generation;
  if (Result<std::string> c = read_file(dir + "/tokenizer_config.json"); c.ok()) config = *c;
  if (Result<std::string> g = read_file(dir + "/generation_config.json"); g.ok()) generation = *g;
  auto t = from_json(*tok, config, generation);
  if (!t.ok()) return Error{dir + ": " + t.error().message};
  (*t)->name_ =
      "hf:" +
      dir.substr(dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/') + 1);
  return t;
}

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::from_json(std::string_view tokenizer_json,
                                                            std::string_view config_json,
                                                            std::string_view generation_json) {
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->name_ = "hf";
  std::string where = "tokenizer.json";
  try {
    const json j = json::parse(tokenizer_json);
    const json& model = j.at("model");
    if (model.value("type", "BPE") != "BPE") {
      return Error{where + ": model.type '" + model.value("type", "") +
                   "' is not supported (only BPE)"};
    }
    bool byte_level = false;
    // Pre-tokenizers and normalizers, flattened out of their Sequences.
    auto add_steps = [&](auto&& self, const json& node, const std::string& field,
                         std::vector<Step>& steps) -> Status {
      if (node.is_null()) return Status::Ok();
      const std::string type = node.at("type").get<std::string>();
      if (type == "Sequence") {
        const char* key = node.contains("pretokenizers") ? "pretokenizers" : "normalizers";
        for (size_t i = 0; i < node.at(key).size(); ++i) {
          const std::string sub = field + "." + key + "[" + std::to_string(i) + "]";
          if (Status s = self(self, node.at(key)[i], sub, steps); !s.ok()) return s;
        }
        return Status::Ok();
      }
      if (type == "Split") {
        const json& pattern = node.at("pattern");
        std::string regex;
        if (pattern.contains("Regex")) {
          regex = pattern.at("Regex").get<std::string>();
        } else {
          // A literal string: quote it for PCRE2.
          regex = "\\Q" + pattern.at("String").get<std::string>() + "\\E";
        }
        if (node.value("behavior", "Isolated") != "Isolated" || node.value("invert", false)) {
          return Error{field + ": only the Isolated, non-inverted Split is supported"};
        }
        auto compiled = UnicodeRegex::compile(regex);
        if (!compiled.ok()) return Error{field + ".pattern: " + compiled.error().message};
        steps.push_back({Step::kSplit, std::shared_ptr<UnicodeRegex>(std::move(*compiled))});
        return Status::Ok();
      }
      if (type == "ByteLevel") {
        byte_level = true;
        if (node.value("add_prefix_space", false)) steps.push_back({Step::kAddPrefixSpace});
        if (node.value("use_regex", true)) {
          auto compiled = UnicodeRegex::compile(kGpt2Pattern);
          if (!compiled.ok()) return Error{compiled.error().message};
          steps.push_back({Step::kSplit, std::shared_ptr<UnicodeRegex>(std::move(*compiled))});
        }
        return Status::Ok();
      }
      if (type == "Metaspace") {
        Step s{Step::kMetaspace};
        s.a = node.value("replacement", kMetaspace);
        const std::string scheme =
            node.value("prepend_scheme", node.value("add_prefix_space", true) ? "always" : "never");
        s.prepend = scheme != "never";
        s.b = node.value("split", true) ? "split" : "";
        steps.push_back(std::move(s));
        return Status::Ok();
      }
      if (type == "Prepend") {
        steps.push_back({Step::kPrepend, nullptr, node.at("prepend").get<std::string>()});
        return Status::Ok();
      }
      if (type == "NFC") {  // Qwen's tokenizers
        steps.push_back({Step::kNfc});
        return Status::Ok();
      }
      if (type == "Replace") {
        const json& pattern = node.at("pattern");
        if (!pattern.contains("String")) return Error{field + ": only string Replace patterns"};
        steps.push_back({Step::kReplace, nullptr, pattern.at("String").get<std::string>(),
                         node.at("content").get<std::string>()});
        return Status::Ok();
      }
      return Error{field + ": type '" + type + "' is not supported"};
    };
    where = "tokenizer.json";
    if (Status s =
            add_steps(add_steps, j.value("normalizer", json()), "normalizer", t->normalizers_);
        !s.ok())
      return Error{where + ": " + s.message()};
    if (Status s = add_steps(add_steps, j.value("pre_tokenizer", json()), "pre_tokenizer",
                             t->pre_tokenizers_);
        !s.ok())
      return Error{where + ": " + s.message()};
    if (j.value("decoder", json()).is_object() && j["decoder"].value("type", "") == "ByteLevel")
      byte_level = true;
    if (const json& d = j.value("decoder", json());
        d.is_object() && d.contains("decoders") && d["decoders"].is_array()) {
      for (const json& step : d["decoders"]) {
        if (step.is_object() && step.value("type", "") == "Strip" &&
            step.value("content", "") == " " && step.value("start", 0) > 0) {
          t->decode_strip_start_ = step.value("start", 0);
        }
      }
    }
    for (const Step& s : t->normalizers_)
      if (s.kind == Step::kSplit || s.kind == Step::kMetaspace)
        return Error{where + ": normalizer: unsupported step"};

    // The vocabulary: pieces as written, and the bytes each stands for.
    const json& vocab = model.at("vocab");
    if (!vocab.is_object()) return Error{where + ": model.vocab: expected an object"};
    TokenVocab bytes_to_id;
    int32_t max_id = -1;
    std::vector<std::pair<int32_t, std::string>> entries;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
          it.value().get<int64_t>() > (1 << 24)) {
        return Error{where + ": model.vocab['" + it.key() + "']: expected an id 0..2^24"};
      }
      const auto id = it.value().get<int32_t>();
      max_id = std::max(max_id, id);
      entries.emplace_back(id, it.key());
    }
    auto as_bytes = [&](const std::string& piece) -> std::optional<std::string> {
      if (!byte_level) return piece;
      return from_byte_alphabet(piece);
    };
    for (const auto& [id, piece] : entries) {
      const std::optional<std::string> b = as_bytes(piece);
      if (!b) return Error{where + ": model.vocab: '" + piece + "' is not byte-level text"};
      bytes_to_id.emplace(*b, id);
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (size_t i = 0; i < model.at("merges").size(); ++i) {
      const json& m = model["merges"][i];
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          return Error{where + ": model.merges[" + std::to_string(i) + "]: expected 'A B'"};
        a = s.substr(0, space), b = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>(), b = m[1].get<std::string>();
      } else {
        return Error{where + ": model.merges[" + std::to_string(i) + "]: expected 'A B' or [A, B]"};
      }
      auto ba = as_bytes(a), bb = as_bytes(b);
      if (!ba || !bb)
        return Error{where + ": model.merges[" + std::to_string(i) + "]: not byte-level text"};
      merges.emplace_back(std::move(*ba), std::move(*bb));
    }
    BpeModel::Options options;
    options.byte_level = byte_level;
    options.ignore_merges = model.value("ignore_merges", false);
    options.byte_fallback = model.value("byte_fallback", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const auto it = vocab.find(model["unk_token"].get<std::string>());
      if (it != vocab.end()) options.unk = it->get<int32_t>();
    }

    // Added tokens: matched before everything else.
    for (const json& a : j.value("added_tokens", json::array())) {
      Added added{a.at("content").get<std::string>(), a.at("id").get<int32_t>(),
                  a.value("special", false), a.value("lstrip", false), a.value("rstrip", false)};
      if (added.id < 0 || added.id > (1 << 24) || added.content.empty())
        return Error{where + ": added_tokens: '" + added.content + "' has a bad id or no text"};
      max_id = std::max(max_id, added.id);
      t->added_.push_back(std::move(added));
    }
    std::stable_sort(t->added_.begin(), t->added_.end(), [](const Added& x, const Added& y) {
      return x.content.size() > y.content.size();
    });
    for (const Added& a : t->added_)
      t->added_first_byte_[static_cast<unsigned char>(a.content[0])] = true;

    t->pieces_.assign(max_id + 1, std::string());
    t->bytes_.assign(max_id + 1, std::string());
    t->special_.assign(max_id + 1, false);
    // How a non-byte-level piece reads back: SentencePiece's space, <0xNN> bytes.
    auto piece_bytes = [&](const std::string& piece) {
      if (byte_level) return *from_byte_alphabet(piece);
      if (options.byte_fallback && piece.size() == 6 && piece.starts_with("<0x") &&
          piece.back() == '>') {
        return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
      }
      std::string text = piece;
      replace_all(text, kMetaspace, " ");
      return text;
    };
    for (const auto& [id, piece] : entries) {
      t->pieces_[id] = piece;
      t->bytes_[id] = piece_bytes(piece);
    }
    for (const Added& a : t->added_) {
      t->pieces_[a.id] = a.content;
      t->bytes_[a.id] = a.content;
      t->special_[a.id] = a.special;
    }
    auto bpe = BpeModel::create(std::move(bytes_to_id), merges, options);
    if (!bpe.ok()) return Error{where + ": " + bpe.error().message};
    t->model_.emplace(std::move(*bpe));
    // Only byte-level BPE with no text-changing step gives its input back byte for byte. NFC
    // counts as none: it changes only text that is not in NFC already (what clients send is),
    // and then the blocks the replica reports are the NFC bytes, which route requests that say
    // the same thing in NFC to the KV they reuse (the cache itself is keyed by token ids).
    t->round_trips_ = byte_level;
    for (const Step& s : t->normalizers_)
      if (s.kind != Step::kNfc) t->round_trips_ = false;
    for (const Step& s : t->pre_tokenizers_)
      if (s.kind != Step::kSplit) t->round_trips_ = false;

    // A TemplateProcessing post-processor (alone or in a Sequence) puts special tokens around
    // a single text: BOS for Llama 3's official file. They apply to completion prompts.
    std::vector<json> processors = {j.value("post_processor", json())};
    for (size_t k = 0; k < processors.size(); ++k) {
      const json& p = processors[k];
      if (!p.is_object()) continue;
      if (p.value("type", "") == "Sequence") {
        for (const json& sub : p.value("processors", json::array()))
          processors.push_back(sub);
        continue;
      }
      if (p.value("type", "") != "TemplateProcessing") continue;
      bool after = false;
      for (const json& piece : p.at("single")) {
        if (piece.contains("Sequence")) {
          after = true;
          continue;
        }
        const std::string key = piece.at("SpecialToken").at("id").get<std::string>();
        std::vector<std::string> texts = {key};
        if (p.contains("special_tokens") && p["special_tokens"].contains(key))
          texts = p["special_tokens"][key].value("tokens", texts);
        for (const std::string& text : texts) {
          if (!t->token_id(text))
            return Error{where + ": post_processor: '" + text + "' is not a token"};
          (after ? t->completion_suffix_ : t->completion_prefix_) += text;
        }
      }
    }

    where = "tokenizer_config.json";
    if (!config_json.empty()) {
      const json c = json::parse(config_json);
      if (c.contains("chat_template")) {
        const json& tpl = c["chat_template"];
        if (tpl.is_string()) {
          t->chat_.chat_template = tpl.get<std::string>();
        } else if (tpl.is_array()) {  // named templates: the "default" one
          for (const json& named : tpl)
            if (named.value("name", "") == "default")
              t->chat_.chat_template = named.value("template", "");
        }
      }
      t->chat_.bos_token = token_text(c.value("bos_token", json()));
      t->chat_.eos_token = token_text(c.value("eos_token", json()));
      if (auto id = t->token_id(t->chat_.eos_token)) t->eos_ = *id;
    }
    where = "generation_config.json";
    if (!generation_json.empty()) {
      const json g = json::parse(generation_json);
      const json ids = g.value("eos_token_id", json());
      for (const json& id : ids.is_array() ? ids : json::array({ids}))
        if (id.is_number_integer()) t->eos_ids_.push_back(id.get<int32_t>());
      if (t->eos_ < 0 && !t->eos_ids_.empty()) t->eos_ = t->eos_ids_.front();
    }
  } catch (const json::exception& e) {
    return Error{where + ": malformed: " + e.what()};
  } catch (const std::exception& e) {
    return Error{where + ": " + e.what()};
  }
  return t;
}

std::string HfTokenizer::decode_sequence(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids)
    text += token_bytes(id);
  size_t strip = 0;
  while (strip < static_cast<size_t>(decode_strip_start_) && strip < text.size() &&
         text[strip] == ' ')
    ++strip;
  return text.substr(strip);
}

const std::string& HfTokenizer::piece(int32_t token) const {
  static const std::string none;
  return token >= 0 && token < vocab_size() ? pieces_[token] : none;
}

std::optional<int32_t> HfTokenizer::token_id(std::string_view text) const {
  for (const Added& a : added_)
    if (a.content == text) return a.id;
  for (int32_t id = 0; id < vocab_size(); ++id)
    if (pieces_[id] == text) return id;
  return std::nullopt;
}

bool HfTokenizer::is_special(int32_t token) const {
  return token >= 0 && token < vocab_size() && special_[token];
}

bool HfTokenizer::is_eos(int32_t token) const {
  return token == eos_ || std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
}

std::vector<int32_t> HfTokenizer::eos_tokens() const {
  std::vector<int32_t> ids = eos_ids_;
  if (eos_ >= 0) ids.push_back(eos_);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string HfTokenizer::decode(int32_t token) const {
  if (token < 0 || token >= vocab_size() || special_[token]) return {};
  return bytes_[token];
}

std::string HfTokenizer::token_bytes(int32_t token) const {
  if (token < 0 || token >= vocab_size()) return {};
  return bytes_[token];
}

const HfTokenizer::Added* HfTokenizer::added_at(std::string_view text, size_t at) const {
  if (!added_first_byte_[static_cast<unsigned char>(text[at])]) return nullptr;
  for (const Added& a : added_)
    if (text.compare(at, a.content.size(), a.content) == 0) return &a;
  return nullptr;
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  return encode(text, {});
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text,
                                         std::span<const TextSpan> literal) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  size_t segment = 0;  // start of the text not yet encoded
  size_t next_literal = 0;
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  for (size_t at = 0; at < text.size();) {
    while (next_literal < literal.size() && literal[next_literal].end <= at)
      ++next_literal;
    if (next_literal < literal.size() && literal[next_literal].begin <= at) {
      at = literal[next_literal].end;  // the client's text: no added token starts in it
      continue;
    }
    const Added* a = added_at(text, at);
    // An added token reaching into a literal range is not matched either.
    if (a == nullptr ||
        (next_literal < literal.size() && at + a->content.size() > literal[next_literal].begin)) {
      ++at;
      continue;
    }
    size_t begin = at, end = at + a->content.size();
    if (a->lstrip)
      while (begin > segment && is_space(text[begin - 1]))
        --begin;
    if (a->rstrip)
      while (end < text.size() && is_space(text[end]))
        ++end;
    encode_segment(text.substr(segment, begin - segment), out);
    out.push_back(a->id);
    segment = at = end;
  }
  encode_segment(text.substr(segment), out);
  return out;
}

namespace {

// Unicode NFC (canonical composition) of valid UTF-8; bytes that are not valid UTF-8 are left as
// they are (transformers' tokenizers only see valid text; ours may see any bytes).
std::string nfc(const std::string& text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return text;
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

void HfTokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (normalizers_.empty()) return pre_tokenize(0, text, out);
  std::string normalized(text);
  for (const Step& s : normalizers_) {
    if (s.kind == Step::kPrepend) normalized.insert(0, s.a);
    if (s.kind == Step::kReplace) replace_all(normalized, s.a, s.b);
    if (s.kind == Step::kNfc) normalized = nfc(normalized);
  }
  pre_tokenize(0, normalized, out);
}

void HfTokenizer::pre_tokenize(size_t step, std::string_view piece,
                               std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (step == pre_tokenizers_.size()) return model_->encode(piece, out);
  const Step& s = pre_tokenizers_[step];
  switch (s.kind) {
    case Step::kSplit:
      utf8_runs(piece, [&](bool valid, std::string_view run) {
        if (!valid) return pre_tokenize(step + 1, run, out);
        s.regex->split(
            run, [&](size_t b, size_t e) { pre_tokenize(step + 1, run.substr(b, e - b), out); });
      });
      return;
    case Step::kAddPrefixSpace:
      if (piece[0] == ' ') return pre_tokenize(step + 1, piece, out);
      return pre_tokenize(step + 1, " " + std::string(piece), out);
    case Step::kMetaspace: {
      std::string text(piece);
      replace_all(text, " ", s.a);
      if (s.prepend && !text.starts_with(s.a)) text.insert(0, s.a);
      if (s.b.empty()) return pre_tokenize(step + 1, text, out);
      // Split before each replacement character, keeping it with the text that follows.
      size_t from = 0;
      for (size_t at = text.find(s.a, 1); at != std::string::npos; at = text.find(s.a, at + 1)) {
        pre_tokenize(step + 1, std::string_view(text).substr(from, at - from), out);
        from = at;
      }
      return pre_tokenize(step + 1, std::string_view(text).substr(from), out);
    }
    case Step::kPrepend:  // normalizer steps: never pre-tokenizers
    case Step::kReplace:
    case Step::kNfc:
      return pre_tokenize(step + 1, piece, out);
  }
}

}  // namespace kvc
