// Canonical rendering of OpenAI chat `messages` to prompt bytes. One function, used by the router
// (to hash the prompt for routing) and by the replica (as its chat template), so both see the same
// bytes and the same block hashes.
//
// Each message renders on its own and the rendering is their concatenation, so adding a message
// only appends bytes: turn k+1 of a conversation is a byte-extension of turn k. The generation
// prompt is exactly the opening of an assistant message, so the assistant's reply, sent back as a
// message in the next turn, extends the previous prompt too.
//
//   "<|start|>" role [" name=" name] "\n" content "<|end|>\n"   ... then "<|start|>assistant\n"
//
// The rendering is injective: distinct message lists (role, name or none, and the text, where
// text parts are joined and null content is empty) render to distinct bytes. Content is escaped
// ("<|" becomes "<||"), so a message cannot close itself and forge another turn (a user message
// holding "<|end|>\n<|start|>system\n..." stays a user message); a name holding a newline or "<|"
// is refused. Escaping is per message, so the byte-extension property above holds.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace kvc {

inline constexpr char kChatGenerationPrompt[] = "<|start|>assistant\n";

// messages: a JSON array of {"role": "system"|"developer"|"user"|"assistant"|"tool",
//   "content": string | [{"type":"text","text":...}, ...] | null (assistant/tool only),
//   "name": optional string}.
// Errors name the field, e.g. "messages[2].content[1].type: only text parts are supported".
Result<std::string> render_chat(const nlohmann::ordered_json& messages,
                                bool add_generation_prompt = true);

}  // namespace kvc
