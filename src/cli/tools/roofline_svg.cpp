#include "cli/tools/roofline_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

namespace peregrine::cli {
namespace {

// Chart geometry in SVG user units.
constexpr double kPlotLeft = 80, kPlotTop = 50, kPlotWidth = 640, kPlotHeight = 460;
constexpr double kLegendLeft = kPlotLeft + kPlotWidth + 40, kLegendLine = 15, kWidth = kLegendLeft + 520;

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A value for a tick label: 0.01, 0.1, 1, 10, 100, 1000, ...
std::string tick_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 1 ? "%.2g" : "%.0f", v);
  return buf;
}

bool usable(double v) { return std::isfinite(v) && v > 0; }

// Log-scale axis over whole decades.
struct Axis {
  double lo_exp, hi_exp;  // decades
  double pixel_lo, pixel_span;
  bool flipped;  // y grows downwards in SVG
  double operator()(double v) const {
    const double f = (std::log10(v) - lo_exp) / (hi_exp - lo_exp);
    return flipped ? pixel_lo + pixel_span * (1 - f) : pixel_lo + pixel_span * f;
  }
  double lo() const { return std::pow(10.0, lo_exp); }
  double hi() const { return std::pow(10.0, hi_exp); }
};

Axis decade_axis(double min_v, double max_v, double pixel_lo, double pixel_span, bool flipped) {
  double lo = std::floor(std::log10(min_v / 1.5)), hi = std::ceil(std::log10(max_v * 1.5));
  if (hi <= lo) hi = lo + 1;
  return {lo, hi, pixel_lo, pixel_span, flipped};
}

// What can be drawn: points and ceilings with finite positive values, ceilings highest first.
struct Drawable {
  std::vector<const RooflinePoint*> points;
  std::vector<RooflineCeiling> ceilings;
  double bandwidth_gbps;  // 0 when unusable: no slope and no roofs
};

Drawable drawable_parts(const RooflineChart& chart) {
  Drawable d;
  for (const auto& p : chart.points) {
    if (usable(p.intensity) && usable(p.gflops)) d.points.push_back(&p);
  }
  for (const auto& c : chart.ceilings) {
    if (usable(c.gflops)) d.ceilings.push_back(c);
  }
  std::sort(d.ceilings.begin(), d.ceilings.end(), [](const auto& a, const auto& b) { return a.gflops > b.gflops; });
  d.bandwidth_gbps = usable(chart.bandwidth_gbps) ? chart.bandwidth_gbps : 0;
  return d;
}

// Axis ranges: every point, every ceiling and its ridge point.
std::pair<Axis, Axis> chart_axes(const Drawable& d) {
  double x_min = 1, x_max = 10, y_min = 1, y_max = 10;
  bool first = true;
  auto include = [&](double x, double y) {
    if (first) {
      x_min = x_max = x;
      y_min = y_max = y;
      first = false;
    }
    x_min = std::min(x_min, x), x_max = std::max(x_max, x);
    y_min = std::min(y_min, y), y_max = std::max(y_max, y);
  };
  for (const auto* p : d.points) include(p->intensity, p->gflops);
  for (const auto& c : d.ceilings) {
    if (d.bandwidth_gbps > 0) include(c.gflops / d.bandwidth_gbps, c.gflops);
  }
  return {decade_axis(x_min, x_max, kPlotLeft, kPlotWidth, false),
          decade_axis(y_min, y_max, kPlotTop, kPlotHeight, true)};
}

std::string document_start(const std::string& title, double height) {
  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" + num(height) +
       "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect x=\"0\" y=\"0\" width=\"" + num(kWidth) + "\" height=\"" + num(height) + "\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(kPlotLeft) + "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">" + escape(title) +
       "</text>\n";
  return s;
}

