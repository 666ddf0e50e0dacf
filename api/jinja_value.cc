#include "api/jinja_value.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace kvc::jinja {

void Text::append(const Text& other) {
  // Decided before appending: an empty text has no flags, and sizing its flags to its zero bytes
  // leaves them empty, which read as "none" would drop the flags of the text appended to it (the
  // first output of every template: the client's text there could spell special tokens).
  if (literal.empty() && other.literal.empty()) {
    s += other.s;
    return;
  }
  literal.resize(s.size(), '\0');  // bytes that had no flags are not the client's
  if (other.literal.empty()) {
    literal.append(other.s.size(), '\0');
  } else {
    literal += other.literal;
  }
  s += other.s;
}

Text Text::substr(size_t pos, size_t n) const {
  Text t;
  if (pos > s.size()) return t;
  t.s = s.substr(pos, n);
  if (!literal.empty()) t.literal = literal.substr(pos, n);
  return t;
}

Value Value::string(std::string s, bool literal) {
  Text t;
  if (literal) t.literal.assign(s.size(), '\1');
  t.s = std::move(s);
  return text(std::move(t));
}

Value Value::text(Text t) {
  Value x = with(Kind::kString);
  x.str = std::make_shared<Text>(std::move(t));
  return x;
}

Value Value::array(Array a) {
  Value x = with(Kind::kArray);
  x.arr = std::make_shared<Array>(std::move(a));
  return x;
}

Value Value::object(Object o) {
  Value x = with(Kind::kObject);
  x.obj = std::make_shared<Object>(std::move(o));
  return x;
}

Value Value::function(Function f) {
  Value x = with(Kind::kFunction);
  x.fn = std::make_shared<Function>(std::move(f));
  return x;
}

namespace {

template <typename BasicJson>
Value value_from_json(const BasicJson& j, bool literal) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_float:
      return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get<std::string>(), literal);
    case nlohmann::json::value_t::array: {
      Array a;
      for (const auto& e : j)
        a.push_back(value_from_json(e, literal));
      return Value::array(std::move(a));
    }
    case nlohmann::json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it)
        o.emplace_back(it.key(), value_from_json(it.value(), literal));
      return Value::object(std::move(o));
    }
    default:
      return Value();
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j, bool literal) {
  return value_from_json(j, literal);
}

Value Value::from_json(const nlohmann::ordered_json& j, bool literal) {
  return value_from_json(j, literal);
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b;
    case Kind::kInt:
      return i != 0;
    case Kind::kFloat:
      return f != 0;
    case Kind::kString:
      return !str->s.empty();
    case Kind::kArray:
      return !arr->empty();
    case Kind::kObject:
      return !obj->empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

Value Value::member(const std::string& key) const {
  if (kind != Kind::kObject) return Value();
  for (const auto& [k, v] : *obj)
    if (k == key) return v;
  return Value();
}

namespace {

std::string number_text(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == std::floor(f) && std::fabs(f) < 1e16) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", f);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", f);
  // Shortest text that reads back the same (as Python's repr).
  for (int p = 1; p <= 17; ++p) {
    char t[32];
    std::snprintf(t, sizeof(t), "%.*g", p, f);
    if (std::strtod(t, nullptr) == f) return t;
  }
  return buf;
}

// Python's repr of a string inside a printed list or dict.
std::string repr(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + q;
}

// A JSON string; bytes that are not UTF-8 become U+FFFD (client text may hold any bytes).
std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string inner_text(const Value& v) {
  return v.is_string() ? repr(v.str->s) : v.to_text().s;
}

}  // namespace

Text Value::to_text() const {
  Text t;
  switch (kind) {
    case Kind::kUndefined:
      break;
    case Kind::kNone:
      t.s = "None";
      break;
    case Kind::kBool:
      t.s = b ? "True" : "False";
      break;
    case Kind::kInt:
      t.s = std::to_string(i);
      break;
    case Kind::kFloat:
      t.s = number_text(f);
      break;
    case Kind::kString:
      return *str;
    case Kind::kArray: {
      t.s = "[";
      bool literal = false;
      for (size_t k = 0; k < arr->size(); ++k) {
        if (k > 0) t.s += ", ";
        t.s += inner_text((*arr)[k]);
        literal = literal || (*arr)[k].to_text().any_literal();
      }
      t.s += "]";
      if (literal) t.literal.assign(t.s.size(), '\1');
      break;
    }
    case Kind::kObject: {
      t.s = "{";
      bool literal = false;
      for (size_t k = 0; k < obj->size(); ++k) {
        if (k > 0) t.s += ", ";
        t.s += repr((*obj)[k].first) + ": " + inner_text((*obj)[k].second);
        literal = literal || (*obj)[k].second.to_text().any_literal();
      }
      t.s += "}";
      if (literal) t.literal.assign(t.s.size(), '\1');
      break;
    }
    case Kind::kFunction:
      t.s = "<function>";
      break;
  }
  return t;
}

std::string Value::to_json(int indent, int depth) const {
  const std::string nl =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * (depth + 1), ' ') : "";
  const std::string close_nl =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * depth, ' ') : "";
  const std::string sep = indent >= 0 ? "," : ", ";
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone:
    case Kind::kFunction:
      return "null";
    case Kind::kBool:
      return b ? "true" : "false";
    case Kind::kInt:
      return std::to_string(i);
    case Kind::kFloat:
      return number_text(f);
    case Kind::kString:
      return json_string(str->s);
    case Kind::kArray: {
      if (arr->empty()) return "[]";
      std::string out = "[";
      for (size_t k = 0; k < arr->size(); ++k)
        out += (k > 0 ? sep : "") + nl + (*arr)[k].to_json(indent, depth + 1);
      return out + close_nl + "]";
    }
    case Kind::kObject: {
      if (obj->empty()) return "{}";
      std::string out = "{";
      for (size_t k = 0; k < obj->size(); ++k) {
        out += (k > 0 ? sep : "") + nl + json_string((*obj)[k].first) + ": " +
               (*obj)[k].second.to_json(indent, depth + 1);
      }
      return out + close_nl + "}";
    }
  }
  return "null";
}

const char* Value::type_name() const {
  switch (kind) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "none";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
    case Kind::kFloat:
      return "number";
    case Kind::kString:
      return "string";
    case Kind::kArray:
      return "list";
    case Kind::kObject:
      return "dict";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.kind == Value::Kind::kBool && b.is_number()) return (a.b ? 1.0 : 0.0) == b.as_double();
  if (b.kind == Value::Kind::kBool && a.is_number()) return equal(b, a);
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kBool:
      return a.b == b.b;
    case Value::Kind::kString:
      return a.str->s == b.str->s;
    case Value::Kind::kArray:
      if (a.arr->size() != b.arr->size()) return false;
      for (size_t k = 0; k < a.arr->size(); ++k)
        if (!equal((*a.arr)[k], (*b.arr)[k])) return false;
      return true;
    case Value::Kind::kObject:
      if (a.obj->size() != b.obj->size()) return false;
      for (const auto& [key, v] : *a.obj)
        if (!equal(v, b.member(key))) return false;
      return true;
    default:
      return a.fn == b.fn;
  }
}

}  // namespace kvc::jinja
