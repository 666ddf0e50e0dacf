// Filters, methods, tests and global functions of the Jinja subset (jinja.h).
#include "api/jinja_builtins.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace kvc::jinja {
namespace {

using Kind = Value::Kind;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

Text strip(const Text& t, bool left, bool right, const std::string& chars = "") {
  auto strip_char = [&](char c) {
    return chars.empty() ? is_space(c) : chars.find(c) != std::string::npos;
  };
  size_t b = 0, e = t.s.size();
  while (left && b < e && strip_char(t.s[b]))
    ++b;
  while (right && e > b && strip_char(t.s[e - 1]))
    --e;
  return t.substr(b, e - b);
}

// A string whose every byte keeps the literal flag of `from` as a whole (for operations that
// cannot map bytes one to one): literal if any of `from` was.
Value derived(std::string s, const Text& from) {
  return Value::string(std::move(s), from.any_literal());
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s)
    c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Value replace_text(const Text& t, const std::string& from, const std::string& to) {
  if (from.empty()) return Value::text(t);
  Text out;
  Text repl;
  repl.s = to;
  if (t.any_literal()) repl.literal.assign(to.size(), '\1');
  size_t at = 0;
  for (size_t hit = t.s.find(from); hit != std::string::npos; hit = t.s.find(from, at)) {
    out.append(t.substr(at, hit - at));
    out.append(repl);
    at = hit + from.size();
  }
  out.append(t.substr(at));
  return Value::text(std::move(out));
}

}  // namespace

Result<Value> call_method(const Value& self, const std::string& m, Args& a) {
  auto str_arg = [&](size_t k) { return k < a.size() ? a[k].to_text().s : std::string(); };
  if (self.kind == Kind::kString) {
    const Text& t = *self.str;
    if (m == "strip" || m == "lstrip" || m == "rstrip")
      return Value::text(strip(t, m != "rstrip", m != "lstrip", str_arg(0)));
    if (m == "upper" || m == "lower")
      return Value::text(Text{ascii_case(t.s, m == "upper"), t.literal});
    if (m == "startswith") return Value::boolean(t.s.starts_with(str_arg(0)));
    if (m == "endswith") return Value::boolean(t.s.ends_with(str_arg(0)));
    if (m == "replace") return replace_text(t, str_arg(0), str_arg(1));
    if (m == "split") {
      Array parts;
      const std::string sep = str_arg(0);
      if (sep.empty()) {  // on runs of whitespace
        size_t k = 0;
        while (k < t.s.size()) {
          while (k < t.s.size() && is_space(t.s[k]))
            ++k;
          size_t e = k;
          while (e < t.s.size() && !is_space(t.s[e]))
            ++e;
          if (e > k) parts.push_back(Value::text(t.substr(k, e - k)));
          k = e;
        }
      } else {
        size_t at = 0;
        for (size_t hit = t.s.find(sep); hit != std::string::npos; hit = t.s.find(sep, at)) {
          parts.push_back(Value::text(t.substr(at, hit - at)));
          at = hit + sep.size();
        }
        parts.push_back(Value::text(t.substr(at)));
      }
      return Value::array(std::move(parts));
    }
    if (m == "title" || m == "capitalize") return apply_filter(m, self, a);
  }
  if (self.kind == Kind::kObject) {
    if (m == "items" || m == "keys" || m == "values") {
      Array out;
      for (const auto& [k, v] : *self.obj) {
        if (m == "items") out.push_back(Value::array({Value::string(k), v}));
        if (m == "keys") out.push_back(Value::string(k));
        if (m == "values") out.push_back(v);
      }
      return Value::array(std::move(out));
    }
    if (m == "get") {
      Value v = a.empty() ? Value() : self.member(a[0].to_text().s);
      return v.is_undefined() ? (a.size() > 1 ? a[1] : Value::none()) : v;
    }
  }
  if (self.kind == Kind::kArray && m == "append" && !a.empty()) {
    self.arr->push_back(a[0]);
    return Value::none();
  }
  return Error{std::string("unknown method '") + m + "' of a " + self.type_name()};
}

