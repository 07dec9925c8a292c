#include "overlay/python/entries.hpp"

#include <algorithm>

namespace overlay {
namespace {

using nlohmann::json;

std::string text(const json& e, const char* k, const char* fallback = "") {
  auto it = e.find(k);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
}

// The top-level keys that are not Python entry sections: native entries and the tool's own records.
const char* const kOwnKeys[] = {"natives",      "running_patched", "untracked_outputs", "litter",
                                "layers_above", "fold_out",        "folds_in"};

}  // namespace

const std::vector<PySection>& python_sections() {
  static const std::vector<PySection> s = {{"modules", "module"},  {"installers", "id"},  {"rebinds", "target"},
                                           {"captures", "target"}, {"markers", "target"}, {"hooks", "module"}};
  return s;
}

std::vector<PyEntry> python_entries(const json& doc) {
  std::vector<PyEntry> out;
  auto each = [&](const char* array, auto&& make) {
    auto it = doc.find(array);
    if (it == doc.end() || !it->is_array()) return;
    for (const auto& e : *it)
      if (e.is_object()) {
        out.push_back(make(e));
        if (std::string id = text(e, "patch_id"); !id.empty()) out.back().patch_id = id;
        if (auto d = e.find("distribution"); d != e.end() && d->is_object()) out.back().distribution = *d;
      }
  };
  each("modules", [](const json& e) {
    PyEntry p{"module", "module:" + text(e, "module"), text(e, "module"), text(e, "file"), text(e, "file"), false, {},
              {}};
    return p;
  });
  each("installers", [](const json& e) {
    std::string call = text(e, "module") + "." + text(e, "callable", "install");
    return PyEntry{"installer", "installer:" + text(e, "id"), text(e, "id"), call, std::nullopt, false, {}, {}};
  });
  each("rebinds", [](const json& e) {
    std::string impl = text(e, "impl_module") + "." + text(e, "impl_attr");
    auto cc = e.find("count_calls");
    bool counted = cc != e.end() && cc->is_boolean() && cc->get<bool>();
    return PyEntry{
        "rebind", "rebind:" + text(e, "target") + "->" + impl, text(e, "target"), impl, std::nullopt, counted, {}, {}};
  });
  each("captures", [](const json& e) {
    return PyEntry{
        "capture", "capture:" + text(e, "target"), text(e, "target"), text(e, "out"), std::nullopt, false, {}, {}};
  });
  each("markers", [](const json& e) {
    return PyEntry{
        "marker", "marker:" + text(e, "target"), text(e, "target"), "seam_trace.install", std::nullopt, false, {}, {}};
  });
  each("hooks", [](const json& e) {
    std::string impl = text(e, "impl_module") + "." + text(e, "impl_attr", "install");
    return PyEntry{"hook", "hook:" + text(e, "module") + "->" + impl, text(e, "module"), impl, std::nullopt, false, {},
                   {}};
  });
  return out;
}

std::vector<std::string> unapplied_sections(const json& doc) {
  std::vector<std::string> out;
  if (!doc.is_object()) return out;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& key = it.key();  // a structured binding cannot be captured before C++20's clang 16
    if (!it->is_array() || it->empty()) continue;
    bool known = std::any_of(python_sections().begin(), python_sections().end(),
                             [&](const PySection& s) { return key == s.array; }) ||
                 std::find(std::begin(kOwnKeys), std::end(kOwnKeys), key) != std::end(kOwnKeys);
    if (!known) out.push_back(key);
  }
  return out;
}

}  // namespace overlay
