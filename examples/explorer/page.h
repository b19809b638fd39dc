// The explorer's page: one HTML file that holds everything it needs (its script, its style and
// the weights, as JSON), so that it opens from disk with no network, and nothing else.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "explorer/explore.h"

namespace explorer {

// What the page draws: {"title", "notes", "sequences": [{"name", "tokens"}], "layers": [{"name",
// "kind", "module", "queries", "keys", "kv_heads", "heads": [[row-major weights] per head]}]}.
nlohmann::json page_data(const Exploration& e);

// The page: page.html (its script and style) with `data` in it.
std::string page_html(const nlohmann::json& data);

}  // namespace explorer