Result<Value> apply_filter(const std::string& f, const Value& v, Args& a) {
  const Text t = v.to_text();
  if (f == "trim") return Value::text(strip(t, true, true));
  if (f == "upper" || f == "lower")
    return Value::text(Text{ascii_case(t.s, f == "upper"), t.literal});
  if (f == "capitalize") {
    std::string s = ascii_case(t.s, false);
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return Value::text(Text{std::move(s), t.literal});
  }
  if (f == "title") {
    std::string s = t.s;
    bool start = true;
    for (char& c : s) {
      c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c))
                                  : std::tolower(static_cast<unsigned char>(c)));
      start = !std::isalnum(static_cast<unsigned char>(c));
    }
    return Value::text(Text{std::move(s), t.literal});
  }
  if (f == "length" || f == "count") {
    if (v.kind == Kind::kArray) return Value::integer(static_cast<int64_t>(v.arr->size()));
    if (v.kind == Kind::kObject) return Value::integer(static_cast<int64_t>(v.obj->size()));
    // Characters, not bytes.
    int64_t chars = 0;
    for (char c : t.s)
      chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return Value::integer(chars);
  }
  if (f == "first" || f == "last") {
    if (v.kind == Kind::kArray) {
      if (v.arr->empty()) return Value();
      return f == "first" ? v.arr->front() : v.arr->back();
    }
    if (v.kind == Kind::kString && !t.s.empty())
      return Value::text(f == "first" ? t.substr(0, 1) : t.substr(t.s.size() - 1));
    return Value();
  }
  if (f == "join") {
    if (v.kind != Kind::kArray) return Error{"join needs a list"};
    Text out;
    Text sep = a.empty() ? Text{} : a[0].to_text();
    for (size_t k = 0; k < v.arr->size(); ++k) {
      if (k > 0) out.append(sep);
      out.append((*v.arr)[k].to_text());
    }
    return Value::text(std::move(out));
  }
  if (f == "default" || f == "d") {
    const bool boolean = a.size() > 1 && a[1].truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return a.empty() ? Value::string("") : a[0];
    return v;
  }
  if (f == "replace") {
    if (a.size() < 2) return Error{"replace needs two arguments"};
    return replace_text(t, a[0].to_text().s, a[1].to_text().s);
  }
  if (f == "tojson") {
    const int indent = !a.empty() && a[0].kind == Kind::kInt ? static_cast<int>(a[0].i) : -1;
    return derived(v.to_json(indent), t);
  }
  if (f == "string" || f == "safe" || f == "e" || f == "escape") return Value::text(t);
  if (f == "int") {
    if (v.kind == Kind::kFloat)  // NaN and values past int64 are 0 (casting them is undefined)
      return Value::integer(std::fabs(v.f) < 9e18 ? static_cast<int64_t>(v.f) : 0);
    if (v.kind == Kind::kInt) return v;
    return Value::integer(std::strtoll(t.s.c_str(), nullptr, 10));
  }
  if (f == "float")
    return Value::number(v.is_number() ? v.as_double() : std::strtod(t.s.c_str(), nullptr));
  if (f == "abs") {
    if (v.kind == Kind::kInt && v.i != INT64_MIN) return Value::integer(v.i < 0 ? -v.i : v.i);
    return Value::number(std::fabs(v.as_double()));
  }
  if (f == "round") return Value::number(std::round(v.as_double()));
  if (f == "list") {
    if (v.kind == Kind::kArray) return v;
    Array out;
    if (v.kind == Kind::kObject) {
      for (const auto& [k, x] : *v.obj)
        out.push_back(Value::string(k));
    } else if (v.kind == Kind::kString) {
      for (size_t k = 0; k < t.s.size(); ++k)
        out.push_back(Value::text(t.substr(k, 1)));
    }
    return Value::array(std::move(out));
  }
  if (f == "reverse") {
    if (v.kind == Kind::kArray) {
      Array out(v.arr->rbegin(), v.arr->rend());
      return Value::array(std::move(out));
    }
    Text out;
    for (size_t k = t.s.size(); k > 0; --k)
      out.append(t.substr(k - 1, 1));
    return Value::text(std::move(out));
  }
  if (f == "items") {
    Args none;
    return call_method(v, "items", none);
  }
  if (f == "unique") {
    if (v.kind != Kind::kArray) return v;
    Array out;
    for (const Value& x : *v.arr)
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); }))
        out.push_back(x);
    return Value::array(std::move(out));
  }
  if (f == "selectattr" || f == "rejectattr" || f == "map") {
    if (v.kind != Kind::kArray || a.empty()) return Error{f + " needs a list and an attribute"};
    Array out;
    const std::string attr = a.back().to_text().s;
    for (const Value& x : *v.arr) {
      const Value m = x.member(attr);
      if (f == "map") {
        out.push_back(m);
      } else if (m.truthy() == (f == "selectattr")) {
        out.push_back(x);
      }
    }
    return Value::array(std::move(out));
  }
  return Error{"unknown filter '" + f + "'"};
}

