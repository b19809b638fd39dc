#include "explorer/page.h"

#include "cppgrad.h"

namespace explorer {

// page.html's text, put in the program at build time (CMakeLists.txt, page_template.cpp.in).
extern const char* const kPageTemplate;

nlohmann::json page_data(const Exploration& e) {
  nlohmann::json sequences = nlohmann::json::array(), layers = nlohmann::json::array();
  for (const auto& [name, tokens] : e.sequences) sequences.push_back({{"name", name}, {"tokens", tokens}});
  for (const Layer& l : e.layers)
    layers.push_back({{"name", l.name}, {"kind", l.kind}, {"module", l.module}, {"queries", l.queries},
                      {"keys", l.keys}, {"kv_heads", l.kv_heads}, {"heads", l.heads}});
  return {{"title", e.title}, {"notes", e.notes}, {"sequences", sequences}, {"layers", layers}};
}

std::string page_html(const nlohmann::json& data) {
  const std::string page = kPageTemplate, marker = "/*EXPLORER_DATA*/null";
  const size_t at = page.find(marker);
  CPPGRAD_CHECK(at != std::string::npos, "the page template has no {}", marker);
  // Inside <script>, "</" could close the element early: JSON may write it as "<\/".
  std::string json = data.dump();
  for (size_t i = json.find("</"); i != std::string::npos; i = json.find("</", i + 3)) json.replace(i, 2, "<\\/");
  return page.substr(0, at) + json + page.substr(at + marker.size());
}

}  // namespace explorer
