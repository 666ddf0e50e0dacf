#include "router/fleet/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace kvc {
namespace {

bool blank(char c) {
  return c == ' ' || c == '\t';
}
bool name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool name_char(char c) {
  return name_start(c) || (c >= '0' && c <= '9');
}

// A cursor over one line.
struct Line {
  std::string_view s;
  size_t i = 0;

  bool done() const { return i >= s.size(); }
  char peek() const { return done() ? '\0' : s[i]; }
  void skip_blanks() {
    while (!done() && blank(s[i]))
      ++i;
  }
  std::string_view name(bool metric) {
    const size_t start = i;
    if (done() || !name_start(s[i]) || (!metric && s[i] == ':')) return {};
    while (!done() && name_char(s[i]) && (metric || s[i] != ':'))
      ++i;
    return s.substr(start, i - start);
  }
  std::string_view token() {
    const size_t start = i;
    while (!done() && !blank(s[i]))
      ++i;
    return s.substr(start, i - start);
  }
};

// Go's ParseFloat spellings Prometheus writes: decimals, exponents, NaN, +Inf, -Inf.
std::optional<double> parse_value(std::string_view t) {
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  if (t.empty()) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
  return v;
}

// A quoted label value after its opening quote; false if the line ends first.
bool label_value(Line& l, std::string* out) {
  while (!l.done()) {
    const char c = l.s[l.i++];
    if (c == '"') return true;
    if (c == '\\' && !l.done()) {
      const char e = l.s[l.i++];
      if (out) out->push_back(e == 'n' ? '\n' : e);  // \\ and \" stand for themselves
      continue;
    }
    if (out) out->push_back(c);
  }
  return false;
}

// Parses one sample line; `keep` says whether to build the sample. False: malformed.
bool parse_sample(Line& l, bool keep, MetricSample& out) {
  const size_t after_name = l.i;
  l.skip_blanks();  // tolerated before a label set
  if (l.peek() != '{') l.i = after_name;
  if (l.peek() == '{') {
    ++l.i;
    while (true) {
      l.skip_blanks();
      if (l.peek() == '}') {
        ++l.i;
        break;
      }
      const std::string_view label = l.name(false);
      if (label.empty()) return false;
      l.skip_blanks();
      if (l.peek() != '=') return false;
      ++l.i;
      l.skip_blanks();
      if (l.peek() != '"') return false;
      ++l.i;
      std::string value;
      if (!label_value(l, keep ? &value : nullptr)) return false;
      if (keep) out.labels.emplace_back(std::string(label), std::move(value));
      l.skip_blanks();
      if (l.peek() == ',') {
        ++l.i;
      } else if (l.peek() != '}') {
        return false;
      }
    }
  }
  if (!blank(l.peek())) return false;
  l.skip_blanks();
  const std::optional<double> value = parse_value(l.token());
  if (!value) return false;
  l.skip_blanks();
  if (!l.done()) {  // a timestamp: an integer in milliseconds
    const std::string_view ts = l.token();
    int64_t unused = 0;
    const auto [end, ec] = std::from_chars(ts.data(), ts.data() + ts.size(), unused);
    if (ec != std::errc() || end != ts.data() + ts.size()) return false;
    l.skip_blanks();
    if (!l.done()) return false;
  }
  out.value = *value;
  return true;
}

template <typename F>
void for_each_line(std::string_view text, F&& f) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    f(line);
    pos = end + 1;
  }
}

}  // namespace

std::optional<std::string_view> MetricSample::label(std::string_view label_name) const {
  for (const auto& [k, v] : labels)
    if (k == label_name) return v;
  return std::nullopt;
}

std::optional<double> MetricSamples::sum(std::string_view name) const {
  std::optional<double> total;
  for (const MetricSample& s : samples) {
    if (s.name == name && std::isfinite(s.value)) total = total.value_or(0) + s.value;
  }
  return total;
}

std::optional<double> MetricSamples::max(std::string_view name) const {
  std::optional<double> best;
  for (const MetricSample& s : samples) {
    if (s.name == name && std::isfinite(s.value)) best = std::max(best.value_or(s.value), s.value);
  }
  return best;
}

bool MetricSamples::has(std::string_view name) const {
  return std::any_of(samples.begin(), samples.end(), [&](auto& s) { return s.name == name; });
}

MetricSamples parse_prometheus_text(std::string_view text,
                                    std::span<const std::string_view> wanted) {
  MetricSamples out;
  for_each_line(text, [&](std::string_view s) {
    Line l{s};
    l.skip_blanks();
    if (l.done() || l.peek() == '#') return;  // blank, HELP, TYPE or a comment
    ++out.num_lines;
    const std::string_view name = l.name(true);
    const bool keep =
        !name.empty() && std::find(wanted.begin(), wanted.end(), name) != wanted.end();
    MetricSample sample;
    if (name.empty() || !parse_sample(l, keep, sample)) {
      ++out.num_malformed;
      return;
    }
    if (!keep) return;
    sample.name = std::string(name);
    out.samples.push_back(std::move(sample));
  });
  return out;
}

std::vector<std::string> metric_namespaces(std::string_view text, size_t limit) {
  std::vector<std::string> out;
  for_each_line(text, [&](std::string_view s) {
    Line l{s};
    l.skip_blanks();
    if (l.done() || l.peek() == '#' || out.size() >= limit) return;
    const std::string_view name = l.name(true);
    const size_t colon = name.find(':');
    if (colon == std::string_view::npos || colon == 0) return;
    const std::string_view ns = name.substr(0, colon + 1);
    if (std::find(out.begin(), out.end(), ns) == out.end()) out.emplace_back(ns);
  });
  return out;
}

}  // namespace kvc