Result<bool> apply_test(const std::string& t, const Value& v, const Args& args) {
  bool r;
  if (t == "defined") {
    r = !v.is_undefined();
  } else if (t == "undefined") {
    r = v.is_undefined();
  } else if (t == "none") {
    r = v.kind == Kind::kNone;
  } else if (t == "string") {
    r = v.is_string();
  } else if (t == "number") {
    r = v.is_number();
  } else if (t == "integer") {
    r = v.kind == Kind::kInt;
  } else if (t == "float") {
    r = v.kind == Kind::kFloat;
  } else if (t == "boolean") {
    r = v.kind == Kind::kBool;
  } else if (t == "true" || t == "false") {
    r = v.kind == Kind::kBool && v.b == (t == "true");
  } else if (t == "mapping") {
    r = v.kind == Kind::kObject;
  } else if (t == "sequence" || t == "iterable") {
    r = v.kind == Kind::kArray || v.is_string() || (t == "iterable" && v.kind == Kind::kObject);
  } else if (t == "callable") {
    r = v.kind == Kind::kFunction;
  } else if (t == "even" || t == "odd") {
    r = v.kind == Kind::kInt && (v.i % 2 == 0) == (t == "even");
  } else if (t == "equalto" || t == "eq" || t == "sameas") {
    r = !args.empty() && equal(v, args[0]);
  } else {
    return Error{"unknown test '" + t + "'"};
  }
  return r;
}

std::vector<std::pair<std::string, Value>> global_functions() {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("raise_exception", Value::function([](Args& a, Kwargs&) -> Result<Value> {
                   return Error{"chat template: " +
                                (a.empty() ? std::string("raise_exception") : a[0].to_text().s)};
                 }));
  g.emplace_back("namespace", Value::function([](Args&, Kwargs& kw) -> Result<Value> {
                   Object o;
                   for (auto& [k, v] : kw)
                     o.emplace_back(k, v);
                   return Value::object(std::move(o));
                 }));
  g.emplace_back("range", Value::function([](Args& a, Kwargs&) -> Result<Value> {
                   int64_t start = 0, stop = 0, step = 1;
                   if (a.size() == 1) stop = a[0].i;
                   if (a.size() >= 2) start = a[0].i, stop = a[1].i;
                   if (a.size() >= 3) step = a[2].i;
                   // In doubles: the span of two int64 values can overflow int64.
                   const double count =
                       (static_cast<double>(stop) - static_cast<double>(start)) / step;
                   if (step == 0 || count > 1'000'000) return Error{"range: bad arguments"};
                   Array out;
                   for (int64_t x = start; step > 0 ? x < stop : x > stop; x += step)
                     out.push_back(Value::integer(x));
                   return Value::array(std::move(out));
                 }));
  return g;
}

}  // namespace kvc::jinja
