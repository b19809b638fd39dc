// cppgrad's program tools, the cppgrad::tools component: what a training program shows and
// keeps of its run, none of which the library itself needs. The progress line (progress.h), the
// training log read by scripts and TensorBoard (metrics.h) with a module's histograms in it
// (histograms.h), and the SVG pictures: loss curves (plot/curves.h) and attention maps
// (attention_maps.h, drawn by plot/attention_grid.h), and the backward graph in Graphviz's DOT
// language (graph_dot.h).
//
//   find_package(cppgrad COMPONENTS tools)      target_link_libraries(app PRIVATE cppgrad::tools)
//   #include <cppgrad/cppgrad.h>
//   #include <cppgrad/tools/tools.h>
#pragma once

#include "attention_maps.h"
#include "graph_dot.h"
#include "histograms.h"
#include "metrics.h"
#include "plot/attention_grid.h"
#include "plot/curves.h"
#include "progress.h"
