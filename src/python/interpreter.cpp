#include "overlay/python/interpreter.hpp"

#include <cctype>
#include <cstdlib>
#include <sstream>

#include <spdlog/spdlog.h>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/process.hpp"

namespace overlay {

using json = nlohmann::json;

json ask_python(const std::string& python, const std::string& script, const std::string& arg, bool disable_overlays) {
  RunOptions o;
  o.output = Output::capture;
  if (disable_overlays) o.env_set.push_back("OVERLAY_DISABLE=1");
  // -B: finding a module imports its parent packages, and their bytecode must not be written into
  // the install (it is never touched: a __pycache__ in site-packages is a change on disk).
  RunResult r = run_process({python, "-B", "-c", script, arg}, o);
  if (!r.exec_error.empty()) throw Error("cannot run the Python interpreter: " + r.exec_error);
  std::istringstream lines(r.out);
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty()) last = line;
  if (!r.ok() || last.empty()) throw Error(python + " failed (" + describe(r) + "): " + r.err.substr(0, 300));
  try {
    return json::parse(last);
  } catch (const json::exception&) {
    throw Error(python + " printed something unexpected: " + last);
  }
}

std::string default_python() {
  const char* env = std::getenv("OVERLAY_PYTHON");
  return env && *env ? env : "python3";
}

namespace {

// `-c` puts the caller's directory first on sys.path; upstream's script finds modules from its own
// directory instead, so an M.py where the caller stands is never the module M (issue 62).
const char* kFindSpecScript = R"PY(
import importlib.util, json, sys
name = sys.argv[1]
if sys.path and sys.path[0] == "":
    del sys.path[0]
try:
    m = sys.modules.get(name)
    if m is not None and getattr(m, "__file__", None):
        print(json.dumps({"origin": m.__file__}))
    else:
        s = importlib.util.find_spec(name)
        print(json.dumps({"origin": s.origin if s is not None else None, "found": s is not None}))
except Exception as e:
    print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}))
)PY";

// The top-level package's .dist-info, found without importing anything: the package is looked up
// by the path finder alone, and the .dist-info directories beside it are read, the one named as
// the package first, then those whose top_level.txt may list it (never every RECORD of a large
// site-packages: only the named one's, where it has no top_level.txt).
const char* kDistributionScript = R"PY(
import json, os, sys
from importlib.machinery import PathFinder
top = sys.argv[1].split(":", 1)[0].split(".", 1)[0]
if sys.path and sys.path[0] == "":
    del sys.path[0]


def norm(s):
    return s.lower().replace("-", "_").replace(".", "_")


def provides(info):
    try:
        with open(os.path.join(info, "top_level.txt")) as f:
            return top in f.read().split()
    except OSError:
        pass
    try:
        with open(os.path.join(info, "RECORD"), encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split(",", 1)[0]
                if path.startswith(top + "/") or ("/" not in path and path.split(".", 1)[0] == top):
                    return True
    except OSError:
        pass
    return False


def metadata(info):
    meta = {}
    with open(os.path.join(info, "METADATA"), encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                break
            k, _, v = line.partition(":")
            meta.setdefault(k, v.strip())
    return meta


found = None
spec = PathFinder.find_spec(top)
# A namespace package (no origin) is many distributions' (google.protobuf, google.api_core): none is its.
if spec is not None and spec.origin not in (None, "namespace"):
    locations = list(spec.submodule_search_locations or [])
    where = locations[0] if locations else spec.origin
    if isinstance(where, str) and os.path.isabs(where):
        base = os.path.dirname(where)
        try:
            infos = sorted(n for n in os.listdir(base) if n.endswith(".dist-info"))
        except OSError:
            infos = []
        named = [n for n in infos if norm(n[: -len(".dist-info")].split("-", 1)[0]) == norm(top)]
        listed = [n for n in infos if n not in named and os.path.isfile(os.path.join(base, n, "top_level.txt"))]
        for n in named + listed:
            info = os.path.join(base, n)
            if provides(info):
                m = metadata(info)
                if m.get("Name") and m.get("Version"):
                    found = {"name": m["Name"], "version": m["Version"], "dist_info": info}
                break
print(json.dumps(found))
)PY";

// A distribution's name as its .dist-info directory spells it, for comparing (PEP 503, loosely).
std::string normalized(std::string s) {
  for (char& c : s) c = c == '-' || c == '.' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The Version field of a .dist-info's METADATA; "" where it has none or cannot be read.
std::string metadata_version(DiskReader& disk, const fs::path& info) {
  std::string text;
  try {
    text = read_small_file(disk, info / "METADATA", 1 << 20);
  } catch (const std::exception& e) {
    spdlog::debug("cannot read {}: {}", (info / "METADATA").string(), e.what());
    return "";
  }
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line) && !line.empty() && line != "\r";)
    if (line.rfind("Version:", 0) == 0) {
      std::string v = line.substr(8);
      v.erase(0, v.find_first_not_of(" \t"));
      v.erase(v.find_last_not_of(" \t\r") + 1);
      return v;
    }
  return "";
}

}  // namespace

std::string find_module_origin(const std::string& module, const std::string& python, bool disable_overlays) {
  json j = ask_python(python, kFindSpecScript, module, disable_overlays);
  if (j.contains("error"))
    throw Error("module " + module + " cannot be located by " + python + ": " + j["error"].get<std::string>());
  if (!j.contains("origin") || !j["origin"].is_string())
    throw Error("module " + module + " not found by " + python +
                " (PYTHONPATH=" + (std::getenv("PYTHONPATH") ? std::getenv("PYTHONPATH") : "") + ")");
  return j["origin"].get<std::string>();
}

void to_json(json& j, const Distribution& d) {
  j = {{"name", d.name}, {"version", d.version}, {"dist_info", d.dist_info}};
}

void from_json(const json& j, Distribution& d) {
  d.name = j.at("name").get<std::string>();
  d.version = j.at("version").get<std::string>();
  d.dist_info = j.at("dist_info").get<std::string>();
}

std::optional<Distribution> distribution_of(const std::string& module, const std::string& python) {
  try {
    json j = ask_python(python, kDistributionScript, module, true);
    if (j.is_null()) return std::nullopt;
    return j.get<Distribution>();
  } catch (const std::exception& e) {  // best effort: the entry is recorded without it
    spdlog::debug("the distribution of {} is not known: {}", module, e.what());
    return std::nullopt;
  }
}

std::optional<std::string> installed_instead(DiskReader& disk, const Distribution& d) {
  fs::path info(d.dist_info);
  if (disk.info(info, Follow::yes).type == FileType::directory) return std::nullopt;
  std::vector<DirEntry> entries;
  try {
    entries = disk.list_dir(info.parent_path());
  } catch (const std::exception& e) {
    spdlog::debug("cannot list {}: {}", info.parent_path().string(), e.what());
    return "";
  }
  const std::string suffix = ".dist-info", want = normalized(d.name);
  for (const auto& e : entries) {
    if (e.name.size() <= suffix.size() || e.name.compare(e.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    std::string stem = e.name.substr(0, e.name.size() - suffix.size());
    if (normalized(stem.substr(0, stem.find('-'))) == want) return metadata_version(disk, info.parent_path() / e.name);
  }
  return "";
}

}  // namespace overlay
