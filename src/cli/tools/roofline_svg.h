#pragma once
// Draws a roofline chart (log-log: arithmetic intensity in flop/byte against GFLOP/s) as a
// standalone SVG document: the memory-bandwidth slope, one horizontal compute ceiling per kind
// of arithmetic, and every measured point with a numbered label and a legend line. Written by
// hand (no plotting dependency); the output depends only on the input, so it diffs cleanly.
#include <string>
#include <vector>

namespace peregrine::cli {

struct RooflineCeiling {
  std::string name;  // "avx2 f32 FMA"
  double gflops;     // > 0
};

struct RooflinePoint {
  std::string label;   // legend text, e.g. "avx2 q8_0·q8 decode 2048×2048: 81% of roof"
  std::string series;  // points of one series share a colour (e.g. the kernel)
  bool hollow;         // drawn as an outline (used for a second ISA or the naive loop)
  double intensity;    // flop/byte, > 0
  double gflops;       // > 0
};

struct RooflineChart {
  std::string title;
  double bandwidth_gbps;  // the slope: attainable GFLOP/s = bandwidth × intensity
  std::vector<RooflineCeiling> ceilings;
  std::vector<RooflinePoint> points;
};

// The whole document, starting with "<svg". Each point gets exactly one
// <text class="point-label"> (its number beside the marker); the legend repeats the numbers
// with the full labels. Non-positive or non-finite values are left out rather than drawn wrong.
std::string roofline_svg(const RooflineChart& chart);

}  // namespace peregrine::cli
