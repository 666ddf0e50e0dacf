// A reader of the Prometheus text exposition format (0.0.4), for the /metrics of engines the
// router sits in front of (vLLM, SGLang). Only the samples the caller names are kept; everything
// else is skipped at the cost of reading its name. Never throws and never fails: a line that is
// not a well-formed sample or comment is counted and skipped, so one odd line (or a body that is
// not Prometheus text at all) costs the caller the metrics it lacks, nothing more. Work is linear
// in the text's length; the caller bounds the length.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvc {

struct MetricSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // values unescaped
  double value = 0;                                         // may be NaN or +-Inf

  std::optional<std::string_view> label(std::string_view label_name) const;
};

struct MetricSamples {
  std::vector<MetricSample> samples;  // the wanted ones, in text order
  size_t num_lines = 0;               // sample lines read (comments and blank lines excluded)
  size_t num_malformed = 0;           // lines skipped as malformed

  // Sum of the finite values of every series of `name` (one per engine, DP rank, model...);
  // nullopt when no series has a finite value.
  std::optional<double> sum(std::string_view name) const;
  // Largest finite value among the series of `name`; nullopt when none.
  std::optional<double> max(std::string_view name) const;
  bool has(std::string_view name) const;
};

// `wanted`: metric names to keep (exact names, e.g. "vllm:num_requests_running").
// Also accepts CRLF line ends, tabs as blanks, trailing commas in label sets, an optional
// timestamp after the value, and NaN / +Inf / -Inf values.
MetricSamples parse_prometheus_text(std::string_view text,
                                    std::span<const std::string_view> wanted);

// The distinct metric-name prefixes up to and including the first ':' ("vllm:", "sglang:") of
// the sample lines, at most `limit` of them: which engine wrote the text.
std::vector<std::string> metric_namespaces(std::string_view text, size_t limit = 16);

}  // namespace kvc