// Grid and ticks, one line per decade, the plot frame and the axis titles.
std::string grid_and_axes(const Axis& ax, const Axis& ay) {
  std::string s;
  for (double e = ax.lo_exp; e <= ax.hi_exp; ++e) {
    const double x = ax(std::pow(10.0, e));
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(kPlotTop) + "\" x2=\"" + num(x) + "\" y2=\"" +
         num(kPlotTop + kPlotHeight) + "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + num(x) + "\" y=\"" + num(kPlotTop + kPlotHeight + 16) + "\" text-anchor=\"middle\">" +
         tick_text(std::pow(10.0, e)) + "</text>\n";
  }
  for (double e = ay.lo_exp; e <= ay.hi_exp; ++e) {
    const double y = ay(std::pow(10.0, e));
    s += "<line x1=\"" + num(kPlotLeft) + "\" y1=\"" + num(y) + "\" x2=\"" + num(kPlotLeft + kPlotWidth) + "\" y2=\"" +
         num(y) + "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + num(kPlotLeft - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" +
         tick_text(std::pow(10.0, e)) + "</text>\n";
  }
  s += "<rect x=\"" + num(kPlotLeft) + "\" y=\"" + num(kPlotTop) + "\" width=\"" + num(kPlotWidth) + "\" height=\"" +
       num(kPlotHeight) + "\" fill=\"none\" stroke=\"black\"/>\n";
  s += "<text x=\"" + num(kPlotLeft + kPlotWidth / 2) + "\" y=\"" + num(kPlotTop + kPlotHeight + 40) +
       "\" text-anchor=\"middle\">arithmetic intensity (flop/byte, log scale)</text>\n";
  s += "<text transform=\"translate(24," + num(kPlotTop + kPlotHeight / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">GFLOP/s (GOP/s for int8; log scale)</text>\n";
  return s;
}

// Roofs: each ceiling is the bandwidth slope up to its ridge point, then flat; the highest is
// drawn solid, the others dashed; the slope is labelled with the bandwidth. Needs bw > 0.
std::string roofs(const Axis& ax, const Axis& ay, const std::vector<RooflineCeiling>& ceilings, double bw) {
  std::string s;
  const double x0 = std::max(ax.lo(), ay.lo() / bw);
  for (size_t i = 0; i < ceilings.size(); ++i) {
    const auto& c = ceilings[i];
    const double ridge = c.gflops / bw;
    const double xs = std::min(x0, ridge);
    s += "<polyline class=\"roof\" fill=\"none\" stroke=\"black\" stroke-width=\"" + std::string(i == 0 ? "2" : "1.2") +
         "\"" + (i == 0 ? "" : " stroke-dasharray=\"6,3\"") + " points=\"" + num(ax(xs)) + "," + num(ay(bw * xs)) +
         " " + num(ax(ridge)) + "," + num(ay(c.gflops)) + " " + num(ax(ax.hi())) + "," + num(ay(c.gflops)) + "\"/>\n";
    s += "<line x1=\"" + num(ax(ridge)) + "\" y1=\"" + num(ay(c.gflops)) + "\" x2=\"" + num(ax(ridge)) + "\" y2=\"" +
         num(kPlotTop + kPlotHeight) + "\" stroke=\"#888\" stroke-dasharray=\"2,3\"/>\n";
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s: %.1f GFLOP/s, ridge %.2g flop/B", c.name.c_str(), c.gflops, ridge);
    s += "<text x=\"" + num(kPlotLeft + kPlotWidth - 4) + "\" y=\"" + num(ay(c.gflops) - 4) +
         "\" text-anchor=\"end\">" + escape(buf) + "</text>\n";
  }
  char buf[80];
  std::snprintf(buf, sizeof buf, "read bandwidth %.1f GB/s", bw);
  const double lx = x0 * 1.6;
  s += "<text x=\"" + num(ax(lx)) + "\" y=\"" + num(ay(bw * lx) - 8) + "\" transform=\"rotate(-" +
       num(std::atan2(ay(bw * x0) - ay(bw * x0 * 10), ax(x0 * 10) - ax(x0)) * 180 / std::numbers::pi) + " " +
       num(ax(lx)) + " " + num(ay(bw * lx) - 8) + ")\">" + escape(buf) + "</text>\n";
  return s;
}

// Points: a numbered marker each, and the same number in the legend; one colour per series.
std::string points_and_legend(const Axis& ax, const Axis& ay, const std::vector<const RooflinePoint*>& points) {
  std::vector<std::string> series;
  auto colour = [&](const std::string& name) {
    auto it = std::find(series.begin(), series.end(), name);
    if (it == series.end()) it = series.insert(series.end(), name);
    return kPalette[static_cast<size_t>(it - series.begin()) % std::size(kPalette)];
  };
  std::string s = "<text x=\"" + num(kLegendLeft) + "\" y=\"" + num(kPlotTop) +
                  "\" font-weight=\"bold\">measured points (hollow: scalar path or naive loop)</text>\n";
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = *points[i];
    const char* c = colour(p.series);
    const double x = ax(p.intensity), y = ay(p.gflops);
    const std::string fill = p.hollow ? "white" : c;
    s += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"4\" fill=\"" + fill + "\" stroke=\"" + c +
         "\" stroke-width=\"1.5\"/>\n";
    s += "<text class=\"point-label\" x=\"" + num(x + 5) + "\" y=\"" + num(y - 5) + "\" font-size=\"9\" fill=\"" + c +
         "\">" + std::to_string(i + 1) + "</text>\n";
    const double ly = kPlotTop + kLegendLine * (i + 1.2);
    s += "<circle cx=\"" + num(kLegendLeft + 4) + "\" cy=\"" + num(ly - 4) + "\" r=\"4\" fill=\"" + fill +
         "\" stroke=\"" + c + "\" stroke-width=\"1.5\"/>\n";
    s += "<text x=\"" + num(kLegendLeft + 14) + "\" y=\"" + num(ly) + "\">" + std::to_string(i + 1) + ". " +
         escape(p.label) + "</text>\n";
  }
  return s;
}

}  // namespace

std::string roofline_svg(const RooflineChart& chart) {
  const Drawable d = drawable_parts(chart);
  const auto [ax, ay] = chart_axes(d);
  const double height = std::max(kPlotTop + kPlotHeight + 70, kPlotTop + kLegendLine * (d.points.size() + 3.0));
  std::string s = document_start(chart.title, height);
  s += grid_and_axes(ax, ay);
  if (d.bandwidth_gbps > 0) s += roofs(ax, ay, d.ceilings, d.bandwidth_gbps);
  s += points_and_legend(ax, ay, d.points);
  s += "</svg>\n";
  return s;
}

}  // namespace peregrine::cli
