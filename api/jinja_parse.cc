// Jinja recursive-descent parser (jinja.h): tokens (jinja_lex.h) to a syntax tree (jinja_ast.h).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <initializer_list>
#include <optional>

#include "api/jinja.h"
#include "api/jinja_ast.h"
#include "api/jinja_lex.h"

namespace kvc::jinja {
namespace {

// Deepest nesting of blocks and expressions: a hostile template cannot exhaust the stack.
constexpr int kMaxDepth = 200;

using NodePtr = std::unique_ptr<Node>;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Result<NodePtr> parse_template() {
    std::string end_tag;
    auto block = parse_block({}, end_tag);
    if (!block.ok()) return block;
    if (!end_tag.empty()) return fail("unexpected {% " + end_tag + " %}");
    return block;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool at_op(const char* op) const { return peek().type == Token::kOp && peek().text == op; }
  bool at_name(const char* name) const {
    return peek().type == Token::kName && peek().text == name;
  }
  Error fail(const std::string& what) const {
    return Error{"chat template line " + std::to_string(peek().line) + ": " + what};
  }
  NodePtr node(Node::Kind k) const { return std::make_unique<Node>(k, peek().line); }
  Status expect_op(const char* op) {
    if (!at_op(op)) return fail(std::string("expected '") + op + "'");
    ++i_;
    return Status::Ok();
  }
  Status expect_close() {
    if (peek().type != Token::kClose) return fail("expected the end of the tag");
    ++i_;
    return Status::Ok();
  }

  // Statements until one of `ends` (a block tag name); its name goes to end_tag, the tag's
  // opening and name are consumed (the rest of the tag is the caller's).
  Result<NodePtr> parse_block(const std::vector<std::string>& ends, std::string& end_tag) {
    if (++depth_ > kMaxDepth) return fail("nested too deeply");
    NodePtr block = node(Node::Kind::kBlock);
    end_tag.clear();
    while (peek().type != Token::kEnd) {
      const Token& tok = peek();
      if (tok.type == Token::kText) {
        NodePtr text = node(Node::Kind::kText);
        text->value = Value::string(tok.text);
        ++i_;
        block->children.push_back(std::move(text));
      } else if (tok.type == Token::kOutputOpen) {
        ++i_;
        NodePtr out = node(Node::Kind::kOutput);
        auto e = parse_expr();
        if (!e.ok()) return e;
        out->children.push_back(std::move(*e));
        if (Status s = expect_close(); !s.ok()) return Error{s.message()};
        block->children.push_back(std::move(out));
      } else if (tok.type == Token::kStmtOpen) {
        ++i_;
        if (peek().type != Token::kName) return fail("expected a tag name");
        const std::string name = peek().text;
        if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
          ++i_;
          end_tag = name;
          --depth_;
          return block;
        }
        ++i_;
        auto stmt = parse_statement(name);
        if (!stmt.ok()) return stmt;
        if (*stmt) block->children.push_back(std::move(*stmt));
      } else {
        return fail("unexpected token");
      }
    }
    if (!ends.empty()) return fail("missing {% " + ends.back() + " %}");
    --depth_;
    return block;
  }

  Result<NodePtr> parse_statement(const std::string& name) {
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "generation" || name == "endgeneration") {
      if (Status s = expect_close(); !s.ok()) return Error{s.message()};
      return NodePtr();
    }
    return fail("unsupported tag '" + name + "'");
  }

  Result<NodePtr> parse_if() {
    NodePtr n = node(Node::Kind::kIf);
    auto cond = parse_expr();
    if (!cond.ok()) return cond;
    if (Status s = expect_close(); !s.ok()) return Error{s.message()};
    std::string end;
    auto then = parse_block({"elif", "else", "endif"}, end);
    if (!then.ok()) return then;
    n->children.push_back(std::move(*cond));
    n->children.push_back(std::move(*then));
    if (end == "elif") {
      NodePtr else_block = node(Node::Kind::kBlock);
      auto elif = parse_if();
      if (!elif.ok()) return elif;
      else_block->children.push_back(std::move(*elif));
      n->children.push_back(std::move(else_block));
      return n;
    }
    if (end == "else") {
      if (Status s = expect_close(); !s.ok()) return Error{s.message()};
      auto otherwise = parse_block({"endif"}, end);
      if (!otherwise.ok()) return otherwise;
      n->children.push_back(std::move(*otherwise));
    } else {
      n->children.push_back(node(Node::Kind::kBlock));
    }
    if (Status s = expect_close(); !s.ok()) return Error{s.message()};
    return n;
  }

