// edit_checkpoint: rewrites one entry of a checkpoint (a safetensors file), keeping every other
// entry and the metadata as they are. The tamper table (common/tamper_check.sh) makes its rows
// with it from a real checkpoint of each training program.
//
//   edit_checkpoint IN OUT set NAME VALUE     every element of NAME becomes VALUE (same dtype, shape)
//   edit_checkpoint IN OUT set1 NAME VALUE    only its first element
//   edit_checkpoint IN OUT remove NAME
//   edit_checkpoint IN OUT copy NAME NEW      NEW, a copy of NAME, beside it (a misspelt twin)
//   edit_checkpoint IN OUT add NAME VALUE     a new 0-d float64 entry
//   edit_checkpoint IN OUT rows NAME NEW N    NEW: NAME repeated as N rows (a per-rank entry)
//   edit_checkpoint IN OUT junk PREFIX N      N new 0-d int64 entries PREFIX0, PREFIX1, ...
//   edit_checkpoint IN OUT meta KEY VALUE     the metadata's KEY becomes VALUE
//   edit_checkpoint IN names                  prints the entries' names, one a line
//   edit_checkpoint IN meta-of KEY            prints the metadata's KEY
//   edit_checkpoint IN differs OTHER PREFIX   over the floating entries under PREFIX, prints
//                                             ‖IN − OTHER‖ / ‖OTHER‖ (all their elements as one
//                                             vector), the largest |IN − OTHER|, the largest |OTHER|
//
// VALUE is a number as strtod reads it (nan, inf, -inf, 1e30); an int64 entry takes it as a
// whole number. Exit codes: 0 written, 2 bad arguments or an entry that is not there.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cppgrad.h"

using namespace cppgrad;

namespace {

double number(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  CPPGRAD_CHECK(!text.empty() && *end == '\0', "'{}' is not a number", excerpt(text));
  return v;
}

Tensor filled(const Tensor& like, const std::string& value, bool first_only) {
  Tensor out = like.contiguous().clone();
  if (out.dtype() == kInt64) {
    const int64_t v = std::stoll(value);
    for (int64_t i = 0; i < (first_only ? 1 : out.numel()); ++i) out.data<int64_t>()[i] = v;
    return out;
  }
  CPPGRAD_CHECK(out.is_floating_point(), "a {} entry takes no number", dtype_name(out.dtype()));
  const double v = number(value);
  dispatch_floating(out.dtype(), "edit_checkpoint", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < (first_only ? 1 : out.numel()); ++i) out.data<T>()[i] = static_cast<T>(v);
  });
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    CPPGRAD_CHECK(args.size() >= 4 || (args.size() >= 2 && (args[1] == "names" || args[1] == "meta-of")),
                  "usage: edit_checkpoint IN OUT set|set1|remove|copy|add|rows|junk|meta NAME [VALUE] [N]");
    nn::SafetensorsContents file = nn::load_safetensors(args[0]);
    if (args[1] == "names") {
      for (const auto& entry : file.tensors) fmt::print("{}\n", entry.first);
      return 0;
    }
    if (args[1] == "meta-of") {
      CPPGRAD_CHECK(args.size() == 3 && file.metadata.count(args[2]), "no metadata key given, or none such in {}", args[0]);
      fmt::print("{}\n", file.metadata.at(args[2]));
      return 0;
    }
    if (args[1] == "differs") {  // two runs' checkpoints, entry by entry
      const nn::SafetensorsContents other = nn::load_safetensors(args[2]);
      double largest_difference = 0, largest_value = 0, squared_difference = 0, squared_value = 0;
      int64_t compared = 0;
      for (const auto& [key, t] : file.tensors) {
        if (!key.starts_with(args[3]) || !t.is_floating_point()) continue;
        CPPGRAD_CHECK(other.contains(key), "no entry '{}' in {}", excerpt(key), args[2]);
        const Tensor& theirs = other.at(key);
        CPPGRAD_CHECK(theirs.shape() == t.shape(), "'{}' is {} in {} and {} in {}", excerpt(key), shape_str(t.shape()),
                      args[0], shape_str(theirs.shape()), args[2]);
        const Tensor a = t.to(kFloat64), b = theirs.to(kFloat64);
        largest_difference = std::max(largest_difference, (a - b).abs().max().item());
        largest_value = std::max(largest_value, b.abs().max().item());
        squared_difference += (a - b).square().sum().item();
        squared_value += b.square().sum().item();
        ++compared;
      }
      CPPGRAD_CHECK(compared > 0, "no floating entry under '{}' in {}", excerpt(args[3]), args[0]);
      fmt::print("{:.6e} {:.6e} {:.6e}\n", std::sqrt(squared_difference / squared_value), largest_difference,
                 largest_value);
      return 0;
    }
    const std::string& op = args[2];
    const std::string& name = args[3];
    auto arg = [&](size_t i) -> const std::string& {
      CPPGRAD_CHECK(args.size() > i, "{} needs {} arguments", op, i - 2);
      return args[i];
    };
    NamedTensors out;
    if (op == "meta") {
      file.metadata[name] = arg(4);
      nn::save_safetensors(args[1], file.tensors, file.metadata);
      return 0;
    }
    if (op == "set" || op == "set1" || op == "remove" || op == "copy" || op == "rows") {
      CPPGRAD_CHECK(file.contains(name), "no entry '{}' in {}", excerpt(name), args[0]);
      for (const auto& [key, t] : file.tensors) {
        if (key != name) {
          out.emplace_back(key, t);
        } else if (op == "set" || op == "set1") {
          out.emplace_back(key, filled(t, arg(4), op == "set1"));
        } else if (op == "copy") {
          out.emplace_back(key, t);
          out.emplace_back(arg(4), t);
        } else if (op == "rows") {
          out.emplace_back(key, t);
          out.emplace_back(arg(4), stack(std::vector<Tensor>(static_cast<size_t>(std::stoll(arg(5))), t)));
        }  // remove: left out
      }
    } else if (op == "add") {
      out = file.tensors;
      out.emplace_back(name, scalar_tensor(number(arg(4)), kFloat64));
    } else if (op == "junk") {
      out = file.tensors;
      const int64_t n = std::stoll(arg(4));
      for (int64_t i = 0; i < n; ++i) out.emplace_back(name + std::to_string(i), scalar_tensor(1, kInt64));
    } else {
      throw Error(fmt::format("unknown edit '{}'", excerpt(op)));
    }
    nn::save_safetensors(args[1], out, file.metadata);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "edit_checkpoint: {}\n", e.what());
    return 2;
  }
}
