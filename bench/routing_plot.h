// The plot of `kvcascade bench routing`: one row per trace, TTFT on the left (p50 bar,
// p90 mark, p99 whisker, log scale) and per-replica work max/mean on the right (bars, the 1.2
// target dashed, hits against the oracle written above each bar), one colour per policy. SVG, so
// it needs no plotting package; drawn from the benchmark's JSON (`--plot`, or `--replot` of a
// saved file).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kvc::bench {

// doc: what `kvcascade bench routing --out` writes ({"results": [...], ...}). An error when it has
// no results or a result lacks a field the plot needs.
Result<std::string> routing_plot_svg(const nlohmann::json& doc);

}  // namespace kvc::bench