  Result<NodePtr> parse_for() {
    NodePtr n = node(Node::Kind::kFor);
    do {
      if (peek().type != Token::kName) return fail("expected a loop variable");
      n->names.push_back(peek().text);
      ++i_;
    } while (at_op(",") && (++i_, true));
    if (!at_name("in")) return fail("expected 'in'");
    ++i_;
    auto iterable = parse_or();  // not a ternary: "if" after it filters the loop
    if (!iterable.ok()) return iterable;
    NodePtr filter;
    if (at_name("if")) {
      ++i_;
      auto cond = parse_or();
      if (!cond.ok()) return cond;
      filter = std::move(*cond);
    }
    if (Status s = expect_close(); !s.ok()) return Error{s.message()};
    std::string end;
    auto body = parse_block({"else", "endfor"}, end);
    if (!body.ok()) return body;
    NodePtr otherwise = node(Node::Kind::kBlock);
    if (end == "else") {
      if (Status s = expect_close(); !s.ok()) return Error{s.message()};
      auto b = parse_block({"endfor"}, end);
      if (!b.ok()) return b;
      otherwise = std::move(*b);
    }
    if (Status s = expect_close(); !s.ok()) return Error{s.message()};
    n->children.push_back(std::move(*iterable));
    n->children.push_back(std::move(*body));
    n->children.push_back(std::move(otherwise));
    n->children.push_back(std::move(filter));
    return n;
  }

  Result<NodePtr> parse_set() {
    if (peek().type != Token::kName) return fail("expected a name to set");
    std::vector<std::string> names = {peek().text};
    ++i_;
    if (at_op(".")) {
      ++i_;
      if (peek().type != Token::kName) return fail("expected an attribute name");
      names.push_back(peek().text);
      ++i_;
    }
    if (peek().type == Token::kClose && names.size() == 1) {  // {% set x %}...{% endset %}
      ++i_;
      NodePtr n = node(Node::Kind::kSetBlock);
      n->names = names;
      std::string end;
      auto body = parse_block({"endset"}, end);
      if (!body.ok()) return body;
      if (Status s = expect_close(); !s.ok()) return Error{s.message()};
      n->children.push_back(std::move(*body));
      return n;
    }
    if (Status s = expect_op("="); !s.ok()) return Error{s.message()};
    NodePtr n = node(Node::Kind::kSet);
    n->names = names;
    auto value = parse_expr();
    if (!value.ok()) return value;
    n->children.push_back(std::move(*value));
    if (Status s = expect_close(); !s.ok()) return Error{s.message()};
    return n;
  }

  // expr := or ["if" or ["else" expr]]
  Result<NodePtr> parse_expr() {
    if (++depth_ > kMaxDepth) return fail("nested too deeply");
    auto then = parse_or();
    if (!then.ok()) return then;
    if (at_name("if")) {
      ++i_;
      NodePtr n = node(Node::Kind::kTernary);
      auto cond = parse_or();
      if (!cond.ok()) return cond;
      NodePtr otherwise;
      if (at_name("else")) {
        ++i_;
        auto e = parse_expr();
        if (!e.ok()) return e;
        otherwise = std::move(*e);
      }
      n->children.push_back(std::move(*then));
      n->children.push_back(std::move(*cond));
      n->children.push_back(std::move(otherwise));
      --depth_;
      return n;
    }
    --depth_;
    return then;
  }

  NodePtr binary(std::string op, NodePtr l, NodePtr r) {
    NodePtr n = node(Node::Kind::kBinary);
    n->name = std::move(op);
    n->children.push_back(std::move(l));
    n->children.push_back(std::move(r));
    return n;
  }

