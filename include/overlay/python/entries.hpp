#pragma once
// The Python entries of a manifest, one table for every reader: the kinds sitecustomize.py
// applies, the key it records each entry under in _stats/, and what status shows of it.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace overlay {

struct PyEntry {
  std::string kind;                     // module | installer | rebind | capture | marker | hook
  std::string key;                      // as sitecustomize.py records it: "module:M", "rebind:T->IM.IA", ...
  std::string name;                     // the module, target or installer id
  std::string detail;                   // the overlay file, the replacement, the capture output, the hook's callable
  std::optional<std::string> file;      // relative to the overlay: the file the entry needs
  bool count_calls = false;             // a rebind with --count-calls
  std::optional<std::string> patch_id;  // the `apply` patch it belongs to
  nlohmann::json distribution;          // what its target belonged to when added (an object), else null
};

// Every Python entry of `doc`, section by section in start-up order (modules, installers,
// rebinds, captures, markers, hooks); entries that are not objects are skipped.
std::vector<PyEntry> python_entries(const nlohmann::json& doc);

// Top-level sections holding entries this version does not apply (say, a newer tool's): named at
// start-up by sitecustomize.py and by status, never silently inert.
std::vector<std::string> unapplied_sections(const nlohmann::json& doc);

// The manifest arrays each kind of Python entry lives in, with the field that identifies an entry
// (an entry of the same identity is replaced by add-*, and is a conflict in merge).
struct PySection {
  const char* array;
  const char* identity;
};
const std::vector<PySection>& python_sections();

}  // namespace overlay
