// Plugins for `call`: shared libraries loaded once, whose own exports (and only those) are
// callable. Kept apart from ObjectHost.cpp because <link.h> and LLVM's ELF headers clash.
#include "executor/ObjectHost.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstring>
#include <dlfcn.h>
#include <link.h>

namespace courier::executor {

using llvm::ArrayRef;
using llvm::Expected;
using llvm::StringRef;

Expected<std::shared_ptr<PluginSet>> PluginSet::load(ArrayRef<std::string> paths) {
  auto set = std::make_shared<PluginSet>();
  for (const std::string &path : paths) {
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *reason = dlerror();
      for (void *opened : set->handles)
        dlclose(opened);
      return llvm::createStringError(
          llvm::formatv("loading plugin '{0}': {1}", path, reason ? reason : "unknown").str());
    }
    set->handles.push_back(handle);
  }
  // Plugins stay loaded for the life of the process: object hosts cache their symbols and
  // unloading code that another session may be running is never safe.
  return set;
}

void *PluginSet::lookup(StringRef symbol) const {
  std::string name = symbol.str();
  for (void *handle : handles) {
    void *address = dlsym(handle, name.c_str());
    if (!address)
      continue;
    // dlsym also searches the plugin's dependencies (libc among them): only what the plugin
    // itself defines is callable, or `call` would reach system() and abort().
    Dl_info info;
    struct link_map *map = nullptr;
    if (dladdr(address, &info) && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map &&
        info.dli_fname && map->l_name && std::strcmp(info.dli_fname, map->l_name) == 0)
      return address;
  }
  return nullptr;
}

} // namespace courier::executor