  // operand (op operand)*, left-associative; `ops` are operator symbols or keywords.
  Result<NodePtr> left_assoc(std::initializer_list<const char*> ops,
                             Result<NodePtr> (Parser::*operand)()) {
    auto l = (this->*operand)();
    while (l.ok()) {
      const char* op = nullptr;
      for (const char* o : ops)
        if (at_op(o) || at_name(o)) op = o;
      if (op == nullptr) break;
      ++i_;
      auto r = (this->*operand)();
      if (!r.ok()) return r;
      l = binary(op, std::move(*l), std::move(*r));
    }
    return l;
  }
  // Jinja's precedence, loosest first: or, and, not, comparisons, + -, ~, * / // %, unary.
  Result<NodePtr> parse_or() { return left_assoc({"or"}, &Parser::parse_and); }
  Result<NodePtr> parse_and() { return left_assoc({"and"}, &Parser::parse_not); }
  Result<NodePtr> parse_not() {
    if (at_name("not")) {
      ++i_;
      if (++depth_ > kMaxDepth) return fail("nested too deeply");
      auto operand = parse_not();
      --depth_;
      if (!operand.ok()) return operand;
      NodePtr n = node(Node::Kind::kUnary);
      n->name = "not";
      n->children.push_back(std::move(*operand));
      return n;
    }
    return parse_compare();
  }
  Result<NodePtr> parse_compare() {
    auto l = parse_math1();
    while (l.ok()) {
      std::string op;
      if (peek().type == Token::kOp &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = peek().text;
        ++i_;
      } else if (at_name("in")) {
        op = "in";
        ++i_;
      } else if (at_name("not") && peek(1).type == Token::kName && peek(1).text == "in") {
        op = "not in";
        i_ += 2;
      } else {
        break;
      }
      auto r = parse_math1();
      if (!r.ok()) return r;
      l = binary(op, std::move(*l), std::move(*r));
    }
    return l;
  }
  Result<NodePtr> parse_math1() { return left_assoc({"+", "-"}, &Parser::parse_concat); }
  Result<NodePtr> parse_concat() { return left_assoc({"~"}, &Parser::parse_math2); }
  Result<NodePtr> parse_math2() { return left_assoc({"*", "/", "//", "%"}, &Parser::parse_unary); }
  Result<NodePtr> parse_unary() {
    if (at_op("-") || at_op("+")) {
      const std::string op = peek().text;
      ++i_;
      if (++depth_ > kMaxDepth) return fail("nested too deeply");
      auto operand = parse_unary();
      --depth_;
      if (!operand.ok()) return operand;
      NodePtr n = node(Node::Kind::kUnary);
      n->name = op;
      n->children.push_back(std::move(*operand));
      return n;
    }
    auto e = parse_postfix();
    if (!e.ok()) return e;
    return parse_filters(std::move(*e));
  }

  // Arguments of a call or filter after "(": positional and keyword; fills `call`.
  Status parse_args(Node& call) {
    while (!at_op(")")) {
      std::string keyword;
      if (peek().type == Token::kName && peek(1).type == Token::kOp && peek(1).text == "=") {
        keyword = peek().text;
        i_ += 2;
      }
      auto arg = parse_expr();
      if (!arg.ok()) return Error{arg.error().message};
      call.children.push_back(std::move(*arg));
      call.names.push_back(keyword);
      if (!at_op(",")) break;
      ++i_;
    }
    return expect_op(")");
  }

