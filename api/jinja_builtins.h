// The filters, methods, tests and global functions of the Jinja subset (jinja.h). Internal to
// prefix_index/jinja_*.cc. Errors carry no line: the renderer adds the node's.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "api/jinja_value.h"
#include "base/status.h"

namespace kvc::jinja {

// `v | f(args...)` (keyword arguments indent= and attribute= appended to args).
Result<Value> apply_filter(const std::string& f, const Value& v, std::vector<Value>& args);
// `self.m(args...)` for strings, dicts and lists.
Result<Value> call_method(const Value& self, const std::string& m, std::vector<Value>& args);
// `v is t(args...)`, before any `not`.
Result<bool> apply_test(const std::string& t, const Value& v, const std::vector<Value>& args);
// raise_exception, namespace, range.
std::vector<std::pair<std::string, Value>> global_functions();

}  // namespace kvc::jinja
