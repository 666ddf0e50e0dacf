#include "bench/routing_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace kvc::bench {
namespace {

using nlohmann::json;

struct Row {
  std::string mix, policy;
  double p50 = 0, p90 = 0, p99 = 0, work = 0, hits = 0;
};

const char* kColours[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02"};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Escapes the characters SVG text cannot hold as they are.
std::string text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

}  // namespace

Result<std::string> routing_plot_svg(const json& doc) {
  if (!doc.is_object() || !doc.contains("results") || !doc["results"].is_array() ||
      doc["results"].empty()) {
    return Error{"routing plot: no results (expected the JSON of kvcascade bench routing --out)"};
  }
  std::vector<std::string> mixes, policies;
  std::vector<Row> rows;
  for (const json& r : doc["results"]) {
    Row row;
    try {
      row.mix = r.at("mix").get<std::string>();
      row.policy = r.at("policy").get<std::string>();
      row.p50 = r.at("ttft_ms").at("p50").get<double>();
      row.p90 = r.at("ttft_ms").at("p90").get<double>();
      row.p99 = r.at("ttft_ms").at("p99").get<double>();
      row.work = r.at("work_max_over_mean").get<double>();
      row.hits = r.at("hit_ratio_vs_oracle").get<double>();
      // Several routers in front of the fleet: a bar of its own.
      if (const int routers = r.value("routers", 1); routers > 1) {
        row.policy += " (" + std::to_string(routers) + " routers)";
      }
    } catch (const json::exception& e) {
      return Error{std::string("routing plot: a result lacks a field: ") + e.what()};
    }
    if (std::find(mixes.begin(), mixes.end(), row.mix) == mixes.end()) mixes.push_back(row.mix);
    if (std::find(policies.begin(), policies.end(), row.policy) == policies.end()) {
      policies.push_back(row.policy);
    }
    rows.push_back(std::move(row));
  }
  // Layout: a row of two panels per mix.
  const double W = 1100, row_h = 260, top = 60, left = 70, panel_w = 460, gap = 90, plot_h = 180;
  const double H = top + row_h * static_cast<double>(mixes.size()) + 20;
  double lo = 1e300, hi = 0, work_hi = 1.3;
  for (const Row& r : rows) {
    lo = std::min(lo, std::max(r.p50, 0.1));
    hi = std::max(hi, std::max(r.p99, 0.1));
    work_hi = std::max(work_hi, r.work * 1.1);
  }
  const json* floors = doc.contains("ttft_floor_ms") && doc["ttft_floor_ms"].is_object()
                           ? &doc["ttft_floor_ms"]
                           : nullptr;
  if (floors != nullptr) {  // the floor line stays on the axis
    for (const auto& [mix, f] : floors->items()) {
      if (f.contains("p90") && f["p90"].is_number()) {
        lo = std::min(lo, std::max(f["p90"].get<double>(), 0.1));
      }
    }
  }
  const double log_lo = std::floor(std::log10(lo)), log_hi = std::ceil(std::log10(hi) + 1e-9);
  auto y_ttft = [&](double ms, double y0) {
    const double l = (std::log10(std::max(ms, 0.1)) - log_lo) / std::max(log_hi - log_lo, 1.0);
    return y0 + plot_h - plot_h * std::clamp(l, 0.0, 1.0);
  };
  auto y_work = [&](double w, double y0) { return y0 + plot_h - plot_h * w / work_hi; };

  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"22\" font-size=\"15\">kvcascade bench routing: TTFT and "
    << "per-replica work by policy</text>\n";
  // Legend.
  for (size_t p = 0; p < policies.size(); ++p) {
    const double x = left + 170.0 * static_cast<double>(p);
    s << "<rect x=\"" << x << "\" y=\"32\" width=\"12\" height=\"12\" fill=\""
      << kColours[p % std::size(kColours)] << "\"/><text x=\"" << x + 16 << "\" y=\"43\">"
      << text(policies[p]) << "</text>\n";
  }
  const double slot = panel_w / static_cast<double>(policies.size());
  for (size_t m = 0; m < mixes.size(); ++m) {
    const double y0 = top + row_h * static_cast<double>(m) + 30;
    const double x_ttft = left, x_work = left + panel_w + gap;
    s << "<text x=\"" << x_ttft << "\" y=\"" << y0 - 10 << "\" font-weight=\"bold\">"
      << text(mixes[m]) << ": TTFT ms (bar p50, mark p90, whisker p99; log scale)</text>\n"
      << "<text x=\"" << x_work << "\" y=\"" << y0 - 10 << "\" font-weight=\"bold\">"
      << text(mixes[m]) << ": max/mean work per replica (hits/oracle above)</text>\n";
    // Axes and grid.
    for (double e = log_lo; e <= log_hi; e += 1) {
      const double y = y_ttft(std::pow(10.0, e), y0);
      s << "<line x1=\"" << x_ttft << "\" x2=\"" << x_ttft + panel_w << "\" y1=\"" << y
        << "\" y2=\"" << y << "\" stroke=\"#ddd\"/><text x=\"" << x_ttft - 6 << "\" y=\"" << y + 4
        << "\" text-anchor=\"end\">" << fmt("%g", std::pow(10.0, e)) << "</text>\n";
    }
    for (double w = 0; w <= work_hi + 1e-9; w += 0.5) {
      const double y = y_work(w, y0);
      s << "<line x1=\"" << x_work << "\" x2=\"" << x_work + panel_w << "\" y1=\"" << y
        << "\" y2=\"" << y << "\" stroke=\"#ddd\"/><text x=\"" << x_work - 6 << "\" y=\"" << y + 4
        << "\" text-anchor=\"end\">" << fmt("%.1f", w) << "</text>\n";
    }
    const double target = y_work(1.2, y0);
    s << "<line x1=\"" << x_work << "\" x2=\"" << x_work + panel_w << "\" y1=\"" << target
      << "\" y2=\"" << target << "\" stroke=\"#c00\" stroke-dasharray=\"6,4\"/><text x=\""
      << x_work + panel_w + 4 << "\" y=\"" << target + 4 << "\" fill=\"#c00\">1.2</text>\n";
    if (floors != nullptr && floors->contains(mixes[m])) {
      const json& f = (*floors)[mixes[m]];
      if (f.contains("p90") && f["p90"].is_number()) {
        const double y = y_ttft(f["p90"].get<double>(), y0);
        s << "<line x1=\"" << x_ttft << "\" x2=\"" << x_ttft + panel_w << "\" y1=\"" << y
          << "\" y2=\"" << y << "\" stroke=\"#555\" stroke-dasharray=\"3,3\"/><text x=\""
          << x_ttft + panel_w + 4 << "\" y=\"" << y + 4
          << "\" fill=\"#555\" font-size=\"10\">floor p90</text>\n";
      }
    }
    for (const Row& r : rows) {
      if (r.mix != mixes[m]) continue;
      const size_t p = static_cast<size_t>(std::find(policies.begin(), policies.end(), r.policy) -
                                           policies.begin());
      const char* colour = kColours[p % std::size(kColours)];
      const double cx = x_ttft + slot * (static_cast<double>(p) + 0.5), bw = slot * 0.6;
      const double base = y0 + plot_h, y50 = y_ttft(r.p50, y0), y90 = y_ttft(r.p90, y0),
                   y99 = y_ttft(r.p99, y0);
      s << "<rect x=\"" << cx - bw / 2 << "\" y=\"" << y50 << "\" width=\"" << bw << "\" height=\""
        << base - y50 << "\" fill=\"" << colour << "\" opacity=\"0.8\"/>\n"
        << "<line x1=\"" << cx << "\" x2=\"" << cx << "\" y1=\"" << y50 << "\" y2=\"" << y99
        << "\" stroke=\"black\"/><line x1=\"" << cx - bw / 4 << "\" x2=\"" << cx + bw / 4
        << "\" y1=\"" << y99 << "\" y2=\"" << y99 << "\" stroke=\"black\"/>\n"
        << "<rect x=\"" << cx - bw / 2 << "\" y=\"" << y90 - 2 << "\" width=\"" << bw
        << "\" height=\"4\" fill=\"black\"/><text x=\"" << cx << "\" y=\"" << y90 - 6
        << "\" text-anchor=\"middle\" font-size=\"10\">" << fmt("%.0f", r.p90) << "</text>\n";
      const double wx = x_work + slot * (static_cast<double>(p) + 0.5), yw = y_work(r.work, y0);
      s << "<rect x=\"" << wx - bw / 2 << "\" y=\"" << yw << "\" width=\"" << bw << "\" height=\""
        << base - yw << "\" fill=\"" << colour << "\" opacity=\"0.8\"/><text x=\"" << wx
        << "\" y=\"" << yw - 16 << "\" text-anchor=\"middle\" font-size=\"10\">"
        << fmt("%.2f", r.work) << "</text><text x=\"" << wx << "\" y=\"" << yw - 4
        << "\" text-anchor=\"middle\" font-size=\"10\">" << fmt("%.1f%%", 100 * r.hits)
        << "</text>\n";
    }
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace kvc::bench