  Result<NodePtr> parse_filters(NodePtr e) {
    while (true) {
      if (at_op("|")) {
        ++i_;
        if (peek().type != Token::kName) return fail("expected a filter name");
        NodePtr f = node(Node::Kind::kFilter);
        f->name = peek().text;
        ++i_;
        f->children.push_back(std::move(e));
        f->names.push_back("");
        if (at_op("(")) {
          ++i_;
          if (Status s = parse_args(*f); !s.ok()) return Error{s.message()};
        }
        e = std::move(f);
      } else if (at_name("is")) {
        ++i_;
        NodePtr t = node(Node::Kind::kTest);
        if (at_name("not")) {
          t->negated = true;
          ++i_;
        }
        if (peek().type != Token::kName) return fail("expected a test name");
        t->name = peek().text;
        ++i_;
        t->children.push_back(std::move(e));
        t->names.push_back("");
        if (at_op("(")) {
          ++i_;
          if (Status s = parse_args(*t); !s.ok()) return Error{s.message()};
        } else if (peek().type == Token::kString || peek().type == Token::kInt ||
                   peek().type == Token::kFloat) {  // "is equalto 3", "is sameas none"
          auto arg = parse_primary();
          if (!arg.ok()) return arg;
          t->children.push_back(std::move(*arg));
          t->names.push_back("");
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  Result<NodePtr> parse_postfix() {
    auto e = parse_primary();
    while (e.ok()) {
      if (at_op(".")) {
        ++i_;
        if (peek().type != Token::kName && peek().type != Token::kInt)
          return fail("expected an attribute name");
        NodePtr a = node(Node::Kind::kAttr);
        a->name = peek().text;
        ++i_;
        a->children.push_back(std::move(*e));
        e = std::move(a);
      } else if (at_op("[")) {
        ++i_;
        NodePtr object = std::move(*e);
        std::optional<NodePtr> start;
        if (!at_op(":")) {
          auto s = parse_expr();
          if (!s.ok()) return s;
          start = std::move(*s);
        }
        if (at_op(":")) {  // a slice: [start:stop:step]
          NodePtr sl = node(Node::Kind::kSlice);
          sl->children.push_back(std::move(object));
          sl->children.push_back(start ? std::move(*start) : NodePtr());
          for (int part = 0; part < 2; ++part) {
            NodePtr bound;
            if (at_op(":")) {
              ++i_;
              if (!at_op(":") && !at_op("]")) {
                auto b = parse_expr();
                if (!b.ok()) return b;
                bound = std::move(*b);
              }
            }
            sl->children.push_back(std::move(bound));
          }
          if (Status s = expect_op("]"); !s.ok()) return Error{s.message()};
          e = std::move(sl);
          continue;
        }
        if (Status s = expect_op("]"); !s.ok()) return Error{s.message()};
        NodePtr ix = node(Node::Kind::kIndex);
        ix->children.push_back(std::move(object));
        ix->children.push_back(std::move(*start));
        e = std::move(ix);
      } else if (at_op("(")) {
        ++i_;
        NodePtr call = node(Node::Kind::kCall);
        call->children.push_back(std::move(*e));
        call->names.push_back("");
        if (Status s = parse_args(*call); !s.ok()) return Error{s.message()};
        e = std::move(call);
      } else {
        break;
      }
    }
    return e;
  }

  Result<NodePtr> parse_primary() {
    if (++depth_ > kMaxDepth) return fail("nested too deeply");
    const Token tok = peek();
    NodePtr n;
    switch (tok.type) {
      case Token::kString: {
        n = node(Node::Kind::kLiteral);
        std::string s = tok.text;
        ++i_;
        while (peek().type == Token::kString) {  // adjacent literals concatenate
          s += peek().text;
          ++i_;
        }
        n->value = Value::string(std::move(s));
        break;
      }
      case Token::kInt:
        n = node(Node::Kind::kLiteral);
        n->value = Value::integer(std::strtoll(tok.text.c_str(), nullptr, 10));
        ++i_;
        break;
      case Token::kFloat:
        n = node(Node::Kind::kLiteral);
        n->value = Value::number(std::strtod(tok.text.c_str(), nullptr));
        ++i_;
        break;
      case Token::kName:
        ++i_;
        if (tok.text == "true" || tok.text == "True" || tok.text == "false" ||
            tok.text == "False") {
          n = node(Node::Kind::kLiteral);
          n->value = Value::boolean(tok.text[0] == 't' || tok.text[0] == 'T');
        } else if (tok.text == "none" || tok.text == "None") {
          n = node(Node::Kind::kLiteral);
          n->value = Value::none();
        } else {
          n = node(Node::Kind::kName);
          n->name = tok.text;
        }
        break;
      case Token::kOp:
        if (tok.text == "(") {
          ++i_;
          auto inner = parse_expr();
          if (!inner.ok()) return inner;
          if (at_op(",")) {  // a tuple: a list here
            n = node(Node::Kind::kList);
            n->children.push_back(std::move(*inner));
            while (at_op(",")) {
              ++i_;
              if (at_op(")")) break;
              auto item = parse_expr();
              if (!item.ok()) return item;
              n->children.push_back(std::move(*item));
            }
          } else {
            n = std::move(*inner);
          }
          if (Status s = expect_op(")"); !s.ok()) return Error{s.message()};
        } else if (tok.text == "[") {
          ++i_;
          n = node(Node::Kind::kList);
          while (!at_op("]")) {
            auto item = parse_expr();
            if (!item.ok()) return item;
            n->children.push_back(std::move(*item));
            if (!at_op(",")) break;
            ++i_;
          }
          if (Status s = expect_op("]"); !s.ok()) return Error{s.message()};
        } else if (tok.text == "{") {
          ++i_;
          n = node(Node::Kind::kDict);
          while (!at_op("}")) {
            auto key = parse_expr();
            if (!key.ok()) return key;
            if (Status s = expect_op(":"); !s.ok()) return Error{s.message()};
            auto value = parse_expr();
            if (!value.ok()) return value;
            n->children.push_back(std::move(*key));
            n->children.push_back(std::move(*value));
            if (!at_op(",")) break;
            ++i_;
          }
          if (Status s = expect_op("}"); !s.ok()) return Error{s.message()};
        } else {
          return fail("unexpected '" + tok.text + "'");
        }
        break;
      default:
        return fail("expected an expression");
    }
    --depth_;
    return n;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Template> Template::parse(std::string_view source) {
  auto tokens = lex(source);
  if (!tokens.ok()) return tokens.error();
  auto root = Parser(std::move(*tokens)).parse_template();
  if (!root.ok()) return root.error();
  Template t;
  t.root_ = std::shared_ptr<const Node>(std::move(*root));
  return t;
}

}  // namespace kvc::jinja
