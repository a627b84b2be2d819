// NVIDIA libraries gdsio never links (libcufile, libnvjpeg): opened at run time,
// their functions looked up by name. One copy for every shim.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace gdsio::dl {

struct Opened {
  void* lib = nullptr;  // null when none of the names opened
  std::string name;     // the one that did
  std::string errors;   // dlerror() of each that did not, "; "-joined
};

// The first of `names` that dlopen takes (local symbols, never unloaded: a
// library's threads may outlive a dlclose).
inline Opened open_first(const std::vector<std::string>& names) {
  Opened out;
  for (const auto& n : names) {
    out.lib = dlopen(n.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    if (out.lib) {
      out.name = n;
      return out;
    }
    const char* e = dlerror();
    out.errors += (out.errors.empty() ? "" : "; ") + std::string(e ? e : n.c_str());
  }
  return out;
}

// *out = the function `name` of `lib`; false when the library lacks it.
template <typename F>
bool sym(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace gdsio::dl
