// Values of the Jinja subset (jinja.h). Strings remember which of their bytes are the client's
// text ("literal" bytes, from the request's messages) through concatenation, slicing and
// trimming, so a rendered chat prompt knows which ranges its tokenizer must not read special
// tokens in (text_span.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace kvc::jinja {

// A string and, when any of it is the client's text, one flag byte per byte (1: literal).
struct Text {
  std::string s;
  std::string literal;  // empty, or s.size() flags

  bool any_literal() const { return literal.find('\1') != std::string::npos; }
  void append(const Text& other);
  Text substr(size_t pos, size_t n = std::string::npos) const;
};

struct Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, as JSON text
using Function = std::function<Result<Value>(std::vector<Value>& args,
                                             std::vector<std::pair<std::string, Value>>& kwargs)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<Text> str;
  std::shared_ptr<Array> arr;
  std::shared_ptr<Object> obj;  // shared: a namespace() is mutated through every copy
  std::shared_ptr<Function> fn;

  static Value none() { return with(Kind::kNone); }
  static Value boolean(bool v) {
    Value x = with(Kind::kBool);
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x = with(Kind::kInt);
    x.i = v;
    return x;
  }
  static Value number(double v) {
    Value x = with(Kind::kFloat);
    x.f = v;
    return x;
  }
  static Value string(std::string s, bool literal = false);
  static Value text(Text t);
  static Value array(Array a = {});
  static Value object(Object o = {});
  static Value function(Function f);
  // JSON to a value; every string in it is literal when `literal` (the client's messages).
  static Value from_json(const nlohmann::json& j, bool literal);
  static Value from_json(const nlohmann::ordered_json& j, bool literal);  // keys in their order

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool truthy() const;
  double as_double() const { return kind == Kind::kInt ? static_cast<double>(i) : f; }
  // The member `key` of an object, or undefined.
  Value member(const std::string& key) const;
  // As Jinja prints it ("None", "True", "[1, 'a']"); strings keep their literal flags.
  Text to_text() const;
  // JSON text (Python's json.dumps layout: ", " and ": ").
  std::string to_json(int indent = -1, int depth = 0) const;
  const char* type_name() const;

 private:
  static Value with(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
};

bool equal(const Value& a, const Value& b);

}  // namespace kvc::jinja
