// The subset of Jinja that chat templates use (tokenizer_config.json's chat_template), rendered
// the way Hugging Face renders it (trim_blocks and lstrip_blocks on, a trailing newline dropped):
//   text, {{ expr }}, {# comments #}, whitespace control ({%- -%}), {% if / elif / else %},
//   {% for x in xs [if cond] %} ... {% else %} with loop.index/index0/first/last/length/
//   revindex/revindex0/previtem/nextitem, {% set x = e %}, {% set ns.attr = e %},
//   {% set x %}...{% endset %}, {% generation %} (ignored);
//   literals, lists, dicts, attribute/index/slice access, calls, filters (trim, upper, lower,
//   capitalize, title, length, count, first, last, join, default, replace, tojson, string, int,
//   float, list, reverse, items, safe, abs, round, unique, select/rejectattr, map), tests (is
//   defined, none, string, number, ...), `in`, `~`, arithmetic, comparisons, `a if c else b`;
//   string methods (strip, split, startswith, replace, ...), dict.items/keys/values/get;
//   globals raise_exception, namespace, range.
// Anything else is an error naming the line: at parse time for unknown tags, at render time for
// unknown filters or methods. Rendering has a step budget, so no template can spin forever.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/jinja_value.h"
#include "base/status.h"

namespace kvc::jinja {

struct Node;

class Template {
 public:
  static Result<Template> parse(std::string_view source);

  // Renders with these variables; the result's literal flags mark the client's text.
  Result<Text> render(const std::vector<std::pair<std::string, Value>>& variables) const;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace kvc::jinja
