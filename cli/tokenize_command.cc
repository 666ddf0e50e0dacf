// `kvcascade tokenize`: a model's tokenizer on the command line. Text in, ids and pieces out
// (--json for a machine), or ids in, text out (--detokenize).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "replica/tokenizer/hf_tokenizer.h"

namespace kvc::cli {
namespace {

struct TokenizeFlags {
  std::string dir;
  std::string text;
  std::string file;
  bool json = false;
  bool detokenize = false;
};

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Token ids as whitespace- or comma-separated integers, or a JSON array.
Result<std::vector<int32_t>> parse_ids(const std::string& text, int32_t vocab) {
  std::string spaced = text;
  for (char& c : spaced)
    if (c == ',' || c == '[' || c == ']') c = ' ';
  std::istringstream in(spaced);
  std::vector<int32_t> ids;
  for (std::string word; in >> word;) {
    char* end = nullptr;
    const long id = std::strtol(word.c_str(), &end, 10);
    if (*end != '\0' || id < 0 || id >= vocab) {
      return Error{"'" + word + "' is not a token id (0.." + std::to_string(vocab - 1) + ")"};
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

int run_tokenize(const TokenizeFlags& f) {
  std::string input = f.text;
  if (!f.file.empty()) {
    std::ifstream in(f.file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "kvcascade tokenize: cannot read %s\n", f.file.c_str());
      return 2;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    input = ss.str();
  }
  auto tok = HfTokenizer::load_dir(f.dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "kvcascade tokenize: %s\n", tok.error().message.c_str());
    return 2;
  }
  const HfTokenizer& t = **tok;
  if (f.detokenize) {
    auto ids = parse_ids(input, t.vocab_size());
    if (!ids.ok()) {
      std::fprintf(stderr, "kvcascade tokenize: %s\n", ids.error().message.c_str());
      return 2;
    }
    // Special tokens included, and the decoder's leading Strip, as Hugging Face's decode does.
    const std::string text = t.decode_sequence(*ids);
    if (f.json) {
      std::printf("%s\n", dump({{"text", text}}).c_str());
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::printf("\n");
    }
    return 0;
  }
  const std::vector<int32_t> ids = t.encode(input);
  if (f.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids)
      pieces.push_back(t.piece(id));
    std::printf("%s\n", dump({{"ids", ids}, {"pieces", pieces}}).c_str());
    return 0;
  }
  for (int32_t id : ids) {
    // The piece as tokenizer.json writes it ("Ġthe": always valid UTF-8, unlike a token's bytes,
    // which may be part of a character), then its text as a JSON string.
    std::printf("%d\t%s\t%s\n", id, t.piece(id).c_str(), dump(t.token_bytes(id)).c_str());
  }
  std::printf("%zu tokens, %zu bytes\n", ids.size(), input.size());
  return 0;
}

}  // namespace

Run add_tokenize_command(CLI::App& app) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "encode text with a model's Hugging Face tokenizer (or decode ids)");
  cmd->add_option("--model,--tokenizer", f->dir,
                  "folder holding tokenizer.json (a model folder or a tokenizer folder)")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto* text = cmd->add_option("--text", f->text, "the text (with --detokenize: the ids)");
  auto* file = cmd->add_option("--file", f->file, "read the text (or ids) from this file");
  text->excludes(file);
  cmd->add_flag("--json", f->json,
                "print JSON: {\"ids\": [...], \"pieces\": [...]}; with --detokenize, "
                "{\"text\": \"...\"}");
  cmd->add_flag("--detokenize", f->detokenize, "the input is token ids: print their text");
  cmd->callback([text, file] {
    if (text->count() + file->count() == 0) throw CLI::ValidationError("give --text or --file");
  });
  return [f] { return run_tokenize(*f); };
}

}  // namespace kvc::cli
