// The syntax tree of a parsed Jinja template (jinja.h). Internal to prefix_index/jinja_*.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "api/jinja_value.h"

namespace kvc::jinja {

struct Node {
  enum class Kind {
    // statements
    kBlock,     // children in order
    kText,      // value: the text
    kOutput,    // children[0]
    kIf,        // children: cond, then-block, else-block (an elif is an kIf in the else-block)
    kFor,       // names; children: iterable, body, else-block, filter condition (or null)
    kSet,       // names (one, or two for ns.attr); children[0]: value
    kSetBlock,  // names; children[0]: body
    // expressions
    kLiteral,  // value
    kName,     // name
    kList,     // children
    kDict,     // children: key, value, key, value, ...
    kAttr,     // children[0]; name
    kIndex,    // children: object, index
    kSlice,    // children: object, start, stop, step (null when absent)
    kCall,     // children: callee, args...; names: keyword of each arg ("" for positional)
    kFilter,   // name; children: operand, args...; names: keywords
    kTest,     // name; negated; children: operand, args...
    kUnary,    // name: "not" or "-" or "+"; children[0]
    kBinary,   // name: the operator; children: left, right
    kTernary,  // children: then, cond, else (else may be null)
  };
  Kind kind;
  int line = 0;
  std::string name;
  std::vector<std::string> names;
  bool negated = false;
  Value value;
  std::vector<std::unique_ptr<Node>> children;

  Node(Kind k, int l) : kind(k), line(l) {}
  const Node* child(size_t i) const { return i < children.size() ? children[i].get() : nullptr; }
};

}  // namespace kvc::jinja
