// The Jinja interpreter (jinja.h): statements write into a Text, expressions give Values.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <unordered_map>

#include "api/jinja.h"
#include "api/jinja_ast.h"
#include "api/jinja_builtins.h"

namespace kvc::jinja {
namespace {

// Nodes evaluated per render, and bytes of output: a template cannot run or grow without bound.
constexpr int64_t kMaxSteps = 5'000'000;
constexpr size_t kMaxOutputBytes = 64u << 20;

using Kind = Value::Kind;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

class Renderer {
 public:
  Renderer(const std::vector<std::pair<std::string, Value>>& variables) {
    scopes_.emplace_back();
    auto& globals = scopes_.back();
    for (auto& [k, v] : global_functions())
      globals[k] = std::move(v);
    for (const auto& [k, v] : variables)
      globals[k] = v;
  }

  Status exec(const Node& n, Text& out) {
    if (++steps_ > kMaxSteps) return fail(n, "the template ran too long");
    switch (n.kind) {
      case Node::Kind::kBlock:
        for (const auto& c : n.children)
          if (Status s = exec(*c, out); !s.ok()) return s;
        return Status::Ok();
      case Node::Kind::kText:
        out.append(*n.value.str);
        return check_size(n, out);
      case Node::Kind::kOutput: {
        auto v = eval(*n.children[0]);
        if (!v.ok()) return Error{v.error().message};
        out.append(v->to_text());
        return check_size(n, out);
      }
      case Node::Kind::kIf: {
        auto cond = eval(*n.children[0]);
        if (!cond.ok()) return Error{cond.error().message};
        return exec(*n.children[cond->truthy() ? 1 : 2], out);
      }
      case Node::Kind::kFor:
        return exec_for(n, out);
      case Node::Kind::kSet: {
        auto v = eval(*n.children[0]);
        if (!v.ok()) return Error{v.error().message};
        return assign(n, std::move(*v));
      }
      case Node::Kind::kSetBlock: {
        Text body;
        if (Status s = exec(*n.children[0], body); !s.ok()) return s;
        return assign(n, Value::text(std::move(body)));
      }
      default:
        return fail(n, "not a statement");
    }
  }

 private:
  static Error fail(const Node& n, const std::string& what) {
    return Error{"chat template line " + std::to_string(n.line) + ": " + what};
  }
  Status check_size(const Node& n, const Text& out) const {
    if (out.s.size() > kMaxOutputBytes) return fail(n, "the output is too large");
    return Status::Ok();
  }

  Status assign(const Node& n, Value v) {
    if (n.names.size() == 1) {
      scopes_.back()[n.names[0]] = std::move(v);
      return Status::Ok();
    }
    Value target = lookup(n.names[0]);
    if (target.kind != Kind::kObject) return fail(n, "'" + n.names[0] + "' is not a namespace");
    for (auto& [k, existing] : *target.obj) {
      if (k == n.names[1]) {
        existing = std::move(v);
        return Status::Ok();
      }
    }
    target.obj->emplace_back(n.names[1], std::move(v));
    return Status::Ok();
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value();
  }

