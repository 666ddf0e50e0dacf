#include "router/fleet/prometheus_text.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace kvc {
namespace {

constexpr std::string_view kWanted[] = {"a", "b:c", "vllm:x"};

TEST(PrometheusText, ReadsLabelsValuesAndSkipsTheRest) {
  const std::string text =
      "# HELP a A gauge.\n"
      "# TYPE a gauge\n"
      "a 1\n"
      "a{engine=\"0\",model_name=\"m\"} 2.5e1 1700000000000\n"
      "unwanted{x=\"y\"} 7\n"
      "b:c{path=\"say \\\"hi\\\" \\\\ now\\n\",} +Inf\r\n"
      "\n"
      "  vllm:x\t{ a = \"1\" , b=\"2\" }\t-3\n";
  const MetricSamples m = parse_prometheus_text(text, kWanted);
  ASSERT_EQ(m.samples.size(), 4u);
  EXPECT_EQ(m.num_lines, 5u);
  EXPECT_EQ(m.num_malformed, 0u);
  EXPECT_EQ(m.samples[1].label("model_name"), "m");
  EXPECT_DOUBLE_EQ(m.samples[1].value, 25.0);
  EXPECT_EQ(m.samples[2].label("path"), "say \"hi\" \\ now\n");
  EXPECT_TRUE(std::isinf(m.samples[2].value));
  EXPECT_EQ(m.samples[3].label("b"), "2");
  EXPECT_EQ(m.sum("a"), 26.0);
  EXPECT_EQ(m.max("a"), 25.0);
  EXPECT_EQ(m.sum("b:c"), std::nullopt);  // +Inf is not a finite value
  EXPECT_TRUE(m.has("b:c"));
  EXPECT_EQ(m.sum("vllm:x"), -3.0);
}

TEST(PrometheusText, NanIsKeptButNotSummed) {
  const MetricSamples m = parse_prometheus_text("a NaN\na{x=\"1\"} 4\n", kWanted);
  ASSERT_EQ(m.samples.size(), 2u);
  EXPECT_TRUE(std::isnan(m.samples[0].value));
  EXPECT_EQ(m.sum("a"), 4.0);
}

TEST(PrometheusText, MalformedLinesAreCountedAndSkipped) {
  const std::string text =
      "a{x=\"unterminated} 1\n"  // the quote never closes
      "a{x=1} 2\n"               // unquoted label value
      "a{x=\"1\" y=\"2\"} 3\n"   // no comma
      "a 1 2 3\n"                // trailing garbage after the timestamp
      "a one\n"                  // not a number
      "a\n"                      // no value
      "a{:x=\"1\"} 4\n"          // a label name may not hold ':'
      "9a 5\n"                   // a name may not start with a digit
      "a-b 6\n"                  // nor hold '-'
      "a 0x10\n"                 // Go's ParseFloat would, Prometheus does not write it
      "a 7\n";                   // the one good line
  const MetricSamples m = parse_prometheus_text(text, kWanted);
  EXPECT_EQ(m.num_lines, 11u);
  EXPECT_EQ(m.num_malformed, 10u);
  ASSERT_EQ(m.samples.size(), 1u);
  EXPECT_EQ(m.samples[0].value, 7.0);
}

// Whatever the bytes, the parser returns (no crash, no hang) and keeps only well-formed samples.
TEST(PrometheusText, RandomBytesNeverBreakIt) {
  std::mt19937 rng(7);
  std::string alphabet = "ab:c{}=\",\\ \t\n\r#01.eE+-NaInf";
  alphabet += '\0';
  alphabet += '\xff';
  for (int round = 0; round < 2000; ++round) {
    std::string text(rng() % 300, ' ');
    for (char& c : text)
      c = alphabet[rng() % alphabet.size()];
    const MetricSamples m = parse_prometheus_text(text, kWanted);
    EXPECT_LE(m.samples.size(), m.num_lines);
    for (const MetricSample& s : m.samples)
      EXPECT_TRUE(s.name == "a" || s.name == "b:c" || s.name == "vllm:x");
  }
}

TEST(PrometheusText, NamespacesTellTheEngine) {
  EXPECT_EQ(metric_namespaces("# HELP vllm:x\npython_gc 1\nvllm:x 1\nvllm:y 2\nsglang:z 3\n"),
            (std::vector<std::string>{"vllm:", "sglang:"}));
  EXPECT_TRUE(metric_namespaces("<html>not metrics</html>").empty());
}

}  // namespace
}  // namespace kvc
