// The CLI11 names the examples' headers mention, declared without CLI11's header. Including
// <CLI/CLI.hpp> costs about 6 s of compile time in every file that does (its ready-made
// validators are objects defined in the header, compiled again in each file), so only the files
// that build an App, add options or parse include it (common/cli_app.h); the rest see these.
#pragma once

namespace CLI {
class App;
class Validator;
}  // namespace CLI
