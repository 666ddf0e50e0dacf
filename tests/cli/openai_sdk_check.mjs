// The official OpenAI Node SDK (npm `openai`, fetched by scripts/fetch-npm-refs.sh) against a
// kvcascade router: logprobs on completions and chat, whole and streamed, token ids, weight
// versions. Usage: node openai_sdk_check.mjs BASE_URL MODEL NPM_DIR (NPM_DIR/node_modules holds
// the SDK). Exits non-zero when a check fails, naming each.
import { createRequire } from "node:module";

const [base, model, npmDir] = process.argv.slice(2);
const OpenAI = createRequire(npmDir + "/node_modules/")("openai").default;
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused" });
let failed = 0;
function check(cond, what) {
  console.log((cond ? "ok   " : "FAIL ") + what);
  if (!cond) failed++;
}

const prompt = "A long shared system prompt for the SDK check, repeated. ".repeat(8);
const c = await client.completions.create({
  model, prompt, max_tokens: 8, logprobs: 3, temperature: 0.8, seed: 1,
  ignore_eos: true, return_token_ids: true,
});
const lp = c.choices[0].logprobs;
check(lp && lp.tokens.length === 8 && lp.token_logprobs.length === 8, "completions: 8 logprobs");
check(lp.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 4),
      "completions: top_logprobs dicts of the top 3 and the sampled token");
check(lp.token_logprobs.every((x) => x <= 0), "completions: logprobs <= 0");
check(c.choices[0].token_ids.length === 8 && c.choices[0].prompt_token_ids.length > 0,
      "completions: return_token_ids");
check(typeof c.weight_version === "string" && c.weight_version.length > 0,
      "completions: weight_version");

const chat = await client.chat.completions.create({
  model, messages: [{ role: "user", content: prompt }], max_tokens: 6, logprobs: true,
  top_logprobs: 2, ignore_eos: true,
});
const content = chat.choices[0].logprobs.content;
check(content.length === 6, "chat: 6 logprob entries");
check(content.every((t) => t.top_logprobs.length === 2 && Array.isArray(t.bytes)),
      "chat: top_logprobs of 2 and bytes");

const stream = await client.chat.completions.create({
  model, messages: [{ role: "user", content: prompt }], max_tokens: 5, logprobs: true,
  top_logprobs: 1, ignore_eos: true, stream: true,
});
let streamed = 0;
for await (const chunk of stream)
  for (const ch of chunk.choices) streamed += ch.logprobs?.content?.length ?? 0;
check(streamed === 5, "chat stream: a logprob entry per token (" + streamed + ")");

const bad = await client.completions.create({ model, prompt, logprobs: 21 }).catch((e) => e);
check(bad instanceof OpenAI.BadRequestError && bad.param === "logprobs",
      "logprobs 21: a typed 400 naming the field");
process.exit(failed ? 1 : 0);