  Status exec_for(const Node& n, Text& out) {
    auto iterable = eval(*n.children[0]);
    if (!iterable.ok()) return Error{iterable.error().message};
    Array items;
    if (iterable->kind == Kind::kArray) {
      items = *iterable->arr;
    } else if (iterable->kind == Kind::kObject) {
      for (const auto& [k, v] : *iterable->obj)
        items.push_back(Value::string(k));
    } else if (iterable->kind == Kind::kString) {
      for (size_t k = 0; k < iterable->str->s.size(); ++k)
        items.push_back(Value::text(iterable->str->substr(k, 1)));
    } else if (!iterable->is_undefined() && iterable->kind != Kind::kNone) {
      return fail(n, std::string("cannot loop over a ") + iterable->type_name());
    }
    auto bind = [&](const Value& item) -> Status {
      auto& scope = scopes_.back();
      if (n.names.size() == 1) {
        scope[n.names[0]] = item;
        return Status::Ok();
      }
      if (item.kind != Kind::kArray || item.arr->size() != n.names.size())
        return fail(n,
                    "cannot unpack a loop item into " + std::to_string(n.names.size()) + " names");
      for (size_t k = 0; k < n.names.size(); ++k)
        scope[n.names[k]] = (*item.arr)[k];
      return Status::Ok();
    };
    if (const Node* filter = n.child(3)) {  // {% for x in xs if cond %}: the loop sees only these
      Array kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        Status s = bind(item);
        auto keep = s.ok() ? eval(*filter) : Result<Value>(Error{s.message()});
        scopes_.pop_back();
        if (!keep.ok()) return Error{keep.error().message};
        if (keep->truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(*n.children[2], out);
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < length; ++k) {
      scopes_.emplace_back();
      Object loop = {{"index", Value::integer(k + 1)},
                     {"index0", Value::integer(k)},
                     {"revindex", Value::integer(length - k)},
                     {"revindex0", Value::integer(length - k - 1)},
                     {"first", Value::boolean(k == 0)},
                     {"last", Value::boolean(k == length - 1)},
                     {"length", Value::integer(length)},
                     {"previtem", k > 0 ? items[k - 1] : Value()},
                     {"nextitem", k + 1 < length ? items[k + 1] : Value()}};
      scopes_.back()["loop"] = Value::object(std::move(loop));
      Status s = bind(items[k]);
      if (s.ok()) s = exec(*n.children[1], out);
      scopes_.pop_back();
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  Result<Value> eval(const Node& n) {
    if (++steps_ > kMaxSteps) return fail(n, "the template ran too long");
    switch (n.kind) {
      case Node::Kind::kLiteral:
        return n.value;
      case Node::Kind::kName:
        return lookup(n.name);
      case Node::Kind::kList: {
        Array a;
        for (const auto& c : n.children) {
          auto v = eval(*c);
          if (!v.ok()) return v;
          a.push_back(std::move(*v));
        }
        return Value::array(std::move(a));
      }
      case Node::Kind::kDict: {
        Object o;
        for (size_t k = 0; k + 1 < n.children.size(); k += 2) {
          auto key = eval(*n.children[k]);
          if (!key.ok()) return key;
          auto v = eval(*n.children[k + 1]);
          if (!v.ok()) return v;
          o.emplace_back(key->to_text().s, std::move(*v));
        }
        return Value::object(std::move(o));
      }
      case Node::Kind::kAttr: {
        auto obj = eval(*n.children[0]);
        if (!obj.ok()) return obj;
        return attribute(*obj, n.name);
      }
      case Node::Kind::kIndex: {
        auto obj = eval(*n.children[0]);
        if (!obj.ok()) return obj;
        auto key = eval(*n.children[1]);
        if (!key.ok()) return key;
        return index(*obj, *key);
      }
      case Node::Kind::kSlice:
        return slice(n);
      case Node::Kind::kCall:
        return call(n);
      case Node::Kind::kFilter:
        return filter(n);
      case Node::Kind::kTest:
        return test(n);
      case Node::Kind::kUnary: {
        auto v = eval(*n.children[0]);
        if (!v.ok()) return v;
        if (n.name == "not") return Value::boolean(!v->truthy());
        if (v->kind == Kind::kInt && v->i != INT64_MIN)
          return Value::integer(n.name == "-" ? -v->i : v->i);
        if (v->kind == Kind::kFloat) return Value::number(n.name == "-" ? -v->f : v->f);
        return fail(n, std::string("unary ") + n.name + " of a " + v->type_name());
      }
      case Node::Kind::kBinary:
        return binary(n);
      case Node::Kind::kTernary: {
        auto cond = eval(*n.children[1]);
        if (!cond.ok()) return cond;
        if (cond->truthy()) return eval(*n.children[0]);
        if (const Node* otherwise = n.child(2)) return eval(*otherwise);
        return Value();
      }
      default:
        return fail(n, "not an expression");
    }
  }

  Result<Value> attribute(const Value& obj, const std::string& name) {
    if (obj.kind == Kind::kObject) {
      Value v = obj.member(name);
      const bool dict_method =
          name == "items" || name == "keys" || name == "values" || name == "get";
      if (!v.is_undefined() || !dict_method) return v;
    } else if (obj.kind != Kind::kString && obj.kind != Kind::kArray) {
      return Value();  // attributes of undefined, none, numbers: undefined (as Jinja prints them)
    }
    if (obj.kind == Kind::kArray && !name.empty() &&
        std::isdigit(static_cast<unsigned char>(name[0])))
      return index(obj, Value::integer(std::strtoll(name.c_str(), nullptr, 10)));
    // A method: bound when called (call()); here, its name on the object.
    Object bound = {{"__method__", Value::string(name)}, {"__self__", obj}};
    Value v = Value::object(std::move(bound));
    v.kind = Kind::kFunction;  // marks a bound method; fn stays null
    return v;
  }

  Result<Value> index(const Value& obj, const Value& key) {
    if (obj.kind == Kind::kObject) return obj.member(key.to_text().s);
    if ((obj.kind == Kind::kArray || obj.kind == Kind::kString) && key.kind == Kind::kInt) {
      const int64_t size = obj.kind == Kind::kArray ? static_cast<int64_t>(obj.arr->size())
                                                    : static_cast<int64_t>(obj.str->s.size());
      if (key.i < -size || key.i >= size) return Value();
      const int64_t k = key.i < 0 ? key.i + size : key.i;
      if (k < 0 || k >= size) return Value();
      if (obj.kind == Kind::kArray) return (*obj.arr)[k];
      return Value::text(obj.str->substr(static_cast<size_t>(k), 1));
    }
    return Value();
  }

  Result<Value> slice(const Node& n) {
    auto obj = eval(*n.children[0]);
    if (!obj.ok()) return obj;
    int64_t bounds[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (const Node* c = n.child(k + 1)) {
        auto v = eval(*c);
        if (!v.ok()) return v;
        if (v->kind != Kind::kInt) return fail(n, "slice bounds must be integers");
        bounds[k] = std::clamp<int64_t>(v->i, -(int64_t{1} << 40), int64_t{1} << 40);
        given[k] = true;
      }
    }
    const int64_t step = bounds[2];
    if (step == 0) return fail(n, "slice step cannot be zero");
    int64_t size;
    if (obj->kind == Kind::kArray) {
      size = static_cast<int64_t>(obj->arr->size());
    } else if (obj->kind == Kind::kString) {
      size = static_cast<int64_t>(obj->str->s.size());
    } else {
      return fail(n, std::string("cannot slice a ") + obj->type_name());
    }
    auto clamp = [&](int64_t v, bool is_given, int64_t dflt) {
      if (!is_given) return dflt;
      if (v < 0) v += size;
      return step > 0 ? std::clamp<int64_t>(v, 0, size) : std::clamp<int64_t>(v, -1, size - 1);
    };
    const int64_t start = clamp(bounds[0], given[0], step > 0 ? 0 : size - 1);
    const int64_t stop = clamp(bounds[1], given[1], step > 0 ? size : -1);
    Array a;
    Text t;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (obj->kind == Kind::kArray) {
        a.push_back((*obj->arr)[k]);
      } else {
        t.append(obj->str->substr(static_cast<size_t>(k), 1));
      }
    }
    if (obj->kind == Kind::kArray) return Value::array(std::move(a));
    return Value::text(std::move(t));
  }

  Status eval_args(const Node& n, size_t first, Args& args, Kwargs& kwargs) {
    for (size_t k = first; k < n.children.size(); ++k) {
      auto v = eval(*n.children[k]);
      if (!v.ok()) return Error{v.error().message};
      if (n.names[k].empty()) {
        args.push_back(std::move(*v));
      } else {
        kwargs.emplace_back(n.names[k], std::move(*v));
      }
    }
    return Status::Ok();
  }

  Result<Value> call(const Node& n) {
    auto callee = eval(*n.children[0]);
    if (!callee.ok()) return callee;
    Args args;
    Kwargs kwargs;
    if (Status s = eval_args(n, 1, args, kwargs); !s.ok()) return Error{s.message()};
    if (callee->kind != Kind::kFunction) return fail(n, "not a function");
    if (callee->fn) {
      auto r = (*callee->fn)(args, kwargs);
      // raise_exception's message stands as the template wrote it; others get the line.
      if (!r.ok() && !r.error().message.starts_with("chat template"))
        return fail(n, r.error().message);
      return r;
    }
    // A bound method (attribute()): its name and object.
    const Object& bound = *callee->obj;
    auto r = call_method(bound[1].second, bound[0].second.str->s, args);
    if (!r.ok()) return fail(n, r.error().message);
    return r;
  }

  Result<Value> filter(const Node& n) {
    auto operand = eval(*n.children[0]);
    if (!operand.ok()) return operand;
    Args args;
    Kwargs kwargs;
    if (Status s = eval_args(n, 1, args, kwargs); !s.ok()) return Error{s.message()};
    for (auto& [k, v] : kwargs)
      if (k == "indent" || k == "attribute") args.push_back(v);
    auto r = apply_filter(n.name, *operand, args);
    if (!r.ok()) return fail(n, r.error().message);
    return r;
  }

  Result<Value> test(const Node& n) {
    auto operand = eval(*n.children[0]);
    if (!operand.ok()) return operand;
    Args args;
    Kwargs kwargs;
    if (Status s = eval_args(n, 1, args, kwargs); !s.ok()) return Error{s.message()};
    Result<bool> r = apply_test(n.name, *operand, args);
    if (!r.ok()) return fail(n, r.error().message);
    return Value::boolean(*r != n.negated);
  }

  Result<Value> binary(const Node& n) {
    auto l = eval(*n.children[0]);
    if (!l.ok()) return l;
    const std::string& op = n.name;
    if (op == "and") return l->truthy() ? eval(*n.children[1]) : *l;
    if (op == "or") return l->truthy() ? *l : eval(*n.children[1]);
    auto r = eval(*n.children[1]);
    if (!r.ok()) return r;
    const Value &a = *l, &b = *r;
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "~") {
      Text t = a.to_text();
      t.append(b.to_text());
      return Value::text(std::move(t));
    }
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is_string()) {
        found = b.str->s.find(a.to_text().s) != std::string::npos;
      } else if (b.kind == Kind::kArray) {
        found =
            std::any_of(b.arr->begin(), b.arr->end(), [&](const Value& x) { return equal(a, x); });
      } else if (b.kind == Kind::kObject) {
        found = !b.member(a.to_text().s).is_undefined();
      }
      return Value::boolean(found == (op == "in"));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (a.is_number() && b.is_number()) {
        cmp = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
      } else if (a.is_string() && b.is_string()) {
        cmp = a.str->s.compare(b.str->s);
      } else {
        return fail(n,
                    std::string("cannot compare a ") + a.type_name() + " with a " + b.type_name());
      }
      return Value::boolean(op == "<"    ? cmp < 0
                            : op == ">"  ? cmp > 0
                            : op == "<=" ? cmp <= 0
                                         : cmp >= 0);
    }
    if (op == "+" && a.is_string() && b.is_string()) {
      Text t = *a.str;
      t.append(*b.str);
      return Value::text(std::move(t));
    }
    if (op == "+" && a.kind == Kind::kArray && b.kind == Kind::kArray) {
      Array out = *a.arr;
      out.insert(out.end(), b.arr->begin(), b.arr->end());
      return Value::array(std::move(out));
    }
    if (op == "*" && a.is_string() && b.kind == Kind::kInt) {
      Text t;
      for (int64_t k = 0; k < b.i && !a.str->s.empty() && t.s.size() < kMaxOutputBytes; ++k)
        t.append(*a.str);
      return Value::text(std::move(t));
    }
    if (!a.is_number() || !b.is_number()) {
      return fail(n, "'" + op + "' of a " + a.type_name() + " and a " + b.type_name());
    }
    if (a.kind == Kind::kInt && b.kind == Kind::kInt && op != "/") {
      int64_t r = 0;
      const bool overflow = op == "+"   ? __builtin_add_overflow(a.i, b.i, &r)
                            : op == "-" ? __builtin_sub_overflow(a.i, b.i, &r)
                            : op == "*" ? __builtin_mul_overflow(a.i, b.i, &r)
                                        : (b.i == -1 && a.i == INT64_MIN);
      if (overflow) return fail(n, "integer overflow");
      if (op == "+" || op == "-" || op == "*") return Value::integer(r);
      if (b.i == 0) return fail(n, "division by zero");
      // Python's floor division and modulo: the result takes the divisor's sign.
      int64_t q = a.i / b.i, m = a.i % b.i;
      if (m != 0 && ((m < 0) != (b.i < 0))) {
        --q;
        m += b.i;
      }
      return Value::integer(op == "//" ? q : m);
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (y == 0) return fail(n, "division by zero");
    if (op == "/") return Value::number(x / y);
    if (op == "//") return Value::number(std::floor(x / y));
    return Value::number(x - y * std::floor(x / y));
  }

  std::vector<std::unordered_map<std::string, Value>> scopes_;
  int64_t steps_ = 0;
};

}  // namespace

Result<Text> Template::render(const std::vector<std::pair<std::string, Value>>& variables) const {
  Renderer r(variables);
  Text out;
  if (Status s = r.exec(*root_, out); !s.ok()) return Error{s.message()};
  return out;
}

}  // namespace kvc::jinja
