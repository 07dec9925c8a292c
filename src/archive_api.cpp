#include "overlay/archive_api.hpp"

#if !defined(OVERLAY_ARCHIVE_LINKED)
#include <dlfcn.h>
#endif

#include <mutex>
#include <string>

#include "overlay/error.hpp"

namespace overlay {
namespace {

#if defined(OVERLAY_ARCHIVE_LINKED)
// The static binary (OVERLAY_STATIC): libarchive is linked in, nothing is loaded.
ArchiveApi load() {
  ArchiveApi api;
#define OVERLAY_ARCHIVE_BIND(name) api.name = &::name;
  OVERLAY_ARCHIVE_FUNCTIONS(OVERLAY_ARCHIVE_BIND)
#undef OVERLAY_ARCHIVE_BIND
  return api;
}
#else
void* open_library() {
  // The runtime library this binary was configured against, then its usual soname.
  for (const char* name : {OVERLAY_LIBARCHIVE_PATH, "libarchive.so.13", "libarchive.so"})
    if (void* h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
  const char* why = ::dlerror();
  throw Error(std::string("cannot load libarchive (needed for tar snapshots): ") + (why ? why : "not found"));
}

ArchiveApi load() {
  void* lib = open_library();
  ArchiveApi api;
#define OVERLAY_ARCHIVE_BIND(name)                                      \
  api.name = reinterpret_cast<decltype(api.name)>(::dlsym(lib, #name)); \
  if (api.name == nullptr) throw Error("libarchive lacks " #name);
  OVERLAY_ARCHIVE_FUNCTIONS(OVERLAY_ARCHIVE_BIND)
#undef OVERLAY_ARCHIVE_BIND
  return api;
}
#endif

}  // namespace

const ArchiveApi& archive_api() {
  static std::once_flag once;
  static ArchiveApi api;
  std::call_once(once, [] { api = load(); });
  return api;
}

}  // namespace overlay
